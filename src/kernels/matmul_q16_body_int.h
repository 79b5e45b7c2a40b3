/* Private: the act_bits 16 integer matmul (cllm_kern_ops.matmul_q_qact16, kernels.h: GPTQ
 * int4/int8 weights x int16 activation codes), written once over a small integer vector shim and
 * compiled into each x86 tier by a file that defines the shim and Q16_NB_SWEEP, then includes this
 * (kernels/x86/matmul_q16_avx2.c: 8 lanes, vpmaddwd + vpaddd; kernels/x86/matmul_q16_avx512.c: 16
 * lanes, vpdpwssd with VNNI). Both read kern_qact16_prep_avx2's layout.
 *
 * One load of qweight row k8 holds QV_W output columns (one per 32-bit lane); int4
 * `v >> 4j & 0x000F000F` = (q_j, q_j+4), int8 `v >> 8j & 0x00FF00FF` = (q_j, q_j+2), against the
 * broadcast int32 word of the matching activation pair: qv_dot adds q_j a_j + q_j' a_j' per lane.
 * Codes are unsigned (0..255) and activations +-32767, so no pair product saturates and the int32
 * group sum (wrapping at worst) is the same in every tile and tier; the final d = isum - z * asum
 * is exact, and the per-lane float sequence acc = fma(ws * s, (float)d, acc) is the contract's:
 * bitwise equal to kernels/matmul_q16_ref.c whatever the width, tile or token count.
 *
 * Up to SW_MAX tokens (decode, batched decode) sweep group-major over DEC_W-column blocks: per
 * activation group, tiles of NB vectors of columns walk the block reading only that group's
 * qweight rows, the running float sums in L1 (so the weights stream once per call). More tokens:
 * tiles of 2 vectors x 4 tokens over the whole K, token blocks of TB, 64-column chunks, so codes
 * stay in L2 and weights in L1. The shim supplies (W lanes; TAIL: only the low 8 lanes, AVX-512):
 *   qv_i, qv_f, QV_W; qv_izero, qv_iset, qv_iadd, qv_load(p, TAIL), qv_pairs(v, j, BITS),
 *   qv_madd(u, a) (pair products), qv_dot(acc, u, a, VNNI) (acc + pair products),
 * qv_group_end(isum, z, asum, ws, s, acc), qv_zeros(w, g, n, BITS, TAIL), qv_scales(w, g, n, TAIL),
 * qv_fzero, qv_fload(p, TAIL), qv_fstore(p, v, TAIL), QV_PIN(x) (an empty asm keeping a sum in a
 * register where the compiler would otherwise spill), Q16_NB_SWEEP(TT) (column vectors per sweep
 * tile for TT tokens), optionally Q16_SW_MAX (tokens the sweep takes, default 8; AVX-512 16),
 * Q16_SW_SPLIT(TT) (tokens of a first pass over each tile, the rest in a second; default all),
 * Q16_ONE_TREE (1: one token adds its pair products as a tree through qv_madd, for a tier without a
 * fused multiply-add; 0: two vpdpwssd chains per column vector). */
#if !defined(QV_W) || !defined(Q16_NB_SWEEP) || !defined(Q16_ONE_TREE)
#error "define the q16 shim (QV_W, qv_*, Q16_NB_SWEEP) before including this (kernels/x86/)"
#endif
#include <stdint.h>
#include <string.h>

#include "kernels/kern_int.h"

#define Q16_AI  __attribute__((always_inline)) static inline
#define DEC_W   512  /* columns per sweep block (acc 2 KiB per token) */
#define PF_ROWS 16   /* multi-token: prefetch distance in qweight rows */
#define TB      64   /* multi-token: tokens per block (64 x 2K bytes of codes in L2) */
#ifndef Q16_SW_SPLIT /* tokens of a sweep's first pass over a tile: all of them */
#define Q16_SW_SPLIT(TT) (TT)
#endif
#ifdef Q16_SW_MAX /* the tier's: as many token sums as its registers hold at one column vector */
#define SW_MAX Q16_SW_MAX
#else
#define SW_MAX 8
#endif

typedef struct {
    const int32_t *aw;  /* code pairs as int32 words: [K/2] */
    const float *s;     /* [K/AG] */
    const int32_t *sum; /* [K/AG] */
} qtok;

static qtok qtok_at(const void *A, int K, int NH, int t) {
    const char *p = (const char *)A + (size_t)t * (2 * (size_t)K + 8 * (size_t)NH);
    return (qtok){(const int32_t *)(const void *)p,
                  (const float *)(const void *)(p + 2 * (size_t)K),
                  (const int32_t *)(const void *)(p + 2 * (size_t)K + 4 * (size_t)NH)};
}

/* ---- one to SW_MAX tokens: group-major sweep ---- */

/* Activation group h of columns [n, n + QV_W NB) (TAIL: NB 1, 8 columns) for tokens A[0..TT):
 * acc[t * DEC_W + ...] (block-relative) updated. One token either adds its pair products as a tree
 * (Q16_ONE_TREE) or keeps two sums per column vector (even and odd j: twice the chains). */
Q16_AI void gtile(const cllm_qweight *w, int h, int AG, int n, const qtok *A, float *acc,
                  const int BITS, const int NB, const int TT, const int TAIL, const int VNNI) {
    const int per = 32 / BITS, J = BITS == 4 ? 4 : 2, g = h * AG / w->group;
    const size_t N = (size_t)w->N;
    const int SPLIT = TT == 1 && !Q16_ONE_TREE;
    qv_i isum[4][SW_MAX], odd[4];
    for (int b = 0; b < NB; b++) {
        odd[b] = qv_izero();
        for (int t = 0; t < TT; t++) isum[b][t] = qv_izero();
    }
    const int rows = AG / per, k80 = h * rows;
    const int32_t *src = w->qweight + (size_t)k80 * N + n;
    for (int r = 0; r < rows; r++, src += N) {
        /* the same columns one group further down: read on the next pass over this block */
        for (int b = 0; b < NB; b += 16 / QV_W) /* one per 64-byte line */
            _mm_prefetch((const char *)(src + (size_t)rows * N + QV_W * b), _MM_HINT_T0);
        const size_t kw = (size_t)(k80 + r) * J;
        if (TT == 1 && Q16_ONE_TREE) { /* one token, no multiply-add: pair sums as a tree */
            qv_i a[4];
            for (int j = 0; j < J; j++) a[j] = qv_iset(A[0].aw[kw + j]);
            for (int b = 0; b < NB; b++) { /* each load used at once: 16 ymm registers */
                qv_i vb = qv_load(src + QV_W * b, TAIL);
                qv_i p0 = qv_madd(qv_pairs(vb, 0, BITS), a[0]);
                qv_i p1 = qv_madd(qv_pairs(vb, 1, BITS), a[1]);
                if (BITS == 4) {
                    p0 = qv_iadd(p0, qv_madd(qv_pairs(vb, 2, BITS), a[2]));
                    p1 = qv_iadd(p1, qv_madd(qv_pairs(vb, 3, BITS), a[3]));
                }
                isum[b][0] = qv_iadd(isum[b][0], qv_iadd(p0, p1));
            }
            continue;
        }
        qv_i v[4];
        for (int b = 0; b < NB; b++) v[b] = qv_load(src + QV_W * b, TAIL);
        for (int j = 0; j < J; j++) {
            qv_i u[4];
            for (int b = 0; b < NB; b++) u[b] = qv_pairs(v[b], j, BITS);
            for (int t = 0; t < TT; t++) {
                qv_i a = qv_iset(A[t].aw[kw + j]);
                for (int b = 0; b < NB; b++) {
                    if (SPLIT && (j & 1)) {
                        odd[b] = qv_dot(odd[b], u[b], a, VNNI);
                    } else {
                        isum[b][t] = qv_dot(isum[b][t], u[b], a, VNNI);
                        QV_PIN(isum[b][t]);
                    }
                }
            }
        }
    }
    if (w->zero_const) { /* one zero for all: z * asum is a scalar, no qzeros read (the
                          * multiply by a constant 1 folds away); the same d, the same bits */
        for (int b = 0; b < NB; b++) {
            qv_f ws = qv_scales(w, g, n + QV_W * b, TAIL);
            for (int t = 0; t < TT; t++) {
                qv_i is = SPLIT ? qv_iadd(isum[b][0], odd[b]) : isum[b][t];
                float *ac = acc + (size_t)t * DEC_W + QV_W * b;
                int32_t zs = (int32_t)((uint32_t)w->zero_const * (uint32_t)A[t].sum[h]);
                qv_f o = qv_group_end(is, qv_iset(1), zs, ws, A[t].s[h], qv_fload(ac, TAIL));
                qv_fstore(ac, o, TAIL);
            }
        }
        return;
    }
    for (int b = 0; b < NB; b++) {
        qv_i z = qv_zeros(w, g, n + QV_W * b, BITS, TAIL);
        qv_f ws = qv_scales(w, g, n + QV_W * b, TAIL);
        for (int t = 0; t < TT; t++) {
            qv_i is = SPLIT ? qv_iadd(isum[b][0], odd[b]) : isum[b][t];
            float *ac = acc + (size_t)t * DEC_W + QV_W * b;
            qv_f o = qv_group_end(is, z, A[t].sum[h], ws, A[t].s[h], qv_fload(ac, TAIL));
            qv_fstore(ac, o, TAIL);
        }
    }
}

/* One column tile of group h for all TT tokens: in token chunks of T1 (the tier's
 * Q16_SW_SPLIT(TT)) and TT - T1, each chunk the tile's rows again while they are in L1 (more
 * tokens in one pass would hold more sums than the registers take). */
Q16_AI void gsplit(const cllm_qweight *w, int h, int AG, int n, const qtok *A, float *acc,
                   const int BITS, const int NB, const int TT, const int TAIL, const int VNNI) {
    const int T1 = Q16_SW_SPLIT(TT);
    gtile(w, h, AG, n, A, acc, BITS, NB, T1, TAIL, VNNI);
    if (TT > T1)
        gtile(w, h, AG, n, A + T1, acc + (size_t)T1 * DEC_W, BITS, NB, TT > T1 ? TT - T1 : 1, TAIL,
              VNNI);
}

Q16_AI void sweep(const cllm_qweight *w, int n0, int n1, const qtok *A, float *Y, size_t ldy,
                  const int BITS, const int TT, const int VNNI) {
    const int AG = cllm_qact16_group(BITS, w->group), NH = w->K / AG;
    const int NB = Q16_NB_SWEEP(Q16_SW_SPLIT(TT)); /* NB x chunk int32 sums in registers */
    float acc[SW_MAX * DEC_W] __attribute__((aligned(64)));
    for (int nb = n0; nb < n1; nb += DEC_W) {
        const int ne = nb + DEC_W < n1 ? nb + DEC_W : n1;
        for (int t = 0; t < TT; t++) memset(acc + t * DEC_W, 0, (size_t)(ne - nb) * sizeof(float));
        for (int h = 0; h < NH; h++) {
            int n = nb;
            if (NB >= 4)
                for (; n + 4 * QV_W <= ne; n += 4 * QV_W)
                    gsplit(w, h, AG, n, A, acc + (n - nb), BITS, 4, TT, 0, VNNI);
            if (NB >= 2)
                for (; n + 2 * QV_W <= ne; n += 2 * QV_W)
                    gsplit(w, h, AG, n, A, acc + (n - nb), BITS, 2, TT, 0, VNNI);
            for (; n + QV_W <= ne; n += QV_W)
                gsplit(w, h, AG, n, A, acc + (n - nb), BITS, 1, TT, 0, VNNI);
            if (n < ne) /* 8 columns left of a 16-lane vector (n1 - n0 is a multiple of 8) */
                gsplit(w, h, AG, n, A, acc + (n - nb), BITS, 1, TT, 1, VNNI);
        }
        for (int t = 0; t < TT; t++)
            memcpy(Y + (size_t)t * ldy + nb, acc + t * DEC_W, (size_t)(ne - nb) * sizeof(float));
    }
}

Q16_AI void few(const cllm_qweight *w, int n0, int n1, const void *Ap, int n_tok, float *Y,
                size_t ldy, const int BITS, const int VNNI) {
    const int K = w->K, NH = K / cllm_qact16_group(BITS, w->group);
    qtok A[SW_MAX];
    for (int t = 0; t < n_tok; t++) A[t] = qtok_at(Ap, K, NH, t);
    switch (n_tok) {
    case 1:
        sweep(w, n0, n1, A, Y, ldy, BITS, 1, VNNI);
        break;
    case 2:
        sweep(w, n0, n1, A, Y, ldy, BITS, 2, VNNI);
        break;
    case 3:
        sweep(w, n0, n1, A, Y, ldy, BITS, 3, VNNI);
        break;
    case 4:
        sweep(w, n0, n1, A, Y, ldy, BITS, 4, VNNI);
        break;
    case 5:
        sweep(w, n0, n1, A, Y, ldy, BITS, 5, VNNI);
        break;
    case 6:
        sweep(w, n0, n1, A, Y, ldy, BITS, 6, VNNI);
        break;
    case 7:
        sweep(w, n0, n1, A, Y, ldy, BITS, 7, VNNI);
        break;
    case 8:
        sweep(w, n0, n1, A, Y, ldy, BITS, 8, VNNI);
        break;
#if SW_MAX > 8
    case 9:
        sweep(w, n0, n1, A, Y, ldy, BITS, 9, VNNI);
        break;
    case 10:
        sweep(w, n0, n1, A, Y, ldy, BITS, 10, VNNI);
        break;
    case 11:
        sweep(w, n0, n1, A, Y, ldy, BITS, 11, VNNI);
        break;
    case 12:
        sweep(w, n0, n1, A, Y, ldy, BITS, 12, VNNI);
        break;
    case 13:
        sweep(w, n0, n1, A, Y, ldy, BITS, 13, VNNI);
        break;
    case 14:
        sweep(w, n0, n1, A, Y, ldy, BITS, 14, VNNI);
        break;
    case 15:
        sweep(w, n0, n1, A, Y, ldy, BITS, 15, VNNI);
        break;
    default:
        sweep(w, n0, n1, A, Y, ldy, BITS, 16, VNNI);
        break;
#endif
    }
}

/* ---- several tokens ---- */

/* Columns [n0, n0 + QV_W NB) (TAIL: NB 1, 8 columns) x tokens A[0..TT) over the whole K. */
Q16_AI void mtile(const cllm_qweight *w, int n0, const qtok *A, float *Y, size_t ldy,
                  const int BITS, const int NB, const int TT, const int TAIL, const int VNNI) {
    const int per = 32 / BITS, J = BITS == 4 ? 4 : 2, G = w->group;
    const int AG = cllm_qact16_group(BITS, G), NH = w->K / AG, rows = AG / per;
    const size_t N = (size_t)w->N;
    qv_f acc[2][4];
    for (int b = 0; b < NB; b++)
        for (int t = 0; t < TT; t++) acc[b][t] = qv_fzero();
    for (int h = 0; h < NH; h++) {
        qv_i isum[2][4];
        for (int b = 0; b < NB; b++)
            for (int t = 0; t < TT; t++) isum[b][t] = qv_izero();
        const int32_t *src = w->qweight + (size_t)h * rows * N + n0;
        for (int r = 0, k8 = h * rows; r < rows; r++, k8++, src += N) {
            qv_i v[2];
            for (int b = 0; b < NB; b++) {
                _mm_prefetch((const char *)(src + PF_ROWS * N + QV_W * b), _MM_HINT_T0);
                v[b] = qv_load(src + QV_W * b, TAIL);
            }
            for (int j = 0; j < J; j++) {
                qv_i u[2];
                for (int b = 0; b < NB; b++) u[b] = qv_pairs(v[b], j, BITS);
                for (int t = 0; t < TT; t++) {
                    qv_i a = qv_iset(A[t].aw[(size_t)k8 * J + j]);
                    for (int b = 0; b < NB; b++) {
                        isum[b][t] = qv_dot(isum[b][t], u[b], a, VNNI);
                        QV_PIN(isum[b][t]);
                    }
                }
            }
        }
        const int g = h * AG / G;
        for (int b = 0; b < NB; b++) {
            qv_i z = qv_zeros(w, g, n0 + QV_W * b, BITS, TAIL);
            qv_f ws = qv_scales(w, g, n0 + QV_W * b, TAIL);
            for (int t = 0; t < TT; t++)
                acc[b][t] = qv_group_end(isum[b][t], z, A[t].sum[h], ws, A[t].s[h], acc[b][t]);
        }
    }
    for (int b = 0; b < NB; b++)
        for (int t = 0; t < TT; t++)
            qv_fstore(Y + (size_t)t * ldy + n0 + QV_W * b, acc[b][t], TAIL);
}

Q16_AI void mcols(const cllm_qweight *w, int n0, int n1, const qtok *A, float *Y, size_t ldy,
                  const int BITS, const int TT, const int VNNI) {
    int n = n0;
    for (; n + 2 * QV_W <= n1; n += 2 * QV_W) mtile(w, n, A, Y, ldy, BITS, 2, TT, 0, VNNI);
    for (; n + QV_W <= n1; n += QV_W) mtile(w, n, A, Y, ldy, BITS, 1, TT, 0, VNNI);
    if (n < n1) mtile(w, n, A, Y, ldy, BITS, 1, TT, 1, VNNI);
}

Q16_AI void multi(const cllm_qweight *w, int n0, int n1, const void *Ap, int n_tok, float *Y,
                  size_t ldy, const int BITS, const int VNNI) {
    const int K = w->K, NH = K / cllm_qact16_group(BITS, w->group);
    for (int tb = 0; tb < n_tok; tb += TB) {
        const int te = n_tok - tb < TB ? n_tok : tb + TB;
        for (int c0 = n0; c0 < n1; c0 += 64) { /* 64 columns: their weights stay in L1/L2 */
            const int c1 = n1 - c0 < 64 ? n1 : c0 + 64;
            for (int t = tb; t < te; t += 4) {
                qtok A[4];
                const int tn = te - t < 4 ? te - t : 4;
                for (int i = 0; i < tn; i++) A[i] = qtok_at(Ap, K, NH, t + i);
                float *Yt = Y + (size_t)t * ldy;
                if (tn == 4)
                    mcols(w, c0, c1, A, Yt, ldy, BITS, 4, VNNI);
                else if (tn == 3)
                    mcols(w, c0, c1, A, Yt, ldy, BITS, 3, VNNI);
                else if (tn == 2)
                    mcols(w, c0, c1, A, Yt, ldy, BITS, 2, VNNI);
                else
                    mcols(w, c0, c1, A, Yt, ldy, BITS, 1, VNNI);
            }
        }
    }
}

/* The tier's entry points call this with VNNI a constant (0: qv_dot without it). */
Q16_AI void q16_core(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok, float *Y,
                     size_t ldy, const int VNNI) {
    if (n_tok <= SW_MAX) { /* decode, batched decode: the weights streamed once, group-major */
        if (w->bits == 8)
            few(w, n0, n1, A, n_tok, Y, ldy, 8, VNNI);
        else
            few(w, n0, n1, A, n_tok, Y, ldy, 4, VNNI);
        return;
    }
    if (w->bits == 8)
        multi(w, n0, n1, A, n_tok, Y, ldy, 8, VNNI);
    else
        multi(w, n0, n1, A, n_tok, Y, ldy, 4, VNNI);
}
