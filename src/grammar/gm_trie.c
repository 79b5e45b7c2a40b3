/* Literal alternatives as a trie: shared prefixes merged, so the compiled automaton is
 * deterministic over them and the matcher follows one stack however many strings there are
 * (an alternation of 4,097 strings with a common first byte made 4,097 stacks after it, past the
 * matcher's cap). Called by the choice compiler, JSON Schema enums and object keys (gm_schema.c),
 * and gb_alt for any alternation with many literal branches (GBNF, regex).
 *
 * The trie is built from the strings in sorted order (each new string only extends the path of
 * the previous one, so insertion is linear in the bytes), then turned into expressions bottom-up
 * (a child is always created after its parent, so decreasing node order sees children first).
 * Chains of single-child nodes become one flat sequence, and every TRIE_WRAP levels of branching
 * the subtree becomes a rule of its own: the expression nesting, which the NFA builder and the
 * size estimate walk recursively, stays bounded whatever the strings. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_int.h"

enum { TRIE_WRAP = 48 }; /* nesting levels before a subtree is wrapped in a rule */

typedef struct tstr {
    const uint8_t *s;
    size_t len;
    int tail; /* expression after the string, -1 = nothing */
} tstr;

typedef struct tnode {
    int child, last, sib; /* first / last child, next sibling (children in byte order) */
    int end;              /* first entry of this node's end list (ends[]), -1 = none */
    int expr, height;     /* for stops: the subtree's expression and its nesting height */
    uint8_t byte;
    bool bare; /* a stop that only ends a string: its parent's sequence needs no expression */
} tnode;

static int cmp_tstr(const void *a, const void *b) {
    const tstr *x = a, *y = b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = n ? memcmp(x->s, y->s, n) : 0;
    if (c) return c;
    return x->len < y->len ? -1 : x->len > y->len;
}

static bool is_stop(const tnode *t) {
    return t->end >= 0 || t->child < 0 || t->child != t->last;
}

int gb_trie(gm_builder *b, const char *const *s, const size_t *len, const int *tail, int n) {
    if (b->failed) return -1;
    if (n <= 0) return gb_fail(b);
    size_t maxlen = 0, cap_t = 256;
    for (int i = 0; i < n; i++) maxlen = len[i] > maxlen ? len[i] : maxlen;
    tstr *v = malloc((size_t)n * sizeof(tstr));
    tnode *t = malloc(cap_t * sizeof(tnode)); /* grows: shared prefixes make far fewer nodes */
    int *ends = malloc((size_t)n * 2 * sizeof(int)); /* pairs (tail, next) */
    int *path = malloc((maxlen + 1) * sizeof(int));
    int cap_xs = 264, *xs = malloc((size_t)cap_xs * sizeof(int));
    int *bytes_x = NULL;
    int r = -1;
    if (!v || !t || !ends || !path || !xs) {
        gb_error(b, CLLM_ENOMEM, "out of memory building the grammar");
        goto out;
    }
    for (int i = 0; i < n; i++) v[i] = (tstr){(const uint8_t *)s[i], len[i], tail ? tail[i] : -1};
    qsort(v, (size_t)n, sizeof(tstr), cmp_tstr);
    int nn = 1, ne = 0;
    t[0] = (tnode){-1, -1, -1, -1, -1, 0, 0, false};
    path[0] = 0;
    size_t plen = 0; /* the previous string's length (path[0 .. plen] valid) */
    for (int i = 0; i < n; i++) {
        size_t k = 0;
        if (i) {
            size_t m = v[i].len < v[i - 1].len ? v[i].len : v[i - 1].len;
            while (k < m && v[i].s[k] == v[i - 1].s[k]) k++;
            if (k > plen) k = plen;
        }
        if ((size_t)nn + (v[i].len - k) > cap_t) {
            while ((size_t)nn + (v[i].len - k) > cap_t) cap_t *= 2;
            tnode *nt = cap_t < (size_t)INT32_MAX ? realloc(t, cap_t * sizeof(tnode)) : NULL;
            if (!nt) {
                gb_error(b, CLLM_ENOMEM, "out of memory building the grammar");
                goto out;
            }
            t = nt;
        }
        for (size_t d = k; d < v[i].len; d++) {
            int p = path[d], c = nn++;
            t[c] = (tnode){-1, -1, -1, -1, -1, 0, v[i].s[d], false};
            if (t[p].last >= 0)
                t[t[p].last].sib = c;
            else
                t[p].child = c;
            t[p].last = c;
            path[d + 1] = c;
        }
        plen = v[i].len;
        int e = path[v[i].len];
        ends[2 * ne] = v[i].tail;
        ends[2 * ne + 1] = t[e].end;
        t[e].end = ne++;
    }
    size_t maxchain = 0;
    for (int i = nn - 1; i >= 0 && !b->failed; i--) {
        if (i && !is_stop(&t[i])) continue;
        int na = 0, h = 0;
        bool empty = false;
        for (int e = t[i].end; e >= 0; e = ends[2 * e + 1]) {
            if (ends[2 * e] < 0) {
                if (empty) continue; /* a duplicate string adds nothing */
                empty = true;
            }
            if (na + 1 > cap_xs) {
                cap_xs *= 2;
                int *nx = realloc(xs, (size_t)cap_xs * sizeof(int));
                if (!nx) {
                    gb_error(b, CLLM_ENOMEM, "out of memory building the grammar");
                    goto out;
                }
                xs = nx;
            }
            xs[na++] = ends[2 * e] < 0 ? gb_empty(b) : ends[2 * e];
        }
        for (int c = t[i].child; c >= 0; c = t[c].sib) {
            /* the chain of single-child nodes from c down to the next stop z */
            size_t cl = 1;
            int z = c;
            while (!is_stop(&t[z])) z = t[z].child, cl++;
            if (cl + 1 > maxchain) {
                size_t nc = cl + 1 > 2 * maxchain ? cl + 1 : 2 * maxchain;
                int *nb = realloc(bytes_x, nc * sizeof(int));
                if (!nb) {
                    gb_error(b, CLLM_ENOMEM, "out of memory building the grammar");
                    goto out;
                }
                bytes_x = nb;
                maxchain = nc;
            }
            size_t k = 0;
            for (int y = c;; y = t[y].child) {
                bytes_x[k++] = gb_range(b, t[y].byte, t[y].byte);
                if (y == z) break;
            }
            if (!t[z].bare) bytes_x[k++] = t[z].expr;
            if (na + 1 > cap_xs) {
                cap_xs *= 2;
                int *nx = realloc(xs, (size_t)cap_xs * sizeof(int));
                if (!nx) {
                    gb_error(b, CLLM_ENOMEM, "out of memory building the grammar");
                    goto out;
                }
                xs = nx;
            }
            xs[na++] = gb_seq(b, bytes_x, (int)k);
            if (t[z].height + 1 > h) h = t[z].height + 1;
        }
        b->trie_depth++;
        int x = gb_alt(b, xs, na);
        b->trie_depth--;
        if (h >= TRIE_WRAP && i) {
            int rule = gb_rule(b, NULL);
            gb_rule_set(b, rule, x);
            x = gb_ref(b, rule);
            h = 0;
        }
        t[i].expr = x;
        t[i].height = h;
        t[i].bare = empty && na == 1; /* the end of one string, nothing after it */
    }
    r = b->failed ? -1 : t[0].expr;
out:
    free(v);
    free(t);
    free(ends);
    free(path);
    free(xs);
    free(bytes_x);
    return r;
}

/* The bytes of x when it is a literal (empty, one byte, or a sequence of single bytes). */
static bool lit_bytes(const gm_builder *b, int x, uint8_t *buf, size_t cap, size_t *n) {
    const gx *e = &b->x[x];
    if (e->kind == GX_EMPTY) return *n = 0, true;
    if (e->kind == GX_RANGE && e->lo == e->hi && cap >= 1) return buf[0] = e->lo, *n = 1, true;
    if (e->kind != GX_SEQ || (size_t)e->nk > cap) return false;
    for (int i = 0; i < e->nk; i++) {
        const gx *k = &b->x[b->kids[e->k0 + i]];
        if (k->kind != GX_RANGE || k->lo != k->hi) return false;
        buf[i] = k->lo;
    }
    *n = (size_t)e->nk;
    return true;
}

enum { LIT_MAX = 4096 }; /* longest literal branch gb_alt merges (longer ones stay as they are) */

int gb_alt_trie(gm_builder *b, const int *xs, int n) {
    uint8_t *buf = malloc(LIT_MAX);
    int *lit = malloc((size_t)n * sizeof(int)), *other = malloc((size_t)n * sizeof(int));
    size_t *lens = malloc((size_t)n * sizeof(size_t));
    char **strs = malloc((size_t)n * sizeof(char *));
    int nl = 0, no = 0, r = -1;
    long refund = 0;
    for (int i = 0; i < n; i++)
        if (xs[i] < 0) goto out;
    if (!buf || !lit || !other || !lens || !strs) {
        gb_error(b, CLLM_ENOMEM, "out of memory building the grammar");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        size_t k;
        if (lit_bytes(b, xs[i], buf, LIT_MAX, &k)) {
            strs[nl] = malloc(k ? k : 1);
            if (!strs[nl]) {
                gb_error(b, CLLM_ENOMEM, "out of memory building the grammar");
                goto out;
            }
            memcpy(strs[nl], buf, k);
            lens[nl] = k;
            lit[nl++] = xs[i];
            refund += (long)k + 1;
        } else {
            other[no++] = xs[i];
        }
    }
    if (nl < 2) {
        b->trie_depth++;
        r = gb_alt(b, xs, n);
        b->trie_depth--;
        goto out;
    }
    b->budget += refund; /* the branches' own nodes are replaced by the trie's */
    other[no++] = gb_trie(b, (const char *const *)strs, lens, NULL, nl);
    b->trie_depth++;
    r = gb_alt(b, other, no);
    b->trie_depth--;
out:
    for (int i = 0; strs && i < nl; i++) free(strs[i]);
    free(buf), free(lit), free(other), free(lens), free(strs);
    return r;
}
