/* Token masks: a pruned walk of the vocabulary trie against a set of stacks, and per-node caches
 * of the context-independent part (xgrammar's adaptive token mask cache).
 *
 * Cache analysis for node n starts from the stack (n, BOTTOM): a token whose bytes stay inside
 * n's rule (or end exactly where the rule may end) is accepted whatever lies below; one that
 * dies before the rule could end is rejected; one that can only continue past the rule's end is
 * "uncertain" and is checked at run time against the real stack. Every node can still finish its
 * rule (gm_compile.c prunes the others), which is what makes "accepted" context-independent.
 * What may follow the rule in any context (one byte and byte pairs, gm_analyze.c) narrows the
 * uncertain tokens to those a real context may take; nodes that no token tells apart share one
 * cache (gm_analyze.c too). A node whose uncertain set is still large is marked `walk`: its mask
 * is a trie walk from the real stack, pruned by the real context. */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
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

/* The rejected tokens of a cache: all tokens in the trie but the accepted and uncertain ones.
 * They are only counted during the walk (most nodes reject most of the vocabulary) and listed
 * here when that list is the shorter one. */
static int32_t *list_rejected(cllm_gm_matcher *m, const ivec *acc, const ivec *unc, int n_rej) {
    const cllm_gm_vocab *v = m->v;
    int W = (v->V + 31) / 32, n = 0;
    uint32_t *s = m->scratch;
    int32_t *out = malloc(((size_t)n_rej + 1) * sizeof(int32_t));
    if (!out) return NULL;
    memcpy(s, v->valid, (size_t)W * sizeof(uint32_t));
    for (int i = 0; i < acc->n; i++) s[acc->p[i] >> 5] &= ~(1u << (acc->p[i] & 31));
    for (int i = 0; i < unc->n; i++) s[unc->p[i] >> 5] &= ~(1u << (unc->p[i] & 31));
    for (int w = 0; w < W; w++)
        for (uint32_t x = s[w]; x && n < n_rej; x &= x - 1) out[n++] = w * 32 + __builtin_ctz(x);
    return out;
}

/* What may follow the rule of the node being cached (gm_analyze.c): one byte, and two. */
typedef struct gm_fol {
    const uint32_t *f1, *f2; /* f2 NULL: any pair (too many rules for pair sets) */
} gm_fol;

static inline bool fol1(const gm_fol *f, int b) {
    return f->f1[b >> 5] >> (b & 31) & 1;
}

static inline bool fol2(const gm_fol *f, int a, int b) {
    return !f->f2 || (f->f2[8 * a + (b >> 5)] >> (b & 31) & 1);
}

/* Adds the tokens of the subtree at trie node j to unc (uncertain) or counts them rejected. */
static bool put_sub(const cllm_gm_vocab *v, int j, bool uncertain, ivec *unc, int *n_rej) {
    if (uncertain) return iv_range(unc, v->tok, v->tok0[j], v->tsub[j]);
    *n_rej += v->tsub[j] - v->tok0[j];
    return true;
}

/* The tokens below trie node i (depth d) after the state died there. With the rule's end at
 * depth d (ends) or a byte past an end at d (cand, the end one byte up) a context may still take
 * the next one or two bytes: those subtrees are uncertain, the rest rejected. */
static bool dead_below(const cllm_gm_vocab *v, const gm_fol *f, int i, bool past, bool cand,
                       bool ends, ivec *unc, int *n_rej) {
    if (past) return iv_range(unc, v->tok, v->tok0[i + 1], v->tsub[i]);
    if (!cand && !ends) {
        *n_rej += v->tsub[i] - v->tok0[i + 1];
        return true;
    }
    for (int j = i + 1; j < v->end[i]; j = v->end[j]) {
        int bj = v->byte[j];
        if (cand && fol2(f, v->byte[i], bj)) {
            if (!put_sub(v, j, true, unc, n_rej)) return false;
        } else if (ends && fol1(f, bj)) { /* one byte past the end: the pair decides below */
            if (!iv_range(unc, v->tok, v->tok0[j], v->tok0[j + 1])) return false;
            for (int k = j + 1; k < v->end[j]; k = v->end[k])
                if (!put_sub(v, k, fol2(f, bj, v->byte[k]), unc, n_rej)) return false;
        } else {
            *n_rej += v->tsub[j] - v->tok0[j];
        }
    }
    return true;
}

static bool build_cache(cllm_gm_matcher *m, int node, gm_cache *c) {
    const cllm_gm_vocab *v = m->v;
    const cllm_gm *g = m->g;
    int mark = m->st.n_f;
    ivec acc = {0}, unc = {0};
    int n_rej = 0;
    bool ok = false;
    /* Per depth d of the walk: ends[d], the rule may end after the first d bytes; cand[d], it
     * may have ended at d - 1 and byte d can follow it; past[d], it may have ended earlier and
     * the two bytes after that end can follow it. A dead token of depth d is uncertain when
     * cand[d] or past[d] (a real context may take it), otherwise rejected. */
    size_t D = (size_t)v->max_depth + 2;
    uint8_t *ends = malloc(4 * D), *cand = ends + D, *past = ends + 2 * D, *wb = ends + 3 * D;
    gm_set s0 = {0};
    /* in the root rule the context is the output's end: reaching it leaves nothing uncertain */
    bool bottom = !g->in_root[node];
    static const uint32_t all[8] = {~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u, ~0u};
    int rule = g->node_rule[node];
    gm_fol f = {g->follow ? g->follow + 8 * rule : all,
                g->follow2 ? g->follow2 + (size_t)2048 * rule : NULL};
    gm_memo_enable(m); /* only faster: without it (out of memory) every step is computed */
    if (!ends || !gm_start(m, node, bottom ? GM_BOTTOM : 0, &s0)) goto out;
    m->woff[0] = 0;
    if (!level_put(m, 0, &s0)) goto out;
    /* An end before the first byte needs no uncertain tokens: the closure that made this head
     * also popped to what follows the rule, and those heads' caches take such tokens. */
    ends[0] = cand[0] = past[0] = 0;
    gm_set *nx = &m->tmp;
    for (int i = 1; i < v->n_nodes;) {
        int d = v->depth[i], b = v->byte[i];
        gm_set cur = {.h = m->wbuf + m->woff[d - 1], .n = m->woff[d] - m->woff[d - 1]};
        if (!gm_step(m, &cur, b, nx)) goto out;
        bool live = nx->n || nx->accept;
        cand[d] = ends[d - 1] && fol1(&f, b);
        past[d] = d >= 2 && (past[d - 1] || (cand[d - 1] && fol2(&f, wb[d - 1], b)));
        ends[d] = bottom && nx->accept;
        wb[d] = (uint8_t)b; /* byte d of the current path */
        if (live || past[d] || cand[d]) {
            if (!iv_range(live ? &acc : &unc, v->tok, v->tok0[i], v->tok0[i + 1])) goto out;
        } else {
            n_rej += v->tok0[i + 1] - v->tok0[i];
        }
        if (!nx->n) {
            if (!dead_below(v, &f, i, past[d], cand[d], ends[d], &unc, &n_rej)) goto out;
            i = v->end[i];
            continue;
        }
        if (!level_put(m, d, nx)) goto out;
        i++;
    }
    c->walk = unc.n > UNC_WALK;
    c->inverted = n_rej < acc.n;
    if (c->inverted) {
        if (!(c->ids = list_rejected(m, &acc, &unc, n_rej))) goto out;
        c->n_ids = n_rej;
    } else {
        c->ids = acc.p;
        c->n_ids = acc.n;
        acc.p = NULL;
    }
    c->n_acc = acc.n;
    int W = (v->V + 31) / 32;
    if (c->n_ids >= W && (c->bits = malloc((size_t)W * sizeof(uint32_t)))) {
        uint32_t *b = c->bits;
        if (c->inverted) {
            memcpy(b, v->valid, (size_t)W * sizeof(uint32_t));
            for (int i = 0; i < c->n_ids; i++) b[c->ids[i] >> 5] &= ~(1u << (c->ids[i] & 31));
            for (int i = 0; i < unc.n; i++) b[unc.p[i] >> 5] &= ~(1u << (unc.p[i] & 31));
        } else {
            memset(b, 0, (size_t)W * sizeof(uint32_t));
            set_bits(b, c->ids, 0, c->n_ids);
        }
        free(c->ids);
        c->ids = NULL;
        c->n_ids = 0;
    }
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
    free(ends);
    free(acc.p);
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
        /* without it (out of memory) each node gets its own, less precise cache */
        if (g->cache && !g->follow) gm_analyze(m, m->v->max_depth);
    }
    if (g->cache && g->cache_vocab == m->v) {
        c = &g->cache[g->cache_rep ? g->cache_rep[node] : node];
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
static int check_uncertain(cllm_gm_matcher *m, int head, const uint8_t *blob, int n,
                           uint32_t *mask) {
    gm_set one = {.h = &head, .n = 1};
    m->woff[0] = 0;
    if (!level_put(m, 0, &one)) return -1;
    int added = 0;
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
            if (!gm_step(m, &cur, b[d], nx)) return -1;
            if (!nx->n) {
                ok = nx->accept && d + 1 == len;
                break;
            }
            if (!level_put(m, (int)d + 1, nx)) return -1;
        }
        have = d < len ? d : len;
        if (ok) mask[t >> 5] |= 1u << (t & 31), added++;
    }
    return added;
}

/* One head whose cache has no real-context walk, the usual step: the mask is written in one
 * pass (an inverted cache straight from the valid set) and its count follows from the cache's
 * sizes. Returns the count, -1 when the general path must run, -2 on a cap (fallback). */
static int mask_one_head(cllm_gm_matcher *m, uint32_t *mask) {
    const cllm_gm_vocab *v = m->v;
    int head = m->cur.h[0], W = (v->V + 31) / 32, cnt;
    gm_cache *c = get_cache(m, m->st.f[head].node);
    if (!c) return -2;
    if (c->walk) return -1;
    if (c->bits) {
        memcpy(mask, c->bits, (size_t)W * sizeof(uint32_t));
        cnt = c->n_acc;
    } else if (c->inverted) { /* ids: the rejected tokens, disjoint from the uncertain ones */
        memcpy(mask, v->valid, (size_t)W * sizeof(uint32_t));
        for (int i = 0; i < c->n_ids; i++) mask[c->ids[i] >> 5] &= ~(1u << (c->ids[i] & 31));
        for (int i = 0; i < c->n_unc; i++) mask[c->unc[i] >> 5] &= ~(1u << (c->unc[i] & 31));
        cnt = c->n_acc;
    } else {
        memset(mask, 0, (size_t)W * sizeof(uint32_t));
        set_bits(mask, c->ids, 0, c->n_ids);
        cnt = c->n_acc;
    }
    if (c->n_unc) {
        int added = check_uncertain(m, head, c->unc_blob, c->n_unc, mask);
        if (added < 0) return -2;
        cnt += added;
    }
    return cnt;
}

static int gm_mask_fill(cllm_gm_matcher *m, uint32_t *mask) {
    const cllm_gm_vocab *v = m->v;
    int W = (v->V + 31) / 32;
    if (m->done) {
        memset(mask, 0, (size_t)W * sizeof(uint32_t));
        return 0;
    }
    int mark = m->st.n_f;
    bool fallback = m->broken;
    int cnt = -1; /* known count of the bits set, -1 = count them */
    if (!fallback && m->cur.n == 1) {
        cnt = mask_one_head(m, mask);
        fallback = cnt == -2;
    }
    if (cnt == -1) {
        memset(mask, 0, (size_t)W * sizeof(uint32_t));
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
            if (c->bits) {
                for (int w = 0; w < W; w++) mask[w] |= c->bits[w];
            } else if (c->inverted) {
                uint32_t *s = m->scratch;
                memcpy(s, v->valid, (size_t)W * sizeof(uint32_t));
                for (int i = 0; i < c->n_ids; i++) s[c->ids[i] >> 5] &= ~(1u << (c->ids[i] & 31));
                for (int i = 0; i < c->n_unc; i++) s[c->unc[i] >> 5] &= ~(1u << (c->unc[i] & 31));
                for (int w = 0; w < W; w++) mask[w] |= s[w];
            } else {
                set_bits(mask, c->ids, 0, c->n_ids);
            }
            if (c->n_unc && check_uncertain(m, head, c->unc_blob, c->n_unc, mask) < 0)
                fallback = true;
        }
    }
    gm_stk_rollback(&m->st, mark);
    if (fallback && !m->broken) {
        /* a cap hit while caching: the exact (slow) path still gives the right mask */
        return cllm_gm_matcher_mask_slow(m, mask);
    }
    if (m->cur.accept || m->broken)
        for (int i = 0; i < v->n_eos; i++) {
            int e = v->eos[i];
            if (e < 0 || e >= v->V || mask[e >> 5] >> (e & 31) & 1) continue;
            mask[e >> 5] |= 1u << (e & 31);
            if (cnt >= 0) cnt++;
        }
    if (cnt < 0) {
        cnt = 0;
        for (int w = 0; w < W; w++) cnt += popcount32(mask[w]);
    }
    return cnt;
}

int cllm_gm_matcher_mask(cllm_gm_matcher *m, uint32_t *mask) {
    if (m->broken) return -1;
    bool was = m->capped;
    m->capped = false;
    int cnt = gm_mask_fill(m, mask);
    bool hit = m->capped;
    m->capped |= was;
    if (!hit) return cnt;
    /* a cap refused some tokens: the mask is a subset of the language's. While it still allows
     * some text the output stays valid; allowing nothing (or only the end) would read as "the
     * structure is complete" and stop the output short, so that is an error instead */
    const cllm_gm_vocab *v = m->v;
    int eos = 0;
    for (int i = 0; i < v->n_eos; i++) {
        int e = v->eos[i];
        if (e >= 0 && e < v->V && mask[e >> 5] >> (e & 31) & 1) eos++;
    }
    return cnt - eos > 0 ? cnt : -1;
}

void cllm_gm_precompute(cllm_gm *g, const cllm_gm_vocab *v) {
    cllm_gm_matcher *m = cllm_gm_matcher_new(g, v);
    if (!m) return;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].ne) get_cache(m, i);
    cllm_gm_matcher_free(m);
}

void cllm_gm_prepare(cllm_gm *g, const cllm_gm_vocab *v, const volatile bool *stop, int max_nodes) {
    if (g->n_nodes <= max_nodes)
        while (!(stop && *stop) && !cllm_gm_prepare_some(g, v, 0.05)) {
        }
    pthread_mutex_lock(&g->mu);
    g->prepared = v;
    pthread_mutex_unlock(&g->mu);
}

bool cllm_gm_prepare_some(cllm_gm *g, const cllm_gm_vocab *v, double max_s) {
    pthread_mutex_lock(&g->mu);
    int i = g->prep_next;
    bool done = g->prepared == v;
    pthread_mutex_unlock(&g->mu);
    if (done) return true;
    cllm_gm_matcher *m = cllm_gm_matcher_new(g, v);
    double t0 = cllm_time_s();
    for (int k = 0; m && i < g->n_nodes; i++, k++) {
        if (g->nodes[i].ne) get_cache(m, i);
        if ((k & 15) == 15 && cllm_time_s() - t0 > max_s) {
            i++;
            break;
        }
    }
    if (!m) i = g->n_nodes; /* out of memory: the caches fill on first use instead */
    cllm_gm_matcher_free(m);
    pthread_mutex_lock(&g->mu);
    if (i > g->prep_next) g->prep_next = i;
    done = g->prep_next >= g->n_nodes;
    if (done) g->prepared = v;
    pthread_mutex_unlock(&g->mu);
    return done;
}

bool cllm_gm_is_prepared(cllm_gm *g, const cllm_gm_vocab *v) {
    pthread_mutex_lock(&g->mu);
    bool r = g->prepared == v;
    pthread_mutex_unlock(&g->mu);
    return r;
}
