/* Tensor-parallel shard plan: which part of every sharded dimension a rank owns (vLLM's layout).
 *
 *  - attention: query heads split evenly (n_heads % N == 0); KV heads split when N <= n_kv_heads
 *    (n_kv_heads % N == 0), else each KV head is replicated on N / n_kv_heads ranks
 *    (N % n_kv_heads == 0), the rank owning the one its query heads use;
 *  - Gated DeltaNet: value heads split evenly, key heads like KV heads (split or replicated);
 *    conv channels and recurrent state follow the heads;
 *  - dense MLP, shared expert, routed experts: the intermediate dimension split in units of
 *    `align` rows (1 for float weights; the GPTQ group for quantized ones, so a row-parallel
 *    down_proj is cut along K in whole groups), unevenly when it does not divide (first ranks
 *    one unit more);
 *  - lm_head: vocabulary rows, unevenly likewise; the router and norms are replicated;
 *  - expert parallel (ep = 1, vLLM's --enable-expert-parallel): routed experts are not cut but
 *    spread whole, n_experts / N per rank (n_experts % N == 0); every rank still holds every
 *    token (the activations are replicated under TP), so "dispatch" is each rank running the
 *    tokens routed to its own experts and the combine is the same fixed-order all-reduce.
 * A shape that cannot be split is refused naming the tensor and N.
 * The plan is model knowledge (config dims, the tensor plan), so it lives in model/; dist/ holds
 * only the collectives the forward pass calls, and model -> dist is one-way. */
#ifndef CLLM_MODEL_TP_SHARD_H
#define CLLM_MODEL_TP_SHARD_H

#include <stdint.h>

#include "base/status.h"
#include "model/config.h"

typedef struct cllm_shard {
    int rank, size, align, ep;
    int e0, ne;   /* routed experts owned (all of them unless ep) */
    int h0, nh;   /* attention query heads */
    int kv0, nkv; /* attention KV heads */
    int gk0, ngk; /* GDN key heads */
    int gv0, ngv; /* GDN value heads */
    int i0, ni;   /* dense MLP intermediate rows */
    int mi0, nmi; /* routed-expert intermediate rows */
    int si0, nsi; /* shared-expert intermediate rows */
    int v0, nv;   /* lm_head vocabulary rows */
} cllm_shard;

cllm_status cllm_shard_plan(const cllm_config *c, int rank, int size, int align, int ep,
                            cllm_shard *out, cllm_error *err);

/* The config a rank runs: head counts and intermediate sizes replaced by its own (vocab_size
 * stays global: the logits a caller sees are whole rows). Shares c's arrays (do not free it). */
void cllm_shard_local_config(const cllm_config *c, const cllm_shard *s, cllm_config *out);

/* Hash of the config dims and the plan of every rank (same on all ranks of a consistent run). */
uint64_t cllm_shard_plan_hash(const cllm_config *c, int size, int align, int ep);

/* Bytes of weights rank s->rank binds (the text model without MTP and vision; elem_bytes per
 * value for matrices and vectors except A_log, kept F32), and the part replicated on every
 * rank (embeddings, norms, router, replicated KV / key heads). */
void cllm_shard_rank_bytes(const cllm_config *c, const cllm_shard *s, int elem_bytes,
                           uint64_t *total, uint64_t *replicated);

#endif
