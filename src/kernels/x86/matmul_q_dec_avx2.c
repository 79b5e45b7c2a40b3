/* AVX2/FMA/F16C GPTQ int4/int8 matmul for ONE token (decode), the matmul_q contract of kernels.h.
 *
 * Why a separate loop order: qweight rows (one k8 each) are N * 4 bytes apart, so the prefill
 * tiles, which walk all K rows for 32 columns before moving on, read 128 bytes per row from
 * K * bits / 32 rows at once: hundreds of concurrent strided streams (the 248k-column lm_head
 * puts every row on its own page), which neither the stream prefetcher nor the TLB follow. Here
 * the columns are cut into blocks of DEC_W; for each group in order, the 32-column register tiles
 * sweep across the block reading only that group's rows (16 rows for int4 g128), so every row is
 * read as one sequential run of DEC_W * 4 bytes and at most G * bits / 32 streams are live. The
 * running sum acc of the block lives in L1 between groups; gacc starts at zero per group anyway.
 *
 * Per output element the op sequence is the contract's, unchanged: per group, gacc = 0, gacc =
 * fma((float)(q - z), x[k], gacc) for k in order, then acc = fma(scale, gacc, acc), groups in
 * order. So the result is bitwise that of the scalar tier and of the multi-token tiles. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/kern_int.h"

#define AI    __attribute__((always_inline)) static inline
#define DEC_W 512 /* columns per block: acc 2 KiB; int4 g128 reads 16 runs of 2 KiB per group */

/* Effective zeros (stored + 1) of columns n0..n0+7 (n0 % 8 == 0) in group g, vectorised: int4
 * packs the 8 in one word, int8 in two consecutive words (bytes in column order). */
AI __m256i zeros8v(const cllm_qweight *w, int g, int n0, const int BITS) {
    const int per = 32 / BITS;
    const int32_t *row = w->qzeros + (size_t)g * (size_t)(w->N / per);
    __m256i one = _mm256_set1_epi32(1);
    if (BITS == 4) {
        __m256i word = _mm256_set1_epi32(row[n0 / 8]);
        __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
        __m256i z = _mm256_and_si256(_mm256_srlv_epi32(word, sh), _mm256_set1_epi32(15));
        return _mm256_add_epi32(z, one);
    }
    __m128i b = _mm_loadl_epi64((const __m128i *)(const void *)(row + n0 / 4));
    return _mm256_add_epi32(_mm256_cvtepu8_epi32(b), one);
}

AI __m256 scales8(const cllm_qweight *w, int g, int n) {
    __m128i sh = _mm_loadu_si128((const __m128i *)(const void *)(w->scales + (size_t)g * w->N + n));
    return w->scale_bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(sh), 16))
                         : _mm256_cvtph_ps(sh);
}

/* Group g of columns [n, n + 8 NB): acc[] (L1, block-relative) += scale * group sum. */
AI void gtile(const cllm_qweight *w, int g, int n, const float *x, float *acc, const int BITS,
              const int NB) {
    const int per = 32 / BITS, G = w->group;
    const size_t N = (size_t)w->N;
    const __m256i mask = _mm256_set1_epi32((1 << BITS) - 1);
    __m256i zv[4];
    __m256 gacc[4];
    for (int b = 0; b < NB; b++) {
        zv[b] = zeros8v(w, g, n + 8 * b, BITS);
        gacc[b] = _mm256_setzero_ps();
    }
    const int rows = G / per, k80 = g * rows;
    const int32_t *src = w->qweight + (size_t)k80 * N + n;
    for (int r = 0; r < rows; r++, src += N) {
        __m256i v[4];
        /* the same columns one group further down: read on the next pass over this block */
        _mm_prefetch((const char *)(src + (size_t)rows * N), _MM_HINT_T0);
        if (NB > 2) _mm_prefetch((const char *)(src + (size_t)rows * N + 16), _MM_HINT_T0);
        for (int b = 0; b < NB; b++) v[b] = _mm256_loadu_si256((const __m256i *)(src + 8 * b));
        const float *xk = x + (size_t)(k80 + r) * per;
        for (int j = 0; j < per; j++) {
            __m256 xb = _mm256_broadcast_ss(xk + j);
            for (int b = 0; b < NB; b++) {
                __m256 wf =
                    _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(v[b], mask), zv[b]));
                v[b] = _mm256_srli_epi32(v[b], BITS);
                gacc[b] = _mm256_fmadd_ps(wf, xb, gacc[b]);
            }
        }
    }
    for (int b = 0; b < NB; b++) {
        __m256 a = _mm256_loadu_ps(acc + 8 * b);
        _mm256_storeu_ps(acc + 8 * b, _mm256_fmadd_ps(scales8(w, g, n + 8 * b), gacc[b], a));
    }
}

AI void dec(const cllm_qweight *w, int n0, int n1, const float *x, float *y, const int BITS) {
    const int NG = w->K / w->group;
    float acc[DEC_W] __attribute__((aligned(32)));
    for (int nb = n0; nb < n1; nb += DEC_W) {
        const int ne = nb + DEC_W < n1 ? nb + DEC_W : n1;
        for (int i = 0; i < ne - nb; i++) acc[i] = 0.0f;
        for (int g = 0; g < NG; g++) {
            int n = nb;
            for (; n + 32 <= ne; n += 32) gtile(w, g, n, x, acc + (n - nb), BITS, 4);
            for (; n + 16 <= ne; n += 16) gtile(w, g, n, x, acc + (n - nb), BITS, 2);
            for (; n < ne; n += 8) gtile(w, g, n, x, acc + (n - nb), BITS, 1);
        }
        for (int i = 0; i < ne - nb; i += 8) _mm256_storeu_ps(y + nb + i, _mm256_load_ps(acc + i));
    }
}

void kern_matmul_q_dec_avx2(const cllm_qweight *w, int n0, int n1, const float *x, float *y) {
    if (w->bits == 8)
        dec(w, n0, n1, x, y, 8);
    else
        dec(w, n0, n1, x, y, 4);
}
