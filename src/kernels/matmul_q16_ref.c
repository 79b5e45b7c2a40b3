/* Scalar reference for the act_bits 16 integer path: GPTQ int4/int8 weights x int16 activation
 * codes (cllm_kern_ops qact16_prep + matmul_q_qact16, kernels.h). The test oracle of the SIMD
 * tiers, which agree bitwise: the group sums are exact integers and the per-group float ops are
 * the ones written here.
 *
 * Prepared activations (this tier's layout, cllm_qact16_bytes per token): int16 codes [K] in k
 * order, fp32 scales [K/AG], int32 code sums [K/AG]. */
#include <math.h>

#include "base/half.h"
#include "kernels/kern_int.h"

#define Q16_MAX 32767.0f

void kern_quant_act16(const float *x, int K, int ag, int16_t *q, float *s, int32_t *sum) {
    for (int g0 = 0, h = 0; g0 < K; g0 += ag, h++) {
        float amax = 0.0f;
        for (int k = g0; k < g0 + ag; k++) amax = fmaxf(amax, fabsf(x[k])); /* ignores NaN */
        float sc = amax / Q16_MAX;
        int32_t acc = 0;
        for (int k = g0; k < g0 + ag; k++) {
            int v = 0;
            if (sc != 0.0f) { /* fmaxf first: a NaN code becomes -32767, as the SIMD max does */
                float r = nearbyintf(x[k] / sc);
                v = (int)fminf(fmaxf(r, -Q16_MAX), Q16_MAX);
            }
            q[k] = (int16_t)v;
            acc += v;
        }
        s[h] = sc;
        sum[h] = acc;
    }
}

void kern_qact16_prep_ref(const float *X, size_t ldx, int n_tok, int K, int ag, int bits, void *A) {
    (void)bits; /* one layout for both weight widths here */
    size_t stride = cllm_qact16_bytes(K, ag, 1), NH = (size_t)(K / ag);
    for (int t = 0; t < n_tok; t++) {
        char *p = (char *)A + (size_t)t * stride;
        kern_quant_act16(X + (size_t)t * ldx, K, ag, (int16_t *)(void *)p,
                         (float *)(void *)(p + 2 * (size_t)K),
                         (int32_t *)(void *)(p + 2 * (size_t)K + 4 * NH));
    }
}

void kern_matmul_q_qact16_ref(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                              float *Y, size_t ldy) {
    const int bits = w->bits, per = 32 / bits, G = w->group, K = w->K;
    const int AG = cllm_qact16_group(bits, G), NH = K / AG;
    const uint32_t mask = (1u << bits) - 1;
    size_t stride = cllm_qact16_bytes(K, AG, 1);
    for (int t = 0; t < n_tok; t++) {
        const char *p = (const char *)A + (size_t)t * stride;
        const int16_t *qa = (const int16_t *)(const void *)p;
        const float *as = (const float *)(const void *)(p + 2 * (size_t)K);
        const int32_t *asum = (const int32_t *)(const void *)(p + 2 * (size_t)K + 4 * (size_t)NH);
        for (int n = n0; n < n1; n++) {
            float acc = 0.0f;
            for (int h = 0; h < NH; h++) {
                int g = h * AG / G;
                uint32_t zw = (uint32_t)w->qzeros[(size_t)g * (w->N / per) + n / per];
                int64_t z = (int64_t)((zw >> ((n % per) * bits)) & mask) + 1;
                int64_t isum = 0;
                for (int k = h * AG; k < (h + 1) * AG; k++) {
                    uint32_t v = (uint32_t)w->qweight[(size_t)(k / per) * w->N + n];
                    isum += (int64_t)((v >> ((k % per) * bits)) & mask) * qa[k];
                }
                /* fits: |d| <= (2^bits) * 32767 * AG < 2^31 (cllm_qact16_group) */
                int32_t d = (int32_t)(isum - z * asum[h]);
                uint16_t sh = w->scales[(size_t)g * w->N + n];
                float ws = w->scale_bf16 ? cllm_bf16_to_f32(sh) : cllm_f16_to_f32(sh);
                acc = fmaf(ws * as[h], (float)d, acc);
            }
            Y[(size_t)t * ldy + n] = acc;
        }
    }
}
