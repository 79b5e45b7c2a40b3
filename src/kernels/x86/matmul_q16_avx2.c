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
 * One token (decode) keeps matmul_q_dec_avx2.c's group-major sweep: per activation group, the
 * 32-column tiles walk a DEC_W-column block reading only that group's qweight rows, each as one
 * sequential run; the running sums stay in L1. Up to SW_MAX tokens (batched decode) take the same
 * sweep with 8-column x n_tok tiles. More tokens: 16-column x 4-token register tiles over the
 * whole K, token blocks of TB so their codes stay in L2. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/kern_int.h"
#include "kernels/x86/q_avx2.h"

#define AI      __attribute__((always_inline)) static inline
#define DEC_W   512 /* columns per decode block (acc 2 KiB) */
#define PF_ROWS 16  /* multi-token: prefetch distance in qweight rows */
#define TB      64  /* multi-token: tokens per block (64 x 2K bytes of codes in L2) */

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

/* ---- shared pieces ---- */

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

/* acc = fma(ws * s, (float)(isum - z * asum), acc): the contract's per-group float ops. */
AI __m256 group_end(__m256i isum, __m256i z, int32_t asum, __m256 ws, float s, __m256 acc) {
    __m256i d = _mm256_sub_epi32(isum, _mm256_mullo_epi32(z, _mm256_set1_epi32(asum)));
    return _mm256_fmadd_ps(_mm256_mul_ps(ws, _mm256_set1_ps(s)), _mm256_cvtepi32_ps(d), acc);
}

/* ---- one token ---- */

/* Activation group h of columns [n, n + 8 NB): acc[] (L1, block-relative) updated. */
AI void gtile(const cllm_qweight *w, int h, int AG, int n, const qtok *A, float *acc,
              const int BITS, const int NB) {
    const int per = 32 / BITS, J = BITS == 4 ? 4 : 2, g = h * AG / w->group;
    const size_t N = (size_t)w->N;
    const __m256i m = _mm256_set1_epi32(BITS == 4 ? 0x000F000F : 0x00FF00FF);
    __m256i isum[4];
    for (int b = 0; b < NB; b++) isum[b] = _mm256_setzero_si256();
    const int rows = AG / per, k80 = h * rows;
    const int32_t *src = w->qweight + (size_t)k80 * N + n;
    const int32_t *aw = A->aw + (size_t)k80 * J;
    for (int r = 0; r < rows; r++, src += N, aw += J) {
        /* the same columns one group further down: read on the next pass over this block */
        _mm_prefetch((const char *)(src + (size_t)rows * N), _MM_HINT_T0);
        if (NB > 2) _mm_prefetch((const char *)(src + (size_t)rows * N + 16), _MM_HINT_T0);
        __m256i a[4];
        for (int j = 0; j < J; j++) a[j] = _mm256_set1_epi32(aw[j]);
        for (int b = 0; b < NB; b++) {
            __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(src + 8 * b));
            __m256i p0 = _mm256_madd_epi16(_mm256_and_si256(v, m), a[0]);
            __m256i p1 = _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi32(v, BITS), m), a[1]);
            if (BITS == 4) {
                __m256i p2 = _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi32(v, 8), m), a[2]);
                __m256i p3 = _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi32(v, 12), m), a[3]);
                p0 = _mm256_add_epi32(p0, p2);
                p1 = _mm256_add_epi32(p1, p3);
            }
            isum[b] = _mm256_add_epi32(isum[b], _mm256_add_epi32(p0, p1));
        }
    }
    for (int b = 0; b < NB; b++) {
        __m256 a0 = _mm256_loadu_ps(acc + 8 * b);
        a0 = group_end(isum[b], q_zeros8v(w, g, n + 8 * b, BITS), A->sum[h],
                       q_scales8(w, g, n + 8 * b), A->s[h], a0);
        _mm256_storeu_ps(acc + 8 * b, a0);
    }
}

AI void dec(const cllm_qweight *w, int n0, int n1, const qtok *A, float *y, const int BITS) {
    const int AG = cllm_qact16_group(BITS, w->group), NH = w->K / AG;
    float acc[DEC_W] __attribute__((aligned(32)));
    for (int nb = n0; nb < n1; nb += DEC_W) {
        const int ne = nb + DEC_W < n1 ? nb + DEC_W : n1;
        for (int i = 0; i < ne - nb; i++) acc[i] = 0.0f;
        for (int h = 0; h < NH; h++) {
            int n = nb;
            for (; n + 32 <= ne; n += 32) gtile(w, h, AG, n, A, acc + (n - nb), BITS, 4);
            for (; n + 16 <= ne; n += 16) gtile(w, h, AG, n, A, acc + (n - nb), BITS, 2);
            for (; n < ne; n += 8) gtile(w, h, AG, n, A, acc + (n - nb), BITS, 1);
        }
        for (int i = 0; i < ne - nb; i += 8) _mm256_storeu_ps(y + nb + i, _mm256_load_ps(acc + i));
    }
}

/* ---- a few tokens (batched decode): the one-token sweep for up to SW_MAX tokens ---- */

#define SW_MAX 8

/* Activation group h of columns [n, n + 8 NB) for tokens A[0..TT) (NB x TT <= 8 sums):
 * acc[t * DEC_W + ...] updated. */
AI void gtile_m(const cllm_qweight *w, int h, int AG, int n, const qtok *A, float *acc,
                const int BITS, const int NB, const int TT) {
    const int per = 32 / BITS, J = BITS == 4 ? 4 : 2, g = h * AG / w->group;
    const size_t N = (size_t)w->N;
    const __m256i m = _mm256_set1_epi32(BITS == 4 ? 0x000F000F : 0x00FF00FF);
    __m256i isum[4][SW_MAX];
    for (int b = 0; b < NB; b++)
        for (int t = 0; t < TT; t++) isum[b][t] = _mm256_setzero_si256();
    const int rows = AG / per, k80 = h * rows;
    const int32_t *src = w->qweight + (size_t)k80 * N + n;
    for (int r = 0; r < rows; r++, src += N) {
        _mm_prefetch((const char *)(src + (size_t)rows * N), _MM_HINT_T0);
        if (NB > 2) _mm_prefetch((const char *)(src + (size_t)rows * N + 16), _MM_HINT_T0);
        __m256i v[4];
        for (int b = 0; b < NB; b++)
            v[b] = _mm256_loadu_si256((const __m256i *)(const void *)(src + 8 * b));
        const size_t kw = (size_t)(k80 + r) * J;
        for (int j = 0; j < J; j++) {
            __m256i u[4];
            for (int b = 0; b < NB; b++)
                u[b] = _mm256_and_si256(j ? _mm256_srli_epi32(v[b], BITS * j) : v[b], m);
            for (int t = 0; t < TT; t++) {
                __m256i a = _mm256_set1_epi32(A[t].aw[kw + j]);
                for (int b = 0; b < NB; b++) {
                    isum[b][t] = _mm256_add_epi32(isum[b][t], _mm256_madd_epi16(u[b], a));
                    __asm__("" : "+x"(isum[b][t])); /* see mtile */
                }
            }
        }
    }
    for (int b = 0; b < NB; b++) {
        __m256i z = q_zeros8v(w, g, n + 8 * b, BITS);
        __m256 ws = q_scales8(w, g, n + 8 * b);
        for (int t = 0; t < TT; t++) {
            float *ac = acc + (size_t)t * DEC_W + 8 * b;
            _mm256_storeu_ps(
                ac, group_end(isum[b][t], z, A[t].sum[h], ws, A[t].s[h], _mm256_loadu_ps(ac)));
        }
    }
}

AI void sweep(const cllm_qweight *w, int n0, int n1, const qtok *A, float *Y, size_t ldy,
              const int BITS, const int TT) {
    const int AG = cllm_qact16_group(BITS, w->group), NH = w->K / AG;
    const int NB = TT <= 2 ? 4 : TT <= 4 ? 2 : 1; /* NB x TT int32 sums in registers */
    float acc[SW_MAX * DEC_W] __attribute__((aligned(32)));
    for (int nb = n0; nb < n1; nb += DEC_W) {
        const int ne = nb + DEC_W < n1 ? nb + DEC_W : n1;
        for (int t = 0; t < TT; t++)
            for (int i = 0; i < ne - nb; i++) acc[t * DEC_W + i] = 0.0f;
        for (int h = 0; h < NH; h++) {
            int n = nb;
            if (NB == 4)
                for (; n + 32 <= ne; n += 32) gtile_m(w, h, AG, n, A, acc + (n - nb), BITS, 4, TT);
            if (NB >= 2)
                for (; n + 16 <= ne; n += 16) gtile_m(w, h, AG, n, A, acc + (n - nb), BITS, 2, TT);
            for (; n < ne; n += 8) gtile_m(w, h, AG, n, A, acc + (n - nb), BITS, 1, TT);
        }
        for (int t = 0; t < TT; t++)
            for (int i = 0; i < ne - nb; i += 8)
                _mm256_storeu_ps(Y + (size_t)t * ldy + nb + i, _mm256_load_ps(acc + t * DEC_W + i));
    }
}

AI void few(const cllm_qweight *w, int n0, int n1, const void *Ap, int n_tok, float *Y, size_t ldy,
            const int BITS) {
    const int K = w->K, NH = K / cllm_qact16_group(BITS, w->group);
    qtok A[SW_MAX];
    for (int t = 0; t < n_tok; t++) A[t] = qtok_at(Ap, K, NH, t);
    switch (n_tok) {
    case 2:
        sweep(w, n0, n1, A, Y, ldy, BITS, 2);
        break;
    case 3:
        sweep(w, n0, n1, A, Y, ldy, BITS, 3);
        break;
    case 4:
        sweep(w, n0, n1, A, Y, ldy, BITS, 4);
        break;
    case 5:
        sweep(w, n0, n1, A, Y, ldy, BITS, 5);
        break;
    case 6:
        sweep(w, n0, n1, A, Y, ldy, BITS, 6);
        break;
    case 7:
        sweep(w, n0, n1, A, Y, ldy, BITS, 7);
        break;
    default:
        sweep(w, n0, n1, A, Y, ldy, BITS, 8);
        break;
    }
}

/* ---- several tokens ---- */

/* Columns [n0, n0 + 8 NB) x tokens A[0..TT) over the whole K. */
AI void mtile(const cllm_qweight *w, int n0, const qtok *A, float *Y, size_t ldy, const int BITS,
              const int NB, const int TT) {
    const int per = 32 / BITS, J = BITS == 4 ? 4 : 2, G = w->group;
    const int AG = cllm_qact16_group(BITS, G), NH = w->K / AG, rows = AG / per;
    const size_t N = (size_t)w->N;
    const __m256i m = _mm256_set1_epi32(BITS == 4 ? 0x000F000F : 0x00FF00FF);
    __m256 acc[2][4];
    for (int b = 0; b < NB; b++)
        for (int t = 0; t < TT; t++) acc[b][t] = _mm256_setzero_ps();
    for (int h = 0; h < NH; h++) {
        __m256i isum[2][4];
        for (int b = 0; b < NB; b++)
            for (int t = 0; t < TT; t++) isum[b][t] = _mm256_setzero_si256();
        const int32_t *src = w->qweight + (size_t)h * rows * N + n0;
        for (int r = 0, k8 = h * rows; r < rows; r++, k8++, src += N) {
            __m256i v[2];
            for (int b = 0; b < NB; b++) {
                _mm_prefetch((const char *)(src + PF_ROWS * N + 8 * b), _MM_HINT_T0);
                v[b] = _mm256_loadu_si256((const __m256i *)(const void *)(src + 8 * b));
            }
            for (int j = 0; j < J; j++) {
                __m256i u[2];
                for (int b = 0; b < NB; b++)
                    u[b] = _mm256_and_si256(j ? _mm256_srli_epi32(v[b], BITS * j) : v[b], m);
                for (int t = 0; t < TT; t++) {
                    __m256i a = _mm256_set1_epi32(A[t].aw[(size_t)k8 * J + j]);
                    for (int b = 0; b < NB; b++) {
                        isum[b][t] = _mm256_add_epi32(isum[b][t], _mm256_madd_epi16(u[b], a));
                        /* keeps the sum in a register: without it gcc reassociates the integer
                         * adds across j into a tree of temporaries and spills them */
                        __asm__("" : "+x"(isum[b][t]));
                    }
                }
            }
        }
        const int g = h * AG / G;
        for (int b = 0; b < NB; b++) {
            __m256i z = q_zeros8v(w, g, n0 + 8 * b, BITS);
            __m256 ws = q_scales8(w, g, n0 + 8 * b);
            for (int t = 0; t < TT; t++)
                acc[b][t] = group_end(isum[b][t], z, A[t].sum[h], ws, A[t].s[h], acc[b][t]);
        }
    }
    for (int b = 0; b < NB; b++)
        for (int t = 0; t < TT; t++) _mm256_storeu_ps(Y + (size_t)t * ldy + n0 + 8 * b, acc[b][t]);
}

AI void mcols(const cllm_qweight *w, int n0, int n1, const qtok *A, float *Y, size_t ldy,
              const int BITS, const int TT) {
    int n = n0;
    for (; n + 16 <= n1; n += 16) mtile(w, n, A, Y, ldy, BITS, 2, TT);
    for (; n < n1; n += 8) mtile(w, n, A, Y, ldy, BITS, 1, TT);
}

AI void multi(const cllm_qweight *w, int n0, int n1, const void *Ap, int n_tok, float *Y,
              size_t ldy, const int BITS) {
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
                    mcols(w, c0, c1, A, Yt, ldy, BITS, 4);
                else if (tn == 3)
                    mcols(w, c0, c1, A, Yt, ldy, BITS, 3);
                else if (tn == 2)
                    mcols(w, c0, c1, A, Yt, ldy, BITS, 2);
                else
                    mcols(w, c0, c1, A, Yt, ldy, BITS, 1);
            }
        }
    }
}

void kern_matmul_q_qact16_avx2(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                               float *Y, size_t ldy) {
    if (n_tok == 1) {
        qtok a = qtok_at(A, w->K, w->K / cllm_qact16_group(w->bits, w->group), 0);
        if (w->bits == 8)
            dec(w, n0, n1, &a, Y, 8);
        else
            dec(w, n0, n1, &a, Y, 4);
        return;
    }
    if (n_tok <= SW_MAX) { /* batched decode: the weights streamed once, group-major */
        if (w->bits == 8)
            few(w, n0, n1, A, n_tok, Y, ldy, 8);
        else
            few(w, n0, n1, A, n_tok, Y, ldy, 4);
        return;
    }
    if (w->bits == 8)
        multi(w, n0, n1, A, n_tok, Y, ldy, 8);
    else
        multi(w, n0, n1, A, n_tok, Y, ldy, 4);
}
