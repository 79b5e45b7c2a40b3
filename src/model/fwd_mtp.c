/* cllm_forward_mtp(): the checkpoint's multi-token-prediction head (docs/model.md §2.7) over a
 * ragged batch; the speculative decoder's MTP drafter calls it (engine/), after cllm_forward
 * gave it the target's final-normed hidden states (cllm_seq_batch.hidden_out).
 *
 * Per row (a sequence's position p): x = mtp.fc(concat(pre_fc_norm_embedding(embed(t_{p+1})),
 * pre_fc_norm_hidden(h_p))), embedding first as vLLM's qwen3_5_mtp.py concatenates; then the MTP
 * decoder layer(s) at position p through the main forward's own layer code (forward.c
 * fwd_run_layer: gated attention over the pool's MTP layer slot, MoE with the shared expert);
 * then mtp.norm and the shared lm_head (forward.c fwd_head, so the screened lm_head and the
 * LAST/ALL/NONE row selection are the main forward's). */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "model/fwd_int.h"

size_t cllm_mtp_logit_rows(const cllm_mtp_seq *seqs, int n_seqs) {
    size_t n = 0;
    for (int s = 0; s < n_seqs; s++) {
        const cllm_mtp_seq *q = &seqs[s];
        n += q->logits == CLLM_LOGITS_ALL    ? (size_t)(q->n_tokens > 0 ? q->n_tokens : 0)
             : q->logits == CLLM_LOGITS_LAST ? (size_t)(q->logits_n > 1 ? q->logits_n : 1)
                                             : 0;
    }
    return n;
}

typedef struct mtp_job {
    cllm_fwd_ctx *c;
    const cllm_mtp_seq *seqs;
} mtp_job;

/* Row t of the fc input: [pre_fc_norm_embedding(embed(token)) | pre_fc_norm_hidden(hidden)]. */
static void input_worker(void *vj, size_t b, size_t e, int tid) {
    mtp_job *j = vj;
    cllm_fwd_ctx *c = j->c;
    const cllm_model *m = c->m;
    int H = m->cfg.hidden_size;
    float eps = (float)m->cfg.rms_norm_eps;
    for (size_t t = b; t < e; t++) {
        int q = c->tok_seq[t], i = (int)t - c->seq_tok0[q];
        const cllm_mtp_seq *sq = &j->seqs[q];
        float *row = c->mtp_in + t * 2 * (size_t)H;
        fwd_embed_row(&m->embed, sq->tokens[i], row + H); /* the hidden half is written last */
        fwd_rmsnorm(row, row + H, m->mtp_pre_emb, H, eps);
        fwd_rmsnorm(row + H, sq->hidden + (size_t)i * H, m->mtp_pre_hidden, H, eps);
    }
}

static cllm_status check_call(const cllm_model *m, const cllm_fwd_ctx *c, const cllm_mtp_seq *seqs,
                              int n_seqs, const cllm_kv_pool *kv, cllm_error *err) {
    if (!m->has_mtp)
        return cllm_err_set(err, CLLM_EINVAL,
                            "forward_mtp: the model has no MTP head (no mtp.* tensors, or "
                            "mtp_num_hidden_layers 0 in its config)");
    if (m->tp_size > 1)
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "forward_mtp: the MTP head does not run under tensor parallel "
                            "(tensor-parallel-size %d)",
                            m->tp_size);
    if (m->n_mtp != 1) /* vLLM runs layer (draft step % N) per step, not N stacked layers */
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "forward_mtp: mtp_num_hidden_layers %d: only 1 is supported", m->n_mtp);
    if (c->hooks.on_matmul || c->hooks.stop_layer > 0 || c->hooks.resid)
        return cllm_err_set(err, CLLM_EINVAL, "forward_mtp: calibration hooks are set");
    if (!kv || kv->n_layers != m->n_attn + m->n_mtp)
        return cllm_err_set(err, CLLM_EINVAL,
                            "forward_mtp: the kv pool has %d layers, this model's MTP pool has %d "
                            "(cllm_kv_pool_init_mtp)",
                            kv ? kv->n_layers : 0, m->n_attn + m->n_mtp);
    if (n_seqs < 1 || !seqs) return cllm_err_set(err, CLLM_EINVAL, "forward_mtp: empty batch");
    for (int s = 0; s < n_seqs; s++) {
        if (!seqs[s].hidden)
            return cllm_err_set(err, CLLM_EINVAL, "forward_mtp: sequence %d: no hidden states", s);
        const cllm_mtp_seq *q = &seqs[s];
        int out = q->n_tokens - q->kv_rows; /* rows that run the whole head */
        if (q->kv_rows < 0 || (q->kv_rows > 0 && out < 1) ||
            (q->kv_rows > 0 && q->logits == CLLM_LOGITS_ALL) ||
            (q->kv_rows > 0 && q->logits == CLLM_LOGITS_LAST && q->logits_n > out))
            return cllm_err_set(err, CLLM_EINVAL,
                                "forward_mtp: sequence %d: kv_rows %d of %d rows (want 0, or fewer "
                                "than the rows, none of them asked for logits)",
                                s, q->kv_rows, q->n_tokens);
        if (seqs[s].vocab_rows != seqs[0].vocab_rows || seqs[s].vocab_rows < 0 ||
            seqs[s].vocab_rows > m->cfg.vocab_size)
            return cllm_err_set(err, CLLM_EINVAL,
                                "forward_mtp: sequence %d: vocab_rows %d (want 0..%d, the same in "
                                "every sequence of a call)",
                                s, seqs[s].vocab_rows, m->cfg.vocab_size);
    }
    return CLLM_OK;
}

/* The rows as a batch of the main forward's kind (its checks, attention's block tables and
 * fwd_head's row selection read it), validated, and the context made ready for them. */
static cllm_status mtp_batch(cllm_fwd_ctx *c, const cllm_mtp_seq *seqs, int n_seqs,
                             cllm_kv_pool *kv, int *T, cllm_error *err) {
    const cllm_model *m = c->m;
    cllm_status s;
    if (n_seqs > c->cap_mtp_sb) {
        cllm_seq_batch *nb = realloc(c->mtp_sb, (size_t)n_seqs * sizeof(*nb));
        if (!nb) return cllm_err_set(err, CLLM_ENOMEM, "forward_mtp: out of memory");
        c->mtp_sb = nb;
        c->cap_mtp_sb = n_seqs;
    }
    for (int q = 0; q < n_seqs; q++) {
        const cllm_mtp_seq *sq = &seqs[q];
        c->mtp_sb[q] = (cllm_seq_batch){.tokens = sq->tokens,
                                        .n_tokens = sq->n_tokens,
                                        .start_pos = sq->start_pos,
                                        .block_table = sq->block_table,
                                        .n_table = sq->n_table,
                                        .logits = sq->logits,
                                        .logits_topk = sq->logits_topk,
                                        .logits_scale = sq->logits_scale,
                                        .logits_n = sq->logits_n,
                                        .hidden_out = sq->hidden_out,
                                        .mrope_pos = sq->mrope_pos,
                                        .rope_delta = sq->rope_delta};
    }
    c->mtp_b = (cllm_batch){c->mtp_sb, n_seqs}; /* c->batch points at it for the call */
    if ((s = fwd_validate(m, &c->mtp_b, kv, NULL, false, T, err)) != CLLM_OK) return s;
    return fwd_prepare(c, &c->mtp_b, *T, err);
}

/* One pass of the head over the rows; kv_only: up to their K/V in the MTP layer (no output). */
static cllm_status mtp_pass(cllm_fwd_ctx *c, const cllm_mtp_seq *seqs, int n_seqs, cllm_kv_pool *kv,
                            bool kv_only, float *logits, cllm_error *err) {
    const cllm_model *m = c->m;
    const cllm_config *f = &m->cfg;
    int T = 0, H = f->hidden_size;
    cllm_status s = mtp_batch(c, seqs, n_seqs, kv, &T, err);
    if (s != CLLM_OK) return s;
    size_t need = (size_t)T * 2 * (size_t)H;
    if (need > c->cap_mtp_in) {
        cllm_free_aligned(c->mtp_in);
        c->mtp_in = cllm_alloc_aligned(need * sizeof(float));
        c->cap_mtp_in = c->mtp_in ? need : 0;
        if (!c->mtp_in) return cllm_err_set(err, CLLM_ENOMEM, "forward_mtp: out of memory");
    }
    /* CLLM_PROFILE=mtp: these passes, not the main forward's steps; a whole pass is a step
     * (fwd_head counts it), a K/V-only pass's time goes to the next step's */
    c->prof_on = c->prof_mtp;
    if (c->prof_on) cllm_pool_profile(c->pool, 1, NULL, NULL);
    const double tp0 = c->prof_on ? cllm_time_s() : 0.0;
    c->kv = kv;
    c->st = NULL;
    int t = 0;
    for (int q = 0; q < n_seqs; q++) {
        c->seq_tok0[q] = t;
        for (int i = 0; i < seqs[q].n_tokens; i++, t++) {
            c->tok_seq[t] = q;
            c->tok_pos[t] = seqs[q].start_pos + i;
        }
    }
    mtp_job j = {c, seqs};
    cllm_pool_for(c->pool, (size_t)T, input_worker, &j);
    c->layer = f->n_layers;
    c->prof_tag = FWD_P_MTP_FC;
    if (fwd_mm_add(c, &m->mtp_fc, c->mtp_in, 2 * (size_t)H, T, c->x, (size_t)H) != CLLM_OK ||
        fwd_mm_run(c) != CLLM_OK)
        return cllm_err_set(err, CLLM_ENOMEM, "forward_mtp: out of memory");
    fwd_rope_tables(c, T);
    if (kv_only) {
        if (fwd_layer_kv(c, &m->mtp_layers[0], f->n_layers, T) != CLLM_OK)
            return cllm_err_set(err, CLLM_ENOMEM, "forward_mtp: out of memory");
        if (c->prof_on) c->prof_total += cllm_time_s() - tp0;
        return CLLM_OK;
    }
    for (int l = 0; l < m->n_mtp; l++)
        if ((s = fwd_run_layer(c, &m->mtp_layers[l], f->n_layers + l, T, err)) != CLLM_OK) return s;
    return fwd_head(c, m->mtp_norm, T, tp0, seqs[0].vocab_rows, logits, err);
}

cllm_status cllm_forward_mtp(cllm_fwd_ctx *c, const cllm_mtp_seq *seqs, int n_seqs,
                             cllm_kv_pool *kv, float *logits, cllm_error *err) {
    const cllm_model *m = c->m;
    int T = 0, H = m->cfg.hidden_size, nk = 0;
    cllm_status s = check_call(m, c, seqs, n_seqs, kv, err);
    if (s != CLLM_OK) return s;
    for (int q = 0; q < n_seqs; q++) nk += seqs[q].kv_rows > 0;
    if (nk == 0 || m->mtp_layers[0].type != CLLM_LAYER_FULL_ATTN)
        return mtp_pass(c, seqs, n_seqs, kv, false, logits, err);
    /* two passes: the whole call's checks first, so a bad row fails before any K/V is written */
    if ((s = mtp_batch(c, seqs, n_seqs, kv, &T, err)) != CLLM_OK) return s;
    /* K/V-only rows first (their K/V is what a whole pass would write: the same per-row ops on
     * batch-invariant kernels), then the rest reading it: a catch-up of 33 rows ran the head's
     * MoE over all of them (26-46 ms on the quarter shape) for one row's output */
    if (n_seqs > c->cap_mtp_split) {
        cllm_mtp_seq *ns = realloc(c->mtp_split, 2 * (size_t)n_seqs * sizeof(*ns));
        if (!ns) return cllm_err_set(err, CLLM_ENOMEM, "forward_mtp: out of memory");
        c->mtp_split = ns;
        c->cap_mtp_split = n_seqs;
    }
    cllm_mtp_seq *a = c->mtp_split, *b = a + n_seqs;
    int na = 0;
    for (int q = 0; q < n_seqs; q++) {
        const cllm_mtp_seq *sq = &seqs[q];
        int k = sq->kv_rows;
        if (k > 0) {
            a[na] = *sq;
            a[na].n_tokens = k;
            a[na].logits = CLLM_LOGITS_NONE;
            a[na].logits_n = 0;
            a[na].hidden_out = NULL;
            a[na++].kv_rows = 0;
        }
        b[q] = *sq;
        b[q].hidden += (size_t)k * H;
        b[q].tokens += k;
        b[q].n_tokens -= k;
        b[q].start_pos += k;
        if (b[q].hidden_out) b[q].hidden_out += (size_t)k * H;
        if (b[q].mrope_pos) b[q].mrope_pos += 3 * (size_t)k;
        b[q].kv_rows = 0;
    }
    if ((s = mtp_pass(c, a, na, kv, true, NULL, err)) != CLLM_OK) return s;
    return mtp_pass(c, b, n_seqs, kv, false, logits, err);
}
