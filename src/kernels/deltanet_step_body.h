/* Private: the Gated DeltaNet recurrence step (gdn_step, kernels.h: one value head, one token,
 * state updated in place), written once over kernels/simd8.h and compiled into each SIMD tier by
 * a file that defines GDN_STEP_FN and includes this (kernels/x86/deltanet_avx2.c,
 * kernels/arm/deltanet_neon.c), so both ISAs do the same lane operations (kern_xisa checks the
 * bits).
 *
 * Every column n of S evolves independently (u[n], d[n], o[n] only involve column n), so the
 * step runs per block of 32 columns (then 8, then a scalar tail of dv % 8): decay + S^T k over the
 * block's rows, d, then the rank-1 update + S^T q, with u/o held in registers and the block of S
 * (dk x 32 fp32 = 16 KiB at dk = 128) staying in L1 across both passes. Sums over the k dimension
 * run in index order: the result depends only on the inputs, never on the batch or the thread. */
#ifndef GDN_STEP_FN
#error "define GDN_STEP_FN before including kernels/deltanet_step_body.h"
#endif
#include "kernels/kern_int.h"
#include "kernels/simd8.h"

/* Columns [n0, n0 + 8*NV) of S. */
S8 void gdn_block(float *S, const float *q, const float *k, const float *v, float decay, float beta,
                  float *o, int dk, int dv, int n0, const int NV) {
    f32x8 u[4], acc[4];
    const f32x8 vd = set8(decay), vb = set8(beta);
    for (int i = 0; i < NV; i++) u[i] = zero8();
    for (int m = 0; m < dk; m++) {
        float *s = S + (size_t)m * (size_t)dv + n0;
        const f32x8 km = set8(k[m]);
        for (int i = 0; i < NV; i++) {
            f32x8 sv = mul8(ld8(s + 8 * i), vd);
            st8(s + 8 * i, sv);
            u[i] = fmadd8(sv, km, u[i]);
        }
    }
    for (int i = 0; i < NV; i++) {
        u[i] = mul8(sub8(ld8(v + n0 + 8 * i), u[i]), vb); /* d */
        acc[i] = zero8();
    }
    for (int m = 0; m < dk; m++) {
        float *s = S + (size_t)m * (size_t)dv + n0;
        const f32x8 km = set8(k[m]), qm = set8(q[m]);
        for (int i = 0; i < NV; i++) {
            f32x8 sv = fmadd8(km, u[i], ld8(s + 8 * i));
            st8(s + 8 * i, sv);
            acc[i] = fmadd8(sv, qm, acc[i]);
        }
    }
    for (int i = 0; i < NV; i++) st8(o + n0 + 8 * i, acc[i]);
}

void GDN_STEP_FN(float *S, const float *q, const float *k, const float *v, float decay, float beta,
                 float *o, float *tmp, int dk, int dv) {
    int n = 0;
    for (; n + 32 <= dv; n += 32) gdn_block(S, q, k, v, decay, beta, o, dk, dv, n, 4);
    for (; n + 8 <= dv; n += 8) gdn_block(S, q, k, v, decay, beta, o, dk, dv, n, 1);
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
