/* Structured-output constraints: JSON Schema, regex, choice lists, GBNF grammars and forced tool
 * calls, all compiled to one representation, and the per-step token masks the sampler applies.
 *
 * Representation: a set of rules, each an epsilon-free NFA over bytes whose edges either consume
 * one byte in a range or call another rule (a recursive transition network, i.e. a pushdown
 * automaton). A matcher holds the set of live stacks (top node + hash-consed return frames) and
 * advances byte by byte; strings are constrained to valid UTF-8 at the byte level, so a token may
 * end inside a character.
 *
 * Masks: the vocabulary's byte strings form a trie (cllm_gm_vocab, one per tokenizer). For each
 * NFA node a context-independent split of the vocabulary is cached on first use (accepted without
 * leaving the node's rule, rejected, or "uncertain": the rule may end inside the token), as
 * xgrammar does; a step then costs the cached lists plus a check of the uncertain tokens against
 * the real stack. Nodes whose uncertain set is large take a pruned trie walk instead.
 *
 * Request path: server/ compiles a cllm_gm from the request (MHD thread), hands it to the engine
 * in cllm_sampling.grammar (reference counted); the scheduler makes one matcher per sample, masks
 * the logits before temperature/top-p and advances on the sampled token (engine thread). */
#ifndef CLLM_GRAMMAR_GRAMMAR_H
#define CLLM_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct cllm_gm cllm_gm;
typedef struct cllm_gm_vocab cllm_gm_vocab;
typedef struct cllm_gm_matcher cllm_gm_matcher;

typedef struct cllm_gm_opts {
    bool any_whitespace;    /* JSON: allow [ \t\n]* between tokens (default: compact, none) */
    const char *ws_pattern; /* JSON: a regex for the whitespace between tokens (vLLM's
                               guided_whitespace_pattern); overrides any_whitespace */
    bool raw_strings;       /* JSON strings without quotes/escapes, no '<' (tool-call XML values) */
    int max_schema_depth;   /* 0 = 64 */
    int max_schema_nodes;   /* 0 = 20000 subschemas */
    int max_nodes;          /* 0 = 1,000,000 NFA nodes (a cap on grammar size) */
    int max_source;         /* 0 = 1 MiB of schema / regex / grammar text */
} cllm_gm_opts;

/* Each compiler returns CLLM_OK with *out (refcount 1), or an error: CLLM_EINVAL for malformed
 * input, CLLM_EUNSUPPORTED naming the keyword and its JSON pointer, CLLM_ERANGE when a cap is hit.
 * opts may be NULL (defaults). */
cllm_status cllm_gm_from_json_schema(const char *schema, size_t len, const cllm_gm_opts *opts,
                                     cllm_gm **out, cllm_error *err);
/* Any JSON object (response_format json_object). */
cllm_status cllm_gm_json_object(const cllm_gm_opts *opts, cllm_gm **out, cllm_error *err);
/* The whole output matches the regex (ECMAScript syntax subset: no backreferences, lookaround,
 * or anchors other than a leading ^ / trailing $). */
cllm_status cllm_gm_from_regex(const char *re, size_t len, const cllm_gm_opts *opts, cllm_gm **out,
                               cllm_error *err);
/* The output is exactly one of the strings (at most CLLM_GM_MAX_CHOICES of them, else
 * CLLM_ERANGE naming the limit). Shared prefixes are merged (a trie), so the matcher follows one
 * stack whatever the number of choices. */
enum { CLLM_GM_MAX_CHOICES = 10000 };
cllm_status cllm_gm_from_choice(const char *const *choices, const size_t *lens, int n,
                                const cllm_gm_opts *opts, cllm_gm **out, cllm_error *err);
/* GBNF (llama.cpp / xgrammar EBNF): `name ::= ...` rules, start rule `root`. */
cllm_status cllm_gm_from_gbnf(const char *text, size_t len, const cllm_gm_opts *opts, cllm_gm **out,
                              cllm_error *err);
/* Qwen3.5 XML tool calls for an OpenAI `tools` array (JSON text): between min_calls and max_calls
 * (-1 = unbounded) <tool_call> blocks, each naming one function (only `only_fn` when non-NULL)
 * whose <parameter=...> values satisfy its `parameters` schema. */
cllm_status cllm_gm_from_tools(const char *tools_json, size_t len, const char *only_fn,
                               int min_calls, int max_calls, const cllm_gm_opts *opts,
                               cllm_gm **out, cllm_error *err);

/* Every output that does not contain the string pat (tool_choice "none": no "<tool_call>"),
 * whichever tokens would spell it; EOS anywhere. pat: 2..256 bytes, its first byte not repeated
 * in it (else CLLM_EINVAL). */
cllm_status cllm_gm_excluding(const char *pat, size_t len, const cllm_gm_opts *opts, cllm_gm **out,
                              cllm_error *err);

cllm_gm *cllm_gm_ref(cllm_gm *g); /* atomic; returns g */
void cllm_gm_unref(cllm_gm *g);   /* frees at zero; NULL is fine */
int cllm_gm_n_nodes(const cllm_gm *g);

/* The vocabulary's tokens as byte strings. Special tokens and tokens without bytes are never
 * allowed by a mask; eos ids are allowed exactly when the grammar accepts. The arrays are copied.
 */
cllm_status cllm_gm_vocab_new(const char *const *bytes, const size_t *lens, const bool *exclude,
                              int n_vocab, const int *eos, int n_eos, cllm_gm_vocab **out,
                              cllm_error *err);
struct cllm_tok;
/* Same, from a tokenizer (special added tokens excluded). */
cllm_status cllm_gm_vocab_from_tok(const struct cllm_tok *tok, const int *eos, int n_eos,
                                   cllm_gm_vocab **out, cllm_error *err);
void cllm_gm_vocab_free(cllm_gm_vocab *v);
int cllm_gm_vocab_size(const cllm_gm_vocab *v);

/* A matcher for one output; holds a reference on g. v must outlive it. NULL on ENOMEM. */
cllm_gm_matcher *cllm_gm_matcher_new(cllm_gm *g, const cllm_gm_vocab *v);
void cllm_gm_matcher_free(cllm_gm_matcher *m);
/* Fills mask[(V + 31) / 32]: bit t set when token t may come next. Returns the number allowed
 * (0: the output is complete and nothing, not even EOS, may follow), or -1 when the grammar's
 * state is past the matcher's caps and no text may follow: the constraint cannot be held, and the
 * output must end with an error, not as complete. */
int cllm_gm_matcher_mask(cllm_gm_matcher *m, uint32_t *mask);
/* Advances on a sampled token; false (state unchanged) when the token is not allowed. An eos id is
 * allowed only in an accepting state and ends the matcher. */
bool cllm_gm_matcher_accept_token(cllm_gm_matcher *m, int token);
/* Advances on bytes (tests, checks); false (state unchanged) if they leave the language. */
bool cllm_gm_matcher_accept_bytes(cllm_gm_matcher *m, const char *s, size_t n);
/* Would these bytes be accepted from the current state (the state is not changed)? */
bool cllm_gm_matcher_can_accept_bytes(cllm_gm_matcher *m, const char *s, size_t n);
bool cllm_gm_matcher_is_accepting(const cllm_gm_matcher *m); /* the output may end here */
bool cllm_gm_matcher_is_done(const cllm_gm_matcher *m);      /* accepting and nothing may follow */
/* Whether a cap (4096 stacks, 2^24 frames, 2^15 closure visits per step) ever refused bytes in
 * this matcher: then the brute-force mask may refuse a token the cached mask allows (the caches
 * were built from one stack at a time), and accepting it fails. Tests and fuzzing use it. */
bool cllm_gm_matcher_hit_cap(const cllm_gm_matcher *m);
/* Number of live stacks (a state's size; tests and the bench). */
int cllm_gm_matcher_n_heads(const cllm_gm_matcher *m);
/* Brute-force reference for tests: the same mask computed by running every token's bytes. */
int cllm_gm_matcher_mask_slow(cllm_gm_matcher *m, uint32_t *mask);
/* Fills every NFA node's mask cache now (bench: compile-time cost as xgrammar measures it). */
void cllm_gm_precompute(cllm_gm *g, const cllm_gm_vocab *v);
/* The same as a preparation step off the engine thread: fills the caches (stops early, leaving
 * the rest to be filled on first use, when *stop becomes true or past max_nodes nodes) and marks
 * g prepared for v. Thread-safe against matchers using g. */
void cllm_gm_prepare(cllm_gm *g, const cllm_gm_vocab *v, const volatile bool *stop, int max_nodes);
bool cllm_gm_is_prepared(cllm_gm *g, const cllm_gm_vocab *v);
/* One slice of that preparation: fills caches from where the last slice stopped for about max_s
 * seconds; true when every node is done (g is then prepared for v). A preparation thread that
 * takes its jobs in turn, a slice each, keeps a large grammar from holding up small ones. */
bool cllm_gm_prepare_some(cllm_gm *g, const cllm_gm_vocab *v, double max_s);

/* Compiled grammars by source key (kind + options + text, built by the caller), least recently
 * used evicted past cap. A cached grammar keeps its mask caches, so a repeated schema is neither
 * compiled nor prepared again. Thread-safe. get returns a new reference or NULL; put takes its
 * own reference. */
typedef struct cllm_gm_cache cllm_gm_cache;
cllm_gm_cache *cllm_gm_cache_new(int cap);
void cllm_gm_cache_free(cllm_gm_cache *c);
cllm_gm *cllm_gm_cache_get(cllm_gm_cache *c, const char *key, size_t len);
void cllm_gm_cache_put(cllm_gm_cache *c, const char *key, size_t len, cllm_gm *g);
void cllm_gm_cache_stats(cllm_gm_cache *c, uint64_t *hits, uint64_t *misses);

#endif
