/* The matcher: a set of stacks over the compiled program, advanced one byte at a time.
 *
 * A stack is a chain of hash-consed frames (node, parent): equal stacks are the same frame id, so
 * a set of stacks is a small sorted array of ints and duplicates vanish. The top frame's node has
 * byte edges; calls and rule ends are resolved eagerly (closure) after every byte. Frames pushed
 * while computing a mask are rolled back afterwards, so a matcher's memory grows only with the
 * stacks its real output creates. Parent 0 ends the root rule (accept); parent GM_BOTTOM stands
 * for an unknown context in the mask-cache analysis. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_int.h"

enum { MAX_HEADS = 4096, MAX_FRAMES = 1 << 24, MAX_VISIT = 1 << 16 };

static uint32_t fhash(int node, int parent) {
    uint64_t z = ((uint64_t)(uint32_t)node << 32 | (uint32_t)parent) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(z >> 32);
}

static int stk_init(gm_stk *st) {
    memset(st, 0, sizeof(*st));
    st->cap_f = 1024;
    st->f = malloc((size_t)st->cap_f * sizeof(gm_frame));
    st->slot = malloc((size_t)st->cap_f * sizeof(int32_t));
    st->tab_cap = 4096;
    st->tab = calloc((size_t)st->tab_cap, sizeof(int32_t));
    if (!st->f || !st->slot || !st->tab) return -1;
    st->f[0] = (gm_frame){-1, 0}; /* none */
    st->f[1] = (gm_frame){-1, 0}; /* BOTTOM */
    st->slot[0] = st->slot[1] = -1;
    st->n_f = 2;
    return 0;
}

static void stk_free(gm_stk *st) {
    free(st->f);
    free(st->slot);
    free(st->tab);
    memset(st, 0, sizeof(*st));
}

static int rehash(gm_stk *st) {
    int nc = st->tab_cap * 2;
    int32_t *t = calloc((size_t)nc, sizeof(int32_t));
    if (!t) return -1;
    for (int i = 2; i < st->n_f; i++) {
        uint32_t h = fhash(st->f[i].node, st->f[i].parent) & (uint32_t)(nc - 1);
        while (t[h]) h = (h + 1) & (uint32_t)(nc - 1);
        t[h] = i;
        st->slot[i] = (int32_t)h;
    }
    free(st->tab);
    st->tab = t;
    st->tab_cap = nc;
    return 0;
}

/* The frame (node, parent)'s id, added when new; -1 on ENOMEM. */
static int gm_frame_intern(gm_stk *st, int node, int parent) {
    uint32_t mask = (uint32_t)st->tab_cap - 1, h = fhash(node, parent) & mask;
    for (;;) {
        int32_t id = st->tab[h];
        if (!id) break;
        if (st->f[id].node == node && st->f[id].parent == parent) return id;
        h = (h + 1) & mask;
    }
    if (st->n_f >= MAX_FRAMES) return -1;
    if (st->n_f == st->cap_f) {
        int nc = st->cap_f * 2;
        gm_frame *f = realloc(st->f, (size_t)nc * sizeof(gm_frame));
        if (!f) return -1;
        st->f = f;
        int32_t *s = realloc(st->slot, (size_t)nc * sizeof(int32_t));
        if (!s) return -1;
        st->slot = s;
        st->cap_f = nc;
    }
    int id = st->n_f++;
    st->f[id] = (gm_frame){node, parent};
    st->tab[h] = id;
    st->slot[id] = (int32_t)h;
    if ((long)st->n_f * 2 > st->tab_cap && rehash(st)) return -1;
    return id;
}

/* Removes frames >= n_f, newest first. With linear probing and newest-first removal no older
 * entry ever probed past a removed one's slot (it was empty when the older entry went in; a
 * rehash re-inserts in id order), so clearing the slot restores the table exactly. */
void gm_stk_rollback(gm_stk *st, int n_f) {
    if (st->n_f > n_f) st->epoch++;
    while (st->n_f > n_f) {
        int id = --st->n_f;
        st->tab[st->slot[id]] = 0;
    }
}

void gm_set_free(gm_set *s) {
    free(s->h);
    memset(s, 0, sizeof(*s));
}

/* No duplicate check: a step's closure visits each (node, parent) pair once, so each frame id
 * is pushed once (the search made a step at the head cap quadratic), and copies are of such
 * sets. */
static bool set_push(gm_set *s, int id) {
    if (s->n >= MAX_HEADS) return false;
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 8;
        int *h = realloc(s->h, (size_t)nc * sizeof(int));
        if (!h) return false;
        s->h = h;
        s->cap = nc;
    }
    s->h[s->n++] = id;
    return true;
}

static bool gm_set_copy(gm_set *dst, const gm_set *src) {
    dst->n = 0;
    dst->accept = src->accept;
    for (int i = 0; i < src->n; i++)
        if (!set_push(dst, src->h[i])) return false;
    return true;
}

enum { VIS_LINEAR = 32 }; /* pairs searched linearly before the hash set takes over */

static uint64_t vis_pair(int node, int parent) {
    return (uint64_t)(uint32_t)node << 32 | (uint32_t)parent;
}

static void vis_insert(cllm_gm_matcher *m, int node, int parent) {
    uint32_t mask = (uint32_t)m->vis_cap - 1, h = fhash(node, parent) & mask;
    while (m->vis_stamp[h] == m->vis_gen) h = (h + 1) & mask;
    m->vis_stamp[h] = m->vis_gen;
    m->vis_key[h] = vis_pair(node, parent);
}

/* Puts this step's pairs into the hash set: a fresh table of cap slots, or (cap 0) the current
 * one under a new stamp, which makes the previous step's slots stale without clearing them. */
static bool vis_fill(cllm_gm_matcher *m, int cap) {
    if (cap) {
        uint64_t *k = malloc((size_t)cap * sizeof(uint64_t));
        uint32_t *st = calloc((size_t)cap, sizeof(uint32_t));
        if (!k || !st) {
            free(k), free(st);
            return false;
        }
        free(m->vis_key), free(m->vis_stamp);
        m->vis_key = k, m->vis_stamp = st, m->vis_cap = cap, m->vis_gen = 1;
    } else if (++m->vis_gen == 0) { /* the stamps wrapped: clear them once */
        memset(m->vis_stamp, 0, (size_t)m->vis_cap * sizeof(uint32_t));
        m->vis_gen = 1;
    }
    for (int i = 0; i < m->n_vis; i += 2) vis_insert(m, m->vis[i], m->vis[i + 1]);
    return true;
}

/* 1 when (node, parent) was already visited in this step, else records it and returns 0; -1
 * on the visit cap or out of memory. Up to VIS_LINEAR pairs (the usual step) a linear search;
 * past that a stamped hash set, so a step near the cap costs time linear in its pairs instead
 * of quadratic (a grammar at the caps took seconds per step). */
static int vis_seen(cllm_gm_matcher *m, int node, int parent) {
    int pairs = m->n_vis / 2;
    if (pairs < VIS_LINEAR) {
        for (int i = 0; i < m->n_vis; i += 2)
            if (m->vis[i] == node && m->vis[i + 1] == parent) return 1;
    } else {
        uint64_t key = vis_pair(node, parent);
        uint32_t mask = (uint32_t)m->vis_cap - 1, h = fhash(node, parent) & mask;
        for (; m->vis_stamp[h] == m->vis_gen; h = (h + 1) & mask)
            if (m->vis_key[h] == key) return 1;
    }
    if (m->n_vis + 2 > MAX_VISIT) return -1;
    if (m->n_vis + 2 > m->cap_vis) {
        int nc = m->cap_vis ? m->cap_vis * 2 : 64;
        int *v = realloc(m->vis, (size_t)nc * sizeof(int));
        if (!v) return -1;
        m->vis = v;
        m->cap_vis = nc;
    }
    m->vis[m->n_vis++] = node;
    m->vis[m->n_vis++] = parent;
    pairs++;
    if (pairs == VIS_LINEAR) {
        if (!vis_fill(m, m->vis_cap ? 0 : 256)) return -1;
    } else if (pairs > VIS_LINEAR) {
        if (pairs * 2 > m->vis_cap) {
            if (!vis_fill(m, m->vis_cap * 2)) return -1;
        } else {
            vis_insert(m, node, parent);
        }
    }
    return 0;
}

/* Adds the closure of stack (node, parent) to out: pushes called rules, pops finished ones. */
static bool closure(cllm_gm_matcher *m, int node, int parent, gm_set *out) {
    const cllm_gm *g = m->g;
    /* visited (node, parent) pairs of this step: avoids exponential re-expansion */
    int seen = vis_seen(m, node, parent);
    if (seen) return seen > 0;
    const gm_node *nd = &g->nodes[node];
    if (nd->ne) {
        int id = gm_frame_intern(&m->st, node, parent);
        if (id < 0 || !set_push(out, id)) return false;
    }
    for (int j = 0; j < nd->nc; j++) {
        gm_call c = g->calls[nd->c0 + j];
        int ret = gm_frame_intern(&m->st, c.ret, parent);
        if (ret < 0 || !closure(m, g->rule_start[c.rule], ret, out)) return false;
    }
    if (nd->final) {
        if (parent <= GM_BOTTOM) {
            out->accept = true;
        } else {
            gm_frame f = m->st.f[parent];
            if (!closure(m, f.node, f.parent, out)) return false;
        }
    }
    return true;
}

bool gm_start(cllm_gm_matcher *m, int node, int parent, gm_set *out) {
    out->n = 0;
    out->accept = false;
    m->n_vis = 0;
    return closure(m, node, parent, out);
}

/* The one-head step memo: a cache walk steps the same single frame on the same byte over and
 * over (a string's character loop returns to one frame), and a lookup is several times cheaper
 * than the edge scan, closure and frame interning. Direct-mapped; a one-head result is stored. */
enum { MEMO_BITS = 12 };
typedef struct gm_memo {
    uint32_t key;   /* frame id << 8 | byte (frame ids stay below 2^24, MAX_FRAMES) */
    uint32_t stamp; /* frame-table epoch + 1; 0 = empty */
    int32_t to;     /* the next head, -1 = none */
    uint8_t accept;
} gm_memo;

bool gm_memo_enable(cllm_gm_matcher *m) {
    if (!m->memo) m->memo = calloc((size_t)1 << MEMO_BITS, sizeof(gm_memo));
    return m->memo != NULL;
}

static bool step_heads(cllm_gm_matcher *m, const gm_set *cur, int byte, gm_set *next) {
    const cllm_gm *g = m->g;
    next->n = 0;
    next->accept = false;
    m->n_vis = 0;
    for (int i = 0; i < cur->n; i++) {
        gm_frame f = m->st.f[cur->h[i]];
        const gm_node *nd = &g->nodes[f.node];
        const gm_edge *e = g->edges + nd->e0;
        for (int j = 0; j < nd->ne && e[j].lo <= byte; j++)
            if (byte <= e[j].hi && !closure(m, e[j].to, f.parent, next)) return false;
    }
    return true;
}

bool gm_step(cllm_gm_matcher *m, const gm_set *cur, int byte, gm_set *next) {
    if (!m->memo || cur->n != 1) return step_heads(m, cur, byte, next);
    uint32_t key = (uint32_t)cur->h[0] << 8 | (uint32_t)byte;
    gm_memo *e = &m->memo[(key * 2654435761u) >> (32 - MEMO_BITS)];
    if (e->stamp == m->st.epoch + 1 && e->key == key) {
        next->n = 0;
        next->accept = e->accept;
        return e->to < 0 || set_push(next, e->to);
    }
    if (!step_heads(m, cur, byte, next)) return false;
    if (next->n <= 1) *e = (gm_memo){key, m->st.epoch + 1, next->n ? next->h[0] : -1, next->accept};
    return true;
}

cllm_gm_matcher *cllm_gm_matcher_new(cllm_gm *g, const cllm_gm_vocab *v) {
    cllm_gm_matcher *m = calloc(1, sizeof(*m));
    if (!m) return NULL;
    m->g = cllm_gm_ref(g);
    m->v = v;
    if (stk_init(&m->st)) goto fail;
    if (v) {
        m->scratch = calloc((size_t)(v->V + 31) / 32, sizeof(uint32_t));
        m->woff = malloc((size_t)(v->max_depth + 2) * sizeof(int));
        m->wacc = malloc((size_t)(v->max_depth + 2));
        if (!m->scratch || !m->woff || !m->wacc) goto fail;
    }
    if (!gm_start(m, g->root_start, 0, &m->cur)) m->broken = m->capped = true;
    return m;
fail:
    cllm_gm_matcher_free(m);
    return NULL;
}

void cllm_gm_matcher_free(cllm_gm_matcher *m) {
    if (!m) return;
    stk_free(&m->st);
    gm_set_free(&m->cur);
    gm_set_free(&m->tmp);
    gm_set_free(&m->tmp2);
    free(m->vis);
    free(m->vis_key);
    free(m->vis_stamp);
    free(m->memo);
    free(m->wbuf);
    free(m->woff);
    free(m->wacc);
    free(m->scratch);
    cllm_gm_unref(m->g);
    free(m);
}

enum { PROBE_DEPTH = 64 }; /* bytes of the greedy walk: 64 x 256 steps, a few ms at most */

bool gm_probe_start(cllm_gm *g) {
    cllm_gm_matcher *m = cllm_gm_matcher_new(g, NULL);
    if (!m) return true; /* out of memory: not a verdict on the grammar */
    bool ok = !m->broken;
    /* every byte from each state of a walk that follows the byte leaving the most stacks: the
     * first bytes, and the way into a large alternation behind a fixed prefix ('{"a":[' before
     * 5,000 object shapes), are where a grammar outgrows the caps */
    for (int d = 0; ok && d < PROBE_DEPTH; d++) {
        int best = -1, most = 0;
        for (int byte = 0; ok && byte < 256; byte++) {
            int mark = m->st.n_f;
            ok = gm_step(m, &m->cur, byte, &m->tmp);
            if (ok && m->tmp.n > most) most = m->tmp.n, best = byte;
            gm_stk_rollback(&m->st, mark);
        }
        if (!ok || best < 0) break;
        if (!gm_step(m, &m->cur, best, &m->tmp)) break; /* out of memory */
        gm_set t = m->cur;
        m->cur = m->tmp;
        m->tmp = t;
    }
    cllm_gm_matcher_free(m);
    return ok;
}

/* Runs bytes from cur; *ok_end tells whether they were all consumed with a live or accepting
 * state. When commit, the matcher moves there. */
static bool run_bytes(cllm_gm_matcher *m, const char *s, size_t n, bool commit) {
    if (m->done || m->broken) return n == 0 && !m->broken;
    int mark = m->st.n_f;
    gm_set *a = &m->tmp, *b = &m->tmp2;
    if (!gm_set_copy(a, &m->cur)) return m->capped = true, false;
    for (size_t i = 0; i < n; i++) {
        bool stepped = gm_step(m, a, (unsigned char)s[i], b);
        if (!stepped || (b->n == 0 && !(b->accept && i == n - 1))) {
            if (!stepped) m->capped = true; /* a cap, not the language, refused the bytes */
            gm_stk_rollback(&m->st, mark);
            return false;
        }
        gm_set *t = a;
        a = b;
        b = t;
    }
    if (!commit) {
        gm_stk_rollback(&m->st, mark);
        return true;
    }
    gm_set t = m->cur;
    m->cur = *a;
    *a = t;
    return true;
}

bool cllm_gm_matcher_accept_bytes(cllm_gm_matcher *m, const char *s, size_t n) {
    return run_bytes(m, s, n, true);
}

bool cllm_gm_matcher_can_accept_bytes(cllm_gm_matcher *m, const char *s, size_t n) {
    return run_bytes(m, s, n, false);
}

static bool is_eos(const cllm_gm_vocab *v, int t) {
    for (int i = 0; v && i < v->n_eos; i++)
        if (v->eos[i] == t) return true;
    return false;
}

bool cllm_gm_matcher_accept_token(cllm_gm_matcher *m, int token) {
    const cllm_gm_vocab *v = m->v;
    if (!v || token < 0 || token >= v->V || m->done) return false;
    if (is_eos(v, token)) {
        if (!m->cur.accept) return false;
        m->done = true;
        return true;
    }
    if (!v->bytes[token] || !v->len[token]) return false;
    return run_bytes(m, v->bytes[token], v->len[token], true);
}

bool cllm_gm_matcher_is_accepting(const cllm_gm_matcher *m) {
    return m->done || m->cur.accept;
}

bool cllm_gm_matcher_is_done(const cllm_gm_matcher *m) {
    return m->done || (m->cur.accept && m->cur.n == 0);
}

bool cllm_gm_matcher_hit_cap(const cllm_gm_matcher *m) {
    return m->capped;
}

int cllm_gm_matcher_n_heads(const cllm_gm_matcher *m) {
    return m->cur.n;
}

int cllm_gm_matcher_mask_slow(cllm_gm_matcher *m, uint32_t *mask) {
    const cllm_gm_vocab *v = m->v;
    int W = (v->V + 31) / 32, cnt = 0;
    memset(mask, 0, (size_t)W * sizeof(uint32_t));
    if (m->done) return 0;
    for (int t = 0; t < v->V; t++) {
        bool ok;
        if (is_eos(v, t))
            ok = m->cur.accept;
        else
            ok = v->bytes[t] && v->len[t] && !m->broken &&
                 cllm_gm_matcher_can_accept_bytes(m, v->bytes[t], v->len[t]);
        if (ok) mask[t >> 5] |= 1u << (t & 31), cnt++;
    }
    return cnt;
}
