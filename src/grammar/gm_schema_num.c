/* Integer ranges as exact digit grammars (minimum/maximum), and the string formats JSON Schema
 * names (date, time, date-time, uuid, email, uri, ipv4, hostname): each a subset of what the
 * format allows, so every output validates (e.g. days only up to 28 in February). */
#include <stdio.h>
#include <string.h>

#include "grammar/gm_json_int.h"

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

/* ---- bounded decimals ---- */

/* A bound as the shortest decimal that reads back as the same double (the text the schema most
 * likely had: 0.1, not 0.1000000000000000055): integer part and fraction digits (no trailing
 * zeros) of |v|. False when the fraction needs more than DEC_FRAC_MAX digits. */
enum { DEC_FRAC_MAX = 40, DEC_FRAC_MIN = 6 };

typedef struct dec {
    unsigned long long ip;
    char frac[DEC_FRAC_MAX + 1];
    int nf;
} dec;

static bool dec_of(double v, dec *d) {
    if (v < 0) v = -v;
    char buf[64];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof(buf), "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    /* buf: d[.ddd]e[+-]XX */
    char mant[24];
    int nm = 0;
    const char *q = buf;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') mant[nm++] = *q;
    int e = *q == 'e' ? atoi(q + 1) : 0;
    d->ip = 0;
    d->nf = 0;
    for (int i = 0; i < nm; i++) {
        int pos = e - i; /* power of ten of digit i */
        if (pos >= 0) {
            d->ip = d->ip * 10 + (unsigned long long)(mant[i] - '0');
            continue;
        }
        int fi = -pos - 1;
        if (fi >= DEC_FRAC_MAX) return false;
        while (d->nf < fi) d->frac[d->nf++] = '0';
        d->frac[d->nf++] = mant[i];
    }
    for (int pos = e - nm; pos >= 0; pos--) d->ip *= 10; /* mantissa digits end above 10^0 */
    while (d->nf && d->frac[d->nf - 1] == '0') d->nf--;
    d->frac[d->nf] = 0;
    return true;
}

/* The fraction digits f (1..D of them, or none: no '.' at all, value 0) with lo <= 0.f <= hi.
 * lo / hi: digit strings, NULL = no bound (0 <= and < 1); *_in: the bound itself allowed.
 * tl / th: the digits so far equal lo's / hi's (a DFA over positions: at most 4 states per
 * position, and the free state is one repetition). */
static int frac_from(gm_builder *b, const char *lo, bool lo_in, const char *hi, bool hi_in, int p,
                     int D, bool tl, bool th) {
    /* past a bound's last digit its digits are 0 */
    int lo_d = tl && lo && lo[p] ? lo[p] - '0' : 0;
    int hi_d = th && hi ? (hi[p] ? hi[p] - '0' : 0) : 9;
    /* may the fraction end after p digits? */
    bool end_ok = true;
    if (tl && lo) {
        bool rest = false; /* lo has nonzero digits past p: 0.f < lo */
        for (const char *r = lo + p; *r; r++) rest |= *r != '0';
        end_ok &= !rest && lo_in;
    }
    if (th && hi) {
        bool rest = false;
        for (const char *r = hi + p; *r; r++) rest |= *r != '0';
        end_ok &= rest || hi_in;
    }
    if (!tl && !th) { /* free: any digits up to D in all */
        int any = gb_rep(b, gb_range(b, '0', '9'), 0, D - p);
        return p ? any
                 : gb_opt(b, gb_seq2(b, gb_lits(b, "."), gb_rep(b, gb_range(b, '0', '9'), 1, D)));
    }
    int digits = -1; /* the next digit and what follows it */
    if (p < D) {
        int a[4], na = 0;
        bool lt = tl && lo, ht = th && hi; /* the bounds that still constrain */
        int lo_eff = lt ? lo_d : 0, hi_eff = ht ? hi_d : 9;
        if (lo_eff <= hi_eff) {
            /* digits strictly between the tight ones: free */
            int mlo = lt ? lo_eff + 1 : lo_eff, mhi = ht ? hi_eff - 1 : hi_eff;
            if (lt && ht && lo_eff == hi_eff) {
                a[na++] = gb_seq2(b, gb_range(b, '0' + lo_eff, '0' + lo_eff),
                                  frac_from(b, lo, lo_in, hi, hi_in, p + 1, D, true, true));
            } else {
                if (lt)
                    a[na++] = gb_seq2(b, gb_range(b, '0' + lo_eff, '0' + lo_eff),
                                      frac_from(b, lo, lo_in, hi, hi_in, p + 1, D, true, false));
                if (mlo <= mhi)
                    a[na++] = gb_seq2(b, gb_range(b, '0' + mlo, '0' + mhi),
                                      frac_from(b, lo, lo_in, hi, hi_in, p + 1, D, false, false));
                if (ht)
                    a[na++] = gb_seq2(b, gb_range(b, '0' + hi_eff, '0' + hi_eff),
                                      frac_from(b, lo, lo_in, hi, hi_in, p + 1, D, false, true));
            }
        }
        if (na) digits = gb_alt(b, a, na);
    }
    /* at the start, ending is the bare integer and a digit needs the '.' first */
    if (!p && digits >= 0) digits = gb_seq2(b, gb_lits(b, "."), digits);
    if (digits < 0) return end_ok ? gb_empty(b) : gb_fail(b);
    return end_ok ? gb_alt2(b, gb_empty(b), digits) : digits;
}

static int frac_range(gm_builder *b, const char *lo, bool lo_in, const char *hi, bool hi_in,
                      int D) {
    return frac_from(b, lo, lo_in, hi, hi_in, 0, D, lo != NULL, hi != NULL);
}

static int uint_lit(gm_builder *b, unsigned long long v) {
    char s[24];
    snprintf(s, sizeof(s), "%llu", v);
    return gb_lits(b, s);
}

/* Non-negative decimals x with a <= x <= z (a_in / z_in: the bound itself allowed; !has_z: no
 * upper bound), written I[.F]: I without leading zeros (up to 18 digits when unbounded, as
 * sc_int_range), F of 1..D digits. */
static int nonneg_range(gm_builder *b, const dec *a, bool a_in, bool has_z, const dec *z, bool z_in,
                        int D) {
    const char *af = a->frac, *zf = has_z ? z->frac : NULL;
    if (has_z && a->ip == z->ip)
        return gb_seq2(b, uint_lit(b, a->ip), frac_range(b, af, a_in, zf, z_in, D));
    if (has_z && a->ip > z->ip) return gb_fail(b);
    int alts[3], n = 0;
    alts[n++] = gb_seq2(b, uint_lit(b, a->ip), frac_range(b, af, a_in, NULL, false, D));
    if (!has_z || z->ip > a->ip + 1)
        alts[n++] =
            gb_seq2(b, sc_int_range(b, true, (long long)a->ip + 1, has_z, (long long)z->ip - 1),
                    frac_range(b, NULL, true, NULL, false, D));
    if (has_z) alts[n++] = gb_seq2(b, uint_lit(b, z->ip), frac_range(b, NULL, true, zf, z_in, D));
    return gb_alt(b, alts, n);
}

int sc_decimal_range(gm_builder *b, bool has_lo, double lo, bool lo_x, bool has_hi, double hi,
                     bool hi_x, const char *ptr) {
    dec L = {0}, H = {0}, zero = {0};
    if ((has_lo && !dec_of(lo, &L)) || (has_hi && !dec_of(hi, &H)))
        return gb_error(b, CLLM_ERANGE,
                        "minimum/maximum at %s has more than %d digits after the point", ptr,
                        DEC_FRAC_MAX),
               -1;
    if (has_lo && has_hi && (lo > hi || (lo == hi && (lo_x || hi_x)))) return gb_fail(b);
    /* fraction digits: 6, or one more than a bound has (so that numbers strictly inside an
     * exclusive bound with many digits still exist) */
    int D = DEC_FRAC_MIN;
    if (has_lo && L.nf + 1 > D) D = L.nf + 1;
    if (has_hi && H.nf + 1 > D) D = H.nf + 1;
    int alts[2], n = 0;
    /* x >= 0 */
    if (!has_hi || hi > 0 || (hi == 0 && !hi_x)) {
        bool from_lo = has_lo && lo >= 0;
        alts[n++] =
            nonneg_range(b, from_lo ? &L : &zero, from_lo ? !lo_x : true, has_hi, &H, !hi_x, D);
    }
    /* x < 0: "-" y with y > 0, y >= -hi (when hi < 0), y <= -lo */
    if (!has_lo || lo < 0) {
        bool from_hi = has_hi && hi < 0;
        int y =
            nonneg_range(b, from_hi ? &H : &zero, from_hi ? !hi_x : false, has_lo, &L, !lo_x, D);
        alts[n++] = gb_seq2(b, gb_lits(b, "-"), y);
    }
    return gb_alt(b, alts, n);
}
