/* AVX2/FMA/F16C matmul for GPTQ int4/int8 weights (cllm_qweight, kernels.h) x fp32 activations:
 * the avx2 tier's matmul_q (kernels.c). One token goes to the group-major sweep
 * (matmul_q_dec_avx2.c), KERN_Q_GEMM_MIN tokens and more (groups up to KERN_Q_GEMM_MAXG) to the
 * unpack-once gemm (matmul_q_gemm_avx2.c); the rest (2..3 tokens, larger groups) run the shared
 * register tiles of kernels/matmul_q4_body_int.h over 8-lane vectors: 8 output columns per
 * 256-bit load, unpacked by shift, mask, subtract the zero, convert. Tiles of 4 (decode) or 2
 * column vectors x 1..3 tokens, accumulators in registers. All three paths give the bits of the
 * scalar tier (kernels/matmul_q4_ref.c). */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/kern_int.h"
#include "kernels/x86/q_avx2_int.h"

#define Q4V_AI   __attribute__((always_inline)) static inline
#define Q4_ENTRY kern_matmul_q_avx2
#define Q4_W     8
#define Q4_TOK   3 /* 2 x 3 group sums + 2 x 3 running sums + unpacked weights in 16 ymm */
#define Q4_ACC_Y 0
typedef __m256i q4v_i;
typedef __m256i q4v_z;
typedef __m256 q4v_f;

Q4V_AI q4v_i q4v_load(const int32_t *src, const int TAIL) {
    (void)TAIL; /* 8 lanes: columns come in whole vectors */
    return _mm256_loadu_si256((const __m256i *)(const void *)src);
}
Q4V_AI q4v_z q4v_zeros(const cllm_qweight *w, int g, int n, const int BITS, const int TAIL) {
    (void)TAIL;
    return q_zeros8v(w, g, n, BITS);
}
Q4V_AI q4v_f q4v_unpack(q4v_i v, q4v_z z, const int BITS) {
    const __m256i mask = _mm256_set1_epi32((1 << BITS) - 1);
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(v, mask), z));
}
Q4V_AI q4v_i q4v_next(q4v_i v, const int BITS) {
    return _mm256_srli_epi32(v, BITS);
}
Q4V_AI q4v_f q4v_bcast(const float *p) {
    return _mm256_broadcast_ss(p);
}
Q4V_AI q4v_f q4v_fma(q4v_f a, q4v_f b, q4v_f c) {
    return _mm256_fmadd_ps(a, b, c);
}
Q4V_AI q4v_f q4v_scales(const cllm_qweight *w, int g, int n, const int TAIL) {
    (void)TAIL;
    return q_scales8(w, g, n);
}
Q4V_AI q4v_f q4v_fzero(void) {
    return _mm256_setzero_ps();
}
Q4V_AI q4v_f q4v_fload(const float *p, const int TAIL) {
    (void)TAIL;
    return _mm256_loadu_ps(p);
}
Q4V_AI void q4v_fstore(float *p, q4v_f v, const int TAIL) {
    (void)TAIL;
    _mm256_storeu_ps(p, v);
}

/* Decode and prefill have kernels of their own (same bits as the tiles). */
Q4V_AI int own(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
               float *Y, size_t ldy, const int BITS) {
    if (n_tok == 1) {
        kern_matmul_q_dec_avx2(w, n0, n1, X, Y);
        return 1;
    }
    if (n_tok >= KERN_Q_GEMM_MIN && w->group <= KERN_Q_GEMM_MAXG) {
        (BITS == 4 ? kern_q_gemm4_avx2 : kern_q_gemm8_avx2)(w, n0, n1, X, ldx, n_tok, Y, ldy);
        return 1;
    }
    return 0;
}
#define Q4_OWN own

#include "kernels/matmul_q4_body_int.h"
