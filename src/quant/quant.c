/* GPTQ-layout quantization primitives; see quant.h. */
#include "quant/quant.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
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

uint64_t cllm_quant_bytes(int bits, int group, int K, int N) {
    uint64_t k = (uint64_t)K, n = (uint64_t)N;
    return k * bits / 32 * n * 4 + k / group * n * bits / 32 * 4 + k / group * n * 2 + k * 4;
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

float cllm_qweight_scale(const cllm_qweight *w, int g, int n) {
    return dec_scale(w->scale_bf16, w->scales[(size_t)g * w->N + n]);
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

void cllm_quant_dequant_row(const cllm_qweight *w, int n, float *dst) {
    int per = 32 / w->bits;
    uint32_t mask = (1u << w->bits) - 1;
    for (int k = 0; k < w->K; k++) {
        int g = k / w->group;
        uint32_t zw = (uint32_t)w->qzeros[(size_t)g * (w->N / per) + n / per];
        int z = (int)((zw >> ((n % per) * w->bits)) & mask) + 1;
        uint32_t v = (uint32_t)w->qweight[(size_t)(k / per) * w->N + n];
        int qv = (int)((v >> ((k % per) * w->bits)) & mask);
        dst[k] = cllm_qweight_scale(w, g, n) * (float)(qv - z);
    }
}

static const cllm_tensor *want(const cllm_ckpt *ck, const char *base, const char *suf,
                               cllm_dtype dt, int64_t d0, int64_t d1, cllm_status *st,
                               cllm_error *err) {
    char name[256];
    snprintf(name, sizeof(name), "%s.%s", base, suf);
    const cllm_tensor *t = cllm_ckpt_get(ck, name);
    if (*st != CLLM_OK) return t;
    if (!t) {
        *st = cllm_err_set(err, CLLM_ENOTFOUND,
                           "quantized tensor %s.qweight present but %s missing", base, name);
        return NULL;
    }
    if (t->dtype != dt) {
        *st = cllm_err_set(err, CLLM_EFORMAT, "tensor %s: dtype %s, expected %s", name,
                           cllm_dtype_name(t->dtype), cllm_dtype_name(dt));
        return NULL;
    }
    if (t->n_dims != (d1 < 0 ? 1 : 2) || t->shape[0] != d0 || (d1 >= 0 && t->shape[1] != d1)) {
        char got[96];
        cllm_shape_str(t->shape, t->n_dims, got, sizeof(got));
        *st = cllm_err_set(err, CLLM_EFORMAT, "tensor %s: shape %s, expected [%lld%s%lld]", name,
                           got, (long long)d0, d1 >= 0 ? ", " : "", d1 >= 0 ? (long long)d1 : 0LL);
        return NULL;
    }
    return t;
}

cllm_status cllm_quant_bind(const cllm_ckpt *ck, const char *base, int N, int K, cllm_qweight *out,
                            cllm_error *err) {
    char name[256];
    snprintf(name, sizeof(name), "%s.qweight", base);
    const cllm_tensor *qw = cllm_ckpt_get(ck, name);
    if (!qw) return CLLM_ENOTFOUND;
    if (qw->dtype != CLLM_DT_I32 || qw->n_dims != 2 || qw->shape[1] != N || K <= 0 || K % 8 ||
        (qw->shape[0] * 8 != K && qw->shape[0] * 4 != K)) {
        char got[96];
        cllm_shape_str(qw->shape, qw->n_dims, got, sizeof(got));
        return cllm_err_set(err, CLLM_EFORMAT,
                            "tensor %s: %s %s does not match a 4- or 8-bit "
                            "packing of [%d out, %d in] (expected I32 [%d or %d, %d])",
                            name, cllm_dtype_name(qw->dtype), got, N, K, K / 8, K / 4, N);
    }
    int bits = (int)(32 * qw->shape[0] / K), per = 32 / bits;
    snprintf(name, sizeof(name), "%s.scales", base);
    const cllm_tensor *sc = cllm_ckpt_get(ck, name);
    if (!sc || sc->n_dims != 2 || sc->shape[0] <= 0 || K % sc->shape[0] != 0)
        return cllm_err_set(err, sc ? CLLM_EFORMAT : CLLM_ENOTFOUND,
                            "tensor %s: missing or not [K/group, N]", name);
    int G = K / (int)sc->shape[0];
    if (G % 8 || N % 8)
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: group size %d / out_features %d not "
                            "multiples of 8",
                            base, G, N);
    cllm_status st = CLLM_OK;
    int sbf16 = sc->dtype == CLLM_DT_BF16; /* F16 (GPTQ) or BF16 scales; others rejected */
    sc = want(ck, base, "scales", sbf16 ? CLLM_DT_BF16 : CLLM_DT_F16, K / G, N, &st, err);
    const cllm_tensor *qz = want(ck, base, "qzeros", CLLM_DT_I32, K / G, N / per, &st, err);
    snprintf(name, sizeof(name), "%s.g_idx", base);
    const cllm_tensor *gi = cllm_ckpt_get(ck, name);
    if (st == CLLM_OK && gi) { /* optional in some exports; when present it must be trivial */
        gi = want(ck, base, "g_idx", CLLM_DT_I32, K, -1, &st, err);
        for (int k = 0; st == CLLM_OK && k < K; k++) {
            int32_t v;
            memcpy(&v, (const char *)gi->data + 4 * (size_t)k, 4);
            if (v != k / G)
                st = cllm_err_set(err, CLLM_EUNSUPPORTED,
                                  "tensor %s: g_idx[%d] = %d: act-order "
                                  "(desc_act) checkpoints are not supported",
                                  name, k, v);
        }
    }
    if (st != CLLM_OK) return st;
    if (((uintptr_t)qw->data | (uintptr_t)qz->data) & 3)
        return cllm_err_set(err, CLLM_EFORMAT, "%s: qweight/qzeros data not 4-byte aligned", base);
    *out = (cllm_qweight){qw->data, qz->data, sc->data, bits, G, K, N, 16, sbf16};
    return CLLM_OK;
}

static uint32_t word_at(const cllm_tensor *t, size_t i) {
    uint32_t v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}

cllm_status cllm_quant_bind_ct(const cllm_ckpt *ck, const char *base, int N, int K,
                               void *(*alloc)(void *actx, size_t bytes), void *actx,
                               cllm_qweight *out, cllm_error *err) {
    char name[256];
    snprintf(name, sizeof(name), "%s.weight_packed", base);
    const cllm_tensor *wp = cllm_ckpt_get(ck, name);
    if (!wp) return CLLM_ENOTFOUND;
    if (wp->dtype != CLLM_DT_I32 || wp->n_dims != 2 || wp->shape[0] != N || K <= 0 || K % 8 ||
        (wp->shape[1] * 8 != K && wp->shape[1] * 4 != K)) {
        char got[96];
        cllm_shape_str(wp->shape, wp->n_dims, got, sizeof(got));
        return cllm_err_set(err, CLLM_EFORMAT,
                            "tensor %s: %s %s does not match a 4- or 8-bit packing of "
                            "[%d out, %d in] (expected I32 [%d, %d or %d])",
                            name, cllm_dtype_name(wp->dtype), got, N, K, N, K / 8, K / 4);
    }
    int bits = (int)(32 * wp->shape[1] / K), per = 32 / bits, off = 1 << (bits - 1);
    snprintf(name, sizeof(name), "%s.weight_shape", base);
    const cllm_tensor *ws = cllm_ckpt_get(ck, name);
    if (ws && (ws->n_elems != 2 || cllm_tensor_elem(ws, 0) != N || cllm_tensor_elem(ws, 1) != K))
        return cllm_err_set(err, CLLM_EFORMAT, "tensor %s: not [%d, %d]", name, N, K);
    snprintf(name, sizeof(name), "%s.weight_g_idx", base);
    if (cllm_ckpt_get(ck, name))
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "tensor %s: act-order checkpoints are not supported", name);
    snprintf(name, sizeof(name), "%s.weight_scale", base);
    const cllm_tensor *sc = cllm_ckpt_get(ck, name);
    if (!sc || sc->n_dims != 2 || sc->shape[0] != N || sc->shape[1] <= 0 || K % sc->shape[1] != 0 ||
        (sc->dtype != CLLM_DT_F16 && sc->dtype != CLLM_DT_BF16))
        return cllm_err_set(err, sc ? CLLM_EFORMAT : CLLM_ENOTFOUND,
                            "tensor %s: missing or not F16/BF16 [%d, K/group]", name, N);
    int NG = (int)sc->shape[1], G = K / NG;
    if (G % 8 || N % 8)
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: group size %d / out_features %d not multiples of 8", base, G, N);
    snprintf(name, sizeof(name), "%s.weight_zero_point", base);
    const cllm_tensor *zp = cllm_ckpt_get(ck, name);
    if (zp && (zp->dtype != CLLM_DT_I32 || zp->n_dims != 2 || zp->shape[0] != N / per ||
               zp->shape[1] != NG))
        return cllm_err_set(err, CLLM_EFORMAT, "tensor %s: expected I32 [%d, %d]", name, N / per,
                            NG);
    uint32_t mask = (1u << bits) - 1;
    for (int n8 = 0; zp && n8 < N / per; n8++) /* uz == 0 has no GPTQ v1 zero (z = uz - 1) */
        for (int g = 0; g < NG; g++) {
            uint32_t v = word_at(zp, (size_t)n8 * NG + g);
            for (int j = 0; j < per; j++)
                if (!((v >> (j * bits)) & mask))
                    return cllm_err_set(err, CLLM_EUNSUPPORTED,
                                        "tensor %s: zero point %d (row %d, group %d) is not "
                                        "representable in cllm's GPTQ-layout kernels",
                                        name, -off, n8 * per + j, g);
        }
    *out = (cllm_qweight){NULL, NULL, NULL, bits, G, K, N, 16, sc->dtype == CLLM_DT_BF16};
    if (!alloc) return CLLM_OK;
    size_t nw = (size_t)K / per * N, nz = (size_t)NG * N / per, ns = (size_t)NG * N;
    int32_t *qw = alloc(actx, nw * 4), *qz = alloc(actx, nz * 4);
    uint16_t *s = alloc(actx, ns * 2);
    if (!qw || !qz || !s)
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory converting %s", base);
    for (int n = 0; n < N; n++) {
        for (int k8 = 0; k8 < K / per; k8++)
            qw[(size_t)k8 * N + n] = (int32_t)word_at(wp, (size_t)n * (K / per) + k8);
        for (int g = 0; g < NG; g++)
            memcpy(&s[(size_t)g * N + n], (const char *)sc->data + 2 * ((size_t)n * NG + g), 2);
    }
    for (int g = 0; g < NG; g++)
        for (int n8 = 0; n8 < N / per; n8++) {
            uint32_t v = zp ? word_at(zp, (size_t)n8 * NG + g) : 0, w = 0;
            for (int j = 0; j < per; j++) {
                uint32_t uz = zp ? (v >> (j * bits)) & mask : (uint32_t)off;
                w |= (uz - 1) << (j * bits);
            }
            qz[(size_t)g * (N / per) + n8] = (int32_t)w;
        }
    out->qweight = qw;
    out->qzeros = qz;
    out->scales = s;
    return CLLM_OK;
}

cllm_status cllm_quant_bind_any(const cllm_ckpt *ck, const char *base, int N, int K,
                                void *(*alloc)(void *actx, size_t bytes), void *actx,
                                cllm_qweight *out, cllm_error *err) {
    cllm_status st = cllm_quant_bind(ck, base, N, K, out, err);
    return st == CLLM_ENOTFOUND ? cllm_quant_bind_ct(ck, base, N, K, alloc, actx, out, err) : st;
}

cllm_status cllm_quant_check_config(const char *dir, cllm_error *err) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    json_t *qc = root ? json_object_get(root, "quantization_config") : NULL;
    const char *m = qc ? json_string_value(json_object_get(qc, "quant_method")) : NULL;
    cllm_status st = CLLM_OK;
    if (!qc || (m && !strcmp(m, "gptq"))) {
    } else if (!m || strcmp(m, "compressed-tensors")) {
        st = cllm_err_set(err, CLLM_EUNSUPPORTED,
                          "%s: quantization_config.quant_method '%s' is not supported "
                          "(gptq, or compressed-tensors pack-quantized)",
                          path, m ? m : "(missing)");
    } else {
        const char *f = json_string_value(json_object_get(qc, "format"));
        json_t *groups = json_object_get(qc, "config_groups"), *g;
        const char *k;
        json_object_foreach(groups, k, g) {
            const char *gf = json_string_value(json_object_get(g, "format"));
            json_t *w = json_object_get(g, "weights"),
                   *ia = json_object_get(g, "input_activations");
            const char *ty = json_string_value(json_object_get(w, "type"));
            if ((gf ? gf : f) && strcmp(gf ? gf : f, "pack-quantized"))
                st = cllm_err_set(err, CLLM_EUNSUPPORTED,
                                  "%s: compressed-tensors format '%s' is not supported "
                                  "(pack-quantized only)",
                                  path, gf ? gf : f);
            else if ((ia && !json_is_null(ia)) || (ty && strcmp(ty, "int")))
                st = cllm_err_set(err, CLLM_EUNSUPPORTED,
                                  "%s: compressed-tensors group %s: only int weight-only "
                                  "(WnA16) quantization is supported",
                                  path, k);
            if (st) break;
        }
        if (!st && f && strcmp(f, "pack-quantized") && !json_object_size(groups))
            st = cllm_err_set(err, CLLM_EUNSUPPORTED,
                              "%s: compressed-tensors format '%s' is not supported", path, f);
    }
    json_decref(root);
    return st;
}

int cllm_quant_act_bits(const char *dir) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    if (!root) return 16;
    json_t *qc = json_object_get(root, "quantization_config");
    json_t *ab = qc ? json_object_get(qc, "cllm_act_bits") : NULL;
    int r = json_is_integer(ab) ? (int)json_integer_value(ab) : 16;
    json_decref(root);
    return r == 4 || r == 8 ? r : 16;
}
