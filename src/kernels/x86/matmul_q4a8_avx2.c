/* AVX2 W4A8: GPTQ int4 weights x int8 activations (cllm_kern_ops.matmul_q4_qact, kernels.h),
 * and 2-bit codes on the same walk (matmul_q2_qact: a row of 16 inputs, four code vectors
 * `>> 2s & 3` against the even/odd words of its two 8-input blocks).
 *
 * Activations are quantized per token and group on kern_quant_act's grid (vectorized, bitwise
 * the same; qmax 127 for act_bits 8, 7 for act_bits 4) by kern_qact_prep_avx2, which the AVX-512
 * tier shares, and regrouped per 8 inputs into two int32 words: the even
 * k bytes (a0 a2 a4 a6) and the odd ones (a1 a3 a5 a7). One 256-bit load of qweight row k8 holds
 * 8 nibbles for each of 8 output columns (one per 32-bit lane); `& 0x0f0f0f0f` leaves codes
 * q0 q2 q4 q6 in the lane's bytes and `>> 4 & 0x0f0f0f0f` leaves q1 q3 q5 q7, so vpmaddubsw
 * (unsigned codes 0..15 x signed int8, |pair| <= 3810, no saturation) against the broadcast
 * even/odd words, an int16 add and vpmaddwd by 1 give sum_j q_j a_j per lane in int32. The zero
 * point is folded in once per group: sum q a - z sum a, exact in int32, so every tier and tile
 * shape gives the same integer; the conversion acc = fma(w_scale * a_scale, (float)isum, acc)
 * is the reference's sequence. Tiles of 4 (decode) or 2 column blocks x 1..4 tokens only decide
 * which accumulators share registers: batch invariant and bitwise equal to the scalar tier.
 * 2-bit codes of groups up to 160 inputs add a whole group's int16 pair sums before the one
 * widening vpmaddwd (10 rows x 4 x 762 < 2^15): one op fewer per row and column vector, the
 * estimate pass 5-11% faster per token count (tools/kbench, Zen 3); the same integers. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kern_int.h"

#define AI      __attribute__((always_inline)) static inline
#define PF_ROWS 16
/* keeps a sum in a register (an empty asm): without it gcc interleaves the blocks' code vectors
 * and spills them */
#define Q8_PIN(x) __asm__("" : "+x"(x))

/* One prepared token (cllm_qact_bytes layout: ev words, then s, then sum). */
typedef struct {
    const uint32_t *ev; /* [K/8][2]: even, odd bytes of each 8-input block */
    const float *s;     /* [K/G] */
    const int32_t *sum; /* [K/G] */
} qtok;

static qtok qtok_at(const void *A, int K, int NG, int t) {
    const char *p = (const char *)A + (size_t)t * ((size_t)K + 8 * (size_t)NG);
    return (qtok){(const uint32_t *)(const void *)p, (const float *)(const void *)(p + K),
                  (const int32_t *)(const void *)(p + K + 4 * (size_t)NG)};
}

AI __m256i zeros8(const cllm_qweight *w, int g, int n0) {
    uint32_t word = (uint32_t)w->qzeros[(size_t)g * (w->N / 8) + n0 / 8];
    const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    __m256i z = _mm256_srlv_epi32(_mm256_set1_epi32((int32_t)word), sh);
    return _mm256_add_epi32(_mm256_and_si256(z, _mm256_set1_epi32(15)), _mm256_set1_epi32(1));
}

/* The NS code vectors of one qweight row's 8 columns at src: int4 q0 q2 q4 q6 / q1 q3 q5 q7 in
 * the lane's bytes (`& 0x0f`, `>> 4 & 0x0f`), 2-bit `>> 2s & 3`. */
AI void codes(const int32_t *src, __m256i *cv, const int BITS) {
    const __m256i mk = _mm256_set1_epi8(BITS == 4 ? 0x0f : 0x03);
    __m256i v = _mm256_loadu_si256((const __m256i *)src);
    for (int c = 0; c < 8 / BITS; c++)
        cv[c] = _mm256_and_si256(c ? _mm256_srli_epi16(v, BITS * c) : v, mk);
}

/* isum + one row's products of codes cv and activation words a: int16 pair sums (<= 3810, or
 * 4 x 762), added as int16 (S16: widened once per group by the caller) or widened to int32. */
AI __m256i row_sum(__m256i isum, const __m256i *cv, const __m256i *a, const int BITS,
                   const int S16) {
    __m256i p = _mm256_maddubs_epi16(cv[0], a[0]);
    for (int c = 1; c < 8 / BITS; c++) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(cv[c], a[c]));
    if (S16) return _mm256_add_epi16(isum, p);
    return _mm256_add_epi32(isum, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

/* Columns [n0, n0 + 8 NB NH) x tokens [0, TT): per group, NH passes over the group's rows, each
 * NB column vectors wide, the float sums in acc (registers or L1). Two half-width passes per
 * group (NH 2: a panel's 32 columns at NB 2, for 2..4 tokens, whose integer sums do not fit the
 * registers at NB 4) read the group's 2 KiB of rows once from memory while it is in L1: before,
 * two walks down the whole panel fetched every other line each, and 2 tokens ran at half the
 * stream rate of one (250 MB lm_head estimate, one core: 40 ms against 20). */
AI void tile(const cllm_qweight *w, int n0, const qtok *A, float *Y, size_t ldy, const int NB,
             const int TT, const int NH, const int BITS, const int S16) {
    const int G = w->group, NG = w->K / G;
    const int NS = 8 / BITS, RK = 32 / BITS; /* code vectors per row, inputs per row */
    const size_t N = (size_t)w->N;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[2][4][4];
    for (int h = 0; h < NH; h++)
        for (int b = 0; b < NB; b++)
            for (int t = 0; t < TT; t++) acc[h][b][t] = _mm256_setzero_ps();
    for (int g = 0; g < NG; g++) {
        const int re = (g + 1) * G / RK;
        for (int h = 0; h < NH; h++) {
            const int nh = n0 + 8 * NB * h;
            __m256i isum[4][4];
            for (int b = 0; b < NB; b++)
                for (int t = 0; t < TT; t++) isum[b][t] = _mm256_setzero_si256();
            for (int r = g * G / RK; r < re; r++) {
                __m256i cv[4][4];                    /* [block][code vector] */
                for (int b = 0; b < NB * NH; b += 2) /* one per 64-byte line, the first pass */
                    if (h == 0)
                        _mm_prefetch(
                            (const char *)(w->qweight + (size_t)(r + PF_ROWS) * N + n0 + 8 * b),
                            _MM_HINT_T0);
                if (TT == 1) { /* one block at a time: its codes used as they are made (all
                                * NB x NS code vectors at once spilled, 2-bit: 7 of 16) */
                    __m256i a[4];
                    for (int c = 0; c < NS; c++)
                        a[c] = _mm256_set1_epi32((int32_t)A[0].ev[NS * r + c]);
                    for (int b = 0; b < NB; b++) {
                        codes(w->qweight + (size_t)r * N + nh + 8 * b, cv[0], BITS);
                        isum[b][0] = row_sum(isum[b][0], cv[0], a, BITS, S16);
                        Q8_PIN(isum[b][0]);
                    }
                    continue;
                }
                for (int b = 0; b < NB; b++)
                    codes(w->qweight + (size_t)r * N + nh + 8 * b, cv[b], BITS);
                for (int t = 0; t < TT; t++) {
                    __m256i a[4];
                    for (int c = 0; c < NS; c++)
                        a[c] = _mm256_set1_epi32((int32_t)A[t].ev[NS * r + c]);
                    for (int b = 0; b < NB; b++)
                        isum[b][t] = row_sum(isum[b][t], cv[b], a, BITS, S16);
                }
            }
            if (S16)
                for (int b = 0; b < NB; b++)
                    for (int t = 0; t < TT; t++) isum[b][t] = _mm256_madd_epi16(isum[b][t], ones);
            for (int b = 0; b < NB; b++) {
                __m256i zv = zeros8(w, g, nh + 8 * b);
                __m128i sh =
                    _mm_loadu_si128((const __m128i *)(w->scales + (size_t)g * N + nh + 8 * b));
                __m256 sv = w->scale_bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(
                                                _mm256_cvtepu16_epi32(sh), 16)) /* bf16: exact */
                                          : _mm256_cvtph_ps(sh);
                for (int t = 0; t < TT; t++) {
                    __m256i gi = _mm256_sub_epi32(
                        isum[b][t], _mm256_mullo_epi32(zv, _mm256_set1_epi32(A[t].sum[g])));
                    __m256 sc = _mm256_mul_ps(sv, _mm256_set1_ps(A[t].s[g]));
                    acc[h][b][t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(gi), acc[h][b][t]);
                }
            }
        }
    }
    for (int h = 0; h < NH; h++)
        for (int b = 0; b < NB; b++)
            for (int t = 0; t < TT; t++)
                _mm256_storeu_ps(Y + (size_t)t * ldy + n0 + 8 * NB * h + 8 * b, acc[h][b][t]);
}

/* Quantize one token (kern_quant_act's grid bit for bit: max is exact, the division and the
 * round-to-nearest-even are the scalar ones lane by lane) and regroup its int8 codes into the
 * even/odd words at p (cllm_qact_bytes layout). G % 8 == 0. */
static void prep(const float *x, int K, int G, int bits, char *p) {
    const int NG = K / G;
    const float qmax = (float)((1 << (bits - 1)) - 1);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 lo = _mm256_set1_ps(-qmax), hi = _mm256_set1_ps(qmax);
    const __m256i perm = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    float *s = (float *)(void *)(p + K);
    int32_t *sums = (int32_t *)(void *)(p + K + 4 * (size_t)NG);
    for (int g = 0; g < NG; g++) {
        const float *xg = x + (size_t)g * G;
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < G; k += 8)
            m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(xg + k), absm));
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        float sc = _mm_cvtss_f32(m4) / qmax;
        s[g] = sc;
        uint64_t *ev = (uint64_t *)(void *)(p + (size_t)g * G);
        if (sc == 0.0f) {
            for (int k = 0; k < G; k += 8) ev[k / 8] = 0;
            sums[g] = 0;
            continue;
        }
        const __m256 sv = _mm256_set1_ps(sc);
        __m256i sum = _mm256_setzero_si256();
        for (int k = 0; k < G; k += 8) {
            __m256 r = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(xg + k), sv),
                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m256i i = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
            sum = _mm256_add_epi32(sum, i);
            i = _mm256_permutevar8x32_epi32(i, perm); /* i0 i2 i4 i6 i1 i3 i5 i7 */
            __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
            ev[k / 8] = (uint64_t)_mm_cvtsi128_si64(_mm_packs_epi16(h, h));
        }
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        sums[g] = _mm_cvtsi128_si32(s4);
    }
}

void kern_qact_prep_avx2(const float *X, size_t ldx, int n_tok, int K, int group, int act_bits,
                         void *A) {
    size_t stride = cllm_qact_bytes(K, group, 1);
    for (int t = 0; t < n_tok; t++)
        prep(X + (size_t)t * ldx, K, group, act_bits, (char *)A + (size_t)t * stride);
}

AI void walk(const cllm_qweight *w, int n0, int n1, const void *Ap, int n_tok, float *Y, size_t ldy,
             const int BITS, const int S16) {
    const int K = w->K, NG = K / w->group;
    int t = 0;
    for (; t + 4 <= n_tok; t += 4) {
        qtok A[4];
        for (int i = 0; i < 4; i++) A[i] = qtok_at(Ap, K, NG, t + i);
        int n = n0;
        for (; n + 32 <= n1; n += 32) tile(w, n, A, Y + (size_t)t * ldy, ldy, 2, 4, 2, BITS, S16);
        for (; n + 16 <= n1; n += 16) tile(w, n, A, Y + (size_t)t * ldy, ldy, 2, 4, 1, BITS, S16);
        for (; n < n1; n += 8) tile(w, n, A, Y + (size_t)t * ldy, ldy, 1, 4, 1, BITS, S16);
    }
    for (; t < n_tok; t += 3) {
        int tn = n_tok - t < 3 ? n_tok - t : 3;
        qtok A[3];
        for (int i = 0; i < tn; i++) A[i] = qtok_at(Ap, K, NG, t + i);
        float *Yt = Y + (size_t)t * ldy;
        int n = n0;
        if (tn == 1)
            for (; n + 32 <= n1; n += 32) tile(w, n, A, Yt, ldy, 4, 1, 1, BITS, S16);
        for (; n + 32 <= n1; n += 32) {
            if (tn == 3)
                tile(w, n, A, Yt, ldy, 2, 3, 2, BITS, S16);
            else
                tile(w, n, A, Yt, ldy, 2, 2, 2, BITS, S16);
        }
        for (; n + 16 <= n1; n += 16) {
            if (tn == 3)
                tile(w, n, A, Yt, ldy, 2, 3, 1, BITS, S16);
            else if (tn == 2)
                tile(w, n, A, Yt, ldy, 2, 2, 1, BITS, S16);
            else
                tile(w, n, A, Yt, ldy, 2, 1, 1, BITS, S16);
        }
        for (; n < n1; n += 8) {
            if (tn == 3)
                tile(w, n, A, Yt, ldy, 1, 3, 1, BITS, S16);
            else if (tn == 2)
                tile(w, n, A, Yt, ldy, 1, 2, 1, BITS, S16);
            else
                tile(w, n, A, Yt, ldy, 1, 1, 1, BITS, S16);
        }
    }
}

void kern_matmul_q4_qact_avx2(const cllm_qweight *w, int n0, int n1, const void *Ap, int n_tok,
                              float *Y, size_t ldy) {
    walk(w, n0, n1, Ap, n_tok, Y, ldy, 4, 0);
}

void kern_matmul_q2_qact_avx2(const cllm_qweight *w, int n0, int n1, const void *Ap, int n_tok,
                              float *Y, size_t ldy) {
    if (w->group <= 10 * 16) /* a group's int16 pair sums fit: 10 rows x 4 x 762 */
        walk(w, n0, n1, Ap, n_tok, Y, ldy, 2, 1);
    else
        walk(w, n0, n1, Ap, n_tok, Y, ldy, 2, 0);
}
