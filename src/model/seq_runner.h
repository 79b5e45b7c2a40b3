/* A one-sequence forward runner over a private KV pool and state slot (used by generate, eval,
 * bench-forward and the quantizer's calibration), and the token-list parser those share. */
#ifndef CLLM_MODEL_SEQ_RUNNER_H
#define CLLM_MODEL_SEQ_RUNNER_H

#include <stdint.h>

#include "model/forward.h"

/* Parses "1,2,3", "1 2 3" or "@FILE" (ids separated by commas/whitespace). Returns a malloc'd
 * array in *out (caller frees) and the count, or -1 with a message in err. */
int cllm_parse_token_list(const char *arg, int32_t **out, cllm_error *err);

/* One sequence: model + ctx + pools + its block table. */
typedef struct cllm_seq_runner {
    cllm_model *m;
    cllm_pool *pool;
    cllm_fwd_ctx *ctx;
    cllm_kv_pool kv;
    cllm_state_pool st;
    int32_t *table;
    int n_table;
    int pos; /* tokens already in the cache */
    /* copied into the batch of every LAST step (forward.h: tensor parallel, the screened lm_head):
     * 0 = exact */
    int logits_topk;
    float logits_scale;
} cllm_seq_runner;

/* max_tokens: capacity of the cache (prompt + generated). fwd: NULL = defaults. */
cllm_status cllm_seq_runner_open(cllm_seq_runner *r, const char *model_dir,
                                 const cllm_fwd_opts *fwd, int threads, int max_tokens,
                                 int block_size, cllm_kv_dtype kv_dtype, cllm_error *err);
void cllm_seq_runner_close(cllm_seq_runner *r);
/* Replaces the runner's (empty) state pool by one whose recurrent state is of type dtype; call
 * before the first step. */
cllm_status cllm_seq_runner_set_state_dtype(cllm_seq_runner *r, cllm_kv_dtype dtype,
                                            cllm_error *err);
/* Appends n tokens; logits (NULL allowed with mode NONE) gets 1 or n rows per mode. */
cllm_status cllm_seq_runner_step(cllm_seq_runner *r, const int32_t *toks, int n,
                                 cllm_logits_mode mode, float *logits, cllm_error *err);

#endif
