/* silu_mul (kernels.h) in every tier against the scalar reference (libm expf) and a double
 * precision silu: the error bound, the NULL multiplier, in-place use, NaN, and that an input's
 * result does not depend on its position or the call's length (the vector tail). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test.h"

/* distance in units in the last place between two finite floats of the same sign region */
static int64_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return ia > ib ? (int64_t)ia - ib : (int64_t)ib - ia;
}

static void test_tier(const cllm_kern_ops *k, const char *tier) {
    const cllm_kern_ops *ref = cllm_kern_ref();
    enum { N = 4099 };
    static float g[N], u[N], y[N], yr[N], y1[N], gi[N];
    for (int i = 0; i < N; i++) {
        /* dense near 0, then out to +-100 (exp clamps at -87 / 88 inside) */
        g[i] = i < 2048 ? 8.0f * test_frand() : 100.0f * test_frand();
        u[i] = test_frand();
    }
    g[0] = 0.0f, g[1] = -0.0f, g[2] = 87.5f, g[3] = -87.5f, g[4] = 1e-30f, g[5] = -1e-30f;
    int64_t worst = 0, worst_d = 0;
    k->silu_mul(y, g, NULL, N);
    ref->silu_mul(yr, g, NULL, N);
    for (int i = 0; i < N; i++) {
        /* below -87 the ref's expf(-g) overflows (g / inf = -0) where the tiers' clamped exp
         * gives ~1e-37: both are 0 to the model, so tiny values count by absolute error */
        int64_t e = fabsf(y[i] - yr[i]) <= 1e-30f ? 0 : ulps(y[i], yr[i]);
        if (e > worst) worst = e;
        double s = (double)g[i] / (1.0 + exp(-(double)g[i]));
        if (fabs(s) > 1e-30) { /* vs the exact value, where it is a normal float */
            int64_t d = ulps(y[i], (float)s);
            if (d > worst_d) worst_d = d;
        }
    }
    CHECK_MSG(worst <= 4, "%s silu vs ref: %lld ulp", tier, (long long)worst);
    CHECK_MSG(worst_d <= 4, "%s silu vs exact: %lld ulp", tier, (long long)worst_d);
    fprintf(stderr, "%s silu_mul: max %lld ulp from the ref, %lld from the exact value\n", tier,
            (long long)worst, (long long)worst_d);
    /* with a multiplier: silu(g) * u, the same product the ref rounds */
    k->silu_mul(y1, g, u, N);
    int bad = 0;
    for (int i = 0; i < N; i++) bad += memcmp(&y1[i], &(float){y[i] * u[i]}, 4) != 0;
    CHECK_MSG(bad == 0, "%s silu_mul(g, u) != silu(g) * u at %d inputs", tier, bad);
    /* position and length invariance: every offset and length, bitwise */
    bad = 0;
    for (int off = 0; off < 9; off++)
        for (int n = 1; n <= 37; n += 3) {
            float o[64];
            k->silu_mul(o, g + 100 + off, u + 100 + off, n);
            for (int i = 0; i < n; i++) bad += memcmp(&o[i], &y1[100 + off + i], 4) != 0;
        }
    CHECK_MSG(bad == 0, "%s: %d results depend on position or length", tier, bad);
    /* in place, both ways */
    memcpy(gi, g, sizeof g);
    k->silu_mul(gi, gi, u, N);
    CHECK_MSG(memcmp(gi, y1, sizeof gi) == 0, "%s: y == g in place differs", tier);
    memcpy(gi, u, sizeof u);
    k->silu_mul(gi, g, gi, N);
    CHECK_MSG(memcmp(gi, y1, sizeof gi) == 0, "%s: y == u in place differs", tier);
    /* NaN stays NaN, n = 0 writes nothing */
    float nan_in[3] = {NAN, 1.0f, -NAN}, nan_out[3];
    k->silu_mul(nan_out, nan_in, NULL, 3);
    CHECK_MSG(isnan(nan_out[0]) && isnan(nan_out[2]) && nan_out[1] == y[0] * 0.0f + nan_out[1],
              "%s: NaN input", tier);
    float keep = 7.0f;
    k->silu_mul(&keep, g, NULL, 0);
    CHECK(keep == 7.0f);
}

int main(void) {
    test_tier(cllm_kern_ref(), "ref");
    if (cllm_kern_avx2()) test_tier(cllm_kern_avx2(), "avx2");
    if (cllm_kern_avx512()) test_tier(cllm_kern_avx512(), "avx512");
    if (cllm_kern_neon()) test_tier(cllm_kern_neon(), cllm_kern_neon()->name);
    test_tier(cllm_kern(), "chosen");
    return test_report("test_act");
}
