/* Scalar reference of the chunked (WY) Gated DeltaNet form (docs/model.md §2.4), the oracle for the
 * SIMD tier of gdn_chunk. Plain loops in the order the spec writes them; see kernels/kernels.h. */
#include <math.h>

#include "kernels/kern_int.h"

void kern_gdn_chunk_ref(float *S, const float *q, const float *k, size_t ldqk, const float *v,
                        size_t ldv, const float *g, const float *beta, float *o, size_t ldo, int T,
                        int dk, int dv, float *work) {
    const int C = CLLM_GDN_CHUNK;
    float *gam = work, *eg = gam + C, *Lm = eg + C, *Am = Lm + (size_t)C * C;
    float *U = Am + (size_t)C * C, *W = U + (size_t)C * dv, *X = W + (size_t)C * dk;
    for (int t0 = 0; t0 < T; t0 += C) {
        int n = T - t0 < C ? T - t0 : C;
        const float *qc = q + (size_t)t0 * ldqk, *kc = k + (size_t)t0 * ldqk,
                    *vc = v + (size_t)t0 * ldv;
        const float *gc = g + t0, *bc = beta + t0;
        float *oc = o + (size_t)t0 * ldo;
        float acc = 0.0f;
        for (int i = 0; i < n; i++) {
            acc += gc[i];
            gam[i] = acc;
            eg[i] = expf(acc);
        }
        /* L (strict lower, beta_i k_i.k_j D_ij) and A (lower incl. diagonal, q_i.k_j D_ij) */
        for (int i = 0; i < n; i++) {
            const float *qi = qc + (size_t)i * ldqk, *ki = kc + (size_t)i * ldqk;
            for (int j = 0; j <= i; j++) {
                const float *kj = kc + (size_t)j * ldqk;
                float kk = 0.0f, qk = 0.0f;
                for (int m = 0; m < dk; m++) {
                    kk += ki[m] * kj[m];
                    qk += qi[m] * kj[m];
                }
                float d = expf(gam[i] - gam[j]);
                Lm[(size_t)i * C + j] = j < i ? bc[i] * kk * d : 0.0f;
                Am[(size_t)i * C + j] = qk * d;
            }
        }
        /* U = (I+L)^-1 (v beta), W = (I+L)^-1 (k beta e^gamma): forward substitution */
        for (int i = 0; i < n; i++) {
            float *ui = U + (size_t)i * dv, *wi = W + (size_t)i * dk;
            const float *vi = vc + (size_t)i * ldv, *ki = kc + (size_t)i * ldqk;
            float bw = bc[i] * eg[i];
            for (int c = 0; c < dv; c++) ui[c] = bc[i] * vi[c];
            for (int m = 0; m < dk; m++) wi[m] = bw * ki[m];
            for (int j = 0; j < i; j++) {
                float l = Lm[(size_t)i * C + j];
                const float *uj = U + (size_t)j * dv, *wj = W + (size_t)j * dk;
                for (int c = 0; c < dv; c++) ui[c] -= l * uj[c];
                for (int m = 0; m < dk; m++) wi[m] -= l * wj[m];
            }
        }
        /* Vn = U - W S (into U) */
        for (int i = 0; i < n; i++) {
            float *ui = U + (size_t)i * dv;
            const float *wi = W + (size_t)i * dk;
            for (int m = 0; m < dk; m++) {
                const float *s = S + (size_t)m * dv;
                for (int c = 0; c < dv; c++) ui[c] -= wi[m] * s[c];
            }
        }
        /* O = (q e^gamma) S + A Vn */
        for (int i = 0; i < n; i++) {
            float *oi = oc + (size_t)i * ldo;
            const float *qi = qc + (size_t)i * ldqk;
            for (int c = 0; c < dv; c++) oi[c] = 0.0f;
            for (int m = 0; m < dk; m++) {
                const float *s = S + (size_t)m * dv;
                float qe = qi[m] * eg[i];
                for (int c = 0; c < dv; c++) oi[c] += qe * s[c];
            }
            for (int j = 0; j <= i; j++) {
                float a = Am[(size_t)i * C + j];
                const float *uj = U + (size_t)j * dv;
                for (int c = 0; c < dv; c++) oi[c] += a * uj[c];
            }
        }
        /* S = e^gamma_last S + (k e^(gamma_last - gamma))^T Vn */
        float gl = gam[n - 1], el = eg[n - 1];
        for (int j = 0; j < n; j++) {
            const float *kj = kc + (size_t)j * ldqk;
            float e = expf(gl - gam[j]);
            for (int m = 0; m < dk; m++) X[(size_t)j * dk + m] = kj[m] * e;
        }
        for (int m = 0; m < dk; m++) {
            float *s = S + (size_t)m * dv;
            for (int c = 0; c < dv; c++) s[c] *= el;
            for (int j = 0; j < n; j++) {
                float x = X[(size_t)j * dk + m];
                const float *uj = U + (size_t)j * dv;
                for (int c = 0; c < dv; c++) s[c] += x * uj[c];
            }
        }
    }
}
