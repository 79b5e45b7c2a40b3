/* Gated DeltaNet inputs kept from a forward call, and cllm_forward_state_commit (forward.h): a
 * speculative verify row whose drafts were partly rejected moves its state slot past the
 * accepted positions by running only the recurrence and the conv ring over the inputs the verify
 * computed for them, instead of recomputing those positions in the next forward.
 *
 * Per saved token and GDN layer one row: the recurrence's inputs as the verify fed them (q, k, v
 * after the conv, SiLU and l2norm; beta and decay), then the token's raw conv input (what the
 * conv ring keeps). The recurrence kernel's state after n tokens does not depend on the tokens
 * after them (kernels.h gdn_step), so the slot ends bitwise where a call of those n tokens alone
 * would leave it. Rows are laid out layer-major so one layer's tokens are rows of one stride, as
 * the kernel reads them from the projection buffer. */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "model/fwd_int.h"

/* floats of one saved row: q k v (conv_ch), beta and decay (2 Hv), the raw conv input (conv_ch) */
static size_t row_len(const cllm_model *m) {
    return 2 * (size_t)m->conv_ch + 2 * (size_t)m->cfg.lin_n_v_heads;
}

cllm_status fwd_gdn_save_begin(cllm_fwd_ctx *c, const cllm_batch *b) {
    const cllm_model *m = c->m;
    c->gsave_n = 0;
    c->gsave_seqs = 0;
    if (m->n_gdn == 0) return CLLM_OK;
    int n = 0;
    bool any = false;
    for (int q = 0; q < b->n_seqs; q++) any |= b->seqs[q].state_save;
    if (!any) return CLLM_OK;
    if (b->n_seqs > c->cap_gsave_at) {
        free(c->gsave_at);
        c->gsave_at = malloc((size_t)b->n_seqs * 3 * sizeof(int));
        c->cap_gsave_at = c->gsave_at ? b->n_seqs : 0;
        if (!c->gsave_at) return CLLM_ENOMEM;
    }
    /* the call's positions, kept past it (the caller's batch need not be) */
    int *pos = c->gsave_at + b->n_seqs, *len = pos + b->n_seqs;
    for (int q = 0; q < b->n_seqs; q++) {
        const cllm_seq_batch *sq = &b->seqs[q];
        /* a 64-aligned run of 64 positions may go through the chunked form, whose state is
         * not the recurrence's: such rows are not saved (a verify row is far shorter) */
        bool ok = sq->state_save && sq->start_pos > 0 &&
                  (c->gdn_prefill == CLLM_GDN_RECURRENT || sq->n_tokens < CLLM_GDN_CHUNK);
        c->gsave_at[q] = ok ? n : -1;
        pos[q] = sq->start_pos;
        len[q] = sq->n_tokens;
        if (ok) n += sq->n_tokens;
    }
    size_t need = (size_t)n * (size_t)m->n_gdn * row_len(m);
    if (need > c->cap_gsave) {
        cllm_free_aligned(c->gsave);
        c->gsave = cllm_alloc_aligned(need * sizeof(float));
        c->cap_gsave = c->gsave ? need : 0;
        if (!c->gsave) return CLLM_ENOMEM;
    }
    c->gsave_n = n;
    c->gsave_seqs = b->n_seqs;
    return CLLM_OK;
}

/* Row of saved token i of sequence q at GDN layer sub. */
static float *save_row(const cllm_fwd_ctx *c, int sub, int q, int i) {
    return c->gsave +
           ((size_t)sub * (size_t)c->gsave_n + (size_t)(c->gsave_at[q] + i)) * row_len(c->m);
}

void fwd_gdn_save_raw(cllm_fwd_ctx *c, int sub, size_t ldp) {
    if (c->gsave_n == 0) return;
    size_t ch = (size_t)c->m->conv_ch;
    for (int q = 0; q < c->batch->n_seqs; q++) {
        if (c->gsave_at[q] < 0) continue;
        for (int i = 0; i < c->batch->seqs[q].n_tokens; i++)
            memcpy(save_row(c, sub, q, i) + ch + 2 * (size_t)c->m->cfg.lin_n_v_heads,
                   c->proj + (size_t)(c->seq_tok0[q] + i) * ldp, ch * sizeof(float));
    }
}

void fwd_gdn_save_prep(cllm_fwd_ctx *c, int sub, size_t ldp, size_t ba_off) {
    if (c->gsave_n == 0) return;
    size_t ch = (size_t)c->m->conv_ch, hv = (size_t)c->m->cfg.lin_n_v_heads;
    for (int q = 0; q < c->batch->n_seqs; q++) {
        if (c->gsave_at[q] < 0) continue;
        for (int i = 0; i < c->batch->seqs[q].n_tokens; i++) {
            const float *p = c->proj + (size_t)(c->seq_tok0[q] + i) * ldp;
            float *r = save_row(c, sub, q, i);
            memcpy(r, p, ch * sizeof(float));
            memcpy(r + ch, p + ba_off, 2 * hv * sizeof(float));
        }
    }
}

typedef struct commit_job {
    cllm_fwd_ctx *c;
    cllm_state_pool *st;
    int q, n, slot;
} commit_job;

/* One item per (GDN layer, value head): the recurrence over the n saved tokens, in place. */
static void commit_worker(void *vj, size_t b, size_t e, int tid) {
    commit_job *j = vj;
    cllm_fwd_ctx *c = j->c;
    const cllm_config *f = &c->m->cfg;
    int dk = f->lin_k_dim, dv = f->lin_v_dim, Hv = f->lin_n_v_heads, rep = Hv / f->lin_n_k_heads;
    size_t kd = (size_t)f->lin_n_k_heads * dk, ld = row_len(c->m), ch = (size_t)c->m->conv_ch;
    float *tmp = c->thr + (size_t)tid * c->thr_stride, *o = tmp + ((size_t)dv + 7) / 8 * 8;
    for (size_t it = b; it < e; it++) {
        int sub = (int)(it / (size_t)Hv), h = (int)(it % (size_t)Hv), kh = h / rep;
        const float *r = save_row(c, sub, j->q, 0), *ba = r + ch;
        const float *q = r + (size_t)kh * dk, *k = r + kd + (size_t)kh * dk;
        const float *v = r + 2 * kd + (size_t)h * dv;
        /* o: one row rewritten per token (ldo 0), the outputs are not needed */
        fwd_gdn_step(c, j->st, fwd_gdn_state(j->st, j->slot, sub, h), q, k, v, ba + Hv + h, ba + h,
                     ld, o, 0, j->n, tmp);
    }
}

cllm_status cllm_forward_state_commit(cllm_fwd_ctx *c, cllm_state_pool *st, int seq, int n,
                                      int slot, cllm_error *err) {
    const cllm_model *m = c->m;
    if (m->n_gdn == 0 || n == 0) return CLLM_OK;
    const int *pos = c->gsave_at + c->gsave_seqs, *len = pos + c->gsave_seqs;
    if (seq < 0 || seq >= c->gsave_seqs || c->gsave_n == 0 || c->gsave_at[seq] < 0 || n < 0 ||
        n > len[seq])
        return cllm_err_set(err, CLLM_EINVAL,
                            "state commit: sequence %d of the last forward saved no %d tokens", seq,
                            n);
    if (!st || st->n_layers != m->n_gdn || slot < 0 || slot >= st->n_slots)
        return cllm_err_set(err, CLLM_EINVAL, "state commit: slot %d out of range", slot);
    /* the conv ring: row p % k1 holds the raw input at position p, later positions last */
    int k1 = st->conv_k1, ch = st->conv_ch, start = pos[seq];
    size_t raw = (size_t)ch + 2 * (size_t)m->cfg.lin_n_v_heads;
    for (int sub = 0; k1 > 0 && sub < m->n_gdn; sub++) {
        float *ring = fwd_gdn_ring(st, slot, sub);
        for (int i = n > k1 ? n - k1 : 0; i < n; i++)
            memcpy(ring + (size_t)((start + i) % k1) * ch, save_row(c, sub, seq, i) + raw,
                   (size_t)ch * sizeof(float));
    }
    commit_job j = {c, st, seq, n, slot};
    cllm_pool_for(c->pool, (size_t)m->n_gdn * (size_t)m->cfg.lin_n_v_heads, commit_worker, &j);
    return CLLM_OK;
}
