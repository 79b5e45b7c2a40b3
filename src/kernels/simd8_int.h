/* Private: an 8-lane fp32 vector shim, so one kernel body compiles to the AVX2 tier and to the
 * NEON tier with the same lane operations (tiers then agree by construction, not by keeping two
 * copies in step). Include only from files built with the ISA's flags (*_avx2.c, *_neon.c).
 *
 * f32x8 is one AVX2 register, or a pair of NEON registers (lo = lanes 0..3, hi = 4..7). Every op
 * is lane-wise with one rounding (fmadd8 = a*b + c and fnmadd8 = c - a*b fused), except hsum8,
 * whose fixed order is the AVX2 one: (l0+l4 + l2+l6) + (l1+l5 + l3+l7). */
#ifndef CLLM_KERNELS_SIMD8_INT_H
#define CLLM_KERNELS_SIMD8_INT_H

#include <stdint.h>

#define S8 __attribute__((always_inline)) static inline

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

typedef __m256 f32x8;

S8 f32x8 zero8(void) {
    return _mm256_setzero_ps();
}
S8 f32x8 set8(float x) {
    return _mm256_set1_ps(x);
}
S8 f32x8 bcast8(const float *p) {
    return _mm256_broadcast_ss(p);
}
S8 f32x8 ld8(const float *p) {
    return _mm256_loadu_ps(p);
}
S8 void st8(float *p, f32x8 v) {
    _mm256_storeu_ps(p, v);
}
S8 f32x8 mul8(f32x8 a, f32x8 b) {
    return _mm256_mul_ps(a, b);
}
S8 f32x8 fmadd8(f32x8 a, f32x8 b, f32x8 c) {
    return _mm256_fmadd_ps(a, b, c);
}
S8 f32x8 fnmadd8(f32x8 a, f32x8 b, f32x8 c) {
    return _mm256_fnmadd_ps(a, b, c);
}
S8 f32x8 add8(f32x8 a, f32x8 b) {
    return _mm256_add_ps(a, b);
}
S8 f32x8 sub8(f32x8 a, f32x8 b) {
    return _mm256_sub_ps(a, b);
}
/* 8 fp16 / bf16 values widened (exact); the fp16 one needs F16C (the *_avx2.c flags have it) */
S8 f32x8 ld8_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}
S8 f32x8 ld8_bf16(const uint16_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
S8 f32x8 div8(f32x8 a, f32x8 b) {
    return _mm256_div_ps(a, b);
}
/* max8(min8(x, hi), lo): a NaN x becomes hi on both tiers */
S8 f32x8 clamp8(f32x8 x, float lo, float hi) {
    return _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(hi)), _mm256_set1_ps(lo));
}
S8 f32x8 round8(f32x8 x) { /* to nearest, ties to even */
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* 2^n for integral n in [-126, 127] */
S8 f32x8 pow2i8(f32x8 n) {
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
S8 float hsum8(f32x8 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#elif defined(__ARM_NEON) || defined(__aarch64__)
#include <arm_neon.h>

typedef struct {
    float32x4_t lo, hi;
} f32x8;

S8 f32x8 zero8(void) {
    return (f32x8){vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
}
S8 f32x8 set8(float x) {
    return (f32x8){vdupq_n_f32(x), vdupq_n_f32(x)};
}
S8 f32x8 bcast8(const float *p) {
    return set8(*p);
}
S8 f32x8 ld8(const float *p) {
    return (f32x8){vld1q_f32(p), vld1q_f32(p + 4)};
}
S8 void st8(float *p, f32x8 v) {
    vst1q_f32(p, v.lo);
    vst1q_f32(p + 4, v.hi);
}
S8 f32x8 mul8(f32x8 a, f32x8 b) {
    return (f32x8){vmulq_f32(a.lo, b.lo), vmulq_f32(a.hi, b.hi)};
}
S8 f32x8 fmadd8(f32x8 a, f32x8 b, f32x8 c) {
    return (f32x8){vfmaq_f32(c.lo, a.lo, b.lo), vfmaq_f32(c.hi, a.hi, b.hi)};
}
S8 f32x8 fnmadd8(f32x8 a, f32x8 b, f32x8 c) {
    return (f32x8){vfmsq_f32(c.lo, a.lo, b.lo), vfmsq_f32(c.hi, a.hi, b.hi)};
}
S8 f32x8 add8(f32x8 a, f32x8 b) {
    return (f32x8){vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi)};
}
S8 f32x8 sub8(f32x8 a, f32x8 b) {
    return (f32x8){vsubq_f32(a.lo, b.lo), vsubq_f32(a.hi, b.hi)};
}
S8 f32x8 ld8_f16(const uint16_t *p) {
    float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(p));
    return (f32x8){vcvt_f32_f16(vget_low_f16(h)), vcvt_high_f32_f16(h)};
}
S8 f32x8 ld8_bf16(const uint16_t *p) {
    uint16x8_t v = vld1q_u16(p);
    return (f32x8){vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(v), 16)),
                   vreinterpretq_f32_u32(vshll_high_n_u16(v, 16))};
}
S8 f32x8 div8(f32x8 a, f32x8 b) {
    return (f32x8){vdivq_f32(a.lo, b.lo), vdivq_f32(a.hi, b.hi)};
}
S8 float32x4_t clamp4_(float32x4_t x, float lo, float hi) {
    /* vminq would keep a NaN; the AVX2 order (min then max, NaN -> hi) is done by compare */
    float32x4_t h = vdupq_n_f32(hi);
    x = vbslq_f32(vcltq_f32(x, h), x, h); /* x < hi ? x : hi (NaN -> hi) */
    return vmaxq_f32(x, vdupq_n_f32(lo));
}
S8 f32x8 clamp8(f32x8 x, float lo, float hi) {
    return (f32x8){clamp4_(x.lo, lo, hi), clamp4_(x.hi, lo, hi)};
}
S8 f32x8 round8(f32x8 x) { /* to nearest, ties to even */
    return (f32x8){vrndnq_f32(x.lo), vrndnq_f32(x.hi)};
}
S8 float32x4_t pow2i4_(float32x4_t n) {
    int32x4_t e = vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127));
    return vreinterpretq_f32_s32(vshlq_n_s32(e, 23));
}
S8 f32x8 pow2i8(f32x8 n) {
    return (f32x8){pow2i4_(n.lo), pow2i4_(n.hi)};
}
S8 float hsum8(f32x8 v) {
    float32x4_t s = vaddq_f32(v.lo, v.hi); /* l0+l4, l1+l5, l2+l6, l3+l7 */
    float32x2_t h = vadd_f32(vget_low_f32(s), vget_high_f32(s));
    return vget_lane_f32(h, 0) + vget_lane_f32(h, 1);
}

#else
#error "kernels/simd8_int.h: build this file with AVX2+FMA or NEON"
#endif

#endif
