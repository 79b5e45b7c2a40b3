/* AVX-512 (F/BW/VL/DQ) matmul for GPTQ int4/int8 weights (cllm_qweight, kernels.h) x fp32
 * activations: the avx512 tier's matmul_q (kernels.c), called by the forward pass per slice of
 * output columns (model/forward.c mm_worker).
 *
 * Same scheme as kernels/x86/matmul_q4_avx2.c, twice as wide: one 512-bit load of qweight row k8
 * holds 32/bits consecutive k values for 16 consecutive outputs, one per 32-bit lane. Each value
 * is unpacked right before its FMA with the broadcast activation: one vpternlogd computes
 * (v & mask) | 0x4B000000, the float 2^23 + q exactly, and one subtraction of 2^23 + z gives
 * (float)(q - z) exactly (both operands are integers below 2^24): the value the reference
 * converts, one instruction fewer than mask, subtract, convert. An 8-column tail (N is only a
 * multiple of 8) runs the same tile with lanes 8..15 masked off on every load and store.
 *
 * Per output element the sequence is the one kernels.h fixes (per-group fma accumulation, then
 * acc = fma(scale, gacc, acc), acc living in Y between groups), identical to
 * kernels/matmul_q4_ref.c: tiles of 4 (decode) or 2 column blocks x 1..8 tokens only decide which
 * accumulators share registers, so a token's outputs are bitwise the same alone or in any batch,
 * and equal to the scalar and AVX2 tiers. Tile sizes and the unpacking were chosen with a
 * best-of-N microbenchmark on an AMD EPYC (Zen 4) core: 8 tokens x 32 columns is 1.1-1.2x faster
 * for prefill than 4 x 32 with acc in registers; vpternlogd unpacking is ~1.1x for decode. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kern_int.h"
#include "kernels/x86/q_avx512_int.h"

#define AI      __attribute__((always_inline)) static inline
#define PF_ROWS 16 /* software prefetch distance in qweight rows (as the AVX2 tier) */
#define TOK     8  /* tokens per prefill tile: 2 x 8 group accumulators + unpacked weights fit */

/* Output columns [n0, n0 + 16*NB) (TAIL: NB 1 and 8 columns) x tokens [0, TT). */
AI void tile(const cllm_qweight *w, int n0, const float *X, size_t ldx, float *Y, size_t ldy,
             const int BITS, const int NB, const int TT, const int TAIL) {
    const int per = 32 / BITS, G = w->group, NG = w->K / G;
    const size_t N = (size_t)w->N;
    const __m512i mask = _mm512_set1_epi32((1 << BITS) - 1);
    const __m512i magic = _mm512_set1_epi32(0x4B000000); /* float 2^23 */
    const __mmask16 cm = TAIL ? 0x00ff : 0xffff;
    for (int g = 0; g < NG; g++) {
        __m512 zf[4]; /* 2^23 + z */
        __m512 gacc[4][TOK];
        for (int b = 0; b < NB; b++) {
            zf[b] =
                _mm512_castsi512_ps(_mm512_or_si512(zeros16(w, g, n0 + 16 * b, BITS, TAIL), magic));
            for (int t = 0; t < TT; t++) gacc[b][t] = _mm512_setzero_ps();
        }
        const int k8e = (g + 1) * G / per;
        for (int k8 = g * G / per; k8 < k8e; k8++) {
            __m512i v[4];
            for (int b = 0; b < NB; b++) {
                const int32_t *src = w->qweight + (size_t)k8 * N + n0 + 16 * b;
                /* rows are N * 4 bytes apart: too far for the hardware prefetcher */
                _mm_prefetch((const char *)(src + PF_ROWS * N), _MM_HINT_T0);
                v[b] = TAIL ? _mm512_maskz_loadu_epi32(cm, src) : _mm512_loadu_si512(src);
            }
            const float *xk = X + (size_t)k8 * per;
            for (int j = 0; j < per; j++) {
                __m512 wf[4];
                for (int b = 0; b < NB; b++) {
                    __m512i qm = _mm512_ternarylogic_epi32(v[b], mask, magic, 0xEA); /* a&b|c */
                    wf[b] = _mm512_sub_ps(_mm512_castsi512_ps(qm), zf[b]);
                    v[b] = _mm512_srli_epi32(v[b], BITS);
                }
                for (int t = 0; t < TT; t++) {
                    __m512 xb = _mm512_set1_ps(xk[(size_t)t * ldx + j]);
                    for (int b = 0; b < NB; b++)
                        gacc[b][t] = _mm512_fmadd_ps(wf[b], xb, gacc[b][t]);
                }
            }
        }
        /* acc = fma(scale, gacc, acc), acc kept in Y (0 before group 0): frees the registers
         * for more tokens per tile; the same operations and values as a register acc */
        for (int b = 0; b < NB; b++) {
            __m512 sv = scales16(w, g, n0 + 16 * b, TAIL);
            for (int t = 0; t < TT; t++) {
                float *y = Y + (size_t)t * ldy + n0 + 16 * b;
                __m512 acc = g == 0 ? _mm512_setzero_ps()
                             : TAIL ? _mm512_maskz_loadu_ps(cm, y)
                                    : _mm512_loadu_ps(y);
                acc = _mm512_fmadd_ps(sv, gacc[b][t], acc);
                if (TAIL)
                    _mm512_mask_storeu_ps(y, cm, acc);
                else
                    _mm512_storeu_ps(y, acc);
            }
        }
    }
}

/* All column tiles of [n0, n1) for TT tokens. */
AI void cols(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, float *Y,
             size_t ldy, const int BITS, const int TT) {
    int n = n0;
    if (TT == 1) /* decode: 64 columns = 256 bytes of each qweight row per pass */
        for (; n + 64 <= n1; n += 64) tile(w, n, X, ldx, Y, ldy, BITS, 4, 1, 0);
    for (; n + 32 <= n1; n += 32) tile(w, n, X, ldx, Y, ldy, BITS, 2, TT, 0);
    for (; n + 16 <= n1; n += 16) tile(w, n, X, ldx, Y, ldy, BITS, 1, TT, 0);
    if (n < n1) tile(w, n, X, ldx, Y, ldy, BITS, 1, TT, 1);
}

AI void core(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok, float *Y,
             size_t ldy, const int BITS) {
    for (int t = 0; t < n_tok; t += TOK) {
        int tn = n_tok - t < TOK ? n_tok - t : TOK;
        const float *Xt = X + (size_t)t * ldx;
        float *Yt = Y + (size_t)t * ldy;
        switch (tn) {
        case 8:
            cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, 8);
            break;
        case 7:
            cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, 7);
            break;
        case 6:
            cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, 6);
            break;
        case 5:
            cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, 5);
            break;
        case 4:
            cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, 4);
            break;
        case 3:
            cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, 3);
            break;
        case 2:
            cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, 2);
            break;
        default:
            cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, 1);
            break;
        }
    }
}

static void core4(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                  float *Y, size_t ldy) {
    core(w, n0, n1, X, ldx, n_tok, Y, ldy, 4);
}
static void core8(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                  float *Y, size_t ldy) {
    core(w, n0, n1, X, ldx, n_tok, Y, ldy, 8);
}

/* The avx512 tier's matmul_q (contract in kernels.h). act_bits < 16 is the emulation: each
 * token's activations fake-quantized (kern_fake_quant_act) into a malloc'd row first. */
void kern_matmul_q_avx512(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx,
                          int n_tok, float *Y, size_t ldy) {
    kern_matmul_q_with(core4, core8, w, n0, n1, X, ldx, n_tok, Y, ldy);
}
