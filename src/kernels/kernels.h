/* Compute kernels used by the forward pass (model/forward.c and friends), one dispatch table.
 *
 * Tiers: kernels/<family>_ref.c is plain scalar C and the test oracle; kernels/x86/<family>_avx2.c
 * holds whole AVX2+FMA+F16C functions. cllm_kern() returns the table for cllm_cpu_tier(), filled
 * once at first use (CLLM_ISA=ref forces the scalar tier; an AVX-512 CPU uses the AVX2 table).
 *
 * Determinism contract (what batch invariance rests on): in every tier, output element (t, r) of
 * a matmul is computed by the same sequence of floating-point operations whatever n_tok, n_rows,
 * the position of t inside the batch and the tile the element falls in. So a token's result never
 * depends on which other tokens share the call. The tiers differ from each other by rounding only.
 *
 * All functions are thread-safe (no shared state); callers split work across threads. */
#ifndef CLLM_KERNELS_KERNELS_H
#define CLLM_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "model/dtype.h"

/* Y[t*ldy + r] = sum_k W[r*ldw + k] * X[t*ldx + k]   for r < n_rows, t < n_tok, k < K.
 * W is F32, F16 or BF16 (the matching entry of cllm_kern_ops.matmul), X and Y fp32, fp32
 * accumulation. Any alignment. Weights are streamed once: each tile of rows is applied to every
 * token before moving on (callers pass ~16-row slices so the slice stays in L1/L2). */
typedef void (*cllm_matmul_fn)(const void *W, size_t ldw, int n_rows, const float *X, size_t ldx,
                               int n_tok, int K, float *Y, size_t ldy);

/* A GPTQ v1 quantized matrix (the official Qwen GPTQ-Int4 layout, see src/quant/quant.h): logical
 * W [N out][K in], stored transposed and packed along K: qweight int32 [K*bits/32][N] (32/bits
 * values per word, value j of word (k8, n) is k = k8*32/bits + j, bits j*bits..), qzeros int32
 * [K/group][N*bits/32] packed along N the same way (stored zero z, effective z + 1), scales fp16
 * [K/group][N]. w[n][k] = scale[k/G][n] * (q - (z + 1)). bits 4 or 8; N % 8 == 0, K % group == 0,
 * group % 8 == 0. act_bits 16 = float activations; 8 or 4 = activations fake-quantized per token
 * and per group of `group` inputs (symmetric, absmax) before the product (W4A8/W4A4 emulation). */
typedef struct cllm_qweight {
    const int32_t *qweight, *qzeros;
    const uint16_t *scales;
    int bits, group, K, N, act_bits;
} cllm_qweight;

/* Y[t*ldy + n] = sum_k w[n][k] * X[t*ldx + k]  for n in [n0, n1) (multiples of 8), t < n_tok.
 * Per element the op sequence is fixed: for each group g in order, gacc = 0, for k in the group
 * in order gacc = fma((float)(q - z), x[k], gacc); then acc = fma(scale, gacc, acc). Both tiers
 * use exactly that sequence (fused multiply-add), so ref and AVX2 agree bitwise. */
typedef void (*cllm_matmul_q_fn)(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx,
                                 int n_tok, float *Y, size_t ldy);

/* One Gated DeltaNet recurrence step for one value head (spec §2.4), state S [dk][dv] fp32 in
 * place: S *= decay; u = S^T k; d = (v - u) * beta; S += k d^T; o = S^T q.
 * q, k [dk] (already l2-normalised, q scaled), v, o [dv]; tmp [dv] scratch. */
typedef void (*cllm_gdn_step_fn)(float *S, const float *q, const float *k, const float *v,
                                 float decay, float beta, float *o, float *tmp, int dk, int dv);

typedef struct cllm_kern_ops {
    const char *name; /* "ref" | "avx2" */
    cllm_matmul_fn matmul_f32, matmul_f16, matmul_bf16;
    cllm_gdn_step_fn gdn_step;
    /* sum_i a[i]*b[i], fixed order for a given n. */
    float (*dot)(const float *a, const float *b, int n);
    /* y[i] = y[i]*s + a*x[i] (s = 1 skips nothing: always the same ops for a given n). */
    void (*scale_axpy)(float *y, float s, float a, const float *x, int n);
    /* GPTQ int4/int8 weights x fp32 activations (unpacking fused into the dot product). */
    cllm_matmul_q_fn matmul_q;
} cllm_kern_ops;

/* The table for the current tier (thread-safe; first call fills it). */
const cllm_kern_ops *cllm_kern(void);
/* Specific tiers (for tests). cllm_kern_avx2() returns NULL when the CPU or build lacks AVX2. */
const cllm_kern_ops *cllm_kern_ref(void);
const cllm_kern_ops *cllm_kern_avx2(void);
/* The matmul entry for a weight dtype; NULL for dtypes without a kernel. */
cllm_matmul_fn cllm_kern_matmul(const cllm_kern_ops *k, cllm_dtype dt);

#endif
