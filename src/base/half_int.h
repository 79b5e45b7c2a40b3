/* Private: ISA variants of the row converters in half.h. */
#ifndef CLLM_BASE_HALF_INT_H
#define CLLM_BASE_HALF_INT_H
#include <stddef.h>
#include <stdint.h>
void half_bf16_to_f32_avx2(const uint16_t *s, float *d, size_t n);
void half_f32_to_bf16_avx2(const float *s, uint16_t *d, size_t n);
void half_f16_to_f32_avx2(const uint16_t *s, float *d, size_t n);
void half_f32_to_f16_avx2(const float *s, uint16_t *d, size_t n);
#endif
