/* AVX2/FMA/F16C GPTQ int4/int8 matmul for ONE token (decode), the matmul_q contract of kernels.h.
 *
 * Why a separate loop order: qweight rows (one k8 each) are N * 4 bytes apart, so the prefill
 * tiles, which walk all K rows for 32 columns before moving on, read 128 bytes per row from
 * K * bits / 32 rows at once: hundreds of concurrent strided streams (the 248k-column lm_head
 * puts every row on its own page), which neither the stream prefetcher nor the TLB follow. Here
 * the columns are cut into blocks of DEC_W; for each group in order, the 32-column register tiles
 * sweep across the block reading only that group's rows (16 rows for int4 g128), so every row is
 * read as one sequential run of DEC_W * 4 bytes and at most G * bits / 32 streams are live. The
 * running sum acc of the block lives in L1 between groups; gacc starts at zero per group anyway.
 *
 * Per output element the op sequence is the contract's, unchanged: per group, gacc = 0, gacc =
 * fma((float)(q - z), x[k], gacc) for k in order, then acc = fma(scale, gacc, acc), groups in
 * order. So the result is bitwise that of the scalar tier and of the multi-token tiles. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/kern_int.h"
#include "kernels/x86/q_avx2_int.h"

#define AI    __attribute__((always_inline)) static inline
#define DEC_W 512 /* columns per block: acc 2 KiB; int4 g128 reads 16 runs of 2 KiB per group */

/* Group g of columns [n, n + 8 NB): acc[] (L1, block-relative) += scale * group sum. */
AI void gtile(const cllm_qweight *w, int g, int n, const float *x, float *acc, const int BITS,
              const int NB) {
    const int per = 32 / BITS, G = w->group;
    const size_t N = (size_t)w->N;
    const __m256i mask = _mm256_set1_epi32((1 << BITS) - 1);
    __m256i zv[4];
    __m256 gacc[4];
    for (int b = 0; b < NB; b++) {
        zv[b] = q_zeros8v(w, g, n + 8 * b, BITS);
        gacc[b] = _mm256_setzero_ps();
    }
    const int rows = G / per, k80 = g * rows;
    const int32_t *src = w->qweight + (size_t)k80 * N + n;
    for (int r = 0; r < rows; r++, src += N) {
        __m256i v[4];
        /* the same columns one group further down: read on the next pass over this block */
        _mm_prefetch((const char *)(src + (size_t)rows * N), _MM_HINT_T0);
        if (NB > 2) _mm_prefetch((const char *)(src + (size_t)rows * N + 16), _MM_HINT_T0);
        for (int b = 0; b < NB; b++) v[b] = _mm256_loadu_si256((const __m256i *)(src + 8 * b));
        const float *xk = x + (size_t)(k80 + r) * per;
        for (int j = 0; j < per; j++) {
            __m256 xb = _mm256_broadcast_ss(xk + j);
            for (int b = 0; b < NB; b++) {
                __m256 wf =
                    _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(v[b], mask), zv[b]));
                v[b] = _mm256_srli_epi32(v[b], BITS);
                gacc[b] = _mm256_fmadd_ps(wf, xb, gacc[b]);
            }
        }
    }
    for (int b = 0; b < NB; b++) {
        __m256 a = _mm256_loadu_ps(acc + 8 * b);
        _mm256_storeu_ps(acc + 8 * b, _mm256_fmadd_ps(q_scales8(w, g, n + 8 * b), gacc[b], a));
    }
}

/* int4, four vector ops per 8 products instead of five: nibble j is isolated in place by a mask
 * (v & 0xF << 4j = q * 16^j; the top nibble by a shift), its zero subtracted as z * 16^j, and the
 * exact integer (q - z) * 16^j converted; its product with xs[k] = x[k] * 16^-j (j < 7) is the same
 * real number as (q - z) * x[k], so the fma rounds identically. Valid when every xs is exact (no
 * underflow): dec4 checks that and otherwise takes the shift-per-nibble tile. */
static const int32_t nib_mask[7][8] __attribute__((aligned(32))) = {
#define NM(j)                                                                                      \
    {                                                                                              \
        0xF << (4 * j), 0xF << (4 * j), 0xF << (4 * j), 0xF << (4 * j), 0xF << (4 * j),            \
            0xF << (4 * j), 0xF << (4 * j), 0xF << (4 * j)                                         \
    }
    NM(0), NM(1), NM(2), NM(3),
    NM(4), NM(5), NM(6)
#undef NM
};

AI void gtile4s(const cllm_qweight *w, int g, int n, const float *xs, float *acc, const int NB) {
    const int G = w->group;
    const size_t N = (size_t)w->N;
    __m256i zv[4], zs[4][7];
    __m256 gacc[4];
    for (int b = 0; b < NB; b++) {
        zv[b] = q_zeros8v(w, g, n + 8 * b, 4);
        for (int j = 0; j < 7; j++) zs[b][j] = _mm256_slli_epi32(zv[b], 4 * j);
        gacc[b] = _mm256_setzero_ps();
    }
    const int rows = G / 8, k80 = g * rows;
    const int32_t *src = w->qweight + (size_t)k80 * N + n;
    for (int r = 0; r < rows; r++, src += N) {
        __m256i v[4];
        _mm_prefetch((const char *)(src + (size_t)rows * N), _MM_HINT_T0);
        if (NB > 2) _mm_prefetch((const char *)(src + (size_t)rows * N + 16), _MM_HINT_T0);
        for (int b = 0; b < NB; b++) v[b] = _mm256_loadu_si256((const __m256i *)(src + 8 * b));
        const float *xk = xs + (size_t)(k80 + r) * 8;
        for (int j = 0; j < 7; j++) {
            __m256 xb = _mm256_broadcast_ss(xk + j);
            __m256i m = _mm256_load_si256((const __m256i *)(const void *)nib_mask[j]);
            for (int b = 0; b < NB; b++) {
                __m256 wf =
                    _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(v[b], m), zs[b][j]));
                gacc[b] = _mm256_fmadd_ps(wf, xb, gacc[b]);
            }
        }
        __m256 xb = _mm256_broadcast_ss(xk + 7);
        for (int b = 0; b < NB; b++) {
            __m256 wf = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(v[b], 28), zv[b]));
            gacc[b] = _mm256_fmadd_ps(wf, xb, gacc[b]);
        }
    }
    for (int b = 0; b < NB; b++) {
        __m256 a = _mm256_loadu_ps(acc + 8 * b);
        _mm256_storeu_ps(acc + 8 * b, _mm256_fmadd_ps(q_scales8(w, g, n + 8 * b), gacc[b], a));
    }
}

#define XS_MAX 8192 /* inputs of the pre-scaled activation copy (stack) */

/* xs[k] = x[k] * 16^-(k % 8) for k % 8 < 7 (the top nibble is shifted down, so its x stays);
 * false when a product would not be exact (a nonzero |x| below 2^-102 would underflow) or K is too
 * large for the stack copy. */
static bool prescale(const float *x, int K, float *xs) {
    if (K > XS_MAX) return false;
    const __m256 sc =
        _mm256_setr_ps(1.0f, 0x1p-4f, 0x1p-8f, 0x1p-12f, 0x1p-16f, 0x1p-20f, 0x1p-24f, 1.0f);
    const __m256 tiny = _mm256_set1_ps(0x1p-102f), zero = _mm256_setzero_ps();
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 bad = zero;
    for (int k = 0; k < K; k += 8) {
        __m256 v = _mm256_loadu_ps(x + k), a = _mm256_and_ps(v, absm);
        bad = _mm256_or_ps(bad, _mm256_and_ps(_mm256_cmp_ps(a, tiny, _CMP_LT_OQ),
                                              _mm256_cmp_ps(a, zero, _CMP_GT_OQ)));
        _mm256_storeu_ps(xs + k, _mm256_mul_ps(v, sc));
    }
    return _mm256_movemask_ps(bad) == 0;
}

static void dec4s(const cllm_qweight *w, int n0, int n1, const float *xs, float *y) {
    const int NG = w->K / w->group;
    float acc[DEC_W] __attribute__((aligned(32)));
    for (int nb = n0; nb < n1; nb += DEC_W) {
        const int ne = nb + DEC_W < n1 ? nb + DEC_W : n1;
        for (int i = 0; i < ne - nb; i++) acc[i] = 0.0f;
        for (int g = 0; g < NG; g++) {
            int n = nb;
            for (; n + 32 <= ne; n += 32) gtile4s(w, g, n, xs, acc + (n - nb), 4);
            for (; n + 16 <= ne; n += 16) gtile4s(w, g, n, xs, acc + (n - nb), 2);
            for (; n < ne; n += 8) gtile4s(w, g, n, xs, acc + (n - nb), 1);
        }
        for (int i = 0; i < ne - nb; i += 8) _mm256_storeu_ps(y + nb + i, _mm256_load_ps(acc + i));
    }
}

AI void dec(const cllm_qweight *w, int n0, int n1, const float *x, float *y, const int BITS) {
    const int NG = w->K / w->group;
    float acc[DEC_W] __attribute__((aligned(32)));
    for (int nb = n0; nb < n1; nb += DEC_W) {
        const int ne = nb + DEC_W < n1 ? nb + DEC_W : n1;
        for (int i = 0; i < ne - nb; i++) acc[i] = 0.0f;
        for (int g = 0; g < NG; g++) {
            int n = nb;
            for (; n + 32 <= ne; n += 32) gtile(w, g, n, x, acc + (n - nb), BITS, 4);
            for (; n + 16 <= ne; n += 16) gtile(w, g, n, x, acc + (n - nb), BITS, 2);
            for (; n < ne; n += 8) gtile(w, g, n, x, acc + (n - nb), BITS, 1);
        }
        for (int i = 0; i < ne - nb; i += 8) _mm256_storeu_ps(y + nb + i, _mm256_load_ps(acc + i));
    }
}

void kern_matmul_q_dec_avx2(const cllm_qweight *w, int n0, int n1, const float *x, float *y) {
    if (w->bits == 8) {
        dec(w, n0, n1, x, y, 8);
        return;
    }
    float xs[XS_MAX] __attribute__((aligned(32)));
    if (w->group % 8 == 0 && prescale(x, w->K, xs))
        dec4s(w, n0, n1, xs, y);
    else
        dec(w, n0, n1, x, y, 4);
}
