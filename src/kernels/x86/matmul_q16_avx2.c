/* AVX2 act_bits 16 integer path (cllm_kern_ops qact16_prep + matmul_q_qact16, kernels.h): GPTQ
 * int4/int8 weights x int16 activation codes, vpmaddwd into exact int32 group sums.
 *
 * Why: the float kernels spend 4-5 vector ops per 8 int4 products (unpack, convert, fma), so one
 * Zen 3 core tops out near 10 GB/s of weights and decode is compute bound. Here one 256-bit load
 * of qweight row k8 (8 columns, one per 32-bit lane) is split into int16 pairs by a mask: int4
 * `v >> 4j & 0x000F000F` = (q_j, q_j+4) per lane, j = 0..3, int8 `v >> 8j & 0x00FF00FF` =
 * (q_j, q_j+2), j = 0..1; vpmaddwd against the broadcast int32 word of the matching activation
 * pair gives q_j a_j + q_j' a_j' per lane. About 16 ops per 64 int4 products (was 32) and 7 per
 * 32 int8 products (was 20). Codes are unsigned (0..255) and activations +-32767, so no product
 * pair saturates; the group sum wraps modulo 2^32 at worst, and the final d = isum - z * asum
 * fits int32 (cllm_qact16_group), so it is exact in every tile and equal to the scalar tier.
 *
 * Prepared layout (this tier's, cllm_qact16_bytes per token): per 8 inputs the int16 codes in
 * the order the pairs are read, int4: a0 a4 a1 a5 a2 a6 a3 a7, int8: a0 a2 a1 a3 a4 a6 a5 a7;
 * then fp32 scales [K/AG], int32 sums [K/AG] (the ref's placement).
 *
 * The matmul itself is kernels/matmul_q16_body_int.h (the group-major sweep for 1..8 tokens, 2 x 4
 * register tiles beyond), shared with the AVX-512 tier; this file gives it 8-lane vectors. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/kern_int.h"
#include "kernels/x86/q_avx2_int.h"

/* ---- activation prep ---- */

static void prep(const float *x, int K, int AG, int bits, char *p) {
    const int NH = K / AG;
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 lo = _mm256_set1_ps(-32767.0f), hi = _mm256_set1_ps(32767.0f);
    const __m256i perm = bits == 8 ? _mm256_setr_epi32(0, 2, 1, 3, 4, 6, 5, 7)
                                   : _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    float *s = (float *)(void *)(p + 2 * (size_t)K);
    int32_t *sums = (int32_t *)(void *)(p + 2 * (size_t)K + 4 * (size_t)NH);
    for (int h = 0; h < NH; h++) {
        const float *xg = x + (size_t)h * AG;
        int16_t *code = (int16_t *)(void *)(p + 2 * (size_t)h * AG);
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < AG; k += 8) /* |x| first: a NaN input is skipped, as by fmaxf */
            m = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(xg + k), absm), m);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        float sc = _mm_cvtss_f32(m4) / 32767.0f;
        s[h] = sc;
        if (sc == 0.0f) {
            for (int k = 0; k < AG; k += 8)
                _mm_storeu_si128((__m128i *)(void *)(code + k), _mm_setzero_si128());
            sums[h] = 0;
            continue;
        }
        const __m256 sv = _mm256_set1_ps(sc);
        __m256i sum = _mm256_setzero_si256();
        for (int k = 0; k < AG; k += 8) {
            __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(xg + k), sv),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            /* max(r, lo) first: NaN -> -32767, as the ref's fmaxf */
            __m256i i = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
            sum = _mm256_add_epi32(sum, i);
            i = _mm256_permutevar8x32_epi32(i, perm);
            __m128i h16 =
                _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
            _mm_storeu_si128((__m128i *)(void *)(code + k), h16);
        }
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        sums[h] = _mm_cvtsi128_si32(s4);
    }
}

void kern_qact16_prep_avx2(const float *X, size_t ldx, int n_tok, int K, int ag, int bits,
                           void *A) {
    size_t stride = cllm_qact16_bytes(K, ag, 1);
    for (int t = 0; t < n_tok; t++)
        prep(X + (size_t)t * ldx, K, ag, bits, (char *)A + (size_t)t * stride);
}

/* ---- the matmul: kernels/matmul_q16_body_int.h over 8-lane vectors ---- */

#define QV_AI __attribute__((always_inline)) static inline
#define QV_W  8
typedef __m256i qv_i;
typedef __m256 qv_f;

QV_AI qv_i qv_izero(void) {
    return _mm256_setzero_si256();
}
QV_AI qv_i qv_iset(int32_t x) {
    return _mm256_set1_epi32(x);
}
QV_AI qv_i qv_iadd(qv_i a, qv_i b) {
    return _mm256_add_epi32(a, b);
}
QV_AI qv_i qv_load(const int32_t *src, const int TAIL) {
    (void)TAIL; /* 8 lanes: columns come in whole vectors (n0, n1 multiples of 8) */
    return _mm256_loadu_si256((const __m256i *)(const void *)src);
}
QV_AI qv_i qv_pairs(qv_i v, int j, const int BITS) {
    const __m256i m = _mm256_set1_epi32(BITS == 4 ? 0x000F000F : 0x00FF00FF);
    return _mm256_and_si256(j ? _mm256_srli_epi32(v, BITS * j) : v, m);
}
QV_AI qv_i qv_madd(qv_i u, qv_i a) {
    return _mm256_madd_epi16(u, a);
}
QV_AI qv_i qv_dot(qv_i acc, qv_i u, qv_i a, const int VNNI) {
    (void)VNNI;
    return _mm256_add_epi32(acc, _mm256_madd_epi16(u, a));
}
/* acc = fma(ws * s, (float)(isum - z * asum), acc): the contract's per-group float ops. */
QV_AI qv_f qv_group_end(qv_i isum, qv_i z, int32_t asum, qv_f ws, float s, qv_f acc) {
    __m256i d = _mm256_sub_epi32(isum, _mm256_mullo_epi32(z, _mm256_set1_epi32(asum)));
    return _mm256_fmadd_ps(_mm256_mul_ps(ws, _mm256_set1_ps(s)), _mm256_cvtepi32_ps(d), acc);
}
QV_AI qv_i qv_zeros(const cllm_qweight *w, int g, int n, const int BITS, const int TAIL) {
    (void)TAIL;
    return q_zeros8v(w, g, n, BITS);
}
QV_AI qv_f qv_scales(const cllm_qweight *w, int g, int n, const int TAIL) {
    (void)TAIL;
    return q_scales8(w, g, n);
}
QV_AI qv_f qv_fzero(void) {
    return _mm256_setzero_ps();
}
QV_AI qv_f qv_fload(const float *p, const int TAIL) {
    (void)TAIL;
    return _mm256_loadu_ps(p);
}
QV_AI void qv_fstore(float *p, qv_f v, const int TAIL) {
    (void)TAIL;
    _mm256_storeu_ps(p, v);
}
/* keeps a sum in a register: without it gcc reassociates the integer adds across j into a tree of
 * temporaries and spills them */
#define QV_PIN(x) __asm__("" : "+x"(x))
/* 16 ymm registers: 4 column vectors x 1..2 tokens, 2 x 3..4, 1 x 5 */
#define Q16_NB_SWEEP(TT) ((TT) <= 2 ? 4 : (TT) <= 4 ? 2 : 1)
/* 6..8 tokens in two passes over a tile, 4 + the rest: one pass at 1 column vector held 8 token
 * pointers and sums, and the pointers were reloaded from the stack every row (microbench,
 * tools/kbench, Zen 3, K 2048, 32-column panels: 8 tokens 9.58 -> 8.46 us, 7 tokens 8.42 ->
 * 7.37 us; 5 tokens, 5.5 us, gain nothing from 4 + 1 or 3 + 2) */
#define Q16_SW_SPLIT(TT) ((TT) <= 5 ? (TT) : 4)
/* one token: (p0 + p2) + (p1 + p3) per row, 13% faster than two add chains here (Zen 4, panels) */
#define Q16_ONE_TREE 1

#include "kernels/matmul_q16_body_int.h"

void kern_matmul_q_qact16_avx2(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                               float *Y, size_t ldy) {
    q16_core(w, n0, n1, A, n_tok, Y, ldy, 0);
}
