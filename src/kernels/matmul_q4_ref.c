/* Scalar reference for GPTQ int4/int8 weights x fp32 activations (cllm_qweight, kernels.h), and
 * the activation fake-quantization of the W4A8/W4A4 float emulation. The test oracle for the AVX2
 * tier: same op sequence per output element (explicit fmaf, so both tiers round identically). */
#include <math.h>

#include "base/half.h"
#include "kernels/kern_int.h"

void kern_fake_quant_act(const float *x, float *dst, int K, int group, int bits) {
    float qmax = (float)((1 << (bits - 1)) - 1);
    for (int g0 = 0; g0 < K; g0 += group) {
        int g1 = g0 + group < K ? g0 + group : K;
        float amax = 0.0f;
        for (int k = g0; k < g1; k++) amax = fmaxf(amax, fabsf(x[k]));
        float s = amax / qmax;
        for (int k = g0; k < g1; k++) {
            if (s == 0.0f) {
                dst[k] = 0.0f;
                continue;
            }
            float q = nearbyintf(x[k] / s);
            q = fminf(fmaxf(q, -qmax), qmax);
            dst[k] = q * s;
        }
    }
}

void cllm_kern_fake_quant_act(const float *x, float *dst, int K, int group, int bits) {
    kern_fake_quant_act(x, dst, K, group, bits);
}

static inline int qzero(const cllm_qweight *w, int g, int n) {
    int per = 32 / w->bits, mask = (1 << w->bits) - 1;
    uint32_t word = (uint32_t)w->qzeros[(size_t)g * (w->N / per) + n / per];
    return (int)((word >> ((n % per) * w->bits)) & (uint32_t)mask) + 1;
}

static void core_ref(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                     float *Y, size_t ldy) {
    int per = 32 / w->bits, G = w->group, NG = w->K / G;
    uint32_t mask = (1u << w->bits) - 1;
    for (int t = 0; t < n_tok; t++) {
        const float *x = X + (size_t)t * ldx;
        for (int n = n0; n < n1; n++) {
            float acc = 0.0f;
            for (int g = 0; g < NG; g++) {
                int z = qzero(w, g, n);
                float gacc = 0.0f;
                for (int k8 = g * G / per; k8 < (g + 1) * G / per; k8++) {
                    uint32_t v = (uint32_t)w->qweight[(size_t)k8 * w->N + n];
                    for (int j = 0; j < per; j++) {
                        int q = (int)((v >> (j * w->bits)) & mask);
                        gacc = fmaf((float)(q - z), x[k8 * per + j], gacc);
                    }
                }
                uint16_t sh = w->scales[(size_t)g * w->N + n];
                acc = fmaf(w->scale_bf16 ? cllm_bf16_to_f32(sh) : cllm_f16_to_f32(sh), gacc, acc);
            }
            Y[(size_t)t * ldy + n] = acc;
        }
    }
}

/* act_bits is not looked at (kernels.h): the caller quantized the activations already, so there
 * is no per-call buffer to allocate and no failure path inside a kernel. */
void kern_matmul_q_with(kern_q_core_fn core4, kern_q_core_fn core8, const cllm_qweight *w, int n0,
                        int n1, const float *X, size_t ldx, int n_tok, float *Y, size_t ldy) {
    (w->bits == 8 ? core8 : core4)(w, n0, n1, X, ldx, n_tok, Y, ldy);
}

void kern_matmul_q_ref(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                       float *Y, size_t ldy) {
    kern_matmul_q_with(core_ref, core_ref, w, n0, n1, X, ldx, n_tok, Y, ldy);
}
