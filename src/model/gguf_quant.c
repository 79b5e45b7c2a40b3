/* Block decoders for ggml quant types; see gguf_quant.h. The d * c types are decoded here; the
 * formats the kernels run in place (K-quants, IQ4_XS, Q4_1 / Q5_1) by the kernels' own decoder
 * (cllm_kq_dequant_row), so one piece of code reads each block layout. */
#include "model/gguf_quant.h"

#include <string.h>

#include "base/half.h"
#include "kernels/kernels.h"
#include "model/gguf.h"

static float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return cllm_f16_to_f32(h);
}

/* Signed code c of weight j (0..31) of a 32-block of the code-form types. */
static int code32(int type, const uint8_t *b, int j) {
    int lo = j < 16, i = j & 15;
    switch (type) {
    case CLLM_GGML_Q4_0:
        return (lo ? b[2 + i] & 0xF : b[2 + i] >> 4) - 8;
    case CLLM_GGML_IQ4_NL:
        return cllm_kq_iq4_values[lo ? b[2 + i] & 0xF : b[2 + i] >> 4];
    case CLLM_GGML_Q8_0:
        return (int8_t)b[2 + j];
    case CLLM_GGML_Q5_0: {
        uint32_t qh;
        memcpy(&qh, b + 2, 4);
        int q = lo ? b[6 + i] & 0xF : b[6 + i] >> 4;
        return (q | (int)((qh >> j) & 1) << 4) - 16;
    }
    default:
        return 0;
    }
}

bool cllm_gguf_code_form(int type, int *bits, int *zero) {
    switch (type) {
    case CLLM_GGML_Q4_0:
        *bits = 4, *zero = 8;
        return true;
    case CLLM_GGML_Q5_0:
    case CLLM_GGML_Q8_0:
    case CLLM_GGML_IQ4_NL:
        *bits = 8, *zero = 128;
        return true;
    default:
        return false;
    }
}

void cllm_gguf_row_codes(int type, const void *src, uint8_t *codes, uint16_t *d16, int64_t n) {
    int bytes, bits = 0, zero = 0;
    cllm_ggml_block(type, &bytes);
    cllm_gguf_code_form(type, &bits, &zero);
    const uint8_t *b = src;
    for (int64_t k = 0; k < n; k += 32, b += bytes) {
        memcpy(&d16[k / 32], b, 2);
        for (int j = 0; j < 32; j++) codes[k + j] = (uint8_t)(code32(type, b, j) + zero);
    }
}

int cllm_gguf_kq_type(int type) {
    switch (type) {
    case CLLM_GGML_Q4_1:
        return CLLM_KQ_Q4_1;
    case CLLM_GGML_Q5_1:
        return CLLM_KQ_Q5_1;
    case CLLM_GGML_Q4_K:
        return CLLM_KQ_Q4_K;
    case CLLM_GGML_Q5_K:
        return CLLM_KQ_Q5_K;
    case CLLM_GGML_Q6_K:
        return CLLM_KQ_Q6_K;
    case CLLM_GGML_IQ4_XS:
        return CLLM_KQ_IQ4_XS;
    default:
        return 0;
    }
}

bool cllm_gguf_row_f32(int type, const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    int bytes, blk = cllm_ggml_block(type, &bytes);
    const int kq = cllm_gguf_kq_type(type);
    if (kq) { /* ws * c - wm: ggml's products and order (kernels.h), one row of n */
        const cllm_kqweight w = {b, (size_t)(n / blk) * (size_t)bytes, kq, (int)n, 1};
        cllm_kq_dequant_row(&w, 0, dst);
        return true;
    }
    switch (type) {
    case CLLM_GGML_F32:
        memcpy(dst, src, (size_t)n * 4);
        return true;
    case CLLM_GGML_F16:
        cllm_f16_to_f32_row(src, dst, (size_t)n);
        return true;
    case CLLM_GGML_BF16:
        cllm_bf16_to_f32_row(src, dst, (size_t)n);
        return true;
    case CLLM_GGML_Q4_0:
    case CLLM_GGML_Q5_0:
    case CLLM_GGML_Q8_0:
    case CLLM_GGML_IQ4_NL:
        for (int64_t k = 0; k < n; k += 32, b += bytes) {
            const float d = h2f(b);
            for (int j = 0; j < 32; j++) dst[k + j] = (float)code32(type, b, j) * d;
        }
        return true;
    default:
        return false;
    }
}
