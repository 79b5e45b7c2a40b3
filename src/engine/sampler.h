/* Sampler: one logits row -> one token id (+ logprobs). Called by the scheduler (sched.c) after
 * each forward call, once per sequence that asked for logits.
 *
 * Order of processing (vLLM's): logit_bias -> forbidden ids (EOS/stop ids before min_tokens) ->
 * grammar mask (structured outputs) ->
 * repetition penalty (prompt + output tokens) -> frequency / presence penalties (output tokens)
 * -> greedy argmax if temperature < 1e-5 (ties: lowest id) -> temperature -> top_k -> top_p ->
 * min_p -> draw. Logprobs are the log-softmax of the raw model logits (vLLM's default
 * "raw_logprobs").
 *
 * Reproducibility: the uniform draw for sample `index` at output step `step` is a hash of
 * (seed, index, step), so a seeded request gives the same tokens whatever the batch, thread count
 * or preemptions. */
#ifndef CLLM_ENGINE_SAMPLER_H
#define CLLM_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"

typedef struct smp_pair {
    float x;
    int id;
} smp_pair;

/* Scratch buffers for one vocabulary; one per scheduler (not thread-safe). */
typedef struct smp_scratch {
    int V;
    float *x;       /* [V] processed logits */
    smp_pair *pair; /* [V] */
    int *cnt;       /* [V] output-token counts, kept zero between calls */
    uint8_t *seen;  /* [V] prompt-or-output flags, kept zero between calls */
    int32_t *ids;   /* [V] the ids a grammar mask allows */
} smp_scratch;

int smp_init(smp_scratch *s, int vocab_size); /* 0 or -1 */
void smp_free(smp_scratch *s);

typedef struct smp_input {
    const float *logits;   /* [V] raw, not modified */
    const int32_t *prompt; /* for the repetition penalty */
    int n_prompt;
    const int32_t *out; /* tokens generated so far */
    int n_out;
    const int *forbid; /* ids set to -inf (EOS/stop ids before min_tokens) */
    int n_forbid;
    uint64_t seed;
    int index, step;
    const uint32_t *allow; /* [(V + 31) / 32] structured-output mask (bit set = allowed) or NULL;
                              applied after logit_bias and the forbidden ids */
} smp_input;

/* Returns the token. When p->logprobs >= 0, lp receives 1 + p->logprobs entries: the chosen
 * token first, then the top ones by raw logit. */
int smp_sample(smp_scratch *s, const cllm_sampling *p, const smp_input *in, cllm_token_logprob *lp);

/* Tensor parallel and the screened lm_head (model/forward.h, cllm_seq_batch.logits_topk): the k
 * for which smp_sample picks the same token from a row that is exact only at its k best entries
 * (logit * *scale descending, then lowest id) and -inf elsewhere, or 0 when it needs the whole row.
 * Greedy is k = 1 at scale 1. Top-k sampling (1 <= top_k <= CLLM_LOGITS_TOPK_MAX) is k = top_k at
 * scale 1 / temperature, the factor applied before ordering, so ties fall the same way; top-p and
 * min-p then act on those k only. Logprobs, logit_bias, forbidden ids (forbid), a grammar mask
 * (mask) and the penalties read or change entries outside the best k: 0. So does sampling
 * without top_k, where every token has a weight. */
int smp_reduce_k(const cllm_sampling *p, int vocab_size, bool forbid, bool mask, float *scale);

/* Uniform double in [0, 1) from (seed, index, step). */
double smp_uniform(uint64_t seed, int index, int step);

#endif
