/* Private to the avx512 GPTQ kernels (kernels/x86/matmul_q4_avx512.c, matmul_q4a8_avx512.c):
 * loading one group's zero points and scales for 16 output columns. Include only from files
 * built with the AVX-512 flags (*_avx512.c). */
#ifndef CLLM_KERNELS_X86_Q_AVX512_INT_H
#define CLLM_KERNELS_X86_Q_AVX512_INT_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* Effective zeros (stored + 1) of columns n0..n0+15 in group g; TAIL: only n0..n0+7 are read
 * (lanes 8..15 hold 1 and are never stored). */
__attribute__((always_inline)) static inline __m512i zeros16(const cllm_qweight *w, int g, int n0,
                                                             const int BITS, const int TAIL) {
    const int per = 32 / BITS;
    const int32_t *src = w->qzeros + (size_t)g * (w->N / per) + n0 / per;
    const __mmask8 m = (__mmask8)((1u << ((TAIL ? 8 : 16) / per)) - 1);
    __m128i words = _mm_maskz_loadu_epi32(m, src);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i idx = _mm512_srli_epi32(lane, BITS == 4 ? 3 : 2); /* lane / per */
    const __m512i sh =
        _mm512_slli_epi32(_mm512_and_si512(lane, _mm512_set1_epi32(per - 1)), BITS == 4 ? 2 : 3);
    __m512i z = _mm512_srlv_epi32(_mm512_permutexvar_epi32(idx, _mm512_castsi128_si512(words)), sh);
    return _mm512_add_epi32(_mm512_and_si512(z, _mm512_set1_epi32((1 << BITS) - 1)),
                            _mm512_set1_epi32(1));
}

/* 16 scales of group g from column n0 as fp32 (TAIL: 8, the rest 0). */
__attribute__((always_inline)) static inline __m512 scales16(const cllm_qweight *w, int g, int n0,
                                                             const int TAIL) {
    const uint16_t *p = w->scales + (size_t)g * w->N + n0;
    __m256i sh =
        TAIL ? _mm256_maskz_loadu_epi16(0x00ff, p) : _mm256_loadu_si256((const __m256i *)p);
    if (w->scale_bf16) /* bf16: exact */
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(sh), 16));
    return _mm512_cvtph_ps(sh);
}

#endif
