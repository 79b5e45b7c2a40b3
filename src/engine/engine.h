/* Engine API: what the HTTP server (and `cllm bench`) call. The engine owns the model, the paged
 * KV pool, the Gated DeltaNet state slots, the prefix cache and the scheduler thread.
 *
 * Flow: cllm_engine_submit() queues a request and returns at once; the engine's step loop
 * (continuous batching, chunked prefill) produces tokens and calls the request's event callback
 * from the engine thread. The callback must not block (the server copies the event into the
 * connection's queue and wakes the connection). cllm_engine_cancel() takes effect at the next
 * step; the request then ends with CLLM_FINISH_ABORT and every block/slot it held is freed.
 *
 * Thread safety: submit, cancel and stats may be called from any thread. */
#ifndef CLLM_ENGINE_ENGINE_H
#define CLLM_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/forward.h"

typedef struct cllm_engine cllm_engine;

typedef enum cllm_finish {
    CLLM_FINISH_NONE = 0, /* still running */
    CLLM_FINISH_STOP,     /* eos, stop token or stop string */
    CLLM_FINISH_LENGTH,   /* max_tokens or max_model_len reached */
    CLLM_FINISH_ABORT,    /* cancelled, client gone, or engine shutting down */
    CLLM_FINISH_ERROR,    /* failed after admission (message in the event) */
} cllm_finish;

typedef struct cllm_sampling {
    double temperature;                                             /* 0 = greedy */
    double top_p;                                                   /* 1 = off */
    int top_k;                                                      /* 0 or -1 = off */
    double min_p;                                                   /* 0 = off */
    double repetition_penalty, presence_penalty, frequency_penalty; /* 1, 0, 0 = off */
    uint64_t seed;                                                  /* used when has_seed */
    bool has_seed;
    int max_tokens; /* generated tokens cap (<= 0: up to max_model_len) */
    int min_tokens;
    bool ignore_eos;
    const int *stop_token_ids; /* borrowed until submit returns (copied) */
    int n_stop_token_ids;
    const char *const *stop; /* stop strings, copied at submit */
    int n_stop;
    bool include_stop_str_in_output;
    bool skip_special_tokens;
    int logprobs; /* top logprobs to return per token; -1 = none, 0 = chosen only */
    /* prompt logprobs (vLLM's prompt_logprobs), when has_prompt_logprobs (false in a zeroed
     * struct): for every prompt token after the first, its logprob and rank plus the top
     * prompt_logprobs (0 = the token only) of the row before it. Computed from the prefill's
     * logits rows (one prefill); such a request does not read the prefix cache (its rows must
     * be computed), as vLLM does. Delivered once, on the request's first event. */
    bool has_prompt_logprobs;
    int prompt_logprobs;
    /* pooling (/v1/embeddings): no sampling; the request's one event carries the last prompt
     * token's final hidden state (vLLM's LAST pooling, not normalised) and ends it (n = 1) */
    bool embed;
    const int *logit_bias_ids; /* parallel arrays, copied */
    const float *logit_bias_vals;
    int n_logit_bias;
    int n; /* parallel samples sharing the prompt (>= 1) */
    /* Structured output (grammar/grammar.h): every sample's tokens are masked to the grammar
     * before temperature/top-p, and EOS is allowed only where it accepts. The engine takes its
     * own reference at submit. NULL = unconstrained. */
    struct cllm_gm *grammar;
    int grammar_after; /* > 0: the constraint starts after this token (</think>); else at once */
    /* this request's rows draft nothing on an engine with speculative decoding: `cllm bench`
     * alternates such runs with speculative ones on one engine, so a noisy host's swings fall on
     * both alike. Not a request field of the HTTP API (vLLM has none). */
    bool no_speculation;
} cllm_sampling;

/* Defaults: greedy unless generation_config says otherwise; the engine fills these from the
 * model's generation_config.json. */
void cllm_sampling_defaults(const cllm_engine *e, cllm_sampling *s);

typedef struct cllm_token_logprob {
    int token;
    float logprob;
} cllm_token_logprob;

/* One entry of a prompt-logprob row; double, so a sum over a long prompt keeps the precision
 * of an offline evaluation (`cllm eval --logprobs`). */
typedef struct cllm_prompt_logprob {
    int token;
    int rank; /* 1 + entries of the row with a logit above the token's (ties count), as vLLM */
    double logprob;
} cllm_prompt_logprob;

typedef struct cllm_event {
    uint64_t request_id;
    int index;        /* which of the n samples */
    const char *text; /* new UTF-8 text (complete characters only), may be "" */
    size_t text_len;
    const int *token_ids; /* tokens produced by this step for this sample */
    int n_tokens;
    const cllm_token_logprob *logprobs; /* [n_tokens][1 + top] when requested, else NULL */
    int n_top_logprobs;
    /* sampling.has_prompt_logprobs: on the request's first event (of any sample), rows for
     * prompt tokens 1..n_prompt-1, each [1 + n_prompt_top]: the prompt token, then the row's
     * best n_prompt_top (descending, lower id first on ties); NULL on every other event */
    const cllm_prompt_logprob *prompt_lp;
    int n_prompt_lp, n_prompt_top;
    const float *embedding; /* sampling.embed: [n_embedding] on the final event, else NULL */
    int n_embedding;
    cllm_finish finish; /* != NONE on the last event of this sample */
    const char *error;  /* CLLM_FINISH_ERROR only */
    /* why a CLLM_FINISH_STOP stopped (vLLM's stop_reason): the stop string matched, or the
     * stop_token_ids entry sampled; neither for EOS */
    const char *stop_str;
    bool has_stop_token;
    int stop_token;
    /* usage, valid on the last event */
    int prompt_tokens, completion_tokens, cached_prompt_tokens;
    /* timing (monotonic seconds), valid on the last event */
    double t_arrival, t_scheduled, t_first_token, t_finished;
} cllm_event;

/* Called from the engine thread; must return quickly. All pointers valid only during the call. */
typedef void (*cllm_event_fn)(void *user, const cllm_event *ev);

/* An image of a prompt (issue 34): its preprocessed patches (image/image.h's
 * cllm_image_preprocess: [grid t*h*w][channels * temporal_patch * patch^2] floats) and where
 * its pad tokens sit. The prompt holds exactly grid t*h*w / merge^2 image-pad tokens
 * (config image_token_id) from pos on; the vision tower's rows replace their embeddings and
 * they take 3-D M-RoPE positions. */
typedef struct cllm_image_input {
    const float *pixels; /* copied at submit */
    int grid[3];         /* t, h, w in patches */
    int pos;             /* prompt index of the image's first pad token */
    /* content hash (the prefix cache keys the image's tokens by it: the same image twice hits,
     * two different images behind the same text do not); both 0: the engine hashes pixels */
    uint64_t hash[2];
} cllm_image_input;

typedef struct cllm_request {
    const int *prompt; /* token ids, copied at submit */
    int n_prompt;
    cllm_sampling sampling;
    cllm_event_fn on_event;
    void *user;
    const char *cache_salt;         /* optional: isolates prefix-cache sharing (NULL = shared) */
    const cllm_image_input *images; /* [n_images], ascending pos; refused by a model without a
                                       vision tower and under tensor parallel */
    int n_images;
} cllm_request;

struct cllm_batch; /* model/forward.h */

/* Tensor parallel (cli/serve_tp.c): the engine on rank 0 tells the other ranks every operation
 * its scheduler makes on the model and its pools, just before making it, so they run the same
 * one (cllm_engine_follow_* below). Called on the engine thread, except sizes (in create, on
 * every rank: may replace this rank's planned pool sizes by rank 0's) and close (in free,
 * after the engine thread has stopped). A non-OK status from forward fails that forward. */
typedef struct cllm_engine_mirror {
    void *user;
    cllm_status (*sizes)(void *user, uint64_t *n_blocks, int *max_len, int *n_live, int *n_snap,
                         cllm_error *err);
    cllm_status (*forward)(void *user, const struct cllm_batch *b, cllm_error *err);
    void (*copy_block)(void *user, int dst, int src);
    void (*copy_state)(void *user, int dst, int src);
    void (*close)(void *user);
    /* after a forward failed: may replace err's message by its cause (a rank died) */
    void (*explain)(void *user, cllm_error *err);
    /* a state commit after the last forward (eng_model_ops.commit_state); NULL: the engine
     * does not commit (recomputes instead) */
    void (*commit_state)(void *user, int seq, int n, int slot);
} cllm_engine_mirror;

/* Speculative decoding (docs/internals/spec.md). Drafts are proposed per decoding sequence,
 * verified in one forward over the k + 1 positions and accepted as the longest prefix the
 * sampler agrees with, plus the sampler's own token at the first disagreement: the sampler draws
 * each position exactly as without speculation (its randomness depends only on seed, sample and
 * step), so greedy and seeded output is bitwise the output without it. */
typedef enum cllm_spec_method {
    CLLM_SPEC_NONE = 0,
    CLLM_SPEC_NGRAM,  /* prompt lookup in the sequence's own tokens */
    CLLM_SPEC_SUFFIX, /* the same in its own tokens and recently finished outputs */
    CLLM_SPEC_MTP     /* the checkpoint's MTP head, chained for k > 1 (sched_mtp.c) */
} cllm_spec_method;
#define CLLM_SPEC_MAX_K 16
/* Tokens a verify of k drafts yields at per-position acceptance a: 1 + a + ... + a^k (the
 * scheduler's choice of k, bench-forward's estimate). */
double cllm_spec_expected_tokens(double a, int k);
typedef struct cllm_spec_opts {
    cllm_spec_method method;
    int num_speculative_tokens;               /* cap on drafts per step, 1..CLLM_SPEC_MAX_K */
    int prompt_lookup_min, prompt_lookup_max; /* ngram: n-gram lengths tried, longest first */
    double synthetic_acceptance;              /* > 0: benchmarks only: each draft position is
                                                 accepted with this probability (the draft token
                                                 is then forced), whatever the model says; the
                                                 output is not the model's */
    bool fixed_k; /* always draft num_speculative_tokens (no cost model): verify-cost curves */
    int disable_by_batch_size; /* > 0: no drafts while this many sequences or more run */
    /* suffix: longest match looked for, requests remembered, drafts per matched token */
    int suffix_max_depth, suffix_max_cached_requests;
    double suffix_max_spec_factor;
    /* mtp: the head's lm_head pass covers token ids below this only (a cllm key; 0 = the
     * default, CLLM_SPEC_DRAFT_VOCAB_DEFAULT; the vocabulary's size or more = all of it): the head
     * then reads that many rows instead of the whole vocabulary per draft */
    int draft_vocab_size;
} cllm_spec_opts;

/* MTP drafts' vocabulary when the request names none: the first 65536 token ids. A draft over
 * Qwen3.5's whole 248k vocabulary reads as many lm_head rows as the verify does (on the quarter
 * shape 10 ms of a 28 ms step), which left own-k drafting little; these ids cover 98% of English
 * and code tokens and 69% of Chinese ones (docs/internals/spec.md), and only the acceptance can
 * change, never the output. */
#define CLLM_SPEC_DRAFT_VOCAB_DEFAULT 65536

/* Token budget per engine step when none is given (vLLM's 2048): cllm_engine_opts_defaults, an
 * engine created with 0, `serve`'s -b and the floor of `bench`'s budget all read it. */
#define CLLM_MAX_NUM_BATCHED_TOKENS_DEFAULT 2048

typedef struct cllm_engine_opts {
    const char *model_dir;
    int n_threads;               /* 0 = all cores */
    int max_model_len;           /* 0 = min(max_position_embeddings, what KV memory allows) */
    int max_num_seqs;            /* default 256 (vLLM) */
    int max_num_batched_tokens;  /* default CLLM_MAX_NUM_BATCHED_TOKENS_DEFAULT */
    int block_size;              /* default 16 */
    uint64_t kv_cache_bytes;     /* 0 = from memory_utilization */
    double memory_utilization;   /* share of physical RAM for weights + KV + state (default 0.5) */
    bool enable_prefix_caching;  /* default true */
    int state_snapshot_interval; /* GDN snapshot every N blocks (default 1 = each block boundary
                                    reached at end of prefill/turn) */
    uint64_t state_snapshot_bytes; /* budget for GDN state snapshots (0 = auto) */
    int max_queued_requests;       /* admission control; 0 = unbounded */
    bool kv_cache_bf16;        /* KV cache in bf16 instead of fp32 (half the memory; logits differ
                                  slightly) */
    bool ssm_state_bf16;       /* GDN recurrent state in bf16 instead of fp32 (vLLM's
                                  --mamba-ssm-cache-dtype bfloat16: half the state memory and its
                                  traffic per step; logits differ slightly) */
    const char *tokenizer_dir; /* tokenizer.json from here (NULL = model_dir) */
    /* sampling defaults and end tokens (vLLM's --generation-config): NULL or "auto" the model's
     * generation_config.json, "vllm" neutral sampling (end tokens still the model's), else a
     * folder holding the generation_config.json to use */
    const char *generation_config;
    const char *override_generation_config; /* JSON object over it, or NULL */
    bool skip_tokenizer_init;               /* no tokenizer even if one exists (token ids only) */
    int gdn_prefill; /* Gated DeltaNet prefill: a cllm_gdn_prefill (model/forward.h), 0 recurrent */
    const cllm_engine_mirror *mirror; /* tensor parallel (NULL otherwise); borrowed */
    cllm_spec_opts spec;              /* method NONE = off */
    bool no_prefault;  /* skip touching every weight page at start-up (cllm_model_prefault): the
                          first requests then pay the page faults and disk reads, e.g. of cold
                          embedding rows (5 ms per decoded token on the quarter shape) */
    cllm_fwd_opts fwd; /* how the model runs (act16, lm_head screening, ...); zeroed: defaults */
} cllm_engine_opts;

void cllm_engine_opts_defaults(cllm_engine_opts *o);

/* Loads the model, sizes the pools, starts the step thread. Logs a line like
 * "KV: N blocks = M tokens; state slots: K". */
cllm_status cllm_engine_create(const cllm_engine_opts *o, cllm_engine **out, cllm_error *err);
/* Stops the step thread (running requests end with ABORT) and frees everything. */
void cllm_engine_free(cllm_engine *e);

/* Queues a request. On success *id is set and events will follow. Fails synchronously (no events)
 * with CLLM_EINVAL for a bad request (message in vLLM's words for over-length prompts), or
 * CLLM_EBUSY when the queue is full or the engine is draining. */
cllm_status cllm_engine_submit(cllm_engine *e, const cllm_request *r, uint64_t *id,
                               cllm_error *err);
/* Idempotent; unknown or finished ids are ignored. */
void cllm_engine_cancel(cllm_engine *e, uint64_t id);
/* Stop accepting new requests; running ones continue. */
void cllm_engine_drain(cllm_engine *e);

typedef struct cllm_engine_stats {
    int running, waiting;
    uint64_t kv_blocks_total, kv_blocks_used;
    int state_slots_total, state_slots_used;
    uint64_t prefix_queries_tokens, prefix_hits_tokens; /* vLLM counts tokens */
    uint64_t prefill_tokens_saved;
    uint64_t preemptions;
    uint64_t prompt_tokens, generation_tokens; /* processed totals */
    uint64_t requests_finished[5];             /* by cllm_finish */
    uint64_t admission_rejections;
    int block_size, max_model_len;
    bool prefix_caching;
    /* tokens run per engine step (vLLM's vllm:iteration_tokens_total): counts per bucket of
     * CLLM_ITER_BOUNDS (non-cumulative, the last is +Inf), their sum, the number of steps */
#define CLLM_ITER_N_BOUNDS 13
    uint64_t iter_tokens_counts[CLLM_ITER_N_BOUNDS + 1];
    uint64_t iter_tokens_sum, iter_steps;
    /* structured outputs: wall time the engine thread spent computing grammar masks and
     * advancing matchers (time every row of the batch waits), and the masks computed */
    double grammar_s;
    uint64_t grammar_masks;
    double grammar_prep_s; /* spent preparing grammars on the helper thread (not the batch's) */
    /* speculative decoding (vLLM's vllm:spec_decode_*): verify rows run, draft tokens proposed,
     * drafts accepted, and accepted drafts by position (0 = the first draft) */
    uint64_t spec_drafts, spec_draft_tokens, spec_accepted_tokens;
    uint64_t spec_accepted_per_pos[CLLM_SPEC_MAX_K];
    /* verifies of a hybrid model whose accepted positions were committed from the verify's saved
     * inputs (no recompute in the next step) */
    uint64_t spec_commits;
    /* per finished sequence, its verified draft tokens folded in order, h = (h ^ (token + 1)) *
     * 0x100000001b3 from 0; the sum over sequences: a test compares the drafts themselves, not
     * only how many were accepted, however the sequences interleaved */
    uint64_t spec_draft_hash;
    int spec_k; /* num_speculative_tokens (0 = off) */
    /* image input: images run through the vision tower, the tokens they became, its time */
    uint64_t images_encoded, image_tokens;
    double image_encode_s;
} cllm_engine_stats;

/* vLLM's bucket bounds for tokens per engine step. */
#define CLLM_ITER_BOUNDS                                                                           \
    { 1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384 }

void cllm_engine_stats_get(cllm_engine *e, cllm_engine_stats *s);

/* Tokenizer access for the server (NULL if the model has none). */
struct cllm_tok;
const struct cllm_tok *cllm_engine_tokenizer(const cllm_engine *e);

/* What image input needs from the model (issue 34): present when the model's vision tower is
 * bound and images can be served (not under tensor parallel); the processor's patch geometry;
 * the placeholder token ids (-1 when the config has none). */
typedef struct cllm_vision_info {
    bool present;
    const char *why_not; /* when !present and the checkpoint has a tower: the reason */
    int patch_size, temporal_patch_size, merge_size, in_channels;
    int image_token_id, vision_start_token_id, vision_end_token_id;
} cllm_vision_info;
void cllm_engine_vision(const cllm_engine *e, cllm_vision_info *vi);

/* Extensions (engine owner, for `cllm bench` and tests). */
/* Drops every cached prefix block and GDN state snapshot before the next step (a cold cache). */
void cllm_engine_reset_prefix_cache(cllm_engine *e);
/* Seconds spent inside forward calls and tokens run through them since creation. */
void cllm_engine_forward_time(cllm_engine *e, double *seconds, uint64_t *tokens);

/* Tensor parallel ranks > 0 (an engine whose requests come from rank 0's mirror, never from
 * submit): the operations rank 0's scheduler made, run on this engine's model and pools. Call
 * from one thread; logits are computed (and dropped: rank 0 samples). */
cllm_status cllm_engine_follow_forward(cllm_engine *e, const struct cllm_batch *b, cllm_error *err);
void cllm_engine_follow_copy_block(cllm_engine *e, int dst, int src);
void cllm_engine_follow_copy_state(cllm_engine *e, int dst, int src);
void cllm_engine_follow_commit_state(cllm_engine *e, int seq, int n, int slot);

#endif
