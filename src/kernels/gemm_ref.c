/* Scalar fp32 GEMM, the gemm_f32 oracle (kernels.h): C[m][n] (=, +=, -=) sum_k A[m][k] B[k][n].
 * Used by GPTQ's dense linear algebra (quant/gptq.c) in the ref tier and by the NEON tables.
 *
 * Per element: s = 0, then s = fmaf(A[m][k], B[k][n], s) for k = 0..K-1 in order, then one
 * store, add or subtract into C. The SIMD tiers do exactly this with vector FMAs, so every tier
 * agrees bitwise. Columns go in chunks of CH so that the accumulators stay in a local array. */
#include <math.h>

#include "kernels/kern_int.h"

#define CH 64

void kern_gemm_f32_ref(int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb,
                       float *C, size_t ldc, int op) {
    float s[CH];
    for (int m = 0; m < M; m++) {
        const float *a = A + (size_t)m * lda;
        float *c = C + (size_t)m * ldc;
        for (int n0 = 0; n0 < N; n0 += CH) {
            int nw = N - n0 < CH ? N - n0 : CH;
            for (int j = 0; j < nw; j++) s[j] = 0.0f;
            for (int k = 0; k < K; k++) {
                const float *b = B + (size_t)k * ldb + n0;
                float ak = a[k];
                for (int j = 0; j < nw; j++) s[j] = fmaf(ak, b[j], s[j]);
            }
            for (int j = 0; j < nw; j++)
                c[n0 + j] = op == CLLM_GEMM_SET   ? s[j]
                            : op == CLLM_GEMM_ADD ? c[n0 + j] + s[j]
                                                  : c[n0 + j] - s[j];
        }
    }
}
