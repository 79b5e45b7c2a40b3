/* NEON W4A8/W4A4: GPTQ int4 weights x int8 activation codes (cllm_kern_ops
 * qact_prep + matmul_q4_qact, kernels.h) on baseline ARMv8-A, plus the parts the dot-product
 * variant (matmul_q4a8_dot_neon.c) shares: activation preparation and the token/column walk.
 * kernels.c puts these in the neon table when the CPU lacks the dot-product extension; mirrors
 * kernels/x86/matmul_q4a8_avx2.c.
 *
 * kern_qact_prep_neon quantizes activations per token and group on kern_quant_act's grid
 * (vectorized, bitwise the same; qmax 127 for act_bits 8, 7 for act_bits 4) and regroups them per
 * 8 inputs into an even-byte and an odd-byte word. One 128-bit load of qweight row k8 holds 8
 * nibbles for each of 4 output columns (one per 32-bit lane); `& 0x0f` leaves codes q0 q2 q4 q6
 * in the lane's bytes and `>> 4` leaves q1 q3 q5 q7. vmull_s8 (codes 0..15 x int8, |product| <=
 * 1905) plus vmlal_s8 of the odd half stay within int16 (<= 3810); vpadalq_s16 widens pairs into
 * int32 and one vpaddq_s32 per group finishes the per-column sums. The zero point is folded in
 * once per group (sum q a - z sum a, exact in int32), so every tier and tile shape gives the same
 * integer; the conversion acc = fma(w_scale * a_scale, (float)isum, acc) is the reference's
 * sequence. Tiles of 4 (decode) or 2 vectors x 1..4 tokens only decide which accumulators share
 * registers: batch invariant and bitwise equal to the scalar tier. */
#include "kernels/arm/matmul_q4a8_neon_int.h"

#include <stdlib.h>

#define AI __attribute__((always_inline)) static inline
/* Full unrolling of the register-tile loops lets the compiler keep the accumulator arrays in
 * registers (without it GCC 12 -O3 spills some inside the k loop). */
#define UNROLL  _Pragma("GCC unroll 8")
#define PF_ROWS 16 /* as the AVX2 tier; not tuned on ARM */
#define MAX_TT  4  /* tokens per tile */

/* BITS 4: a qweight row is 8 inputs (`& 0x0f`, `>> 4` against the even and odd words); BITS 2
 * (kernels.h, matmul_q2_qact): 16 inputs, four code vectors `>> 2c & 3` against the words of
 * two 8-input blocks (|int16 sum| <= 4 x 3 x 128). */
AI void tile(const cllm_qweight *w, int n0, const q4a8_tok *A, float *Y, size_t ldy, const int NV,
             const int TT, const int BITS) {
    const int G = w->group, NG = w->K / G;
    const int NS = 8 / BITS, RK = 32 / BITS; /* code vectors per row, inputs per row */
    const size_t N = (size_t)w->N;
    const uint8x16_t mk = vdupq_n_u8(BITS == 4 ? 0x0f : 0x03);
    float32x4_t acc[4][MAX_TT];
    UNROLL
    for (int b = 0; b < NV; b++) UNROLL
    for (int t = 0; t < TT; t++) acc[b][t] = vdupq_n_f32(0.0f);
    for (int g = 0; g < NG; g++) {
        /* per vector and token: int32 pairs of columns 0, 1 (p01) and 2, 3 (p23) */
        int32x4_t p01[4][MAX_TT], p23[4][MAX_TT];
        UNROLL
        for (int b = 0; b < NV; b++) UNROLL
        for (int t = 0; t < TT; t++) p01[b][t] = p23[b][t] = vdupq_n_s32(0);
        const int re = (g + 1) * G / RK;
        for (int r = g * G / RK; r < re; r++) {
            int8x16_t cv[4][4]; /* [vector][code vector] */
            UNROLL
            for (int b = 0; b < NV; b++) {
                const int32_t *src = w->qweight + (size_t)r * N + (size_t)(n0 + 4 * b);
                __builtin_prefetch(src + PF_ROWS * N);
                uint8x16_t v = vreinterpretq_u8_s32(vld1q_s32(src));
                UNROLL
                for (int c = 0; c < NS; c++)
                    cv[b][c] = vreinterpretq_s8_u8(
                        vandq_u8(vshlq_u8(v, vdupq_n_s8((int8_t)(-BITS * c))), mk));
            }
            UNROLL
            for (int t = 0; t < TT; t++) {
                int8x16_t a[4];
                UNROLL
                for (int c = 0; c < NS; c++)
                    a[c] = vreinterpretq_s8_u32(vdupq_n_u32(A[t].ev[NS * r + c]));
                UNROLL
                for (int b = 0; b < NV; b++) {
                    int16x8_t l = vmull_s8(vget_low_s8(cv[b][0]), vget_low_s8(a[0]));
                    int16x8_t h = vmull_high_s8(cv[b][0], a[0]);
                    UNROLL
                    for (int c = 1; c < NS; c++) {
                        l = vmlal_s8(l, vget_low_s8(cv[b][c]), vget_low_s8(a[c]));
                        h = vmlal_high_s8(h, cv[b][c], a[c]);
                    }
                    p01[b][t] = vpadalq_s16(p01[b][t], l);
                    p23[b][t] = vpadalq_s16(p23[b][t], h);
                }
            }
        }
        UNROLL
        for (int b = 0; b < NV; b++) {
            int32x4_t zv = q4a8_zeros4(w, g, n0 + 4 * b);
            UNROLL
            for (int t = 0; t < TT; t++)
                acc[b][t] = q4a8_group_end(w, g, n0 + 4 * b, zv, &A[t],
                                           vpaddq_s32(p01[b][t], p23[b][t]), acc[b][t]);
        }
    }
    UNROLL
    for (int b = 0; b < NV; b++) UNROLL
    for (int t = 0; t < TT; t++) vst1q_f32(Y + (size_t)t * ldy + (size_t)(n0 + 4 * b), acc[b][t]);
}

AI void tiles_b(const cllm_qweight *w, int n0, const q4a8_tok *A, float *Y, size_t ldy, int nv,
                int tt, const int BITS) {
    if (nv == 4)
        tile(w, n0, A, Y, ldy, 4, 1, BITS);
    else if (tt == 4)
        tile(w, n0, A, Y, ldy, 2, 4, BITS);
    else if (tt == 3)
        tile(w, n0, A, Y, ldy, 2, 3, BITS);
    else if (tt == 2)
        tile(w, n0, A, Y, ldy, 2, 2, BITS);
    else
        tile(w, n0, A, Y, ldy, 2, 1, BITS);
}

static void tiles(const cllm_qweight *w, int n0, const q4a8_tok *A, float *Y, size_t ldy, int nv,
                  int tt) {
    tiles_b(w, n0, A, Y, ldy, nv, tt, 4);
}

static void tiles2(const cllm_qweight *w, int n0, const q4a8_tok *A, float *Y, size_t ldy, int nv,
                   int tt) {
    tiles_b(w, n0, A, Y, ldy, nv, tt, 2);
}

/* Quantize one token (kern_quant_act's grid bit for bit: maxNum and minNum ignore NaN like
 * fmaxf/fminf, the division is IEEE, vrndnq is nearbyintf's round to nearest even) and regroup
 * its codes into the even/odd words at p (cllm_qact_bytes layout). G % 8 == 0. */
static void prep(const float *x, int K, int G, int bits, char *p) {
    const int NG = K / G;
    const float qmax = (float)((1 << (bits - 1)) - 1);
    const float32x4_t lo = vdupq_n_f32(-qmax), hi = vdupq_n_f32(qmax);
    float *s = (float *)(void *)(p + K);
    int32_t *sums = (int32_t *)(void *)(p + K + 4 * (size_t)NG);
    for (int g = 0; g < NG; g++) {
        const float *xg = x + (size_t)g * (size_t)G;
        int8_t *ev = (int8_t *)p + (size_t)g * (size_t)G;
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int k = 0; k < G; k += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(xg + k)));
        float sc = vmaxnmvq_f32(m) / qmax;
        s[g] = sc;
        if (sc == 0.0f) {
            for (int k = 0; k < G; k += 8) vst1_s8(ev + k, vdup_n_s8(0));
            sums[g] = 0;
            continue;
        }
        const float32x4_t sv = vdupq_n_f32(sc);
        int32x4_t sum = vdupq_n_s32(0);
        for (int k = 0; k < G; k += 8) {
            float32x4_t r0 = vrndnq_f32(vdivq_f32(vld1q_f32(xg + k), sv));
            float32x4_t r1 = vrndnq_f32(vdivq_f32(vld1q_f32(xg + k + 4), sv));
            int32x4_t i0 = vcvtq_s32_f32(vminnmq_f32(vmaxnmq_f32(r0, lo), hi));
            int32x4_t i1 = vcvtq_s32_f32(vminnmq_f32(vmaxnmq_f32(r1, lo), hi));
            sum = vaddq_s32(sum, vaddq_s32(i0, i1));
            /* a0 a2 a4 a6 | a1 a3 a5 a7, narrowed to bytes: [even word, odd word] */
            int16x8_t h =
                vcombine_s16(vmovn_s32(vuzp1q_s32(i0, i1)), vmovn_s32(vuzp2q_s32(i0, i1)));
            vst1_s8(ev + k, vmovn_s16(h));
        }
        sums[g] = vaddvq_s32(sum);
    }
}

void kern_qact_prep_neon(const float *X, size_t ldx, int n_tok, int K, int group, int act_bits,
                         void *A) {
    size_t stride = cllm_qact_bytes(K, group, 1);
    for (int t = 0; t < n_tok; t++)
        prep(X + (size_t)t * ldx, K, group, act_bits, (char *)A + (size_t)t * stride);
}

void kern_q4a8_drive_neon(const cllm_qweight *w, int n0, int n1, const void *Ap, int n_tok,
                          float *Y, size_t ldy, q4a8_tile_fn fn) {
    const int K = w->K, NG = K / w->group;
    const size_t stride = cllm_qact_bytes(K, w->group, 1);
    for (int t = 0; t < n_tok; t += MAX_TT) {
        int tn = n_tok - t < MAX_TT ? n_tok - t : MAX_TT;
        q4a8_tok A[MAX_TT];
        for (int i = 0; i < tn; i++) {
            const char *p = (const char *)Ap + (size_t)(t + i) * stride;
            A[i] =
                (q4a8_tok){(const uint32_t *)(const void *)p, (const float *)(const void *)(p + K),
                           (const int32_t *)(const void *)(p + K + 4 * (size_t)NG)};
        }
        float *Yt = Y + (size_t)t * ldy;
        int n = n0;
        if (tn == 1) /* decode: 16 columns = 64 bytes of each qweight row per pass */
            for (; n + 16 <= n1; n += 16) fn(w, n, A, Yt, ldy, 4, 1);
        for (; n < n1; n += 8) fn(w, n, A, Yt, ldy, 2, tn); /* n0, n1 are multiples of 8 */
    }
}

void kern_matmul_q4_qact_neon(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                              float *Y, size_t ldy) {
    kern_q4a8_drive_neon(w, n0, n1, A, n_tok, Y, ldy, tiles);
}

void kern_matmul_q2_qact_neon(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                              float *Y, size_t ldy) {
    kern_q4a8_drive_neon(w, n0, n1, A, n_tok, Y, ldy, tiles2);
}
