/* Scalar reference kernels: matmul (f32/f16/bf16 weights). The test oracle for the
 * SIMD tiers; plain loops, fp32 accumulation in index order. */
#include <stdint.h>

#include "base/half.h"
#include "kernels/kern_int.h"

#define MATMUL_REF(NAME, T, CVT)                                                                   \
    void NAME(const void *W, size_t ldw, int n_rows, const float *X, size_t ldx, int n_tok, int K, \
              float *Y, size_t ldy) {                                                              \
        const T *w = (const T *)W;                                                                 \
        for (int t = 0; t < n_tok; t++)                                                            \
            for (int r = 0; r < n_rows; r++) {                                                     \
                const T *wr = w + (size_t)r * ldw;                                                 \
                const float *x = X + (size_t)t * ldx;                                              \
                float acc = 0.0f;                                                                  \
                for (int k = 0; k < K; k++) acc += CVT(wr[k]) * x[k];                              \
                Y[(size_t)t * ldy + r] = acc;                                                      \
            }                                                                                      \
    }

#define ID(x) (x)
MATMUL_REF(kern_matmul_f32_ref, float, ID)
MATMUL_REF(kern_matmul_f16_ref, uint16_t, cllm_f16_to_f32)
MATMUL_REF(kern_matmul_bf16_ref, uint16_t, cllm_bf16_to_f32)
