/* 16-bit float formats <-> fp32. Scalar versions are exact (fp32->16 rounds to nearest even,
 * NaN stays NaN with the quiet bit set); the row converters use AVX2/F16C when the CPU has them
 * and produce bit-identical results to the scalar ones. */
#ifndef CLLM_BASE_HALF_H
#define CLLM_BASE_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline float cllm_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t cllm_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);                                           /* RNE */
    return (uint16_t)(u >> 16);
}

float cllm_f16_to_f32(uint16_t h);
uint16_t cllm_f32_to_f16(float f);

/* Row converters: n elements, any alignment. */
void cllm_bf16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void cllm_f32_to_bf16_row(const float *src, uint16_t *dst, size_t n);
void cllm_f16_to_f32_row(const uint16_t *src, float *dst, size_t n);
void cllm_f32_to_f16_row(const float *src, uint16_t *dst, size_t n);

/* FP8 E4M3 (OCP "fn" variant: no infinities, 0x7f/0xff are NaN) -> fp32, exact. */
float cllm_f8e4m3_to_f32(uint8_t v);

#endif
