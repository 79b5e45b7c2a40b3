/* Kernels vs their scalar reference on random ragged shapes and unaligned pointers, and the
 * batch-invariance contract of kernels/kernels.h: a token's matmul outputs are bitwise the same
 * computed alone or inside any batch, in every tier. */
#include <stdint.h>
#include <stdbool.h>
#include <string.h>

#include "base/half.h"
#include "kernels/kernels.h"
#include "test.h"

/* Fills W (rows x ldw) in dtype dt from random floats; returns fp32 copy semantics via kernel. */
static void fill_w(void *W, cllm_dtype dt, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float f = test_frand();
        if (dt == CLLM_DT_F32)
            ((float *)W)[i] = f;
        else if (dt == CLLM_DT_BF16)
            ((uint16_t *)W)[i] = cllm_f32_to_bf16(f);
        else
            ((uint16_t *)W)[i] = cllm_f32_to_f16(f);
    }
}

static void test_matmul(const cllm_kern_ops *k, const char *tier) {
    const cllm_kern_ops *ref = cllm_kern_ref();
    cllm_dtype dts[3] = {CLLM_DT_F32, CLLM_DT_F16, CLLM_DT_BF16};
    for (int iter = 0; iter < 60; iter++) {
        cllm_dtype dt = dts[iter % 3];
        int rows = 1 + test_irand(40), K = 1 + test_irand(300), nt = 1 + test_irand(11);
        if (iter % 5 == 0) K = 64 * (1 + test_irand(4)); /* multiples of 8 too */
        size_t ldw = (size_t)K + (size_t)test_irand(3), ldx = (size_t)K + (size_t)test_irand(5),
               ldy = (size_t)rows + (size_t)test_irand(4);
        size_t es = dt == CLLM_DT_F32 ? 4 : 2;
        /* +1 element offsets: unaligned pointers */
        char *wbuf = malloc((rows * ldw + 1) * es);
        float *xbuf = malloc((nt * ldx + 1) * sizeof(float));
        float *y = calloc(nt * ldy, sizeof(float)), *yr = calloc(nt * ldy, sizeof(float));
        float *y1 = calloc(ldy, sizeof(float));
        void *W = wbuf + es;
        float *X = xbuf + 1;
        fill_w(W, dt, rows * ldw);
        for (size_t i = 0; i < nt * ldx; i++) X[i] = test_frand();
        cllm_kern_matmul(k, dt)(W, ldw, rows, X, ldx, nt, K, y, ldy);
        cllm_kern_matmul(ref, dt)(W, ldw, rows, X, ldx, nt, K, yr, ldy);
        double maxerr = 0;
        for (int t = 0; t < nt; t++)
            for (int r = 0; r < rows; r++) {
                double e = fabs((double)y[t * ldy + r] - yr[t * ldy + r]);
                if (e > maxerr) maxerr = e;
            }
        /* |sum| <= K; fp32 accumulation error bound ~ K * 2^-23 * K, use 1e-5 * K */
        CHECK_MSG(maxerr <= 1e-5 * K, "%s matmul dt=%d rows=%d K=%d nt=%d err=%g", tier, dt, rows,
                  K, nt, maxerr);
        /* batch invariance: every token alone (and every row sub-range) gives the same bits */
        int bad = 0;
        for (int t = 0; t < nt; t++) {
            cllm_kern_matmul(k, dt)(W, ldw, rows, X + t * ldx, ldx, 1, K, y1, ldy);
            bad += memcmp(y1, y + t * ldy, rows * sizeof(float)) != 0;
        }
        if (rows > 3) {
            int r0 = 1 + test_irand(rows - 2);
            float *y2 = calloc(nt * ldy, sizeof(float));
            cllm_kern_matmul(k, dt)((char *)W + r0 * ldw * es, ldw, rows - r0, X, ldx, nt, K,
                                    y2 + r0, ldy);
            for (int t = 0; t < nt; t++)
                bad +=
                    memcmp(y2 + t * ldy + r0, y + t * ldy + r0, (rows - r0) * sizeof(float)) != 0;
            free(y2);
        }
        CHECK_MSG(bad == 0, "%s matmul not batch invariant: dt=%d rows=%d K=%d nt=%d", tier, dt,
                  rows, K, nt);
        free(wbuf), free(xbuf), free(y), free(yr), free(y1);
    }
}

/* max(a, b) that keeps a NaN b (fmax drops it, so a NaN output would pass). Also: GCC 12.2
 * -O3 on aarch64 dies with an internal error vectorizing `e = fmax(e, fabs(float))` loops. */
static double worse(double a, double b) {
    return b <= a ? a : b;
}

static void test_gdn(const cllm_kern_ops *k, const char *tier) {
    const cllm_kern_ops *ref = cllm_kern_ref();
    for (int iter = 0; iter < 20; iter++) {
        int dk = 1 + test_irand(40), dv = 1 + test_irand(40);
        if (iter % 2) dk = 16 * (1 + test_irand(8)), dv = 8 * (1 + test_irand(16));
        size_t ns = (size_t)dk * dv;
        float *S = malloc(ns * 4), *Sr = malloc(ns * 4), *q = malloc(dk * 4), *kk = malloc(dk * 4);
        float *v = malloc(dv * 4), *o = malloc(dv * 4), * or = malloc(dv * 4),
              *tmp = malloc(dv * 4);
        for (size_t i = 0; i < ns; i++) S[i] = Sr[i] = test_frand();
        double err = 0;
        for (int step = 0; step < 5; step++) {
            for (int i = 0; i < dk; i++) q[i] = test_frand() * 0.3f, kk[i] = test_frand() * 0.3f;
            for (int i = 0; i < dv; i++) v[i] = test_frand();
            float decay = 0.5f + 0.5f * fabsf(test_frand()), beta = fabsf(test_frand());
            k->gdn_step(S, q, kk, v, &decay, &beta, 0, o, 0, 1, tmp, dk, dv);
            ref->gdn_step(Sr, q, kk, v, &decay, &beta, 0, or, 0, 1, tmp, dk, dv);
            for (int i = 0; i < dv; i++) err = worse(err, fabs(o[i] - or [i]));
        }
        for (size_t i = 0; i < ns; i++) err = worse(err, fabs(S[i] - Sr[i]));
        CHECK_MSG(err < 1e-5 * (dk + 1), "%s gdn_step dk=%d dv=%d err=%g", tier, dk, dv, err);
        free(S), free(Sr), free(q), free(kk), free(v), free(o), free(or), free(tmp);
    }
}

/* One call of k's gdn_step, or gdn_step_bf16 when b16 (S then holds bf16), on rows p of stride
 * ld ([q k v decay beta]). */
static void gdn_call(const cllm_kern_ops *k, bool b16, void *S, const float *p, size_t ld, float *o,
                     size_t ldo, int T, float *tmp, int dk, int dv) {
    const float *dec = p + 2 * dk + dv, *bet = dec + 1;
    if (b16)
        k->gdn_step_bf16(S, p, p + dk, p + 2 * dk, dec, bet, ld, o, ldo, T, tmp, dk, dv);
    else
        k->gdn_step(S, p, p + dk, p + 2 * dk, dec, bet, ld, o, ldo, T, tmp, dk, dv);
}

/* Runs a's gdn_step (b16: gdn_step_bf16 on a bf16 state) over T tokens in one call (strided
 * rows, as the model passes them) and, on a copy of the state, b's in one call, or a's token by
 * token when b is NULL; true when state and outputs agree bitwise. */
static bool gdn_agree(const cllm_kern_ops *a, const cllm_kern_ops *b, int dk, int dv, int T,
                      bool b16) {
    size_t ld = 2 * (size_t)dk + dv + 5, ldo = (size_t)dv + 3, ns = (size_t)dk * dv;
    size_t sb = ns * (b16 ? sizeof(uint16_t) : sizeof(float));
    float *P = malloc((ld * T + 8) * 4), *o = calloc(ldo * T, 4), *o1 = calloc(ldo * T, 4);
    float *tmp = malloc(dv * 4);
    void *S = malloc(sb), *S1 = malloc(sb);
    for (size_t i = 0; i < ld * T; i++) P[i] = test_frand() * 0.3f;
    for (int t = 0; t < T; t++) {
        P[t * ld + 2 * dk + dv] = 0.5f + 0.5f * fabsf(test_frand()); /* decay */
        P[t * ld + 2 * dk + dv + 1] = fabsf(test_frand());           /* beta */
    }
    for (size_t i = 0; i < ns; i++) {
        float x = test_frand();
        if (b16)
            ((uint16_t *)S)[i] = cllm_f32_to_bf16(x);
        else
            ((float *)S)[i] = x;
    }
    memcpy(S1, S, sb);
    gdn_call(a, b16, S, P, ld, o, ldo, T, tmp, dk, dv);
    if (b)
        gdn_call(b, b16, S1, P, ld, o1, ldo, T, tmp, dk, dv);
    else
        for (int t = 0; t < T; t++)
            gdn_call(a, b16, S1, P + t * ld, 0, o1 + t * ldo, 0, 1, tmp, dk, dv);
    bool same = !memcmp(S, S1, sb) && !memcmp(o, o1, ldo * T * 4);
    free(P), free(S), free(S1), free(o), free(o1), free(tmp);
    return same;
}

/* T tokens in one gdn_step call == T calls of one token, bitwise, for every tier including ref;
 * the 201-column case has 32- and 8-column blocks and a scalar tail. A kernel that ran the tokens
 * in another order, or mixed the columns of two blocks, would differ. */
static void test_gdn_multi(const cllm_kern_ops *k, const char *tier) {
    const int dims[][3] = {{128, 128, 9}, {20, 44, 5}, {16, 201, 3}, {3, 7, 1}};
    for (int c = 0; c < 4; c++)
        CHECK_MSG(gdn_agree(k, NULL, dims[c][0], dims[c][1], dims[c][2], false),
                  "%s gdn_step %d tokens in one call != one by one (dk %d dv %d)", tier, dims[c][2],
                  dims[c][0], dims[c][1]);
}

/* The avx512 gdn_step does the AVX2 tier's lane operations per column in 16-lane blocks: state
 * and outputs bitwise equal, for T tokens per call, at every dv remainder (64/16-column blocks,
 * the masked 8-column one, the scalar tail). */
static void test_gdn_same(const cllm_kern_ops *a, const cllm_kern_ops *b) {
    const int dims[][3] = {{128, 128, 7}, {16, 201, 3}, {20, 44, 2}, {8, 24, 1}, {5, 9, 4}};
    for (int c = 0; c < 5; c++)
        CHECK_MSG(gdn_agree(a, b, dims[c][0], dims[c][1], dims[c][2], false),
                  "%s gdn_step != %s (dk %d dv %d T %d)", a->name, b->name, dims[c][0], dims[c][1],
                  dims[c][2]);
}

/* gdn_step_bf16 against a double-precision oracle written here: per token the recurrence on the
 * widened state, the state then rounded to bf16 (cllm_f32_to_bf16). Outputs within 1e-4 of the
 * largest, states within one bf16 step plus 1e-5 (fp32 vs double may flip a rounding decision,
 * and a sum that cancels keeps fp32's absolute error). */
static void test_gdn_bf16_oracle(const cllm_kern_ops *k, const char *tier, int dk, int dv, int T) {
    size_t ns = (size_t)dk * dv;
    uint16_t *S = malloc(ns * 2);
    double *Sd = malloc(ns * 8), *u = malloc(dv * 8);
    float *q = malloc(dk * 4), *kk = malloc(dk * 4), *v = malloc(dv * 4), *o = malloc(dv * 4);
    float *tmp = malloc(dv * 4);
    for (size_t i = 0; i < ns; i++) S[i] = cllm_f32_to_bf16(test_frand());
    double eo = 0, es = 0;
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < dk; i++) q[i] = test_frand() * 0.3f, kk[i] = test_frand() * 0.3f;
        for (int i = 0; i < dv; i++) v[i] = test_frand();
        float decay = 0.5f + 0.5f * fabsf(test_frand()), beta = fabsf(test_frand());
        for (size_t i = 0; i < ns; i++) Sd[i] = (double)cllm_bf16_to_f32(S[i]) * decay;
        for (int n = 0; n < dv; n++) {
            u[n] = 0;
            for (int m = 0; m < dk; m++) u[n] += Sd[(size_t)m * dv + n] * kk[m];
            u[n] = (v[n] - u[n]) * beta;
        }
        k->gdn_step_bf16(S, q, kk, v, &decay, &beta, 0, o, 0, 1, tmp, dk, dv);
        for (int n = 0; n < dv; n++) {
            double on = 0;
            for (int m = 0; m < dk; m++) {
                double sv = Sd[(size_t)m * dv + n] + kk[m] * u[n];
                on += sv * q[m];
                double want = cllm_bf16_to_f32(cllm_f32_to_bf16((float)sv));
                /* one bf16 step of want, plus fp32's error on a sum that cancels */
                es = worse(es, fabs(cllm_bf16_to_f32(S[(size_t)m * dv + n]) - want) /
                                   (fabs(want) / 128 + 1e-5));
            }
            eo = worse(eo, fabs(o[n] - on));
        }
    }
    CHECK_MSG(eo < 1e-4 && es <= 1.0, "%s gdn_step_bf16 dk %d dv %d: outputs off by %g, state %g",
              tier, dk, dv, eo, es);
    free(S), free(Sd), free(u), free(q), free(kk), free(v), free(o), free(tmp);
}

static void test_gdn_bf16(const cllm_kern_ops *k, const char *tier) {
    const cllm_kern_ops *ref = cllm_kern_ref();
    const int dims[][3] = {{128, 128, 7}, {16, 201, 3}, {20, 44, 5},
                           {8, 24, 1},    {5, 9, 4},    {3, 7, 2}};
    for (int c = 0; c < 6; c++) {
        int dk = dims[c][0], dv = dims[c][1], T = dims[c][2];
        if (k != ref)
            CHECK_MSG(gdn_agree(k, ref, dk, dv, T, true),
                      "%s gdn_step_bf16 != ref (dk %d dv %d T %d)", tier, dk, dv, T);
        CHECK_MSG(gdn_agree(k, NULL, dk, dv, T, true),
                  "%s gdn_step_bf16 %d tokens in one call != one by one (dk %d dv %d)", tier, T, dk,
                  dv);
        test_gdn_bf16_oracle(k, tier, dk, dv, T + 2);
    }
}

int main(void) {
    const cllm_kern_ops *ref = cllm_kern_ref();
    test_matmul(ref, "ref");
    test_gdn_multi(ref, "ref");
    test_gdn_bf16(ref, "ref");
    const cllm_kern_ops *tiers[CLLM_KERN_TIERS_MAX];
    int nt = cllm_kern_tiers(tiers, CLLM_KERN_TIERS_MAX);
    const cllm_kern_ops *avx2 = cllm_kern_avx2();
    for (int i = 0; i < nt; i++) {
        test_matmul(tiers[i], tiers[i]->name);
        test_gdn(tiers[i], tiers[i]->name);
        test_gdn_multi(tiers[i], tiers[i]->name);
        test_gdn_bf16(tiers[i], tiers[i]->name);
        if (avx2 && tiers[i] != avx2) test_gdn_same(tiers[i], avx2); /* the avx512 gdn_step */
        fprintf(stderr, "test_kern: tier %s checked\n", tiers[i]->name);
    }
    if (nt == 0) fprintf(stderr, "test_kern: no SIMD tier on this CPU, only ref tested\n");
    CHECK(cllm_kern() != NULL);
    return test_report("test_kern");
}
