/* Scheduler core (see sched.h). One step:
 *   1. running sequences in admission order get their next tokens (a decode token, or the next
 *      prefill chunk) within the --max-num-batched-tokens budget; when blocks run out the most
 *      recently admitted running sequence is preempted (blocks and slot freed, recomputed later);
 *   2. if nothing was preempted, waiting sequences are admitted FCFS while a live slot, the blocks
 *      for their first chunk and a --max-num-seqs place are available; a prefix-cache hit starts
 *      them at the longest block-aligned position with cached KV blocks (and, for hybrid models, a
 *      GDN state snapshot);
 *   3. one forward call on the ragged batch;
 *   4. full blocks get their chain hash, snapshots are taken at block boundaries, sequences that
 *      produced logits sample a token, events go out, finished sequences release everything.
 * Output handling (detokenizer, stop strings, events) lives in sched_out.c. */
#include "engine/sched_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/mem.h"

/* ---- requests ---- */

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

void sched_req_free(eng_req *q) {
    if (!q) return;
    free(q->prompt);
    for (int i = 0; i < q->sp.n_stop; i++) free(q->stop[i]);
    free(q->stop);
    free(q->stop_ids);
    free(q->bias_ids);
    free(q->bias_vals);
    free(q->forbid);
    free(q->seqs);
    free(q->plp);
    sched_img_free(q);
    cllm_gm_unref(q->sp.grammar);
    free(q);
}

cllm_status sched_req_new(const sched_cfg *cfg, const cllm_request *r, uint64_t id,
                          double t_arrival, eng_req **out, cllm_error *err) {
    *out = NULL;
    const cllm_sampling *p = &r->sampling;
    if (!r->prompt || r->n_prompt < 1)
        return cllm_err_set(err, CLLM_EINVAL, "prompt must not be empty");
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= cfg->vocab_size)
            return cllm_err_set(err, CLLM_EINVAL,
                                "prompt token %d at position %d is out of vocabulary (size %d)",
                                r->prompt[i], i, cfg->vocab_size);
    if (p->grammar && !cfg->tok)
        return cllm_err_set(err, CLLM_EINVAL, "structured outputs need the model's tokenizer");
    if (p->n < 1 || p->n > 256) /* samples beyond max_num_seqs simply queue */
        return cllm_err_set(err, CLLM_EINVAL, "n must be between 1 and 256, got %d", p->n);
    if (!(p->temperature >= 0) || !(p->top_p > 0 && p->top_p <= 1) ||
        !(p->min_p >= 0 && p->min_p <= 1))
        return cllm_err_set(err, CLLM_EINVAL,
                            "temperature must be >= 0, top_p in (0, 1], min_p in [0, 1]");
    if (!(p->repetition_penalty > 0 && p->repetition_penalty <= 100) ||
        !(fabs(p->presence_penalty) <= 2) || !(fabs(p->frequency_penalty) <= 2))
        return cllm_err_set(
            err, CLLM_EINVAL,
            "repetition_penalty must be in (0, 100], presence/frequency penalties in [-2, 2]");
    if (p->top_k < -1)
        return cllm_err_set(err, CLLM_EINVAL, "top_k must be -1 (off) or >= 0, got %d", p->top_k);
    if (p->min_tokens < 0) return cllm_err_set(err, CLLM_EINVAL, "min_tokens must be >= 0");
    if (p->logprobs > 20 || p->logprobs < -1)
        return cllm_err_set(err, CLLM_EINVAL, "logprobs must be between 0 and 20, got %d",
                            p->logprobs);
    if (p->embed && (p->n != 1 || p->grammar || p->has_prompt_logprobs || cfg->hidden_size < 1 ||
                     cfg->hidden_size > cfg->vocab_size))
        return cllm_err_set(err, CLLM_EINVAL,
                            "embeddings: one sample, no grammar or prompt logprobs, and a model "
                            "whose hidden size fits a logits row");
    if (p->has_prompt_logprobs && (p->prompt_logprobs < 0 || p->prompt_logprobs > cfg->vocab_size))
        return cllm_err_set(err, CLLM_EINVAL, "prompt_logprobs must be between 0 and %d, got %d",
                            cfg->vocab_size, p->prompt_logprobs);
    if (p->max_tokens > 0 && p->min_tokens > p->max_tokens)
        return cllm_err_set(err, CLLM_EINVAL, "min_tokens (%d) must be <= max_tokens (%d)",
                            p->min_tokens, p->max_tokens);
    for (int i = 0; i < p->n_stop_token_ids; i++)
        if (p->stop_token_ids[i] < 0 || p->stop_token_ids[i] >= cfg->vocab_size)
            return cllm_err_set(err, CLLM_EINVAL, "stop_token_ids: %d is out of vocabulary",
                                p->stop_token_ids[i]);
    for (int i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias_ids[i] < 0 || p->logit_bias_ids[i] >= cfg->vocab_size ||
            !isfinite(p->logit_bias_vals[i]))
            return cllm_err_set(err, CLLM_EINVAL,
                                "logit_bias: token %d is out of vocabulary or bias not finite",
                                p->logit_bias_ids[i]);
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i] || !p->stop[i][0])
            return cllm_err_set(err, CLLM_EINVAL, "stop strings must not be empty");
    int want = p->max_tokens > 0 ? p->max_tokens : 1;
    if ((int64_t)r->n_prompt + want > cfg->max_model_len)
        return cllm_err_set(
            err, CLLM_EINVAL,
            "This model's maximum context length is %d tokens. However, you requested %lld tokens "
            "(%d in the messages, %d in the completion). Please reduce the length of the messages "
            "or completion.",
            cfg->max_model_len, (long long)r->n_prompt + want, r->n_prompt, want);

    eng_req *q = calloc(1, sizeof(*q));
    if (!q) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    q->id = id;
    q->sp = *p;
    cllm_gm_ref(q->sp.grammar);
    q->on_event = r->on_event;
    q->user = r->user;
    q->t_arrival = t_arrival;
    q->n_prompt = r->n_prompt;
    q->max_out = p->max_tokens > 0 ? p->max_tokens : cfg->max_model_len - r->n_prompt;
    q->seed = p->has_seed ? p->seed : (cllm_time_ns() ^ (id * 0x9e3779b97f4a7c15ull));
    q->salt.lo = q->salt.hi = 0;
    if (r->cache_salt && r->cache_salt[0]) {
        XXH128_hash_t h = XXH3_128bits(r->cache_salt, strlen(r->cache_salt));
        q->salt.lo = h.low64;
        q->salt.hi = h.high64;
    }
    q->prompt = malloc((size_t)r->n_prompt * sizeof(int32_t));
    q->seqs = calloc((size_t)p->n, sizeof(eng_seq *));
    q->stop = calloc((size_t)p->n_stop + 1, sizeof(char *));
    q->stop_ids = malloc(((size_t)p->n_stop_token_ids + 1) * sizeof(int));
    q->bias_ids = malloc(((size_t)p->n_logit_bias + 1) * sizeof(int));
    q->bias_vals = malloc(((size_t)p->n_logit_bias + 1) * sizeof(float));
    q->sp.n_stop = 0;
    if (!q->prompt || !q->seqs || !q->stop || !q->stop_ids || !q->bias_ids || !q->bias_vals)
        goto oom;
    if (sched_score_alloc(q, err) != CLLM_OK) {
        sched_req_free(q);
        return CLLM_ENOMEM;
    }
    for (int i = 0; i < r->n_prompt; i++) q->prompt[i] = r->prompt[i];
    cllm_status irc = sched_img_copy(cfg, r, q, err);
    if (irc != CLLM_OK) {
        sched_req_free(q);
        return irc;
    }
    for (int i = 0; i < p->n_stop; i++) {
        if (!(q->stop[i] = dup_str(p->stop[i]))) goto oom;
        q->sp.n_stop = i + 1;
        int l = (int)strlen(p->stop[i]);
        if (l > q->max_stop_len) q->max_stop_len = l;
    }
    if (p->n_stop_token_ids)
        memcpy(q->stop_ids, p->stop_token_ids, (size_t)p->n_stop_token_ids * sizeof(int));
    if (p->n_logit_bias) {
        memcpy(q->bias_ids, p->logit_bias_ids, (size_t)p->n_logit_bias * sizeof(int));
        memcpy(q->bias_vals, p->logit_bias_vals, (size_t)p->n_logit_bias * sizeof(float));
    }
    q->sp.stop = (const char *const *)q->stop;
    q->sp.stop_token_ids = q->stop_ids;
    q->sp.logit_bias_ids = q->bias_ids;
    q->sp.logit_bias_vals = q->bias_vals;
    if (q->sp.top_k < 0) q->sp.top_k = 0;
    /* forbidden ids before min_tokens: EOS (unless ignore_eos) and stop ids */
    q->forbid = malloc(((size_t)cfg->n_eos + (size_t)p->n_stop_token_ids + 1) * sizeof(int));
    if (!q->forbid) goto oom;
    if (!p->ignore_eos)
        for (int i = 0; i < cfg->n_eos; i++) q->forbid[q->n_forbid++] = cfg->eos_ids[i];
    for (int i = 0; i < p->n_stop_token_ids; i++) q->forbid[q->n_forbid++] = p->stop_token_ids[i];
    *out = q;
    return CLLM_OK;
oom:
    sched_req_free(q);
    return cllm_err_set(err, CLLM_ENOMEM, "out of memory copying the request");
}

/* ---- sequences ---- */

/* Grows array *p (capacity *cap elements of elem bytes, doubling from 16) to hold need;
 * CLLM_ENOMEM on out of memory (the array is left as it was). */
cllm_status sched_grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return CLLM_OK;
    int nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *n = realloc(*p, (size_t)nc * elem);
    if (!n) return CLLM_ENOMEM;
    *p = n;
    *cap = nc;
    return CLLM_OK;
}

static eng_seq *seq_new(sched *s, eng_req *q, int index) {
    eng_seq *e = calloc(1, sizeof(*e));
    if (!e) return NULL;
    e->req = q;
    e->index = index;
    e->slot = -1;
    e->spec_slot = -1;
    e->pend_snap = -1;
    e->n_prompt = q->n_prompt;
    if (sched_grow((void **)&e->tokens, &e->cap_tokens, q->n_prompt + 16, sizeof(int32_t))) {
        free(e);
        return NULL;
    }
    memcpy(e->tokens, q->prompt, (size_t)q->n_prompt * sizeof(int32_t));
    e->n_tokens = q->n_prompt;
    e->lp = malloc((size_t)(q->sp.logprobs + 2) * sizeof(cllm_token_logprob));
    if (!e->lp) {
        free(e->tokens);
        free(e);
        return NULL;
    }
    if (q->sp.grammar) {
        const cllm_gm_vocab *v = sched_gm_vocab(s); /* built off this thread (sched_gm.c) */
        if (!v && !s->gmv) {
            cllm_error ge = {0};
            double t0 = cllm_time_s();
            if (cllm_gm_vocab_from_tok(s->cfg.tok, s->cfg.eos_ids, s->cfg.n_eos, &s->gmv, &ge))
                s->gmv = NULL;
            s->stats.grammar_s += cllm_time_s() - t0;
        }
        if (!v) v = s->gmv;
        if (v && !s->gmask) s->gmask = calloc((size_t)(s->cfg.vocab_size + 31) / 32, 4);
        e->gm = v && s->gmask ? cllm_gm_matcher_new(q->sp.grammar, v) : NULL;
        if (!e->gm || cllm_gm_vocab_size(v) > s->cfg.vocab_size) {
            cllm_gm_matcher_free(e->gm);
            free(e->lp);
            free(e->tokens);
            free(e);
            return NULL;
        }
        e->gm_on = q->sp.grammar_after <= 0;
    }
    if (s->cfg.tok) cllm_tok_stream_init(&e->detok, s->cfg.tok, q->sp.skip_special_tokens);
    return e;
}

static void seq_destroy(sched *s, eng_seq *e) {
    if (s->cfg.tok) cllm_tok_stream_free(&e->detok);
    cllm_gm_matcher_free(e->gm);
    free(e->tokens);
    free(e->table);
    free(e->hashes);
    free(e->text);
    free(e->lp);
    free(e->mtp_hid);
    free(e);
}

/* Hash chain over the full blocks of e->tokens, computed up to n_full blocks. */
static void seq_hashes(sched *s, eng_seq *e, int n_full) {
    int bs = s->cfg.block_size;
    if (n_full <= e->n_hashes) return;
    if (sched_grow((void **)&e->hashes, &e->cap_hashes, n_full, sizeof(blk_hash)))
        return; /* cache just misses */
    for (int b = e->n_hashes; b < n_full; b++) {
        blk_hash parent = b ? e->hashes[b - 1] : e->req->salt;
        XXH3_state_t st;
        XXH3_128bits_reset(&st);
        XXH3_128bits_update(&st, &parent, sizeof(parent));
        XXH3_128bits_update(&st, e->tokens + (size_t)b * bs, (size_t)bs * sizeof(int32_t));
        sched_img_hash(e->req, b * bs, bs, &st);
        XXH128_hash_t h = XXH3_128bits_digest(&st);
        e->hashes[b].lo = h.low64;
        e->hashes[b].hi = h.high64;
    }
    e->n_hashes = n_full;
}

/* Key of a partially filled block: parent chain hash (after k full blocks), the row count r
 * (1 <= r < block_size) and the r tokens. */
static blk_hash partial_hash(const sched *s, const eng_seq *e, int k, int r) {
    blk_hash parent = k ? e->hashes[k - 1] : e->req->salt;
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, &parent, sizeof(parent));
    XXH3_128bits_update(&st, &r, sizeof(r));
    XXH3_128bits_update(&st, e->tokens + (size_t)k * s->cfg.block_size,
                        (size_t)r * sizeof(int32_t));
    sched_img_hash(e->req, k * s->cfg.block_size, r, &st);
    XXH128_hash_t h = XXH3_128bits_digest(&st);
    blk_hash out = {h.low64, h.high64};
    return out;
}

static bool snapshots_on(const sched *s) {
    return s->cfg.prefix_caching && s->cfg.has_state && s->slots.n_snap > 0;
}

/* Commits the sequence's pending decode snapshot (if any) to the cache. */
static void seq_commit_pending(sched *s, eng_seq *e) {
    if (e->pend_snap < 0) return;
    seq_hashes(s, e, e->pend_blocks);
    if (e->n_hashes >= e->pend_blocks)
        slot_snap_commit(&s->slots, e->pend_snap, e->hashes[e->pend_blocks - 1]);
    else
        slot_snap_release(&s->slots, e->pend_snap);
    e->pend_snap = -1;
}

/* A sequence that stops mid-block (finished or preempted) leaves its partial last block and, for
 * hybrid models, its exact state in the cache: the next chat turn (or the resume) continues at
 * the very position instead of the last block boundary. The block is copied, never shared, by
 * whoever reuses it. */
static void seq_cache_partial(sched *s, eng_seq *e) {
    int bs = s->cfg.block_size, k = e->n_computed / bs, r = e->n_computed % bs;
    if (!s->cfg.prefix_caching || e->slot < 0 || r == 0 || e->n_table <= k) return;
    if (s->cfg.has_state && s->slots.n_snap == 0) return;
    seq_hashes(s, e, k);
    if (e->n_hashes < k) return;
    blk_hash ph = partial_hash(s, e, k, r);
    if (blk_lookup(&s->blocks, ph) >= 0 || blk_is_hashed(&s->blocks, e->table[k])) return;
    if (s->cfg.has_state) {
        if (slot_snap_lookup(&s->slots, ph, true) < 0) {
            int sl = slot_snap_alloc(&s->slots);
            if (sl < 0) return;
            s->ops.copy_state(s->mctx, sl, e->slot);
            slot_snap_commit(&s->slots, sl, ph);
        }
    }
    blk_register(&s->blocks, e->table[k], ph);
}

/* Frees the blocks (last first, so the tail is evicted first) and the live slot. */
static void seq_release(sched *s, eng_seq *e) {
    sched_spec_release(s, e);
    seq_commit_pending(s, e);
    seq_cache_partial(s, e);
    for (int i = e->n_table - 1; i >= 0; i--) blk_unref(&s->blocks, e->table[i]);
    e->n_table = 0;
    if (e->slot >= 0) slot_live_release(&s->slots, e->slot);
    e->slot = -1;
    e->n_computed = 0;
}

static void list_remove(eng_seq **list, int *n, eng_seq *e) {
    for (int i = 0; i < *n; i++)
        if (list[i] == e) {
            memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof(*list));
            (*n)--;
            return;
        }
}

/* Inserts e at index at; CLLM_ENOMEM (list unchanged) when the list cannot grow. */
static cllm_status list_insert(eng_seq ***list, int *n, int *cap, int at, eng_seq *e) {
    if (sched_grow((void **)list, cap, *n + 1, sizeof(eng_seq *))) return CLLM_ENOMEM;
    memmove(*list + at + 1, *list + at, (size_t)(*n - at) * sizeof(eng_seq *));
    (*list)[at] = e;
    (*n)++;
    return CLLM_OK;
}

/* Removes a finished sequence everywhere; frees the request when its last sample ends. */
void sched_seq_finish(sched *s, eng_seq *e) {
    sched_spec_seq_done(s, e);
    seq_release(s, e);
    if (e->state == SEQ_RUNNING)
        list_remove(s->running, &s->n_running, e);
    else if (e->state == SEQ_WAITING)
        list_remove(s->waiting, &s->n_waiting, e);
    e->state = SEQ_DONE;
    eng_req *q = e->req;
    q->seqs[e->index] = NULL;
    seq_destroy(s, e);
    if (++q->n_done == q->sp.n) {
        for (int i = 0; i < s->n_reqs; i++)
            if (s->reqs[i] == q) {
                s->reqs[i] = s->reqs[--s->n_reqs];
                break;
            }
        sched_req_free(q);
    }
}

/* ---- create / free ---- */

cllm_status sched_create(const sched_cfg *cfg, const eng_model_ops *ops, void *model_ctx,
                         sched **out, cllm_error *err) {
    *out = NULL;
    if (cfg->n_blocks < 1 || cfg->block_size < 1 || cfg->n_live_slots < 1 ||
        cfg->max_num_seqs < 1 || cfg->max_num_batched_tokens < 1 || cfg->max_model_len < 1 ||
        cfg->vocab_size < 1)
        return cllm_err_set(err, CLLM_EINVAL, "scheduler: bad configuration");
    sched *s = calloc(1, sizeof(*s));
    if (!s) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    s->cfg = *cfg;
    sched_gm_init(s);
    if (s->cfg.snapshot_interval < 1) s->cfg.snapshot_interval = 1;
    s->ops = *ops;
    s->mctx = model_ctx;
    s->batch_cap = cfg->max_num_seqs;
    s->bseq = calloc((size_t)s->batch_cap, sizeof(cllm_seq_batch));
    s->bent = calloc((size_t)s->batch_cap, sizeof(sched_ent));
    /* verify rows add up to k rows each for at most SPEC_VERIFY_ROWS sequences of a step */
    s->logit_rows_cap = s->batch_cap;
    if (cfg->spec.method != CLLM_SPEC_NONE)
        s->logit_rows_cap += cfg->spec.num_speculative_tokens *
                             (s->batch_cap < SPEC_VERIFY_ROWS ? s->batch_cap : SPEC_VERIFY_ROWS);
    s->logits = malloc((size_t)s->logit_rows_cap * (size_t)cfg->vocab_size * sizeof(float));
    if (!s->bseq || !s->bent || !s->logits ||
        blk_init(&s->blocks, cfg->n_blocks, cfg->block_size) ||
        slot_init(&s->slots, cfg->n_live_slots,
                  cfg->has_state && cfg->prefix_caching ? cfg->n_snap_slots : 0) ||
        smp_init(&s->smp, cfg->vocab_size) ||
        (cfg->spec.method == CLLM_SPEC_SUFFIX &&
         spec_hist_init(&s->hist, cfg->spec.suffix_max_cached_requests, SPEC_HIST_TOKENS))) {
        sched_free(s);
        return cllm_err_set(err, CLLM_ENOMEM, "scheduler: out of memory");
    }
    cllm_status rc = sched_mtp_init(s, err);
    if (rc == CLLM_OK && sched_img_init(s) != CLLM_OK)
        rc = cllm_err_set(err, CLLM_ENOMEM, "scheduler: out of memory");
    if (rc != CLLM_OK) {
        sched_free(s);
        return rc;
    }
    *out = s;
    return CLLM_OK;
}

/* Ends every request (grammar-held ones too) with ABORT: sched_free's first step. */
static void sched_abort_all(sched *s) {
    while (s->n_gm_wait > 0) sched_gm_cancel(s, s->gm_wait[0]->id);
    while (s->n_reqs > 0) sched_cancel(s, s->reqs[0]->id);
}

void sched_free(sched *s) {
    if (!s) return;
    sched_abort_all(s);
    sched_gm_free(s);
    free(s->reqs);
    free(s->running);
    free(s->waiting);
    free(s->bseq);
    free(s->bent);
    free(s->logits);
    blk_free(&s->blocks);
    slot_free(&s->slots);
    smp_free(&s->smp);
    spec_hist_free(&s->hist);
    sched_mtp_free(s);
    sched_img_release(s);
    cllm_gm_vocab_free(s->gmv);
    free(s->gmask);
    free(s);
}

void sched_add(sched *s, eng_req *q) {
    if (sched_gm_hold(s, q)) return; /* admitted by sched_step once its grammar is prepared */
    sched_add_now(s, q);
}

void sched_add_now(sched *s, eng_req *q) {
    eng_seq *e = seq_new(s, q, 0);
    if (!e || sched_grow((void **)&s->reqs, &s->cap_reqs, s->n_reqs + 1, sizeof(eng_req *)) ||
        list_insert(&s->waiting, &s->n_waiting, &s->cap_waiting, s->n_waiting, e)) {
        /* Out of memory: end the request with an error event. */
        cllm_event ev = {.request_id = q->id,
                         .text = "",
                         .finish = CLLM_FINISH_ERROR,
                         .error = "out of memory queueing the request"};
        for (int i = 0; i < q->sp.n; i++) {
            ev.index = i;
            q->on_event(q->user, &ev);
        }
        if (e) seq_destroy(s, e);
        sched_req_free(q);
        return;
    }
    q->seqs[0] = e;
    e->state = SEQ_WAITING;
    s->reqs[s->n_reqs++] = q;
    q->n_live = 1;
}

/* Ends every sample of q with `fin` (events emitted) and frees q. */
static void req_end(sched *s, eng_req *q, cllm_finish fin, const char *msg) {
    if (!q->forked) {
        /* samples 1..n-1 never started */
        for (int i = 1; i < q->sp.n; i++) sched_emit_unstarted(s, q, i, fin, msg);
        q->n_done += q->sp.n - 1;
        q->forked = true;
    }
    for (;;) { /* q is freed with its last sample */
        eng_seq *e = NULL;
        int live = 0;
        for (int i = 0; i < q->sp.n; i++)
            if (q->seqs[i]) {
                if (!e) e = q->seqs[i];
                live++;
            }
        if (!e) { /* every sample already ended (cannot happen for a listed request) */
            break;
        }
        sched_emit_final(s, e, fin, msg);
        sched_seq_finish(s, e);
        if (live == 1) break;
    }
}

void sched_cancel(sched *s, uint64_t id) {
    if (sched_gm_cancel(s, id)) return;
    for (int i = 0; i < s->n_reqs; i++)
        if (s->reqs[i]->id == id) {
            req_end(s, s->reqs[i], CLLM_FINISH_ABORT, NULL);
            return;
        }
}

bool sched_has_work(const sched *s) {
    return s->n_running + s->n_waiting + s->n_gm_wait > 0;
}

void sched_reset_prefix_cache(sched *s) {
    blk_reset_cache(&s->blocks);
    slot_reset_cache(&s->slots);
}

void sched_timing(const sched *s, double *t_forward, uint64_t *tokens_computed) {
    *t_forward = s->t_forward;
    *tokens_computed = s->tokens_computed;
}

void sched_stats(const sched *s, cllm_engine_stats *st) {
    *st = s->stats;
    st->running = s->n_running;
    st->waiting = s->n_waiting + s->n_gm_wait;
    st->kv_blocks_total = (uint64_t)s->blocks.n_blocks;
    st->kv_blocks_used = (uint64_t)blk_used(&s->blocks);
    st->state_slots_total = s->slots.n_live;
    st->state_slots_used = slot_live_used(&s->slots);
    st->block_size = s->cfg.block_size;
    st->max_model_len = s->cfg.max_model_len;
    st->prefix_caching = s->cfg.prefix_caching;
    st->spec_k = s->cfg.spec.method != CLLM_SPEC_NONE ? s->cfg.spec.num_speculative_tokens : 0;
    gm_prep *p = (gm_prep *)&s->prep; /* the mutex, not the state, is written */
    pthread_mutex_lock(&p->mu);
    st->grammar_prep_s = p->prep_s;
    pthread_mutex_unlock(&p->mu);
}

/* ---- planning ---- */

static int blocks_for(int n_tok, int bs) {
    return (n_tok + bs - 1) / bs;
}

/* Cuts a chunk so that it ends on the last block boundary before the sequence's final token,
 * where a snapshot is then taken (hybrid + prefix caching): a retried prompt, an n > 1 sibling
 * or the next turn of a chat can resume there. */
static int align_cut(const sched *s, const eng_seq *e, int n_new) {
    if (!snapshots_on(s)) return n_new;
    int bs = s->cfg.block_size;
    int a = ((e->n_tokens - 1) / bs) * bs;
    if (e->n_computed < a && e->n_computed + n_new > a) return a - e->n_computed;
    return n_new;
}

static void preempt(sched *s, eng_seq *e) {
    seq_release(s, e);
    list_remove(s->running, &s->n_running, e);
    e->state = SEQ_WAITING;
    e->n_hashes = e->n_hashes; /* hashes stay valid: tokens only grow */
    list_insert(&s->waiting, &s->n_waiting, &s->cap_waiting, 0, e);
    s->stats.preemptions++;
    e->n_preempted++;
}

/* Extends e's block table to cover n_tok tokens (the caller checked that enough blocks are
 * free); CLLM_ENOMEM when the table array cannot grow (no block taken). */
static cllm_status grow_table(sched *s, eng_seq *e, int n_tok) {
    int need = blocks_for(n_tok, s->cfg.block_size);
    if (sched_grow((void **)&e->table, &e->cap_table, need, sizeof(int32_t))) return CLLM_ENOMEM;
    while (e->n_table < need) {
        int b = blk_alloc(&s->blocks);
        CLLM_ASSERT(b >= 0);
        e->table[e->n_table++] = b;
    }
    return CLLM_OK;
}

static void batch_add(sched *s, eng_seq *e, int n_new) {
    sched_ent *t = &s->bent[s->n_batch];
    t->seq = e;
    t->n_new = n_new;
    t->logits = e->n_computed + n_new == e->n_tokens;
    cllm_seq_batch *b = &s->bseq[s->n_batch];
    b->tokens = e->tokens + e->n_computed;
    b->n_tokens = n_new;
    b->start_pos = e->n_computed;
    b->block_table = e->table;
    b->n_table = e->n_table;
    b->state_slot = e->slot;
    b->state_fork = false;
    b->state_save = false;
    b->logits = t->logits ? CLLM_LOGITS_LAST : CLLM_LOGITS_NONE;
    b->logits_n = 0;
    t->n_draft = 0;
    if (sched_score_wants(e)) b->logits = CLLM_LOGITS_ALL; /* prompt logprobs (sched_score.c) */
    if (t->logits && e->req->sp.embed) b->logits = CLLM_LOGITS_HIDDEN; /* sched_out.c */
    /* a sample that needs only the row's best k lets each tensor-parallel rank send its best k
     * instead of its slice, and a screened lm_head compute only its best candidates exactly
     * (forward.h). The same tests as sched_sample. */
    b->logits_topk = 0;
    if (b->logits == CLLM_LOGITS_LAST) {
        const eng_req *q = e->req;
        bool forbid = e->n_tokens - e->n_prompt < q->sp.min_tokens && q->n_forbid > 0;
        b->logits_topk =
            smp_reduce_k(&q->sp, s->cfg.vocab_size, forbid, e->gm && e->gm_on, &b->logits_scale);
    }
    sched_img_bind(s, e, b);
    s->n_batch++;
}

/* A verify row (sched_spec.c): the pending tokens, then the e->n_draft drafts written after
 * them, with logits for the last pending position and every draft. */
static void batch_add_verify(sched *s, eng_seq *e, int n_pending) {
    int nd = e->n_draft;
    sched_ent *t = &s->bent[s->n_batch];
    cllm_seq_batch *b = &s->bseq[s->n_batch];
    batch_add(s, e, n_pending + nd);
    t->n_draft = nd;
    b->logits = CLLM_LOGITS_LAST;
    b->logits_n = nd + 1;
    if (e->spec_slot >= 0) { /* the verify's state goes to the spare slot, the live one stays */
        b->state_slot = e->spec_slot;
        b->state_fork = true;
        b->state_src = e->slot;
        b->state_save = s->ops.commit_state != NULL; /* a partial accept commits (sched_spec.c) */
    }
    /* rows past min_tokens or a grammar that switches on inside the window need the exact
     * distribution: the tests are those of a row at the window's start, widened */
    const eng_req *q = e->req;
    bool forbid = e->n_tokens - e->n_prompt < q->sp.min_tokens && q->n_forbid > 0;
    b->logits_topk =
        smp_reduce_k(&q->sp, s->cfg.vocab_size, forbid, e->gm != NULL, &b->logits_scale);
}

typedef struct pmatch {
    int k;        /* full blocks shared */
    int r;        /* rows of a cached partial block copied after them (0 = none) */
    int part_blk; /* that block */
    int snap;     /* snapshot slot giving the state at k * bs + r, or -1 */
} pmatch;

/* Longest reusable prefix for a waiting sequence: cached KV blocks for each full block, then
 * (with partial) possibly a cached partial block; for hybrid models a snapshot at the end
 * position. At least one token is always left to compute. */
static void prefix_match(sched *s, eng_seq *e, bool partial, pmatch *pm) {
    pm->k = pm->r = 0;
    pm->part_blk = pm->snap = -1;
    if (!s->cfg.prefix_caching || sched_score_wants(e)) return; /* cached blocks hold no logits */
    if (s->cfg.has_state && s->slots.n_snap == 0) return;
    int bs = s->cfg.block_size;
    int n_full = (e->n_tokens - 1) / bs;
    seq_hashes(s, e, n_full);
    if (e->n_hashes < n_full) n_full = e->n_hashes;
    int k = 0;
    while (k < n_full && blk_lookup(&s->blocks, e->hashes[k]) >= 0) k++;
    /* a partial block right after the k full ones */
    int rmax = partial ? e->n_tokens - 1 - k * bs : 0;
    if (rmax > bs - 1) rmax = bs - 1;
    for (int r = rmax; r >= 1; r--) {
        blk_hash ph = partial_hash(s, e, k, r);
        int b = blk_lookup(&s->blocks, ph);
        if (b < 0) continue;
        int sn = -1;
        if (s->cfg.has_state && (sn = slot_snap_lookup(&s->slots, ph, true)) < 0) continue;
        pm->k = k;
        pm->r = r;
        pm->part_blk = b;
        pm->snap = sn;
        return;
    }
    if (s->cfg.has_state) {
        int sn = -1;
        while (k > 0 && (sn = slot_snap_lookup(&s->slots, e->hashes[k - 1], false)) < 0) k--;
        if (k > 0) slot_snap_lookup(&s->slots, e->hashes[k - 1], true);
        pm->snap = sn;
    }
    pm->k = k;
}

static int plan(sched *s) {
    int bs = s->cfg.block_size;
    int budget = s->cfg.max_num_batched_tokens;
    bool preempted = false;
    s->n_batch = 0;
    s->logit_rows_extra = s->logit_rows_cap - s->batch_cap;
    s->step_draft_s = 0;
    s->step_draft_passes = 0;
    s->mtp_rows = 0;
    s->img_used = 0;
    sched_spec_begin_step(s);
    for (int i = 0; i < s->n_running && budget > 0; i++) {
        eng_seq *e = s->running[i];
        int n_new = e->n_tokens - e->n_computed;
        if (n_new > budget) n_new = budget;
        n_new = sched_score_cut(s, e, align_cut(s, e, n_new));
        bool self = false;
        for (;;) {
            int need = blocks_for(e->n_computed + n_new, bs) - e->n_table;
            if (need <= blk_available(&s->blocks)) break;
            eng_seq *v = s->running[s->n_running - 1];
            preempt(s, v);
            preempted = true;
            if (v == e) {
                self = true;
                break;
            }
        }
        if (self) break;
        if (grow_table(s, e, e->n_computed + n_new) != CLLM_OK) continue; /* OOM: skip it */
        int nd = n_new == e->n_tokens - e->n_computed ? sched_spec_plan(s, e, budget) : 0;
        if (nd > 0)
            batch_add_verify(s, e, n_new);
        else
            batch_add(s, e, n_new);
        budget -= n_new + nd;
    }
    if (preempted) return s->n_batch;
    while (s->n_waiting > 0 && s->n_running < s->cfg.max_num_seqs && budget > 0 &&
           s->n_batch < s->batch_cap) {
        eng_seq *e = s->waiting[0];
        if (s->slots.n_live_free == 0) break;
        pmatch pm;
        int k, hit, n_new, need;
        for (bool partial = true;; partial = false) {
            prefix_match(s, e, partial, &pm);
            k = pm.k, hit = k * bs + pm.r;
            n_new = e->n_tokens - hit < budget ? e->n_tokens - hit : budget;
            need = blocks_for(hit + n_new, bs) - k;
            for (int j = 0; j < k; j++)
                if (s->blocks.ref[blk_lookup(&s->blocks, e->hashes[j])] == 0) need++;
            if (pm.r) need++; /* the partial source is pinned while it is copied */
            /* that pin can ask one block more than the whole cache holds (a sequence as long
             * as the cache, its last block cached partly): it would wait forever for blocks no
             * one holds, so it takes the full blocks alone */
            if (!pm.r || need <= s->blocks.n_blocks) break;
        }
        if (need > blk_available(&s->blocks)) break;
        if (e->req->n_imgs) {
            /* the vision tower runs before the prefill needs its rows, in units over steps
             * (sched_img.c); the queue behind waits, first come first served */
            cllm_error ie = {0};
            int r = sched_img_encode(s, e->req, hit, &budget, &ie);
            if (r < 0) {
                LOG_WARN("request %llu: image encoding failed: %s", (unsigned long long)e->req->id,
                         ie.msg);
                req_end(s, e->req, CLLM_FINISH_ERROR, ie.msg);
                continue;
            }
            if (r == 0 || budget <= 0) break;
            if (n_new > budget) n_new = budget; /* the blocks counted above still cover it */
        }
        /* admit */
        if (sched_grow((void **)&e->table, &e->cap_table, blocks_for(e->n_tokens, bs),
                       sizeof(int32_t)) ||
            sched_grow((void **)&s->running, &s->cap_running, s->n_running + 1, sizeof(eng_seq *)))
            break;
        list_remove(s->waiting, &s->n_waiting, e);
        for (int j = 0; j < k; j++) {
            int b = blk_lookup(&s->blocks, e->hashes[j]);
            blk_ref(&s->blocks, b);
            e->table[e->n_table++] = b;
        }
        if (pm.r) {
            blk_ref(&s->blocks, pm.part_blk);
            int b = blk_alloc(&s->blocks);
            CLLM_ASSERT(b >= 0);
            s->ops.copy_block(s->mctx, b, pm.part_blk);
            blk_unref(&s->blocks, pm.part_blk);
            e->table[e->n_table++] = b;
        }
        e->slot = slot_live_alloc(&s->slots);
        if (hit > 0 && pm.snap >= 0) s->ops.copy_state(s->mctx, e->slot, pm.snap);
        e->n_computed = hit;
        sched_mtp_restart(e, hit);
        if (!e->admitted_once) {
            e->admitted_once = true;
            e->cached_prompt = hit;
            s->stats.prefix_queries_tokens += (uint64_t)e->n_tokens;
            s->stats.prefix_hits_tokens += (uint64_t)hit;
            if (e->t_scheduled == 0) e->t_scheduled = cllm_time_s();
        }
        s->stats.prefill_tokens_saved += (uint64_t)hit;
        e->state = SEQ_RUNNING;
        s->running[s->n_running++] = e;
        n_new = sched_score_cut(s, e, align_cut(s, e, n_new));
        grow_table(s, e, e->n_computed + n_new);
        batch_add(s, e, n_new);
        budget -= n_new;
    }
    return s->n_batch;
}

/* ---- after the forward ---- */

void sched_after_compute(sched *s, eng_seq *e, int n_new, bool decode) {
    int bs = s->cfg.block_size;
    int before = e->n_computed;
    e->n_computed += n_new;
    if (before < e->n_prompt) {
        int p = (e->n_computed < e->n_prompt ? e->n_computed : e->n_prompt) - before;
        s->stats.prompt_tokens += (uint64_t)p;
    }
    if (!s->cfg.prefix_caching) return;
    int full0 = before / bs, full1 = e->n_computed / bs;
    if (full1 > full0) {
        seq_hashes(s, e, full1);
        for (int b = full0; b < full1 && b < e->n_hashes; b++)
            blk_register(&s->blocks, e->table[b], e->hashes[b]);
    }
    if (!snapshots_on(s) || e->n_computed % bs != 0 || e->n_hashes < full1) return;
    blk_hash h = e->hashes[full1 - 1];
    if (!decode && (n_new > 1 || e->n_computed <= e->n_prompt)) {
        /* prefill chunk ending on a boundary: commit now (every snapshot_interval blocks, and
         * always at the last boundary before the final token) */
        bool last = e->n_computed == ((e->n_tokens - 1) / bs) * bs;
        if (!last && full1 % s->cfg.snapshot_interval != 0) return;
        if (slot_snap_lookup(&s->slots, h, true) >= 0) return;
        int sl = slot_snap_alloc(&s->slots);
        if (sl < 0) return;
        s->ops.copy_state(s->mctx, sl, e->slot);
        slot_snap_commit(&s->slots, sl, h);
    } else {
        /* decode crossing a boundary: keep the latest one, committed when the sequence ends */
        if (e->pend_snap < 0) e->pend_snap = slot_snap_alloc(&s->slots);
        if (e->pend_snap < 0) return;
        s->ops.copy_state(s->mctx, e->pend_snap, e->slot);
        e->pend_blocks = full1;
    }
}

/* n > 1: the first sample's prompt is computed; give the other samples a copy (full blocks shared,
 * the partial last block and the state slot copied). Samples that find no room are queued and
 * prefill on their own (reusing cached blocks). */
static void fork_samples(sched *s, eng_seq *p) {
    eng_req *q = p->req;
    int bs = s->cfg.block_size;
    q->forked = true;
    for (int i = 1; i < q->sp.n; i++) {
        eng_seq *c = seq_new(s, q, i);
        if (!c) {
            sched_emit_unstarted(s, q, i, CLLM_FINISH_ERROR, "out of memory");
            q->n_done++;
            continue;
        }
        q->seqs[i] = c;
        q->n_live++;
        bool partial = p->n_computed % bs != 0;
        bool room = s->n_running < s->cfg.max_num_seqs && s->slots.n_live_free > 0 &&
                    blk_available(&s->blocks) >= (partial ? 1 : 0) &&
                    sched_grow((void **)&c->table, &c->cap_table, p->n_table + 1,
                               sizeof(int32_t)) == CLLM_OK &&
                    sched_grow((void **)&s->running, &s->cap_running, s->n_running + 1,
                               sizeof(eng_seq *)) == CLLM_OK;
        if (!room) {
            c->state = SEQ_WAITING;
            c->t_scheduled = 0;
            list_insert(&s->waiting, &s->n_waiting, &s->cap_waiting, 0, c);
            continue;
        }
        for (int j = 0; j < p->n_table; j++) {
            if (partial && j == p->n_table - 1) {
                int b = blk_alloc(&s->blocks);
                s->ops.copy_block(s->mctx, b, p->table[j]);
                c->table[c->n_table++] = b;
            } else {
                blk_ref(&s->blocks, p->table[j]);
                c->table[c->n_table++] = p->table[j];
            }
        }
        c->slot = slot_live_alloc(&s->slots);
        s->ops.copy_state(s->mctx, c->slot, p->slot);
        c->n_computed = p->n_computed;
        sched_mtp_fork(s, c, p); /* without the rows (out of memory) it drafts a step later */
        c->admitted_once = true;
        c->cached_prompt = p->cached_prompt;
        c->t_scheduled = p->t_scheduled;
        c->state = SEQ_RUNNING;
        s->running[s->n_running++] = c;
        c->forked_now = true;
    }
}

int sched_step(sched *s) {
    if (s->n_gm_wait) sched_gm_admit(s);
    int n = plan(s);
    if (n == 0) {
        /* only requests waiting for a grammar: sleep until one is prepared (or 5 ms, so new
         * submissions are still picked up) instead of spinning */
        if (s->n_gm_wait) sched_gm_idle_wait(s, 0.005);
        return 0;
    }
    cllm_batch b = {s->bseq, n};
    cllm_error err = {0};
    sched_mtp_draft_all(s);
    sched_mtp_bind(s);
    double t0 = cllm_time_s();
    cllm_status st = s->ops.forward(s->mctx, &b, s->logits, &err);
    double dt = cllm_time_s() - t0;
    s->t_forward += dt;
    s->steps++;
    if (st != CLLM_OK) {
        LOG_ERROR("forward failed: %s", err.msg);
        /* the batch's requests fail; ids first, as ending one frees its sequences */
        uint64_t *ids = malloc((size_t)n * sizeof(uint64_t));
        int n_ids = 0;
        for (int i = 0; ids && i < n; i++) ids[n_ids++] = s->bent[i].seq->req->id;
        for (int i = 0; i < n_ids; i++)
            for (int k = 0; k < s->n_reqs; k++)
                if (s->reqs[k]->id == ids[i]) {
                    req_end(s, s->reqs[k], CLLM_FINISH_ERROR, err.msg);
                    break;
                }
        free(ids);
        return n;
    }
    int row = 0;
    uint64_t step_tokens = 0;
    {
        static const double bounds[CLLM_ITER_N_BOUNDS] = CLLM_ITER_BOUNDS;
        for (int i = 0; i < n; i++) step_tokens += (uint64_t)s->bent[i].n_new;
        int bk = 0;
        while (bk < CLLM_ITER_N_BOUNDS && (double)step_tokens > bounds[bk]) bk++;
        s->stats.iter_tokens_counts[bk]++;
        s->stats.iter_tokens_sum += step_tokens;
        s->stats.iter_steps++;
    }
    for (int i = 0; i < n; i++) {
        eng_seq *e = s->bent[i].seq;
        s->tokens_computed += (uint64_t)s->bent[i].n_new;
        sched_mtp_take(s, e, &s->bseq[i]);
        if (s->bent[i].n_draft > 0) {
            sched_spec_accept(s, &s->bent[i], s->logits + (size_t)row * s->cfg.vocab_size);
            row += s->bent[i].n_draft + 1;
            continue;
        }
        sched_after_compute(s, e, s->bent[i].n_new, false);
        const float *lg = s->logits + (size_t)row * s->cfg.vocab_size;
        if (s->bseq[i].logits == CLLM_LOGITS_ALL) { /* a scoring chunk: a row per token */
            sched_score_rows(s, e, &s->bseq[i], lg);
            row += s->bent[i].n_new - 1;
            lg += (size_t)(s->bent[i].n_new - 1) * s->cfg.vocab_size;
            if (!s->bent[i].logits) row++;
        }
        if (!s->bent[i].logits) continue;
        row++;
        eng_req *q = e->req;
        if (q->sp.n > 1 && !q->forked && e->index == 0) {
            fork_samples(s, e);
            for (int k = 1; k < q->sp.n; k++) {
                eng_seq *c = q->seqs[k];
                if (c && c->forked_now) {
                    c->forked_now = false;
                    sched_sample(s, c, lg);
                }
            }
        }
        sched_sample(s, e, lg);
    }
    /* after the rows: a verify's state commits (sched_spec_accept) are part of its own cost.
     * Charged to the next step, as before, they went to whichever size came next: a plain step
     * after a verify (the sample the pace keeps, a size change) read ~1 ms dearer on the quarter
     * shape, and a verify after a plain step cheaper, both toward drafting. The drafts are
     * priced apart. */
    sched_spec_record(s, (int)step_tokens, dt + s->commit_s, s->step_draft_s, s->step_draft_passes);
    s->commit_s = 0;
    return n;
}

/* ---- invariants ---- */

const char *sched_check(const sched *s) {
    int nb = s->blocks.n_blocks, bs = s->cfg.block_size;
    int *ref = calloc((size_t)nb + 1, sizeof(int));
    uint8_t *live = calloc((size_t)s->slots.n_live + 1, 1);
    uint8_t *owned = calloc((size_t)s->slots.n_snap + 1, 1);
    const char *bad = NULL;
    if (!ref || !live || !owned) bad = "out of memory in sched_check";
    if (!bad && s->n_running > s->cfg.max_num_seqs)
        bad = "more running sequences than max_num_seqs";
    for (int i = 0; !bad && i < s->n_running; i++) {
        const eng_seq *e = s->running[i];
        if (e->state != SEQ_RUNNING)
            bad = "running list holds a non-running sequence";
        else if (e->slot < 0 || e->slot >= s->slots.n_live)
            bad = "running sequence without a live slot";
        else if (live[e->slot]++)
            bad = "live slot shared by two sequences";
        else if (e->n_table < blocks_for(e->n_computed, bs))
            bad = "block table shorter than the computed tokens";
        else if (e->n_computed > e->n_tokens || e->n_computed < 0)
            bad = "computed count out of range";
        for (int j = 0; !bad && j < e->n_table; j++) {
            if (e->table[j] < 0 || e->table[j] >= nb)
                bad = "block id out of range";
            else
                ref[e->table[j]]++;
        }
        if (!bad && e->n_computed % bs != 0 && e->n_computed / bs < e->n_table &&
            s->blocks.ref[e->table[e->n_computed / bs]] != 1)
            bad = "partially written block is shared";
        if (!bad && e->pend_snap >= 0) owned[e->pend_snap - s->slots.n_live] = 1;
    }
    for (int i = 0; !bad && i < s->n_waiting; i++) {
        const eng_seq *e = s->waiting[i];
        if (e->state != SEQ_WAITING)
            bad = "waiting list holds a non-waiting sequence";
        else if (e->n_table != 0 || e->slot >= 0 || e->n_computed != 0)
            bad = "waiting sequence holds resources";
        else if (e->pend_snap >= 0)
            bad = "waiting sequence holds a snapshot";
    }
    if (!bad) bad = blk_check(&s->blocks, ref);
    if (!bad) bad = slot_check(&s->slots, live, owned);
    int live_seqs = 0;
    for (int i = 0; !bad && i < s->n_reqs; i++)
        for (int k = 0; k < s->reqs[i]->sp.n; k++)
            if (s->reqs[i]->seqs[k]) live_seqs++;
    if (!bad && live_seqs != s->n_running + s->n_waiting)
        bad = "sequence neither running nor waiting";
    free(ref);
    free(live);
    free(owned);
    return bad;
}
