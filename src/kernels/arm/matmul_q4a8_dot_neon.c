/* NEON W4A8 with the Armv8.2 dot-product extension (vdotq_s32 / SDOT): the matmul_q4_qact entry
 * kernels.c picks for the neon tier when HWCAP_ASIMDDP is set. Built with
 * -march=armv8.2-a+dotprod (CMakeLists.txt, files named *_dot_neon.c), so nothing here may run
 * on a CPU without it; activation preparation (kern_qact_prep_neon) and the token/column walk
 * are the baseline ones in matmul_q4a8_neon.c.
 *
 * Same data flow as the baseline variant: `& 0x0f` leaves codes q0 q2 q4 q6 in each 32-bit lane
 * (one output column), `>> 4` leaves q1 q3 q5 q7, and SDOT against the broadcast even/odd
 * activation words adds sum_j q_j a_j into the lane's int32 (codes 0..15 are valid int8). The
 * int32 group sums are exact, so the result is bitwise the baseline's and the scalar tier's. */
#include "kernels/arm/matmul_q4a8_neon_int.h"

#include <stdlib.h>

#define AI __attribute__((always_inline)) static inline
/* Full unrolling of the register-tile loops lets the compiler keep the accumulator arrays in
 * registers (without it GCC 12 -O3 spills some inside the k loop). */
#define UNROLL  _Pragma("GCC unroll 8")
#define PF_ROWS 16
#define MAX_TT  4

/* BITS 4 or 2 as the baseline variant's tile (a row of 8 or 16 inputs, 2 or 4 code vectors). */
AI void tile(const cllm_qweight *w, int n0, const q4a8_tok *A, float *Y, size_t ldy, const int NV,
             const int TT, const int BITS) {
    const int G = w->group, NG = w->K / G;
    const int NS = 8 / BITS, RK = 32 / BITS; /* code vectors per row, inputs per row */
    const size_t N = (size_t)w->N;
    const uint8x16_t mk = vdupq_n_u8(BITS == 4 ? 0x0f : 0x03);
    float32x4_t acc[4][MAX_TT];
    UNROLL
    for (int b = 0; b < NV; b++) UNROLL
    for (int t = 0; t < TT; t++) acc[b][t] = vdupq_n_f32(0.0f);
    for (int g = 0; g < NG; g++) {
        int32x4_t isum[4][MAX_TT];
        UNROLL
        for (int b = 0; b < NV; b++) UNROLL
        for (int t = 0; t < TT; t++) isum[b][t] = vdupq_n_s32(0);
        const int re = (g + 1) * G / RK;
        for (int r = g * G / RK; r < re; r++) {
            int8x16_t cv[4][4]; /* [vector][code vector] */
            UNROLL
            for (int b = 0; b < NV; b++) {
                const int32_t *src = w->qweight + (size_t)r * N + (size_t)(n0 + 4 * b);
                __builtin_prefetch(src + PF_ROWS * N);
                uint8x16_t v = vreinterpretq_u8_s32(vld1q_s32(src));
                UNROLL
                for (int c = 0; c < NS; c++)
                    cv[b][c] = vreinterpretq_s8_u8(
                        vandq_u8(vshlq_u8(v, vdupq_n_s8((int8_t)(-BITS * c))), mk));
            }
            UNROLL
            for (int t = 0; t < TT; t++) {
                UNROLL
                for (int c = 0; c < NS; c++) {
                    int8x16_t a = vreinterpretq_s8_u32(vdupq_n_u32(A[t].ev[NS * r + c]));
                    UNROLL
                    for (int b = 0; b < NV; b++) isum[b][t] = vdotq_s32(isum[b][t], cv[b][c], a);
                }
            }
        }
        UNROLL
        for (int b = 0; b < NV; b++) {
            int32x4_t zv = q4a8_zeros4(w, g, n0 + 4 * b);
            UNROLL
            for (int t = 0; t < TT; t++)
                acc[b][t] = q4a8_group_end(w, g, n0 + 4 * b, zv, &A[t], isum[b][t], acc[b][t]);
        }
    }
    UNROLL
    for (int b = 0; b < NV; b++) UNROLL
    for (int t = 0; t < TT; t++) vst1q_f32(Y + (size_t)t * ldy + (size_t)(n0 + 4 * b), acc[b][t]);
}

AI void tiles_b(const cllm_qweight *w, int n0, const q4a8_tok *A, float *Y, size_t ldy, int nv,
                int tt, const int BITS) {
    if (nv == 4)
        tile(w, n0, A, Y, ldy, 4, 1, BITS);
    else if (tt == 4)
        tile(w, n0, A, Y, ldy, 2, 4, BITS);
    else if (tt == 3)
        tile(w, n0, A, Y, ldy, 2, 3, BITS);
    else if (tt == 2)
        tile(w, n0, A, Y, ldy, 2, 2, BITS);
    else
        tile(w, n0, A, Y, ldy, 2, 1, BITS);
}

static void tiles(const cllm_qweight *w, int n0, const q4a8_tok *A, float *Y, size_t ldy, int nv,
                  int tt) {
    tiles_b(w, n0, A, Y, ldy, nv, tt, 4);
}

static void tiles2(const cllm_qweight *w, int n0, const q4a8_tok *A, float *Y, size_t ldy, int nv,
                   int tt) {
    tiles_b(w, n0, A, Y, ldy, nv, tt, 2);
}

void kern_matmul_q4_qact_neon_dot(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                                  float *Y, size_t ldy) {
    kern_q4a8_drive_neon(w, n0, n1, A, n_tok, Y, ldy, tiles);
}

void kern_matmul_q2_qact_neon_dot(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                                  float *Y, size_t ldy) {
    kern_q4a8_drive_neon(w, n0, n1, A, n_tok, Y, ldy, tiles2);
}
