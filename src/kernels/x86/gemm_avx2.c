/* AVX2/FMA fp32 GEMM: C[m][n] (=, +=, -=) sum_k A[m][k] B[k][n] with B row-major (N contiguous),
 * the avx2 tier's gemm_f32 (kernels.h), called by GPTQ (quant/gptq.c) per block of rows.
 *
 * Register tile of MR rows x 16 columns: 2 x MR ymm accumulators; per k one broadcast of A[m][k]
 * per row and two loads of B's row k, no horizontal sums. Each accumulator lane is one C element
 * and runs s = fma(A[m][k], B[k][n], s) over k in order from 0, then one store, add or subtract
 * into C: the sequence of kernels/gemm_ref.c, so results equal the ref tier bitwise whatever the
 * tile or the rows a call gets. Column tiles are the outer loop, so B's K x 16 panel stays in
 * L1/L2 while every row tile passes over it. Column tails use masked loads and stores. */
#include <immintrin.h>

#include "kernels/kern_int.h"

#define AI __attribute__((always_inline)) static inline
#define MR 6 /* 12 accumulators + 2 B vectors + 1 broadcast of 16 ymm registers */

AI __m256 epi(__m256 c, __m256 s, int op) {
    return op == CLLM_GEMM_SET   ? s
           : op == CLLM_GEMM_ADD ? _mm256_add_ps(c, s)
                                 : _mm256_sub_ps(c, s);
}

/* mr rows x (16, or nw < 16 with masked: mask lanes m0/m1) columns */
AI void tile(const int mr, const int masked, int K, const float *A, size_t lda, const float *B,
             size_t ldb, float *C, size_t ldc, int op, __m256i m0, __m256i m1) {
    __m256 s0[MR], s1[MR];
    for (int r = 0; r < mr; r++) s0[r] = _mm256_setzero_ps(), s1[r] = _mm256_setzero_ps();
    for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb;
        __m256 b0 = masked ? _mm256_maskload_ps(b, m0) : _mm256_loadu_ps(b);
        __m256 b1 = masked ? _mm256_maskload_ps(b + 8, m1) : _mm256_loadu_ps(b + 8);
        for (int r = 0; r < mr; r++) {
            __m256 a = _mm256_broadcast_ss(A + (size_t)r * lda + k);
            s0[r] = _mm256_fmadd_ps(a, b0, s0[r]);
            s1[r] = _mm256_fmadd_ps(a, b1, s1[r]);
        }
    }
    for (int r = 0; r < mr; r++) {
        float *c = C + (size_t)r * ldc;
        if (masked) {
            __m256 c0 = op == CLLM_GEMM_SET ? s0[r] : _mm256_maskload_ps(c, m0);
            __m256 c1 = op == CLLM_GEMM_SET ? s1[r] : _mm256_maskload_ps(c + 8, m1);
            _mm256_maskstore_ps(c, m0, epi(c0, s0[r], op));
            _mm256_maskstore_ps(c + 8, m1, epi(c1, s1[r], op));
        } else {
            __m256 c0 = op == CLLM_GEMM_SET ? s0[r] : _mm256_loadu_ps(c);
            __m256 c1 = op == CLLM_GEMM_SET ? s1[r] : _mm256_loadu_ps(c + 8);
            _mm256_storeu_ps(c, epi(c0, s0[r], op));
            _mm256_storeu_ps(c + 8, epi(c1, s1[r], op));
        }
    }
}

#define TILE(mr, masked)                                                                           \
    tile(mr, masked, K, A + (size_t)m0 * lda, lda, B + n0, ldb, C + (size_t)m0 * ldc + n0, ldc,    \
         op, mk0, mk1)

AI void rows(int masked, int M, int K, const float *A, size_t lda, const float *B, size_t ldb,
             float *C, size_t ldc, int op, int n0, __m256i mk0, __m256i mk1) {
    int m0 = 0;
    for (; m0 + MR <= M; m0 += MR) TILE(MR, masked);
    switch (M - m0) {
    case 5:
        TILE(5, masked);
        break;
    case 4:
        TILE(4, masked);
        break;
    case 3:
        TILE(3, masked);
        break;
    case 2:
        TILE(2, masked);
        break;
    case 1:
        TILE(1, masked);
        break;
    default:
        break;
    }
}

void kern_gemm_f32_avx2(int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb,
                        float *C, size_t ldc, int op) {
    __m256i ones = _mm256_set1_epi32(-1), idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int n0 = 0;
    for (; n0 + 16 <= N; n0 += 16) rows(0, M, K, A, lda, B, ldb, C, ldc, op, n0, ones, ones);
    if (n0 < N) {
        __m256i w = _mm256_set1_epi32(N - n0);
        __m256i mk0 = _mm256_cmpgt_epi32(w, idx);
        __m256i mk1 = _mm256_cmpgt_epi32(w, _mm256_add_epi32(idx, _mm256_set1_epi32(8)));
        rows(1, M, K, A, lda, B, ldb, C, ldc, op, n0, mk0, mk1);
    }
}
