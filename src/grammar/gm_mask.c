/* Token masks: a pruned walk of the vocabulary trie against a set of stacks, and per-node caches
 * of the context-independent part (xgrammar's adaptive token mask cache).
 *
 * Cache analysis for node n starts from the stack (n, BOTTOM): a token whose bytes stay inside
 * n's rule (or end exactly where the rule may end) is accepted whatever lies below; one that
 * dies before the rule could end is rejected; one that can only continue past the rule's end is
 * "uncertain" and is checked at run time against the real stack. Every node can still finish its
 * rule (gm_compile.c prunes the others), which is what makes "accepted" context-independent.
 * A node whose uncertain set is large (it may end right away, e.g. after a digit) is marked
 * `walk`: its mask is a trie walk from the real stack, pruned by the real context. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_int.h"

enum { UNC_WALK = 4096 }; /* above this many uncertain tokens a real-context walk is cheaper */

typedef struct ivec {
    int32_t *p;
    int n, cap;
} ivec;

static bool iv_push(ivec *v, int32_t x) {
    if (v->n == v->cap) {
        int nc = v->cap ? v->cap * 2 : 256;
        int32_t *p = realloc(v->p, (size_t)nc * sizeof(int32_t));
        if (!p) return false;
        v->p = p;
        v->cap = nc;
    }
    v->p[v->n++] = x;
    return true;
}

static bool iv_range(ivec *v, const int32_t *t, int a, int z) {
    for (int i = a; i < z; i++)
        if (!iv_push(v, t[i])) return false;
    return true;
}

/* Level d's heads live in m->wbuf[woff[d] .. woff[d+1]). */
static bool level_put(cllm_gm_matcher *m, int d, const gm_set *s) {
    int need = m->woff[d] + s->n;
    if (need > m->wcap) {
        int nc = m->wcap ? m->wcap : 1024;
        while (nc < need) nc *= 2;
        int *p = realloc(m->wbuf, (size_t)nc * sizeof(int));
        if (!p) return false;
        m->wbuf = p;
        m->wcap = nc;
    }
    memcpy(m->wbuf + m->woff[d], s->h, (size_t)s->n * sizeof(int));
    m->woff[d + 1] = need;
    m->wacc[d] = s->accept;
    return true;
}

/* Bit count without the popcnt instruction (the portable build calls a libgcc routine per word,
 * 4.6% of an any-JSON mask at 248k tokens); whole zero words are the common case. */
static inline int popcount32(uint32_t x) {
    if (!x) return 0;
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    x = (x + (x >> 4)) & 0x0F0F0F0Fu;
    return (int)((x * 0x01010101u) >> 24);
}

static void set_bits(uint32_t *mask, const int32_t *t, int a, int z) {
    for (int i = a; i < z; i++) mask[t[i] >> 5] |= 1u << (t[i] & 31);
}

/* Real-context walk: sets the bit of every token the stacks in start accept. */
static bool walk_runtime(cllm_gm_matcher *m, const gm_set *start, uint32_t *mask) {
    const cllm_gm_vocab *v = m->v;
    m->woff[0] = 0;
    if (!level_put(m, 0, start)) return false;
    gm_set *nx = &m->tmp;
    for (int i = 1; i < v->n_nodes;) {
        int d = v->depth[i];
        gm_set cur = {.h = m->wbuf + m->woff[d - 1], .n = m->woff[d] - m->woff[d - 1]};
        if (!gm_step(m, &cur, v->byte[i], nx)) return false;
        if (nx->n || nx->accept) set_bits(mask, v->tok, v->tok0[i], v->tok0[i + 1]);
        if (!nx->n) {
            i = v->end[i];
            continue;
        }
        if (!level_put(m, d, nx)) return false;
        i++;
    }
    return true;
}

/* c->unc_blob (see gm_int.h); tokens are at most 65535 bytes (the trie depth is a uint16). */
static uint8_t *pack_uncertain(const cllm_gm_vocab *v, const int32_t *ids, int n) {
    size_t sz = 0;
    for (int i = 0; i < n; i++) sz += 8 + v->len[ids[i]];
    uint8_t *blob = malloc(sz ? sz : 1), *w = blob;
    if (!blob) return NULL;
    for (int i = 0; i < n; i++) {
        const char *b = v->bytes[ids[i]];
        uint16_t len = (uint16_t)v->len[ids[i]], lcp = 0;
        if (i) {
            const char *pb = v->bytes[ids[i - 1]];
            uint16_t pl = (uint16_t)v->len[ids[i - 1]];
            while (lcp < len && lcp < pl && b[lcp] == pb[lcp]) lcp++;
        }
        memcpy(w, &ids[i], 4);
        memcpy(w + 4, &len, 2);
        memcpy(w + 6, &lcp, 2);
        memcpy(w + 8, b, len);
        w += 8 + len;
    }
    return blob;
}

static bool build_cache(cllm_gm_matcher *m, int node, gm_cache *c) {
    const cllm_gm_vocab *v = m->v;
    int mark = m->st.n_f;
    ivec acc = {0}, rej = {0}, unc = {0};
    bool ok = false;
    uint8_t *hb = malloc((size_t)v->max_depth + 2); /* the rule could end at a depth <= d */
    gm_set s0 = {0};
    /* in the root rule the context is the output's end: reaching it leaves nothing uncertain */
    bool bottom = !m->g->in_root[node];
    if (!hb || !gm_start(m, node, bottom ? GM_BOTTOM : 0, &s0)) goto out;
    m->woff[0] = 0;
    if (!level_put(m, 0, &s0)) goto out;
    hb[0] = bottom && s0.accept;
    gm_set *nx = &m->tmp;
    for (int i = 1; i < v->n_nodes;) {
        int d = v->depth[i];
        gm_set cur = {.h = m->wbuf + m->woff[d - 1], .n = m->woff[d] - m->woff[d - 1]};
        if (!gm_step(m, &cur, v->byte[i], nx)) goto out;
        bool live = nx->n || nx->accept;
        ivec *dst = live ? &acc : hb[d - 1] ? &unc : &rej;
        if (!iv_range(dst, v->tok, v->tok0[i], v->tok0[i + 1])) goto out;
        hb[d] = hb[d - 1] || (bottom && nx->accept);
        if (!nx->n) {
            if (!iv_range(hb[d] ? &unc : &rej, v->tok, v->tok0[i + 1], v->tsub[i])) goto out;
            i = v->end[i];
            continue;
        }
        if (!level_put(m, d, nx)) goto out;
        i++;
    }
    c->walk = unc.n > UNC_WALK;
    c->inverted = rej.n < acc.n;
    ivec *keep = c->inverted ? &rej : &acc;
    c->ids = keep->p;
    c->n_ids = keep->n;
    keep->p = NULL;
    if (!c->walk) {
        c->unc = unc.p;
        c->n_unc = unc.n;
        unc.p = NULL;
        if (c->n_unc && !(c->unc_blob = pack_uncertain(v, c->unc, c->n_unc)))
            c->walk = true; /* out of memory: the real-context walk needs no list */
    }
    c->ready = true;
    ok = true;
out:
    gm_stk_rollback(&m->st, mark);
    gm_set_free(&s0);
    free(hb);
    free(acc.p);
    free(rej.p);
    free(unc.p);
    return ok;
}

static gm_cache *get_cache(cllm_gm_matcher *m, int node) {
    cllm_gm *g = m->g;
    gm_cache *c = NULL;
    pthread_mutex_lock(&g->mu);
    if (!g->cache) {
        g->cache = calloc((size_t)g->n_nodes, sizeof(gm_cache));
        g->cache_vocab = m->v;
    }
    if (g->cache && g->cache_vocab == m->v) {
        c = &g->cache[node];
        if (!c->ready && !build_cache(m, node, c)) c = NULL;
    }
    pthread_mutex_unlock(&g->mu);
    return c;
}

/* Sets the bit of each uncertain token that survives from the one-head state {head}. The
 * tokens come packed in trie preorder (pack_uncertain), so consecutive ones share prefixes: the
 * state after each prefix byte is kept per depth and only the bytes past the common prefix with
 * the previous token are stepped. (A check per token from scratch, reading each token's length
 * and bytes through the vocabulary, cost ~0.8 ms per step for the ~2800 uncertain tokens of a
 * JSON value position at 248k tokens, mostly cache misses.) */
static bool check_uncertain(cllm_gm_matcher *m, int head, const uint8_t *blob, int n,
                            uint32_t *mask) {
    gm_set one = {.h = &head, .n = 1};
    m->woff[0] = 0;
    if (!level_put(m, 0, &one)) return false;
    uint32_t have = 0; /* levels 0..have hold the states after the previous token's bytes */
    gm_set *nx = &m->tmp;
    for (int k = 0; k < n; k++) {
        int32_t t;
        uint16_t len, lcp;
        memcpy(&t, blob, 4);
        memcpy(&len, blob + 4, 2);
        memcpy(&lcp, blob + 6, 2);
        const uint8_t *b = blob + 8;
        blob += 8 + len;
        if (mask[t >> 5] & (1u << (t & 31))) {
            if (lcp < have) have = lcp; /* the levels past lcp belong to a token not stepped */
            continue;
        }
        uint32_t d = lcp < have ? lcp : have;
        bool ok = true;
        for (; d < len; d++) {
            gm_set cur = {.h = m->wbuf + m->woff[d], .n = m->woff[d + 1] - m->woff[d]};
            if (!gm_step(m, &cur, b[d], nx)) return false;
            if (!nx->n) {
                ok = nx->accept && d + 1 == len;
                break;
            }
            if (!level_put(m, (int)d + 1, nx)) return false;
        }
        have = d < len ? d : len;
        if (ok) mask[t >> 5] |= 1u << (t & 31);
    }
    return true;
}

int gm_mask_fill(cllm_gm_matcher *m, uint32_t *mask) {
    const cllm_gm_vocab *v = m->v;
    int W = (v->V + 31) / 32;
    memset(mask, 0, (size_t)W * sizeof(uint32_t));
    if (m->done) return 0;
    int mark = m->st.n_f;
    bool fallback = m->broken;
    for (int k = 0; k < m->cur.n && !fallback; k++) {
        int head = m->cur.h[k];
        gm_cache *c = get_cache(m, m->st.f[head].node);
        if (!c) {
            fallback = true;
            break;
        }
        if (c->walk) {
            gm_set one = {.h = &head, .n = 1};
            if (!walk_runtime(m, &one, mask)) fallback = true;
            continue;
        }
        if (c->inverted) {
            uint32_t *s = m->scratch;
            memcpy(s, v->valid, (size_t)W * sizeof(uint32_t));
            for (int i = 0; i < c->n_ids; i++) s[c->ids[i] >> 5] &= ~(1u << (c->ids[i] & 31));
            for (int i = 0; i < c->n_unc; i++) s[c->unc[i] >> 5] &= ~(1u << (c->unc[i] & 31));
            for (int w = 0; w < W; w++) mask[w] |= s[w];
        } else {
            set_bits(mask, c->ids, 0, c->n_ids);
        }
        if (c->n_unc && !check_uncertain(m, head, c->unc_blob, c->n_unc, mask)) fallback = true;
    }
    gm_stk_rollback(&m->st, mark);
    if (fallback && !m->broken) {
        /* a cap hit while caching: the exact (slow) path still gives the right mask */
        return cllm_gm_matcher_mask_slow(m, mask);
    }
    if (m->cur.accept || m->broken)
        for (int i = 0; i < v->n_eos; i++)
            if (v->eos[i] >= 0 && v->eos[i] < v->V) mask[v->eos[i] >> 5] |= 1u << (v->eos[i] & 31);
    int cnt = 0;
    for (int w = 0; w < W; w++) cnt += popcount32(mask[w]);
    return cnt;
}

int cllm_gm_matcher_mask(cllm_gm_matcher *m, uint32_t *mask) {
    return gm_mask_fill(m, mask);
}

void cllm_gm_precompute(cllm_gm *g, const cllm_gm_vocab *v) {
    cllm_gm_matcher *m = cllm_gm_matcher_new(g, v);
    if (!m) return;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].ne) get_cache(m, i);
    cllm_gm_matcher_free(m);
}

void cllm_gm_prepare(cllm_gm *g, const cllm_gm_vocab *v, const volatile bool *stop, int max_nodes) {
    cllm_gm_matcher *m = g->n_nodes <= max_nodes ? cllm_gm_matcher_new(g, v) : NULL;
    for (int i = 0; m && i < g->n_nodes && !(stop && *stop); i++)
        if (g->nodes[i].ne) get_cache(m, i);
    cllm_gm_matcher_free(m);
    pthread_mutex_lock(&g->mu);
    g->prepared = v;
    pthread_mutex_unlock(&g->mu);
}

bool cllm_gm_is_prepared(cllm_gm *g, const cllm_gm_vocab *v) {
    pthread_mutex_lock(&g->mu);
    bool r = g->prepared == v;
    pthread_mutex_unlock(&g->mu);
    return r;
}
