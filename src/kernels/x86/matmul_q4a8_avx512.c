/* AVX-512 W4A8/W4A4: GPTQ int4 weights x int8 activation codes (cllm_kern_ops.matmul_q4_qact
 * of the avx512 tier, kernels.c), called by the forward pass per slice of output
 * columns (model/forward.c mm_worker) on activations it prepared once per matmul; and the same
 * walk over 2-bit codes (matmul_q2_qact: the screened lm_head's estimate plane).
 *
 * Activations are prepared by kern_qact_prep_avx2 (kernels/x86/matmul_q4a8_avx2.c: same layout,
 * int8 codes regrouped per 8 inputs into an even-k and an odd-k word). One 512-bit load of
 * qweight row k8 holds 8 nibbles for each of 16 output columns (one per 32-bit lane); `& 0x0f`
 * per byte leaves q0 q2 q4 q6 and `>> 4 & 0x0f` leaves q1 q3 q5 q7. With VNNI, vpdpbusd (unsigned
 * codes 0..15 x signed codes, four products summed into the int32 lane) against the broadcast
 * even/odd words gives sum_j q_j a_j; without it, vpmaddubsw (|pair| <= 3810, no saturation),
 * an int16 add and vpmaddwd by 1 give the same integers. The zero point is folded in once per
 * group, sum q a - z sum a, exact in int32, so every tier and tile shape has the same integer;
 * the conversion acc = fma(w_scale * a_scale, (float)isum, acc) is the reference's sequence.
 * Tiles of 4 (decode) or 2 column blocks x 1..8 tokens (past 4, float sums kept in L1) only
 * decide which accumulators share registers, and an 8-column tail masks lanes 8..15: batch
 * invariant and bitwise equal to kernels/matmul_q4a8_ref.c. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kern_int.h"
#include "kernels/x86/q_avx512_int.h"

#define AI      __attribute__((always_inline)) static inline
#define PF_ROWS 16 /* as the AVX2 tier */
#define TOK     4  /* tokens per prefill tile */
#define FEW     8  /* up to 2 x FEW tokens (a verify, batched decode): passes of up to 8 tokens */

/* Output columns [n0, n0 + 16*NB) (TAIL: NB 1 and 8 columns) x tokens [0, TT) of the prepared
 * activations A (token stride `as` bytes). VNNI selects vpdpbusd over vpmaddubsw/vpmaddwd. BITS
 * 4: a qweight row is 8 inputs, its two code vectors (`& 0x0f`, `>> 4 & 0x0f`) meet the even and
 * odd activation words; BITS 2 (kernels.h, matmul_q2_qact): a row is 16 inputs, its four code
 * vectors (`>> 2s & 3`) meet the words of two 8-input blocks. */
AI void tile(const cllm_qweight *w, int n0, const char *A, size_t as, float *Y, size_t ldy,
             const int NB, const int TT, const int TAIL, const int VNNI, const int BITS) {
    const int G = w->group, NG = w->K / G;
    const int NS = 8 / BITS, RK = 32 / BITS; /* code vectors per row, inputs per row */
    const size_t N = (size_t)w->N, K = (size_t)w->K;
    const __m512i mk = _mm512_set1_epi8(BITS == 4 ? 0x0f : 0x03), ones = _mm512_set1_epi16(1);
    const __mmask16 cm = TAIL ? 0x00ff : 0xffff;
    /* decode has only NB chains: give vpdpbusd's even and odd halves their own accumulators */
    const int SPLIT = VNNI && TT == 1;
    /* past TOK tokens the float sums wait in L1 between groups (read and written once a group),
     * leaving the registers to the NB x TT integer sums: the same fma sequence, the same bits */
    const int MEM = TT > TOK;
    __m512 acc[4][TOK];
    float accm[4][FEW][16] __attribute__((aligned(64)));
    for (int b = 0; b < NB; b++)
        for (int t = 0; t < TT; t++)
            if (MEM)
                _mm512_store_ps(accm[b][t], _mm512_setzero_ps());
            else
                acc[b][t] = _mm512_setzero_ps();
    for (int g = 0; g < NG; g++) {
        __m512i isum[4][FEW], isum2[4];
        for (int b = 0; b < NB; b++) {
            isum2[b] = _mm512_setzero_si512();
            for (int t = 0; t < TT; t++) isum[b][t] = _mm512_setzero_si512();
        }
        const int re = (g + 1) * G / RK;
        for (int r = g * G / RK; r < re; r++) {
            __m512i cv[4][4]; /* [block][code vector] */
            for (int b = 0; b < NB; b++) {
                const int32_t *src = w->qweight + (size_t)r * N + n0 + 16 * b;
                _mm_prefetch((const char *)(src + PF_ROWS * N), _MM_HINT_T0);
                __m512i v = TAIL ? _mm512_maskz_loadu_epi32(cm, src) : _mm512_loadu_si512(src);
                for (int c = 0; c < NS; c++)
                    cv[b][c] = _mm512_and_si512(c ? _mm512_srli_epi16(v, BITS * c) : v, mk);
            }
            for (int t = 0; t < TT; t++) {
                const uint32_t *ev = (const uint32_t *)(const void *)(A + (size_t)t * as);
                __m512i a[4];
                for (int c = 0; c < NS; c++) a[c] = _mm512_set1_epi32((int32_t)ev[NS * r + c]);
                for (int b = 0; b < NB; b++) {
                    if (VNNI && SPLIT) {
                        for (int c = 0; c < NS; c += 2) {
                            isum[b][t] = _mm512_dpbusd_epi32(isum[b][t], cv[b][c], a[c]);
                            isum2[b] = _mm512_dpbusd_epi32(isum2[b], cv[b][c + 1], a[c + 1]);
                        }
                    } else if (VNNI) {
                        for (int c = 0; c < NS; c++)
                            isum[b][t] = _mm512_dpbusd_epi32(isum[b][t], cv[b][c], a[c]);
                    } else { /* |pair| <= 3810 (int4) or 762 (int2, four pairs summed: 3048) */
                        __m512i p = _mm512_maddubs_epi16(cv[b][0], a[0]);
                        for (int c = 1; c < NS; c++)
                            p = _mm512_add_epi16(p, _mm512_maddubs_epi16(cv[b][c], a[c]));
                        isum[b][t] = _mm512_add_epi32(isum[b][t], _mm512_madd_epi16(p, ones));
                    }
                }
            }
        }
        for (int b = 0; b < NB; b++) {
            __m512i zv = zeros16(w, g, n0 + 16 * b, 4, TAIL);
            __m512 sv = scales16(w, g, n0 + 16 * b, TAIL);
            if (SPLIT) isum[b][0] = _mm512_add_epi32(isum[b][0], isum2[b]);
            for (int t = 0; t < TT; t++) {
                const char *p = A + (size_t)t * as + K;
                float s = ((const float *)(const void *)p)[g];
                int32_t sum = ((const int32_t *)(const void *)(p + 4 * (size_t)NG))[g];
                __m512i gi =
                    _mm512_sub_epi32(isum[b][t], _mm512_mullo_epi32(zv, _mm512_set1_epi32(sum)));
                __m512 sc = _mm512_mul_ps(sv, _mm512_set1_ps(s));
                if (MEM)
                    _mm512_store_ps(accm[b][t], _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(gi),
                                                                _mm512_load_ps(accm[b][t])));
                else
                    acc[b][t] = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(gi), acc[b][t]);
            }
        }
    }
    for (int b = 0; b < NB; b++)
        for (int t = 0; t < TT; t++) {
            float *y = Y + (size_t)t * ldy + n0 + 16 * b;
            if (TAIL)
                _mm512_mask_storeu_ps(y, cm, MEM ? _mm512_load_ps(accm[b][t]) : acc[b][t]);
            else
                _mm512_storeu_ps(y, MEM ? _mm512_load_ps(accm[b][t]) : acc[b][t]);
        }
}

AI void cols(const cllm_qweight *w, int n0, int n1, const char *A, size_t as, float *Y, size_t ldy,
             const int TT, const int VNNI, const int BITS) {
    int n = n0;
    if (TT == 1) /* decode: 64 columns = 256 bytes of each qweight row per pass */
        for (; n + 64 <= n1; n += 64) tile(w, n, A, as, Y, ldy, 4, 1, 0, VNNI, BITS);
    for (; n + 32 <= n1; n += 32) tile(w, n, A, as, Y, ldy, 2, TT, 0, VNNI, BITS);
    for (; n + 16 <= n1; n += 16) tile(w, n, A, as, Y, ldy, 1, TT, 0, VNNI, BITS);
    if (n < n1) tile(w, n, A, as, Y, ldy, 1, TT, 1, VNNI, BITS);
}

/* Tokens [0, tn) in one pass over the columns (every pass reads the weights again, from L1 or L2
 * after the first): tn up to FEW. */
AI void pass(const cllm_qweight *w, int n0, int n1, const char *A, size_t as, float *Y, size_t ldy,
             int tn, const int VNNI, const int BITS) {
    switch (tn) {
    case 8:
        cols(w, n0, n1, A, as, Y, ldy, 8, VNNI, BITS);
        break;
    case 7:
        cols(w, n0, n1, A, as, Y, ldy, 7, VNNI, BITS);
        break;
    case 6:
        cols(w, n0, n1, A, as, Y, ldy, 6, VNNI, BITS);
        break;
    case 5:
        cols(w, n0, n1, A, as, Y, ldy, 5, VNNI, BITS);
        break;
    case 4:
        cols(w, n0, n1, A, as, Y, ldy, 4, VNNI, BITS);
        break;
    case 3:
        cols(w, n0, n1, A, as, Y, ldy, 3, VNNI, BITS);
        break;
    case 2:
        cols(w, n0, n1, A, as, Y, ldy, 2, VNNI, BITS);
        break;
    default:
        cols(w, n0, n1, A, as, Y, ldy, 1, VNNI, BITS);
        break;
    }
}

/* Up to 2 x FEW tokens (a verify of up to 16 positions, the screened lm_head's estimate of a
 * batch) in passes of up to FEW, balanced (9 = 5 + 4, not 4 + 4 + 1): a verify of 9 positions
 * read the lm_head's panels three times. More tokens (prefill): blocks of TOK, 2 column blocks a
 * tile. */
AI void core(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok, float *Y, size_t ldy,
             const int VNNI, const int BITS) {
    const size_t as = cllm_qact_bytes(w->K, w->group, 1);
    const int np = n_tok <= 2 * FEW ? (n_tok + FEW - 1) / FEW : 0;
    const int step = np ? (n_tok + np - 1) / np : TOK;
    for (int t = 0; t < n_tok; t += step) {
        int tn = n_tok - t < step ? n_tok - t : step;
        pass(w, n0, n1, (const char *)A + (size_t)t * as, as, Y + (size_t)t * ldy, ldy, tn, VNNI,
             BITS);
    }
}

void kern_matmul_q4_qact_avx512(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                                float *Y, size_t ldy) {
    core(w, n0, n1, A, n_tok, Y, ldy, 0, 4);
}

void kern_matmul_q4_qact_avx512_vnni(const cllm_qweight *w, int n0, int n1, const void *A,
                                     int n_tok, float *Y, size_t ldy) {
    core(w, n0, n1, A, n_tok, Y, ldy, 1, 4);
}

void kern_matmul_q2_qact_avx512(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                                float *Y, size_t ldy) {
    core(w, n0, n1, A, n_tok, Y, ldy, 0, 2);
}

void kern_matmul_q2_qact_avx512_vnni(const cllm_qweight *w, int n0, int n1, const void *A,
                                     int n_tok, float *Y, size_t ldy) {
    core(w, n0, n1, A, n_tok, Y, ldy, 1, 2);
}
