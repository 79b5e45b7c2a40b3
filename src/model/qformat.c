/* Quantized checkpoint formats (GPTQ v1/v2, compressed-tensors) and the GPTQ-layout
 * primitives; see qformat.h. */
#include "model/qformat.h"

#include <fnmatch.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"

uint64_t cllm_qformat_bytes(int bits, int group, int K, int N) {
    uint64_t k = (uint64_t)K, n = (uint64_t)N;
    return k * bits / 32 * n * 4 + k / group * n * bits / 32 * 4 + k / group * n * 2 + k * 4;
}

bool cllm_qformat_is_qtensor(const char *name) {
    static const char *const suf[] = {
        ".qweight",       ".qzeros",       ".scales",           ".g_idx",
        ".weight_packed", ".weight_scale", ".weight_zero_point"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof(suf) / sizeof(suf[0]); i++) {
        size_t k = strlen(suf[i]);
        if (n > k && !strcmp(name + n - k, suf[i])) return true;
    }
    return false;
}

static inline void put_bits(int32_t *words, size_t idx_word, int shift, uint32_t v, int bits) {
    uint32_t m = ((1u << bits) - 1) << shift;
    uint32_t w = (uint32_t)words[idx_word];
    words[idx_word] = (int32_t)((w & ~m) | ((v << shift) & m));
}

static inline float dec_scale(int bf16, uint16_t h) {
    return bf16 ? cllm_bf16_to_f32(h) : cllm_f16_to_f32(h);
}

float cllm_qweight_scale(const cllm_qweight *w, int g, int n) {
    return dec_scale(w->scale_bf16, w->scales[(size_t)g * w->N + n]);
}

int cllm_qweight_zero(const cllm_qweight *w, int g, int n) {
    int per = 32 / w->bits;
    uint32_t zw = (uint32_t)w->qzeros[(size_t)g * (w->N / per) + n / per];
    return (int)((zw >> ((n % per) * w->bits)) & ((1u << w->bits) - 1)) + 1;
}

void cllm_qformat_dequant_row(const cllm_qweight *w, int n, float *dst) {
    int per = 32 / w->bits;
    uint32_t mask = (1u << w->bits) - 1;
    for (int k = 0; k < w->K; k++) {
        int g = k / w->group;
        int z = cllm_qweight_zero(w, g, n);
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
        *st = cllm_err_set(err, CLLM_EFORMAT, "quantized tensor %s.qweight present but %s missing",
                           base, name);
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

cllm_status cllm_qformat_bind(const cllm_ckpt *ck, const char *base, int N, int K,
                              cllm_qweight *out, cllm_error *err) {
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
    if (!sc)
        return cllm_err_set(err, CLLM_EFORMAT, "quantized tensor %s.qweight present but %s missing",
                            base, name);
    if (sc->n_dims != 2 || sc->shape[0] <= 0 || K % sc->shape[0] != 0) {
        char got[96];
        cllm_shape_str(sc->shape, sc->n_dims, got, sizeof(got));
        return cllm_err_set(err, CLLM_EFORMAT,
                            "tensor %s: shape %s, expected [K/group, %d] with K = %d (a group "
                            "size dividing K)",
                            name, got, N, K);
    }
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
    if ((uintptr_t)sc->data & 1) /* read in place as uint16_t by the kernels */
        return cllm_err_set(err, CLLM_EFORMAT,
                            "tensor %s.scales: data not 2-byte aligned in the file (an odd-sized "
                            "tensor before it)",
                            base);
    *out = (cllm_qweight){qw->data, qz->data, sc->data, bits, G, K, N, 16, sbf16};
    return CLLM_OK;
}

static uint32_t word_at(const cllm_tensor *t, size_t i) {
    uint32_t v;
    memcpy(&v, (const char *)t->data + 4 * i, 4);
    return v;
}

/* Sets the GPTQ v1 zero of (group g, output n) to the true zero uz (w = s * (q - uz)). v1 stores
 * uz - 1, so uz == 0 has no stored form; that block is rewritten exactly instead: codes q -> maxq -
 * q (the bits flipped), scale -> -scale, zero -> maxq, since s * (q - 0) = -s * ((maxq - q) -
 * maxq). qw [K/per][N] and s [K/G][N] must already hold this block in the GPTQ layout. */
static void set_true_zero(int32_t *qw, int32_t *qz, uint16_t *s, int bits, int G, int N, int g,
                          int n, uint32_t uz) {
    int per = 32 / bits;
    uint32_t maxq = (1u << bits) - 1;
    if (uz == 0) {
        for (int k8 = g * G / per; k8 < (g + 1) * G / per; k8++)
            qw[(size_t)k8 * N + n] = (int32_t) ~(uint32_t)qw[(size_t)k8 * N + n];
        s[(size_t)g * N + n] ^= 0x8000; /* sign bit of F16 and BF16 */
        uz = maxq;
    }
    put_bits(qz, (size_t)g * (N / per) + n / per, (n % per) * bits, uz - 1, bits);
}

/* When P.{gidx} exists it must be I32 [K] and equal k / G (no act-order permutation). */
static cllm_status check_trivial_gidx(const cllm_ckpt *ck, const char *base, const char *gidx,
                                      int K, int G, cllm_error *err) {
    char name[256];
    snprintf(name, sizeof(name), "%s.%s", base, gidx);
    const cllm_tensor *gi = cllm_ckpt_get(ck, name);
    if (!gi) return CLLM_OK;
    if (gi->dtype != CLLM_DT_I32 || gi->n_dims != 1 || gi->shape[0] != K) {
        char got[96];
        cllm_shape_str(gi->shape, gi->n_dims, got, sizeof(got));
        return cllm_err_set(err, CLLM_EFORMAT, "tensor %s: %s %s, expected I32 [%d]", name,
                            cllm_dtype_name(gi->dtype), got, K);
    }
    for (int k = 0; k < K; k++) {
        int32_t v = (int32_t)word_at(gi, (size_t)k);
        if (v != k / G)
            return cllm_err_set(err, CLLM_EUNSUPPORTED,
                                "tensor %s: g_idx[%d] = %d, not %d: act-order (desc_act / actorder "
                                "group) checkpoints are not supported",
                                name, k, v, k / G);
    }
    return CLLM_OK;
}

/* The compressed-tensors tensors of one Linear, checked against [N out, K in]. */
typedef struct ct_parts {
    const cllm_tensor *wp, *sc, *zp; /* weight_packed, weight_scale, weight_zero_point (or NULL) */
    int bits, G, NG;
} ct_parts;

static cllm_status ct_check(const cllm_ckpt *ck, const char *base, int N, int K, ct_parts *c,
                            cllm_error *err) {
    char name[256], got[96];
    snprintf(name, sizeof(name), "%s.weight_packed", base);
    const cllm_tensor *wp = cllm_ckpt_get(ck, name);
    if (!wp) return CLLM_ENOTFOUND;
    if (wp->dtype != CLLM_DT_I32 || wp->n_dims != 2 || wp->shape[0] != N || K <= 0 || K % 8 ||
        (wp->shape[1] * 8 != K && wp->shape[1] * 4 != K)) {
        cllm_shape_str(wp->shape, wp->n_dims, got, sizeof(got));
        return cllm_err_set(err, CLLM_EFORMAT,
                            "tensor %s: %s %s does not match a 4- or 8-bit packing of "
                            "[%d out, %d in] (expected I32 [%d, %d or %d])",
                            name, cllm_dtype_name(wp->dtype), got, N, K, N, K / 8, K / 4);
    }
    int bits = (int)(32 * wp->shape[1] / K), per = 32 / bits;
    snprintf(name, sizeof(name), "%s.weight_shape", base);
    const cllm_tensor *ws = cllm_ckpt_get(ck, name);
    if (ws && (ws->n_elems != 2 || cllm_tensor_elem(ws, 0) != N || cllm_tensor_elem(ws, 1) != K)) {
        cllm_shape_str(ws->shape, ws->n_dims, got, sizeof(got));
        return cllm_err_set(err, CLLM_EFORMAT,
                            "tensor %s: %s %s holds [%g, %g], expected [%d, %d] (the config's "
                            "[out, in])",
                            name, cllm_dtype_name(ws->dtype), got,
                            ws->n_elems > 0 ? cllm_tensor_elem(ws, 0) : -1.0,
                            ws->n_elems > 1 ? cllm_tensor_elem(ws, 1) : -1.0, N, K);
    }
    snprintf(name, sizeof(name), "%s.weight_scale", base);
    const cllm_tensor *sc = cllm_ckpt_get(ck, name);
    if (!sc)
        return cllm_err_set(err, CLLM_EFORMAT, "tensor %s.weight_packed present but %s missing",
                            base, name);
    cllm_shape_str(sc->shape, sc->n_dims, got, sizeof(got));
    if (sc->dtype != CLLM_DT_F16 && sc->dtype != CLLM_DT_BF16)
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "tensor %s: dtype %s not supported (F16 or BF16 scales)", name,
                            cllm_dtype_name(sc->dtype));
    if (sc->n_dims != 2 || sc->shape[0] != N || sc->shape[1] <= 0 || K % sc->shape[1] != 0)
        return cllm_err_set(err, CLLM_EFORMAT,
                            "tensor %s: shape %s, expected [%d, K/group] with K = %d (group "
                            "strategy) or [%d, 1] (channel strategy)",
                            name, got, N, K, N);
    int NG = (int)sc->shape[1], G = K / NG;
    if (G % 8 || N % 8)
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: group size %d / out_features %d not multiples of 8", base, G, N);
    cllm_status st = check_trivial_gidx(ck, base, "weight_g_idx", K, G, err);
    if (st != CLLM_OK) return st;
    snprintf(name, sizeof(name), "%s.weight_zero_point", base);
    const cllm_tensor *zp = cllm_ckpt_get(ck, name);
    if (zp && (zp->dtype != CLLM_DT_I32 || zp->n_dims != 2 || zp->shape[0] != N / per ||
               zp->shape[1] != NG)) {
        cllm_shape_str(zp->shape, zp->n_dims, got, sizeof(got));
        return cllm_err_set(err, CLLM_EFORMAT,
                            "tensor %s: %s %s, expected I32 [%d, %d] (zero points packed along "
                            "out_features)",
                            name, cllm_dtype_name(zp->dtype), got, N / per, NG);
    }
    *c = (ct_parts){wp, sc, zp, bits, G, NG};
    return CLLM_OK;
}

/* Repacks the int codes into the GPTQ v1 layout (qweight along K, true zeros in qzeros, scales
 * [NG][N]) in memory from alloc. */
static cllm_status ct_convert(const ct_parts *c, const char *base, int N, int K,
                              void *(*alloc)(void *actx, size_t bytes), void *actx,
                              cllm_qweight *out, cllm_error *err) {
    const cllm_tensor *wp = c->wp, *sc = c->sc, *zp = c->zp;
    int bits = c->bits, G = c->G, NG = c->NG, per = 32 / bits, off = 1 << (bits - 1);
    size_t nw = (size_t)K / per * N, nz = (size_t)NG * N / per, ns = (size_t)NG * N;
    int32_t *qw = alloc(actx, nw * 4), *qz = alloc(actx, nz * 4);
    uint16_t *s = alloc(actx, ns * 2);
    if (!qw || !qz || !s)
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory converting %s", base);
    memset(qz, 0, nz * 4);
    for (int n = 0; n < N; n++) {
        for (int k8 = 0; k8 < K / per; k8++)
            qw[(size_t)k8 * N + n] = (int32_t)word_at(wp, (size_t)n * (K / per) + k8);
        for (int g = 0; g < NG; g++)
            memcpy(&s[(size_t)g * N + n], (const char *)sc->data + 2 * ((size_t)n * NG + g), 2);
    }
    uint32_t mask = (1u << bits) - 1;
    for (int g = 0; g < NG; g++)
        for (int n = 0; n < N; n++) {
            uint32_t uz = (uint32_t)off;
            if (zp) uz = (word_at(zp, (size_t)(n / per) * NG + g) >> ((n % per) * bits)) & mask;
            set_true_zero(qw, qz, s, bits, G, N, g, n, uz);
        }
    out->qweight = qw;
    out->qzeros = qz;
    out->scales = s;
    return CLLM_OK;
}

cllm_status cllm_qformat_bind_ct(const cllm_ckpt *ck, const char *base, int N, int K,
                                 void *(*alloc)(void *actx, size_t bytes), void *actx,
                                 cllm_qweight *out, cllm_error *err) {
    ct_parts c;
    cllm_status st = ct_check(ck, base, N, K, &c, err);
    if (st != CLLM_OK) return st;
    *out = (cllm_qweight){NULL, NULL, NULL, c.bits, c.G, K, N, 16, c.sc->dtype == CLLM_DT_BF16};
    return alloc ? ct_convert(&c, base, N, K, alloc, actx, out, err) : CLLM_OK;
}

/* AutoAWQ's GEMM packing stores output column 8c + awq_order[i] in nibble i of word c
 * (awq/utils/packing_utils.py AWQ_ORDER), for qweight and qzeros alike. */
static const int awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};

static cllm_status awq_check(const cllm_ckpt *ck, const char *base, int N, int K,
                             const cllm_tensor **qwo, const cllm_tensor **qzo,
                             const cllm_tensor **sco, int *Go, cllm_error *err) {
    char name[256], got[96];
    snprintf(name, sizeof(name), "%s.qweight", base);
    const cllm_tensor *qw = cllm_ckpt_get(ck, name);
    if (!qw) return CLLM_ENOTFOUND;
    if (qw->dtype != CLLM_DT_I32 || qw->n_dims != 2 || qw->shape[0] != K || N % 8 ||
        qw->shape[1] * 8 != N) {
        cllm_shape_str(qw->shape, qw->n_dims, got, sizeof(got));
        return cllm_err_set(err, CLLM_EFORMAT,
                            "tensor %s: %s %s does not match AWQ's 4-bit GEMM packing of [%d out, "
                            "%d in] (expected I32 [%d, %d], packed along out_features)",
                            name, cllm_dtype_name(qw->dtype), got, N, K, K, N / 8);
    }
    snprintf(name, sizeof(name), "%s.scales", base);
    const cllm_tensor *sc = cllm_ckpt_get(ck, name);
    if (!sc)
        return cllm_err_set(err, CLLM_EFORMAT, "quantized tensor %s.qweight present but %s missing",
                            base, name);
    cllm_shape_str(sc->shape, sc->n_dims, got, sizeof(got));
    if (sc->dtype != CLLM_DT_F16 && sc->dtype != CLLM_DT_BF16)
        return cllm_err_set(err, CLLM_EFORMAT, "tensor %s: dtype %s, expected F16 (or BF16)", name,
                            cllm_dtype_name(sc->dtype));
    if (sc->n_dims != 2 || sc->shape[1] != N || sc->shape[0] <= 0 || K % sc->shape[0])
        return cllm_err_set(err, CLLM_EFORMAT,
                            "tensor %s: shape %s, expected [K/group, %d] with K = %d (a group "
                            "size dividing K)",
                            name, got, N, K);
    int G = K / (int)sc->shape[0];
    if (G % 8)
        return cllm_err_set(err, CLLM_EUNSUPPORTED, "%s: group size %d is not a multiple of 8",
                            base, G);
    cllm_status st = CLLM_OK;
    const cllm_tensor *qz = want(ck, base, "qzeros", CLLM_DT_I32, K / G, N / 8, &st, err);
    if (st != CLLM_OK) return st;
    *qwo = qw, *qzo = qz, *sco = sc, *Go = G;
    return CLLM_OK;
}

cllm_status cllm_qformat_bind_awq(const cllm_ckpt *ck, const char *base, int N, int K,
                                  void *(*alloc)(void *actx, size_t bytes), void *actx,
                                  cllm_qweight *out, cllm_error *err) {
    const cllm_tensor *aw, *az, *as;
    int G;
    cllm_status st = awq_check(ck, base, N, K, &aw, &az, &as, &G, err);
    if (st != CLLM_OK) return st;
    *out = (cllm_qweight){NULL, NULL, NULL, 4, G, K, N, 16, as->dtype == CLLM_DT_BF16};
    if (!alloc) return CLLM_OK;
    int NG = K / G;
    size_t nw = (size_t)K / 8 * N, nz = (size_t)NG * N / 8, ns = (size_t)NG * N;
    int32_t *qw = alloc(actx, nw * 4), *qz = alloc(actx, nz * 4);
    uint16_t *s = alloc(actx, ns * 2);
    if (!qw || !qz || !s)
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory converting %s (awq)", base);
    memset(qw, 0, nw * 4);
    memset(qz, 0, nz * 4);
    memcpy(s, as->data, ns * 2); /* AWQ's [K/G][N] is already the GPTQ scale layout */
    for (int k = 0; k < K; k++)
        for (int c = 0; c < N / 8; c++) {
            uint32_t w = word_at(aw, (size_t)k * (N / 8) + c);
            for (int i = 0; i < 8; i++)
                put_bits(qw, (size_t)(k / 8) * N + 8 * c + awq_order[i], (k % 8) * 4,
                         (w >> (4 * i)) & 15u, 4);
        }
    for (int g = 0; g < NG; g++)
        for (int c = 0; c < N / 8; c++) {
            uint32_t z = word_at(az, (size_t)g * (N / 8) + c);
            for (int i = 0; i < 8; i++)
                set_true_zero(qw, qz, s, 4, G, N, g, 8 * c + awq_order[i], (z >> (4 * i)) & 15u);
        }
    out->qweight = qw;
    out->qzeros = qz;
    out->scales = s;
    return CLLM_OK;
}

/* GPTQ v2 ("format"/"checkpoint_format" "gptq_v2", GPTQModel): qzeros hold the zero itself, not
 * zero - 1. Rewrites the bound (in-place, v1-read) matrix into owned v1 tensors: new qzeros, and
 * copies of qweight/scales only when some zero is 0 (see set_true_zero). */
static cllm_status gptq_v2_to_v1(cllm_qweight *q, void *(*alloc)(void *actx, size_t bytes),
                                 void *actx, const char *base, cllm_error *err) {
    int bits = q->bits, per = 32 / bits, G = q->group, K = q->K, N = q->N, NG = K / G;
    uint32_t mask = (1u << bits) - 1;
    size_t nw = (size_t)K / per * N, nz = (size_t)NG * N / per, ns = (size_t)NG * N;
    bool any0 = false;
    for (size_t i = 0; i < nz && !any0; i++)
        for (int j = 0; j < per && !any0; j++)
            any0 = !(((uint32_t)q->qzeros[i] >> (j * bits)) & mask);
    int32_t *qz = alloc(actx, nz * 4), *qw = any0 ? alloc(actx, nw * 4) : NULL;
    uint16_t *s = any0 ? alloc(actx, ns * 2) : NULL;
    if (!qz || (any0 && (!qw || !s)))
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory converting %s (gptq_v2)", base);
    memset(qz, 0, nz * 4);
    if (any0) {
        memcpy(qw, q->qweight, nw * 4);
        memcpy(s, q->scales, ns * 2);
    }
    for (int g = 0; g < NG; g++)
        for (int n = 0; n < N; n++) {
            uint32_t z = (uint32_t)q->qzeros[(size_t)g * (N / per) + n / per];
            set_true_zero(qw, qz, s, bits, G, N, g, n, (z >> ((n % per) * bits)) & mask);
        }
    q->qzeros = qz;
    if (any0) {
        q->qweight = qw;
        q->scales = s;
    }
    return CLLM_OK;
}

cllm_status cllm_qformat_bind_any(const cllm_ckpt *ck, const char *base, int N, int K,
                                  unsigned flags, void *(*alloc)(void *actx, size_t bytes),
                                  void *actx, cllm_qweight *out, cllm_error *err) {
    if (flags & CLLM_QFORMAT_AWQ)
        return cllm_qformat_bind_awq(ck, base, N, K, alloc, actx, out, err);
    cllm_status st = cllm_qformat_bind(ck, base, N, K, out, err);
    if (st == CLLM_ENOTFOUND) return cllm_qformat_bind_ct(ck, base, N, K, alloc, actx, out, err);
    if (st != CLLM_OK || !(flags & CLLM_QFORMAT_GPTQ_V2) || !alloc) return st;
    return gptq_v2_to_v1(out, alloc, actx, base, err);
}

/* One compressed-tensors config group's "weights" args: int, 4 or 8 bits, static, strategy
 * "group" (group_size a positive multiple of 8) or "channel", actorder none/"weight" (or any for
 * channel, where a single group makes the order irrelevant). */
static cllm_status check_ct_weights(const char *path, const char *key, json_t *w, cllm_error *err) {
    const char *ty = json_string_value(json_object_get(w, "type"));
    const char *strat = json_string_value(json_object_get(w, "strategy"));
    json_t *gs = json_object_get(w, "group_size"), *ao = json_object_get(w, "actorder");
    json_int_t bits = json_integer_value(json_object_get(w, "num_bits"));
    json_int_t gsz = json_is_integer(gs) ? json_integer_value(gs) : 0;
    if (!w || !json_is_object(w))
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: compressed-tensors group %s has no \"weights\" quantization", path,
                            key);
    if (ty && strcmp(ty, "int"))
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: compressed-tensors group %s: weights type '%s' is not supported "
                            "(only int weight-only WnA16)",
                            path, key, ty);
    if (bits != 4 && bits != 8)
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: compressed-tensors group %s: weights.num_bits %lld is not "
                            "supported (4 or 8)",
                            path, key, (long long)bits);
    if (json_is_true(json_object_get(w, "dynamic")))
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: compressed-tensors group %s: dynamic weight quantization is not "
                            "supported",
                            path, key);
    if (!strat) strat = gsz > 0 ? "group" : gsz == -1 ? "channel" : "(missing)";
    if (!strcmp(strat, "group")) {
        if (gsz <= 0 || gsz % 8)
            return cllm_err_set(err, CLLM_EUNSUPPORTED,
                                "%s: compressed-tensors group %s: strategy \"group\" with "
                                "group_size %lld (a positive multiple of 8 is needed)",
                                path, key, (long long)gsz);
        const char *a = json_string_value(ao);
        if (json_is_true(ao) || (a && strcmp(a, "weight") && strcmp(a, "static")))
            return cllm_err_set(err, CLLM_EUNSUPPORTED,
                                "%s: compressed-tensors group %s: actorder '%s' (act-order "
                                "groups, weight_g_idx) is not supported",
                                path, key, a ? a : "true");
    } else if (strcmp(strat, "channel")) {
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: compressed-tensors group %s: weights strategy \"%s\" is not "
                            "supported (\"group\" or \"channel\")",
                            path, key, strat);
    }
    return CLLM_OK;
}

static cllm_status check_ct_config(const char *path, json_t *qc, cllm_error *err) {
    const char *f = json_string_value(json_object_get(qc, "format"));
    json_t *groups = json_object_get(qc, "config_groups"), *g;
    json_t *sp = json_object_get(qc, "sparsity_config"),
           *tr = json_object_get(qc, "transform_config");
    const char *k;
    if (tr && !json_is_null(tr))
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: compressed-tensors transform_config (rotations applied at run "
                            "time) is not supported",
                            path);
    const char *sf = json_string_value(json_object_get(sp, "format"));
    if (sp && !json_is_null(sp) && json_object_size(sp) && (!sf || strcmp(sf, "dense")))
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: compressed-tensors sparsity_config format '%s' is not supported",
                            path, sf ? sf : "(missing)");
    if (!json_object_size(groups))
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: compressed-tensors quantization_config has no config_groups",
                            path);
    json_object_foreach(groups, k, g) {
        const char *gf = json_string_value(json_object_get(g, "format"));
        json_t *ia = json_object_get(g, "input_activations"),
               *oa = json_object_get(g, "output_activations");
        if ((gf ? gf : f) && strcmp(gf ? gf : f, "pack-quantized"))
            return cllm_err_set(err, CLLM_EUNSUPPORTED,
                                "%s: compressed-tensors format '%s' is not supported "
                                "(pack-quantized only)",
                                path, gf ? gf : f);
        if ((ia && !json_is_null(ia)) || (oa && !json_is_null(oa)))
            return cllm_err_set(err, CLLM_EUNSUPPORTED,
                                "%s: compressed-tensors group %s: only int weight-only "
                                "(WnA16) quantization is supported (activations are quantized)",
                                path, k);
        cllm_status st = check_ct_weights(path, k, json_object_get(g, "weights"), err);
        if (st != CLLM_OK) return st;
    }
    return CLLM_OK;
}

/* AutoAWQ's quantization_config ({"quant_method": "awq", "bits": 4, "group_size", "zero_point",
 * "version"}; transformers' AwqConfig calls version "backend"/"version" alike): only the GEMM
 * packing, 4-bit, with zero points, is the layout cllm_qformat_bind_awq converts. */
static cllm_status check_awq_config(const char *path, json_t *qc, cllm_error *err) {
    const char *v = json_string_value(json_object_get(qc, "version"));
    json_t *b = json_object_get(qc, "bits"), *zp = json_object_get(qc, "zero_point");
    if (!b) b = json_object_get(qc, "w_bit");
    if (v && strcmp(v, "gemm") && strcmp(v, "GEMM"))
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: awq version '%s' is not supported (only \"gemm\": GEMV/GEMV_fast "
                            "pack along in_features with other interleaves, marlin/exllama are "
                            "repacked forms)",
                            path, v);
    if (b && json_integer_value(b) != 4)
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: awq bits %lld is not supported (4-bit GEMM packing only)", path,
                            (long long)json_integer_value(b));
    if (json_is_false(zp))
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "%s: awq zero_point false is not supported (GEMM checkpoints with "
                            "qzeros only)",
                            path);
    return CLLM_OK;
}

cllm_status cllm_qformat_fp8_config(const char *dir, int block[2], cllm_error *err) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    json_t *qc = root ? json_object_get(root, "quantization_config") : NULL;
    const char *m = qc ? json_string_value(json_object_get(qc, "quant_method")) : NULL;
    cllm_status st = CLLM_OK;
    if (!m || strcmp(m, "fp8")) {
        json_decref(root);
        return CLLM_ENOTFOUND;
    }
    const char *fmt = json_string_value(json_object_get(qc, "fmt"));
    json_t *bs = json_object_get(qc, "weight_block_size");
    json_int_t b0 = json_integer_value(json_array_get(bs, 0)),
               b1 = json_integer_value(json_array_get(bs, 1));
    if (fmt && strcmp(fmt, "e4m3"))
        st =
            cllm_err_set(err, CLLM_EUNSUPPORTED,
                         "%s: fp8 quantization_config.fmt '%s' is not supported (e4m3)", path, fmt);
    else if (!json_is_array(bs) || json_array_size(bs) != 2 || b0 <= 0 || b1 <= 0 ||
             b0 > (1 << 20) || b1 > (1 << 20))
        st = cllm_err_set(err, CLLM_EUNSUPPORTED,
                          "%s: fp8 quantization_config.weight_block_size must be two positive "
                          "integers (per-tensor or per-channel FP8 is not supported)",
                          path);
    block[0] = (int)b0, block[1] = (int)b1;
    json_decref(root);
    return st;
}

cllm_status cllm_qformat_check_config(const char *dir, unsigned *flags, cllm_error *err) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    if (flags) *flags = 0;
    json_t *root = json_load_file(path, 0, NULL);
    json_t *qc = root ? json_object_get(root, "quantization_config") : NULL;
    const char *m = qc ? json_string_value(json_object_get(qc, "quant_method")) : NULL;
    cllm_status st = CLLM_OK;
    if (!qc) {
    } else if (m && !strcmp(m, "gptq")) {
        /* GPTQModel writes "format" (older: "checkpoint_format"); v2 stores zero, v1 zero - 1 */
        const char *f = json_string_value(json_object_get(qc, "format"));
        if (!f) f = json_string_value(json_object_get(qc, "checkpoint_format"));
        if (flags && json_is_true(json_object_get(qc, "sym"))) *flags |= CLLM_QFORMAT_GPTQ_SYM;
        if (f && !strcmp(f, "gptq_v2")) {
            if (flags) *flags |= CLLM_QFORMAT_GPTQ_V2;
        } else if (f && strcmp(f, "gptq")) {
            st = cllm_err_set(err, CLLM_EUNSUPPORTED,
                              "%s: gptq checkpoint format '%s' is not supported (gptq or "
                              "gptq_v2)",
                              path, f);
        } else if (json_is_true(json_object_get(qc, "is_marlin_format"))) {
            st = cllm_err_set(err, CLLM_EUNSUPPORTED,
                              "%s: gptq is_marlin_format checkpoints are not supported", path);
        }
    } else if (m && !strcmp(m, "awq")) {
        st = check_awq_config(path, qc, err);
        if (st == CLLM_OK && flags) *flags |= CLLM_QFORMAT_AWQ;
    } else if (m && !strcmp(m, "fp8")) {
        /* Not served: block FP8 has no exact int8 group form (see qformat.h), and dequantized to
         * BF16 it is the BF16 checkpoint's size. `cllm quantize` reads it exactly. */
        st = cllm_err_set(err, CLLM_EUNSUPPORTED,
                          "%s: quantization_config.quant_method 'fp8' (block FP8 e4m3) is not "
                          "served; convert it with `cllm quantize %s OUT` (exact dequantization, "
                          "then W4A16)",
                          path, dir);
    } else if (!m || strcmp(m, "compressed-tensors")) {
        st = cllm_err_set(err, CLLM_EUNSUPPORTED,
                          "%s: quantization_config.quant_method '%s' is not supported "
                          "(gptq, awq gemm, or compressed-tensors pack-quantized; fp8 through "
                          "`cllm quantize`)",
                          path, m ? m : "(missing)");
    } else {
        st = check_ct_config(path, qc, err);
    }
    json_decref(root);
    return st;
}

int cllm_qformat_uniform_zero(const cllm_qweight *q) {
    if (!q->qzeros || q->bits <= 0 || q->group <= 0) return 0;
    int per = 32 / q->bits;
    size_t n = (size_t)(q->K / q->group) * (size_t)(q->N / per);
    uint32_t w0 = (uint32_t)q->qzeros[0], z = w0 & ((1u << q->bits) - 1);
    for (int j = 1; j < per; j++) /* the word's other fields hold the same zero */
        if (((w0 >> (j * q->bits)) & ((1u << q->bits) - 1)) != z) return 0;
    for (size_t i = 1; i < n; i++)
        if ((uint32_t)q->qzeros[i] != w0) return 0;
    return (int)z + 1;
}

cllm_status cllm_qformat_check_sym_zeros(const cllm_qweight *q, unsigned flags, const char *base,
                                         cllm_error *err) {
    int per = 32 / q->bits, NG = q->K / q->group;
    uint32_t mask = (1u << q->bits) - 1, want = (1u << (q->bits - 1)) - 1;
    if (flags & CLLM_QFORMAT_GPTQ_V2) want++;
    for (int g = 0; g < NG; g++)
        for (int n = 0; n < q->N; n++) {
            uint32_t z =
                ((uint32_t)q->qzeros[(size_t)g * (q->N / per) + n / per] >> ((n % per) * q->bits)) &
                mask;
            if (z != want)
                return cllm_err_set(err, CLLM_EFORMAT,
                                    "tensor %s.qzeros: stored zero %u at (group %d, output %d) "
                                    "but quantization_config.sym is true (expected %u): vLLM's "
                                    "gptq_marlin ignores qzeros of symmetric files, cllm uses "
                                    "them, so the two would differ",
                                    base, z, g, n, want);
        }
    return CLLM_OK;
}

cllm_status cllm_qformat_check_fused_experts(const cllm_ckpt *ck, const char *experts,
                                             cllm_error *err) {
    static const char *const proj[] = {"gate_up_proj", "down_proj"};
    static const char *const suf[] = {".weight_packed", ".qweight", "_packed", ".weight_scale",
                                      "_qweight"};
    char name[256];
    for (int p = 0; p < 2; p++)
        for (size_t s = 0; s < sizeof(suf) / sizeof(suf[0]); s++) {
            snprintf(name, sizeof(name), "%s.%s%s", experts, proj[p], suf[s]);
            if (cllm_ckpt_get(ck, name))
                return cllm_err_set(err, CLLM_EUNSUPPORTED,
                                    "tensor %s: fused 3-D quantized experts are not supported "
                                    "(quantized experts must be stored per expert, "
                                    "%s.E.{gate,up,down}_proj.*, as llm-compressor and GPTQ "
                                    "releases do)",
                                    name, experts);
        }
    return CLLM_OK;
}

int cllm_qformat_act_bits(const char *dir) {
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

const char *const cllm_qformat_default_keep =
    "*embed_tokens*,*norm*,*.mlp.gate.weight,*shared_expert_gate*,*conv1d*,*A_log*,*dt_bias*,"
    "*in_proj_a*,*in_proj_b*,model.visual.*";

bool cllm_qformat_glob_match(const char *list, const char *name) {
    for (const char *p = list; p && *p;) {
        while (*p == ' ' || *p == ',') p++;
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char g[256];
        if (n && n < sizeof(g)) {
            memcpy(g, p, n);
            g[n] = 0;
            if (!fnmatch(g, name, 0)) return true;
        }
        p += n;
    }
    return false;
}

cllm_status cllm_qformat_config_set(json_t *root, const cllm_qformat_config_spec *s,
                                    cllm_error *err) {
    json_t *qc = json_object();
    json_object_set_new(qc, "quant_method", json_string("gptq"));
    json_object_set_new(qc, "bits", json_integer(s->bits));
    json_object_set_new(qc, "group_size", json_integer(s->group));
    json_object_set_new(qc, "sym", json_boolean(!s->asym));
    json_object_set_new(qc, "desc_act", json_false());
    json_object_set_new(qc, "checkpoint_format", json_string("gptq"));
    json_object_set_new(qc, "lm_head", json_boolean(s->lm_head_bits < 16));
    json_t *dyn = json_object();
    for (int i = 0; i < s->n_keep; i++) { /* glob -> regex: '.' -> '\.', '*' -> '.*' */
        char re[512] = "-:";
        size_t k = 2;
        for (const char *p = s->keep[i]; *p && k < sizeof(re) - 3; p++) {
            if (*p == '*')
                re[k++] = '.', re[k++] = '*';
            else if (*p == '.')
                re[k++] = '\\', re[k++] = '.';
            else
                re[k++] = *p;
        }
        re[k] = 0;
        json_object_set_new(dyn, re, json_object());
    }
    if (s->lm_head_bits >= 16)
        json_object_set_new(dyn, "-:lm_head", json_object());
    else if (s->lm_head_bits != s->bits) {
        json_t *lh = json_object();
        json_object_set_new(lh, "bits", json_integer(s->lm_head_bits));
        json_object_set_new(dyn, "+:lm_head", lh);
    }
    json_object_set_new(qc, "dynamic", dyn);
    json_object_set_new(qc, "cllm_scheme", json_string(s->scheme));
    json_object_set_new(qc, "cllm_method", json_string(s->method));
    json_object_set_new(qc, "cllm_act_bits", json_integer(s->act_bits));
    json_object_set_new(qc, "cllm_scale_dtype",
                        json_string(s->scale_bf16 ? "bfloat16" : "float16"));
    json_object_set_new(qc, "cllm_lm_head_bits", json_integer(s->lm_head_bits));
    if (json_object_set_new(root, "quantization_config", qc))
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    return CLLM_OK;
}
