/* NEON act_bits 16 integer path (cllm_kern_ops qact16_prep + matmul_q_qact16, kernels.h) on
 * baseline ARMv8-A Advanced SIMD: GPTQ int4/int8 codes (unsigned) x int16 activation codes,
 * vmlal_s16 by lane into exact int32 group sums, then the reference's per-group float ops. The
 * scalar oracle is kernels/matmul_q16_ref.c; kernels/x86/matmul_q16_avx2.c is the x86 twin.
 *
 * Why by lane: two 128-bit loads of qweight row k8 hold 8 columns (one 32-bit word each, 8
 * nibbles or 4 bytes = consecutive k). vuzp1q_u16 / vuzp2q_u16 put the low and the high halves
 * of the 8 words side by side, so `& 0xf`, `>> 4 & 0xf`, ... (int8: `& 0xff`, `>> 8`) give one
 * int16x8 per k with the 8 columns in its lanes: about 9 ops unpack 64 int4 codes (5 for 32
 * int8). Each such vector then meets activation code a[k] as a lane of the token's plain
 * k-ordered int16 codes (vmlal_laneq_s16 / vmlal_high_laneq_s16: 2 multiply-accumulates per k,
 * 4 columns each, into int32), so no broadcast of activations is needed and one unpacked weight
 * vector feeds every token of the register tile. Codes are 0..255 and activations +-32767, so
 * each product fits int32; a group's sum can only wrap modulo 2^32 on the way, and the final
 * d = isum - z * asum fits int32 (cllm_qact16_group), so it is exact in any tile and loop order
 * and equal to the scalar tier. Then acc = fma(ws * s[h], (float)d, acc) per group in order,
 * lane by lane (vmulq_f32, vcvtq_f32_s32 and vfmaq_f32 round as the ref's C does).
 *
 * Prepared layout: the ref's (int16 codes [K] in k order, fp32 scales [K/AG], int32 sums
 * [K/AG]), for both weight widths; kern_qact16_prep_neon writes the same bytes as the ref prep.
 *
 * One walk for every token count: per column block and activation group, register tiles of
 * 8 NB columns x TT tokens (NB x TT x 2 int32x4 sums, <= 16 registers) read only that group's
 * qweight rows, and the float accumulators of the block stay in L1 (acc[TT][DEC_W]). One token
 * (decode: 32-column tiles) and a few (2..8, batched decode) sweep [n0, n1) in DEC_W-column
 * blocks, so the weights stream once, group-major. More tokens go in blocks of TB tokens and
 * CW-column chunks (the chunk's weights stay in L2 while the block's tokens pass 8 at a time,
 * each unpacked vector feeding 8 tokens). Block sizes are the AVX2 tier's, not tuned on ARM. */
#include <arm_neon.h>
#include <stdint.h>

#include "kernels/kern_int.h"

#define AI __attribute__((always_inline)) static inline
/* Full unrolling of the tile loops keeps the sum arrays in registers (as matmul_q4_body_int.h). */
#define UNROLL _Pragma("GCC unroll 8")
#define DEC_W  512 /* columns per sweep block (acc: DEC_W x SW_MAX floats, 16 KiB) */
#define SW_MAX 8   /* tokens per register tile */
#define TB     64  /* multi-token: tokens per block (their codes stay in L2) */
#define CW     64  /* multi-token: columns per chunk (their weights stay in L2) */

/* ---- activation prep ---- */

/* One token, kern_quant_act16 bit for bit: vmaxnmq ignores NaN like fmaxf (|NaN| is skipped in
 * the absmax, NaN / s clamps to -32767 since max comes first), the division is IEEE, vrndnq is
 * nearbyintf's round to nearest even. AG % 8 == 0. */
static void prep(const float *x, int K, int AG, char *p) {
    const int NH = K / AG;
    const float32x4_t lo = vdupq_n_f32(-32767.0f), hi = vdupq_n_f32(32767.0f);
    int16_t *code = (int16_t *)(void *)p;
    float *s = (float *)(void *)(p + 2 * (size_t)K);
    int32_t *sums = (int32_t *)(void *)(p + 2 * (size_t)K + 4 * (size_t)NH);
    for (int h = 0; h < NH; h++) {
        const float *xg = x + (size_t)h * AG;
        int16_t *cg = code + (size_t)h * AG;
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int k = 0; k < AG; k += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(xg + k)));
        float sc = vmaxnmvq_f32(m) / 32767.0f;
        s[h] = sc;
        if (sc == 0.0f) {
            for (int k = 0; k < AG; k += 8) vst1q_s16(cg + k, vdupq_n_s16(0));
            sums[h] = 0;
            continue;
        }
        const float32x4_t sv = vdupq_n_f32(sc);
        int32x4_t sum = vdupq_n_s32(0);
        for (int k = 0; k < AG; k += 8) {
            float32x4_t r0 = vrndnq_f32(vdivq_f32(vld1q_f32(xg + k), sv));
            float32x4_t r1 = vrndnq_f32(vdivq_f32(vld1q_f32(xg + k + 4), sv));
            int32x4_t i0 = vcvtq_s32_f32(vminnmq_f32(vmaxnmq_f32(r0, lo), hi));
            int32x4_t i1 = vcvtq_s32_f32(vminnmq_f32(vmaxnmq_f32(r1, lo), hi));
            sum = vaddq_s32(sum, vaddq_s32(i0, i1));
            vst1q_s16(cg + k, vcombine_s16(vmovn_s32(i0), vmovn_s32(i1)));
        }
        sums[h] = vaddvq_s32(sum);
    }
}

void kern_qact16_prep_neon(const float *X, size_t ldx, int n_tok, int K, int ag, int bits,
                           void *A) {
    (void)bits; /* one layout for both weight widths */
    size_t stride = cllm_qact16_bytes(K, ag, 1);
    for (int t = 0; t < n_tok; t++)
        prep(X + (size_t)t * ldx, K, ag, (char *)A + (size_t)t * stride);
}

/* ---- matmul ---- */

typedef struct {
    const int16_t *a;   /* codes [K] */
    const float *s;     /* [K/AG] */
    const int32_t *sum; /* [K/AG] */
} qtok;

static qtok qtok_at(const void *A, int K, int NH, int t) {
    const char *p = (const char *)A + (size_t)t * (2 * (size_t)K + 8 * (size_t)NH);
    return (qtok){(const int16_t *)(const void *)p,
                  (const float *)(const void *)(p + 2 * (size_t)K),
                  (const int32_t *)(const void *)(p + 2 * (size_t)K + 4 * (size_t)NH)};
}

/* Effective zeros (stored + 1) of columns n..n+3 (*zl) and n+4..n+7 (*zh) in group g; n % 8 == 0,
 * so int4 takes one qzeros word, int8 two. */
AI void zeros8(const cllm_qweight *w, int g, int n, const int BITS, int32x4_t *zl, int32x4_t *zh) {
    const int per = 32 / BITS;
    const int32_t *zr = w->qzeros + (size_t)g * (size_t)(w->N / per) + (size_t)(n / per);
    const uint32x4_t one = vdupq_n_u32(1);
    if (BITS == 4) {
        const int32x4_t sl = {0, -4, -8, -12}, sh = {-16, -20, -24, -28}; /* right shifts */
        const uint32x4_t m = vdupq_n_u32(15), v = vdupq_n_u32((uint32_t)zr[0]);
        *zl = vreinterpretq_s32_u32(vaddq_u32(vandq_u32(vshlq_u32(v, sl), m), one));
        *zh = vreinterpretq_s32_u32(vaddq_u32(vandq_u32(vshlq_u32(v, sh), m), one));
    } else {
        const int32x4_t s8 = {0, -8, -16, -24};
        const uint32x4_t m = vdupq_n_u32(255);
        uint32x4_t v0 = vdupq_n_u32((uint32_t)zr[0]), v1 = vdupq_n_u32((uint32_t)zr[1]);
        *zl = vreinterpretq_s32_u32(vaddq_u32(vandq_u32(vshlq_u32(v0, s8), m), one));
        *zh = vreinterpretq_s32_u32(vaddq_u32(vandq_u32(vshlq_u32(v1, s8), m), one));
    }
}

/* The 8 scales of columns n..n+7 in group g as fp32 (f16 and bf16 both convert exactly). */
AI void scales8(const cllm_qweight *w, int g, int n, float32x4_t *sl, float32x4_t *sh) {
    uint16x8_t h = vld1q_u16(w->scales + (size_t)g * (size_t)w->N + (size_t)n);
    if (w->scale_bf16) {
        *sl = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
        *sh = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
    } else {
        float16x8_t f = vreinterpretq_f16_u16(h);
        *sl = vcvt_f32_f16(vget_low_f16(f));
        *sh = vcvt_high_f32_f16(f);
    }
}

/* acc[0..3] = fma(ws * s, (float)(isum - z * asum), acc): the contract's per-group float ops. */
AI void group_end(int32x4_t isum, int32x4_t z, int32_t asum, float32x4_t ws, float s, float *acc) {
    int32x4_t d = vmlsq_s32(isum, z, vdupq_n_s32(asum));
    float32x4_t sc = vmulq_f32(ws, vdupq_n_f32(s));
    vst1q_f32(acc, vfmaq_f32(vld1q_f32(acc), sc, vcvtq_f32_s32(d)));
}

/* code k of the row (lane j of the token's codes a) x unpacked weights q: columns 0..3, 4..7 */
#define MLA16(j, q)                                                                                \
    do {                                                                                           \
        sl[b][t] = vmlal_laneq_s16(sl[b][t], vget_low_s16(q), a, j);                               \
        sh[b][t] = vmlal_high_laneq_s16(sh[b][t], q, a, j);                                        \
    } while (0)
#define MLA8(j, q)                                                                                 \
    do {                                                                                           \
        sl[b][t] = vmlal_lane_s16(sl[b][t], vget_low_s16(q), a, j);                                \
        sh[b][t] = vmlal_high_lane_s16(sh[b][t], q, a, j);                                         \
    } while (0)

/* Activation group h of columns [n, n + 8 NB) for tokens A[0..TT): acc[t * DEC_W + ...]
 * (block-relative) updated. */
AI void gtile(const cllm_qweight *w, int h, int AG, int n, const qtok *A, float *acc,
              const int BITS, const int NB, const int TT) {
    const int per = 32 / BITS, g = h * AG / w->group, rows = AG / per, k80 = h * rows;
    const size_t N = (size_t)w->N;
    int32x4_t sl[4][SW_MAX], sh[4][SW_MAX];
    UNROLL
    for (int b = 0; b < NB; b++) UNROLL
    for (int t = 0; t < TT; t++) sl[b][t] = sh[b][t] = vdupq_n_s32(0);
    const int32_t *src = w->qweight + (size_t)k80 * N + n;
    for (int r = 0; r < rows; r++, src += N) {
        /* the same columns one group further down: read on the next pass over this block */
        __builtin_prefetch(src + (size_t)rows * N);
        if (NB > 2) __builtin_prefetch(src + (size_t)rows * N + 16);
        const size_t k0 = (size_t)(k80 + r) * (size_t)per;
        UNROLL
        for (int b = 0; b < NB; b++) {
            uint16x8_t v0 = vreinterpretq_u16_s32(vld1q_s32(src + 8 * b));
            uint16x8_t v1 = vreinterpretq_u16_s32(vld1q_s32(src + 8 * b + 4));
            /* lane c: low (high) half of column c's word: codes k0..k0+3 (+4..7; int8: 2, 3) */
            uint16x8_t lo = vuzp1q_u16(v0, v1), hi = vuzp2q_u16(v0, v1);
            if (BITS == 4) {
                const uint16x8_t m = vdupq_n_u16(15);
                int16x8_t q0 = vreinterpretq_s16_u16(vandq_u16(lo, m));
                int16x8_t q1 = vreinterpretq_s16_u16(vandq_u16(vshrq_n_u16(lo, 4), m));
                int16x8_t q2 = vreinterpretq_s16_u16(vandq_u16(vshrq_n_u16(lo, 8), m));
                int16x8_t q3 = vreinterpretq_s16_u16(vshrq_n_u16(lo, 12));
                int16x8_t q4 = vreinterpretq_s16_u16(vandq_u16(hi, m));
                int16x8_t q5 = vreinterpretq_s16_u16(vandq_u16(vshrq_n_u16(hi, 4), m));
                int16x8_t q6 = vreinterpretq_s16_u16(vandq_u16(vshrq_n_u16(hi, 8), m));
                int16x8_t q7 = vreinterpretq_s16_u16(vshrq_n_u16(hi, 12));
                UNROLL
                for (int t = 0; t < TT; t++) {
                    int16x8_t a = vld1q_s16(A[t].a + k0);
                    MLA16(0, q0);
                    MLA16(1, q1);
                    MLA16(2, q2);
                    MLA16(3, q3);
                    MLA16(4, q4);
                    MLA16(5, q5);
                    MLA16(6, q6);
                    MLA16(7, q7);
                }
            } else {
                const uint16x8_t m = vdupq_n_u16(255);
                int16x8_t q0 = vreinterpretq_s16_u16(vandq_u16(lo, m));
                int16x8_t q1 = vreinterpretq_s16_u16(vshrq_n_u16(lo, 8));
                int16x8_t q2 = vreinterpretq_s16_u16(vandq_u16(hi, m));
                int16x8_t q3 = vreinterpretq_s16_u16(vshrq_n_u16(hi, 8));
                UNROLL
                for (int t = 0; t < TT; t++) {
                    int16x4_t a = vld1_s16(A[t].a + k0);
                    MLA8(0, q0);
                    MLA8(1, q1);
                    MLA8(2, q2);
                    MLA8(3, q3);
                }
            }
        }
    }
    UNROLL
    for (int b = 0; b < NB; b++) {
        int32x4_t zl, zh;
        float32x4_t wl, wh;
        zeros8(w, g, n + 8 * b, BITS, &zl, &zh);
        scales8(w, g, n + 8 * b, &wl, &wh);
        UNROLL
        for (int t = 0; t < TT; t++) {
            float *ac = acc + (size_t)t * DEC_W + 8 * b;
            group_end(sl[b][t], zl, A[t].sum[h], wl, A[t].s[h], ac);
            group_end(sh[b][t], zh, A[t].sum[h], wh, A[t].s[h], ac + 4);
        }
    }
}

/* Columns [n0, n1) x tokens A[0..TT) -> Y rows 0..TT-1: DEC_W-column blocks, group-major. */
AI void sweep(const cllm_qweight *w, int n0, int n1, const qtok *A, float *Y, size_t ldy,
              const int BITS, const int TT) {
    const int AG = cllm_qact16_group(BITS, w->group), NH = w->K / AG;
    const int NB = TT <= 2 ? 4 : TT <= 4 ? 2 : 1; /* NB x TT x 2 int32x4 sums in registers */
    float acc[SW_MAX * DEC_W] __attribute__((aligned(16)));
    for (int nb = n0; nb < n1; nb += DEC_W) {
        const int ne = n1 - nb > DEC_W ? nb + DEC_W : n1;
        for (int t = 0; t < TT; t++)
            for (int i = 0; i < ne - nb; i++) acc[t * DEC_W + i] = 0.0f;
        for (int h = 0; h < NH; h++) {
            int n = nb;
            if (NB == 4)
                for (; n + 32 <= ne; n += 32) gtile(w, h, AG, n, A, acc + (n - nb), BITS, 4, TT);
            if (NB >= 2)
                for (; n + 16 <= ne; n += 16) gtile(w, h, AG, n, A, acc + (n - nb), BITS, 2, TT);
            for (; n < ne; n += 8) gtile(w, h, AG, n, A, acc + (n - nb), BITS, 1, TT);
        }
        for (int t = 0; t < TT; t++)
            for (int i = 0; i < ne - nb; i += 4)
                vst1q_f32(Y + (size_t)t * ldy + nb + i, vld1q_f32(acc + t * DEC_W + i));
    }
}

/* Tokens [t0, t0 + tn) (tn 1..SW_MAX) over columns [n0, n1). */
AI void few(const cllm_qweight *w, int n0, int n1, const void *Ap, int t0, int tn, float *Y,
            size_t ldy, const int BITS) {
    const int K = w->K, NH = K / cllm_qact16_group(BITS, w->group);
    qtok A[SW_MAX];
    for (int t = 0; t < tn; t++) A[t] = qtok_at(Ap, K, NH, t0 + t);
    float *Yt = Y + (size_t)t0 * ldy;
    switch (tn) {
    case 1:
        sweep(w, n0, n1, A, Yt, ldy, BITS, 1);
        break;
    case 2:
        sweep(w, n0, n1, A, Yt, ldy, BITS, 2);
        break;
    case 3:
        sweep(w, n0, n1, A, Yt, ldy, BITS, 3);
        break;
    case 4:
        sweep(w, n0, n1, A, Yt, ldy, BITS, 4);
        break;
    case 5:
        sweep(w, n0, n1, A, Yt, ldy, BITS, 5);
        break;
    case 6:
        sweep(w, n0, n1, A, Yt, ldy, BITS, 6);
        break;
    case 7:
        sweep(w, n0, n1, A, Yt, ldy, BITS, 7);
        break;
    default:
        sweep(w, n0, n1, A, Yt, ldy, BITS, 8);
        break;
    }
}

AI void drive(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok, float *Y, size_t ldy,
              const int BITS) {
    /* up to SW_MAX tokens (decode, batched decode): one pass over [n0, n1), the weights
     * streamed once; more: TB-token blocks x CW-column chunks */
    const int few_tok = n_tok <= SW_MAX, tbw = few_tok ? SW_MAX : TB;
    const int cw = few_tok ? n1 - n0 : CW;
    for (int tb = 0; tb < n_tok; tb += tbw) {
        const int te = n_tok - tb < tbw ? n_tok : tb + tbw;
        for (int c0 = n0; c0 < n1; c0 += cw) {
            const int c1 = n1 - c0 < cw ? n1 : c0 + cw;
            for (int t = tb; t < te; t += SW_MAX)
                few(w, c0, c1, A, t, te - t < SW_MAX ? te - t : SW_MAX, Y, ldy, BITS);
        }
    }
}

void kern_matmul_q_qact16_neon(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                               float *Y, size_t ldy) {
    if (n_tok <= 0 || n1 <= n0) return;
    if (w->bits == 8)
        drive(w, n0, n1, A, n_tok, Y, ldy, 8);
    else
        drive(w, n0, n1, A, n_tok, Y, ldy, 4);
}
