/* Scalar silu_mul (cllm_kern_ops, kernels.h): libm's expf, as the forward's SiLU was computed
 * before the SIMD tiers had one. */
#include <math.h>

#include "kernels/kern_int.h"

void kern_silu_mul_ref(float *y, const float *g, const float *u, int n) {
    for (int i = 0; i < n; i++) {
        float s = g[i] / (1.0f + expf(-g[i]));
        y[i] = u ? s * u[i] : s;
    }
}
