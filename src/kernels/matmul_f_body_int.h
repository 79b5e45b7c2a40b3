/* Private: the float matmul (f32, f16, bf16 weights x fp32 activations), written once over
 * kernels/simd8_int.h and compiled into each SIMD tier by a file that defines MATMUL_SUF (the
 * entries' suffix) and MATMUL_TAIL_ROWS and includes this (kernels/x86/matmul_avx2.c,
 * kernels/arm/matmul_neon.c). Both ISAs do the same lane operations (kern_xisa checks the bits).
 *
 * Every output element (t, r) owns one 8-lane accumulator that runs over k in steps of 8 (fused
 * multiply-adds, lane j taking k = j mod 8), is reduced by hsum8() in its fixed order, then takes
 * the k % 8 tail in index order (separate multiply and add: the build does not contract). Tiles
 * of 2 rows x 4 tokens (prefill), 4 rows x 1 token (decode) or MATMUL_TAIL_ROWS rows x 2..3
 * tokens (token tails; NEON takes 2 rows, since 4 x 2 or 4 x 3 tiles of register pairs spill)
 * only decide which accumulators live in registers together, never the arithmetic of one element:
 * a token's outputs are bitwise the same alone or in any batch (tests/kernels/test_kern.c). Rows
 * are processed in slices of SLICE rows; each slice is applied to all tokens before the next, so
 * weights come from DRAM once per call and from L1/L2 for every further token. */
#if !defined(MATMUL_SUF) || !defined(MATMUL_TAIL_ROWS)
#error "define MATMUL_SUF and MATMUL_TAIL_ROWS before including kernels/matmul_f_body_int.h"
#endif
#include <stdint.h>

#include "base/half.h"
#include "kernels/kern_int.h"
#include "kernels/simd8_int.h"

/* 16 rows x 2048 bf16 = 64 KiB: the slice stays in L2 while every token tile passes over it. */
#define SLICE 16
/* Full unrolling of the register-tile loops lets the compiler keep the accumulator arrays in
 * registers (without it GCC 12 -O3 spills some inside the k loop on NEON). */
#define UNROLL _Pragma("GCC unroll 8")

#define MF_CAT_(a, b)   a##b
#define MF_CAT(a, b)    MF_CAT_(a, b)
#define MF_NAME(n, suf) MF_CAT(MF_CAT(kern_, n), MF_CAT(_, suf))

S8 float cv_f32(float x) {
    return x;
}

#define DEFINE_MATMUL(DT, T, LD, CVT)                                                              \
    S8 void tile_##DT(const T *W, size_t ldw, const float *X, size_t ldx, int K, float *Y,         \
                      size_t ldy, const int RT, const int TT) {                                    \
        f32x8 acc[4][4];                                                                           \
        UNROLL for (int r = 0; r < RT; r++) {                                                      \
            UNROLL for (int t = 0; t < TT; t++) acc[r][t] = zero8();                               \
        }                                                                                          \
        const int K8 = K & ~7;                                                                     \
        for (int k = 0; k < K8; k += 8) {                                                          \
            f32x8 w[4];                                                                            \
            UNROLL for (int r = 0; r < RT; r++) w[r] = LD(W + (size_t)r * ldw + k);                \
            UNROLL for (int t = 0; t < TT; t++) {                                                  \
                f32x8 x = ld8(X + (size_t)t * ldx + k);                                            \
                UNROLL for (int r = 0; r < RT; r++) acc[r][t] = fmadd8(w[r], x, acc[r][t]);        \
            }                                                                                      \
        }                                                                                          \
        /* all reductions first: no vector stays live across the tails' CVT calls (which made      \
         * GCC keep f16 accumulators on the stack inside the k loop) */                            \
        float s[4][4];                                                                             \
        UNROLL for (int r = 0; r < RT; r++) {                                                      \
            UNROLL for (int t = 0; t < TT; t++) s[r][t] = hsum8(acc[r][t]);                        \
        }                                                                                          \
        for (int r = 0; r < RT; r++)                                                               \
            for (int t = 0; t < TT; t++) {                                                         \
                float v = s[r][t];                                                                 \
                for (int k = K8; k < K; k++)                                                       \
                    v += CVT(W[(size_t)r * ldw + k]) * X[(size_t)t * ldx + k];                     \
                Y[(size_t)t * ldy + r] = v;                                                        \
            }                                                                                      \
    }                                                                                              \
    /* rows [0, rn) x tokens [0, tn) with tn in 1..3 */                                            \
    static void small_##DT(const T *W, size_t ldw, int rn, const float *X, size_t ldx, int tn,     \
                           int K, float *Y, size_t ldy) {                                          \
        int r = 0;                                                                                 \
        if (tn == 1)                                                                               \
            for (; r + 4 <= rn; r += 4)                                                            \
                tile_##DT(W + (size_t)r * ldw, ldw, X, ldx, K, Y + r, ldy, 4, 1);                  \
        for (; r + MATMUL_TAIL_ROWS <= rn; r += MATMUL_TAIL_ROWS) {                                \
            const T *w = W + (size_t)r * ldw;                                                      \
            if (tn == 1)                                                                           \
                tile_##DT(w, ldw, X, ldx, K, Y + r, ldy, MATMUL_TAIL_ROWS, 1);                     \
            else if (tn == 2)                                                                      \
                tile_##DT(w, ldw, X, ldx, K, Y + r, ldy, MATMUL_TAIL_ROWS, 2);                     \
            else                                                                                   \
                tile_##DT(w, ldw, X, ldx, K, Y + r, ldy, MATMUL_TAIL_ROWS, 3);                     \
        }                                                                                          \
        for (; r < rn; r++) {                                                                      \
            const T *w = W + (size_t)r * ldw;                                                      \
            if (tn == 1)                                                                           \
                tile_##DT(w, ldw, X, ldx, K, Y + r, ldy, 1, 1);                                    \
            else if (tn == 2)                                                                      \
                tile_##DT(w, ldw, X, ldx, K, Y + r, ldy, 1, 2);                                    \
            else                                                                                   \
                tile_##DT(w, ldw, X, ldx, K, Y + r, ldy, 1, 3);                                    \
        }                                                                                          \
    }                                                                                              \
    void MF_NAME(matmul_##DT, MATMUL_SUF)(const void *Wv, size_t ldw, int n_rows, const float *X,  \
                                          size_t ldx, int n_tok, int K, float *Y, size_t ldy) {    \
        const T *W = (const T *)Wv;                                                                \
        for (int r0 = 0; r0 < n_rows; r0 += SLICE) {                                               \
            int rn = n_rows - r0 < SLICE ? n_rows - r0 : SLICE;                                    \
            const T *Ws = W + (size_t)r0 * ldw;                                                    \
            float *Ys = Y + r0;                                                                    \
            int t = 0;                                                                             \
            for (; t + 4 <= n_tok; t += 4) {                                                       \
                const float *Xt = X + (size_t)t * ldx;                                             \
                float *Yt = Ys + (size_t)t * ldy;                                                  \
                int r = 0;                                                                         \
                for (; r + 2 <= rn; r += 2)                                                        \
                    tile_##DT(Ws + (size_t)r * ldw, ldw, Xt, ldx, K, Yt + r, ldy, 2, 4);           \
                if (r < rn) tile_##DT(Ws + (size_t)r * ldw, ldw, Xt, ldx, K, Yt + r, ldy, 1, 4);   \
            }                                                                                      \
            if (t < n_tok)                                                                         \
                small_##DT(Ws, ldw, rn, X + (size_t)t * ldx, ldx, n_tok - t, K,                    \
                           Ys + (size_t)t * ldy, ldy);                                             \
        }                                                                                          \
    }

DEFINE_MATMUL(f32, float, ld8, cv_f32)
DEFINE_MATMUL(f16, uint16_t, ld8_f16, cllm_f16_to_f32)
DEFINE_MATMUL(bf16, uint16_t, ld8_bf16, cllm_bf16_to_f32)
