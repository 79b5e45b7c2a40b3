/* AVX-512F fp32 GEMM: C[m][n] (=, +=, -=) sum_k A[m][k] B[k][n] with B row-major (N contiguous),
 * the avx512 tier's gemm_f32 (kernels.h), called by GPTQ (quant/gptq.c) per block of rows.
 *
 * kernels/x86/gemm_avx2.c's scheme with zmm registers: tiles of MR rows x 32 columns (2 x MR
 * accumulators), one broadcast of A[m][k] per row and two loads of B's row k per k; column tails
 * masked. Per C element the sequence is kernels/gemm_ref.c's (fma over k in order from 0, then
 * one store, add or subtract), so all tiers agree bitwise. */
#include <immintrin.h>

#include "kernels/kern_int.h"

#define AI __attribute__((always_inline)) static inline
#define MR 8 /* 16 accumulators of the 32 zmm registers */

AI __m512 epi(__m512 c, __m512 s, int op) {
    return op == CLLM_GEMM_SET   ? s
           : op == CLLM_GEMM_ADD ? _mm512_add_ps(c, s)
                                 : _mm512_sub_ps(c, s);
}

AI void tile(const int mr, int K, const float *A, size_t lda, const float *B, size_t ldb, float *C,
             size_t ldc, int op, __mmask16 m0, __mmask16 m1) {
    __m512 s0[MR], s1[MR];
    for (int r = 0; r < mr; r++) s0[r] = _mm512_setzero_ps(), s1[r] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb;
        __m512 b0 = _mm512_maskz_loadu_ps(m0, b), b1 = _mm512_maskz_loadu_ps(m1, b + 16);
        for (int r = 0; r < mr; r++) {
            __m512 a = _mm512_set1_ps(A[(size_t)r * lda + k]);
            s0[r] = _mm512_fmadd_ps(a, b0, s0[r]);
            s1[r] = _mm512_fmadd_ps(a, b1, s1[r]);
        }
    }
    for (int r = 0; r < mr; r++) {
        float *c = C + (size_t)r * ldc;
        __m512 c0 = op == CLLM_GEMM_SET ? s0[r] : _mm512_maskz_loadu_ps(m0, c);
        __m512 c1 = op == CLLM_GEMM_SET ? s1[r] : _mm512_maskz_loadu_ps(m1, c + 16);
        _mm512_mask_storeu_ps(c, m0, epi(c0, s0[r], op));
        _mm512_mask_storeu_ps(c + 16, m1, epi(c1, s1[r], op));
    }
}

#define TILE(mr)                                                                                   \
    tile(mr, K, A + (size_t)m0 * lda, lda, B + n0, ldb, C + (size_t)m0 * ldc + n0, ldc, op, mk0,   \
         mk1)

void kern_gemm_f32_avx512(int M, int N, int K, const float *A, size_t lda, const float *B,
                          size_t ldb, float *C, size_t ldc, int op) {
    for (int n0 = 0; n0 < N; n0 += 32) {
        int nw = N - n0 < 32 ? N - n0 : 32;
        __mmask16 mk0 = nw >= 16 ? 0xffff : (__mmask16)((1u << nw) - 1);
        __mmask16 mk1 = nw >= 32 ? 0xffff : nw <= 16 ? 0 : (__mmask16)((1u << (nw - 16)) - 1);
        int m0 = 0;
        for (; m0 + MR <= M; m0 += MR) TILE(MR);
        switch (M - m0) {
        case 7:
            TILE(7);
            break;
        case 6:
            TILE(6);
            break;
        case 5:
            TILE(5);
            break;
        case 4:
            TILE(4);
            break;
        case 3:
            TILE(3);
            break;
        case 2:
            TILE(2);
            break;
        case 1:
            TILE(1);
            break;
        default:
            break;
        }
    }
}
