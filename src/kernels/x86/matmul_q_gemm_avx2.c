/* AVX2/FMA prefill GEMM for GPTQ int4/int8 weights x fp32 activations (n_tok >= KERN_Q_GEMM_MIN,
 * called from kernels/x86/matmul_q4_avx2.c).
 *
 * The decode tiles unpack every weight in registers right before its FMA, so each unpack feeds at
 * most 3 tokens and the shift/and/sub/convert ops compete with the FMAs for the vector pipes. Here
 * a 16-column block of the weight is unpacked once per chunk of KC inputs into an L1-resident
 * buffer of floats (q - z) (exact small integers), and register tiles of 16 columns x 6 tokens
 * (12 accumulators, 2 weight loads and 6 broadcasts per 12 FMAs) run over it for every token of
 * the call. The per-group accumulator acc lives in Y between groups (read back only after this
 * call wrote it).
 *
 * Per output element the sequence is the one kernels.h fixes, the same as the decode tiles and
 * kernels/matmul_q4_ref.c: for each group in order, gacc = 0, gacc = fma((float)(q - z), x[k],
 * gacc) for k in order, then acc = fma(scale, gacc, acc) with acc starting at +0. Tiles, chunks
 * and the token count only decide the loop order around it, so results are bitwise those of the
 * other tiers and batch invariant. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/kern_int.h"

#define AI __attribute__((always_inline)) static inline
/* inputs per unpacked chunk (at most; rounded down to whole groups). KERN_Q_GEMM_MAXG == KC, so
 * every chunk holds at least one group. */
#define KC KERN_Q_GEMM_MAXG
#define TT 6 /* tokens per register tile */

/* buf[k][0..8*NB) = (float)(q - z) for inputs [k0, k0 + nk) of columns [n0, n0 + 8*NB). */
AI void unpack(const cllm_qweight *w, int n0, int k0, int nk, float *buf, const int BITS,
               const int NB) {
    const int per = 32 / BITS, G = w->group;
    const size_t N = (size_t)w->N;
    const __m256i mask = _mm256_set1_epi32((1 << BITS) - 1);
    for (int kg = k0; kg < k0 + nk; kg += G) {
        __m256i zv[2];
        for (int b = 0; b < NB; b++) {
            int32_t z[8];
            for (int i = 0; i < 8; i++) {
                int n = n0 + 8 * b + i;
                uint32_t word = (uint32_t)w->qzeros[(size_t)(kg / G) * (N / per) + n / per];
                z[i] = (int32_t)((word >> ((n % per) * BITS)) & ((1u << BITS) - 1)) + 1;
            }
            zv[b] = _mm256_loadu_si256((const __m256i *)z);
        }
        for (int k8 = kg / per; k8 < (kg + G) / per; k8++) {
            float *dst = buf + (size_t)(k8 * per - k0) * 8 * NB;
            for (int b = 0; b < NB; b++) {
                __m256i v =
                    _mm256_loadu_si256((const __m256i *)(w->qweight + (size_t)k8 * N + n0 + 8 * b));
                for (int j = 0; j < per; j++) {
                    __m256 f =
                        _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(v, mask), zv[b]));
                    _mm256_storeu_ps(dst + (size_t)j * 8 * NB + 8 * b, f);
                    v = _mm256_srli_epi32(v, BITS);
                }
            }
        }
    }
}

AI __m256 scale8(const cllm_qweight *w, int g, int n) {
    __m128i sh = _mm_loadu_si128((const __m128i *)(w->scales + (size_t)g * w->N + n));
    return w->scale_bf16
               ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(sh), 16)) /* exact */
               : _mm256_cvtph_ps(sh);
}

/* Tokens [0, NT) of one chunk: for each group in the chunk, gacc over its inputs from buf, then
 * acc (Y) = fma(scale, gacc, first ? 0 : Y). */
AI void tile(const cllm_qweight *w, int n0, int k0, int nk, const float *buf, const float *X,
             size_t ldx, float *Y, size_t ldy, const int NB, const int NT) {
    const int G = w->group, W8 = 8 * NB;
    for (int kg = k0; kg < k0 + nk; kg += G) {
        __m256 gacc[2][TT];
        for (int b = 0; b < NB; b++)
            for (int t = 0; t < NT; t++) gacc[b][t] = _mm256_setzero_ps();
        const float *bk = buf + (size_t)(kg - k0) * W8;
        const float *xk = X + kg;
        for (int k = 0; k < G; k++, bk += W8) {
            __m256 wv[2];
            for (int b = 0; b < NB; b++) wv[b] = _mm256_loadu_ps(bk + 8 * b);
            for (int t = 0; t < NT; t++) {
                __m256 xb = _mm256_broadcast_ss(xk + (size_t)t * ldx + k);
                for (int b = 0; b < NB; b++) gacc[b][t] = _mm256_fmadd_ps(wv[b], xb, gacc[b][t]);
            }
        }
        for (int b = 0; b < NB; b++) {
            __m256 sv = scale8(w, kg / G, n0 + 8 * b);
            for (int t = 0; t < NT; t++) {
                float *y = Y + (size_t)t * ldy + n0 + 8 * b;
                __m256 acc = kg == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(y);
                _mm256_storeu_ps(y, _mm256_fmadd_ps(sv, gacc[b][t], acc));
            }
        }
    }
}

AI void tokens(const cllm_qweight *w, int n0, int k0, int nk, const float *buf, const float *X,
               size_t ldx, int n_tok, float *Y, size_t ldy, const int NB) {
    int t = 0;
    for (; t + TT <= n_tok; t += TT)
        tile(w, n0, k0, nk, buf, X + (size_t)t * ldx, ldx, Y + (size_t)t * ldy, ldy, NB, TT);
    const float *Xt = X + (size_t)t * ldx;
    float *Yt = Y + (size_t)t * ldy;
    switch (n_tok - t) {
    case 5:
        tile(w, n0, k0, nk, buf, Xt, ldx, Yt, ldy, NB, 5);
        break;
    case 4:
        tile(w, n0, k0, nk, buf, Xt, ldx, Yt, ldy, NB, 4);
        break;
    case 3:
        tile(w, n0, k0, nk, buf, Xt, ldx, Yt, ldy, NB, 3);
        break;
    case 2:
        tile(w, n0, k0, nk, buf, Xt, ldx, Yt, ldy, NB, 2);
        break;
    case 1:
        tile(w, n0, k0, nk, buf, Xt, ldx, Yt, ldy, NB, 1);
        break;
    default:
        break;
    }
}

/* Columns [n0, n1) in slices of up to NS columns; per slice and chunk of inputs the whole slice
 * is unpacked once (NS x KC floats = 64 KiB), then token blocks of TB pass over its 16-column
 * blocks while their KC inputs (TB x KC floats = 64 KiB) stay in L2: each activation loaded from
 * memory feeds NS columns and each unpacked weight TB tokens. */
#define NS 64
#define TB 64
AI void gemm(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok, float *Y,
             size_t ldy, const int BITS) {
    float buf[KC * NS] __attribute__((aligned(32)));
    const int kc = KC - KC % w->group;
    for (int s0 = n0; s0 < n1; s0 += NS) {
        const int s1 = n1 - s0 < NS ? n1 : s0 + NS;
        for (int k0 = 0; k0 < w->K; k0 += kc) {
            const int nk = w->K - k0 < kc ? w->K - k0 : kc;
            float *bn = buf;
            for (int n = s0; n < s1; n += 16) {
                if (n + 16 <= s1)
                    unpack(w, n, k0, nk, bn, BITS, 2);
                else
                    unpack(w, n, k0, nk, bn, BITS, 1);
                bn += (size_t)nk * 16;
            }
            for (int t0 = 0; t0 < n_tok; t0 += TB) {
                const int nt = n_tok - t0 < TB ? n_tok - t0 : TB;
                const float *Xt = X + (size_t)t0 * ldx;
                float *Yt = Y + (size_t)t0 * ldy;
                bn = buf;
                for (int n = s0; n < s1; n += 16) {
                    if (n + 16 <= s1)
                        tokens(w, n, k0, nk, bn, Xt, ldx, nt, Yt, ldy, 2);
                    else
                        tokens(w, n, k0, nk, bn, Xt, ldx, nt, Yt, ldy, 1);
                    bn += (size_t)nk * 16;
                }
            }
        }
    }
}

void kern_q_gemm4_avx2(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                       float *Y, size_t ldy) {
    gemm(w, n0, n1, X, ldx, n_tok, Y, ldy, 4);
}

void kern_q_gemm8_avx2(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                       float *Y, size_t ldy) {
    gemm(w, n0, n1, X, ldx, n_tok, Y, ldy, 8);
}
