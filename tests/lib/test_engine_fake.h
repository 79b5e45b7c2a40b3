/* A fake model for scheduler tests, behind the same function table as the real forward pass.
 *
 * "KV" stores the token id and position written at each block row; the "state" slot holds a
 * rolling hash of every token folded in and how many. Every call recomputes the history hash by
 * walking the sequence's block table and checks it against the state slot and the positions, so a
 * wrong block table, a stale or wrongly copied snapshot, or a shared block overwritten by another
 * sequence shows up as a counted error. Logits are a pure function of the token history, so the
 * greedy continuation of any prompt is known without the engine (fake_expected). A LAST-mode
 * sequence gets the rows of its last max(1, logits_n) positions (speculative verify rows). */
#ifndef CLLM_TEST_ENGINE_FAKE_H
#define CLLM_TEST_ENGINE_FAKE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sched.h"

typedef struct fake_model {
    int V, n_blocks, bs, n_slots;
    bool has_state;
    int32_t *kv_tok, *kv_pos; /* [n_blocks][bs] */
    uint64_t *st_hash;        /* [n_slots] */
    int *st_len;              /* [n_slots] */
    int errors;
    char last_error[256];
    uint64_t calls, tokens;
    uint64_t all_rows; /* rows returned for CLLM_LOGITS_ALL entries */
    uint64_t forks;    /* sequences whose state was read from another slot (state_fork) */
    uint64_t commits;  /* state commits (eng_model_ops.commit_state) */
    bool no_commit;    /* ops without commit_state: the scheduler recomputes instead */
    /* the last call's state_save rows: start_pos, tokens (a commit folds a prefix of them) */
    int sv_n[64], sv_pos[64];
    int32_t sv_tok[64][64];
    int max_seqs_in_batch;
    /* logits from the last token only (a Markov chain: greedy output cycles, so n-gram drafts
     * get accepted); the KV / state checks still fold the whole history */
    bool markov;
} fake_model;

static inline uint64_t fake_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t fake_fold(uint64_t h, int32_t tok) {
    return fake_mix(h ^ ((uint64_t)(uint32_t)tok + 0x1234567ull));
}

static inline void fake_logits(int V, uint64_t h, float *out) {
    for (int v = 0; v < V; v++)
        out[v] = (float)(fake_mix(h * 31 + (uint64_t)v) >> 40) * (1.0f / 16777216.0f) * 8.0f;
}

static inline int fake_argmax(int V, uint64_t h) {
    int best = 0;
    float bx = -1;
    for (int v = 0; v < V; v++) {
        float x = (float)(fake_mix(h * 31 + (uint64_t)v) >> 40) * (1.0f / 16777216.0f) * 8.0f;
        if (x > bx) {
            bx = x;
            best = v;
        }
    }
    return best;
}

/* Greedy continuation of prompt for n tokens (no EOS handling). */
static inline void fake_expected(int V, const int32_t *prompt, int n_prompt, int n, int32_t *out) {
    uint64_t h = 0;
    for (int i = 0; i < n_prompt; i++) h = fake_fold(h, prompt[i]);
    for (int i = 0; i < n; i++) {
        out[i] = fake_argmax(V, h);
        h = fake_fold(h, out[i]);
    }
}

static inline void fake_err(fake_model *f, const char *m) {
    if (!f->errors) snprintf(f->last_error, sizeof(f->last_error), "%s", m);
    f->errors++;
}

static cllm_status fake_forward(void *ctx, const cllm_batch *b, float *logits, cllm_error *err) {
    fake_model *f = ctx;
    f->calls++;
    for (int i = 0; i < 64; i++) f->sv_n[i] = -1; /* a commit reads this call's rows only */
    if (b->n_seqs > f->max_seqs_in_batch) f->max_seqs_in_batch = b->n_seqs;
    for (int i = 0; i < b->n_seqs; i++)
        for (int j = i + 1; j < b->n_seqs; j++)
            if (b->seqs[i].state_slot == b->seqs[j].state_slot) {
                fake_err(f, "slot used twice in a batch");
                return cllm_err_set(err, CLLM_EINVAL, "slot used twice");
            }
    int row = 0;
    for (int i = 0; i < b->n_seqs; i++) {
        const cllm_seq_batch *s = &b->seqs[i];
        int end = s->start_pos + s->n_tokens;
        if (s->n_tokens < 1 || s->n_table * f->bs < end || s->state_slot < 0 ||
            s->state_slot >= f->n_slots) {
            fake_err(f, "bad sequence in batch");
            return cllm_err_set(err, CLLM_EINVAL, "bad sequence");
        }
        uint64_t h = 0;
        for (int p = 0; p < s->start_pos; p++) {
            int blk = s->block_table[p / f->bs], r = p % f->bs;
            if (blk < 0 || blk >= f->n_blocks) {
                fake_err(f, "block out of range");
                return cllm_err_set(err, CLLM_EINVAL, "block");
            }
            if (f->kv_pos[blk * f->bs + r] != p) fake_err(f, "KV row holds another position");
            h = fake_fold(h, f->kv_tok[blk * f->bs + r]);
        }
        if (f->has_state) {
            if (s->start_pos == 0) {
                f->st_hash[s->state_slot] = 0;
                f->st_len[s->state_slot] = 0;
            } else if (s->state_fork) { /* forward.h: read from state_src, written to state_slot */
                if (s->state_src < 0 || s->state_src >= f->n_slots ||
                    s->state_src == s->state_slot) {
                    fake_err(f, "bad fork source");
                    return cllm_err_set(err, CLLM_EINVAL, "fork");
                }
                for (int j = 0; j < b->n_seqs; j++)
                    if (b->seqs[j].state_slot == s->state_src) fake_err(f, "fork source written");
                f->st_hash[s->state_slot] = f->st_hash[s->state_src];
                f->st_len[s->state_slot] = f->st_len[s->state_src];
                f->forks++;
            }
            if (f->st_len[s->state_slot] != s->start_pos)
                fake_err(f, "state slot length != start_pos");
            else if (f->st_hash[s->state_slot] != h)
                fake_err(f, "state slot differs from the KV history");
        }
        int nl = s->logits == CLLM_LOGITS_LAST ? (s->logits_n > 1 ? s->logits_n : 1) : 0;
        if (nl > s->n_tokens) {
            fake_err(f, "logits_n beyond the call's tokens");
            return cllm_err_set(err, CLLM_EINVAL, "logits_n");
        }
        for (int k = 0; k < s->n_tokens; k++) {
            int p = s->start_pos + k;
            int blk = s->block_table[p / f->bs], r = p % f->bs;
            f->kv_tok[blk * f->bs + r] = s->tokens[k];
            f->kv_pos[blk * f->bs + r] = p;
            h = fake_fold(h, s->tokens[k]);
            /* ALL: every row; LAST: the last max(1, logits_n) rows (verify rows) */
            if (s->logits == CLLM_LOGITS_ALL ||
                (s->logits == CLLM_LOGITS_LAST && k >= s->n_tokens - nl))
                fake_logits(f->V, f->markov ? fake_fold(0, s->tokens[k]) : h,
                            logits + (size_t)row++ * f->V);
        }
        if (s->logits == CLLM_LOGITS_ALL) f->all_rows += (uint64_t)s->n_tokens;
        f->tokens += (uint64_t)s->n_tokens;
        if (f->has_state) {
            f->st_hash[s->state_slot] = h;
            f->st_len[s->state_slot] = end;
        }
        if (i < 64) {
            f->sv_n[i] = s->state_save && s->n_tokens <= 64 ? s->n_tokens : -1;
            f->sv_pos[i] = s->start_pos;
            if (f->sv_n[i] > 0)
                memcpy(f->sv_tok[i], s->tokens, (size_t)s->n_tokens * sizeof(int32_t));
        }
        /* a hidden-state row (embeddings): the same function of the history as a logits row */
        if (s->logits == CLLM_LOGITS_HIDDEN) fake_logits(f->V, h, logits + (size_t)row++ * f->V);
    }
    return CLLM_OK;
}

static void fake_copy_block(void *ctx, int dst, int src) {
    fake_model *f = ctx;
    memcpy(f->kv_tok + dst * f->bs, f->kv_tok + src * f->bs, (size_t)f->bs * sizeof(int32_t));
    memcpy(f->kv_pos + dst * f->bs, f->kv_pos + src * f->bs, (size_t)f->bs * sizeof(int32_t));
}

static void fake_copy_state(void *ctx, int dst, int src) {
    fake_model *f = ctx;
    f->st_hash[dst] = f->st_hash[src];
    f->st_len[dst] = f->st_len[src];
}

/* forward.h cllm_forward_state_commit: the slot must hold the row's state before the call */
static bool fake_commit_state(void *ctx, int seq, int n, int slot) {
    fake_model *f = ctx;
    if (f->no_commit) return false;
    if (seq < 0 || seq >= 64 || f->sv_n[seq] < n || n < 0 || slot < 0 || slot >= f->n_slots) {
        fake_err(f, "commit of a row that saved nothing, or past its tokens");
        return false;
    }
    if (f->st_len[slot] != f->sv_pos[seq]) fake_err(f, "commit onto a slot at another position");
    for (int i = 0; i < n; i++) f->st_hash[slot] = fake_fold(f->st_hash[slot], f->sv_tok[seq][i]);
    f->st_len[slot] += n;
    f->commits++;
    return true;
}

static const eng_model_ops fake_ops = {.forward = fake_forward,
                                       .copy_block = fake_copy_block,
                                       .copy_state = fake_copy_state,
                                       .commit_state = fake_commit_state};

static inline void fake_init(fake_model *f, int V, int n_blocks, int bs, int n_slots,
                             bool has_state) {
    memset(f, 0, sizeof(*f));
    f->V = V;
    f->n_blocks = n_blocks;
    f->bs = bs;
    f->n_slots = n_slots;
    f->has_state = has_state;
    f->kv_tok = calloc((size_t)n_blocks * bs, sizeof(int32_t));
    f->kv_pos = malloc((size_t)n_blocks * bs * sizeof(int32_t));
    for (int i = 0; i < n_blocks * bs; i++) f->kv_pos[i] = -1;
    f->st_hash = calloc((size_t)n_slots, sizeof(uint64_t));
    f->st_len = calloc((size_t)n_slots, sizeof(int));
}

static inline void fake_free(fake_model *f) {
    free(f->kv_tok);
    free(f->kv_pos);
    free(f->st_hash);
    free(f->st_len);
}

/* Greedy sampling of max_tokens tokens, EOS ignored, no logprobs: the scheduler tests' default. */
static inline cllm_sampling fake_greedy(int max_tokens) {
    cllm_sampling p;
    memset(&p, 0, sizeof(p));
    p.top_p = 1;
    p.repetition_penalty = 1;
    p.max_tokens = max_tokens;
    p.logprobs = -1;
    p.n = 1;
    p.ignore_eos = true;
    return p;
}

/* A scheduler config over the fake model. */
static inline sched_cfg fake_cfg(int V, int n_blocks, int bs, int max_seqs, int budget,
                                 bool has_state, bool caching) {
    sched_cfg c;
    memset(&c, 0, sizeof(c));
    c.vocab_size = V;
    c.has_state = has_state;
    c.n_blocks = n_blocks;
    c.block_size = bs;
    c.n_live_slots = max_seqs;
    c.n_snap_slots = 32;
    c.max_num_seqs = max_seqs;
    c.max_num_batched_tokens = budget;
    c.max_model_len = n_blocks * bs;
    c.prefix_caching = caching;
    c.snapshot_interval = 1;
    c.n_eos = 0;
    return c;
}

/* Collected output of one sample. */
typedef struct fake_out {
    int32_t toks[4096];
    int n;
    char text[8192];
    size_t text_len;
    cllm_finish fin;
    int cached, prompt_tokens, completion_tokens, events;
    float lp0;
    bool got_lp;
} fake_out;

static void fake_collect(void *user, const cllm_event *ev) {
    fake_out *o = (fake_out *)user + ev->index;
    for (int i = 0; i < ev->n_tokens && o->n < 4096; i++) o->toks[o->n++] = ev->token_ids[i];
    if (ev->text_len && o->text_len + ev->text_len < sizeof(o->text)) {
        memcpy(o->text + o->text_len, ev->text, ev->text_len);
        o->text_len += ev->text_len;
        o->text[o->text_len] = 0;
    }
    if (ev->logprobs) {
        o->got_lp = true;
        o->lp0 = ev->logprobs[0].logprob;
    }
    o->events++;
    if (ev->finish != CLLM_FINISH_NONE) {
        o->fin = ev->finish;
        o->cached = ev->cached_prompt_tokens;
        o->prompt_tokens = ev->prompt_tokens;
        o->completion_tokens = ev->completion_tokens;
    }
}

#endif
