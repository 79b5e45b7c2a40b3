/* AVX-512 act_bits 16 integer path (cllm_kern_ops.matmul_q_qact16 of the avx512 tier, kernels.c):
 * GPTQ int4/int8 weights x int16 activation codes prepared by kern_qact16_prep_avx2 (same
 * layout, matmul_q16_avx2.c: per 8 inputs the codes in the order the pairs are read).
 *
 * The AVX2 tier's scheme at twice the width: one 512-bit load of qweight row k8 holds 16 output
 * columns (one per 32-bit lane); int4 `v >> 4j & 0x000F000F` = (q_j, q_j+4), int8
 * `v >> 8j & 0x00FF00FF` = (q_j, q_j+2), against the broadcast int32 word of the matching
 * activation pair. With VNNI, vpdpwssd does the pair products and the int32 add in one
 * instruction (the AVX2 kernel is bound by its vpmaddwd + vpaddd); without it, vpmaddwd and
 * vpaddd. vpdpwssd (not the saturating vpdpwssds) wraps like vpaddd, and no pair product
 * saturates (codes 0..255, activations +-32767), so every tile gets the same int32 group sum as
 * the reference, the final d = isum - z * asum is exact, and the per-lane float sequence
 * acc = fma(ws * s, (float)d, acc) is the contract's: bitwise equal to kernels/matmul_q16_ref.c.
 *
 * Shapes as in the AVX2 tier: one token sweeps group-major over DEC_W-column blocks (the running
 * sums in L1) with 64/32/16-column tiles and a masked 8-column tail; up to SW_MAX tokens take the
 * same sweep with NB x TT sums in registers; more tokens use 32-column x 4-token tiles over the
 * whole K, token blocks of TB. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/kern_int.h"
#include "kernels/x86/q_avx512.h"

#define AI      __attribute__((always_inline)) static inline
#define DEC_W   512 /* columns per decode block (acc 2 KiB per token) */
#define PF_ROWS 16  /* multi-token: prefetch distance in qweight rows */
#define TB      64  /* multi-token: tokens per block (64 x 2K bytes of codes in L2) */
#define SW_MAX  8

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

AI __m512i dot(__m512i acc, __m512i u, __m512i a, const int VNNI) {
    if (VNNI) return _mm512_dpwssd_epi32(acc, u, a);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(u, a));
}

/* The pair codes of word j of v (int4: j 0..3, int8: j 0..1). */
AI __m512i pairs(__m512i v, int j, const int BITS) {
    const __m512i m = _mm512_set1_epi32(BITS == 4 ? 0x000F000F : 0x00FF00FF);
    return _mm512_and_si512(j ? _mm512_srli_epi32(v, BITS * j) : v, m);
}

AI __m512i load16(const int32_t *src, const int TAIL) {
    return TAIL ? _mm512_maskz_loadu_epi32(0x00ff, src) : _mm512_loadu_si512(src);
}

/* acc = fma(ws * s, (float)(isum - z * asum), acc): the contract's per-group float ops. */
AI __m512 group_end(__m512i isum, __m512i z, int32_t asum, __m512 ws, float s, __m512 acc) {
    __m512i d = _mm512_sub_epi32(isum, _mm512_mullo_epi32(z, _mm512_set1_epi32(asum)));
    return _mm512_fmadd_ps(_mm512_mul_ps(ws, _mm512_set1_ps(s)), _mm512_cvtepi32_ps(d), acc);
}

/* ---- one to SW_MAX tokens: group-major sweep ---- */

/* Activation group h of columns [n, n + 16 NB) (TAIL: NB 1, 8 columns) for tokens A[0..TT):
 * acc[t * DEC_W + ...] (block-relative) updated. One token keeps two sums per column block
 * (even and odd j) so the vpdpwssd chains are twice as many. */
AI void gtile(const cllm_qweight *w, int h, int AG, int n, const qtok *A, float *acc,
              const int BITS, const int NB, const int TT, const int TAIL, const int VNNI) {
    const int per = 32 / BITS, J = BITS == 4 ? 4 : 2, g = h * AG / w->group;
    const size_t N = (size_t)w->N;
    __m512i isum[4][SW_MAX], odd[4];
    for (int b = 0; b < NB; b++) {
        odd[b] = _mm512_setzero_si512();
        for (int t = 0; t < TT; t++) isum[b][t] = _mm512_setzero_si512();
    }
    const int rows = AG / per, k80 = h * rows;
    const int32_t *src = w->qweight + (size_t)k80 * N + n;
    for (int r = 0; r < rows; r++, src += N) {
        /* the same columns one group further down: read on the next pass over this block */
        for (int b = 0; b < NB; b++)
            _mm_prefetch((const char *)(src + (size_t)rows * N + 16 * b), _MM_HINT_T0);
        __m512i v[4];
        for (int b = 0; b < NB; b++) v[b] = load16(src + 16 * b, TAIL);
        const size_t kw = (size_t)(k80 + r) * J;
        for (int j = 0; j < J; j++) {
            __m512i u[4];
            for (int b = 0; b < NB; b++) u[b] = pairs(v[b], j, BITS);
            for (int t = 0; t < TT; t++) {
                __m512i a = _mm512_set1_epi32(A[t].aw[kw + j]);
                for (int b = 0; b < NB; b++) {
                    /* no asm register pin here, unlike the AVX2 tier: on zmm it made gcc spill
                     * the sums of 4- and 8-token tiles (1.6x slower) */
                    if (TT == 1 && (j & 1))
                        odd[b] = dot(odd[b], u[b], a, VNNI);
                    else
                        isum[b][t] = dot(isum[b][t], u[b], a, VNNI);
                }
            }
        }
    }
    for (int b = 0; b < NB; b++) {
        __m512i z = zeros16(w, g, n + 16 * b, BITS, TAIL);
        __m512 ws = scales16(w, g, n + 16 * b, TAIL);
        for (int t = 0; t < TT; t++) {
            __m512i is = TT == 1 ? _mm512_add_epi32(isum[b][0], odd[b]) : isum[b][t];
            float *ac = acc + (size_t)t * DEC_W + 16 * b;
            const __mmask16 cm = TAIL ? 0x00ff : 0xffff;
            __m512 o = group_end(is, z, A[t].sum[h], ws, A[t].s[h], _mm512_maskz_loadu_ps(cm, ac));
            _mm512_mask_storeu_ps(ac, cm, o);
        }
    }
}

AI void sweep(const cllm_qweight *w, int n0, int n1, const qtok *A, float *Y, size_t ldy,
              const int BITS, const int TT, const int VNNI) {
    const int AG = cllm_qact16_group(BITS, w->group), NH = w->K / AG;
    const int NB = TT <= 4 ? 4 : 2; /* NB x TT int32 sums in registers (of 32) */
    float acc[SW_MAX * DEC_W] __attribute__((aligned(64)));
    for (int nb = n0; nb < n1; nb += DEC_W) {
        const int ne = nb + DEC_W < n1 ? nb + DEC_W : n1;
        for (int t = 0; t < TT; t++)
            for (int i = 0; i < ne - nb; i++) acc[t * DEC_W + i] = 0.0f;
        for (int h = 0; h < NH; h++) {
            int n = nb;
            if (NB == 4)
                for (; n + 64 <= ne; n += 64)
                    gtile(w, h, AG, n, A, acc + (n - nb), BITS, 4, TT, 0, VNNI);
            for (; n + 32 <= ne; n += 32)
                gtile(w, h, AG, n, A, acc + (n - nb), BITS, 2, TT, 0, VNNI);
            for (; n + 16 <= ne; n += 16)
                gtile(w, h, AG, n, A, acc + (n - nb), BITS, 1, TT, 0, VNNI);
            if (n < ne) gtile(w, h, AG, n, A, acc + (n - nb), BITS, 1, TT, 1, VNNI);
        }
        for (int t = 0; t < TT; t++)
            for (int i = 0; i < ne - nb; i += 8)
                _mm256_storeu_ps(Y + (size_t)t * ldy + nb + i, _mm256_load_ps(acc + t * DEC_W + i));
    }
}

AI void few(const cllm_qweight *w, int n0, int n1, const void *Ap, int n_tok, float *Y, size_t ldy,
            const int BITS, const int VNNI) {
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
    default:
        sweep(w, n0, n1, A, Y, ldy, BITS, 8, VNNI);
        break;
    }
}

/* ---- several tokens ---- */

/* Columns [n0, n0 + 16 NB) (TAIL: NB 1, 8 columns) x tokens A[0..TT) over the whole K. */
AI void mtile(const cllm_qweight *w, int n0, const qtok *A, float *Y, size_t ldy, const int BITS,
              const int NB, const int TT, const int TAIL, const int VNNI) {
    const int per = 32 / BITS, J = BITS == 4 ? 4 : 2, G = w->group;
    const int AG = cllm_qact16_group(BITS, G), NH = w->K / AG, rows = AG / per;
    const size_t N = (size_t)w->N;
    __m512 acc[2][4];
    for (int b = 0; b < NB; b++)
        for (int t = 0; t < TT; t++) acc[b][t] = _mm512_setzero_ps();
    for (int h = 0; h < NH; h++) {
        __m512i isum[2][4];
        for (int b = 0; b < NB; b++)
            for (int t = 0; t < TT; t++) isum[b][t] = _mm512_setzero_si512();
        const int32_t *src = w->qweight + (size_t)h * rows * N + n0;
        for (int r = 0, k8 = h * rows; r < rows; r++, k8++, src += N) {
            __m512i v[2];
            for (int b = 0; b < NB; b++) {
                _mm_prefetch((const char *)(src + PF_ROWS * N + 16 * b), _MM_HINT_T0);
                v[b] = load16(src + 16 * b, TAIL);
            }
            for (int j = 0; j < J; j++) {
                __m512i u[2];
                for (int b = 0; b < NB; b++) u[b] = pairs(v[b], j, BITS);
                for (int t = 0; t < TT; t++) {
                    __m512i a = _mm512_set1_epi32(A[t].aw[(size_t)k8 * J + j]);
                    for (int b = 0; b < NB; b++) isum[b][t] = dot(isum[b][t], u[b], a, VNNI);
                }
            }
        }
        const int g = h * AG / G;
        for (int b = 0; b < NB; b++) {
            __m512i z = zeros16(w, g, n0 + 16 * b, BITS, TAIL);
            __m512 ws = scales16(w, g, n0 + 16 * b, TAIL);
            for (int t = 0; t < TT; t++)
                acc[b][t] = group_end(isum[b][t], z, A[t].sum[h], ws, A[t].s[h], acc[b][t]);
        }
    }
    for (int b = 0; b < NB; b++)
        for (int t = 0; t < TT; t++) {
            float *y = Y + (size_t)t * ldy + n0 + 16 * b;
            if (TAIL)
                _mm512_mask_storeu_ps(y, 0x00ff, acc[b][t]);
            else
                _mm512_storeu_ps(y, acc[b][t]);
        }
}

AI void mcols(const cllm_qweight *w, int n0, int n1, const qtok *A, float *Y, size_t ldy,
              const int BITS, const int TT, const int VNNI) {
    int n = n0;
    for (; n + 32 <= n1; n += 32) mtile(w, n, A, Y, ldy, BITS, 2, TT, 0, VNNI);
    for (; n + 16 <= n1; n += 16) mtile(w, n, A, Y, ldy, BITS, 1, TT, 0, VNNI);
    if (n < n1) mtile(w, n, A, Y, ldy, BITS, 1, TT, 1, VNNI);
}

AI void multi(const cllm_qweight *w, int n0, int n1, const void *Ap, int n_tok, float *Y,
              size_t ldy, const int BITS, const int VNNI) {
    const int K = w->K, NH = K / cllm_qact16_group(BITS, w->group);
    for (int tb = 0; tb < n_tok; tb += TB) {
        const int te = n_tok - tb < TB ? n_tok : tb + TB;
        for (int c0 = n0; c0 < n1; c0 += 64) { /* 64 columns: their weights stay in L2 */
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

AI void core(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok, float *Y, size_t ldy,
             const int VNNI) {
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

void kern_matmul_q_qact16_avx512(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                                 float *Y, size_t ldy) {
    core(w, n0, n1, A, n_tok, Y, ldy, 0);
}

void kern_matmul_q_qact16_avx512_vnni(const cllm_qweight *w, int n0, int n1, const void *A,
                                      int n_tok, float *Y, size_t ldy) {
    core(w, n0, n1, A, n_tok, Y, ldy, 1);
}
