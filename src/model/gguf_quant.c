/* Block decoders for ggml quant types; see gguf_quant.h. Written from the block definitions
 * (sizes: gguf.c's cllm_ggml_block); float products in ggml's order (d * sc first, then * q). */
#include "model/gguf_quant.h"

#include <string.h>

#include "base/half.h"
#include "model/gguf.h"

/* IQ4_NL / IQ4_XS non-linear 4-bit codebook. */
static const int8_t kv_iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                  1,    13,   25,  38,  53,  69,  89,  113};

static float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return cllm_f16_to_f32(h);
}

/* Q4_K / Q5_K packed 6-bit scale and min of sub-block j (0..7). */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Signed code c of weight j (0..31) of a 32-block of the code-form types. */
static int code32(int type, const uint8_t *b, int j) {
    int lo = j < 16, i = j & 15;
    switch (type) {
    case CLLM_GGML_Q4_0:
        return (lo ? b[2 + i] & 0xF : b[2 + i] >> 4) - 8;
    case CLLM_GGML_IQ4_NL:
        return kv_iq4[lo ? b[2 + i] & 0xF : b[2 + i] >> 4];
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

static void row_k4(const uint8_t *b, float *y, bool q5) {
    const float d = h2f(b), dmin = h2f(b + 2);
    const uint8_t *sc = b + 4, *qh = b + 16, *ql = q5 ? b + 48 : b + 16;
    for (int j = 0; j < 4; j++) { /* 64 weights: low nibbles (sub-block 2j), high (2j + 1) */
        int s0, m0, s1, m1;
        scale_min_k4(2 * j, sc, &s0, &m0);
        scale_min_k4(2 * j + 1, sc, &s1, &m1);
        const float d0 = d * (float)s0, n0 = dmin * (float)m0;
        const float d1 = d * (float)s1, n1 = dmin * (float)m1;
        for (int l = 0; l < 32; l++) {
            int h0 = q5 && (qh[l] >> (2 * j) & 1) ? 16 : 0,
                h1 = q5 && (qh[l] >> (2 * j + 1) & 1) ? 16 : 0;
            y[64 * j + l] = d0 * (float)((ql[32 * j + l] & 0xF) + h0) - n0;
            y[64 * j + 32 + l] = d1 * (float)((ql[32 * j + l] >> 4) + h1) - n1;
        }
    }
}

static void row_q6k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = h2f(b + 208);
    for (int h = 0; h < 2; h++, ql += 64, qh += 32, sc += 8, y += 128)
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
            int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
            int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
}

static void row_iq4xs(const uint8_t *b, float *y) {
    const float d = h2f(b);
    uint16_t sh;
    memcpy(&sh, b + 2, 2);
    const uint8_t *sl = b + 4, *qs = b + 8;
    for (int ib = 0; ib < 8; ib++, qs += 16, y += 32) {
        int ls = ((sl[ib / 2] >> 4 * (ib % 2)) & 0xF) | ((sh >> 2 * ib) & 3) << 4;
        const float dl = d * (float)(ls - 32);
        for (int j = 0; j < 16; j++) {
            y[j] = dl * (float)kv_iq4[qs[j] & 0xF];
            y[j + 16] = dl * (float)kv_iq4[qs[j] >> 4];
        }
    }
}

/* Q4_1 / Q5_1: d * q + m. */
static void row_q_1(const uint8_t *b, float *y, bool q5) {
    const float d = h2f(b), m = h2f(b + 2);
    uint32_t qh = 0;
    if (q5) memcpy(&qh, b + 4, 4);
    const uint8_t *qs = b + (q5 ? 8 : 4);
    for (int i = 0; i < 16; i++) {
        int x0 = (qs[i] & 0xF) | (q5 ? (int)((qh >> i) & 1) << 4 : 0);
        int x1 = (qs[i] >> 4) | (q5 ? (int)((qh >> (i + 16)) & 1) << 4 : 0);
        y[i] = (float)x0 * d + m;
        y[i + 16] = (float)x1 * d + m;
    }
}

bool cllm_gguf_row_f32(int type, const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    int bytes, blk = cllm_ggml_block(type, &bytes);
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
    case CLLM_GGML_Q4_1:
    case CLLM_GGML_Q5_1:
        for (int64_t k = 0; k < n; k += 32, b += bytes) row_q_1(b, dst + k, type == CLLM_GGML_Q5_1);
        return true;
    case CLLM_GGML_Q4_K:
    case CLLM_GGML_Q5_K:
        for (int64_t k = 0; k < n; k += blk, b += bytes) row_k4(b, dst + k, type == CLLM_GGML_Q5_K);
        return true;
    case CLLM_GGML_Q6_K:
        for (int64_t k = 0; k < n; k += blk, b += bytes) row_q6k(b, dst + k);
        return true;
    case CLLM_GGML_IQ4_XS:
        for (int64_t k = 0; k < n; k += blk, b += bytes) row_iq4xs(b, dst + k);
        return true;
    default:
        return false;
    }
}
