/* Scalar reference for W4A8: GPTQ int4 weights x int8 activations (cllm_kern_ops.matmul_q4a8,
 * kernels.h). Activations are quantized per token and per group with the grid of
 * kern_fake_quant_act (symmetric absmax / 127, round to nearest even), then each group's dot
 * product is exact in int32 and converted once: acc = fma(w_scale * a_scale, (float)(sum q*a -
 * z*sum a), acc). The oracle for the AVX2 tier, which agrees bitwise (integer sums are exact). */
#include <math.h>
#include <stdlib.h>

#include "base/half.h"
#include "kernels/kern_int.h"

void kern_quant_act8(const float *x, int K, int group, int8_t *q, float *s, int32_t *sum) {
    for (int g0 = 0, g = 0; g0 < K; g0 += group, g++) {
        float amax = 0.0f;
        for (int k = g0; k < g0 + group; k++) amax = fmaxf(amax, fabsf(x[k]));
        float sc = amax / 127.0f;
        int32_t acc = 0;
        for (int k = g0; k < g0 + group; k++) {
            int v = 0;
            if (sc != 0.0f) {
                float r = nearbyintf(x[k] / sc);
                v = (int)fminf(fmaxf(r, -127.0f), 127.0f);
            }
            q[k] = (int8_t)v;
            acc += v;
        }
        s[g] = sc;
        sum[g] = acc;
    }
}

void kern_matmul_q4a8_ref(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx,
                          int n_tok, float *Y, size_t ldy) {
    int G = w->group, NG = w->K / G;
    int8_t *qa = malloc((size_t)w->K);
    float *asb = malloc((size_t)NG * sizeof(float));
    int32_t *asumb = malloc((size_t)NG * sizeof(int32_t));
    if (!qa || !asb || !asumb) abort();
    for (int t = 0; t < n_tok; t++) {
        kern_quant_act8(X + (size_t)t * ldx, w->K, G, qa, asb, asumb);
        for (int n = n0; n < n1; n++) {
            float acc = 0.0f;
            for (int g = 0; g < NG; g++) {
                uint32_t zw = (uint32_t)w->qzeros[(size_t)g * (w->N / 8) + n / 8];
                int32_t z = (int32_t)((zw >> ((n % 8) * 4)) & 15u) + 1;
                int32_t isum = 0;
                for (int k8 = g * G / 8; k8 < (g + 1) * G / 8; k8++) {
                    uint32_t v = (uint32_t)w->qweight[(size_t)k8 * w->N + n];
                    for (int j = 0; j < 8; j++)
                        isum += (int32_t)((v >> (4 * j)) & 15u) * qa[k8 * 8 + j];
                }
                uint16_t sh = w->scales[(size_t)g * w->N + n];
                float ws = w->scale_bf16 ? cllm_bf16_to_f32(sh) : cllm_f16_to_f32(sh);
                acc = fmaf(ws * asb[g], (float)(isum - z * asumb[g]), acc);
            }
            Y[(size_t)t * ldy + n] = acc;
        }
    }
    free(asb);
    free(asumb);
    free(qa);
}
