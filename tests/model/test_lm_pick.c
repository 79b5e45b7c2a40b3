/* The screened lm_head's pick (model/fwd_lmhead.c fwd_lm_best) against a sort: the C best
 * entries of a row in the screen's order (the larger value, then the lower id; a NaN after every
 * number) are one set, and the heap's root is the last of them. Rows: distinct values, few values
 * (ties everywhere, at the floor the block maxima give too), NaN and -inf sprinkled or filling
 * the row, lengths around the 64-entry blocks, C above and below the block count (the floor on
 * and off), up to the 248k vocabulary. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/fwd_int.h"
#include "test.h"

/* The screen's order as a qsort comparator over ids into g_y. */
static const float *g_y;
static int before(const void *a, const void *b) {
    const int i = *(const int *)a, k = *(const int *)b;
    const float x = g_y[i], y = g_y[k];
    if (x > y) return -1;
    if (x < y) return 1;
    if (isnan(x) != isnan(y)) return isnan(x) ? 1 : -1;
    return (i > k) - (i < k);
}

static int icmp(const void *a, const void *b) {
    return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

static float value(int mode) {
    switch (mode) {
    case 0:
        return test_frand() * 8.0f; /* distinct (almost surely) */
    case 1:
        return (float)(test_irand(5) - 2); /* five values */
    case 2:                                /* numbers with NaN and -inf among them */
        return test_irand(8) == 0   ? NAN
               : test_irand(8) == 0 ? -INFINITY
                                    : (float)(test_irand(9) - 4) * 0.25f;
    case 3:
        return test_irand(3) ? -INFINITY : NAN; /* no number above -inf */
    default:                                    /* a few numbers in a row of NaN */
        return test_irand(200) ? NAN : test_frand();
    }
}

/* One row: fwd_lm_best's set and root against the sort's first min(C, n). */
static void check_row(int n, int C, int mode) {
    float *y = malloc((size_t)n * sizeof(float)), *bm = malloc(((size_t)n + 63) / 64 * 4);
    float *hv = malloc((size_t)C * sizeof(float));
    int *hid = malloc((size_t)C * sizeof(int)), *ids = malloc((size_t)n * sizeof(int));
    if (!y || !bm || !hv || !hid || !ids) {
        CHECK_MSG(0, "out of memory");
        goto out;
    }
    for (int v = 0; v < n; v++) {
        y[v] = value(mode);
        ids[v] = v;
    }
    g_y = y;
    qsort(ids, (size_t)n, sizeof(int), before);
    const int want = C < n ? C : n, got = fwd_lm_best(y, n, C, bm, hv, hid);
    int ok = got == want;
    if (ok) {
        const int last = ids[want - 1];
        ok = memcmp(&hv[0], &y[last], sizeof(float)) == 0 && hid[0] == last;
        qsort(ids, (size_t)want, sizeof(int), icmp);
        qsort(hid, (size_t)got, sizeof(int), icmp);
        ok = ok && memcmp(ids, hid, (size_t)want * sizeof(int)) == 0;
    }
    CHECK_MSG(ok, "n %d C %d mode %d: %d picked (want %d), root id %d", n, C, mode, got, want,
              got ? hid[0] : -1);
out:
    free(y);
    free(bm);
    free(hv);
    free(hid);
    free(ids);
}

int main(void) {
    static const int ns[] = {1, 7, 63, 64, 65, 129, 1000, 8200, 65536, 248320};
    static const int cs[] = {1, 2, 8, 32, 128, 300, 4096};
    for (size_t a = 0; a < sizeof(ns) / sizeof(*ns); a++)
        for (size_t b = 0; b < sizeof(cs) / sizeof(*cs); b++)
            for (int mode = 0; mode < 5; mode++) {
                if (ns[a] > 8200 && (cs[b] == 2 || cs[b] == 300)) continue; /* the suite's time */
                check_row(ns[a], cs[b], mode);
            }
    return test_report("test_lm_pick");
}
