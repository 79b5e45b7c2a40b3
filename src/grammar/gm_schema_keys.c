/* The members of an object with many properties, in schema order, each optional unless
 * required, so that the matcher keeps few stacks and the grammar grows near linearly.
 *
 * The plain form (gm_schema.c, small objects) is a chain of rules A[j] = member j then A[j+1],
 * or A[j+1]: at a key's first byte every member still allowed is a stack of its own, so 5,000
 * optional properties made 5,000 stacks (past the matcher's cap of 4,096: the output stopped at
 * `{"`) and every mask cache walked all of them (compile time quadratic). Here the keys that may
 * come next at A[j], members j up to the first required one, are a union of O(log n) aligned
 * blocks of a tree with fan-out KEY_FANOUT over the members; each block is one rule holding a
 * trie of its keys (gm_trie.c), whose leaf for member i continues with V[i] = ':' value_i
 * A[i+1]. The matcher follows one stack per block (at most 2 (KEY_FANOUT - 1) per level), each
 * key appears in one trie per level, and the language is exactly the plain form's.
 * Called by compile_object (gm_schema.c) and, without the JSON punctuation, for the
 * <parameter=...> blocks of a forced tool call (gm_tools.c). */
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_json_int.h"

enum { KEY_FANOUT = 8 }; /* 8: 5,000 keys in 5 levels, at most 70 stacks at a key's start */

typedef struct keyset {
    gm_sc *c;
    int n;
    const char *const *key;
    const size_t *klen;
    const int *vrule; /* [n] rule V[i] */
    int *block;       /* [levels][n] block rule at (level, first member), -1 until built */
    long span[16];    /* KEY_FANOUT^level */
    int levels;
} keyset;

/* The rule of the level-L block starting at member lo (lo a multiple of span[L]). */
static int block_rule(keyset *k, int L, int lo) {
    gm_builder *b = k->c->b;
    int *slot = &k->block[(size_t)L * (size_t)k->n + (size_t)lo];
    if (*slot >= 0) return gb_ref(b, *slot);
    int hi = lo + k->span[L] < k->n ? (int)(lo + k->span[L]) : k->n;
    int *tails = malloc((size_t)(hi - lo) * sizeof(int));
    if (!tails) return gb_error(b, CLLM_ENOMEM, "out of memory"), -1;
    for (int i = lo; i < hi; i++) tails[i - lo] = gb_ref(b, k->vrule[i]);
    int r = gb_rule(b, NULL);
    gb_rule_set(b, r, gb_trie(b, k->key + lo, k->klen + lo, tails, hi - lo));
    free(tails);
    *slot = r;
    return gb_ref(b, r);
}

/* Any one key of members a..z (inclusive) followed by its V rule. */
static int keys_between(keyset *k, int a, int z) {
    gm_builder *b = k->c->b;
    int cap = 2 * KEY_FANOUT * (k->levels + 1), n = 0;
    int *xs = malloc((size_t)cap * sizeof(int));
    if (!xs) return gb_error(b, CLLM_ENOMEM, "out of memory"), -1;
    for (int i = a; i <= z && n < cap;) {
        int L = k->levels - 1;
        for (; L > 0; L--) {
            long end = i + k->span[L] < k->n ? i + k->span[L] : k->n;
            if (i % k->span[L] == 0 && end - 1 <= z) break;
        }
        xs[n++] = block_rule(k, L, i); /* a call: the nodes are the block's, made once */
        i = i + k->span[L] < k->n ? (int)(i + k->span[L]) : k->n;
    }
    int x = gb_alt(b, xs, n);
    free(xs);
    return x;
}

int sc_object_members(gm_sc *c, int n, const char *const *key, const size_t *klen,
                      const bool *required, const int *val, int tail0, int tail1, bool json) {
    gm_builder *b = c->b;
    keyset k = {.c = c, .n = n, .key = key, .klen = klen};
    k.span[0] = 1;
    k.levels = 1;
    while (k.levels < 15 && k.span[k.levels - 1] < n) {
        k.span[k.levels] = k.span[k.levels - 1] * KEY_FANOUT;
        k.levels++;
    }
    int *A = malloc((size_t)(n + 1) * 2 * sizeof(int)), *V = malloc((size_t)(n + 1) * sizeof(int));
    int *next_req = malloc((size_t)(n + 1) * sizeof(int));
    k.block = malloc((size_t)k.levels * (size_t)n * sizeof(int));
    int x = -1;
    if (!A || !V || !next_req || !k.block) {
        gb_error(b, CLLM_ENOMEM, "out of memory");
        goto out;
    }
    memset(k.block, 0xff, (size_t)k.levels * (size_t)n * sizeof(int));
    for (int j = 0; j <= n; j++) A[2 * j] = gb_rule(b, NULL), A[2 * j + 1] = gb_rule(b, NULL);
    for (int i = 0; i < n; i++) {
        V[i] = gb_rule(b, NULL);
        int colon = json ? sc_sep(c, ':') : gb_empty(b);
        gb_rule_set(b, V[i], gb_seq3(b, colon, val[i], gb_ref(b, A[2 * (i + 1) + 1])));
    }
    k.vrule = V;
    next_req[n] = n;
    for (int j = n - 1; j >= 0; j--) next_req[j] = required[j] ? j : next_req[j + 1];
    gb_rule_set(b, A[2 * n], tail0);
    gb_rule_set(b, A[2 * n + 1], tail1);
    for (int j = 0; j < n && !b->failed; j++) {
        int z = next_req[j] < n ? next_req[j] : n - 1;
        for (int s = 0; s < 2; s++) {
            int keys = keys_between(&k, j, z);
            int with = s && json ? gb_seq2(b, sc_sep(c, ','), keys) : keys;
            /* no required member left: the object may also end (or go on with extras) here */
            int body = next_req[j] == n ? gb_alt2(b, with, gb_ref(b, A[2 * n + s])) : with;
            gb_rule_set(b, A[2 * j + s], body);
        }
    }
    x = gb_ref(b, A[0]);
out:
    free(A);
    free(V);
    free(next_req);
    free(k.block);
    return x;
}
