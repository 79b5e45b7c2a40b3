/* AVX-512 ggml block-format matmul (cllm_kern_ops.matmul_kq of the avx512 tiers, kernels.c):
 * panel-form weights through kernels/matmul_kq_body_int.h over 16-lane vectors (one panel of 16
 * rows per vector, up to 8 tokens per tile: 1.15-1.2x 4 at 8 and 64 tokens), with VNNI's vpdpwssd
 * (it wraps like vpaddd: the same integers) or vpmaddwd + vpaddd; block-form weights (Q4_1 / Q5_1,
 * or a caller that did not repack) take the AVX2 kernel. Bitwise the ref's results either way
 * (test_kq_kern). */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/kern_int.h"

#define KV_AI __attribute__((always_inline)) static inline
#define KV_W  16
#define KV_TT 8
typedef __m512i kv_i;
typedef __m512 kv_f;

KV_AI kv_i kv_izero(void) {
    return _mm512_setzero_si512();
}
KV_AI kv_i kv_iadd(kv_i a, kv_i b) {
    return _mm512_add_epi32(a, b);
}
KV_AI kv_i kv_dot(kv_i acc, kv_i u, int32_t a, const int VNNI) {
    if (VNNI) return _mm512_dpwssd_epi32(acc, u, _mm512_set1_epi32(a));
    return _mm512_add_epi32(acc, _mm512_madd_epi16(u, _mm512_set1_epi32(a)));
}
KV_AI kv_i kv_isub(kv_i a, kv_i b) {
    return _mm512_sub_epi32(a, b);
}
KV_AI kv_i kv_iset(int32_t x) {
    return _mm512_set1_epi32(x);
}
KV_AI kv_i kv_or(kv_i a, kv_i b) {
    return _mm512_or_si512(a, b);
}
KV_AI kv_i kv_hi2(kv_i x, int j) {
    const kv_i m = _mm512_set1_epi32(0x00300030);
    if (j < 2) return _mm512_and_si512(_mm512_slli_epi32(x, 4 - 2 * j), m);
    return _mm512_and_si512(j > 2 ? _mm512_srli_epi32(x, 2 * j - 4) : x, m);
}
KV_AI void kv_prefetch(const uint8_t *p) {
    _mm_prefetch((const char *)p, _MM_HINT_T0);
}
KV_AI kv_i kv_load4(const uint8_t *p, int v) {
    (void)v;
    return _mm512_loadu_si512((const void *)p);
}
KV_AI kv_i kv_pairs4(kv_i x, int j) {
    const __m512i m = _mm512_set1_epi32(0x000F000F);
    return _mm512_and_si512(j ? _mm512_srli_epi32(x, 4 * j) : x, m);
}
KV_AI kv_i kv_codes8(const uint8_t *p, int v) {
    (void)v;
    return _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
KV_AI kv_f kv_scale(const int8_t *p, int v) {
    (void)v;
    return _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}
KV_AI kv_f kv_fzero(void) {
    return _mm512_setzero_ps();
}
KV_AI kv_f kv_fload(const float *p) {
    return _mm512_loadu_ps(p);
}
KV_AI void kv_fstore(float *p, kv_f v) {
    _mm512_storeu_ps(p, v);
}
KV_AI kv_f kv_fset(float x) {
    return _mm512_set1_ps(x);
}
KV_AI kv_f kv_cvt(kv_i x) {
    return _mm512_cvtepi32_ps(x);
}
KV_AI kv_f kv_mul(kv_f a, kv_f b) {
    return _mm512_mul_ps(a, b);
}
KV_AI kv_f kv_add(kv_f a, kv_f b) {
    return _mm512_add_ps(a, b);
}
KV_AI kv_f kv_fmadd(kv_f a, kv_f b, kv_f c) {
    return _mm512_fmadd_ps(a, b, c);
}
KV_AI kv_f kv_fnmadd(kv_f a, kv_f b, kv_f c) {
    return _mm512_fnmadd_ps(a, b, c);
}

#include "kernels/matmul_kq_body_int.h"

void kern_matmul_kq_avx512(const cllm_kqweight *w, int n0, int n1, const float *X, size_t ldx,
                           const void *A, int n_tok, float *Y, size_t ldy, bool act_f32) {
    if (act_f32 || !(w->type & CLLM_KQ_PANEL)) {
        kern_matmul_kq_avx2(w, n0, n1, X, ldx, A, n_tok, Y, ldy, act_f32);
        return;
    }
    kq_panel_run(w, n0, n1, X, ldx, A, n_tok, Y, ldy, 0);
}

void kern_matmul_kq_avx512_vnni(const cllm_kqweight *w, int n0, int n1, const float *X, size_t ldx,
                                const void *A, int n_tok, float *Y, size_t ldy, bool act_f32) {
    if (act_f32 || !(w->type & CLLM_KQ_PANEL)) {
        kern_matmul_kq_avx2(w, n0, n1, X, ldx, A, n_tok, Y, ldy, act_f32);
        return;
    }
    kq_panel_run(w, n0, n1, X, ldx, A, n_tok, Y, ldy, 1);
}
