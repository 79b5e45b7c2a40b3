/* Scalar reference for W4A8/W4A4: GPTQ int4 weights x int8 activation codes
 * (cllm_kern_ops qact_prep + matmul_q4_qact, kernels.h). Activations are quantized
 * per token and per group with the grid of kern_fake_quant_act (symmetric absmax / qmax, qmax 127
 * for act_bits 8 and 7 for act_bits 4, round to nearest even), then each group's dot product is
 * exact in int32 and converted once: acc = fma(w_scale * a_scale, (float)(sum q*a - z*sum a),
 * acc). The oracle for the AVX2/AVX-512 tiers, which agree bitwise (integer sums are exact).
 *
 * Prepared activations (this tier's layout, cllm_qact_bytes per token): int8 codes [K] in k
 * order, fp32 scales [K/G], int32 code sums [K/G]. */
#include <math.h>
#include <stdlib.h>

#include "base/half.h"
#include "kernels/kern_int.h"

void kern_quant_act(const float *x, int K, int group, int bits, int8_t *q, float *s, int32_t *sum) {
    float qmax = (float)((1 << (bits - 1)) - 1);
    for (int g0 = 0, g = 0; g0 < K; g0 += group, g++) {
        float amax = 0.0f;
        for (int k = g0; k < g0 + group; k++) amax = fmaxf(amax, fabsf(x[k]));
        float sc = amax / qmax;
        int32_t acc = 0;
        for (int k = g0; k < g0 + group; k++) {
            int v = 0;
            if (sc != 0.0f) {
                float r = nearbyintf(x[k] / sc);
                v = (int)fminf(fmaxf(r, -qmax), qmax);
            }
            q[k] = (int8_t)v;
            acc += v;
        }
        s[g] = sc;
        sum[g] = acc;
    }
}

void kern_quant_act8(const float *x, int K, int group, int8_t *q, float *s, int32_t *sum) {
    kern_quant_act(x, K, group, 8, q, s, sum);
}

void kern_qact_prep_ref(const float *X, size_t ldx, int n_tok, int K, int group, int act_bits,
                        void *A) {
    size_t stride = cllm_qact_bytes(K, group, 1), NG = (size_t)(K / group);
    for (int t = 0; t < n_tok; t++) {
        char *p = (char *)A + (size_t)t * stride;
        kern_quant_act(X + (size_t)t * ldx, K, group, act_bits, (int8_t *)p,
                       (float *)(void *)(p + K), (int32_t *)(void *)(p + K + 4 * NG));
    }
}

/* Code of input k of column n: int4 (GPTQ nibbles, 8 inputs a word) or 2-bit (kernels.h,
 * matmul_q2_qact: k = 16 r + 8 h + 2 j + o at bits 8 j + 2 (2 h + o) of row r's word, so shift
 * 2 s and mask 3 per byte yields the codes that meet the tiers' even/odd activation word s). */
static int32_t code_at(const cllm_qweight *w, int n, int k) {
    if (w->bits == 4)
        return (int32_t)(((uint32_t)w->qweight[(size_t)(k / 8) * w->N + n] >> (4 * (k % 8))) & 15u);
    uint32_t v = (uint32_t)w->qweight[(size_t)(k / 16) * w->N + n];
    int kk = k % 16, h = kk / 8, j = (kk % 8) / 2, o = kk % 2;
    return (int32_t)((v >> (8 * j + 2 * (2 * h + o))) & 3u);
}

/* Both weight widths: per group the exact integer sum, then the reference's fma. */
static void qact_ref(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok, float *Y,
                     size_t ldy) {
    int G = w->group, NG = w->K / G;
    size_t stride = cllm_qact_bytes(w->K, G, 1);
    for (int t = 0; t < n_tok; t++) {
        const char *p = (const char *)A + (size_t)t * stride;
        const int8_t *qa = (const int8_t *)p;
        const float *asb = (const float *)(const void *)(p + w->K);
        const int32_t *asumb = (const int32_t *)(const void *)(p + w->K + 4 * (size_t)NG);
        for (int n = n0; n < n1; n++) {
            float acc = 0.0f;
            for (int g = 0; g < NG; g++) {
                uint32_t zw = (uint32_t)w->qzeros[(size_t)g * (w->N / 8) + n / 8];
                int32_t z = (int32_t)((zw >> ((n % 8) * 4)) & 15u) + 1;
                int32_t isum = 0;
                for (int k = g * G; k < (g + 1) * G; k++) isum += code_at(w, n, k) * qa[k];
                uint16_t sh = w->scales[(size_t)g * w->N + n];
                float ws = w->scale_bf16 ? cllm_bf16_to_f32(sh) : cllm_f16_to_f32(sh);
                acc = fmaf(ws * asb[g], (float)(isum - z * asumb[g]), acc);
            }
            Y[(size_t)t * ldy + n] = acc;
        }
    }
}

void kern_matmul_q4_qact_ref(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                             float *Y, size_t ldy) {
    qact_ref(w, n0, n1, A, n_tok, Y, ldy);
}

void kern_matmul_q2_qact_ref(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                             float *Y, size_t ldy) {
    qact_ref(w, n0, n1, A, n_tok, Y, ldy);
}
