/* AVX-512 Gated DeltaNet recurrence step: the gdn_step entry of the avx512 tiers (kernels.c).
 * kernels/deltanet_step_body_int.h over 16-lane vectors: blocks of 64 columns (a head's dv = 128 is
 * two), a masked 8-column vector for a remainder of 8..15. Lane-wise the AVX2 tier's operations
 * (mul, sub, fused multiply-add, one rounding each), and every column on its own, so the state
 * and outputs are bitwise the AVX2 tier's whatever the block width (test_kern checks). */
#include <immintrin.h>
#include <stdint.h>

#define GDN_VL 16
#define GV     __attribute__((always_inline)) static inline
typedef __m512 gv_t;
GV gv_t gv_zero(void) {
    return _mm512_setzero_ps();
}
GV gv_t gv_set(float x) {
    return _mm512_set1_ps(x);
}
GV gv_t gv_ld(const float *p, const int half) {
    return half ? _mm512_maskz_loadu_ps(0x00ff, p) : _mm512_loadu_ps(p);
}
GV void gv_st(float *p, gv_t v, const int half) {
    if (half)
        _mm512_mask_storeu_ps(p, 0x00ff, v);
    else
        _mm512_storeu_ps(p, v);
}
GV gv_t gv_mul(gv_t a, gv_t b) {
    return _mm512_mul_ps(a, b);
}
GV gv_t gv_sub(gv_t a, gv_t b) {
    return _mm512_sub_ps(a, b);
}
GV gv_t gv_fmadd(gv_t a, gv_t b, gv_t c) {
    return _mm512_fmadd_ps(a, b, c);
}

GV gv_t gv_ldb(const uint16_t *p, const int half) {
    __m256i h = half ? _mm256_maskz_loadu_epi16(0x00ff, p) : _mm256_loadu_si256((const void *)p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
/* kern_bf16_rne's integer rounding, lane-wise (the 8-lane tiers' rnd8_bf16) */
GV gv_t gv_rnd(gv_t x) {
    __m512i u = _mm512_castps_si512(x);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    u = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    return _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32((int)0xffff0000u)));
}
GV void gv_stb(uint16_t *p, gv_t x, const int half) {
    __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x), 16));
    if (half)
        _mm256_mask_storeu_epi16(p, 0x00ff, h);
    else
        _mm256_storeu_si256((void *)p, h);
}

#define GDN_STEP_FN      kern_gdn_step_avx512
#define GDN_STEP_BF16_FN kern_gdn_step_bf16_avx512
#include "kernels/deltanet_step_body_int.h"
