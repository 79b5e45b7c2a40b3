/* Bounded JSON Schema numbers (issue 32, item 9): for many random bounds (minimum / maximum /
 * exclusive*, one- and two-sided, negative, fractional, equal), random decimal strings are
 * accepted by the grammar exactly when an exact decimal comparison (digit strings, no floating
 * point) puts them in range, and random walks through the grammar only produce numbers in range.
 * The named cases of the issue (probability (0, 1), (0.5, 1), (1, 2), (-1, 0), [0.1, 0.2]) must
 * compile and reach their interior. Strings checked are in the form the grammar promises to
 * cover: integer part without leading zeros, up to 6 fraction digits (bounds have at most 3
 * here), no exponent, zero without a sign. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "test.h"

/* A decimal as sign, integer digits (no leading zeros, "0" for zero) and fraction digits padded
 * to FW: comparison is then a comparison of strings. */
enum { FW = 12 };
typedef struct num {
    int neg; /* 1 for values < 0 (a "-0.000" is zero, not negative) */
    char ip[24];
    char fp[FW + 1];
} num;

static bool parse(const char *s, num *x) {
    memset(x, 0, sizeof(*x));
    const char *p = s;
    bool minus = *p == '-';
    if (minus) p++;
    size_t n = 0;
    while (p[n] >= '0' && p[n] <= '9') n++;
    if (!n || n >= sizeof(x->ip)) return false;
    memcpy(x->ip, p, n);
    p += n;
    memset(x->fp, '0', FW);
    if (*p == '.') {
        p++;
        size_t k = 0;
        while (p[k] >= '0' && p[k] <= '9') k++;
        if (!k || k > FW) return false;
        memcpy(x->fp, p, k);
        p += k;
    }
    if (*p) return false;
    /* strip leading zeros of the integer part for comparison */
    size_t z = 0;
    while (x->ip[z] == '0' && x->ip[z + 1]) z++;
    memmove(x->ip, x->ip + z, strlen(x->ip + z) + 1);
    bool zero = !strcmp(x->ip, "0") && strspn(x->fp, "0") == FW;
    x->neg = minus && !zero;
    return true;
}

static int cmp_mag(const num *a, const num *b) {
    size_t la = strlen(a->ip), lb = strlen(b->ip);
    if (la != lb) return la < lb ? -1 : 1;
    int c = strcmp(a->ip, b->ip);
    if (c) return c < 0 ? -1 : 1;
    c = strcmp(a->fp, b->fp);
    return c < 0 ? -1 : c > 0;
}

static int cmp(const num *a, const num *b) {
    if (a->neg != b->neg) return a->neg ? -1 : 1;
    int c = cmp_mag(a, b);
    return a->neg ? -c : c;
}

typedef struct bounds {
    bool has_lo, has_hi, lo_x, hi_x;
    char lo[32], hi[32];
    num L, H;
} bounds;

static bool in_range(const bounds *r, const num *x) {
    if (r->has_lo) {
        int c = cmp(x, &r->L);
        if (c < 0 || (c == 0 && r->lo_x)) return false;
    }
    if (r->has_hi) {
        int c = cmp(x, &r->H);
        if (c > 0 || (c == 0 && r->hi_x)) return false;
    }
    return true;
}

static void rand_dec(char *out, size_t cap, int max_int, int max_frac, bool allow_neg) {
    int ip = test_irand(max_int + 1);
    int nf = test_irand(max_frac + 1);
    size_t n = (size_t)snprintf(out, cap, "%s%d", allow_neg && test_irand(2) ? "-" : "", ip);
    if (nf) {
        out[n++] = '.';
        for (int i = 0; i < nf; i++) out[n++] = (char)('0' + test_irand(10));
        out[n] = 0;
    }
}

static cllm_gm *compile(const bounds *r, char *schema, size_t cap) {
    size_t n = (size_t)snprintf(schema, cap, "{\"type\":\"number\"");
    if (r->has_lo)
        n += (size_t)snprintf(schema + n, cap - n, ",\"%s\":%s",
                              r->lo_x ? "exclusiveMinimum" : "minimum", r->lo);
    if (r->has_hi)
        n += (size_t)snprintf(schema + n, cap - n, ",\"%s\":%s",
                              r->hi_x ? "exclusiveMaximum" : "maximum", r->hi);
    snprintf(schema + n, cap - n, "}");
    cllm_gm *g = NULL;
    cllm_error e = {0};
    cllm_status st = cllm_gm_from_json_schema(schema, strlen(schema), NULL, &g, &e);
    if (st != CLLM_OK) g = NULL;
    return g;
}

static bool accepts(cllm_gm *g, const char *s) {
    cllm_gm_matcher *m = cllm_gm_matcher_new(g, NULL);
    bool ok = cllm_gm_matcher_accept_bytes(m, s, strlen(s)) && cllm_gm_matcher_is_accepting(m);
    cllm_gm_matcher_free(m);
    return ok;
}

/* A random string the grammar allows: one allowed byte after another (found by trying each
 * byte), ending when accepting one time in four. NULL when the walk got stuck (a bug). */
static bool walk(cllm_gm *g, char *out, size_t cap) {
    cllm_gm_matcher *m = cllm_gm_matcher_new(g, NULL);
    size_t n = 0;
    bool ok = false;
    while (n + 1 < cap) {
        if (cllm_gm_matcher_is_accepting(m) && (test_irand(4) == 0 || cllm_gm_matcher_is_done(m))) {
            ok = true;
            break;
        }
        char next[256];
        int k = 0;
        for (int c = 1; c < 256; c++) {
            char ch = (char)c;
            if (cllm_gm_matcher_can_accept_bytes(m, &ch, 1)) next[k++] = ch;
        }
        if (!k) break;
        out[n] = next[test_irand(k)];
        cllm_gm_matcher_accept_bytes(m, &out[n], 1);
        n++;
    }
    out[n] = 0;
    cllm_gm_matcher_free(m);
    return ok;
}

static bool satisfiable(const bounds *r) {
    if (!r->has_lo || !r->has_hi) return true;
    int c = cmp(&r->L, &r->H);
    return c < 0 || (c == 0 && !r->lo_x && !r->hi_x);
}

static void check_bounds(bounds *r, int n_strings, int n_walks) {
    if (r->has_lo) parse(r->lo, &r->L);
    if (r->has_hi) parse(r->hi, &r->H);
    char schema[256];
    cllm_gm *g = compile(r, schema, sizeof(schema));
    /* satisfiable ranges compile (all contain some decimal of <= 6 fraction digits: the bounds
     * have at most 3) */
    CHECK_MSG(!satisfiable(r) || g, "satisfiable %s refused", schema);
    if (!g) return;
    CHECK_MSG(satisfiable(r), "unsatisfiable %s compiled", schema);
    for (int i = 0; i < n_strings; i++) {
        char s[48];
        rand_dec(s, sizeof(s), i & 1 ? 30 : 3, 6, true);
        num x;
        if (!parse(s, &x)) continue;
        bool want = in_range(r, &x), got = accepts(g, s);
        /* "-0", "-0.00": zero is written without a sign (never required, never out of range) */
        if (s[0] == '-' && !x.neg) want = false;
        CHECK_MSG(want == got, "%s: '%s' %s", schema, s, got ? "accepted" : "refused");
    }
    /* the bounds themselves and their neighbours at the last digit */
    const char *edges[] = {r->has_lo ? r->lo : "0", r->has_hi ? r->hi : "0"};
    for (int k = 0; k < 2; k++) {
        num x;
        if (!parse(edges[k], &x)) continue;
        bool want = in_range(r, &x) && !(edges[k][0] == '-' && !x.neg), got = accepts(g, edges[k]);
        CHECK_MSG(want == got, "%s: bound '%s' %s", schema, edges[k], got ? "accepted" : "refused");
        char s[64];
        snprintf(s, sizeof(s), "%s%s000001", edges[k], strchr(edges[k], '.') ? "" : ".");
        if (parse(s, &x) && strlen(strchr(s, '.') + 1) <= 6) {
            want = in_range(r, &x), got = accepts(g, s);
            CHECK_MSG(want == got, "%s: '%s' %s", schema, s, got ? "accepted" : "refused");
        }
    }
    for (int i = 0; i < n_walks; i++) {
        char s[64];
        bool ended = walk(g, s, sizeof(s));
        CHECK_MSG(ended, "%s: walk stuck at '%s'", schema, s);
        num x;
        bool ok = parse(s, &x) && in_range(r, &x);
        CHECK_MSG(ended && ok, "%s: produced '%s'", schema, s);
        /* the grammar's form: no leading zeros, no exponent */
        const char *d = s[0] == '-' ? s + 1 : s;
        CHECK_MSG(!(d[0] == '0' && d[1] >= '0' && d[1] <= '9'), "%s: leading zero '%s'", schema, s);
    }
    cllm_gm_unref(g);
}

static void t_named(void) {
    static const struct {
        const char *lo, *hi;
        bool lo_x, hi_x;
        const char *inside, *outside;
    } cases[] = {
        {"0", "1", true, true, "0.5", "1"},
        {"0.5", "1", true, true, "0.75", "0.5"},
        {"1", "2", true, true, "1.5", "2"},
        {"-1", "0", true, true, "-0.5", "0"},
        {"0.1", "0.2", false, false, "0.15", "0.21"},
        {"0", "1", false, false, "1", "1.5"},
        {"0.999", "1", true, true, "0.9995", "0.999"},
        /* bounds with 7 fraction digits, exclusive: the numbers between need 8 */
        {"0.1234567", "0.1234568", true, true, "0.12345675", "0.1234567"},
        {"-0.0000001", "0", true, false, "-0.00000005", "-0.0000001"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        bounds r = {.has_lo = true, .has_hi = true, .lo_x = cases[i].lo_x, .hi_x = cases[i].hi_x};
        snprintf(r.lo, sizeof(r.lo), "%s", cases[i].lo);
        snprintf(r.hi, sizeof(r.hi), "%s", cases[i].hi);
        char schema[256];
        cllm_gm *g = compile(&r, schema, sizeof(schema));
        CHECK_MSG(g, "named range %s refused", schema);
        if (!g) continue;
        CHECK_MSG(accepts(g, cases[i].inside), "%s: '%s' refused", schema, cases[i].inside);
        CHECK_MSG(!accepts(g, cases[i].outside), "%s: '%s' accepted", schema, cases[i].outside);
        cllm_gm_unref(g);
        check_bounds(&r, 300, 30);
    }
}

static void t_random(void) {
    for (int t = 0; t < 400; t++) {
        bounds r = {0};
        int kind = test_irand(4); /* 0 both, 1 lo only, 2 hi only, 3 both and close */
        r.has_lo = kind != 2;
        r.has_hi = kind != 1;
        r.lo_x = test_irand(2);
        r.hi_x = test_irand(2);
        rand_dec(r.lo, sizeof(r.lo), t & 1 ? 3 : 40, 3, true);
        if (kind == 3) {
            snprintf(r.hi, sizeof(r.hi), "%.20s%s", r.lo, strchr(r.lo, '.') ? "7" : ".007");
            if (r.lo[0] == '-') { /* -a.b7 is below -a.b: swap */
                char t2[32];
                snprintf(t2, sizeof(t2), "%s", r.lo);
                snprintf(r.lo, sizeof(r.lo), "%s", r.hi);
                snprintf(r.hi, sizeof(r.hi), "%s", t2);
            }
        } else {
            rand_dec(r.hi, sizeof(r.hi), t & 1 ? 3 : 40, 3, true);
        }
        if (test_irand(10) == 0) snprintf(r.hi, sizeof(r.hi), "%s", r.lo); /* equal bounds */
        check_bounds(&r, 60, 6);
    }
}

int main(void) {
    t_named();
    t_random();
    return test_report("test_grammar_numbers");
}
