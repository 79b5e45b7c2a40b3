/* AVX-512 Gated DeltaNet recurrence step: the gdn_step entry of the avx512 tiers (kernels.c).
 * kernels/deltanet_step_body_int.h over 16-lane vectors: blocks of 64 columns (a head's dv = 128 is
 * two), a masked 8-column vector for a remainder of 8..15. Lane-wise the AVX2 tier's operations
 * (mul, sub, fused multiply-add, one rounding each), and every column on its own, so the state
 * and outputs are bitwise the AVX2 tier's whatever the block width (test_kern checks). */
#include <immintrin.h>

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

#define GDN_STEP_FN kern_gdn_step_avx512
#include "kernels/deltanet_step_body_int.h"
