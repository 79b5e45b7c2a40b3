/* The quantizer's primitives: an owned GPTQ-layout matrix, scales/zeros of a group, codes, RTN;
 * see quant.h. The layout itself is model/qformat.h. */
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"

cllm_status cllm_qbuf_alloc(cllm_qbuf *q, int bits, int group, int K, int N, const char *what,
                            cllm_error *err) {
    memset(q, 0, sizeof(*q));
    if (bits != 4 && bits != 8)
        return cllm_err_set(err, CLLM_EINVAL, "%s: unsupported bit width %d (4 or 8)", what, bits);
    if (group <= 0 || group % 8)
        return cllm_err_set(err, CLLM_EINVAL, "%s: group size %d is not a positive multiple of 8",
                            what, group);
    if (K % group)
        return cllm_err_set(err, CLLM_EINVAL,
                            "%s: group size %d does not divide in_features %d "
                            "(choose --group-size dividing it, or --keep this tensor)",
                            what, group, K);
    if (N % 8)
        return cllm_err_set(err, CLLM_EINVAL,
                            "%s: out_features %d is not a multiple of 8 "
                            "(GPTQ packs zeros along N; --keep this tensor)",
                            what, N);
    int per = 32 / bits;
    q->bits = bits;
    q->group = group;
    q->K = K;
    q->N = N;
    q->qweight = malloc((size_t)K / per * N * 4);
    q->qzeros = malloc((size_t)K / group * N / per * 4);
    q->scales = malloc((size_t)K / group * N * 2);
    q->g_idx = malloc((size_t)K * 4);
    if (!q->qweight || !q->qzeros || !q->scales || !q->g_idx) {
        cllm_qbuf_free(q);
        return cllm_err_set(err, CLLM_ENOMEM, "%s: out of memory", what);
    }
    memset(q->qweight, 0, (size_t)K / per * N * 4);
    memset(q->qzeros, 0, (size_t)K / group * N / per * 4);
    cllm_quant_fill_gidx(q);
    return CLLM_OK;
}

void cllm_qbuf_free(cllm_qbuf *q) {
    free(q->qweight);
    free(q->qzeros);
    free(q->scales);
    free(q->g_idx);
    memset(q, 0, sizeof(*q));
}

cllm_qweight cllm_qbuf_view(const cllm_qbuf *q) {
    return (cllm_qweight){q->qweight, q->qzeros, q->scales, q->bits,      q->group,
                          q->K,       q->N,      16,        q->scale_bf16};
}

void cllm_quant_fill_gidx(cllm_qbuf *q) {
    for (int k = 0; k < q->K; k++) q->g_idx[k] = k / q->group;
}

static inline void put_bits(int32_t *words, size_t idx_word, int shift, uint32_t v, int bits) {
    uint32_t m = ((1u << bits) - 1) << shift;
    uint32_t w = (uint32_t)words[idx_word];
    words[idx_word] = (int32_t)((w & ~m) | ((v << shift) & m));
}

static inline uint16_t enc_scale(const cllm_qbuf *q, float s) {
    return q->scale_bf16 ? cllm_f32_to_bf16(s) : cllm_f32_to_f16(s);
}
static inline float dec_scale(int bf16, uint16_t h) {
    return bf16 ? cllm_bf16_to_f32(h) : cllm_f16_to_f32(h);
}

/* Rounded scale for s (1 when s rounds to 0, NaN or Inf). */
static float round_scale(const cllm_qbuf *q, float s, uint16_t *sh) {
    *sh = enc_scale(q, s);
    float sr = dec_scale(q->scale_bf16, *sh);
    if (!(sr > 0.0f) || !isfinite(sr)) {
        *sh = enc_scale(q, 1.0f);
        sr = 1.0f;
    }
    return sr;
}

float cllm_quant_set_group_mm(cllm_qbuf *q, int g, int n, float wmin, float wmax) {
    int bits = q->bits, per = 32 / bits, maxq = (1 << bits) - 1, zero = 1 << (bits - 1);
    uint16_t sh;
    float sr;
    if (!q->asym) {
        /* GPTQ's symmetric grid: scale = 2 amax / maxq, zero = (maxq + 1) / 2. */
        float amax = fmaxf(fabsf(wmin), fabsf(wmax));
        sr = round_scale(q, 2.0f * amax / (float)maxq, &sh);
    } else {
        float lo = fminf(wmin, 0.0f), hi = fmaxf(wmax, 0.0f);
        sr = round_scale(q, (hi - lo) / (float)maxq, &sh);
        float zf = nearbyintf(-lo / sr);
        if (hi == lo)
            zero = 1 << (bits - 1);
        else if (zf >= 1.0f)
            zero = (int)fminf(zf, (float)maxq);
        else { /* stored zero - 1 must not wrap: zero 1, the grid spans [-s, (maxq - 1) s] */
            zero = 1;
            sr = round_scale(q, hi / (float)(maxq - 1), &sh);
        }
    }
    q->scales[(size_t)g * q->N + n] = sh;
    put_bits(q->qzeros, (size_t)g * (q->N / per) + n / per, (n % per) * bits, (uint32_t)(zero - 1),
             bits);
    return sr;
}

float cllm_quant_set_group(cllm_qbuf *q, int g, int n, float amax) {
    return cllm_quant_set_group_mm(q, g, n, -amax, amax);
}

float cllm_quant_set_code(cllm_qbuf *q, int n, int k, float w, float s) {
    int bits = q->bits, per = 32 / bits, maxq = (1 << bits) - 1;
    uint32_t zw = (uint32_t)q->qzeros[(size_t)(k / q->group) * (q->N / per) + n / per];
    int zero = (int)((zw >> ((n % per) * bits)) & (uint32_t)maxq) + 1;
    float r = nearbyintf(w / s) + (float)zero;
    int qi = (int)fminf(fmaxf(r, 0.0f), (float)maxq);
    put_bits(q->qweight, (size_t)(k / per) * q->N + n, (k % per) * bits, (uint32_t)qi, bits);
    return s * (float)(qi - zero);
}

void cllm_quant_rtn_rows(const float *W, size_t ldw, int n0, int n1, cllm_qbuf *q) {
    int G = q->group;
    for (int n = n0; n < n1; n++) {
        const float *w = W + (size_t)(n - n0) * ldw;
        for (int g = 0; g < q->K / G; g++) {
            float lo = 0.0f, hi = 0.0f;
            for (int k = g * G; k < (g + 1) * G; k++) lo = fminf(lo, w[k]), hi = fmaxf(hi, w[k]);
            float sr = cllm_quant_set_group_mm(q, g, n, lo, hi);
            for (int k = g * G; k < (g + 1) * G; k++) cllm_quant_set_code(q, n, k, w[k], sr);
        }
    }
}
