/* `cllm serve --tensor-parallel-size N`: rank 0 runs HTTP, the tokenizer and the scheduler;
 * its engine tells the other ranks every operation its scheduler makes on the model and pools
 * (engine.h's cllm_engine_mirror: a forward batch, a KV block copy, a state slot copy, just
 * before making it), and ranks > 0 run serve_tp_follow: they receive each operation and run
 * the same one on their own slices (their KV heads, their GDN heads), so the all-reduces inside
 * the forward line up. Sampling stays on rank 0 (the forward gathers the logits row on every
 * rank, or only the ranks' best k candidates when the request's sampling needs no more,
 * model/forward_tp.c). Pool sizes are rank 0's on every rank.
 *
 * Wire format (dist/ broadcasts from rank 0): a fixed header {op, a, b, payload ints, sequence
 * number}, then for a forward the batch as int32s: per sequence {n_tokens, start_pos, n_table,
 * state_slot, logits, logits_topk, logits_scale's bits, logits_n, state_fork, state_src,
 * state_save}, then every sequence's tokens and block table; a state commit: a = batch row,
 * b = tokens, one payload int (the slot). */
#ifndef CLLM_CLI_SERVE_TP_H
#define CLLM_CLI_SERVE_TP_H

#include "base/status.h"
#include "engine/engine.h"

/* The mirror for cllm_engine_opts.mirror on every rank: rank 0's broadcasts each operation;
 * the followers' only takes rank 0's pool sizes. */
const cllm_engine_mirror *serve_tp_mirror(void);
/* Ranks > 0: runs rank 0's operations on e until rank 0 closes its engine (CLLM_OK) or the job
 * fails (CLLM_EIO, message in err). */
cllm_status serve_tp_follow(cllm_engine *e, cllm_error *err);

#endif
