/* AVX2/FMA Gated DeltaNet recurrence step (one value head, one token), state updated in place.
 *
 * Every column n of S evolves independently (u[n], d[n], o[n] only involve column n), so the
 * step runs per block of 32 columns: decay + S^T k over the block's rows, d, then the rank-1
 * update + S^T q, with u/o held in registers and the 32-column block of S (dk x 32 fp32 = 16 KiB
 * at dk = 128) staying in L1 across both passes. Sums over the k dimension run in index order:
 * the result depends only on the inputs, never on the batch or the thread. */
#include <immintrin.h>

#include "kernels/kern_int.h"

#define AI __attribute__((always_inline)) static inline

/* Columns [n0, n0 + 8*NV) of S. */
AI void block(float *S, const float *q, const float *k, const float *v, float decay, float beta,
              float *o, int dk, int dv, int n0, const int NV) {
    __m256 u[4], vd = _mm256_set1_ps(decay);
    for (int i = 0; i < NV; i++) u[i] = _mm256_setzero_ps();
    for (int m = 0; m < dk; m++) {
        float *s = S + (size_t)m * dv + n0;
        __m256 km = _mm256_set1_ps(k[m]);
        for (int i = 0; i < NV; i++) {
            __m256 sv = _mm256_mul_ps(_mm256_loadu_ps(s + 8 * i), vd);
            _mm256_storeu_ps(s + 8 * i, sv);
            u[i] = _mm256_fmadd_ps(sv, km, u[i]);
        }
    }
    __m256 vb = _mm256_set1_ps(beta), acc[4];
    for (int i = 0; i < NV; i++) {
        u[i] = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + n0 + 8 * i), u[i]), vb); /* d */
        acc[i] = _mm256_setzero_ps();
    }
    for (int m = 0; m < dk; m++) {
        float *s = S + (size_t)m * dv + n0;
        __m256 km = _mm256_set1_ps(k[m]), qm = _mm256_set1_ps(q[m]);
        for (int i = 0; i < NV; i++) {
            __m256 sv = _mm256_fmadd_ps(km, u[i], _mm256_loadu_ps(s + 8 * i));
            _mm256_storeu_ps(s + 8 * i, sv);
            acc[i] = _mm256_fmadd_ps(sv, qm, acc[i]);
        }
    }
    for (int i = 0; i < NV; i++) _mm256_storeu_ps(o + n0 + 8 * i, acc[i]);
}

void kern_gdn_step_avx2(float *S, const float *q, const float *k, const float *v, float decay,
                        float beta, float *o, float *tmp, int dk, int dv) {
    int n = 0;
    for (; n + 32 <= dv; n += 32) block(S, q, k, v, decay, beta, o, dk, dv, n, 4);
    for (; n + 8 <= dv; n += 8) block(S, q, k, v, decay, beta, o, dk, dv, n, 1);
    if (n < dv) { /* scalar tail columns, same operation order as the vector lanes */
        float *u = tmp;
        for (int j = n; j < dv; j++) u[j] = 0.0f, o[j] = 0.0f;
        for (int m = 0; m < dk; m++) {
            float *s = S + (size_t)m * dv;
            for (int j = n; j < dv; j++) {
                s[j] *= decay;
                u[j] += s[j] * k[m];
            }
        }
        for (int j = n; j < dv; j++) u[j] = (v[j] - u[j]) * beta;
        for (int m = 0; m < dk; m++) {
            float *s = S + (size_t)m * dv;
            for (int j = n; j < dv; j++) {
                s[j] += k[m] * u[j];
                o[j] += s[j] * q[m];
            }
        }
    }
}
