/* AVX-512 (F/BW/VL/DQ) matmul for GPTQ int4/int8 weights (cllm_qweight, kernels.h) x fp32
 * activations: the avx512 tier's matmul_q (kernels.c), called by the forward pass per slice of
 * output columns (model/forward.c mm_worker). The tiles are kernels/matmul_q4_body_int.h's over
 * 16-lane vectors; an 8-column tail (N is only a multiple of 8) runs with lanes 8..15 masked off
 * on every load and store.
 *
 * Unpacking: one vpternlogd computes (v & mask) | 0x4B000000, the float 2^23 + q exactly, and one
 * subtraction of 2^23 + z gives (float)(q - z) exactly (both operands are integers below 2^24):
 * the value the reference converts, one instruction fewer than mask, subtract, convert. Tiles
 * of 4 (decode) or 2 column vectors x 1..8 tokens, acc in Y between groups. Chosen with a
 * best-of-N microbenchmark on an AMD EPYC (Zen 4) core: 8 tokens x 32 columns is 1.1-1.2x faster
 * for prefill than 4 x 32 with acc in registers; vpternlogd unpacking is ~1.1x for decode. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/kern_int.h"
#include "kernels/x86/q_avx512_int.h"

#define Q4V_AI   __attribute__((always_inline)) static inline
#define Q4_ENTRY kern_matmul_q_avx512
#define Q4_W     16
#define Q4_TOK   8 /* 2 x 8 group sums + unpacked weights fit 32 zmm */
#define Q4_ACC_Y 1
/* GCC's own unrolling, as before the shared body: its full unroll made the int4 code half again
 * as large (965 -> 1469 FMAs in the object) and timed slower, by up to 1.25x, on a loaded host */
#define Q4_UNROLL
typedef __m512i q4v_i;
typedef __m512 q4v_z; /* 2^23 + z */
typedef __m512 q4v_f;

Q4V_AI q4v_i q4v_load(const int32_t *src, const int TAIL) {
    return TAIL ? _mm512_maskz_loadu_epi32(0x00ff, src) : _mm512_loadu_si512(src);
}
Q4V_AI q4v_z q4v_zeros(const cllm_qweight *w, int g, int n, const int BITS, const int TAIL) {
    const __m512i magic = _mm512_set1_epi32(0x4B000000); /* float 2^23 */
    return _mm512_castsi512_ps(_mm512_or_si512(zeros16(w, g, n, BITS, TAIL), magic));
}
Q4V_AI q4v_f q4v_unpack(q4v_i v, q4v_z z, const int BITS) {
    const __m512i mask = _mm512_set1_epi32((1 << BITS) - 1);
    const __m512i magic = _mm512_set1_epi32(0x4B000000);
    __m512i qm = _mm512_ternarylogic_epi32(v, mask, magic, 0xEA); /* a&b|c */
    return _mm512_sub_ps(_mm512_castsi512_ps(qm), z);
}
Q4V_AI q4v_i q4v_next(q4v_i v, const int BITS) {
    return _mm512_srli_epi32(v, BITS);
}
Q4V_AI q4v_f q4v_bcast(const float *p) {
    return _mm512_set1_ps(*p);
}
Q4V_AI q4v_f q4v_fma(q4v_f a, q4v_f b, q4v_f c) {
    return _mm512_fmadd_ps(a, b, c);
}
Q4V_AI q4v_f q4v_scales(const cllm_qweight *w, int g, int n, const int TAIL) {
    return scales16(w, g, n, TAIL);
}
Q4V_AI q4v_f q4v_fzero(void) {
    return _mm512_setzero_ps();
}
Q4V_AI q4v_f q4v_fload(const float *p, const int TAIL) {
    return TAIL ? _mm512_maskz_loadu_ps(0x00ff, p) : _mm512_loadu_ps(p);
}
Q4V_AI void q4v_fstore(float *p, q4v_f v, const int TAIL) {
    if (TAIL)
        _mm512_mask_storeu_ps(p, 0x00ff, v);
    else
        _mm512_storeu_ps(p, v);
}

#include "kernels/matmul_q4_body_int.h"
