/* AVX2/FMA Gated DeltaNet recurrence step (one value head, one token), state updated in place.
 * Two passes over S per token (decay + S^T k, then rank-1 update + S^T q), vectorised over the
 * value dimension; the k-dimension sums run in index order, so the result depends only on the
 * inputs, never on the batch. dv multiple of 8 takes the vector path; a tail runs scalar. */
#include <immintrin.h>

#include "kernels/kern_int.h"

void kern_gdn_step_avx2(float *S, const float *q, const float *k, const float *v, float decay,
                        float beta, float *o, float *tmp, int dk, int dv) {
    float *u = tmp;
    const int dv8 = dv & ~7;
    const __m256 vdec = _mm256_set1_ps(decay);
    for (int n = 0; n < dv; n++) u[n] = 0.0f;
    for (int m = 0; m < dk; m++) {
        float *s = S + (size_t)m * dv;
        const __m256 km = _mm256_set1_ps(k[m]);
        for (int n = 0; n < dv8; n += 8) {
            __m256 sv = _mm256_mul_ps(_mm256_loadu_ps(s + n), vdec);
            _mm256_storeu_ps(s + n, sv);
            _mm256_storeu_ps(u + n, _mm256_fmadd_ps(sv, km, _mm256_loadu_ps(u + n)));
        }
        for (int n = dv8; n < dv; n++) {
            s[n] *= decay;
            u[n] += s[n] * k[m];
        }
    }
    const __m256 vb = _mm256_set1_ps(beta);
    for (int n = 0; n < dv8; n += 8)
        _mm256_storeu_ps(u + n, _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + n), _mm256_loadu_ps(u + n)), vb));
    for (int n = dv8; n < dv; n++) u[n] = (v[n] - u[n]) * beta;
    for (int n = 0; n < dv; n++) o[n] = 0.0f;
    for (int m = 0; m < dk; m++) {
        float *s = S + (size_t)m * dv;
        const __m256 km = _mm256_set1_ps(k[m]), qm = _mm256_set1_ps(q[m]);
        for (int n = 0; n < dv8; n += 8) {
            __m256 sv = _mm256_fmadd_ps(km, _mm256_loadu_ps(u + n), _mm256_loadu_ps(s + n));
            _mm256_storeu_ps(s + n, sv);
            _mm256_storeu_ps(o + n, _mm256_fmadd_ps(sv, qm, _mm256_loadu_ps(o + n)));
        }
        for (int n = dv8; n < dv; n++) {
            s[n] += k[m] * u[n];
            o[n] += s[n] * q[m];
        }
    }
}
