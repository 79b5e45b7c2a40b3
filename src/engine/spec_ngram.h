/* Draft proposers for speculative decoding that need no model: n-gram prompt lookup (vLLM's
 * "ngram" method). Called by the scheduler (sched_spec.c) once per decoding sequence and step. */
#ifndef CLLM_ENGINE_SPEC_NGRAM_H
#define CLLM_ENGINE_SPEC_NGRAM_H

#include <stdint.h>

/* Looks for the sequence's last n tokens (n from nmax down to nmin, the first length that
 * matches wins) earlier in toks[0, n_toks) and proposes the up to k tokens that followed the
 * most recent such occurrence. Returns the number written to out (0: no match). O(n_toks * n). */
int spec_ngram_propose(const int32_t *toks, int n_toks, int nmin, int nmax, int k, int32_t *out);

#endif
