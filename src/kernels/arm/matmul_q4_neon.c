/* NEON matmul for GPTQ int4/int8 weights (cllm_qweight, kernels.h) x fp32 activations: the
 * cllm_kern_ops.matmul_q entry of the neon tier (kernels.c), called by the forward pass through
 * the dispatch table like the AVX2 version (kernels/x86/matmul_q4_avx2.c), which it mirrors.
 *
 * The GPTQ layout packs along K with N contiguous, so one 128-bit load of qweight row k8 holds
 * 32/bits consecutive k values for 4 consecutive outputs: the 4 lanes are 4 output columns.
 * Each value is unpacked (shift, mask, subtract the group's zero, convert) right before its FMA
 * with the broadcast activation; nothing is dequantized to memory.
 *
 * Per output element the sequence is the one kernels.h fixes (per-group fused multiply-add
 * accumulation, then acc = fma(scale, gacc, acc)); vfmaq_f32 rounds once like fmaf, so each lane
 * is bitwise the scalar tier (kernels/matmul_q4_ref.c). Tiles of 4 (decode) or 2 vectors x 1..4
 * tokens only decide which accumulators share registers: a token's outputs are the same alone or
 * in any batch. Baseline ARMv8-A Advanced SIMD, no extension needed. */
#include <arm_neon.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kern_int.h"

#define AI __attribute__((always_inline)) static inline
/* Full unrolling of the register-tile loops lets the compiler keep the accumulator arrays in
 * registers (without it GCC 12 -O3 spills some inside the k loop). */
#define UNROLL  _Pragma("GCC unroll 8")
#define PF_ROWS 16 /* prefetch distance in qweight rows, as the AVX2 tier (not tuned on ARM) */

/* Effective zeros (stored + 1) of columns n0..n0+3 (n0 % 4 == 0) in group g, one per lane. */
AI int32x4_t zeros4(const cllm_qweight *w, int g, int n0, const int BITS) {
    const int per = 32 / BITS;
    uint32_t word = (uint32_t)w->qzeros[(size_t)g * (size_t)(w->N / per) + (size_t)(n0 / per)];
    int s0 = (n0 % per) * BITS; /* negative shift counts shift right */
    const int32x4_t sh = {-s0, -(s0 + BITS), -(s0 + 2 * BITS), -(s0 + 3 * BITS)};
    uint32x4_t z = vandq_u32(vshlq_u32(vdupq_n_u32(word), sh), vdupq_n_u32((1u << BITS) - 1));
    return vaddq_s32(vreinterpretq_s32_u32(z), vdupq_n_s32(1));
}

/* The 4 scales of columns n..n+3 in group g as fp32 (f16 and bf16 both convert exactly). */
AI float32x4_t scales4(const cllm_qweight *w, int g, int n) {
    uint16x4_t h = vld1_u16(w->scales + (size_t)g * (size_t)w->N + (size_t)n);
    if (w->scale_bf16) return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
    return vcvt_f32_f16(vreinterpret_f16_u16(h));
}

/* Output columns [n0, n0 + 4*NV) x tokens [0, TT). */
AI void tile(const cllm_qweight *w, int n0, const float *X, size_t ldx, float *Y, size_t ldy,
             const int BITS, const int NV, const int TT) {
    const int per = 32 / BITS, G = w->group, NG = w->K / G;
    const size_t N = (size_t)w->N;
    const uint32x4_t mask = vdupq_n_u32((1u << BITS) - 1);
    float32x4_t acc[4][4];
    UNROLL
    for (int b = 0; b < NV; b++) UNROLL
    for (int t = 0; t < TT; t++) acc[b][t] = vdupq_n_f32(0.0f);
    for (int g = 0; g < NG; g++) {
        int32x4_t zv[4];
        float32x4_t gacc[4][4];
        UNROLL
        for (int b = 0; b < NV; b++) {
            zv[b] = zeros4(w, g, n0 + 4 * b, BITS);
            UNROLL
            for (int t = 0; t < TT; t++) gacc[b][t] = vdupq_n_f32(0.0f);
        }
        const int k8e = (g + 1) * G / per;
        for (int k8 = g * G / per; k8 < k8e; k8++) {
            uint32x4_t v[4];
            UNROLL
            for (int b = 0; b < NV; b++) {
                const int32_t *src = w->qweight + (size_t)k8 * N + (size_t)(n0 + 4 * b);
                __builtin_prefetch(src + PF_ROWS * N);
                v[b] = vreinterpretq_u32_s32(vld1q_s32(src));
            }
            const float *xk = X + (size_t)k8 * (size_t)per;
            UNROLL
            for (int j = 0; j < per; j++) {
                float32x4_t wf[4];
                UNROLL
                for (int b = 0; b < NV; b++) {
                    int32x4_t q = vreinterpretq_s32_u32(vandq_u32(v[b], mask));
                    wf[b] = vcvtq_f32_s32(vsubq_s32(q, zv[b]));
                    /* an immediate for clang too, which folds BITS only after inlining */
                    v[b] = BITS == 8 ? vshrq_n_u32(v[b], 8) : vshrq_n_u32(v[b], 4);
                }
                UNROLL
                for (int t = 0; t < TT; t++) {
                    float32x4_t xb = vld1q_dup_f32(xk + (size_t)t * ldx + (size_t)j);
                    UNROLL
                    for (int b = 0; b < NV; b++) gacc[b][t] = vfmaq_f32(gacc[b][t], wf[b], xb);
                }
            }
        }
        UNROLL
        for (int b = 0; b < NV; b++) {
            float32x4_t sv = scales4(w, g, n0 + 4 * b);
            UNROLL
            for (int t = 0; t < TT; t++) acc[b][t] = vfmaq_f32(acc[b][t], sv, gacc[b][t]);
        }
    }
    UNROLL
    for (int b = 0; b < NV; b++) UNROLL
    for (int t = 0; t < TT; t++) vst1q_f32(Y + (size_t)t * ldy + (size_t)(n0 + 4 * b), acc[b][t]);
}

AI void core(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok, float *Y,
             size_t ldy, const int BITS) {
    for (int t = 0; t < n_tok; t += 4) {
        int tn = n_tok - t < 4 ? n_tok - t : 4;
        const float *Xt = X + (size_t)t * ldx;
        float *Yt = Y + (size_t)t * ldy;
        int n = n0;
        if (tn == 1) /* decode: 16 columns = 64 bytes of each qweight row per pass */
            for (; n + 16 <= n1; n += 16) tile(w, n, Xt, ldx, Yt, ldy, BITS, 4, 1);
        for (; n < n1; n += 8) { /* n0, n1 are multiples of 8 */
            if (tn == 4)
                tile(w, n, Xt, ldx, Yt, ldy, BITS, 2, 4);
            else if (tn == 3)
                tile(w, n, Xt, ldx, Yt, ldy, BITS, 2, 3);
            else if (tn == 2)
                tile(w, n, Xt, ldx, Yt, ldy, BITS, 2, 2);
            else
                tile(w, n, Xt, ldx, Yt, ldy, BITS, 2, 1);
        }
    }
}

static void core4(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                  float *Y, size_t ldy) {
    core(w, n0, n1, X, ldx, n_tok, Y, ldy, 4);
}
static void core8(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                  float *Y, size_t ldy) {
    core(w, n0, n1, X, ldx, n_tok, Y, ldy, 8);
}

void kern_matmul_q_neon(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx,
                        int n_tok, float *Y, size_t ldy) {
    kern_matmul_q_with(core4, core8, w, n0, n1, X, ldx, n_tok, Y, ldy);
}
