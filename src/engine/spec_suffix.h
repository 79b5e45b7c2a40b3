/* Suffix drafts for speculative decoding (vLLM's "suffix" method, simplified): the longest
 * recent match of the sequence's last tokens, in its own prompt and output and in the outputs of
 * recently finished requests, proposes what followed it. Pays where answers repeat across
 * requests (templated extraction, reports of one form) as well as where an answer quotes its
 * prompt. Called by the scheduler (sched_spec.c) on the engine thread; not thread-safe. */
#ifndef CLLM_ENGINE_SPEC_SUFFIX_H
#define CLLM_ENGINE_SPEC_SUFFIX_H

#include <stdint.h>

/* The outputs of the last max_requests finished requests, at most max_tokens tokens in all
 * (the oldest are dropped first). */
typedef struct spec_hist {
    int32_t *tok; /* [cap] ring of tokens; -1 separates requests and marks forgotten ones */
    int cap, head, len;
    uint64_t *starts; /* [max_req] ring: absolute offset of each remembered request's first token */
    int max_req, n_req, req_head;
    uint64_t written; /* tokens ever written (the absolute offset of head) */
} spec_hist;

/* 0, or -1 on out of memory (h is then empty and usable: nothing is remembered). */
int spec_hist_init(spec_hist *h, int max_requests, int max_tokens);
void spec_hist_free(spec_hist *h);
/* Remembers a finished request's output. */
void spec_hist_add(spec_hist *h, const int32_t *toks, int n);

/* Up to k drafts for the sequence toks[0, n): the longest match (up to max_depth tokens) of its
 * suffix, first in toks itself, then in h; a longer match wins, the sequence's own on a tie.
 * At most max(1, spec_factor * match length) drafts. Returns the number written to out. */
int spec_suffix_propose(const spec_hist *h, const int32_t *toks, int n, int max_depth,
                        double spec_factor, int k, int32_t *out);

#endif
