/* Expression builder shared by every grammar front end (gm_int.h), and code point sets turned
 * into UTF-8 byte-range sequences. Errors are sticky: after the first one every call returns -1,
 * so front ends check once at the end. Sizes are capped (opts.max_nodes): each expression carries
 * an estimate of the NFA nodes it expands to, checked as it is built. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_int.h"

void gb_init(gm_builder *b, const cllm_gm_opts *o, cllm_error *err) {
    memset(b, 0, sizeof(*b));
    if (o) b->o = *o;
    if (b->o.max_schema_depth <= 0) b->o.max_schema_depth = 64;
    if (b->o.max_schema_nodes <= 0) b->o.max_schema_nodes = 20000;
    if (b->o.max_nodes <= 0) b->o.max_nodes = 1000000;
    if (b->o.max_source <= 0) b->o.max_source = 1 << 20;
    b->err = err;
    b->budget = b->o.max_nodes;
}

void gb_free(gm_builder *b) {
    free(b->x);
    free(b->kids);
    for (int i = 0; i < b->n_rules; i++) free(b->rule_name[i]);
    free(b->rule_name);
    free(b->rule_body);
    memset(b, 0, sizeof(*b));
}

bool gb_error(gm_builder *b, cllm_status code, const char *fmt, ...) {
    if (b->failed) return false;
    b->failed = true;
    if (b->err) {
        va_list ap;
        va_start(ap, fmt);
        b->err->code = code;
        vsnprintf(b->err->msg, sizeof(b->err->msg), fmt, ap);
        va_end(ap);
    }
    return false;
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

static int add(gm_builder *b, gx x, long cost) {
    if (b->failed) return -1;
    b->budget -= cost;
    if (b->budget < 0) {
        gb_error(b, CLLM_ERANGE, "grammar too large (over %d automaton nodes)", b->o.max_nodes);
        return -1;
    }
    if (grow((void **)&b->x, &b->cap_x, b->n_x + 1, sizeof(gx))) {
        gb_error(b, CLLM_ENOMEM, "out of memory building the grammar");
        return -1;
    }
    b->x[b->n_x] = x;
    return b->n_x++;
}

static int add_kids(gm_builder *b, gx_kind k, const int *xs, int n) {
    if (b->failed) return -1;
    for (int i = 0; i < n; i++)
        if (xs[i] < 0) return -1;
    if (grow((void **)&b->kids, &b->cap_kids, b->n_kids + n, sizeof(int))) {
        gb_error(b, CLLM_ENOMEM, "out of memory building the grammar");
        return -1;
    }
    gx x = {.kind = (uint8_t)k, .k0 = b->n_kids, .nk = n};
    memcpy(b->kids + b->n_kids, xs, (size_t)n * sizeof(int));
    b->n_kids += n;
    return add(b, x, 1);
}

int gb_empty(gm_builder *b) {
    return add(b, (gx){.kind = GX_EMPTY}, 1);
}

int gb_fail(gm_builder *b) {
    return add(b, (gx){.kind = GX_FAIL}, 1);
}

int gb_range(gm_builder *b, int lo, int hi) {
    if (lo > hi) return gb_fail(b);
    return add(b, (gx){.kind = GX_RANGE, .lo = (uint8_t)lo, .hi = (uint8_t)hi}, 1);
}

bool gb_push(gm_builder *b, int **xs, int *n, int *cap, int x) {
    if (*n == *cap) {
        int *t = realloc(*xs, (size_t)*cap * 2 * sizeof(int));
        if (!t) {
            free(*xs);
            *xs = NULL;
            gb_error(b, CLLM_ENOMEM, "out of memory");
            return false;
        }
        *xs = t;
        *cap *= 2;
    }
    (*xs)[(*n)++] = x;
    return true;
}

int gb_seq(gm_builder *b, const int *xs, int n) {
    if (n == 0) return gb_empty(b);
    if (n == 1) return xs[0];
    return add_kids(b, GX_SEQ, xs, n);
}

int gb_seq2(gm_builder *b, int x, int y) {
    int xs[2] = {x, y};
    return gb_seq(b, xs, 2);
}

int gb_seq3(gm_builder *b, int x, int y, int z) {
    int xs[3] = {x, y, z};
    return gb_seq(b, xs, 3);
}

int gb_alt(gm_builder *b, const int *xs, int n) {
    if (n == 0) return gb_fail(b);
    if (n == 1) return xs[0];
    if (n >= GB_ALT_TRIE && !b->trie_depth && !b->failed) return gb_alt_trie(b, xs, n);
    return add_kids(b, GX_ALT, xs, n);
}

int gb_alt2(gm_builder *b, int x, int y) {
    int xs[2] = {x, y};
    return gb_alt(b, xs, 2);
}

/* Expanded size of an expression in NFA nodes (capped sum), for the repetition budget. */
static long size_of(gm_builder *b, int x) {
    const gx *e = &b->x[x];
    long s = 1;
    if (e->kind == GX_SEQ || e->kind == GX_ALT)
        for (int i = 0; i < e->nk && s < (1L << 40); i++) s += size_of(b, b->kids[e->k0 + i]);
    if (e->kind == GX_REP) {
        long m = e->max < 0 ? e->min + 1 : e->max;
        s += size_of(b, b->kids[e->k0]) * (m ? m : 1);
    }
    return s;
}

int gb_rep(gm_builder *b, int x, int min, int max) {
    if (x < 0 || b->failed) return -1;
    if (min < 0 || (max >= 0 && max < min))
        return gb_error(b, CLLM_EINVAL, "bad repetition {%d,%d}", min, max), -1;
    if (max == 0) return gb_empty(b);
    if (min == 1 && max == 1) return x;
    long m = max < 0 ? min + 1 : max;
    long cost = size_of(b, x) * (m > 1 ? m - 1 : 0);
    int k[1] = {x};
    int r = add_kids(b, GX_REP, k, 1);
    if (r < 0) return -1;
    b->x[r].min = min;
    b->x[r].max = max;
    b->budget -= cost;
    if (b->budget < 0) {
        gb_error(b, CLLM_ERANGE, "grammar too large: repetition {%d,%d} over %d automaton nodes",
                 min, max, b->o.max_nodes);
        return -1;
    }
    return r;
}

int gb_opt(gm_builder *b, int x) {
    return gb_rep(b, x, 0, 1);
}

int gb_ref(gm_builder *b, int rule) {
    return add(b, (gx){.kind = GX_REF, .rule = rule}, 1);
}

int gb_lit(gm_builder *b, const char *s, size_t n) {
    if (b->failed) return -1;
    if (n == 0) return gb_empty(b);
    int *xs = malloc(n * sizeof(int));
    if (!xs) return gb_error(b, CLLM_ENOMEM, "out of memory"), -1;
    for (size_t i = 0; i < n; i++) xs[i] = gb_range(b, (unsigned char)s[i], (unsigned char)s[i]);
    int r = gb_seq(b, xs, (int)n);
    free(xs);
    return r;
}

int gb_lits(gm_builder *b, const char *s) {
    return gb_lit(b, s, strlen(s));
}

int gb_rule(gm_builder *b, const char *name) {
    if (b->failed) return -1;
    if (grow((void **)&b->rule_name, &b->cap_rules, b->n_rules + 1, sizeof(char *))) {
        gb_error(b, CLLM_ENOMEM, "out of memory");
        return -1;
    }
    int cap = b->cap_rules;
    int *nb = realloc(b->rule_body, (size_t)cap * sizeof(int));
    if (!nb) return gb_error(b, CLLM_ENOMEM, "out of memory"), -1;
    b->rule_body = nb;
    b->rule_name[b->n_rules] = name ? strdup(name) : NULL;
    b->rule_body[b->n_rules] = -1;
    return b->n_rules++;
}

void gb_rule_set(gm_builder *b, int rule, int x) {
    if (rule >= 0 && rule < b->n_rules) b->rule_body[rule] = x;
}

int gb_rule_find(const gm_builder *b, const char *name) {
    for (int i = 0; i < b->n_rules; i++)
        if (b->rule_name[i] && !strcmp(b->rule_name[i], name)) return i;
    return -1;
}

/* ---- code point sets ---- */

void cps_add(gm_cpset *s, uint32_t lo, uint32_t hi) {
    if (lo > hi) return;
    if (grow((void **)&s->r, &s->cap, 2 * (s->n + 1), sizeof(uint32_t))) return;
    s->r[2 * s->n] = lo;
    s->r[2 * s->n + 1] = hi;
    s->n++;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *p = a, *q = b;
    return p[0] < q[0] ? -1 : p[0] > q[0];
}

void cps_norm(gm_cpset *s) {
    if (s->n < 2) return;
    qsort(s->r, (size_t)s->n, 2 * sizeof(uint32_t), cmp_range);
    int k = 0;
    for (int i = 1; i < s->n; i++) {
        if (s->r[2 * i] <= s->r[2 * k + 1] + 1) {
            if (s->r[2 * i + 1] > s->r[2 * k + 1]) s->r[2 * k + 1] = s->r[2 * i + 1];
        } else {
            k++;
            s->r[2 * k] = s->r[2 * i];
            s->r[2 * k + 1] = s->r[2 * i + 1];
        }
    }
    s->n = k + 1;
}

void cps_negate(gm_cpset *s) {
    cps_norm(s);
    gm_cpset o = {0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[2 * i] > next) cps_add(&o, next, s->r[2 * i] - 1);
        next = s->r[2 * i + 1] + 1;
    }
    if (next <= 0x10FFFF) cps_add(&o, next, 0x10FFFF);
    cps_free(s);
    *s = o;
}

void cps_sub(gm_cpset *s, uint32_t lo, uint32_t hi) {
    gm_cpset o = {0};
    for (int i = 0; i < s->n; i++) {
        uint32_t a = s->r[2 * i], z = s->r[2 * i + 1];
        if (z < lo || a > hi) {
            cps_add(&o, a, z);
            continue;
        }
        if (a < lo) cps_add(&o, a, lo - 1);
        if (z > hi) cps_add(&o, hi + 1, z);
    }
    cps_free(s);
    *s = o;
}

void cps_free(gm_cpset *s) {
    free(s->r);
    memset(s, 0, sizeof(*s));
}

static int utf8_enc(uint32_t c, uint8_t *o) {
    if (c < 0x80) return o[0] = (uint8_t)c, 1;
    if (c < 0x800) return o[0] = (uint8_t)(0xC0 | c >> 6), o[1] = (uint8_t)(0x80 | (c & 63)), 2;
    if (c < 0x10000) {
        o[0] = (uint8_t)(0xE0 | c >> 12);
        o[1] = (uint8_t)(0x80 | ((c >> 6) & 63));
        o[2] = (uint8_t)(0x80 | (c & 63));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | c >> 18);
    o[1] = (uint8_t)(0x80 | ((c >> 12) & 63));
    o[2] = (uint8_t)(0x80 | ((c >> 6) & 63));
    o[3] = (uint8_t)(0x80 | (c & 63));
    return 4;
}

/* [lo, hi] with one encoded length -> alternatives of byte-range sequences (the classic split:
 * cut where the continuation bytes stop spanning their full 80..BF range). */
static void utf8_split(gm_builder *b, uint32_t lo, uint32_t hi, int *alts, int *n_alts) {
    uint8_t a[4], z[4];
    int la = utf8_enc(lo, a);
    for (int i = 1; i < la; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                utf8_split(b, lo, lo | m, alts, n_alts);
                utf8_split(b, (lo | m) + 1, hi, alts, n_alts);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(b, lo, (hi & ~m) - 1, alts, n_alts);
                utf8_split(b, hi & ~m, hi, alts, n_alts);
                return;
            }
        }
    }
    utf8_enc(hi, z);
    int xs[4];
    for (int i = 0; i < la; i++) xs[i] = gb_range(b, a[i], z[i]);
    alts[(*n_alts)++] = gb_seq(b, xs, la);
}

int gb_cps(gm_builder *b, const uint32_t *r, int n) {
    if (b->failed) return -1;
    static const uint32_t bounds[][2] = {
        {0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
    int cap = 64, na = 0;
    int *alts = malloc((size_t)cap * sizeof(int));
    if (!alts) return gb_error(b, CLLM_ENOMEM, "out of memory"), -1;
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 5; k++) {
            uint32_t lo = r[2 * i] > bounds[k][0] ? r[2 * i] : bounds[k][0];
            uint32_t hi = r[2 * i + 1] < bounds[k][1] ? r[2 * i + 1] : bounds[k][1];
            if (lo > hi) continue;
            if (na + 16 > cap) {
                cap *= 2;
                int *t = realloc(alts, (size_t)cap * sizeof(int));
                if (!t) {
                    free(alts);
                    return gb_error(b, CLLM_ENOMEM, "out of memory"), -1;
                }
                alts = t;
            }
            utf8_split(b, lo, hi, alts, &na);
        }
    }
    int x = gb_alt(b, alts, na);
    free(alts);
    return x;
}
