/* Quality/speed evaluation of quantized models (`cllm eval --ppl / --compare / --table`):
 * perplexity over strided windows, KL divergence and top-1 agreement against a 16-bit base
 * over the same positions, BLEU-4 of greedy generations against the base's, file size, RSS,
 * prefill and decode tok/s. */
#ifndef CLLM_QUANT_QEVAL_H
#define CLLM_QUANT_QEVAL_H

#include <stdbool.h>
#include <stdio.h>

#include "model/forward.h"

typedef struct cllm_qeval_opts {
    const char *model;   /* the model under test (or the base row of --table) */
    const char *tokens;  /* "@FILE" or ids: the evaluation text as token ids */
    const char *compare; /* BASE model dir, or NULL */
    const char *table;   /* comma-separated model dirs compared against `model` as base */
    int ctx, stride;     /* window length and stride (stride <= ctx) */
    int n_prompts, prompt_len, gen_len;
    int threads;
    FILE *progress; /* a line per 10% of each model's run (and per 30 s), stderr; NULL = silent */
    bool tty;       /* progress is a terminal: one bar redrawn with \r instead */
    cllm_fwd_opts fwd; /* how every model compared runs (zeroed: defaults) */
    /* KV cache and recurrent state element types of the model(s) under test; the base runs
     * float32 (so `--compare` of a model against itself measures what they cost) */
    cllm_kv_dtype kv_dtype, ssm_dtype;
} cllm_qeval_opts;

/* Returns 0 ok, 1 failure, 2 usage (messages on stderr). */
int cllm_qeval_run(const cllm_qeval_opts *o, FILE *out);

#endif
