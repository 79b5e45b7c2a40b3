/* bench-serve datasets: what each request asks. A dataset is a list of conversations; a
 * single-turn dataset has conversations of one turn. The client (client.c) walks them in order,
 * cycling when a run needs more requests than there are conversations.
 *
 * Sources:
 *   random    prompts of random common words (the server tokenizes, so a word with its leading
 *             space is ~1 token), lengths uniform in [len*(1-r), len*(1+r)] as vLLM's
 *             --random-range-ratio, an optional shared prefix of prefix_len words, and optional
 *             turns > 1 for multi-turn conversations (each turn a fresh random question).
 *   jsonl     one object per line: {"prompt": "...", "max_tokens": N} (also "output_len"),
 *             {"turns": ["q1", "q2", ...], "max_tokens": N}, or
 *             {"messages": [{"role": "user", "content": "..."}, ...]} (the user messages become
 *             the turns; assistant messages are replaced by the server's own answers).
 *             Lines starting with '#' and blank lines are skipped. */
#ifndef CLLM_LOADGEN_DATASET_H
#define CLLM_LOADGEN_DATASET_H

#include <stdint.h>

#include "base/status.h"

typedef struct lg_turn {
    char *prompt;   /* owned, NUL-terminated */
    int est_tokens; /* estimated prompt tokens (words for random; bytes/4 for files) */
    int max_tokens; /* requested output length */
} lg_turn;

typedef struct lg_conv {
    lg_turn *turns; /* [n_turns], owned */
    int n_turns;
} lg_conv;

typedef struct lg_dataset {
    lg_conv *convs; /* [n], owned */
    long n;
} lg_dataset;

typedef struct lg_random_opts {
    long n;             /* conversations */
    int input_len;      /* words per prompt (before range ratio), excluding the prefix */
    int output_len;     /* max_tokens per turn */
    double range_ratio; /* 0..1 */
    int prefix_len;     /* shared prefix words, same for every prompt */
    int turns;          /* turns per conversation, >= 1 */
    uint64_t seed;
} lg_random_opts;

cllm_status lg_dataset_random(const lg_random_opts *o, lg_dataset *ds, cllm_error *err);

/* Loads a JSONL file. default_max_tokens applies where a line names none. */
cllm_status lg_dataset_jsonl(const char *path, int default_max_tokens, lg_dataset *ds,
                             cllm_error *err);

void lg_dataset_free(lg_dataset *ds);

#endif
