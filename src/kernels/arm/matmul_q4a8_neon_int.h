/* Private to kernels/arm/matmul_q4a8_neon.c and matmul_q4a8_dot_neon.c: the W4A8/W4A4 pieces
 * the baseline NEON (vmull/vpadal) and the dot-product (vdotq_s32) variants share. Only the
 * group's integer dot product differs between them; both give the same exact int32, so the same
 * floats. Both read activations prepared by kern_qact_prep_neon. */
#ifndef CLLM_KERNELS_ARM_MATMUL_Q4A8_NEON_INT_H
#define CLLM_KERNELS_ARM_MATMUL_Q4A8_NEON_INT_H

#include <arm_neon.h>
#include <stdint.h>

#include "kernels/kern_int.h"

/* One prepared token (cllm_qact_bytes layout, kernels.h): int8 codes regrouped per 8 inputs
 * into two words, the even k bytes (a0 a2 a4 a6) and the odd ones (a1 a3 a5 a7), matching the
 * nibbles `& 0x0f` and `>> 4` leave in each byte of a qweight word (the x86 tiers' order too);
 * then the fp32 scales and int32 code sums of the groups. */
typedef struct q4a8_tok {
    const uint32_t *ev; /* [K/8][2]: even, odd bytes of each 8-input block */
    const float *s;     /* [K/G] activation scale per group */
    const int32_t *sum; /* [K/G] sum of the group's codes */
} q4a8_tok;

/* Output columns [n0, n0 + 4*nv) x tokens [0, tt) (nv 2 or 4, tt 1..4) of one variant. */
typedef void (*q4a8_tile_fn)(const cllm_qweight *w, int n0, const q4a8_tok *A, float *Y, size_t ldy,
                             int nv, int tt);

/* matmul_q4_qact around a tile function: walks prepared tokens 4 at a time and the columns
 * [n0, n1) (multiples of 8). */
/* (kern_qact_prep_neon, the prep both variants read, is declared in kern_int.h.) */
void kern_q4a8_drive_neon(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok, float *Y,
                          size_t ldy, q4a8_tile_fn tile);

/* Effective zeros (stored + 1) of columns n0..n0+3 (n0 % 4 == 0) in group g, one per lane. */
__attribute__((always_inline)) static inline int32x4_t q4a8_zeros4(const cllm_qweight *w, int g,
                                                                   int n0) {
    uint32_t word = (uint32_t)w->qzeros[(size_t)g * (size_t)(w->N / 8) + (size_t)(n0 / 8)];
    int s0 = (n0 % 8) * 4; /* negative shift counts shift right */
    const int32x4_t sh = {-s0, -(s0 + 4), -(s0 + 8), -(s0 + 12)};
    uint32x4_t z = vandq_u32(vshlq_u32(vdupq_n_u32(word), sh), vdupq_n_u32(15));
    return vaddq_s32(vreinterpretq_s32_u32(z), vdupq_n_s32(1));
}

/* End of group g for 4 columns at n and token A: acc = fma(w_scale * a_scale, (float)(isum -
 * z * sum a), acc), the reference's sequence lane by lane. */
__attribute__((always_inline)) static inline float32x4_t
q4a8_group_end(const cllm_qweight *w, int g, int n, int32x4_t zv, const q4a8_tok *A, int32x4_t isum,
               float32x4_t acc) {
    uint16x4_t h = vld1_u16(w->scales + (size_t)g * (size_t)w->N + (size_t)n);
    float32x4_t sv = w->scale_bf16 ? vreinterpretq_f32_u32(vshll_n_u16(h, 16)) /* exact */
                                   : vcvt_f32_f16(vreinterpret_f16_u16(h));
    int32x4_t gi = vmlsq_s32(isum, zv, vdupq_n_s32(A->sum[g]));
    float32x4_t sc = vmulq_f32(sv, vdupq_n_f32(A->s[g]));
    return vfmaq_f32(acc, sc, vcvtq_f32_s32(gi));
}

#endif
