/* Integer ranges as exact digit grammars (minimum/maximum), and the string formats JSON Schema
 * names (date, time, date-time, uuid, email, uri, ipv4, hostname): each a subset of what the
 * format allows, so every output validates (e.g. days only up to 28 in February). */
#include <stdio.h>
#include <string.h>

#include "grammar/gm_json.h"

static int digit_range(gm_builder *b, int lo, int hi) {
    return gb_range(b, '0' + lo, '0' + hi);
}

/* Fixed-length digit strings x..y (same length, leading zeros allowed). */
static int same_len(gm_builder *b, const char *x, const char *y, int L) {
    if (L == 1) return digit_range(b, x[0] - '0', y[0] - '0');
    if (x[0] == y[0])
        return gb_seq2(b, digit_range(b, x[0] - '0', x[0] - '0'), same_len(b, x + 1, y + 1, L - 1));
    char nines[24], zeros[24];
    memset(nines, '9', (size_t)L - 1);
    memset(zeros, '0', (size_t)L - 1);
    int alts[3], n = 0;
    int lo = x[0] - '0', hi = y[0] - '0';
    bool x_zero = !memcmp(x + 1, zeros, (size_t)L - 1),
         y_nine = !memcmp(y + 1, nines, (size_t)L - 1);
    int mid_lo = x_zero ? lo : lo + 1, mid_hi = y_nine ? hi : hi - 1;
    if (!x_zero) alts[n++] = gb_seq2(b, digit_range(b, lo, lo), same_len(b, x + 1, nines, L - 1));
    if (mid_lo <= mid_hi)
        alts[n++] = gb_seq2(b, digit_range(b, mid_lo, mid_hi),
                            gb_rep(b, digit_range(b, 0, 9), L - 1, L - 1));
    if (!y_nine) alts[n++] = gb_seq2(b, digit_range(b, hi, hi), same_len(b, zeros, y + 1, L - 1));
    return gb_alt(b, alts, n);
}

static int ndigits(unsigned long long v) {
    int d = 1;
    while (v >= 10) v /= 10, d++;
    return d;
}

/* Unsigned integers a..b without leading zeros; b = ULLONG_MAX means unbounded. */
static int uint_range(gm_builder *b, unsigned long long a, unsigned long long z, bool inf) {
    int da = ndigits(a), dz = inf ? da : ndigits(z);
    int alts[24], n = 0;
    for (int L = da; L <= dz; L++) {
        unsigned long long lo = L == 1 ? 0 : 1;
        for (int k = 1; k < L; k++) lo *= 10; /* 10^(L-1) */
        unsigned long long hi = lo * 10 - 1;
        if (L == 1) hi = 9;
        if (L == 20) hi = 18446744073709551615ull;
        unsigned long long x = a > lo ? a : lo, y = (!inf && z < hi) ? z : hi;
        if (x > y) continue;
        char sx[24], sy[24];
        snprintf(sx, sizeof(sx), "%0*llu", L, x);
        snprintf(sy, sizeof(sy), "%0*llu", L, y);
        alts[n++] = same_len(b, sx, sy, L);
    }
    /* more digits than a has, up to 18 in all: an unbounded integer stays an int64 and a finite
     * double (validators such as ajv reject Infinity) */
    if (inf && da < 18)
        alts[n++] = gb_seq2(b, digit_range(b, 1, 9), gb_rep(b, digit_range(b, 0, 9), da, 17));
    return gb_alt(b, alts, n);
}

int sc_int_range(gm_builder *b, bool has_lo, long long lo, bool has_hi, long long hi) {
    if (has_lo && has_hi && lo > hi) return gb_fail(b);
    int alts[2], n = 0;
    /* negatives: -k for k in [max(1, -hi), -lo] */
    if (!has_lo || lo < 0) {
        unsigned long long kmin = has_hi && hi < 0 ? (unsigned long long)(-(hi + 1)) + 1 : 1;
        unsigned long long kmax = has_lo ? (unsigned long long)(-(lo + 1)) + 1 : 0;
        alts[n++] = gb_seq2(b, gb_lits(b, "-"), uint_range(b, kmin, kmax, !has_lo));
    }
    if (!has_hi || hi >= 0) {
        unsigned long long a = has_lo && lo > 0 ? (unsigned long long)lo : 0;
        alts[n++] = uint_range(b, a, has_hi ? (unsigned long long)hi : 0, !has_hi);
    }
    return gb_alt(b, alts, n);
}

static int rx(gm_sc *c, const char *re) {
    return gm_regex_expr(c->b, re, strlen(re), GRX_JSON_STR, false);
}

int sc_format(gm_sc *c, const char *fmt, const char *ptr) {
    static const char date[] = "[0-9]{4}-(((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01]))|((0[469]|11)-"
                               "(0[1-9]|[12][0-9]|30))|(02-(0[1-9]|1[0-9]|2[0-8])))";
    static const char time[] = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?"
                               "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    char buf[512];
    if (!strcmp(fmt, "date")) return rx(c, date);
    if (!strcmp(fmt, "time")) return rx(c, time);
    if (!strcmp(fmt, "date-time")) {
        snprintf(buf, sizeof(buf), "%sT%s", date, time);
        return rx(c, buf);
    }
    if (!strcmp(fmt, "uuid"))
        return rx(c, "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
    if (!strcmp(fmt, "email"))
        return rx(c, "[a-z0-9]{1,20}(\\.[a-z0-9]{1,20}){0,3}@[a-z0-9]{1,20}(-[a-z0-9]{1,20}){0,2}"
                     "(\\.[a-z]{2,10}){1,3}");
    if (!strcmp(fmt, "uri"))
        return rx(c,
                  "https?://[a-z0-9]{1,30}(\\.[a-z0-9]{1,30}){0,4}(/[a-zA-Z0-9._~-]{0,30}){0,8}");
    if (!strcmp(fmt, "ipv4"))
        return rx(c, "((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}"
                     "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])");
    if (!strcmp(fmt, "hostname"))
        return rx(c,
                  "[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?){0,4}");
    gb_error(c->b, CLLM_EUNSUPPORTED, "unsupported keyword value: format '%.60s' at %s", fmt, ptr);
    return -1;
}
