/* Tensor element types as named in safetensors headers. */
#ifndef CLLM_BASE_DTYPE_H
#define CLLM_BASE_DTYPE_H

#include <stddef.h>

typedef enum cllm_dtype {
    CLLM_DT_F32,
    CLLM_DT_F16,
    CLLM_DT_BF16,
    CLLM_DT_F64,
    CLLM_DT_F8_E4M3,
    CLLM_DT_F8_E5M2,
    CLLM_DT_I64,
    CLLM_DT_I32,
    CLLM_DT_I16,
    CLLM_DT_I8,
    CLLM_DT_U64,
    CLLM_DT_U32,
    CLLM_DT_U16,
    CLLM_DT_U8,
    CLLM_DT_BOOL,
    CLLM_DT_COUNT
} cllm_dtype;

/* Bytes per element. */
size_t cllm_dtype_size(cllm_dtype t);
/* Safetensors spelling ("BF16"). */
const char *cllm_dtype_name(cllm_dtype t);
/* Parses the safetensors spelling; returns 0 and sets *out, or -1 if unknown. */
int cllm_dtype_parse(const char *s, cllm_dtype *out);
/* True for F32/F16/BF16/F64/F8 types. */
int cllm_dtype_is_float(cllm_dtype t);

#endif
