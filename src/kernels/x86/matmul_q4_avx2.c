/* AVX2/FMA/F16C matmul for GPTQ int4/int8 weights (cllm_qweight, kernels.h) x fp32 activations.
 *
 * The GPTQ layout packs along K with N contiguous, so one 256-bit load of qweight row k8 holds
 * 32/bits consecutive k values for 8 consecutive outputs: the 8 lanes are 8 output columns.
 * Each value is unpacked (shift, mask, subtract the group's zero, convert) right before its FMA
 * with the broadcast activation; nothing is dequantized to memory.
 *
 * Per output element the sequence is the one kernels.h fixes (per-group fma accumulation, then
 * acc = fma(scale, gacc, acc)), identical to kernels/matmul_q4_ref.c: tiles of 4 (decode) or 2
 * column blocks x 1..3 tokens only decide which accumulators share registers, so a token's outputs
 * are bitwise the same alone or in any batch, and equal to the scalar tier. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kern_int.h"

#define AI      __attribute__((always_inline)) static inline
#define PF_ROWS 16 /* software prefetch distance in qweight rows */

AI __m256i zeros8(const cllm_qweight *w, int g, int n0, const int BITS) {
    const int per = 32 / BITS;
    int32_t z[8];
    for (int i = 0; i < 8; i++) {
        int n = n0 + i;
        uint32_t word = (uint32_t)w->qzeros[(size_t)g * (w->N / per) + n / per];
        z[i] = (int32_t)((word >> ((n % per) * BITS)) & ((1u << BITS) - 1)) + 1;
    }
    return _mm256_loadu_si256((const __m256i *)z);
}

/* Output columns [n0, n0 + 8*NB) x tokens [0, TT). */
AI void tile(const cllm_qweight *w, int n0, const float *X, size_t ldx, float *Y, size_t ldy,
             const int BITS, const int NB, const int TT) {
    const int per = 32 / BITS, G = w->group, NG = w->K / G;
    const size_t N = (size_t)w->N;
    const __m256i mask = _mm256_set1_epi32((1 << BITS) - 1);
    __m256 acc[4][3];
    for (int b = 0; b < NB; b++)
        for (int t = 0; t < TT; t++) acc[b][t] = _mm256_setzero_ps();
    for (int g = 0; g < NG; g++) {
        __m256i zv[4];
        __m256 gacc[4][3];
        for (int b = 0; b < NB; b++) {
            zv[b] = zeros8(w, g, n0 + 8 * b, BITS);
            for (int t = 0; t < TT; t++) gacc[b][t] = _mm256_setzero_ps();
        }
        const int k8e = (g + 1) * G / per;
        for (int k8 = g * G / per; k8 < k8e; k8++) {
            __m256i v[4];
            for (int b = 0; b < NB; b++) {
                const int32_t *src = w->qweight + (size_t)k8 * N + n0 + 8 * b;
                /* rows are N * 4 bytes apart: too far for the hardware prefetcher */
                _mm_prefetch((const char *)(src + PF_ROWS * N), _MM_HINT_T0);
                v[b] = _mm256_loadu_si256((const __m256i *)src);
            }
            const float *xk = X + (size_t)k8 * per;
            for (int j = 0; j < per; j++) {
                __m256 wf[4];
                for (int b = 0; b < NB; b++) {
                    wf[b] =
                        _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(v[b], mask), zv[b]));
                    v[b] = _mm256_srli_epi32(v[b], BITS);
                }
                for (int t = 0; t < TT; t++) {
                    __m256 xb = _mm256_broadcast_ss(xk + (size_t)t * ldx + j);
                    for (int b = 0; b < NB; b++)
                        gacc[b][t] = _mm256_fmadd_ps(wf[b], xb, gacc[b][t]);
                }
            }
        }
        for (int b = 0; b < NB; b++) {
            __m128i sh = _mm_loadu_si128((const __m128i *)(w->scales + (size_t)g * N + n0 + 8 * b));
            __m256 sv = w->scale_bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(
                                            _mm256_cvtepu16_epi32(sh), 16)) /* bf16: exact */
                                      : _mm256_cvtph_ps(sh);
            for (int t = 0; t < TT; t++) acc[b][t] = _mm256_fmadd_ps(sv, gacc[b][t], acc[b][t]);
        }
    }
    for (int b = 0; b < NB; b++)
        for (int t = 0; t < TT; t++) _mm256_storeu_ps(Y + (size_t)t * ldy + n0 + 8 * b, acc[b][t]);
}

AI void core(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok, float *Y,
             size_t ldy, const int BITS) {
    if (n_tok == 1) { /* decode: group-major sweep, same op sequence (matmul_q_dec_avx2.c) */
        kern_matmul_q_dec_avx2(w, n0, n1, X, Y);
        return;
    }
    if (n_tok >= KERN_Q_GEMM_MIN && w->group <= KERN_Q_GEMM_MAXG) { /* prefill: same bits */
        (BITS == 4 ? kern_q_gemm4_avx2 : kern_q_gemm8_avx2)(w, n0, n1, X, ldx, n_tok, Y, ldy);
        return;
    }
    for (int t = 0; t < n_tok; t += 3) {
        int tn = n_tok - t < 3 ? n_tok - t : 3;
        const float *Xt = X + (size_t)t * ldx;
        float *Yt = Y + (size_t)t * ldy;
        int n = n0;
        if (tn == 1) /* decode: 32 columns = 128 bytes of each qweight row per pass */
            for (; n + 32 <= n1; n += 32) tile(w, n, Xt, ldx, Yt, ldy, BITS, 4, 1);
        for (; n + 16 <= n1; n += 16) {
            if (tn == 3)
                tile(w, n, Xt, ldx, Yt, ldy, BITS, 2, 3);
            else if (tn == 2)
                tile(w, n, Xt, ldx, Yt, ldy, BITS, 2, 2);
            else
                tile(w, n, Xt, ldx, Yt, ldy, BITS, 2, 1);
        }
        for (; n < n1; n += 8) {
            if (tn == 3)
                tile(w, n, Xt, ldx, Yt, ldy, BITS, 1, 3);
            else if (tn == 2)
                tile(w, n, Xt, ldx, Yt, ldy, BITS, 1, 2);
            else
                tile(w, n, Xt, ldx, Yt, ldy, BITS, 1, 1);
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

void kern_matmul_q_avx2(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx,
                        int n_tok, float *Y, size_t ldy) {
    kern_matmul_q_with(core4, core8, w, n0, n1, X, ldx, n_tok, Y, ldy);
}
