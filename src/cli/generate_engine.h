/* `cllm generate` through the engine (speculative decoding): one request, streamed to stdout,
 * timings and acceptance on stderr (generate_engine.c). */
#ifndef CLLM_CLI_GENERATE_ENGINE_H
#define CLLM_CLI_GENERATE_ENGINE_H

#include <stdbool.h>

#include "engine/engine.h"

typedef struct gen_engine_args {
    const char *model_dir;
    const int *prompt;
    int n_prompt, n_gen;
    cllm_sampling sampling; /* as the direct path fills it (grammar included) */
    cllm_spec_opts spec;
    cllm_fwd_opts fwd;
    int threads, block_size, gdn_prefill;
    bool kv_bf16, ssm_bf16, print_ids;
} gen_engine_args;

/* Returns the exit code (0, 1 runtime failure, 2 refused request). */
int generate_engine(const gen_engine_args *a);

#endif
