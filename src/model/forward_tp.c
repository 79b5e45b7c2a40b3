/* Tensor-parallel hooks of the forward pass (model/weights_tp.c made the rank's model narrower).
 *
 * Every rank runs the whole layer loop on the same tokens; a block (attention / GDN / MoE /
 * dense MLP) of a rank produces a partial sum of the block's output over its heads or
 * intermediate rows. The layer files add their output into c->x; around each block the loop
 * points c->x at a zeroed accumulator instead (fwd_tp_begin), so the block writes exactly its
 * partial output there (0 + y = y), then fwd_tp_end all-reduces it (rank order, dist.h) and adds
 * it to the residual stream. The layer files need no change and a one-process run takes none of
 * this. lm_head rows are split by vocabulary: each rank computes its rows and the whole logits
 * row is gathered on every rank (so every rank's sampler sees the same row and makes the same
 * choice; the per-rank top-k reduction is left for later). */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "dist/dist.h"
#include "model/fwd_int.h"

static cllm_status grow_f(float **p, size_t *cap, size_t n) {
    if (n <= *cap) return CLLM_OK;
    cllm_free_aligned(*p);
    *p = cllm_alloc_aligned(n * sizeof(float));
    *cap = *p ? n : 0;
    return *p ? CLLM_OK : CLLM_ENOMEM;
}

cllm_status fwd_tp_begin(cllm_fwd_ctx *c, int T, float **x_res) {
    size_t n = (size_t)T * (size_t)c->m->cfg.hidden_size;
    if (grow_f(&c->tp_acc, &c->tp_acc_cap, n)) return CLLM_ENOMEM;
    memset(c->tp_acc, 0, n * sizeof(float));
    *x_res = c->x;
    c->x = c->tp_acc;
    return CLLM_OK;
}

cllm_status fwd_tp_end(cllm_fwd_ctx *c, int T, float *x_res) {
    size_t n = (size_t)T * (size_t)c->m->cfg.hidden_size;
    c->x = x_res;
    if (cllm_dist_allreduce_sum(c->tp_acc, n) != CLLM_OK) return CLLM_EIO;
    for (size_t i = 0; i < n; i++) x_res[i] += c->tp_acc[i];
    return CLLM_OK;
}

cllm_status fwd_tp_lm_head(cllm_fwd_ctx *c, int R, float *logits) {
    const cllm_model *m = c->m;
    int V = m->cfg.vocab_size, N = m->tp_size, H = m->cfg.hidden_size, vmax = 0;
    for (int r = 0; r < N; r++)
        vmax = m->tp_vsplit[2 * r + 1] > vmax ? m->tp_vsplit[2 * r + 1] : vmax;
    size_t mine = (size_t)R * (size_t)vmax; /* every rank sends R rows of vmax (padded) */
    if (grow_f(&c->tp_lg, &c->tp_lg_cap, mine * (size_t)(N + 1))) return CLLM_ENOMEM;
    float *loc = c->tp_lg, *all = c->tp_lg + mine;
    if (fwd_mm_add(c, &m->lm_head, c->xn, (size_t)H, R, loc, (size_t)vmax) != CLLM_OK ||
        fwd_mm_run(c) != CLLM_OK)
        return CLLM_ENOMEM;
    if (cllm_dist_allgather(loc, mine * sizeof(float), all) != CLLM_OK) return CLLM_EIO;
    for (int r = 0; r < N; r++)
        for (int i = 0; i < R; i++)
            memcpy(logits + (size_t)i * V + m->tp_vsplit[2 * r],
                   all + (size_t)r * mine + (size_t)i * vmax,
                   (size_t)m->tp_vsplit[2 * r + 1] * sizeof(float));
    return CLLM_OK;
}

void fwd_tp_free(cllm_fwd_ctx *c) {
    cllm_free_aligned(c->tp_acc);
    cllm_free_aligned(c->tp_lg);
    c->tp_acc = c->tp_lg = NULL;
    c->tp_acc_cap = c->tp_lg_cap = 0;
}

/* Every rank must run the same batch (the all-reduces add up the same tokens): a hash of the
 * batch is compared once per call, so ranks whose drivers diverged (a time-based scheduling
 * decision, a request seen by one rank only) stop with an error instead of mixing tokens. */
cllm_status fwd_tp_check_batch(const cllm_batch *b, cllm_error *err) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int s = 0; s < b->n_seqs; s++) {
        const cllm_seq_batch *q = &b->seqs[s];
        int32_t hdr[3] = {q->n_tokens, q->start_pos, (int32_t)q->logits};
        const unsigned char *p = (const unsigned char *)hdr;
        for (size_t i = 0; i < sizeof(hdr); i++) h = (h ^ p[i]) * 0x100000001b3ull;
        p = (const unsigned char *)q->tokens;
        for (size_t i = 0; i < (size_t)q->n_tokens * sizeof(int32_t); i++)
            h = (h ^ p[i]) * 0x100000001b3ull;
    }
    return cllm_dist_check_same(h, "forward batch (token ids, positions)", err);
}
