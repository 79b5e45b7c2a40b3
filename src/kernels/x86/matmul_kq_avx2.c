/* AVX2 ggml block-format matmul (cllm_kern_ops.matmul_kq, kernels.h). Panel form: the shared
 * body (kernels/matmul_kq_body_int.h) over 8-lane vectors. Block form (Q4_1 / Q5_1, or weights a
 * caller did not repack): rows decoded once per call, eight units of 16 inputs per step, their
 * exact int32 sums gathered into one vector so that lane j accumulates unit u = 8i + j exactly as
 * the reference's L[u % 8] does. Bitwise the same results as ref either way. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kern_int.h"

/* Exact int32 sum of c[16] * a[16] (codes int8, activations int16) into all lanes' sum. */
static inline __m256i dot16(const int8_t *c, const int16_t *a) {
    __m256i cw = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)c));
    return _mm256_madd_epi16(cw, _mm256_loadu_si256((const __m256i *)(const void *)a));
}

/* Lane j of the result = sum of the 8 lanes of v[j]. */
static inline __m256i hsum8x8(const __m256i *v) {
    __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i q0 = _mm256_hadd_epi32(h01, h23), q1 = _mm256_hadd_epi32(h45, h67);
    /* q0 = [v0 v1 v2 v3 partial (low 128) | same for the high 128]; fold the halves */
    __m256i lo = _mm256_permute2x128_si256(q0, q1, 0x20),
            hi = _mm256_permute2x128_si256(q0, q1, 0x31);
    return _mm256_add_epi32(lo, hi);
}

/* Row n decoded as kern_kq_decode_row does (the same codes, scales and mins), with the codes of
 * Q4_K / Q5_K / Q6_K unpacked 32 at a time; the other types take the scalar decoder. */
static void decode_row(const cllm_kqweight *w, int n, int8_t *c, float *ws, float *wm) {
    if (w->type != CLLM_KQ_Q4_K && w->type != CLLM_KQ_Q5_K && w->type != CLLM_KQ_Q6_K) {
        kern_kq_decode_row(w, n, c, ws, wm);
        return;
    }
    const uint8_t *b = w->data + (size_t)n * w->row_bytes;
    /* the next row (the caller walks rows in order): its blocks' loads otherwise stall the
     * decode at every block start (perf, decode on the quarter Q4_K_M: 15% on one load) */
    if (n + 1 < w->N)
        for (size_t o = 0; o < w->row_bytes; o += 64)
            _mm_prefetch((const char *)(b + w->row_bytes + o), _MM_HINT_T0);
    const int nb = w->K / 256;
    const size_t bb = w->row_bytes / (size_t)nb;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
#define LD(p)    _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define ST(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), v)
    for (int i = 0; i < nb; i++, b += bb, c += 256, ws += 16, wm += 16) {
        if (w->type == CLLM_KQ_Q6_K) {
            const uint8_t *ql = b, *qh = b + 128;
            const int8_t *sc = (const int8_t *)(b + 192);
            uint16_t hd;
            memcpy(&hd, b + 208, 2);
            const float d = _cvtsh_ss(hd); /* F16C: exact, as cllm_f16_to_f32 */
            for (int u = 0; u < 16; u++) ws[u] = d * (float)sc[u], wm[u] = 0.0f;
            const __m256i k32 = _mm256_set1_epi8(32);
            for (int h = 0; h < 2; h++) {
                __m256i q0 = LD(ql + 64 * h), q1 = LD(ql + 64 * h + 32), hb = LD(qh + 32 * h);
                __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4);
                __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4);
                __m256i h2 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4);
                __m256i h3 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4);
                int8_t *o = c + 128 * h;
                ST(o, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(q0, m4), h0), k32));
                ST(o + 32, _mm256_sub_epi8(_mm256_or_si256(_mm256_and_si256(q1, m4), h1), k32));
                ST(o + 64,
                   _mm256_sub_epi8(
                       _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4), h2), k32));
                ST(o + 96,
                   _mm256_sub_epi8(
                       _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4), h3), k32));
            }
            continue;
        }
        const bool q5 = w->type == CLLM_KQ_Q5_K;
        const uint8_t *ql = q5 ? b + 48 : b + 16;
        uint16_t h[2];
        memcpy(h, b, 4);
        kern_kq_k45_scales(b, _cvtsh_ss(h[0]), _cvtsh_ss(h[1]), ws, wm);
        const __m256i hb = q5 ? LD(b + 16) : _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i q = LD(ql + 32 * j), lo = _mm256_and_si256(q, m4),
                    hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (q5) { /* bit 2j (low nibbles) and 2j + 1 (high) of qh[l] as 16 */
                __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * j), one);
                __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * j + 1), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
            }
            ST(c + 64 * j, lo);
            ST(c + 64 * j + 32, hi);
        }
    }
#undef LD
#undef ST
}

/* ---- panel form (kernels/matmul_kq_body_int.h over 8 lanes: a panel is two vectors) ---- */
#define KV_AI __attribute__((always_inline)) static inline
#define KV_W  8
#define KV_TT 2
typedef __m256i kv_i;
typedef __m256 kv_f;

KV_AI kv_i kv_izero(void) {
    return _mm256_setzero_si256();
}
KV_AI kv_i kv_iadd(kv_i a, kv_i b) {
    return _mm256_add_epi32(a, b);
}
KV_AI kv_i kv_dot(kv_i acc, kv_i u, int32_t a, const int VNNI) {
    (void)VNNI;
    return _mm256_add_epi32(acc, _mm256_madd_epi16(u, _mm256_set1_epi32(a)));
}
KV_AI kv_i kv_isub(kv_i a, kv_i b) {
    return _mm256_sub_epi32(a, b);
}
KV_AI kv_i kv_iset(int32_t x) {
    return _mm256_set1_epi32(x);
}
KV_AI kv_i kv_or(kv_i a, kv_i b) {
    return _mm256_or_si256(a, b);
}
KV_AI kv_i kv_hi2(kv_i x, int j) {
    const kv_i m = _mm256_set1_epi32(0x00300030);
    if (j < 2) return _mm256_and_si256(_mm256_slli_epi32(x, 4 - 2 * j), m);
    return _mm256_and_si256(j > 2 ? _mm256_srli_epi32(x, 2 * j - 4) : x, m);
}
KV_AI void kv_prefetch(const uint8_t *p) {
    _mm_prefetch((const char *)p, _MM_HINT_T0);
}
KV_AI kv_i kv_load4(const uint8_t *p, int v) {
    return _mm256_loadu_si256((const __m256i *)(const void *)(p + 32 * v));
}
KV_AI kv_i kv_pairs4(kv_i x, int j) {
    const __m256i m = _mm256_set1_epi32(0x000F000F);
    return _mm256_and_si256(j ? _mm256_srli_epi32(x, 4 * j) : x, m);
}
KV_AI kv_i kv_codes8(const uint8_t *p, int v) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(p + 16 * v)));
}
KV_AI kv_f kv_scale(const int8_t *p, int v) {
    return _mm256_cvtepi32_ps(
        _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p + 8 * v))));
}
KV_AI kv_f kv_fzero(void) {
    return _mm256_setzero_ps();
}
KV_AI kv_f kv_fload(const float *p) {
    return _mm256_loadu_ps(p);
}
KV_AI void kv_fstore(float *p, kv_f v) {
    _mm256_storeu_ps(p, v);
}
KV_AI kv_f kv_fset(float x) {
    return _mm256_set1_ps(x);
}
KV_AI kv_f kv_cvt(kv_i x) {
    return _mm256_cvtepi32_ps(x);
}
KV_AI kv_f kv_mul(kv_f a, kv_f b) {
    return _mm256_mul_ps(a, b);
}
KV_AI kv_f kv_add(kv_f a, kv_f b) {
    return _mm256_add_ps(a, b);
}
KV_AI kv_f kv_fmadd(kv_f a, kv_f b, kv_f c) {
    return _mm256_fmadd_ps(a, b, c);
}
KV_AI kv_f kv_fnmadd(kv_f a, kv_f b, kv_f c) {
    return _mm256_fnmadd_ps(a, b, c);
}

#include "kernels/matmul_kq_body_int.h"

void kern_matmul_kq_avx2(const cllm_kqweight *w, int n0, int n1, const float *X, size_t ldx,
                         const void *A, int n_tok, float *Y, size_t ldy, bool act_f32) {
    if (act_f32) {
        kern_matmul_kq_f32(w, n0, n1, X, ldx, n_tok, Y, ldy);
        return;
    }
    if (w->type & CLLM_KQ_PANEL) {
        kq_panel_run(w, n0, n1, X, ldx, A, n_tok, Y, ldy, 0);
        return;
    }
    kern_kq_work k;
    if (kern_kq_scratch(w, A ? 0 : n_tok, &k)) {
        for (int t = 0; t < n_tok; t++)
            for (int n = n0; n < n1; n++) Y[(size_t)t * ldy + n] = NAN;
        return;
    }
    const char *toks = kern_kq_tokens(w, X, ldx, A, n_tok, &k);
    const int K = w->K, U = K / 16, U8 = U / 8 * 8;
    const bool mins = kern_kq_has_min(w->type);
    for (int n = n0; n < n1; n++) {
        decode_row(w, n, k.c, k.ws, k.wm);
        for (int t = 0; t < n_tok; t++) {
            const char *p = toks + (size_t)t * k.tok_bytes;
            const int16_t *a = (const int16_t *)(const void *)p;
            const float *su = (const float *)(const void *)(p + 2 * (size_t)K);
            const int32_t *au = (const int32_t *)(const void *)(su + U);
            __m256 L = _mm256_setzero_ps();
            for (int u = 0; u < U8; u += 8) {
                __m256i v[8];
                for (int j = 0; j < 8; j++) v[j] = dot16(k.c + 16 * (u + j), a + 16 * (u + j));
                __m256 is = _mm256_cvtepi32_ps(hsum8x8(v));
                __m256 s = _mm256_loadu_ps(su + u);
                L = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(k.ws + u), s), is, L);
                if (mins) {
                    __m256 m = _mm256_mul_ps(_mm256_loadu_ps(k.wm + u), s);
                    __m256 as = _mm256_cvtepi32_ps(
                        _mm256_loadu_si256((const __m256i *)(const void *)(au + u)));
                    L = _mm256_fnmadd_ps(m, as, L); /* fma(-(wm * s), asum, L) */
                }
            }
            float l[8];
            _mm256_storeu_ps(l, L);
            for (int u = U8; u < U; u++) { /* K % 128 != 0 (Q4_1 / Q5_1 rows) */
                int32_t is = 0;
                for (int i = 0; i < 16; i++) is += (int32_t)k.c[16 * u + i] * a[16 * u + i];
                l[u % 8] = fmaf(k.ws[u] * su[u], (float)is, l[u % 8]);
                if (mins) l[u % 8] = fmaf(-(k.wm[u] * su[u]), (float)au[u], l[u % 8]);
            }
            Y[(size_t)t * ldy + n] = kern_kq_sum8(l);
        }
    }
}
