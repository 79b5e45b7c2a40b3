/* Scalar 16-bit float conversions and the dispatch of the row converters (see half.h). */
#include "base/half.h"

#include <math.h>

#include "base/cpu.h"
#include "base/half_int.h"

float cllm_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                man <<= 1;
                e++;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t cllm_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00 | (uint16_t)((a >> 13) & 0x3ff); /* NaN, quiet */
    if (a >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65520: Inf */
    if (a < 0x38800000u) {
        /* Result is subnormal or zero: value = a_float / 2^-24 units, rounded to nearest even. */
        if (a < 0x33000000u) return sign; /* < 2^-25: rounds to 0 */
        uint32_t e = a >> 23, m = (a & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14 + (113 - e) - ... : bits to drop so unit is 2^-24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return sign | (uint16_t)q;
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1); /* RNE on the 13 dropped bits */
    return sign | (uint16_t)((r - 0x38000000u) >> 13);
}

float cllm_f8e4m3_to_f32(uint8_t v) {
    int sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 7;
    float r;
    if (exp == 15 && man == 7) return NAN;
    if (exp == 0)
        r = ldexpf((float)man, -9); /* subnormal: man/8 * 2^-6 */
    else
        r = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return sign ? -r : r;
}

static void bf16_to_f32_scalar(const uint16_t *s, float *d, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = cllm_bf16_to_f32(s[i]);
}
static void f32_to_bf16_scalar(const float *s, uint16_t *d, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = cllm_f32_to_bf16(s[i]);
}
static void f16_to_f32_scalar(const uint16_t *s, float *d, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = cllm_f16_to_f32(s[i]);
}
static void f32_to_f16_scalar(const float *s, uint16_t *d, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = cllm_f32_to_f16(s[i]);
}

#if defined(__x86_64__)
#define HALF_X86 1
static int use_avx2(void) {
    cllm_isa t = cllm_cpu_tier();
    return t == CLLM_TIER_AVX2 || t == CLLM_TIER_AVX512;
}
#else
#define HALF_X86 0 /* no use_avx2(): unused there, and -Werror */
#endif

void cllm_bf16_to_f32_row(const uint16_t *s, float *d, size_t n) {
#if HALF_X86
    if (use_avx2()) return half_bf16_to_f32_avx2(s, d, n);
#endif
    bf16_to_f32_scalar(s, d, n);
}
void cllm_f32_to_bf16_row(const float *s, uint16_t *d, size_t n) {
#if HALF_X86
    if (use_avx2()) return half_f32_to_bf16_avx2(s, d, n);
#endif
    f32_to_bf16_scalar(s, d, n);
}
void cllm_f16_to_f32_row(const uint16_t *s, float *d, size_t n) {
#if HALF_X86
    if (use_avx2()) return half_f16_to_f32_avx2(s, d, n);
#endif
    f16_to_f32_scalar(s, d, n);
}
void cllm_f32_to_f16_row(const float *s, uint16_t *d, size_t n) {
#if HALF_X86
    if (use_avx2()) return half_f32_to_f16_avx2(s, d, n);
#endif
    f32_to_f16_scalar(s, d, n);
}
