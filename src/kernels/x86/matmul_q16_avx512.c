/* AVX-512 act_bits 16 integer path (cllm_kern_ops.matmul_q_qact16 of the avx512 tier, kernels.c):
 * kernels/matmul_q16_body_int.h over 16-lane vectors, on activations prepared by
 * kern_qact16_prep_avx2 (same layout, matmul_q16_avx2.c). With VNNI, vpdpwssd does the pair
 * products and the int32 add in one instruction (the AVX2 tier is bound by its vpmaddwd +
 * vpaddd); without it, vpmaddwd and vpaddd. vpdpwssd (not the saturating vpdpwssds) wraps like
 * vpaddd, so the integers, and the results, are the other tiers' bit for bit. 16-lane tiles: 64
 * columns x up to 4 tokens or 32 x 5..8 in the sweep, a masked 8-column tail. Microbench (Zen 4,
 * 1 thread, K 2048 N 512, warm): one token 68 vs 46 GMAC/s for the AVX2 tier, 4 tokens 102 vs
 * 71, 8 tokens 106 vs 59, 64 tokens 107 vs 76. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/x86/q_avx512_int.h"

#define QV_AI __attribute__((always_inline)) static inline
#define QV_W  16
typedef __m512i qv_i;
typedef __m512 qv_f;

QV_AI qv_i qv_izero(void) {
    return _mm512_setzero_si512();
}
QV_AI qv_i qv_iset(int32_t x) {
    return _mm512_set1_epi32(x);
}
QV_AI qv_i qv_iadd(qv_i a, qv_i b) {
    return _mm512_add_epi32(a, b);
}
QV_AI qv_i qv_load(const int32_t *src, const int TAIL) {
    return TAIL ? _mm512_maskz_loadu_epi32(0x00ff, src) : _mm512_loadu_si512(src);
}
/* The pair codes of word j of v (int4: j 0..3, int8: j 0..1). */
QV_AI qv_i qv_pairs(qv_i v, int j, const int BITS) {
    const __m512i m = _mm512_set1_epi32(BITS == 4 ? 0x000F000F : 0x00FF00FF);
    return _mm512_and_si512(j ? _mm512_srli_epi32(v, BITS * j) : v, m);
}
QV_AI qv_i qv_madd(qv_i u, qv_i a) {
    return _mm512_madd_epi16(u, a);
}
QV_AI qv_i qv_dot(qv_i acc, qv_i u, qv_i a, const int VNNI) {
    if (VNNI) return _mm512_dpwssd_epi32(acc, u, a);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(u, a));
}
/* acc = fma(ws * s, (float)(isum - z * asum), acc): the contract's per-group float ops. */
QV_AI qv_f qv_group_end(qv_i isum, qv_i z, int32_t asum, qv_f ws, float s, qv_f acc) {
    __m512i d = _mm512_sub_epi32(isum, _mm512_mullo_epi32(z, _mm512_set1_epi32(asum)));
    return _mm512_fmadd_ps(_mm512_mul_ps(ws, _mm512_set1_ps(s)), _mm512_cvtepi32_ps(d), acc);
}
QV_AI qv_i qv_zeros(const cllm_qweight *w, int g, int n, const int BITS, const int TAIL) {
    return zeros16(w, g, n, BITS, TAIL);
}
QV_AI qv_f qv_scales(const cllm_qweight *w, int g, int n, const int TAIL) {
    return scales16(w, g, n, TAIL);
}
QV_AI qv_f qv_fzero(void) {
    return _mm512_setzero_ps();
}
QV_AI qv_f qv_fload(const float *p, const int TAIL) {
    return TAIL ? _mm512_maskz_loadu_ps(0x00ff, p) : _mm512_loadu_ps(p);
}
QV_AI void qv_fstore(float *p, qv_f v, const int TAIL) {
    if (TAIL)
        _mm512_mask_storeu_ps(p, 0x00ff, v);
    else
        _mm512_storeu_ps(p, v);
}
/* No register pin: on zmm it made gcc spill the sums of 4- and 8-token tiles (1.6x slower). */
#define QV_PIN(x) ((void)0)
/* 32 zmm registers: 4 column vectors x up to 4 tokens, 2 x 5..8, 1 x 9..16 */
#define Q16_NB_SWEEP(TT) ((TT) <= 4 ? 4 : (TT) <= 8 ? 2 : 1)
#define Q16_SW_MAX       16 /* the sweep up to 16 tokens (a batch's verify, batched decode) */
#define Q16_ONE_TREE     0

#include "kernels/matmul_q16_body_int.h"

void kern_matmul_q_qact16_avx512(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                                 float *Y, size_t ldy) {
    q16_core(w, n0, n1, A, n_tok, Y, ldy, 0);
}

void kern_matmul_q_qact16_avx512_vnni(const cllm_qweight *w, int n0, int n1, const void *A,
                                      int n_tok, float *Y, size_t ldy) {
    q16_core(w, n0, n1, A, n_tok, Y, ldy, 1);
}
