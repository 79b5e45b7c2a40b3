/* silu_mul (kernels.h) in every tier against the scalar reference (libm expf) and a double
 * precision silu: the error bound, the NULL multiplier, in-place use, NaN, and that an input's
 * result does not depend on its position or the call's length (the vector tail). And matmul_f32
 * as the attention's score GEMM (model/fwd_attn.c: K rows as weight rows, a KV head's queries as
 * tokens, calls split along the rows at KV block edges): against a double sum, and each element
 * alone bitwise equal to it inside the call. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
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

static void test_scores(const cllm_kern_ops *k, const char *tier) {
    for (int iter = 0; iter < 12; iter++) {
        int n = 1 + test_irand(37), nq = 1 + test_irand(11), d = 1 + test_irand(300);
        if (iter < 3) d = 256, nq = 8; /* the Qwen3.5 head: 8 query heads per KV head */
        size_t ldk = (size_t)d + (size_t)test_irand(9), ldq = (size_t)d + (size_t)test_irand(9),
               lds = (size_t)n + (size_t)test_irand(3); /* S [query][row] */
        float *K = malloc(((size_t)n * ldk + 1) * sizeof(float));
        float *Q = malloc(((size_t)nq * ldq + 1) * sizeof(float));
        float *S = malloc((size_t)nq * lds * sizeof(float)), *S1 = malloc(sizeof(float));
        for (size_t i = 0; i < (size_t)n * ldk + 1; i++) K[i] = test_frand();
        for (size_t i = 0; i < (size_t)nq * ldq + 1; i++) Q[i] = test_frand();
        k->matmul_f32(K + 1, ldk, n, Q + 1, ldq, nq, d, S, lds); /* +1: unaligned rows */
        double worst = 0.0;
        int split = 0;
        for (int i = 0; i < n; i++)
            for (int h = 0; h < nq; h++) {
                double e = 0.0;
                for (int j = 0; j < d; j++)
                    e += (double)K[1 + (size_t)i * ldk + j] * Q[1 + (size_t)h * ldq + j];
                double err = fabs(e - S[(size_t)h * lds + i]);
                if (err > worst) worst = err;
                /* the same element alone: bitwise */
                k->matmul_f32(K + 1 + (size_t)i * ldk, ldk, 1, Q + 1 + (size_t)h * ldq, ldq, 1, d,
                              S1, 1);
                split += memcmp(S1, &S[(size_t)h * lds + i], 4) != 0;
            }
        CHECK_MSG(worst <= 1e-5 * d, "%s scores n %d nq %d d %d: error %g", tier, n, nq, d, worst);
        CHECK_MSG(split == 0, "%s scores n %d nq %d d %d: %d elements differ alone", tier, n, nq, d,
                  split);
        free(K), free(Q), free(S), free(S1);
    }
}

int main(void) {
    const cllm_kern_ops *tiers[CLLM_KERN_TIERS_MAX];
    int nt = cllm_kern_tiers(tiers, CLLM_KERN_TIERS_MAX);
    test_tier(cllm_kern_ref(), "ref");
    for (int i = 0; i < nt; i++) test_tier(tiers[i], tiers[i]->name);
    test_tier(cllm_kern(), "chosen");
    test_scores(cllm_kern_ref(), "ref");
    for (int i = 0; i < nt; i++) test_scores(tiers[i], tiers[i]->name);
    return test_report("test_act");
}
