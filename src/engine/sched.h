/* Scheduler core: requests, sequences, continuous batching with chunked prefill, preemption by
 * recompute, prefix caching (KV blocks by hash chain + GDN state snapshots), sampling and output
 * events. Synchronous and single-threaded: engine.c runs it on the engine thread; tests drive it
 * step by step with a fake model and check invariants after every step.
 *
 * The model is a function table (eng_model_ops), so the same scheduler runs the real forward pass
 * (engine.c) or a scripted fake (tests/lib/test_engine_fake.h). */
#ifndef CLLM_ENGINE_SCHED_H
#define CLLM_ENGINE_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/blocks.h"
#include "engine/engine.h"
#include "model/forward.h"

struct cllm_tok;

/* What the scheduler needs from a model. Block ids index the KV pool, slots the state pool
 * (live slots [0, n_live), snapshots [n_live, n_live + n_snap)). */
typedef struct eng_model_ops {
    /* Runs one ragged batch; logits gets cllm_batch_logit_rows(b) rows of vocab_size floats. */
    cllm_status (*forward)(void *ctx, const cllm_batch *b, float *logits, cllm_error *err);
    void (*copy_block)(void *ctx, int dst, int src); /* KV block contents (n > 1 fork) */
    void (*copy_state)(void *ctx, int dst, int src); /* state slot (snapshots, fork) */
    /* The MTP head (cllm_forward_mtp; its KV lives in the same blocks); NULL: the model has
     * none. Needed by speculative method MTP only. */
    cllm_status (*mtp)(void *ctx, const cllm_mtp_seq *seqs, int n_seqs, float *logits,
                       cllm_error *err);
    /* The vision tower over one image's patches in work units (model/vision.h's job): start
     * gives a job and its unit count (NULL on error), run does up to n units, the last writing
     * out (grid t*h*w / merge^2 rows of hidden_size floats) and setting *done; free drops a job
     * at any point. NULL start: no image input. */
    void *(*image_start)(void *ctx, const float *pixels, const int grid[3], int *units,
                         cllm_error *err);
    cllm_status (*image_run)(void *ctx, void *job, int n_units, float *out, bool *done,
                             cllm_error *err);
    void (*image_free)(void *ctx, void *job);
    /* Moves state slot `slot` past the first n tokens of batch row seq of the last forward, a
     * row that had state_save (cllm_forward_state_commit): a verify whose later drafts were
     * rejected keeps its accepted positions without computing them again. NULL, or false
     * returned: the scheduler recomputes them in the next step instead. */
    bool (*commit_state)(void *ctx, int seq, int n, int slot);
} eng_model_ops;

typedef struct sched_cfg {
    int vocab_size;
    int hidden_size; /* embeddings' and MTP rows' width (0: neither); <= vocab_size */
    bool has_state;  /* model has GDN layers: prefix reuse needs a state snapshot */
    int n_blocks, block_size;
    int n_live_slots, n_snap_slots;
    int max_num_seqs, max_num_batched_tokens, max_model_len;
    bool prefix_caching;
    int snapshot_interval; /* commit prefill-boundary snapshots every N blocks (>= 1) */
    int eos_ids[CLLM_MAX_EOS];
    int n_eos;
    const struct cllm_tok *tok; /* may be NULL: no text, stop strings never match */
    cllm_spec_opts spec;        /* speculative decoding; method NONE = off */
    /* image input: the vision tower's spatial merge (0: images refused, with vision_refused as
     * the reason when set), values per patch, and the pad token images sit on */
    int vision_merge, vision_patch_dim, image_token_id;
    const char *vision_refused;
} sched_cfg;

typedef struct eng_req eng_req;
typedef struct sched sched;

/* Validates r against cfg (vLLM's max-model-len text on over-length) and deep-copies it into a
 * new request (prompt, stop strings, ids, bias). Thread-safe (reads cfg only). */
cllm_status sched_req_new(const sched_cfg *cfg, const cllm_request *r, uint64_t id,
                          double t_arrival, eng_req **out, cllm_error *err);
void sched_req_free(eng_req *q);

cllm_status sched_create(const sched_cfg *cfg, const eng_model_ops *ops, void *model_ctx,
                         sched **out, cllm_error *err);
/* Ends every live request with ABORT (events emitted) and frees everything. */
void sched_free(sched *s);
/* Takes ownership of q and queues it (FCFS). */
void sched_add(sched *s, eng_req *q);
/* Ends the request with ABORT (events emitted now) and frees its blocks/slots; unknown ids are
 * ignored. */
void sched_cancel(sched *s, uint64_t id);
/* Runs one scheduler step (plan, forward, sample, emit). Returns the number of sequences run
 * (0 when idle). A forward failure ends the batch's requests with ERROR and is not fatal. */
int sched_step(sched *s);
bool sched_has_work(const sched *s);
/* Invariants: block ref counts equal the sum over block tables, no leaked block or slot, free
 * list / LRU / index consistent, partially written blocks are exclusive, distinct live slots.
 * Returns NULL or a static description of the first violation. */
const char *sched_check(const sched *s);
void sched_stats(const sched *s, cllm_engine_stats *st);
/* Drops every cached block and snapshot (a cold start for tests and the bench). */
void sched_reset_prefix_cache(sched *s);
/* Seconds spent in forward calls and tokens computed, since creation (for the bench). */
void sched_timing(const sched *s, double *t_forward, uint64_t *tokens_computed);

#endif
