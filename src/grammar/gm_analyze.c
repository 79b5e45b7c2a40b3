/* Facts about a compiled grammar that make its mask caches cheaper, computed once before the
 * first cache is built.
 *
 * Follow bytes (xgrammar's context expansion, one byte deep): for each rule, the bytes that can
 * come right after it ends, in any context that calls it. The cache analysis of a node runs
 * with an unknown context below its rule; a token that outlives the rule is "uncertain" only
 * when its next byte after some end of the rule is one of these, otherwise no context accepts
 * it and it is rejected there and then. In a JSON value that turns most of the ~2800 tokens
 * that continue past a string's closing quote or a number's last digit (`"),`, `1abc`) into
 * rejected ones; only `",`-like tokens are left for the run-time check.
 *
 * Shared caches: nodes that accept, reject and leave uncertain the same tokens need one cache.
 * Two nodes are given the same class when no string of up to max_depth bytes (the longest
 * token) tells them apart: Moore's partition refinement over byte edges, with calls compared
 * exactly (same rule, same return node) and the rule's follow bytes and root-ness part of the
 * class. The start and the loop node of a string, the positions of a long bounded string
 * further than a token from its end, and equal sub-structures in different places share. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_int.h"

/* Above this, one cache per node: the refinement costs up to a round per byte of the longest
 * token (about 200 ms for a 24k-node string of maxLength 1000 at 248k tokens, 130 rounds), and
 * such grammars are not prepared ahead (sched_gm.c's PREP_MAX_NODES), so it would run on the
 * engine thread at the first mask. */
enum { MAX_MERGE_NODES = 100000 };
/* and above this many signature entries over all rounds (a round is linear in nodes + edges) */
#define MAX_MERGE_WORK 50000000L

enum { MAX_FOLLOW2_RULES = 512 }; /* byte-pair follow sets take 8 KiB per rule */

/* Adds the bytes the heads of s can read to bits. */
static void head_bytes(const cllm_gm_matcher *m, const gm_set *s, uint32_t *bits) {
    const cllm_gm *g = m->g;
    for (int i = 0; i < s->n; i++) {
        const gm_node *nd = &g->nodes[m->st.f[s->h[i]].node];
        for (int j = 0; j < nd->ne; j++)
            for (int b = g->edges[nd->e0 + j].lo; b <= g->edges[nd->e0 + j].hi; b++)
                bits[b >> 5] |= 1u << (b & 31);
    }
}

/* What closure(node, BOTTOM) can read first: its bytes (bits), or with pairs the byte pairs
 * (a, b) it can read, where b may also be one of `after` (the bytes that can follow the rule)
 * when the rule can end after a. *ends: the rule can end before any byte. */
static bool first_of(cllm_gm_matcher *m, int node, uint32_t *bits, uint32_t *pairs,
                     const uint32_t *after, bool *ends) {
    int mark = m->st.n_f;
    gm_set s0 = {0}, s1 = {0};
    uint32_t first[8] = {0};
    bool ok = gm_start(m, node, GM_BOTTOM, &s0);
    *ends = s0.accept;
    if (ok) head_bytes(m, &s0, bits ? bits : first);
    for (int a = 0; ok && pairs && a < 256; a++) {
        if (!(first[a >> 5] >> (a & 31) & 1)) continue;
        if (!(ok = gm_step(m, &s0, a, &s1))) break;
        head_bytes(m, &s1, pairs + 8 * a);
        for (int w = 0; s1.accept && w < 8; w++) pairs[8 * a + w] |= after[w];
    }
    gm_set_free(&s0);
    gm_set_free(&s1);
    gm_stk_rollback(&m->st, mark);
    return ok;
}

/* dst[r] |= dst[q] over the links (r, q) until nothing changes; w words per rule. */
static void propagate(uint32_t *dst, int w, const int *link, int n_link) {
    for (bool changed = true; changed;) {
        changed = false;
        for (int i = 0; i < n_link; i++) {
            uint32_t *a = dst + (size_t)w * link[2 * i], *b = dst + (size_t)w * link[2 * i + 1];
            for (int k = 0; k < w; k++)
                if (b[k] & ~a[k]) a[k] |= b[k], changed = true;
        }
    }
}

/* g->follow and (for up to MAX_FOLLOW2_RULES rules) g->follow2. For a call of rule R from rule
 * Q returning to node r, what r's closure reads first may follow R; when that closure can end Q,
 * whatever follows Q may follow R too (a link, solved as a fixpoint). A cap in a closure makes
 * every byte possible there: never wrong, only less precise. */
static bool follow_sets(cllm_gm_matcher *m) {
    cllm_gm *g = m->g;
    int R = g->n_rules;
    uint32_t *fol = calloc((size_t)R * 8, sizeof(uint32_t)), *f2 = NULL;
    int *link = malloc(((size_t)g->n_calls + 1) * 2 * sizeof(int)); /* follow[a] >= follow[b] */
    if (!fol || !link) goto fail;
    int n_link = 0;
    for (int n = 0; n < g->n_nodes; n++)
        for (int k = 0; k < g->nodes[n].nc; k++) {
            gm_call c = g->calls[g->nodes[n].c0 + k];
            bool ends = false;
            if (!first_of(m, c.ret, fol + 8 * c.rule, NULL, NULL, &ends))
                memset(fol + 8 * c.rule, 0xff, 32);
            if (ends) link[2 * n_link] = c.rule, link[2 * n_link + 1] = g->node_rule[n], n_link++;
        }
    propagate(fol, 8, link, n_link);
    if (R <= MAX_FOLLOW2_RULES && (f2 = calloc((size_t)R * 2048, sizeof(uint32_t)))) {
        for (int n = 0; n < g->n_nodes; n++)
            for (int k = 0; k < g->nodes[n].nc; k++) {
                gm_call c = g->calls[g->nodes[n].c0 + k];
                bool ends = false;
                uint32_t *p = f2 + (size_t)2048 * c.rule;
                if (!first_of(m, c.ret, NULL, p, fol + 8 * g->node_rule[n], &ends))
                    memset(p, 0xff, 2048 * sizeof(uint32_t));
            }
        propagate(f2, 2048, link, n_link);
    }
    free(link);
    g->follow = fol;
    g->follow2 = f2;
    return true;
fail:
    free(fol);
    free(link);
    return false;
}

static uint32_t hash_ints(const int *p, int n) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) h = (h ^ (uint32_t)p[i]) * 0x100000001b3ull;
    return (uint32_t)(h ^ h >> 29);
}

static int cmp_int3(const void *a, const void *b) {
    const int *x = a, *y = b;
    for (int i = 0; i < 3; i++)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* One refinement round: nc[n] = class of n's signature under the classes cls. Returns the
 * number of classes, -1 on out of memory. */
static int refine(const cllm_gm *g, const int *fcls, const int *cls, int *nc, int *off, int **pool,
                  size_t *pool_cap, int32_t *tab, int tab_cap) {
    size_t used = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        const gm_node *nd = &g->nodes[n];
        size_t need = used + 5 + 2 * (size_t)nd->nc + 3 * (size_t)nd->ne;
        if (need > *pool_cap) {
            size_t cap = *pool_cap * 2 > need ? *pool_cap * 2 : need;
            int *p = realloc(*pool, cap * sizeof(int));
            if (!p) return -1;
            *pool = p;
            *pool_cap = cap;
        }
        int *s = *pool + used, k = 0;
        s[k++] = nd->final;
        s[k++] = g->in_root[n];
        s[k++] = fcls[g->node_rule[n]];
        s[k++] = nd->nc;
        for (int j = 0; j < nd->nc; j++) {
            s[k++] = g->calls[nd->c0 + j].rule;
            s[k++] = g->calls[nd->c0 + j].ret;
        }
        int *e = s + k;
        for (int j = 0; j < nd->ne; j++) {
            const gm_edge *x = &g->edges[nd->e0 + j];
            e[3 * j] = x->lo, e[3 * j + 1] = x->hi, e[3 * j + 2] = cls[x->to];
        }
        /* no sort: the edges come sorted by (lo, hi, target), so nodes alike list their classes
         * alike; equal lists imply equal behaviour either way (a sort per node and round made
         * a fuzzed grammar of 445k edges take 0.5 s). Runs of one class are one edge. */
        int ne = 0;
        for (int j = 0; j < nd->ne; j++)
            if (!ne || cmp_int3(e + 3 * (ne - 1), e + 3 * j)) memmove(e + 3 * ne++, e + 3 * j, 12);
        k += 3 * ne;
        off[n] = (int)used;
        off[n + 1] = (int)(used + (size_t)k);
        used += (size_t)k;
    }
    memset(tab, 0, (size_t)tab_cap * sizeof(int32_t));
    int classes = 0;
    uint32_t mask = (uint32_t)tab_cap - 1;
    for (int n = 0; n < g->n_nodes; n++) {
        const int *s = *pool + off[n];
        int len = off[n + 1] - off[n];
        uint32_t h = hash_ints(s, len) & mask;
        for (;; h = (h + 1) & mask) {
            int r = tab[h] - 1;
            if (r < 0) {
                tab[h] = n + 1;
                nc[n] = classes++;
                break;
            }
            if (off[r + 1] - off[r] == len &&
                !memcmp(*pool + off[r], s, (size_t)len * sizeof(int))) {
                nc[n] = nc[r];
                break;
            }
        }
    }
    return classes;
}

static int *share_classes(const cllm_gm *g, int max_depth) {
    const uint32_t *fol = g->follow, *f2 = g->follow2;
    if (((long)g->n_nodes + g->n_edges + g->n_calls) * (max_depth + 2) > MAX_MERGE_WORK)
        return NULL;
    int N = g->n_nodes, R = g->n_rules;
    int *fcls = malloc((size_t)R * sizeof(int)), *cls = calloc((size_t)N, sizeof(int));
    int *nc = malloc((size_t)N * sizeof(int)), *off = malloc(((size_t)N + 1) * sizeof(int));
    int *rep = malloc((size_t)N * sizeof(int)), *pool = NULL;
    int tab_cap = 16;
    while (tab_cap < 2 * N) tab_cap *= 2;
    int32_t *tab = malloc((size_t)tab_cap * sizeof(int32_t));
    size_t pool_cap = 0;
    bool ok = fcls && cls && nc && off && rep && tab;
    for (int r = 0; ok && r < R; r++) { /* rules with equal follow bytes are alike here */
        fcls[r] = r;
        for (int q = 0; q < r; q++)
            if (!memcmp(fol + 8 * q, fol + 8 * r, 32) &&
                (!f2 || !memcmp(f2 + (size_t)2048 * q, f2 + (size_t)2048 * r, 8192))) {
                fcls[r] = fcls[q];
                break;
            }
    }
    /* after k rounds the classes agree on strings of up to about k bytes; stop when stable */
    int classes = 1;
    for (int round = 0; ok && round <= max_depth + 1; round++) {
        int c = refine(g, fcls, cls, nc, off, &pool, &pool_cap, tab, tab_cap);
        if (c < 0) ok = false;
        int *t = cls;
        cls = nc;
        nc = t;
        if (c == classes && round) break;
        classes = c;
    }
    if (ok) {
        for (int n = 0; n < N; n++) nc[n] = -1;
        for (int n = 0; n < N; n++) {
            if (nc[cls[n]] < 0) nc[cls[n]] = n;
            rep[n] = nc[cls[n]];
        }
    }
    free(fcls), free(cls), free(nc), free(off), free(pool), free(tab);
    if (!ok) free(rep);
    return ok ? rep : NULL;
}

bool gm_analyze(cllm_gm_matcher *m, int max_depth) {
    cllm_gm *g = m->g;
    if (!follow_sets(m)) return false;
    int *rep = g->n_nodes <= MAX_MERGE_NODES ? share_classes(g, max_depth) : NULL;
    if (!rep && (rep = malloc((size_t)g->n_nodes * sizeof(int) + 1)))
        for (int n = 0; n < g->n_nodes; n++) rep[n] = n;
    if (!rep) {
        free(g->follow), free(g->follow2);
        g->follow = g->follow2 = NULL;
        return false;
    }
    g->cache_rep = rep;
    return true;
}
