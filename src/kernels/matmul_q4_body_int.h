/* Private: the float-activation GPTQ matmul (cllm_kern_ops.matmul_q, kernels.h: int4/int8 weights
 * x fp32 activations), written once over a small vector shim and compiled into each SIMD tier by a
 * file that defines the shim and includes this (kernels/x86/matmul_q4_avx2.c: 8 lanes,
 * kernels/x86/matmul_q4_avx512.c: 16 lanes and a masked 8-column tail, kernels/arm/
 * matmul_q4_neon.c: 4 lanes). The scalar oracle is kernels/matmul_q4_ref.c.
 *
 * The GPTQ layout packs along K with N contiguous, so one vector load of qweight row k8 holds
 * 32/bits consecutive k values for Q4_W consecutive outputs, one per 32-bit lane. Each value is
 * unpacked (its bits minus the group's zero, as float) right before its FMA with the broadcast
 * activation; nothing is dequantized to memory.
 *
 * Per output element the sequence is the one kernels.h fixes: per group gacc = fma(w, x, gacc)
 * over the group's k in order, then acc = fma(scale, gacc, acc), groups in order. Tiles of NB
 * column vectors (4 for one token, else 2, then 1) x TT tokens (1..Q4_TOK) only decide which
 * accumulators share registers, so a token's outputs are bitwise the same alone or in any batch,
 * and equal to the scalar tier whatever the width.
 *
 * The shim (TAIL: only the low 8 lanes of a 16-lane vector are columns; n0, n1 are multiples of 8):
 *   Q4_ENTRY the tier's matmul_q; Q4_W lanes; Q4_TOK most tokens per tile;
 *   Q4_ACC_Y 1: acc lives in Y between groups (frees registers for more tokens), 0: in registers;
 *   Q4_OWN(w, n0, n1, X, ldx, n_tok, Y, ldy, BITS) optional: 1 when a kernel of the tier's own
 *     took the call (same bits); Q4_UNROLL optional: the tile loops' pragma;
 *   types q4v_i (qweight words), q4v_z (a group's zeros as q4v_unpack takes them), q4v_f (fp32);
 *   q4v_load(src, TAIL), q4v_zeros(w, g, n, BITS, TAIL), q4v_scales(w, g, n, TAIL);
 *   q4v_unpack(v, z, BITS) the low BITS of each lane minus z, as float; q4v_next(v, BITS) the
 *   next BITS down; q4v_bcast(p) *p in every lane; q4v_fma(a, b, c) a * b + c rounded once;
 *   q4v_fzero(), q4v_fload(p, TAIL), q4v_fstore(p, v, TAIL). */
#if !defined(Q4_ENTRY) || !defined(Q4_W) || !defined(Q4_TOK) || !defined(Q4_ACC_Y)
#error "define the q4 shim (Q4_ENTRY, Q4_W, Q4_TOK, Q4_ACC_Y, q4v_*) before including this"
#endif
#include <stddef.h>
#include <stdint.h>

#include "kernels/kern_int.h"

#ifndef Q4_OWN /* no kernel of the tier's own: the tiles take every call */
#define Q4_OWN(w, n0, n1, X, ldx, n_tok, Y, ldy, BITS) 0
#endif

#define Q4_AI __attribute__((always_inline)) static inline
#ifndef Q4_UNROLL
/* Full unrolling of the register-tile loops lets the compiler keep the accumulator arrays in
 * registers (without it GCC 12 -O3 spills some inside the k loop on NEON). */
#define Q4_UNROLL _Pragma("GCC unroll 8")
#endif
#define PF_ROWS 16 /* software prefetch distance in qweight rows (chosen on AVX2) */

/* Output columns [n0, n0 + Q4_W NB) (TAIL: NB 1 and 8 columns) x tokens [0, TT). */
Q4_AI void q4_tile(const cllm_qweight *w, int n0, const float *X, size_t ldx, float *Y, size_t ldy,
                   const int BITS, const int NB, const int TT, const int TAIL) {
    const int per = 32 / BITS, G = w->group, NG = w->K / G;
    const size_t N = (size_t)w->N;
    q4v_f acc[4][Q4_TOK];
    if (!Q4_ACC_Y) {
        Q4_UNROLL
        for (int b = 0; b < NB; b++) Q4_UNROLL
        for (int t = 0; t < TT; t++) acc[b][t] = q4v_fzero();
    }
    for (int g = 0; g < NG; g++) {
        q4v_z zv[4];
        q4v_f gacc[4][Q4_TOK];
        Q4_UNROLL
        for (int b = 0; b < NB; b++) {
            zv[b] = q4v_zeros(w, g, n0 + Q4_W * b, BITS, TAIL);
            Q4_UNROLL
            for (int t = 0; t < TT; t++) gacc[b][t] = q4v_fzero();
        }
        const int k8e = (g + 1) * G / per;
        for (int k8 = g * G / per; k8 < k8e; k8++) {
            q4v_i v[4];
            Q4_UNROLL
            for (int b = 0; b < NB; b++) {
                const int32_t *src = w->qweight + (size_t)k8 * N + (size_t)(n0 + Q4_W * b);
                /* rows are N * 4 bytes apart: too far for the hardware prefetcher */
                __builtin_prefetch(src + PF_ROWS * N);
                v[b] = q4v_load(src, TAIL);
            }
            const float *xk = X + (size_t)k8 * (size_t)per;
            Q4_UNROLL
            for (int j = 0; j < per; j++) {
                q4v_f wf[4];
                Q4_UNROLL
                for (int b = 0; b < NB; b++) {
                    wf[b] = q4v_unpack(v[b], zv[b], BITS);
                    v[b] = q4v_next(v[b], BITS);
                }
                Q4_UNROLL
                for (int t = 0; t < TT; t++) {
                    q4v_f xb = q4v_bcast(xk + (size_t)t * ldx + (size_t)j);
                    Q4_UNROLL
                    for (int b = 0; b < NB; b++) gacc[b][t] = q4v_fma(wf[b], xb, gacc[b][t]);
                }
            }
        }
        Q4_UNROLL
        for (int b = 0; b < NB; b++) {
            q4v_f sv = q4v_scales(w, g, n0 + Q4_W * b, TAIL);
            Q4_UNROLL
            for (int t = 0; t < TT; t++) {
                if (!Q4_ACC_Y) {
                    acc[b][t] = q4v_fma(sv, gacc[b][t], acc[b][t]);
                    continue;
                }
                /* acc kept in Y (0 before group 0): the same operations and values */
                float *y = Y + (size_t)t * ldy + (size_t)(n0 + Q4_W * b);
                q4v_f a = g == 0 ? q4v_fzero() : q4v_fload(y, TAIL);
                q4v_fstore(y, q4v_fma(sv, gacc[b][t], a), TAIL);
            }
        }
    }
    if (!Q4_ACC_Y) {
        Q4_UNROLL
        for (int b = 0; b < NB; b++) Q4_UNROLL
        for (int t = 0; t < TT; t++)
            q4v_fstore(Y + (size_t)t * ldy + (size_t)(n0 + Q4_W * b), acc[b][t], TAIL);
    }
}

/* All column tiles of [n0, n1) for TT tokens. */
Q4_AI void q4_cols(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, float *Y,
                   size_t ldy, const int BITS, const int TT) {
    int n = n0;
    if (TT == 1) /* decode: 4 vectors of each qweight row per pass */
        for (; n + 4 * Q4_W <= n1; n += 4 * Q4_W) q4_tile(w, n, X, ldx, Y, ldy, BITS, 4, 1, 0);
    for (; n + 2 * Q4_W <= n1; n += 2 * Q4_W) q4_tile(w, n, X, ldx, Y, ldy, BITS, 2, TT, 0);
    if (Q4_W > 4) /* (4 lanes: n1 - n0, a multiple of 8, is whole pairs of vectors) */
        for (; n + Q4_W <= n1; n += Q4_W) q4_tile(w, n, X, ldx, Y, ldy, BITS, 1, TT, 0);
    if (Q4_W > 8 && n < n1) /* 8 columns left of a 16-lane vector */
        q4_tile(w, n, X, ldx, Y, ldy, BITS, 1, TT, 1);
}

#define Q4_TT(k) ((k) <= Q4_TOK ? (k) : 1) /* cases over Q4_TOK never run: no tile for them */

Q4_AI void q4_core(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                   float *Y, size_t ldy, const int BITS) {
    if (Q4_OWN(w, n0, n1, X, ldx, n_tok, Y, ldy, BITS)) return;
    for (int t = 0; t < n_tok; t += Q4_TOK) {
        const int tn = n_tok - t < Q4_TOK ? n_tok - t : Q4_TOK;
        const float *Xt = X + (size_t)t * ldx;
        float *Yt = Y + (size_t)t * ldy;
        /* TT a constant in each call, so the register tiles unroll (a switch: GCC allocates the
         * AVX-512 decode loop's registers better than after an if-chain) */
        switch (tn) {
        case 8:
            q4_cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, Q4_TT(8));
            break;
        case 7:
            q4_cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, Q4_TT(7));
            break;
        case 6:
            q4_cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, Q4_TT(6));
            break;
        case 5:
            q4_cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, Q4_TT(5));
            break;
        case 4:
            q4_cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, Q4_TT(4));
            break;
        case 3:
            q4_cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, Q4_TT(3));
            break;
        case 2:
            q4_cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, Q4_TT(2));
            break;
        default:
            q4_cols(w, n0, n1, Xt, ldx, Yt, ldy, BITS, 1);
            break;
        }
    }
}

static void q4_core4(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                     float *Y, size_t ldy) {
    q4_core(w, n0, n1, X, ldx, n_tok, Y, ldy, 4);
}
static void q4_core8(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                     float *Y, size_t ldy) {
    q4_core(w, n0, n1, X, ldx, n_tok, Y, ldy, 8);
}

/* The tier's matmul_q (contract in kernels.h). */
void Q4_ENTRY(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
              float *Y, size_t ldy) {
    kern_matmul_q_with(q4_core4, q4_core8, w, n0, n1, X, ldx, n_tok, Y, ldy);
}
