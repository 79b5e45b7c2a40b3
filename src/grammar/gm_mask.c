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

/* Does the token survive from the one-head state {head}? */
static bool check_token(cllm_gm_matcher *m, int head, int t) {
    const cllm_gm_vocab *v = m->v;
    int x = head;
    gm_set cur = {.h = &x, .n = 1};
    const gm_set *in = &cur;
    for (uint32_t i = 0; i < v->len[t]; i++) {
        gm_set *out = (i & 1) ? &m->tmp2 : &m->tmp; /* reused: no allocation per token */
        if (!gm_step(m, in, (unsigned char)v->bytes[t][i], out)) return false;
        if (!out->n) return out->accept && i + 1 == v->len[t];
        in = out;
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
        for (int i = 0; i < c->n_unc; i++) {
            int t = c->unc[i];
            if (mask[t >> 5] & (1u << (t & 31))) continue;
            if (check_token(m, head, t)) mask[t >> 5] |= 1u << (t & 31);
        }
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
    for (int w = 0; w < W; w++) cnt += __builtin_popcount(mask[w]);
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
