/* The forward pass's calibration hooks (model/forward.h: cllm_fwd_hooks): what the quantizer
 * may see of a forward call. fwd_mm_add reports every matmul before queueing it, named by the
 * checkpoint tensor its weight was bound from (weights.c records it), and the layer loop in
 * forward.c honours stop_layer and the residual store. */
#include "model/fwd_int.h"

void cllm_fwd_ctx_set_hooks(cllm_fwd_ctx *c, const cllm_fwd_hooks *h) {
    if (h)
        c->hooks = *h;
    else
        c->hooks = (cllm_fwd_hooks){0};
}

void fwd_hook_matmul(cllm_fwd_ctx *c, const fwd_wt *w, const float *X, size_t ldx, int n_tok) {
    /* the job queued just before this one, if it is still queued (no run in between), and
     * whether it reads the same input */
    const fwd_mm *prev = c->n_jobs ? &c->jobs[c->n_jobs - 1] : NULL;
    bool shares = prev && prev->X == X && prev->ldx == ldx && prev->n_tok == n_tok &&
                  prev->w->cols == w->cols;
    cllm_fwd_matmul mm = {c->layer,       w->src, w->src_off, w->rows, w->cols,
                          w->q.bits != 0, X,      ldx,        n_tok,   shares};
    c->hooks.on_matmul(c->hooks.user, &mm);
}
