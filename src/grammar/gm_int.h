/* Private to grammar/: the expression builder every front end (schema, regex, GBNF, choice, tools)
 * writes to, the compiled program (epsilon-free NFA per rule), and the matcher/mask internals. */
#ifndef CLLM_GRAMMAR_GM_INT_H
#define CLLM_GRAMMAR_GM_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "grammar/grammar.h"

/* ---- expressions (gm_build.c) ---- */
typedef enum gx_kind {
    GX_EMPTY, /* matches "" */
    GX_FAIL,  /* matches nothing */
    GX_RANGE, /* one byte in [lo, hi] */
    GX_SEQ,
    GX_ALT,
    GX_REP, /* kid{min,max}, max -1 = unbounded */
    GX_REF, /* rule */
} gx_kind;

typedef struct gx {
    uint8_t kind, lo, hi;
    int min, max;
    int rule;
    int k0, nk; /* children: b->kids[k0 .. k0 + nk) */
} gx;

typedef struct gm_builder {
    gx *x;
    int n_x, cap_x;
    int *kids;
    int n_kids, cap_kids;
    char **rule_name; /* [n_rules] */
    int *rule_body;   /* [n_rules] expression, -1 = not defined yet */
    int n_rules, cap_rules;
    cllm_gm_opts o;
    cllm_error *err;
    bool failed;
    long budget;    /* NFA nodes the expressions may expand to (a size cap before compiling) */
    int trie_depth; /* inside gm_trie.c: gb_alt does not merge literal branches again */
    char empty_hint[200]; /* why the grammar may match nothing, appended to that error */
} gm_builder;

void gb_init(gm_builder *b, const cllm_gm_opts *o, cllm_error *err);
void gb_free(gm_builder *b);
/* Each returns an expression id, or -1 after recording an error (later calls with -1 propagate). */
int gb_empty(gm_builder *b);
int gb_fail(gm_builder *b);
int gb_range(gm_builder *b, int lo, int hi);
int gb_seq(gm_builder *b, const int *xs, int n);
int gb_seq2(gm_builder *b, int x, int y);
int gb_seq3(gm_builder *b, int x, int y, int z);
int gb_alt(gm_builder *b, const int *xs, int n);
int gb_alt2(gm_builder *b, int x, int y);
/* Alternatives of literal strings as a trie (gm_trie.c); tail[i] (NULL: none; -1: none) is an
 * expression that follows string i. n == 0: matches nothing. */
int gb_trie(gm_builder *b, const char *const *s, const size_t *len, const int *tail, int n);
/* gb_alt with its literal branches merged into one trie (gb_alt calls it past GB_ALT_TRIE). */
int gb_alt_trie(gm_builder *b, const int *xs, int n);
enum { GB_ALT_TRIE = 16 }; /* literal branches from which gb_alt merges them */
int gb_rep(gm_builder *b, int x, int min, int max);
int gb_opt(gm_builder *b, int x);
/* Appends x to the growable id list *xs (n used of cap, doubled when full). On out of memory
 * frees *xs, records the error and returns false; the caller just returns -1. */
bool gb_push(gm_builder *b, int **xs, int *n, int *cap, int x);
int gb_ref(gm_builder *b, int rule);
int gb_lit(gm_builder *b, const char *s, size_t n);
int gb_lits(gm_builder *b, const char *s);
/* Code points in sorted, non-overlapping [lo, hi] pairs (n pairs), as UTF-8 byte sequences. */
int gb_cps(gm_builder *b, const uint32_t *ranges, int n);
/* Rules: new (name may be NULL: generated), set body, look up by name (-1). */
int gb_rule(gm_builder *b, const char *name);
void gb_rule_set(gm_builder *b, int rule, int x);
int gb_rule_find(const gm_builder *b, const char *name);
bool gb_error(gm_builder *b, cllm_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Compiles the rules (root = rule 0) into *out. Frees nothing of b. */
cllm_status gb_finish(gm_builder *b, cllm_gm **out);

/* Code point set helpers (gm_build.c): sorted disjoint ranges. */
typedef struct gm_cpset {
    uint32_t *r; /* [2 * n] */
    int n, cap;
} gm_cpset;
void cps_add(gm_cpset *s, uint32_t lo, uint32_t hi);
void cps_norm(gm_cpset *s);   /* sort + merge */
void cps_negate(gm_cpset *s); /* complement within [0, 0x10FFFF] minus surrogates */
void cps_sub(gm_cpset *s, uint32_t lo, uint32_t hi);
void cps_free(gm_cpset *s);

/* Regex front end (gm_regex.c) into an existing builder. json_str: the regex describes a JSON
 * string's characters: '"' and '\' are emitted escaped and control characters excluded; raw: no
 * '<' or control characters (tool-call XML values). anchored_only: refuse unanchored patterns
 * (whole-output regex) vs. JSON Schema's search semantics (pad unanchored ends with .*). */
enum { GRX_WHOLE = 0, GRX_JSON_STR = 1, GRX_RAW_STR = 2 };
int gm_regex_expr(gm_builder *b, const char *re, size_t len, int mode, bool search);

/* JSON front end pieces shared by schema and tools (gm_schema.c). */
typedef struct gm_json gm_json;

/* ---- compiled program (gm_compile.c) ---- */
typedef struct gm_edge {
    uint8_t lo, hi;
    int to;
} gm_edge;

typedef struct gm_call {
    int rule, ret;
} gm_call;

typedef struct gm_node {
    int e0, ne; /* byte edges edges[e0 .. e0+ne), sorted by lo */
    int c0, nc; /* calls */
    bool final; /* the rule may end here */
} gm_node;

/* Cached context-independent split of the vocabulary for one node (gm_mask.c). */
typedef struct gm_cache {
    bool ready;
    bool inverted; /* ids lists the rejected tokens (all others accepted) */
    bool walk;     /* too many uncertain tokens: walk the trie with the real stack instead */
    int32_t *ids;  /* accepted (or rejected) ids */
    int n_ids;
    uint32_t *bits; /* instead of ids when that list is as large: the accepted tokens as a mask
                       (one copy per step instead of a write per id) */
    int n_acc;      /* accepted tokens */
    int32_t *unc;   /* uncertain ids */
    int n_unc;
    /* the uncertain tokens again, packed in trie preorder for the run-time check (sequential
     * reads instead of a cache miss per token): per token int32 id, uint16 length, uint16
     * common-prefix length with the previous one, then its bytes */
    uint8_t *unc_blob;
} gm_cache;

struct cllm_gm {
    int refs;
    gm_node *nodes;
    int n_nodes;
    gm_edge *edges;
    int n_edges;
    gm_call *calls;
    int n_calls;
    int *rule_start; /* [n_rules] */
    int n_rules;
    int root_start;
    uint8_t *in_root; /* [n_nodes] node of the root rule, which nothing calls: its context is
                         known (the output's end), so the mask cache needs no BOTTOM there */
    int *node_rule;   /* [n_nodes] rule each node belongs to */
    /* filled with the first cache (gm_analyze.c), NULL before */
    uint32_t *follow;  /* [n_rules * 8] bytes that may come right after each rule ends */
    uint32_t *follow2; /* [n_rules * 2048] byte pairs that may (a * 256 + b), NULL = any pair */
    int *cache_rep; /* [n_nodes] node whose cache this one shares (equal up to the longest token) */
    /* mask caches, filled on first use for one vocabulary */
    pthread_mutex_t mu;
    const cllm_gm_vocab *cache_vocab;
    gm_cache *cache;               /* [n_nodes] */
    const cllm_gm_vocab *prepared; /* every cache filled for this vocabulary (cllm_gm_prepare) */
    int prep_next;                 /* nodes below this one are prepared (cllm_gm_prepare_some) */
};

/* ---- vocabulary trie (gm_vocab.c) ---- */
struct cllm_gm_vocab {
    int V;
    int n_nodes;     /* trie nodes in DFS preorder; node 0 is the root (empty prefix) */
    uint8_t *byte;   /* [n_nodes] */
    int32_t *end;    /* [n_nodes] first node after the subtree */
    int32_t *tok0;   /* [n_nodes + 1] tokens ending at node i: tok[tok0[i] .. tok0[i+1]) */
    int32_t *tok;    /* token ids in DFS order; a subtree's tokens are contiguous */
    int32_t *tsub;   /* [n_nodes] tokens in the subtree: tok[tok0[i] .. tsub[i]) */
    uint16_t *depth; /* [n_nodes] */
    int max_depth;
    char **bytes; /* [V] token bytes (copies), NULL for excluded */
    uint32_t *len;
    int *eos;
    int n_eos;
    uint32_t *valid; /* [(V + 31) / 32] tokens in the trie */
    int n_valid;
};

/* ---- matcher (gm_match.c) ---- */
typedef struct gm_frame {
    int node, parent; /* return node, frame below (0 = none, 1 = BOTTOM in cache analysis) */
} gm_frame;

/* A head is a frame id whose node has byte edges: the stack's top. */
typedef struct gm_set {
    int *h;
    int n, cap;
    bool accept; /* the root rule ended (or the BOTTOM frame was reached, in analysis) */
} gm_set;

typedef struct gm_stk {
    gm_frame *f;
    int n_f, cap_f;
    int32_t *tab; /* open-addressing intern table of frame ids, 0 = empty */
    int tab_cap;
    int32_t *slot;  /* [cap_f] table slot of each frame (rollback) */
    uint32_t epoch; /* bumped when a rollback removes frames (their ids may come back) */
} gm_stk;

struct cllm_gm_matcher {
    cllm_gm *g;
    const cllm_gm_vocab *v;
    gm_stk st;
    gm_set cur;
    bool done;   /* eos accepted */
    bool broken; /* a cap was hit: the mask allows only eos */
    bool capped; /* some bytes were refused by a cap (heads, frames, visits), not the language */
    gm_set tmp, tmp2;
    /* closure scratch: the visited (node, parent) pairs of this step, and past a few dozen a
     * hash set of them (slots stamped with vis_gen, so a new step needs no clearing) */
    int *vis;
    int n_vis, cap_vis;
    uint64_t *vis_key;
    uint32_t *vis_stamp;
    uint32_t vis_gen;
    int vis_cap; /* slots, a power of two; 0 = not allocated */
    /* memo of one-head steps while building mask caches (NULL elsewhere): (frame id, byte) ->
     * the next head and accept flag, valid within one frame-table epoch */
    struct gm_memo *memo;
    /* trie-walk scratch */
    int *wbuf;
    int wcap;
    int *woff; /* [max_depth + 2] */
    uint8_t *wacc;
    uint32_t *scratch; /* [(V + 31) / 32] */
};

/* Gives m a one-head step memo (gm_step uses it when present); false on out of memory. */
bool gm_memo_enable(cllm_gm_matcher *m);
void gm_stk_rollback(gm_stk *st, int n_f);
/* next = advance(cur, byte); false on a cap (error). */
bool gm_step(cllm_gm_matcher *m, const gm_set *cur, int byte, gm_set *next);
/* The initial set of stacks for node with parent frame (0 or BOTTOM). */
bool gm_start(cllm_gm_matcher *m, int node, int parent, gm_set *out);
/* false when the start state, or a state one byte past the start or past a short greedy walk
 * (the byte leaving the most stacks, each time), is past the matcher's caps: gb_finish refuses
 * such a grammar (a request reaching that state could only fail). */
bool gm_probe_start(cllm_gm *g);
void gm_set_free(gm_set *s);
#define GM_BOTTOM 1

/* gm_analyze.c: fills g->follow and g->cache_rep for tokens of up to max_depth bytes, using m
 * (of g) for closures; false on out of memory (then both stay NULL and caches are per node). */
bool gm_analyze(cllm_gm_matcher *m, int max_depth);

#endif
