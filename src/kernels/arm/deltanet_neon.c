/* NEON Gated DeltaNet recurrence step (one value head, one token), state updated in place: the
 * gdn_step entry of the neon tier (kernels.c), called per token and head by the forward pass.
 *
 * kernels/x86/deltanet_avx2.c's scheme and per-element arithmetic: every column n of S evolves
 * independently, so the step runs per block of 32 columns (then 8, then a scalar tail of dv % 8
 * columns, as AVX2 splits them): decay + S^T k over the block's rows, d, then the rank-1 update +
 * S^T q, with u/o in registers and the block of S staying in L1 across both passes. Each lane
 * does the AVX2 lane's operations (mul, fused multiply-adds in row order), so a column's results
 * are the same bits on both ISAs; they depend only on the inputs, never on the batch or thread. */
#include <arm_neon.h>

#include "kernels/kern_int.h"

#define AI     __attribute__((always_inline)) static inline
#define UNROLL _Pragma("GCC unroll 8")

/* Columns [n0, n0 + 4*NV) of S. */
AI void block(float *S, const float *q, const float *k, const float *v, float decay, float beta,
              float *o, int dk, int dv, int n0, const int NV) {
    float32x4_t u[8], acc[8];
    const float32x4_t vd = vdupq_n_f32(decay), vb = vdupq_n_f32(beta);
    UNROLL for (int i = 0; i < NV; i++) u[i] = vdupq_n_f32(0.0f);
    for (int m = 0; m < dk; m++) {
        float *s = S + (size_t)m * (size_t)dv + n0;
        const float32x4_t km = vdupq_n_f32(k[m]);
        UNROLL for (int i = 0; i < NV; i++) {
            float32x4_t sv = vmulq_f32(vld1q_f32(s + 4 * i), vd);
            vst1q_f32(s + 4 * i, sv);
            u[i] = vfmaq_f32(u[i], sv, km);
        }
    }
    UNROLL for (int i = 0; i < NV; i++) {
        u[i] = vmulq_f32(vsubq_f32(vld1q_f32(v + n0 + 4 * i), u[i]), vb); /* d */
        acc[i] = vdupq_n_f32(0.0f);
    }
    for (int m = 0; m < dk; m++) {
        float *s = S + (size_t)m * (size_t)dv + n0;
        const float32x4_t km = vdupq_n_f32(k[m]), qm = vdupq_n_f32(q[m]);
        UNROLL for (int i = 0; i < NV; i++) {
            float32x4_t sv = vfmaq_f32(vld1q_f32(s + 4 * i), km, u[i]);
            vst1q_f32(s + 4 * i, sv);
            acc[i] = vfmaq_f32(acc[i], sv, qm);
        }
    }
    UNROLL for (int i = 0; i < NV; i++) vst1q_f32(o + n0 + 4 * i, acc[i]);
}

void kern_gdn_step_neon(float *S, const float *q, const float *k, const float *v, float decay,
                        float beta, float *o, float *tmp, int dk, int dv) {
    int n = 0;
    for (; n + 32 <= dv; n += 32) block(S, q, k, v, decay, beta, o, dk, dv, n, 8);
    for (; n + 8 <= dv; n += 8) block(S, q, k, v, decay, beta, o, dk, dv, n, 2);
    if (n < dv) { /* scalar tail columns, same operation order as the vector lanes */
        float *u = tmp;
        for (int j = n; j < dv; j++) u[j] = 0.0f, o[j] = 0.0f;
        for (int m = 0; m < dk; m++) {
            float *s = S + (size_t)m * (size_t)dv;
            for (int j = n; j < dv; j++) {
                s[j] *= decay;
                u[j] += s[j] * k[m];
            }
        }
        for (int j = n; j < dv; j++) u[j] = (v[j] - u[j]) * beta;
        for (int m = 0; m < dk; m++) {
            float *s = S + (size_t)m * (size_t)dv;
            for (int j = n; j < dv; j++) {
                s[j] += k[m] * u[j];
                o[j] += s[j] * q[m];
            }
        }
    }
}
