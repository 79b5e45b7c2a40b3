/* NEON matmul for GPTQ int4/int8 weights (cllm_qweight, kernels.h) x fp32 activations: the
 * cllm_kern_ops.matmul_q entry of the neon tier (kernels.c), kernels/matmul_q4_body_int.h's
 * tiles over 4-lane vectors. One 128-bit load of qweight row k8 holds 32/bits consecutive k
 * values for 4 consecutive outputs, unpacked by shift, mask, subtract the zero, convert;
 * vfmaq_f32 rounds once like fmaf, so each lane is bitwise the scalar tier
 * (kernels/matmul_q4_ref.c). Tiles of 4 (decode) or 2 vectors x 1..4 tokens, accumulators in
 * registers. Baseline ARMv8-A Advanced SIMD, no extension needed. */
#include <arm_neon.h>
#include <stdint.h>

#include "kernels/kern_int.h"

#define Q4V_AI   __attribute__((always_inline)) static inline
#define Q4_ENTRY kern_matmul_q_neon
#define Q4_W     4
#define Q4_TOK   4
#define Q4_ACC_Y 0
typedef uint32x4_t q4v_i;
typedef int32x4_t q4v_z;
typedef float32x4_t q4v_f;

Q4V_AI q4v_i q4v_load(const int32_t *src, const int TAIL) {
    (void)TAIL; /* 4 lanes: columns come in whole vectors */
    return vreinterpretq_u32_s32(vld1q_s32(src));
}
/* Effective zeros (stored + 1) of columns n0..n0+3 (n0 % 4 == 0) in group g, one per lane. */
Q4V_AI q4v_z q4v_zeros(const cllm_qweight *w, int g, int n0, const int BITS, const int TAIL) {
    (void)TAIL;
    const int per = 32 / BITS;
    uint32_t word = (uint32_t)w->qzeros[(size_t)g * (size_t)(w->N / per) + (size_t)(n0 / per)];
    int s0 = (n0 % per) * BITS; /* negative shift counts shift right */
    const int32x4_t sh = {-s0, -(s0 + BITS), -(s0 + 2 * BITS), -(s0 + 3 * BITS)};
    uint32x4_t z = vandq_u32(vshlq_u32(vdupq_n_u32(word), sh), vdupq_n_u32((1u << BITS) - 1));
    return vaddq_s32(vreinterpretq_s32_u32(z), vdupq_n_s32(1));
}
Q4V_AI q4v_f q4v_unpack(q4v_i v, q4v_z z, const int BITS) {
    int32x4_t q = vreinterpretq_s32_u32(vandq_u32(v, vdupq_n_u32((1u << BITS) - 1)));
    return vcvtq_f32_s32(vsubq_s32(q, z));
}
Q4V_AI q4v_i q4v_next(q4v_i v, const int BITS) {
    /* an immediate for clang too, which folds BITS only after inlining */
    return BITS == 8 ? vshrq_n_u32(v, 8) : vshrq_n_u32(v, 4);
}
Q4V_AI q4v_f q4v_bcast(const float *p) {
    return vld1q_dup_f32(p);
}
Q4V_AI q4v_f q4v_fma(q4v_f a, q4v_f b, q4v_f c) {
    return vfmaq_f32(c, a, b);
}
/* The 4 scales of columns n..n+3 in group g as fp32 (f16 and bf16 both convert exactly). */
Q4V_AI q4v_f q4v_scales(const cllm_qweight *w, int g, int n, const int TAIL) {
    (void)TAIL;
    uint16x4_t h = vld1_u16(w->scales + (size_t)g * (size_t)w->N + (size_t)n);
    if (w->scale_bf16) return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
    return vcvt_f32_f16(vreinterpret_f16_u16(h));
}
Q4V_AI q4v_f q4v_fzero(void) {
    return vdupq_n_f32(0.0f);
}
Q4V_AI q4v_f q4v_fload(const float *p, const int TAIL) {
    (void)TAIL;
    return vld1q_f32(p);
}
Q4V_AI void q4v_fstore(float *p, q4v_f v, const int TAIL) {
    (void)TAIL;
    vst1q_f32(p, v);
}

#include "kernels/matmul_q4_body_int.h"
