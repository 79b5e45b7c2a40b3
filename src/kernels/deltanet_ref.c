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

/* The bf16 state: one token's fp32 step on bf16(S) over columns [n0, dv), the updated state
 * rounded to bf16 (kernels.h gdn_step_bf16); fmaf where the SIMD lanes fuse, so every tier
 * matches bitwise (their scalar column tails call this). u: scratch indexed like v and o. */
void kern_gdn_cols_bf16(uint16_t *S, const float *q, const float *k, const float *v, float decay,
                        float beta, float *o, float *u, int dk, int dv, int n0) {
    for (int n = n0; n < dv; n++) u[n] = 0.0f, o[n] = 0.0f;
    for (int m = 0; m < dk; m++) {
        const uint16_t *s = S + (size_t)m * dv;
        for (int n = n0; n < dv; n++) u[n] = fmaf(cllm_bf16_to_f32(s[n]) * decay, k[m], u[n]);
    }
    for (int n = n0; n < dv; n++) u[n] = (v[n] - u[n]) * beta;
    for (int m = 0; m < dk; m++) {
        uint16_t *s = S + (size_t)m * dv;
        for (int n = n0; n < dv; n++) {
            float sv = fmaf(k[m], u[n], cllm_bf16_to_f32(s[n]) * decay);
            o[n] = fmaf(sv, q[m], o[n]);
            s[n] = kern_bf16_rne(sv);
        }
    }
}

void kern_gdn_step_bf16_ref(uint16_t *S, const float *q, const float *k, const float *v,
                            const float *decay, const float *beta, size_t ld, float *o, size_t ldo,
                            int T, float *tmp, int dk, int dv) {
    for (int t = 0; t < T; t++) {
        size_t r = (size_t)t * ld;
        kern_gdn_cols_bf16(S, q + r, k + r, v + r, decay[r], beta[r], o + (size_t)t * ldo, tmp, dk,
                           dv, 0);
    }
}
