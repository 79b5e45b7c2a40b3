/* GPTQ (Frantar et al. 2022): per-Linear Hessians H = 2 X^T X from calibration activations,
 * then column-by-column quantization with error feedback through the Cholesky factor of H^-1.
 * Calibration runs the 16-bit model on calibration tokens with a capture hook on every matmul
 * (model/forward.h), so routed experts see exactly the tokens routed to them. */
#ifndef CLLM_QUANT_GPTQ_H
#define CLLM_QUANT_GPTQ_H

#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "quant/quant.h"

typedef struct cllm_gptq cllm_gptq;

typedef struct cllm_gptq_opts {
    const char *calib; /* token ids file ("1 2 3" / "1,2,3") */
    int samples, seq_len;
    int min_tokens; /* Linears that saw fewer calibration tokens fall back to RTN */
    double damp;
    int threads;
    FILE *out;
} cllm_gptq_opts;

cllm_status cllm_gptq_calibrate(const char *model_dir, const cllm_gptq_opts *o, cllm_gptq **out,
                                cllm_error *err);
/* H [K][K] for the Linear stored in source tensor `src_name` at element offset `off` (fused
 * experts are slices), NULL when it saw fewer than min_tokens tokens (RTN fallback; counted).
 * *n_tok = tokens seen. */
const float *cllm_gptq_hessian(cllm_gptq *g, const char *src_name, uint64_t off, int K, int *n_tok);
/* One-line fallback report (", N experts with < M tokens fell back to RTN"). */
const char *cllm_gptq_summary(cllm_gptq *g);
void cllm_gptq_free(cllm_gptq *g);

/* GPTQ on W [N][K] (modified in place) with Hessian H [K][K], symmetric, groups of q->group
 * (scales from the error-updated weights of each group, as the reference implementation does
 * without act-order). */
cllm_status cllm_gptq_quantize(float *W, const float *H, double damp, cllm_qbuf *q,
                               cllm_error *err);

#endif
