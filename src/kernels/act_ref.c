/* Scalar silu_mul (cllm_kern_ops, kernels.h): libm's expf, the forward's fwd_silu. */
#include <math.h>

#include "kernels/kern_int.h"

void kern_silu_mul_ref(float *y, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) {
        float s = g[i] / (1.0f + expf(-g[i]));
        y[i] = u ? s * u[i] : s;
    }
}

void kern_dot_rows_ref(const float *K, size_t ldk, int n, const float *Q, size_t ldq, int nq, int d,
                       float *S, size_t lds) {
    for (int i = 0; i < n; i++)
        for (int h = 0; h < nq; h++) {
            float s = 0.0f;
            for (int k = 0; k < d; k++) s += K[(size_t)i * ldk + k] * Q[(size_t)h * ldq + k];
            S[(size_t)i * lds + h] = s;
        }
}
