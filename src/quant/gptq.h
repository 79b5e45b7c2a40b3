/* GPTQ (Frantar et al. 2022): per-Linear Hessians H = X^T X from calibration activations,
 * then column-by-column quantization with error feedback through the Cholesky factor of H^-1
 * (lazy batch updates: blocks of 128 columns, the rest of W updated by one GEMM per block).
 * Calibration runs the 16-bit model on calibration tokens with the forward's calibration hook on
 * every matmul (model/forward.h: cllm_fwd_hooks), so routed experts see exactly the tokens routed
 * to them. Hessians are held
 * for one group of layers at a time (see gptq.c), so memory stays within a budget. */
#ifndef CLLM_QUANT_GPTQ_H
#define CLLM_QUANT_GPTQ_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "model/forward.h"
#include "base/threadpool.h"
#include "quant/quant.h"

typedef struct cllm_gptq cllm_gptq;

typedef struct cllm_gptq_opts {
    const char *calib; /* token ids file ("1 2 3" / "1,2,3") */
    int samples, seq_len;
    int min_tokens; /* Linears that saw fewer calibration tokens fall back to RTN */
    double damp;
    int threads;
    FILE *progress;    /* calibration progress (stderr; NULL = silent) */
    bool tty;          /* progress is a terminal: redrawn with \r; else whole lines */
    cllm_fwd_opts fwd; /* how the calibration forward runs (zeroed: defaults) */
} cllm_gptq_opts;

/* Opens the 16-bit model and runs the calibration tokens once, counting the tokens each Linear
 * sees (no Hessian is held yet). */
cllm_status cllm_gptq_calibrate(const char *model_dir, const cllm_gptq_opts *o, cllm_gptq **out,
                                cllm_error *err);
/* Bytes of the Hessian the Linear (source tensor `src_name`, element offset `off`: fused experts
 * are slices) will need: 0 when it falls back to RTN or shares its input with a Linear already
 * counted under the same tag (q/k/v, an expert's gate/up). */
uint64_t cllm_gptq_need(cllm_gptq *g, const char *src_name, uint64_t off, int K, int tag);
/* Marks the Linear for the next pass. */
void cllm_gptq_mark(cllm_gptq *g, const char *src_name, uint64_t off, int K);
/* Runs the calibration tokens through the 16-bit model again, accumulating H = sum x x^T only
 * for the marked Linears (lazily allocated). The pass stops after the last marked layer and
 * starts from the residual stream the previous pass saved when that is not past the first
 * marked layer; the result is the same as a full run. */
cllm_status cllm_gptq_pass(cllm_gptq *g, cllm_error *err);
/* Frees every Hessian and clears the marks. */
void cllm_gptq_release(cllm_gptq *g);
/* H [K][K] of a marked Linear after its pass (lower triangle only: the upper is not filled),
 * NULL when it saw fewer than min_tokens tokens (RTN fallback; counted). *n_tok = tokens seen. */
const float *cllm_gptq_hessian(cllm_gptq *g, const char *src_name, uint64_t off, int K, int *n_tok);
/* One-line fallback report (", N experts with < M tokens fell back to RTN"). */
const char *cllm_gptq_summary(cllm_gptq *g);
void cllm_gptq_free(cllm_gptq *g);

/* GPTQ on W [N][K] (modified in place) with Hessian H [K][K] (lower triangle read), symmetric,
 * groups of q->group (scales from the error-updated weights of each group, as the reference
 * implementation does without act-order). Serial. */
cllm_status cllm_gptq_quantize(float *W, const float *H, double damp, cllm_qbuf *q,
                               cllm_error *err);
/* The same on a thread pool (NULL = serial); the bytes do not depend on the thread count. */
cllm_status cllm_gptq_quantize_pool(float *W, const float *H, double damp, cllm_qbuf *q,
                                    cllm_pool *pool, cllm_error *err);
/* The two steps, exposed for tests. cllm_gptq_factor writes U [K][K], upper triangular, with
 * (H + damp * mean(diag H))^-1 = U^T U (dead inputs, diag 0, get 1 before damping): the upper
 * Cholesky factor of the inverse Hessian that GPTQ walks. cllm_gptq_apply quantizes W into q
 * with that factor (lazy batch updates, blocks of 128 columns rounded to whole groups). */
cllm_status cllm_gptq_factor(const float *H, int K, double damp, float *U, cllm_pool *pool,
                             cllm_error *err);
cllm_status cllm_gptq_apply(float *W, const float *H, const float *U, cllm_qbuf *q, cllm_pool *pool,
                            cllm_error *err);
/* The same, reusing the factor of H^-1 when H is the Hessian of the previous call (Linears on
 * one input: q/k/v, an expert's gate/up), valid until cllm_gptq_release. */
cllm_status cllm_gptq_quantize_with(cllm_gptq *g, float *W, const float *H, double damp,
                                    cllm_qbuf *q, cllm_error *err);

#endif
