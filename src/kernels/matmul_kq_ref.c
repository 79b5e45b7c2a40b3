/* ggml block-format matmul (cllm_kern_ops.matmul_kq, kernels.h): the row decoder and the
 * activation preparation every tier shares, and the scalar tier (the test oracle).
 *
 * Rows are decoded once per call into int8 codes and per-unit float scales/mins, then applied to
 * every token: prefill reads each weight row once per call, as the other matmuls do. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "kernels/kern_int.h"

const int8_t cllm_kq_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};

static float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return cllm_f16_to_f32(h);
}

bool kern_kq_has_min(int type) {
    type &= ~(CLLM_KQ_PANEL | CLLM_KQ_D128);
    return type == CLLM_KQ_Q4_K || type == CLLM_KQ_Q5_K || type == CLLM_KQ_Q4_1 ||
           type == CLLM_KQ_Q5_1;
}

int kern_kq_block(int type) {
    type &= ~(CLLM_KQ_PANEL | CLLM_KQ_D128);
    return type == CLLM_KQ_Q4_1 || type == CLLM_KQ_Q5_1 ? 32 : 256;
}

/* One 256-block of Q4_K / Q5_K: codes c (0..15 / 0..31), 16 unit scales and mins. */
static void dec_k45(const uint8_t *b, bool q5, int8_t *c, float *ws, float *wm) {
    const uint8_t *qh = b + 16, *ql = q5 ? b + 48 : b + 16;
    kern_kq_k45_scales(b, h2f(b), h2f(b + 2), ws, wm);
    for (int j = 0; j < 4; j++) {
        for (int l = 0; l < 32; l++) {
            int h0 = q5 ? (qh[l] >> (2 * j) & 1) << 4 : 0,
                h1 = q5 ? (qh[l] >> (2 * j + 1) & 1) << 4 : 0;
            c[64 * j + l] = (int8_t)((ql[32 * j + l] & 0xF) | h0);
            c[64 * j + 32 + l] = (int8_t)((ql[32 * j + l] >> 4) | h1);
        }
    }
}

static void dec_q6k(const uint8_t *b, int8_t *c, float *ws) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = h2f(b + 208);
    for (int u = 0; u < 16; u++) ws[u] = d * (float)sc[u]; /* unit u = weights 16u.. */
    for (int h = 0; h < 2; h++, ql += 64, qh += 32, c += 128)
        for (int l = 0; l < 32; l++) {
            c[l] = (int8_t)(((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32);
            c[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32);
            c[l + 64] = (int8_t)(((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32);
            c[l + 96] = (int8_t)(((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32);
        }
}

static void dec_iq4xs(const uint8_t *b, int8_t *c, float *ws) {
    const float d = h2f(b);
    uint16_t sh;
    memcpy(&sh, b + 2, 2);
    const uint8_t *sl = b + 4, *qs = b + 8;
    for (int ib = 0; ib < 8; ib++, qs += 16, c += 32) {
        int ls = ((sl[ib / 2] >> 4 * (ib % 2)) & 0xF) | ((sh >> 2 * ib) & 3) << 4;
        ws[2 * ib] = ws[2 * ib + 1] = d * (float)(ls - 32);
        for (int j = 0; j < 16; j++) {
            c[j] = cllm_kq_iq4_values[qs[j] & 0xF];
            c[j + 16] = cllm_kq_iq4_values[qs[j] >> 4];
        }
    }
}

/* Q4_1 / Q5_1 32-block: w = d * q + m, so ws = d and wm = -m. */
static void dec_q_1(const uint8_t *b, bool q5, int8_t *c, float *ws, float *wm) {
    uint32_t qh = 0;
    if (q5) memcpy(&qh, b + 4, 4);
    const uint8_t *qs = b + (q5 ? 8 : 4);
    ws[0] = ws[1] = h2f(b);
    wm[0] = wm[1] = -h2f(b + 2);
    for (int i = 0; i < 16; i++) {
        c[i] = (int8_t)((qs[i] & 0xF) | (q5 ? (int)((qh >> i) & 1) << 4 : 0));
        c[i + 16] = (int8_t)((qs[i] >> 4) | (q5 ? (int)((qh >> (i + 16)) & 1) << 4 : 0));
    }
}

void kern_kq_decode_row(const cllm_kqweight *w, int n, int8_t *c, float *ws, float *wm) {
    if (w->type & CLLM_KQ_PANEL) {
        kern_kq_panel_row(w, n, c, ws, wm);
        return;
    }
    const uint8_t *b = w->data + (size_t)n * w->row_bytes;
    const int B = kern_kq_block(w->type), nb = w->K / B;
    const size_t bb = w->row_bytes / (size_t)nb;
    for (int i = 0; i < nb; i++, b += bb, c += B, ws += B / 16, wm += B / 16) {
        if (!kern_kq_has_min(w->type)) memset(wm, 0, (size_t)(B / 16) * sizeof(*wm));
        switch (w->type) {
        case CLLM_KQ_Q4_K:
            dec_k45(b, false, c, ws, wm);
            break;
        case CLLM_KQ_Q5_K:
            dec_k45(b, true, c, ws, wm);
            break;
        case CLLM_KQ_Q6_K:
            dec_q6k(b, c, ws);
            break;
        case CLLM_KQ_IQ4_XS:
            dec_iq4xs(b, c, ws);
            break;
        case CLLM_KQ_Q4_1:
            dec_q_1(b, false, c, ws, wm);
            break;
        case CLLM_KQ_Q5_1:
            dec_q_1(b, true, c, ws, wm);
            break;
        default:
            break;
        }
    }
}

/* Per-thread scratch, grown as needed (a call's rows and tokens; freed at thread exit never:
 * the pool's threads live as long as the process). */
static _Thread_local char *kq_buf;
static _Thread_local size_t kq_cap;

int kern_kq_scratch(const cllm_kqweight *w, int n_tok, kern_kq_work *k) {
    const size_t K = (size_t)w->K, U = K / 16;
    size_t row = K + 8 * U, tok = cllm_kq_act_bytes(w->K, 1);
    size_t need = row + (size_t)n_tok * tok + 64;
    if (need > kq_cap) {
        char *nb = realloc(kq_buf, need);
        if (!nb) return -1;
        kq_buf = nb;
        kq_cap = need;
    }
    char *p = kq_buf;
    k->ws = (float *)(void *)p;
    k->wm = k->ws + U;
    k->c = (int8_t *)(void *)(k->wm + U);
    p += row;
    k->tok = p;
    k->tok_bytes = tok;
    return 0;
}

void cllm_kq_prep(int K, const float *X, size_t ldx, int n_tok, void *A) {
    const int U = K / 16;
    const size_t tb = cllm_kq_act_bytes(K, 1);
    float s32[4096 / 32 + 1];
    int32_t sum32[4096 / 32 + 1];
    for (int t = 0; t < n_tok; t++) {
        char *p = (char *)A + (size_t)t * tb;
        int16_t *a = (int16_t *)(void *)p;
        float *su = (float *)(void *)(p + 2 * (size_t)K);
        int32_t *au = (int32_t *)(void *)(su + U);
        for (int g0 = 0; g0 < K; g0 += 4096) { /* groups of 32; s32 holds 128 of them */
            int len = K - g0 < 4096 ? K - g0 : 4096;
            kern_quant_act16(X + (size_t)t * ldx + g0, len, 32, a + g0, s32, sum32);
            for (int u = 0; u < len / 16; u++) {
                int32_t s = 0;
                for (int i = 0; i < 16; i++) s += a[g0 + 16 * u + i];
                su[g0 / 16 + u] = s32[u / 2];
                au[g0 / 16 + u] = s;
            }
        }
    }
}

const char *kern_kq_tokens(const cllm_kqweight *w, const float *X, size_t ldx, const void *A,
                           int n_tok, kern_kq_work *k) {
    if (A) return A;
    cllm_kq_prep(w->K, X, ldx, n_tok, k->tok);
    return k->tok;
}

void kern_matmul_kq_f32(const cllm_kqweight *w, int n0, int n1, const float *X, size_t ldx,
                        int n_tok, float *Y, size_t ldy) {
    kern_kq_work k;
    if (kern_kq_scratch(w, 0, &k)) {
        for (int t = 0; t < n_tok; t++)
            for (int n = n0; n < n1; n++) Y[(size_t)t * ldy + n] = NAN;
        return;
    }
    const int U = w->K / 16;
    const bool mins = kern_kq_has_min(w->type);
    for (int n = n0; n < n1; n++) {
        kern_kq_decode_row(w, n, k.c, k.ws, k.wm);
        for (int t = 0; t < n_tok; t++) {
            const float *x = X + (size_t)t * ldx;
            float L[8] = {0};
            for (int u = 0; u < U; u++) {
                float f = 0.0f, xs = 0.0f;
                for (int i = 0; i < 16; i++) {
                    f = fmaf((float)k.c[16 * u + i], x[16 * u + i], f);
                    xs += x[16 * u + i];
                }
                L[u % 8] = fmaf(k.ws[u], f, L[u % 8]);
                if (mins) L[u % 8] = fmaf(-k.wm[u], xs, L[u % 8]);
            }
            Y[(size_t)t * ldy + n] = kern_kq_sum8(L);
        }
    }
}

void kern_matmul_kq_ref(const cllm_kqweight *w, int n0, int n1, const float *X, size_t ldx,
                        const void *A, int n_tok, float *Y, size_t ldy, bool act_f32) {
    if (act_f32) {
        kern_matmul_kq_f32(w, n0, n1, X, ldx, n_tok, Y, ldy);
        return;
    }
    kern_kq_work k;
    if (kern_kq_scratch(w, A ? 0 : n_tok, &k)) { /* no scratch: NaN rows say so in the logits */
        for (int t = 0; t < n_tok; t++)
            for (int n = n0; n < n1; n++) Y[(size_t)t * ldy + n] = NAN;
        return;
    }
    const char *toks = kern_kq_tokens(w, X, ldx, A, n_tok, &k);
    const int K = w->K, U = K / 16;
    const bool mins = kern_kq_has_min(w->type);
    for (int n = n0; n < n1; n++) {
        kern_kq_decode_row(w, n, k.c, k.ws, k.wm);
        for (int t = 0; t < n_tok; t++) {
            const char *p = toks + (size_t)t * k.tok_bytes;
            const int16_t *a = (const int16_t *)(const void *)p;
            const float *su = (const float *)(const void *)(p + 2 * (size_t)K);
            const int32_t *au = (const int32_t *)(const void *)(su + U);
            float L[8] = {0};
            for (int u = 0; u < U; u++) {
                int32_t is = 0;
                for (int i = 0; i < 16; i++) is += (int32_t)k.c[16 * u + i] * a[16 * u + i];
                L[u % 8] = fmaf(k.ws[u] * su[u], (float)is, L[u % 8]);
                if (mins) L[u % 8] = fmaf(-(k.wm[u] * su[u]), (float)au[u], L[u % 8]);
            }
            Y[(size_t)t * ldy + n] = kern_kq_sum8(L);
        }
    }
}

void cllm_kq_dequant_row(const cllm_kqweight *w, int n, float *dst) {
    kern_kq_work k;
    if (kern_kq_scratch(w, 0, &k)) {
        for (int i = 0; i < w->K; i++) dst[i] = NAN;
        return;
    }
    kern_kq_decode_row(w, n, k.c, k.ws, k.wm);
    for (int i = 0; i < w->K; i++) dst[i] = k.ws[i / 16] * (float)k.c[i] - k.wm[i / 16];
}
