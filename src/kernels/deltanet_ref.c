/* Scalar reference Gated DeltaNet recurrence step (docs/model.md §2.4), the oracle for the SIMD
 * tiers. */
#include "kernels/kern_int.h"

static void step1(float *S, const float *q, const float *k, const float *v, float decay, float beta,
                  float *o, float *tmp, int dk, int dv) {
    float *u = tmp;
    for (int n = 0; n < dv; n++) u[n] = 0.0f;
    for (int m = 0; m < dk; m++) {
        float *s = S + (size_t)m * dv;
        for (int n = 0; n < dv; n++) {
            s[n] *= decay;
            u[n] += s[n] * k[m];
        }
    }
    for (int n = 0; n < dv; n++) u[n] = (v[n] - u[n]) * beta; /* u now holds d */
    for (int n = 0; n < dv; n++) o[n] = 0.0f;
    for (int m = 0; m < dk; m++) {
        float *s = S + (size_t)m * dv;
        for (int n = 0; n < dv; n++) {
            s[n] += k[m] * u[n];
            o[n] += s[n] * q[m];
        }
    }
}

void kern_gdn_step_ref(float *S, const float *q, const float *k, const float *v, const float *decay,
                       const float *beta, size_t ld, float *o, size_t ldo, int T, float *tmp,
                       int dk, int dv) {
    for (int t = 0; t < T; t++) {
        size_t r = (size_t)t * ld;
        step1(S, q + r, k + r, v + r, decay[r], beta[r], o + (size_t)t * ldo, tmp, dk, dv);
    }
}
