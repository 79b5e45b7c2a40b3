/* Private to the x86 AVX2 GPTQ kernels (matmul_q4_avx2.c, matmul_q_dec_avx2.c, matmul_q16_avx2.c):
 * per-group zero points and scales of 8 consecutive output columns, the same loads in each. */
#ifndef CLLM_KERNELS_X86_Q_AVX2_INT_H
#define CLLM_KERNELS_X86_Q_AVX2_INT_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* Effective zeros (stored + 1) of columns n0..n0+7 (n0 % 8 == 0) in group g, vectorised: int4
 * packs the 8 in one word, int8 in two consecutive words (bytes in column order). */
__attribute__((always_inline)) static inline __m256i q_zeros8v(const cllm_qweight *w, int g, int n0,
                                                               const int BITS) {
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

/* Scales of columns n..n+7 in group g as fp32 (F16 or BF16 storage; both exact). */
__attribute__((always_inline)) static inline __m256 q_scales8(const cllm_qweight *w, int g, int n) {
    __m128i sh = _mm_loadu_si128((const __m128i *)(const void *)(w->scales + (size_t)g * w->N + n));
    return w->scale_bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(sh), 16))
                         : _mm256_cvtph_ps(sh);
}

#endif
