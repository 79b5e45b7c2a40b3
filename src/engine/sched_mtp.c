/* MTP drafts for speculative decoding (docs/internals/spec.md). The checkpoint's MTP head reads
 * the target model's final-normed hidden state at position p and the token at p + 1, and predicts
 * the token at p + 2. Each sequence keeps the hidden rows its forwards produced (verified
 * positions only) until the head has read them. A draft first runs the head over those rows,
 * which makes its KV final up to the position before the sequence's last token and whose last
 * row gives the first draft; further drafts chain on the head's own output. Drafts are only
 * proposals that the verify accepts or not, so nothing here can change what is generated: where
 * the head's KV is not exact (rows dropped past s->mtp_keep, prefix-cache hits, a block shared
 * with a sequence that continued differently) only the acceptance can suffer. */
#include <stdlib.h>
#include <string.h>

#include "base/argmax.h"
#include "base/log.h"
#include "base/mem.h"
#include "engine/sched_int.h"

int sched_mtp_vocab_rows(int draft_vocab_size, int vocab_size) {
    int dv = draft_vocab_size > 0 ? draft_vocab_size : CLLM_SPEC_DRAFT_VOCAB_DEFAULT;
    dv = (dv + 63) / 64 * 64; /* whole kernel tiles of lm_head rows; the key is at most 1 << 24 */
    return dv < vocab_size ? dv : 0;
}

cllm_status sched_mtp_init(sched *s, cllm_error *err) {
    if (s->cfg.spec.method != CLLM_SPEC_MTP) return CLLM_OK;
    size_t H = (size_t)s->cfg.hidden_size;
    if (!s->ops.mtp || H < 1)
        return cllm_err_set(err, CLLM_EINVAL,
                            "scheduler: speculative method mtp needs a model with an MTP head");
    s->mtp_step = malloc((size_t)s->cfg.max_num_batched_tokens * H * sizeof(float));
    s->mtp_h = malloc(SPEC_VERIFY_ROWS * H * sizeof(float));
    size_t share = SPEC_MTP_BYTES / (H * sizeof(float)) / (size_t)s->cfg.max_num_seqs;
    s->mtp_keep = share > SPEC_MTP_ROWS       ? SPEC_MTP_ROWS
                  : share < SPEC_MTP_ROWS_MIN ? SPEC_MTP_ROWS_MIN
                                              : (int)share;
    s->mtp_vocab = sched_mtp_vocab_rows(s->cfg.spec.draft_vocab_size, s->cfg.vocab_size);
    if (s->mtp_vocab)
        LOG_INFO("speculative mtp: drafts over token ids below %d of %d (draft_vocab_size%s)",
                 s->mtp_vocab, s->cfg.vocab_size,
                 s->cfg.spec.draft_vocab_size > 0 ? "" : ", the default");
    if (!s->mtp_step || !s->mtp_h)
        return cllm_err_set(err, CLLM_ENOMEM, "scheduler: out of memory (MTP rows)");
    return CLLM_OK;
}

void sched_mtp_free(sched *s) {
    free(s->mtp_step);
    free(s->mtp_h);
    free(s->mtp_rope);
    s->mtp_rope = NULL;
    s->cap_mtp_rope = 0;
    s->mtp_step = s->mtp_h = NULL;
}

void sched_mtp_bind(sched *s) {
    if (!s->mtp_step) return;
    size_t H = (size_t)s->cfg.hidden_size, off = 0, cap = (size_t)s->cfg.max_num_batched_tokens;
    for (int i = 0; i < s->n_batch; i++) {
        cllm_seq_batch *b = &s->bseq[i];
        b->hidden_out = NULL;
        /* an embedding request ends with its vector; a step over the budget (none is planned)
         * leaves its rows out, which only restarts that sequence's head at the gap */
        if (b->logits == CLLM_LOGITS_HIDDEN || off + (size_t)b->n_tokens > cap) continue;
        b->hidden_out = s->mtp_step + off * H;
        off += (size_t)b->n_tokens;
    }
}

void sched_mtp_restart(eng_seq *e, int pos) {
    e->mtp_pos = pos;
    e->mtp_n = 0;
}

void sched_mtp_take(sched *s, eng_seq *e, const cllm_seq_batch *b) {
    if (!s->mtp_step) return;
    size_t H = (size_t)s->cfg.hidden_size;
    int p = b->start_pos, n = b->n_tokens;
    if (!b->hidden_out) {
        sched_mtp_restart(e, p + n);
        return;
    }
    const float *src = b->hidden_out;
    if (p < e->mtp_pos) { /* positions the head has read: a replay after a rollback, same bits */
        int skip = e->mtp_pos - p;
        if (skip >= n) return;
        src += (size_t)skip * H;
        p += skip;
        n -= skip;
    }
    if (p > e->mtp_pos + e->mtp_n)
        sched_mtp_restart(e, p); /* a gap: the head resumes here */
    else
        e->mtp_n = p - e->mtp_pos; /* rows from p on are replaced */
    int over = e->mtp_n + n - s->mtp_keep;
    if (over > 0) { /* the oldest rows go; their MTP KV stays as it is */
        if (over >= e->mtp_n) {
            int d = over - e->mtp_n;
            src += (size_t)d * H;
            p += d;
            n -= d;
            sched_mtp_restart(e, p);
        } else {
            memmove(e->mtp_hid, e->mtp_hid + (size_t)over * H,
                    (size_t)(e->mtp_n - over) * H * sizeof(float));
            e->mtp_pos += over;
            e->mtp_n -= over;
        }
    }
    if (sched_grow((void **)&e->mtp_hid, &e->mtp_cap, e->mtp_n + n, H * sizeof(float))) {
        sched_mtp_restart(e, p + n); /* out of memory: no drafts until rows fit again */
        return;
    }
    memcpy(e->mtp_hid + (size_t)e->mtp_n * H, src, (size_t)n * H * sizeof(float));
    e->mtp_n += n;
}

void sched_mtp_keep(eng_seq *e, int end) {
    if (e->mtp_pos + e->mtp_n > end) e->mtp_n = end > e->mtp_pos ? end - e->mtp_pos : 0;
}

void sched_mtp_fork(sched *s, eng_seq *c, const eng_seq *p) {
    sched_mtp_restart(c, p->mtp_pos + p->mtp_n);
    if (!s->mtp_step || p->mtp_n == 0) return;
    size_t H = (size_t)s->cfg.hidden_size;
    if (sched_grow((void **)&c->mtp_hid, &c->mtp_cap, p->mtp_n, H * sizeof(float))) return;
    memcpy(c->mtp_hid, p->mtp_hid, (size_t)p->mtp_n * H * sizeof(float));
    c->mtp_pos = p->mtp_pos;
    c->mtp_n = p->mtp_n;
}

bool sched_mtp_ready(const eng_seq *e) {
    int last = e->n_tokens - 2; /* the head's row for the last token's position is the draft's */
    return e->mtp_n > 0 && e->mtp_pos <= last && e->mtp_pos + e->mtp_n > last;
}

static bool mtp_call(sched *s, const cllm_mtp_seq *q, int n) {
    cllm_error err = {0};
    if (s->ops.mtp(s->mctx, q, n, s->logits, &err) == CLLM_OK) return true;
    LOG_WARN("speculative decoding: the MTP head failed (%s); drafting stays off", err.msg);
    s->mtp_failed = true;
    return false;
}

/* The step's verify rows of MTP sequences, in batch order, with their draft counts. */
static int queued(sched *s, eng_seq **rows, int *nd) {
    int R = 0;
    for (int i = 0; i < s->n_batch; i++)
        if (s->bent[i].n_draft > 0) {
            rows[R] = s->bent[i].seq;
            nd[R++] = s->bent[i].n_draft;
        }
    return R;
}

/* One sequence of a head call: n rows from position pos reading hidden (written in place) and
 * the tokens after them; the last row's best-1 logits over the draft vocabulary. */
static cllm_mtp_seq head_rows(const sched *s, const eng_seq *e, float *hidden,
                              const int32_t *tokens, int n, int pos) {
    return (cllm_mtp_seq){.hidden = hidden,
                          .tokens = tokens,
                          .n_tokens = n,
                          .start_pos = pos,
                          .block_table = e->table,
                          .n_table = e->n_table,
                          .logits = CLLM_LOGITS_LAST,
                          .logits_topk = 1,
                          .logits_scale = 1.0f,
                          .hidden_out = hidden,
                          .vocab_rows = s->mtp_vocab};
}

void sched_mtp_draft_all(sched *s) {
    if (!s->mtp_step || s->mtp_failed) return;
    eng_seq *rows[SPEC_VERIFY_ROWS];
    int nd[SPEC_VERIFY_ROWS], R = queued(s, rows, nd), K = 0, most = 0;
    if (R == 0) return;
    double t0 = cllm_time_s();
    size_t H = (size_t)s->cfg.hidden_size, V = (size_t)s->cfg.vocab_size;
    /* a draft vocabulary's rows end in -inf past it (forward.h vocab_rows): not scanned */
    int dv = s->mtp_vocab > 0 ? s->mtp_vocab : (int)V;
    cllm_mtp_seq q[SPEC_VERIFY_ROWS];
    /* every row's unread hidden rows, positions mtp_pos .. N - 2 with the tokens after them;
     * the last one's logits predict position N. Output in place: the rows are spent after. */
    for (int r = 0; r < R; r++) {
        eng_seq *e = rows[r];
        q[r] = head_rows(s, e, e->mtp_hid, e->tokens + e->mtp_pos + 1, e->n_tokens - 1 - e->mtp_pos,
                         e->mtp_pos);
        q[r].kv_rows = q[r].n_tokens - 1; /* only the last row's output is read */
        if (nd[r] > K) K = nd[r];
        if (q[r].n_tokens > most) most = q[r].n_tokens;
    }
    /* after an image the target's rotary positions are not the cache positions: the head's
     * rows take the target's (sched_img_mtp_pos); without room for them, the cache positions
     * (only the acceptance can suffer) */
    int pr = 0;
    for (int r = 0; r < R; r++)
        pr += rows[r]->req->n_imgs && q[r].start_pos < rows[r]->req->n_prompt ? q[r].n_tokens : 0;
    bool room = pr == 0 || sched_grow((void **)&s->mtp_rope, &s->cap_mtp_rope, 3 * pr,
                                      sizeof(int32_t)) == CLLM_OK;
    for (int r = 0, off = 0; room && r < R; r++)
        off += 3 * sched_img_mtp_pos(rows[r], &q[r], s->mtp_rope + off);
    if (!mtp_call(s, q, R)) return;
    /* a catch-up over more rows than a verify yields (a prompt, or the steps a row spent not
     * drafting) is prefill work: charged to this step's drafts it would make drafting look dear
     * for good (sched_spec.c learns the step time by step size; a prompt of 16 charged to the
     * first verify kept a bench's engine from drafting at acceptance 0.5) */
    int passes = K; /* timed below: the first pass (unless reset here) and the chained ones */
    if (most > K + 1) {
        t0 = cllm_time_s();
        passes = K - 1;
    }
    for (int r = 0; r < R; r++) {
        eng_seq *e = rows[r];
        memcpy(s->mtp_h + r * H, e->mtp_hid + (size_t)(q[r].n_tokens - 1) * H, H * sizeof(float));
        e->draft[0] = cllm_argmax(s->logits + r * V, dv);
        sched_mtp_restart(e, e->n_tokens - 1);
    }
    /* draft d of a row sits at position N - 2 + d, reading the draft before it and the head's
     * own output of the row before; rows out of drafts drop out of the call */
    for (int d = 1; d < K; d++) {
        int n = 0, who[SPEC_VERIFY_ROWS];
        for (int r = 0; r < R; r++) {
            if (nd[r] <= d) continue;
            eng_seq *e = rows[r];
            q[n] = head_rows(s, e, s->mtp_h + r * H, &e->draft[d - 1], 1, e->n_tokens - 2 + d);
            sched_img_mtp_pos(e, &q[n], NULL); /* past the prompt: a delta at most */
            who[n++] = r;
        }
        if (!mtp_call(s, q, n)) break;
        for (int i = 0; i < n; i++)
            rows[who[i]]->draft[d] = cllm_argmax(s->logits + (size_t)i * V, dv);
    }
    /* the verify rows read the drafts after each sequence's tokens */
    for (int r = 0; r < R; r++)
        memcpy(rows[r]->tokens + rows[r]->n_tokens, rows[r]->draft,
               (size_t)nd[r] * sizeof(int32_t));
    /* the head's passes are part of what a draft costs (sched_spec.c's choice of k) */
    s->step_draft_s += cllm_time_s() - t0;
    s->step_draft_passes += passes;
}
