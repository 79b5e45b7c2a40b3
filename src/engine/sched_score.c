/* Prompt logprobs (vLLM's prompt_logprobs, and echo with logprobs): a scoring request's prefill
 * chunks ask the forward pass for every logits row (CLLM_LOGITS_ALL) instead of the last one, and
 * each row becomes the logprob and rank of the next prompt token plus the row's top N. The rows
 * come from the one prefill the request needs anyway. Called by sched.c (planning and after the
 * forward) and sched_out.c (the event that carries them), on the engine thread.
 *
 * A scoring request never reads the prefix cache (sched.c prefix_match): cached blocks carry no
 * logits. It still registers its own blocks, so the next request reuses them. A preempted one
 * recomputes from position 0 and overwrites its rows with the same values (the forward pass does
 * not depend on how a prompt is split). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sched_int.h"

/* Extra logits bytes a step may hold for scoring rows: 64 MiB is 67 rows of Qwen3.5's 248320
 * entries (a chunk of 67 prompt tokens per step) and the whole budget for small vocabularies. */
#define SCORE_ROW_BYTES (64u << 20)
#define SCORE_ROWS_MIN  16

cllm_status sched_score_alloc(eng_req *q, cllm_error *err) {
    if (!q->sp.has_prompt_logprobs || q->n_prompt < 2) {
        q->plp_ready = true; /* nothing to compute: a one-token prompt has only the null entry */
        return CLLM_OK;
    }
    size_t n = (size_t)(q->n_prompt - 1) * (size_t)(q->sp.prompt_logprobs + 1);
    q->plp = malloc(n * sizeof(cllm_prompt_logprob));
    if (!q->plp)
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory for %zu prompt logprobs entries", n);
    return CLLM_OK;
}

bool sched_score_wants(const eng_seq *e) {
    return e->req->plp && !e->req->plp_ready && e->n_computed < e->n_prompt;
}

int sched_score_cut(sched *s, const eng_seq *e, int n_new) {
    if (!sched_score_wants(e)) return n_new;
    size_t V = (size_t)s->cfg.vocab_size;
    if (s->score_rows == 0) {
        size_t want = SCORE_ROW_BYTES / (V * sizeof(float));
        if (want < SCORE_ROWS_MIN) want = SCORE_ROWS_MIN;
        if (want > (size_t)s->cfg.max_num_batched_tokens)
            want = (size_t)s->cfg.max_num_batched_tokens;
        /* after the rows every step may already use: one per batch entry and the verify rows
         * of speculative decoding (s->logit_rows_cap) */
        float *p = realloc(s->logits, ((size_t)s->logit_rows_cap + want) * V * sizeof(float));
        if (p) {
            s->logits = p;
            s->score_rows = (int)want;
        }
    }
    /* rows already taken this step by earlier scoring chunks (the batch holds at most
     * batch_cap entries, each with its own row in the first batch_cap) */
    int used = 0;
    for (int i = 0; i < s->n_batch; i++)
        if (s->bseq[i].logits == CLLM_LOGITS_ALL) used += s->bseq[i].n_tokens;
    int left = s->score_rows - used;
    /* without room (the buffer could not grow, or others took it) one token still fits: its
     * single row is the one every batch entry owns */
    if (left < 1) left = 1;
    return n_new < left ? n_new : left;
}

/* Sorts top[0..n) into place for x[id]: descending logit, lower id first on ties. k slots. */
static int top_insert(cllm_prompt_logprob *top, int n, int k, const float *x, int id) {
    if (n == k && !(x[id] > x[top[n - 1].token])) return n;
    int at = n < k ? n : k - 1;
    while (at > 0 && x[top[at - 1].token] < x[id]) {
        top[at] = top[at - 1];
        at--;
    }
    top[at].token = id;
    return n < k ? n + 1 : n;
}

/* One row: out[0] = the next prompt token, out[1..k] = the row's best k. The log-sum-exp runs in
 * double in index order, as `cllm eval` computes it (quant/qeval.c). */
static void score_row(const float *x, int V, int tok, int k, cllm_prompt_logprob *out) {
    double mx = x[0];
    for (int i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp(x[i] - mx);
    double lse = mx + log(sum);
    int rank = 0, n = 0;
    cllm_prompt_logprob *top = out + 1;
    for (int i = 0; i < V; i++) {
        if (x[i] >= x[tok]) rank++;
        if (k > 0) n = top_insert(top, n, k, x, i);
    }
    out[0].token = tok;
    out[0].rank = rank;
    out[0].logprob = x[tok] - lse;
    for (int j = 0; j < n; j++) {
        top[j].rank = j + 1;
        top[j].logprob = x[top[j].token] - lse;
    }
}

void sched_score_rows(sched *s, eng_seq *e, const cllm_seq_batch *b, const float *rows) {
    eng_req *q = e->req;
    if (!q->plp || q->plp_ready) return;
    int V = s->cfg.vocab_size, k = q->sp.prompt_logprobs;
    for (int r = 0; r < b->n_tokens; r++) {
        int pos = b->start_pos + r; /* the row predicts the token at pos + 1 */
        if (pos + 1 >= q->n_prompt) break;
        score_row(rows + (size_t)r * V, V, q->prompt[pos + 1], k,
                  q->plp + (size_t)pos * (size_t)(k + 1));
    }
    if (b->start_pos + b->n_tokens >= q->n_prompt) q->plp_ready = true;
}

void sched_score_attach(eng_req *q, cllm_event *ev) {
    if (!q->sp.has_prompt_logprobs || q->plp_sent || !q->plp_ready) return;
    q->plp_sent = true;
    ev->prompt_lp = q->plp;
    ev->n_prompt_lp = q->plp ? q->n_prompt - 1 : 0;
    ev->n_prompt_top = q->sp.prompt_logprobs;
}
