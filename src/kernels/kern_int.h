/* Private: per-tier tables, defined in kernels/<family>_ref.c and kernels/x86/<family>_avx2.c. */
#ifndef CLLM_KERNELS_KERN_INT_H
#define CLLM_KERNELS_KERN_INT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/half.h"
#include "kernels/kernels.h"

/* The bf16 recurrent state's rounding (gdn_step_bf16; widening is base/half.h's exact
 * cllm_bf16_to_f32): to nearest even by adding 0x7fff + lsb to the bits, the integer formula every
 * SIMD tier's lanes use, so tiers and ref agree bitwise. Unlike cllm_f32_to_bf16 a NaN is not
 * special-cased: a state that is NaN already makes the layer's outputs NaN. */
static inline uint16_t kern_bf16_rne(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void kern_matmul_f32_ref(const void *W, size_t ldw, int n_rows, const float *X, size_t ldx,
                         int n_tok, int K, float *Y, size_t ldy);
void kern_matmul_f16_ref(const void *W, size_t ldw, int n_rows, const float *X, size_t ldx,
                         int n_tok, int K, float *Y, size_t ldy);
void kern_matmul_bf16_ref(const void *W, size_t ldw, int n_rows, const float *X, size_t ldx,
                          int n_tok, int K, float *Y, size_t ldy);
void kern_gdn_step_ref(float *S, const float *q, const float *k, const float *v, const float *decay,
                       const float *beta, size_t ld, float *o, size_t ldo, int T, float *tmp,
                       int dk, int dv);
void kern_gdn_step_bf16_ref(uint16_t *S, const float *q, const float *k, const float *v,
                            const float *decay, const float *beta, size_t ld, float *o, size_t ldo,
                            int T, float *tmp, int dk, int dv);
/* One token of gdn_step_bf16 over columns [n0, dv) of S (u: [dv] scratch): the ref's step and
 * the SIMD tiers' scalar column tail. */
void kern_gdn_cols_bf16(uint16_t *S, const float *q, const float *k, const float *v, float decay,
                        float beta, float *o, float *u, int dk, int dv, int n0);
void kern_gdn_chunk_ref(float *S, const float *q, const float *k, size_t ldqk, const float *v,
                        size_t ldv, const float *g, const float *beta, float *o, size_t ldo, int T,
                        int dk, int dv, float *work);
/* A tier's float int4/int8 core (act_bits ignored): the matmul_q contract for float activations. */
typedef void (*kern_q_core_fn)(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx,
                               int n_tok, float *Y, size_t ldy);
/* matmul_q from a tier's cores (kernels/matmul_q4_ref.c): the core for the weight's bits. */
void kern_matmul_q_with(kern_q_core_fn core4, kern_q_core_fn core8, const cllm_qweight *w, int n0,
                        int n1, const float *X, size_t ldx, int n_tok, float *Y, size_t ldy);
void kern_matmul_q_ref(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                       float *Y, size_t ldy);
/* Activation fake-quantization for W4A8/W4A4 (kernels/matmul_q4_ref.c): dst[k] = the value
 * x[k] takes after symmetric per-group (group inputs) quantization to `bits`. */
void kern_fake_quant_act(const float *x, float *dst, int K, int group, int bits);
/* W4A8 activation quantization (kernels/matmul_q4a8_ref.c), the kern_fake_quant_act grid for
 * bits 8: per group g of `group` inputs, s[g] = absmax / 127, q[k] = round(x[k] / s[g]) (0 when
 * s[g] == 0), sum[g] = sum of the group's q. */
void kern_quant_act8(const float *x, int K, int group, int8_t *q, float *s, int32_t *sum);
/* The same for act_bits `bits` (8: / 127, 4: / 7 and codes clamped to -7..7). */
void kern_quant_act(const float *x, int K, int group, int bits, int8_t *q, float *s, int32_t *sum);
void kern_qact_prep_ref(const float *X, size_t ldx, int n_tok, int K, int group, int act_bits,
                        void *A);
void kern_matmul_q4_qact_ref(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                             float *Y, size_t ldy);
void kern_matmul_q2_qact_ref(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                             float *Y, size_t ldy);
/* act_bits 16 integer path (kernels/matmul_q16_ref.c): per group
 * of ag inputs s[h] = absmax / 32767, q[k] = round(x[k] / s[h]) (0 when s[h] == 0), sum[h]. */
void kern_quant_act16(const float *x, int K, int ag, int16_t *q, float *s, int32_t *sum);
void kern_qact16_prep_ref(const float *X, size_t ldx, int n_tok, int K, int ag, int bits, void *A);
void kern_matmul_q_qact16_ref(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                              float *Y, size_t ldy);
/* kernels/act_ref.c; kernels/x86/act_avx2.c and arm/act_neon.c (one body:
 * kernels/act_body_int.h) */
void kern_silu_mul_ref(float *y, const float *g, const float *u, int n);
void kern_silu_mul_avx2(float *y, const float *g, const float *u, int n);
void kern_silu_mul_neon(float *y, const float *g, const float *u, int n);
/* kernels/gemm_ref.c (also the NEON tables' gemm_f32) */
void kern_gemm_f32_ref(int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb,
                       float *C, size_t ldc, int op);

#if defined(__x86_64__) || defined(_M_X64)
#define KERN_HAVE_X86 1
/* kernels/x86/gemm_avx2.c, gemm_avx512.c (AVX-512F) */
void kern_gemm_f32_avx2(int M, int N, int K, const float *A, size_t lda, const float *B, size_t ldb,
                        float *C, size_t ldc, int op);
void kern_gemm_f32_avx512(int M, int N, int K, const float *A, size_t lda, const float *B,
                          size_t ldb, float *C, size_t ldc, int op);
void kern_matmul_f32_avx2(const void *W, size_t ldw, int n_rows, const float *X, size_t ldx,
                          int n_tok, int K, float *Y, size_t ldy);
void kern_matmul_f16_avx2(const void *W, size_t ldw, int n_rows, const float *X, size_t ldx,
                          int n_tok, int K, float *Y, size_t ldy);
void kern_matmul_bf16_avx2(const void *W, size_t ldw, int n_rows, const float *X, size_t ldx,
                           int n_tok, int K, float *Y, size_t ldy);
void kern_matmul_q_avx2(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx,
                        int n_tok, float *Y, size_t ldy);
/* kernels/x86/matmul_q_gemm_avx2.c: the matmul_q float core for n_tok >= KERN_Q_GEMM_MIN and
 * group <= KERN_Q_GEMM_MAXG (weights unpacked once per chunk for all tokens); bitwise the same
 * results as the decode tiles. */
#define KERN_Q_GEMM_MIN  4
#define KERN_Q_GEMM_MAXG 256
void kern_q_gemm4_avx2(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                       float *Y, size_t ldy);
void kern_q_gemm8_avx2(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx, int n_tok,
                       float *Y, size_t ldy);
/* kernels/x86/matmul_q_dec_avx2.c: matmul_q's float core for one token (y[n], n in [n0, n1)),
 * bits 4 or 8, act_bits ignored; bitwise the multi-token tiles' result. */
void kern_matmul_q_dec_avx2(const cllm_qweight *w, int n0, int n1, const float *x, float *y);
void kern_gdn_step_avx2(float *S, const float *q, const float *k, const float *v,
                        const float *decay, const float *beta, size_t ld, float *o, size_t ldo,
                        int T, float *tmp, int dk, int dv);
void kern_gdn_step_bf16_avx2(uint16_t *S, const float *q, const float *k, const float *v,
                             const float *decay, const float *beta, size_t ld, float *o, size_t ldo,
                             int T, float *tmp, int dk, int dv);
void kern_gdn_chunk_avx2(float *S, const float *q, const float *k, size_t ldqk, const float *v,
                         size_t ldv, const float *g, const float *beta, float *o, size_t ldo, int T,
                         int dk, int dv, float *work);
/* x86 activation prep shared by the AVX2 and AVX-512 W4A8 kernels (one layout): per token,
 * K bytes of codes regrouped per 8 inputs into two words (even k, odd k), then scales, sums. */
void kern_qact_prep_avx2(const float *X, size_t ldx, int n_tok, int K, int group, int act_bits,
                         void *A);
void kern_matmul_q4_qact_avx2(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                              float *Y, size_t ldy);
void kern_matmul_q2_qact_avx2(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                              float *Y, size_t ldy);
/* kernels/x86/matmul_q16_avx2.c: the act_bits 16 integer path (its prep also the avx512 tables') */
void kern_qact16_prep_avx2(const float *X, size_t ldx, int n_tok, int K, int ag, int bits, void *A);
void kern_matmul_q_qact16_avx2(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                               float *Y, size_t ldy);
/* kernels/x86/matmul_q4*_avx512.c (AVX-512 F/BW/VL/DQ; _vnni ones also need AVX512-VNNI) */
void kern_matmul_q_avx512(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx,
                          int n_tok, float *Y, size_t ldy);
void kern_matmul_q4_qact_avx512(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                                float *Y, size_t ldy);
void kern_matmul_q4_qact_avx512_vnni(const cllm_qweight *w, int n0, int n1, const void *A,
                                     int n_tok, float *Y, size_t ldy);
void kern_matmul_q2_qact_avx512(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                                float *Y, size_t ldy);
void kern_matmul_q2_qact_avx512_vnni(const cllm_qweight *w, int n0, int n1, const void *A,
                                     int n_tok, float *Y, size_t ldy);
void kern_gdn_step_avx512(float *S, const float *q, const float *k, const float *v,
                          const float *decay, const float *beta, size_t ld, float *o, size_t ldo,
                          int T, float *tmp, int dk, int dv);
void kern_gdn_step_bf16_avx512(uint16_t *S, const float *q, const float *k, const float *v,
                               const float *decay, const float *beta, size_t ld, float *o,
                               size_t ldo, int T, float *tmp, int dk, int dv);
/* kernels/x86/matmul_q16_avx512.c: the act_bits 16 path on kern_qact16_prep_avx2's layout */
void kern_matmul_q_qact16_avx512(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                                 float *Y, size_t ldy);
void kern_matmul_q_qact16_avx512_vnni(const cllm_qweight *w, int n0, int n1, const void *A,
                                      int n_tok, float *Y, size_t ldy);
#endif

#if defined(__aarch64__)
#define KERN_HAVE_NEON 1
/* kernels/arm/: baseline Advanced SIMD, except *_dot (needs the dot-product extension). */
void kern_matmul_f32_neon(const void *W, size_t ldw, int n_rows, const float *X, size_t ldx,
                          int n_tok, int K, float *Y, size_t ldy);
void kern_matmul_f16_neon(const void *W, size_t ldw, int n_rows, const float *X, size_t ldx,
                          int n_tok, int K, float *Y, size_t ldy);
void kern_matmul_bf16_neon(const void *W, size_t ldw, int n_rows, const float *X, size_t ldx,
                           int n_tok, int K, float *Y, size_t ldy);
void kern_gdn_step_neon(float *S, const float *q, const float *k, const float *v,
                        const float *decay, const float *beta, size_t ld, float *o, size_t ldo,
                        int T, float *tmp, int dk, int dv);
void kern_gdn_step_bf16_neon(uint16_t *S, const float *q, const float *k, const float *v,
                             const float *decay, const float *beta, size_t ld, float *o, size_t ldo,
                             int T, float *tmp, int dk, int dv);
void kern_gdn_chunk_neon(float *S, const float *q, const float *k, size_t ldqk, const float *v,
                         size_t ldv, const float *g, const float *beta, float *o, size_t ldo, int T,
                         int dk, int dv, float *work);
void kern_matmul_q_neon(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx,
                        int n_tok, float *Y, size_t ldy);
/* Activation prep shared by both NEON W4A8 variants (the x86 tiers' even/odd code layout). */
void kern_qact_prep_neon(const float *X, size_t ldx, int n_tok, int K, int group, int act_bits,
                         void *A);
void kern_matmul_q4_qact_neon(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                              float *Y, size_t ldy);
void kern_matmul_q4_qact_neon_dot(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                                  float *Y, size_t ldy);
void kern_matmul_q2_qact_neon(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                              float *Y, size_t ldy);
void kern_matmul_q2_qact_neon_dot(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                                  float *Y, size_t ldy);
/* kernels/arm/matmul_q16_neon.c: the act_bits 16 integer path (both NEON tables; the ref's
 * activation layout) */
void kern_qact16_prep_neon(const float *X, size_t ldx, int n_tok, int K, int ag, int bits, void *A);
void kern_matmul_q_qact16_neon(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                               float *Y, size_t ldy);
#endif

/* ggml block-format matmul (matmul_kq_ref.c): the parts every tier shares. */
typedef struct kern_kq_work {
    int8_t *c;      /* a decoded row's codes [K] */
    float *ws, *wm; /* its unit scales and mins [K/16] */
    char *tok;      /* prepared tokens, tok_bytes apart (kern_kq_prep) */
    size_t tok_bytes;
} kern_kq_work;
bool kern_kq_has_min(int type);
int kern_kq_block(int type);
/* Q4_K / Q5_K block b's 16 unit scales and mins, d and dmin its fp16 scales as floats (each tier
 * converts them its own way: the conversion is exact). Inline: the SIMD tiers call it per block
 * inside their row loop. */
static inline void kern_kq_k45_scales(const uint8_t *b, float d, float dmin, float *ws, float *wm) {
    const uint8_t *q = b + 4;
    for (int j = 0; j < 8; j++) {
        int s, m;
        if (j < 4) {
            s = q[j] & 63;
            m = q[j + 4] & 63;
        } else {
            s = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
            m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        }
        ws[2 * j] = ws[2 * j + 1] = d * (float)s;
        wm[2 * j] = wm[2 * j + 1] = dmin * (float)m;
    }
}
void kern_kq_decode_row(const cllm_kqweight *w, int n, int8_t *c, float *ws, float *wm);
/* The panel form's geometry (kernels/matmul_kq_panel.c): byte offsets inside one panel. */
typedef struct kern_kq_geo_t {
    int cw, G, U; /* code bits (4 / 6 / 8), units per scale code, units per row */
    int dsh;      /* unit u's block scales: entry u >> dsh (4; 3 with CLLM_KQ_D128) */
    bool min;
    size_t unit_bytes, sc, mn, d, dm, bytes;
} kern_kq_geo_t;
bool kern_kq_geo(int type, int K, kern_kq_geo_t *g);
/* Unit u's place in a panel's code stream: lane class u % 8 first, then u / 8. */
static inline int kern_kq_visit(int U, int u) {
    return (u % 8) * (U / 8) + u / 8;
}
static inline size_t kern_kq_block_bytes(int type) {
    switch (type & ~(CLLM_KQ_PANEL | CLLM_KQ_D128)) {
    case CLLM_KQ_Q4_1:
        return 20;
    case CLLM_KQ_Q5_1:
        return 24;
    case CLLM_KQ_Q4_K:
        return 144;
    case CLLM_KQ_Q5_K:
        return 176;
    case CLLM_KQ_Q6_K:
        return 210;
    case CLLM_KQ_IQ4_XS:
        return 136;
    default:
        return 0;
    }
}
/* Row n of a panel-form matrix as kern_kq_decode_row gives it. */
void kern_kq_panel_row(const cllm_kqweight *w, int n, int8_t *c, float *ws, float *wm);
/* This thread's scratch for a call of n_tok tokens; -1 when it cannot grow. */
int kern_kq_scratch(const cllm_kqweight *w, int n_tok, kern_kq_work *k);
/* The tokens the kernel reads: A when given, else X prepared into k's scratch. */
const char *kern_kq_tokens(const cllm_kqweight *w, const float *X, size_t ldx, const void *A,
                           int n_tok, kern_kq_work *k);
static inline float kern_kq_sum8(const float *L) {
    return ((L[0] + L[1]) + (L[2] + L[3])) + ((L[4] + L[5]) + (L[6] + L[7]));
}
void kern_matmul_kq_ref(const cllm_kqweight *w, int n0, int n1, const float *X, size_t ldx,
                        const void *A, int n_tok, float *Y, size_t ldy, bool act_f32);
void kern_matmul_kq_avx2(const cllm_kqweight *w, int n0, int n1, const float *X, size_t ldx,
                         const void *A, int n_tok, float *Y, size_t ldy, bool act_f32);
void kern_matmul_kq_avx512(const cllm_kqweight *w, int n0, int n1, const float *X, size_t ldx,
                           const void *A, int n_tok, float *Y, size_t ldy, bool act_f32);
void kern_matmul_kq_avx512_vnni(const cllm_kqweight *w, int n0, int n1, const float *X, size_t ldx,
                                const void *A, int n_tok, float *Y, size_t ldy, bool act_f32);
/* The act_f32 form (kernels.h), the same in every tier. */
void kern_matmul_kq_f32(const cllm_kqweight *w, int n0, int n1, const float *X, size_t ldx,
                        int n_tok, float *Y, size_t ldy);

#endif
