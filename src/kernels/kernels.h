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
} cllm_kern_ops;

/* The table for the current tier (thread-safe; first call fills it). */
const cllm_kern_ops *cllm_kern(void);
/* Specific tiers (for tests). cllm_kern_avx2() returns NULL when the CPU or build lacks AVX2. */
const cllm_kern_ops *cllm_kern_ref(void);
const cllm_kern_ops *cllm_kern_avx2(void);
/* The matmul entry for a weight dtype; NULL for dtypes without a kernel. */
cllm_matmul_fn cllm_kern_matmul(const cllm_kern_ops *k, cllm_dtype dt);

#endif
