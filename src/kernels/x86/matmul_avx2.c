/* AVX2/FMA/F16C matmul (f32, f16, bf16 weights x fp32 activations), dot and axpy.
 *
 * Every output element (t, r) owns one 8-lane accumulator that runs over k in steps of 8, is
 * reduced by hsum8() in a fixed order, then takes the k % 8 tail in index order. Tiles of 2 rows
 * x 4 tokens (prefill) or 4 rows x 1..3 tokens (decode, token tails) only decide which
 * accumulators live in registers together, never the arithmetic of one element: a token's
 * outputs are bitwise the same alone or in any batch (tests/kernels/test_kern.c checks it).
 * Rows are processed in slices of SLICE rows; each slice is applied to all tokens before the
 * next, so weights come from DRAM once per call and from L1/L2 for every further token. */
#include <immintrin.h>
#include <stdint.h>

#include "base/half.h"
#include "kernels/kern_int.h"

/* 16 rows x 2048 bf16 = 64 KiB: the slice stays in L2 while every token tile passes over it. */
#define SLICE 16

#define AI __attribute__((always_inline)) static inline

AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AI __m256 ld_f32(const float *p) {
    return _mm256_loadu_ps(p);
}
AI __m256 ld_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
AI __m256 ld_bf16(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
AI float cv_f32(float x) {
    return x;
}

#define DEFINE_MATMUL(SUF, T, LD, CVT)                                                             \
    AI void tile_##SUF(const T *W, size_t ldw, const float *X, size_t ldx, int K, float *Y,        \
                       size_t ldy, const int RT, const int TT) {                                   \
        __m256 acc[4][4];                                                                          \
        for (int r = 0; r < RT; r++)                                                               \
            for (int t = 0; t < TT; t++) acc[r][t] = _mm256_setzero_ps();                          \
        const int K8 = K & ~7;                                                                     \
        for (int k = 0; k < K8; k += 8) {                                                          \
            __m256 w[4];                                                                           \
            for (int r = 0; r < RT; r++) w[r] = LD(W + (size_t)r * ldw + k);                       \
            for (int t = 0; t < TT; t++) {                                                         \
                __m256 x = _mm256_loadu_ps(X + (size_t)t * ldx + k);                               \
                for (int r = 0; r < RT; r++) acc[r][t] = _mm256_fmadd_ps(w[r], x, acc[r][t]);      \
            }                                                                                      \
        }                                                                                          \
        for (int r = 0; r < RT; r++)                                                               \
            for (int t = 0; t < TT; t++) {                                                         \
                float s = hsum8(acc[r][t]);                                                        \
                for (int k = K8; k < K; k++)                                                       \
                    s += CVT(W[(size_t)r * ldw + k]) * X[(size_t)t * ldx + k];                     \
                Y[(size_t)t * ldy + r] = s;                                                        \
            }                                                                                      \
    }                                                                                              \
    /* rows [0, rn) x tokens [t0, t0 + tn) with tn in 1..3 */                                      \
    static void small_##SUF(const T *W, size_t ldw, int rn, const float *X, size_t ldx, int tn,    \
                            int K, float *Y, size_t ldy) {                                         \
        int r = 0;                                                                                 \
        for (; r + 4 <= rn; r += 4) {                                                              \
            const T *w = W + (size_t)r * ldw;                                                      \
            if (tn == 1)                                                                           \
                tile_##SUF(w, ldw, X, ldx, K, Y + r, ldy, 4, 1);                                   \
            else if (tn == 2)                                                                      \
                tile_##SUF(w, ldw, X, ldx, K, Y + r, ldy, 4, 2);                                   \
            else                                                                                   \
                tile_##SUF(w, ldw, X, ldx, K, Y + r, ldy, 4, 3);                                   \
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
    void kern_matmul_##SUF##_avx2(const void *Wv, size_t ldw, int n_rows, const float *X,          \
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

float kern_dot_avx2(const float *a, const float *b, int n) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    float s = hsum8(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

void kern_scale_axpy_avx2(float *y, float s, float a, const float *x, int n) {
    __m256 vs = _mm256_set1_ps(s), va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i),
                                                _mm256_mul_ps(_mm256_loadu_ps(y + i), vs)));
    for (; i < n; i++) y[i] = y[i] * s + a * x[i];
}
