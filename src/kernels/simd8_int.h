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
/* x rounded to bf16 precision (nearest, ties to even: the integer formula of kern_bf16_rne), as
 * fp32; st8_bf16 stores the upper halves of 8 such values (exact for them) */
S8 f32x8 rnd8_bf16(f32x8 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    u = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    return _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xffff0000u)));
}
S8 void st8_bf16(uint16_t *p, f32x8 x) {
    __m256i u = _mm256_srli_epi32(_mm256_castps_si256(x), 16);
    __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
    _mm_storeu_si128((__m128i *)(void *)p, h);
}
/* Even/odd pairs (the bf16 GDN state's 16-column pairs): 16 bf16 values as the vectors of their
 * even and odd elements (exact: shift and mask of 32-bit words), 16 bf16-exact values (low 16
 * bits zero) stored back, and 16 floats split and merged the same way. */
S8 void ld16_bf16_eo(const uint16_t *p, f32x8 *ev, f32x8 *od) {
    __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)p);
    *ev = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    *od = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32((int)0xffff0000u)));
}
S8 void st16_bf16_eo(uint16_t *p, f32x8 ev, f32x8 od) {
    __m256i x =
        _mm256_or_si256(_mm256_srli_epi32(_mm256_castps_si256(ev), 16), _mm256_castps_si256(od));
    _mm256_storeu_si256((__m256i *)(void *)p, x);
}
S8 void ld16_eo(const float *p, f32x8 *ev, f32x8 *od) {
    __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(p + 8);
    /* [a0 a2 b0 b2 | a4 a6 b4 b6], then 64-bit elements in order 0 2 1 3 */
    *ev = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xd8));
    *od = _mm256_castpd_ps(
        _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xdd)), 0xd8));
}
S8 void st16_eo(float *p, f32x8 ev, f32x8 od) {
    __m256 e = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xd8));
    __m256 o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od), 0xd8));
    _mm256_storeu_ps(p, _mm256_unpacklo_ps(e, o));
    _mm256_storeu_ps(p + 8, _mm256_unpackhi_ps(e, o));
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
S8 void ld16_bf16_eo(const uint16_t *p, f32x8 *ev, f32x8 *od) {
    uint32x4_t a = vreinterpretq_u32_u16(vld1q_u16(p)), b = vreinterpretq_u32_u16(vld1q_u16(p + 8));
    uint32x4_t m = vdupq_n_u32(0xffff0000u);
    *ev = (f32x8){vreinterpretq_f32_u32(vshlq_n_u32(a, 16)),
                  vreinterpretq_f32_u32(vshlq_n_u32(b, 16))};
    *od = (f32x8){vreinterpretq_f32_u32(vandq_u32(a, m)), vreinterpretq_f32_u32(vandq_u32(b, m))};
}
S8 void st16_bf16_eo(uint16_t *p, f32x8 ev, f32x8 od) {
    uint32x4_t a =
        vorrq_u32(vshrq_n_u32(vreinterpretq_u32_f32(ev.lo), 16), vreinterpretq_u32_f32(od.lo));
    uint32x4_t b =
        vorrq_u32(vshrq_n_u32(vreinterpretq_u32_f32(ev.hi), 16), vreinterpretq_u32_f32(od.hi));
    vst1q_u16(p, vreinterpretq_u16_u32(a));
    vst1q_u16(p + 8, vreinterpretq_u16_u32(b));
}
S8 void ld16_eo(const float *p, f32x8 *ev, f32x8 *od) {
    float32x4_t a = vld1q_f32(p), b = vld1q_f32(p + 4), c = vld1q_f32(p + 8), d = vld1q_f32(p + 12);
    *ev = (f32x8){vuzp1q_f32(a, b), vuzp1q_f32(c, d)};
    *od = (f32x8){vuzp2q_f32(a, b), vuzp2q_f32(c, d)};
}
S8 void st16_eo(float *p, f32x8 ev, f32x8 od) {
    vst1q_f32(p, vzip1q_f32(ev.lo, od.lo));
    vst1q_f32(p + 4, vzip2q_f32(ev.lo, od.lo));
    vst1q_f32(p + 8, vzip1q_f32(ev.hi, od.hi));
    vst1q_f32(p + 12, vzip2q_f32(ev.hi, od.hi));
}
S8 float32x4_t rnd4_bf16_(float32x4_t x) {
    uint32x4_t u = vreinterpretq_u32_f32(x);
    uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    u = vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff)));
    return vreinterpretq_f32_u32(vandq_u32(u, vdupq_n_u32(0xffff0000u)));
}
S8 f32x8 rnd8_bf16(f32x8 x) {
    return (f32x8){rnd4_bf16_(x.lo), rnd4_bf16_(x.hi)};
}
S8 void st8_bf16(uint16_t *p, f32x8 x) {
    vst1q_u16(p, vcombine_u16(vshrn_n_u32(vreinterpretq_u32_f32(x.lo), 16),
                              vshrn_n_u32(vreinterpretq_u32_f32(x.hi), 16)));
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
