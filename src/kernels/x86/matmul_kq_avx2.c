/* AVX2 ggml block-format matmul (cllm_kern_ops.matmul_kq, kernels.h): eight units of 16 inputs
 * per step, their exact int32 sums gathered into one vector so that lane j accumulates unit
 * u = 8i + j exactly as the reference's L[u % 8] does (bitwise the same results). */
#include <immintrin.h>
#include <math.h>

#include "kernels/kern_int.h"

/* Exact int32 sum of c[16] * a[16] (codes int8, activations int16) into all lanes' sum. */
static inline __m256i dot16(const int8_t *c, const int16_t *a) {
    __m256i cw = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)c));
    return _mm256_madd_epi16(cw, _mm256_loadu_si256((const __m256i *)(const void *)a));
}

/* Lane j of the result = sum of the 8 lanes of v[j]. */
static inline __m256i hsum8x8(const __m256i *v) {
    __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    __m256i q0 = _mm256_hadd_epi32(h01, h23), q1 = _mm256_hadd_epi32(h45, h67);
    /* q0 = [v0 v1 v2 v3 partial (low 128) | same for the high 128]; fold the halves */
    __m256i lo = _mm256_permute2x128_si256(q0, q1, 0x20),
            hi = _mm256_permute2x128_si256(q0, q1, 0x31);
    return _mm256_add_epi32(lo, hi);
}

void kern_matmul_kq_avx2(const cllm_kqweight *w, int n0, int n1, const float *X, size_t ldx,
                         int n_tok, float *Y, size_t ldy) {
    kern_kq_work k;
    if (kern_kq_scratch(w, n_tok, &k)) {
        for (int t = 0; t < n_tok; t++)
            for (int n = n0; n < n1; n++) Y[(size_t)t * ldy + n] = NAN;
        return;
    }
    kern_kq_prep(w, X, ldx, n_tok, &k);
    const int K = w->K, U = K / 16, U8 = U / 8 * 8;
    const bool mins = kern_kq_has_min(w->type);
    for (int n = n0; n < n1; n++) {
        kern_kq_decode_row(w, n, k.c, k.ws, k.wm);
        for (int t = 0; t < n_tok; t++) {
            const char *p = k.tok + (size_t)t * k.tok_bytes;
            const int16_t *a = (const int16_t *)(const void *)p;
            const float *su = (const float *)(const void *)(p + 2 * (size_t)K);
            const int32_t *au = (const int32_t *)(const void *)(su + U);
            __m256 L = _mm256_setzero_ps();
            for (int u = 0; u < U8; u += 8) {
                __m256i v[8];
                for (int j = 0; j < 8; j++) v[j] = dot16(k.c + 16 * (u + j), a + 16 * (u + j));
                __m256 is = _mm256_cvtepi32_ps(hsum8x8(v));
                __m256 s = _mm256_loadu_ps(su + u);
                L = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(k.ws + u), s), is, L);
                if (mins) {
                    __m256 m = _mm256_mul_ps(_mm256_loadu_ps(k.wm + u), s);
                    __m256 as = _mm256_cvtepi32_ps(
                        _mm256_loadu_si256((const __m256i *)(const void *)(au + u)));
                    L = _mm256_fnmadd_ps(m, as, L); /* fma(-(wm * s), asum, L) */
                }
            }
            float l[8];
            _mm256_storeu_ps(l, L);
            for (int u = U8; u < U; u++) { /* K % 128 != 0 (Q4_1 / Q5_1 rows) */
                int32_t is = 0;
                for (int i = 0; i < 16; i++) is += (int32_t)k.c[16 * u + i] * a[16 * u + i];
                l[u % 8] = fmaf(k.ws[u] * su[u], (float)is, l[u % 8]);
                if (mins) l[u % 8] = fmaf(-(k.wm[u] * su[u]), (float)au[u], l[u % 8]);
            }
            Y[(size_t)t * ldy + n] = kern_kq_sum8(l);
        }
    }
}
