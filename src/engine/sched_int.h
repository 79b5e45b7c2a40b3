/* Scheduler internals shared by sched.c (planning, blocks, snapshots) and sched_out.c (sampling,
 * stop conditions, text, events). Not for other modules. */
#ifndef CLLM_ENGINE_SCHED_INT_H
#define CLLM_ENGINE_SCHED_INT_H

#include <pthread.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "engine/sampler.h"
#include "engine/sched.h"
#include "engine/spec_suffix.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

typedef enum seq_state { SEQ_WAITING = 0, SEQ_RUNNING, SEQ_DONE } seq_state;

typedef struct eng_seq eng_seq;

/* One image of a request (sched_img.c). */
typedef struct eng_img {
    float *pixels; /* the patches until encoded, then NULL */
    int grid[3];
    int pos, n_tok; /* its pad tokens in the prompt */
    blk_hash hash;  /* content */
    float *emb;     /* [n_tok][hidden_size]: allocated when encoding starts, valid once done */
    bool encoded;
    void *job; /* the tower's job while encoding (ops.image_*) */
    int units; /* its work units left */
    const eng_model_ops *ops;
    void *mctx;
} eng_img;

struct eng_req {
    uint64_t id;
    cllm_sampling sp; /* pointers redirected to the copies below */
    cllm_event_fn on_event;
    void *user;
    double t_arrival;
    int32_t *prompt; /* [n_prompt] */
    int n_prompt;
    int max_out;   /* generated-token cap */
    uint64_t seed; /* explicit or drawn at submit */
    blk_hash salt; /* parent hash of the first block (cache_salt), zero when none */
    char **stop;   /* [sp.n_stop] */
    int max_stop_len;
    int *stop_ids, *bias_ids;
    float *bias_vals;
    int *forbid; /* EOS (unless ignore_eos) + stop ids: masked before min_tokens */
    int n_forbid;
    /* prompt logprobs (sched_score.c), when sp.has_prompt_logprobs: row j describes prompt
     * token j + 1, [n_prompt - 1][1 + sp.prompt_logprobs] */
    cllm_prompt_logprob *plp;
    bool plp_ready; /* every row is filled: the prompt's logits are no longer needed */
    bool plp_sent;  /* went out on an event */
    eng_seq **seqs; /* [sp.n]; NULL once a sample ended or before the fork */
    bool forked;    /* samples 1..n-1 exist (or ended) */
    int n_done, n_live;
    eng_img *imgs; /* [n_imgs] ascending pos; NULL without images */
    int n_imgs;
    int32_t *mrope; /* [n_prompt][3] M-RoPE positions, with images only */
    int rope_delta; /* rotary position minus cache position after the prompt */
};

struct eng_seq {
    eng_req *req;
    int index; /* which of the n samples */
    seq_state state;
    int32_t *tokens; /* [n_tokens] prompt then generated tokens */
    int n_tokens, cap_tokens, n_prompt;
    int n_computed; /* tokens whose KV / state are in the cache */
    int32_t *table; /* [n_table] KV block ids */
    int n_table, cap_table;
    int slot;         /* live state slot, -1 while waiting */
    blk_hash *hashes; /* [n_hashes] chain hash of each full block of tokens */
    int n_hashes, cap_hashes;
    int pend_snap;   /* snapshot slot taken at the latest decode block boundary, or -1 */
    int pend_blocks; /* blocks that snapshot covers */
    bool admitted_once, forked_now;
    int cached_prompt; /* prompt tokens served from the prefix cache at first admission */
    int n_preempted;
    double t_scheduled, t_first_token;
    /* output */
    cllm_tok_stream detok;
    char *text; /* all output text so far (complete UTF-8 characters) */
    size_t text_len, text_cap, emitted;
    cllm_token_logprob *lp; /* [1 + logprobs] of the latest token */
    cllm_gm_matcher *gm;    /* structured output state, NULL when unconstrained */
    bool gm_on;             /* the constraint applies (after sp.grammar_after, if set) */
    /* speculative decoding (sched_spec.c) */
    int32_t draft[CLLM_SPEC_MAX_K]; /* this step's drafts, also written after tokens[n_tokens) */
    int n_draft;
    int spec_slot;               /* during a verify of a hybrid model: the slot holding the state
                                    before it (the live slot runs the verify), else -1 */
    double acc_hits, acc_trials; /* decayed counts of accepted / tried draft positions */
    int spec_idle;               /* steps since this sequence last drafted */
    int spec_explore;            /* verifies since it last tried one draft more than it chose */
    uint64_t spec_hash;          /* its verified drafts folded in order (engine.h's stats) */
    /* MTP drafts (sched_mtp.c): the target's final-normed hidden rows of positions mtp_pos ..
     * mtp_pos + mtp_n - 1 that the MTP head has not read yet; its KV is final below mtp_pos */
    float *mtp_hid;
    int mtp_cap, mtp_pos, mtp_n;
};

typedef struct sched_ent {
    eng_seq *seq;
    int n_new;
    bool logits;
    int n_draft; /* > 0: a verify row; its last n_draft + 1 positions give logits */
} sched_ent;

/* Measured step time by tokens in the step, state commits included, and the time of one MTP head
 * pass apart (sched_spec.c's cost model for choosing k): a pass reads the head's weights once
 * for all the rows drafting in it, so it is a cost per step and draft depth, not per token. */
#define SPEC_COST_N 256
#define SPEC_COST_R 5 /* samples per size the median is taken over */
/* Sequences per step that may verify drafts (bounds the logits buffer: a 248k vocabulary row is
 * 1 MB); past a few rows a verify does not pay anyway. */
#define SPEC_VERIFY_ROWS 16
/* Hidden rows an MTP sequence keeps for the head to read: at most SPEC_MTP_ROWS, and the rows of
 * all sequences together about SPEC_MTP_BYTES (a row is hidden_size floats: 8 KiB on the 35B
 * shape), at least SPEC_MTP_ROWS_MIN each. The oldest go past it, their MTP KV left as it was:
 * acceptance may drop there (a long prompt's early part, a row that has not drafted for long),
 * the output cannot change. */
#define SPEC_MTP_ROWS     4096
#define SPEC_MTP_ROWS_MIN 64
#define SPEC_MTP_BYTES    (64u << 20)
/* Tokens of finished outputs the suffix drafter remembers (a linear scan per draft: 64k tokens
 * take tens of microseconds). */
#define SPEC_HIST_TOKENS 65536
/* Step times as multiples of a unit of the host's pace (sched_spec.c: a shared host's memory
 * bandwidth swings 2x within a second, and a median of times taken in different swings priced a
 * verify at 2-3x a plain step it cost 1.3x of) */
typedef struct spec_cost {
    double t[SPEC_COST_N + 1]; /* a step of T tokens in units: median of recent samples; 0 = none */
    double r[SPEC_COST_N + 1][SPEC_COST_R]; /* the last SPEC_COST_R samples of each size, a ring */
    int n[SPEC_COST_N + 1];                 /* samples of each size so far */
    double pass_t, pass_r[SPEC_COST_R];     /* a head pass in units: median, samples */
    int pass_n;
    double pace; /* seconds per unit at the last step of a measured size; 0 = not yet */
    int prev_T;  /* the size of the last step recorded */
} spec_cost;

/* Grammar preparation thread (sched_gm.c). */
typedef struct gm_prep {
    pthread_t th;
    bool started;
    volatile bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv, done_cv;
    cllm_gm **jobs; /* grammars to prepare (a reference each) */
    int n_jobs, cap_jobs;
    cllm_gm_vocab *v; /* the token trie, built by the thread on its first job */
    bool v_failed;
    uint64_t done_gen; /* jobs finished */
    double prep_s;     /* time spent preparing */
} gm_prep;

struct sched {
    sched_cfg cfg;
    eng_model_ops ops;
    void *mctx;
    blk_mgr blocks;
    slot_mgr slots;
    smp_scratch smp;
    eng_req **reqs; /* live requests */
    int n_reqs, cap_reqs;
    eng_seq **running; /* admission order: the tail is preempted first */
    int n_running, cap_running;
    eng_seq **waiting; /* FCFS; preempted sequences go to the front */
    int n_waiting, cap_waiting;
    cllm_seq_batch *bseq; /* [batch_cap] the step's batch */
    sched_ent *bent;      /* [batch_cap] */
    int batch_cap, n_batch;
    float *logits;      /* [logit_rows_cap + score_rows][vocab_size] */
    int score_rows;     /* extra rows for scoring prefill chunks (sched_score.c), grown lazily */
    cllm_gm_vocab *gmv; /* token trie when the preparation thread could not start (fallback) */
    gm_prep prep;
    eng_req **gm_wait; /* constrained requests waiting for their grammar's preparation */
    int n_gm_wait, cap_gm_wait;
    uint32_t *gmask; /* [(vocab_size + 31) / 32] */
    cllm_engine_stats stats;
    double t_forward;
    uint64_t tokens_computed, steps;
    spec_cost cost;
    spec_hist hist;       /* suffix drafts: recently finished outputs */
    int logit_rows_cap;   /* rows of logits: batch_cap + room for verify rows */
    int logit_rows_extra; /* verify rows still free in the step being planned */
    int spec_k_step;      /* drafts per row chosen for the current step (sched_spec.c) */
    int spec_streak;      /* steps in a row with drafts (a plain one now and then: sched_spec.c) */
    int spec_plain_every; /* after that many: SPEC_PLAIN_EVERY, longer where drafting pays well */
    double spec_hits, spec_trials; /* every row's decayed acceptance counts (sched_spec.c prior) */
    eng_seq *spec_one; /* set: only this row drafts this step (one token: a batch's probe) */
    /* MTP (sched_mtp.c): the step's hidden rows [max_num_batched_tokens][hidden_size] and the
     * chained hidden rows of the verify rows [SPEC_VERIFY_ROWS][hidden_size]; the head's logits
     * use s->logits, free while a step is planned */
    float *mtp_step, *mtp_h;
    bool mtp_failed;       /* an MTP call failed once (logged; drafting stays off) */
    double step_draft_s;   /* drafting time of the step being planned: the cost model's share */
    int step_draft_passes; /* the head passes step_draft_s timed */
    double commit_s;       /* state commits after the last recorded step: the next record's share */
    int mtp_vocab;         /* the head's draft vocabulary (ids below it; 0 = all) */
    int mtp_rows;          /* MTP verify rows planned in this step */
    int mtp_keep;          /* unread hidden rows a sequence keeps at most (SPEC_MTP_*) */
    /* image input (sched_img.c): the step's embedding-row pointers and M-RoPE positions */
    const float **img_rows;
    int32_t *img_pos;
    int img_cap, img_used;
    /* the MTP head's M-RoPE positions of a call's prompt rows ([cap][3], sched_mtp.c) */
    int32_t *mtp_rope;
    int cap_mtp_rope;
};

/* sched_img.c */
cllm_status sched_img_copy(const sched_cfg *cfg, const cllm_request *r, eng_req *q,
                           cllm_error *err);
void sched_img_free(eng_req *q);
/* Mixes into a block's hash every image overlapping prompt positions [from, from + n). */
void sched_img_hash(const eng_req *q, int from, int n, XXH3_state_t *st);
/* Advances the encoding of the request's images that are not encoded and end after position
 * from, in work units charged to *budget (an image's units share its token count; at least one
 * unit runs per call, so an image progresses even behind a full batch; only one while the step
 * has other rows). 1: all encoded, 0: still encoding (the request waits), -1: failed (err). */
int sched_img_encode(sched *s, eng_req *q, int from, int *budget, cllm_error *err);
/* Sets b's embeds / mrope_pos / rope_delta for e's chunk (after batch_add filled the rest). */
void sched_img_bind(sched *s, eng_seq *e, cllm_seq_batch *b);
/* The MTP head's rotary positions for m's rows (the target's of the same positions): rows of
 * an image request inside its prompt take buf ([m->n_tokens][3]; returns the rows used), later
 * rows its rope_delta, others nothing (0). */
int sched_img_mtp_pos(const eng_seq *e, cllm_mtp_seq *m, int32_t *buf);
cllm_status sched_img_init(sched *s);
void sched_img_release(sched *s);

/* sched.c */
/* Doubling growth of a scheduler array to hold need elements (sched.c); CLLM_ENOMEM on out of
 * memory (the array is left as it was). */
cllm_status sched_grow(void **p, int *cap, int need, size_t elem);
void sched_seq_finish(sched *s, eng_seq *e);
void sched_add_now(sched *s, eng_req *q); /* sched_add without the grammar hold */
/* sched_gm.c */
void sched_gm_init(sched *s);
void sched_gm_free(sched *s);             /* stops the thread; held requests end with ABORT */
bool sched_gm_hold(sched *s, eng_req *q); /* true: q waits in gm_wait for its grammar */
int sched_gm_admit(sched *s);             /* queues the held requests now prepared */
bool sched_gm_cancel(sched *s, uint64_t id);
void sched_gm_idle_wait(sched *s, double max_s); /* until a preparation ends, at most max_s */
const cllm_gm_vocab *sched_gm_vocab(sched *s);
/* Appends a row's computed tokens to the cache bookkeeping: n_computed, prompt-token stats, block
 * hashes and GDN snapshots (decode: the latest boundary is kept pending, not committed). */
void sched_after_compute(sched *s, eng_seq *e, int n_new, bool decode);
/* sched_spec.c */
/* Drafts for a running sequence that is decoding; returns the drafts to verify with it this
 * step (0: a plain decode row) and, for hybrid models, has copied its state to e->spec_slot. */
int sched_spec_plan(sched *s, eng_seq *e, int budget);
/* Chooses the step's draft count from the cost model and the rows' acceptance (before plan). */
void sched_spec_begin_step(sched *s);
/* Records a forward's time for the cost model. */
void sched_spec_record(sched *s, int step_tokens, double seconds, double draft_s, int passes);
/* Samples a verify row's k + 1 logits rows, accepts the drafts the sampler agrees with, and
 * leaves the sequence's cache at its accepted tokens (rolling the GDN state back if needed). */
void sched_spec_accept(sched *s, const sched_ent *t, const float *rows);
/* Gives back a sequence's verify slot (finish, preempt). */
void sched_spec_release(sched *s, eng_seq *e);
/* A sequence ended: its output joins the suffix history. */
void sched_spec_seq_done(sched *s, const eng_seq *e);
/* sched_mtp.c */
cllm_status sched_mtp_init(sched *s, cllm_error *err); /* buffers, when the method is MTP */
/* lm_head rows an MTP draft reads for the request's draft_vocab_size (0: the default,
 * CLLM_SPEC_DRAFT_VOCAB_DEFAULT), rounded up to 64; 0 = the whole vocabulary. */
int sched_mtp_vocab_rows(int draft_vocab_size, int vocab_size);
void sched_mtp_free(sched *s);
/* Points each batch entry's hidden_out into the step's rows (before the forward). */
void sched_mtp_bind(sched *s);
/* Keeps an entry's hidden rows after the forward, before anything is sampled. */
void sched_mtp_take(sched *s, eng_seq *e, const cllm_seq_batch *b);
/* Forgets rows of positions >= end (a verify's rejected drafts and the positions after them). */
void sched_mtp_keep(eng_seq *e, int end);
/* (Re)admission: positions from pos on are computed anew (its rows will come from there). */
void sched_mtp_restart(eng_seq *e, int pos);
/* A forked sample starts with its parent's rows (none on out of memory: it drafts a step later). */
void sched_mtp_fork(sched *s, eng_seq *c, const eng_seq *p);
/* True when e has the rows for a draft: every position up to the one before its last token. */
bool sched_mtp_ready(const eng_seq *e);
/* The drafts of the step's MTP verify rows (after planning, before the forward): the head over
 * each row's unread hidden rows in one call, then one call per further draft with the rows that
 * still need one, chained on the head's own output; written to e->draft and after e's tokens.
 * The rows' block tables cover n_tokens + nd - 1. A failed call leaves the placeholders (logged
 * once; drafting stays off). */
void sched_mtp_draft_all(sched *s);
/* sched_score.c: prompt logprobs from the rows of a CLLM_LOGITS_ALL prefill chunk */
cllm_status sched_score_alloc(eng_req *q, cllm_error *err); /* q->plp, at request creation */
bool sched_score_wants(const eng_seq *e); /* the next prefill chunk must return every row */
/* Cuts a scoring chunk to the rows the step can still hold (growing s->logits once, lazily);
 * other sequences' n_new is returned unchanged. */
int sched_score_cut(sched *s, const eng_seq *e, int n_new);
/* Fills q->plp from the chunk's rows (b: its batch entry, rows [b->n_tokens][vocab_size]). */
void sched_score_rows(sched *s, eng_seq *e, const cllm_seq_batch *b, const float *rows);
/* Puts the prompt logprobs on ev when they are complete and not sent yet. */
void sched_score_attach(eng_req *q, cllm_event *ev);
/* sched_out.c */
/* Samples the next token from logits (forced >= 0: that token instead of a draw, the synthetic
 * acceptance of benchmarks) and emits its event. Returns false when the sequence ended (it is
 * freed then). */
bool sched_sample_tok(sched *s, eng_seq *e, const float *logits, int forced);
void sched_sample(sched *s, eng_seq *e, const float *logits);
void sched_emit_final(sched *s, eng_seq *e, cllm_finish fin, const char *msg);
void sched_emit_unstarted(sched *s, eng_req *q, int index, cllm_finish fin, const char *msg);

#endif
