/* Private: the Gated DeltaNet recurrence step (gdn_step, kernels.h: one value head, T tokens,
 * state updated in place), written once over kernels/simd8.h and compiled into each SIMD tier by
 * a file that defines GDN_STEP_FN and includes this (kernels/x86/deltanet_avx2.c,
 * kernels/arm/deltanet_neon.c), so both ISAs do the same lane operations (kern_xisa checks the
 * bits).
 *
 * Every column n of S evolves independently (u[n], d[n], o[n] only involve column n), so the
 * steps run per block of 32 columns (then 8, then a scalar tail of dv % 8), all tokens over one
 * block before the next: decay + S^T k over the block's rows, d, then the rank-1 update + S^T q
 * (fused with the next token's decay + S^T k), with u/d/o held in registers and the block of S
 * (dk x 32 fp32 = 16 KiB at dk = 128) staying in L1 across all tokens. Sums over the k dimension
 * run in index order: the result depends only on the inputs, never on the batch or the thread. */
#ifndef GDN_STEP_FN
#error "define GDN_STEP_FN before including kernels/deltanet_step_body.h"
#endif
#include "kernels/kern_int.h"
#include "kernels/simd8.h"

/* Columns [n0, n0 + 8*NV) of S for T >= 1 tokens, software-pipelined: token t's update + S^T q
 * and token t+1's decay + S^T k share one pass over the block's rows (the updated row is decayed
 * by the next token's factor straight away, the value the next pass would load and scale), so
 * each row is loaded and stored once per token and the two tokens' sums are independent chains.
 * Per element the same operations as one token at a time (decay, S^T k, d, update, S^T q). */
S8 void gdn_block_run(float *S, const float *q, const float *k, const float *v, const float *decay,
                      const float *beta, size_t ld, float *o, size_t ldo, int T, int dk, int dv,
                      int n0, const int NV) {
    f32x8 u[4], d[4], acc[4];
    for (int i = 0; i < NV; i++) u[i] = zero8();
    {
        const f32x8 vd = set8(decay[0]);
        for (int m = 0; m < dk; m++) {
            float *s = S + (size_t)m * (size_t)dv + n0;
            const f32x8 km = set8(k[m]);
            for (int i = 0; i < NV; i++) {
                f32x8 sv = mul8(ld8(s + 8 * i), vd);
                st8(s + 8 * i, sv);
                u[i] = fmadd8(sv, km, u[i]);
            }
        }
    }
    for (int t = 0; t < T; t++) {
        const float *qt = q + (size_t)t * ld, *kt = k + (size_t)t * ld;
        const f32x8 vb = set8(beta[(size_t)t * ld]);
        for (int i = 0; i < NV; i++) {
            d[i] = mul8(sub8(ld8(v + (size_t)t * ld + n0 + 8 * i), u[i]), vb);
            acc[i] = zero8();
            u[i] = zero8();
        }
        if (t + 1 < T) {
            const float *kn = kt + ld;
            const f32x8 vd = set8(decay[(size_t)(t + 1) * ld]);
            for (int m = 0; m < dk; m++) {
                float *s = S + (size_t)m * (size_t)dv + n0;
                const f32x8 km = set8(kt[m]), qm = set8(qt[m]), kmn = set8(kn[m]);
                for (int i = 0; i < NV; i++) {
                    f32x8 sv = fmadd8(km, d[i], ld8(s + 8 * i));
                    acc[i] = fmadd8(sv, qm, acc[i]);
                    sv = mul8(sv, vd);
                    st8(s + 8 * i, sv);
                    u[i] = fmadd8(sv, kmn, u[i]);
                }
            }
        } else {
            for (int m = 0; m < dk; m++) {
                float *s = S + (size_t)m * (size_t)dv + n0;
                const f32x8 km = set8(kt[m]), qm = set8(qt[m]);
                for (int i = 0; i < NV; i++) {
                    f32x8 sv = fmadd8(km, d[i], ld8(s + 8 * i));
                    st8(s + 8 * i, sv);
                    acc[i] = fmadd8(sv, qm, acc[i]);
                }
            }
        }
        for (int i = 0; i < NV; i++) st8(o + (size_t)t * ldo + n0 + 8 * i, acc[i]);
    }
}

/* Columns [n, dv) (fewer than 8) in scalars, the vector lanes' operation order. */
static void gdn_tail(float *S, const float *q, const float *k, const float *v, float decay,
                     float beta, float *o, float *u, int dk, int dv, int n) {
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

/* Every token over one block of columns, then the next block: the block (16 KiB at dk = 128)
 * stays in L1 for all T tokens instead of the whole state (64 KiB) passing through per token. */
void GDN_STEP_FN(float *S, const float *q, const float *k, const float *v, const float *decay,
                 const float *beta, size_t ld, float *o, size_t ldo, int T, float *tmp, int dk,
                 int dv) {
    int n = 0;
    for (; n + 32 <= dv; n += 32)
        gdn_block_run(S, q, k, v, decay, beta, ld, o, ldo, T, dk, dv, n, 4);
    for (; n + 8 <= dv; n += 8) gdn_block_run(S, q, k, v, decay, beta, ld, o, ldo, T, dk, dv, n, 1);
    if (n < dv)
        for (int t = 0; t < T; t++) {
            size_t r = (size_t)t * ld;
            gdn_tail(S, q + r, k + r, v + r, decay[r], beta[r], o + (size_t)t * ldo, tmp, dk, dv,
                     n);
        }
}
