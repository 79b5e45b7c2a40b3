/* NEON matmul (f32, f16, bf16 weights x fp32 activations), dot and axpy: the float entries of
 * the neon tier (kernels.c), called by the forward pass through the dispatch table.
 *
 * The arithmetic of one output element is kernels/x86/matmul_avx2.c's, written with two 4-lane
 * registers per 8-lane accumulator: fused multiply-adds over k in steps of 8, lane j taking
 * k = j mod 8; the fixed reduction (lanes i + i+4, then pairs 0+2 and 1+3, then the two halves);
 * the k % 8 tail in index order with separate multiply and add (the build does not contract).
 * So an element is the same on both ISAs, and tiles of 2 rows x 4 tokens (prefill), 4 rows x 1
 * token (decode) or 2 rows x 1..3 tokens (tails) only decide which accumulators live in registers:
 * a token's outputs are bitwise the same alone or in any batch (tests/kernels/test_kern.c). Rows
 * are processed in slices of SLICE rows, each applied to all tokens before the next. */
#include <arm_neon.h>
#include <stdint.h>

#include "base/half.h"
#include "kernels/kern_int.h"

/* As the AVX2 tier (16 rows x 2048 bf16 = 64 KiB stays in L2); not tuned on ARM. */
#define SLICE 16

#define AI __attribute__((always_inline)) static inline
/* Full unrolling of the register-tile loops lets the compiler keep the accumulator arrays in
 * registers (without it GCC 12 -O3 spills some inside the k loop). */
#define UNROLL _Pragma("GCC unroll 8")

/* 8 lanes as two registers: lo = lanes 0..3, hi = lanes 4..7. */
typedef struct {
    float32x4_t lo, hi;
} f32x8;

/* hsum8 of the AVX2 tier: (l0+l4 + l2+l6) + (l1+l5 + l3+l7). */
AI float hsum8(f32x8 v) {
    float32x4_t s = vaddq_f32(v.lo, v.hi);
    float32x2_t h = vadd_f32(vget_low_f32(s), vget_high_f32(s));
    return vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
}

AI f32x8 ld_f32(const float *p) {
    return (f32x8){vld1q_f32(p), vld1q_f32(p + 4)};
}
AI f32x8 ld_f16(const uint16_t *p) {
    float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
    return (f32x8){vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)};
}
AI f32x8 ld_bf16(const uint16_t *p) {
    uint16x8_t v = vld1q_u16(p);
    return (f32x8){vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(v), 16)),
                   vreinterpretq_f32_u32(vshll_high_n_u16(v, 16))};
}
AI float cv_f32(float x) {
    return x;
}
AI f32x8 zero8(void) {
    return (f32x8){vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
}
AI f32x8 fma8(f32x8 acc, f32x8 w, f32x8 x) {
    return (f32x8){vfmaq_f32(acc.lo, w.lo, x.lo), vfmaq_f32(acc.hi, w.hi, x.hi)};
}

#define DEFINE_MATMUL(SUF, T, LD, CVT)                                                             \
    AI void tile_##SUF(const T *W, size_t ldw, const float *X, size_t ldx, int K, float *Y,        \
                       size_t ldy, const int RT, const int TT) {                                   \
        f32x8 acc[4][4];                                                                           \
        UNROLL for (int r = 0; r < RT; r++) {                                                      \
            UNROLL for (int t = 0; t < TT; t++) acc[r][t] = zero8();                               \
        }                                                                                          \
        const int K8 = K & ~7;                                                                     \
        for (int k = 0; k < K8; k += 8) {                                                          \
            f32x8 w[4];                                                                            \
            UNROLL for (int r = 0; r < RT; r++) w[r] = LD(W + (size_t)r * ldw + k);                \
            UNROLL for (int t = 0; t < TT; t++) {                                                  \
                f32x8 x = ld_f32(X + (size_t)t * ldx + k);                                         \
                UNROLL for (int r = 0; r < RT; r++) acc[r][t] = fma8(acc[r][t], w[r], x);          \
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
    /* rows [0, rn) x tokens [0, tn) with tn in 1..3: 4 rows for one token, else 2 rows (4 x 2     \
     * or 4 x 3 tiles would spill accumulators inside the k loop) */                               \
    static void small_##SUF(const T *W, size_t ldw, int rn, const float *X, size_t ldx, int tn,    \
                            int K, float *Y, size_t ldy) {                                         \
        int r = 0;                                                                                 \
        if (tn == 1)                                                                               \
            for (; r + 4 <= rn; r += 4)                                                            \
                tile_##SUF(W + (size_t)r * ldw, ldw, X, ldx, K, Y + r, ldy, 4, 1);                 \
        for (; r + 2 <= rn; r += 2) {                                                              \
            const T *w = W + (size_t)r * ldw;                                                      \
            if (tn == 1)                                                                           \
                tile_##SUF(w, ldw, X, ldx, K, Y + r, ldy, 2, 1);                                   \
            else if (tn == 2)                                                                      \
                tile_##SUF(w, ldw, X, ldx, K, Y + r, ldy, 2, 2);                                   \
            else                                                                                   \
                tile_##SUF(w, ldw, X, ldx, K, Y + r, ldy, 2, 3);                                   \
        }                                                                                          \
        for (; r < rn; r++) {                                                                      \
            const T *w = W + (size_t)r * ldw;                                                      \
            if (tn == 1)                                                                           \
                tile_##SUF(w, ldw, X, ldx, K, Y + r, ldy, 1, 1);                                   \
            else if (tn == 2)                                                                      \
                tile_##SUF(w, ldw, X, ldx, K, Y + r, ldy, 1, 2);                                   \
            else                                                                                   \
                tile_##SUF(w, ldw, X, ldx, K, Y + r, ldy, 1, 3);                                   \
        }                                                                                          \
    }                                                                                              \
    void kern_matmul_##SUF##_neon(const void *Wv, size_t ldw, int n_rows, const float *X,          \
                                  size_t ldx, int n_tok, int K, float *Y, size_t ldy) {            \
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
                    tile_##SUF(Ws + (size_t)r * ldw, ldw, Xt, ldx, K, Yt + r, ldy, 2, 4);          \
                if (r < rn) tile_##SUF(Ws + (size_t)r * ldw, ldw, Xt, ldx, K, Yt + r, ldy, 1, 4);  \
            }                                                                                      \
            if (t < n_tok)                                                                         \
                small_##SUF(Ws, ldw, rn, X + (size_t)t * ldx, ldx, n_tok - t, K,                   \
                            Ys + (size_t)t * ldy, ldy);                                            \
        }                                                                                          \
    }

DEFINE_MATMUL(f32, float, ld_f32, cv_f32)
DEFINE_MATMUL(f16, uint16_t, ld_f16, cllm_f16_to_f32)
DEFINE_MATMUL(bf16, uint16_t, ld_bf16, cllm_bf16_to_f32)

/* kern_dot_avx2's sequence: two 8-lane accumulators over 16-wide steps, one 8-wide step, their
 * sum reduced by hsum8, then the tail in index order. */
float kern_dot_neon(const float *a, const float *b, int n) {
    f32x8 acc0 = zero8(), acc1 = zero8();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = fma8(acc0, ld_f32(a + i), ld_f32(b + i));
        acc1 = fma8(acc1, ld_f32(a + i + 8), ld_f32(b + i + 8));
    }
    for (; i + 8 <= n; i += 8) acc0 = fma8(acc0, ld_f32(a + i), ld_f32(b + i));
    float s = hsum8((f32x8){vaddq_f32(acc0.lo, acc1.lo), vaddq_f32(acc0.hi, acc1.hi)});
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y = fma(a, x, y * s) per element in blocks of 8, the n % 8 tail unfused, as
 * kern_scale_axpy_avx2. */
void kern_scale_axpy_neon(float *y, float s, float a, const float *x, int n) {
    const float32x4_t vs = vdupq_n_f32(s), va = vdupq_n_f32(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = i; j < i + 8; j += 4)
            vst1q_f32(y + j, vfmaq_f32(vmulq_f32(vld1q_f32(y + j), vs), va, vld1q_f32(x + j)));
    for (; i < n; i++) y[i] = y[i] * s + a * x[i];
}
