/* ggml's block formats, decoded as ggml defines them (ggml-common.h block structs,
 * dequantize_row_* in ggml-quants.c; facts in docs/model.md §9).
 *
 * Two ways out of a block row:
 *  - cllm_gguf_row_f32: every type to float32, with ggml's own float operation order, so each
 *    value is bitwise ggml's dequantized one (the block formats through the kernels' decoder,
 *    cllm_kq_dequant_row);
 *  - cllm_gguf_row_codes: the types whose value is exactly d * c for an fp16 block scale d and a
 *    small integer c (Q4_0, Q5_0, Q8_0, IQ4_NL): per 32-weight block the fp16 bits of d and 32
 *    unsigned codes u = c + zero, so that d * (u - zero) is the weight — cllm's GPTQ int4 (zero 8)
 *    or int8 (zero 128) groups of 32 hold them losslessly. */
#ifndef CLLM_MODEL_GGUF_QUANT_H
#define CLLM_MODEL_GGUF_QUANT_H

#include <stdbool.h>
#include <stdint.h>

/* n weights (a multiple of the type's block) from src into dst. False for a type without a
 * decoder here (Q2_K, Q3_K). */
bool cllm_gguf_row_f32(int type, const void *src, float *dst, int64_t n);

/* The CLLM_KQ_* kind (kernels.h) of a type the kernels run in its blocks; 0 for the others. */
int cllm_gguf_kq_type(int type);

/* For types with an exact code form: *bits (4 or 8) and *zero of the GPTQ group; else false. */
bool cllm_gguf_code_form(int type, int *bits, int *zero);

/* One row of n weights: codes[n] (u = c + zero) and d16[n / 32] (fp16 bits). Only for types
 * where cllm_gguf_code_form is true. */
void cllm_gguf_row_codes(int type, const void *src, uint8_t *codes, uint16_t *d16, int64_t n);

#endif
