/* Builder expressions -> the compiled program: a Thompson NFA per rule (byte edges, epsilon
 * edges, call edges), then epsilon elimination, pruning of nodes that can never finish
 * (so every state the matcher reaches can still complete, which the mask cache relies on), and
 * refusal of undefined rules and left recursion (the matcher would push without end). */
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_int.h"

typedef struct tedge {
    int kind; /* 0 eps, 1 byte, 2 call */
    uint8_t lo, hi;
    int to, rule;
    int next;
} tedge;

typedef struct tnfa {
    int *head; /* [n] first edge */
    int *rule; /* [n] rule the node belongs to */
    int cur_rule;
    bool *final;
    int n, cap;
    tedge *e;
    int n_e, cap_e;
    bool oom;
    long max;
} tnfa;

static int tnode(tnfa *t) {
    if (t->n >= t->max) {
        t->oom = true;
        return 0;
    }
    if (t->n == t->cap) {
        int nc = t->cap ? t->cap * 2 : 256;
        int *h = realloc(t->head, (size_t)nc * sizeof(int));
        if (h) t->head = h;
        bool *f = realloc(t->final, (size_t)nc * sizeof(bool));
        if (f) t->final = f;
        int *r = realloc(t->rule, (size_t)nc * sizeof(int));
        if (r) t->rule = r;
        if (!h || !f || !r) {
            t->oom = true;
            return 0;
        }
        t->cap = nc;
    }
    t->head[t->n] = -1;
    t->final[t->n] = false;
    t->rule[t->n] = t->cur_rule;
    return t->n++;
}

static void tedge_add(tnfa *t, int from, int kind, int lo, int hi, int to, int rule) {
    if (t->oom) return;
    if (t->n_e == t->cap_e) {
        int nc = t->cap_e ? t->cap_e * 2 : 512;
        tedge *e = realloc(t->e, (size_t)nc * sizeof(tedge));
        if (!e) {
            t->oom = true;
            return;
        }
        t->e = e;
        t->cap_e = nc;
    }
    t->e[t->n_e] = (tedge){kind, (uint8_t)lo, (uint8_t)hi, to, rule, t->head[from]};
    t->head[from] = t->n_e++;
}

static void build(gm_builder *b, tnfa *t, int x, int from, int to) {
    if (t->oom) return;
    const gx *e = &b->x[x];
    switch (e->kind) {
    case GX_EMPTY:
        tedge_add(t, from, 0, 0, 0, to, 0);
        break;
    case GX_FAIL:
        break;
    case GX_RANGE:
        tedge_add(t, from, 1, e->lo, e->hi, to, 0);
        break;
    case GX_REF:
        tedge_add(t, from, 2, 0, 0, to, e->rule);
        break;
    case GX_ALT:
        for (int i = 0; i < e->nk; i++) build(b, t, b->kids[e->k0 + i], from, to);
        break;
    case GX_SEQ: {
        int cur = from;
        for (int i = 0; i < e->nk; i++) {
            int nx = i == e->nk - 1 ? to : tnode(t);
            build(b, t, b->kids[e->k0 + i], cur, nx);
            cur = nx;
        }
        break;
    }
    case GX_REP: {
        int kid = b->kids[e->k0], cur = from;
        for (int i = 0; i < e->min; i++) {
            int nx = tnode(t);
            build(b, t, kid, cur, nx);
            cur = nx;
        }
        if (e->max < 0) {
            int m = tnode(t);
            tedge_add(t, cur, 0, 0, 0, m, 0);
            build(b, t, kid, m, m);
            tedge_add(t, m, 0, 0, 0, to, 0);
        } else {
            for (int i = e->min; i < e->max; i++) {
                int nx = tnode(t);
                tedge_add(t, cur, 0, 0, 0, to, 0);
                build(b, t, kid, cur, nx);
                cur = nx;
            }
            tedge_add(t, cur, 0, 0, 0, to, 0);
        }
        break;
    }
    }
}

static int cmp_edge(const void *a, const void *b) {
    const gm_edge *p = a, *q = b;
    if (p->lo != q->lo) return p->lo - q->lo;
    if (p->hi != q->hi) return p->hi - q->hi;
    return p->to - q->to;
}

/* prod[i]: some path from node i ends its rule; rprod[r]: rule r can end. false on ENOMEM. */
static bool productive(const cllm_gm *g, int M, bool *prod, bool *rprod) {
    int R = g->n_rules, E = 0, C = 0;
    for (int i = 0; i < M; i++) E += g->nodes[i].ne, C += g->nodes[i].nc;
    int *eo = calloc((size_t)M + 1, sizeof(int)), *ep = malloc(((size_t)E + 1) * sizeof(int));
    int *ro = calloc((size_t)M + 1, sizeof(int)), *rc = malloc(((size_t)C + 1) * sizeof(int));
    int *uo = calloc((size_t)R + 1, sizeof(int)), *uc = malloc(((size_t)C + 1) * sizeof(int));
    int *so = calloc((size_t)M + 1, sizeof(int)), *sr = malloc(((size_t)R + 1) * sizeof(int));
    int *cn = malloc(((size_t)C + 1) * sizeof(int)), *q = malloc(((size_t)M + 1) * sizeof(int));
    bool ok = eo && ep && ro && rc && uo && uc && so && sr && cn && q;
    if (ok) {
        /* CSR: byte-edge predecessors by target, call sites by return node and by rule, rules by
         * start node */
        for (int i = 0; i < M; i++) {
            const gm_node *nd = &g->nodes[i];
            for (int j = 0; j < nd->ne; j++) eo[g->edges[nd->e0 + j].to + 1]++;
            for (int j = 0; j < nd->nc; j++) {
                gm_call c = g->calls[nd->c0 + j];
                ro[c.ret + 1]++;
                uo[c.rule + 1]++;
                cn[nd->c0 + j] = i;
            }
        }
        for (int r = 0; r < R; r++) so[g->rule_start[r] + 1]++;
        for (int i = 0; i < M; i++) eo[i + 1] += eo[i], ro[i + 1] += ro[i], so[i + 1] += so[i];
        for (int r = 0; r < R; r++) uo[r + 1] += uo[r];
        int *fe = malloc(((size_t)M + 1) * sizeof(int)),
            *fr = malloc(((size_t)M + 1) * sizeof(int)),
            *fs = malloc(((size_t)M + 1) * sizeof(int)),
            *fu = malloc(((size_t)R + 1) * sizeof(int));
        ok = fe && fr && fs && fu;
        if (ok) {
            memcpy(fe, eo, (size_t)M * sizeof(int));
            memcpy(fr, ro, (size_t)M * sizeof(int));
            memcpy(fs, so, (size_t)M * sizeof(int));
            memcpy(fu, uo, (size_t)R * sizeof(int));
            for (int i = 0; i < M; i++) {
                const gm_node *nd = &g->nodes[i];
                for (int j = 0; j < nd->ne; j++) ep[fe[g->edges[nd->e0 + j].to]++] = i;
                for (int j = 0; j < nd->nc; j++) {
                    int ci = nd->c0 + j;
                    rc[fr[g->calls[ci].ret]++] = ci;
                    uc[fu[g->calls[ci].rule]++] = ci;
                }
            }
            for (int r = 0; r < R; r++) sr[fs[g->rule_start[r]]++] = r;
        }
        free(fe), free(fr), free(fs), free(fu);
    }
    if (ok) {
        int qh = 0, qt = 0;
#define MARK(x)                                                                                    \
    do {                                                                                           \
        if (!prod[x]) prod[x] = true, q[qt++] = (x);                                               \
    } while (0)
        for (int i = 0; i < M; i++)
            if (g->nodes[i].final) MARK(i);
        while (qh < qt) {
            int x = q[qh++];
            for (int k = eo[x]; k < eo[x + 1]; k++) MARK(ep[k]);
            for (int k = ro[x]; k < ro[x + 1]; k++)
                if (rprod[g->calls[rc[k]].rule]) MARK(cn[rc[k]]);
            for (int k = so[x]; k < so[x + 1]; k++) {
                int r = sr[k];
                if (rprod[r]) continue;
                rprod[r] = true;
                for (int u = uo[r]; u < uo[r + 1]; u++)
                    if (prod[g->calls[uc[u]].ret]) MARK(cn[uc[u]]);
            }
        }
#undef MARK
    }
    free(eo), free(ep), free(ro), free(rc), free(uo), free(uc), free(so), free(sr), free(cn),
        free(q);
    return ok;
}

static cllm_status fail(gm_builder *b, cllm_status c, const char *msg, const char *name) {
    gb_error(b, c, "%s%s%s", msg, name ? " " : "", name ? name : "");
    return c;
}

cllm_status gb_finish(gm_builder *b, cllm_gm **out) {
    *out = NULL;
    if (b->failed) return b->err ? b->err->code : CLLM_EINVAL;
    if (b->n_rules == 0) return fail(b, CLLM_EINVAL, "empty grammar", NULL);
    for (int r = 0; r < b->n_rules; r++)
        if (b->rule_body[r] < 0)
            return fail(b, CLLM_EINVAL, "undefined rule", b->rule_name[r] ? b->rule_name[r] : "?");
    tnfa t = {.max = b->o.max_nodes};
    int *tstart = malloc((size_t)(unsigned)b->n_rules * sizeof(int));
    if (!tstart) return fail(b, CLLM_ENOMEM, "out of memory", NULL);
    for (int r = 0; r < b->n_rules; r++) {
        t.cur_rule = r;
        int s = tnode(&t), f = tnode(&t);
        if (t.oom) break;
        t.final[f] = true;
        tstart[r] = s;
        build(b, &t, b->rule_body[r], s, f);
    }
    cllm_status st = CLLM_OK;
    int *map = NULL, *stack = NULL, *mark = NULL;
    cllm_gm *g = NULL;
    if (t.oom) {
        st = fail(b, CLLM_ERANGE, "grammar too large for the automaton cap", NULL);
        goto done;
    }
    /* epsilon elimination: node n gets the byte/call edges and final flag of its eps-closure */
    int N = t.n;
    map = malloc((size_t)N * sizeof(int));
    stack = malloc((size_t)N * sizeof(int));
    mark = calloc((size_t)N, sizeof(int));
    g = calloc(1, sizeof(*g));
    if (!map || !stack || !mark || !g) {
        st = fail(b, CLLM_ENOMEM, "out of memory", NULL);
        goto done;
    }
    for (int i = 0; i < N; i++) map[i] = -1;
    /* live Thompson nodes: rule starts and byte/call targets */
    map[0] = 0;
    for (int r = 0; r < b->n_rules; r++) map[tstart[r]] = 0;
    for (int i = 0; i < t.n_e; i++)
        if (t.e[i].kind != 0) map[t.e[i].to] = 0;
    int M = 0;
    for (int i = 0; i < N; i++)
        if (map[i] == 0)
            map[i] = M++;
        else
            map[i] = -1;
    g->nodes = calloc((size_t)M, sizeof(gm_node));
    int cap_e = 256, cap_c = 64;
    g->edges = malloc((size_t)cap_e * sizeof(gm_edge));
    g->calls = malloc((size_t)cap_c * sizeof(gm_call));
    g->rule_start = malloc((size_t)b->n_rules * sizeof(int));
    if (!g->nodes || !g->edges || !g->calls || !g->rule_start) {
        st = fail(b, CLLM_ENOMEM, "out of memory", NULL);
        goto done;
    }
    g->n_nodes = M;
    g->n_rules = b->n_rules;
    g->in_root = calloc((size_t)M, 1);
    g->node_rule = malloc((size_t)M * sizeof(int) + 1);
    if (!g->in_root || !g->node_rule) {
        st = fail(b, CLLM_ENOMEM, "out of memory", NULL);
        goto done;
    }
    bool root_called = false;
    for (int i = 0; i < t.n_e; i++) root_called |= t.e[i].kind == 2 && t.e[i].rule == 0;
    for (int i = 0; i < N; i++)
        if (map[i] >= 0) {
            g->node_rule[map[i]] = t.rule[i];
            if (!root_called && t.rule[i] == 0) g->in_root[map[i]] = 1;
        }
    for (int r = 0; r < b->n_rules; r++) g->rule_start[r] = map[tstart[r]];
    g->root_start = g->rule_start[0];
    int stamp = 0;
    for (int i = 0; i < N; i++) {
        if (map[i] < 0) continue;
        gm_node *nd = &g->nodes[map[i]];
        stamp++;
        int sp = 0;
        stack[sp++] = i;
        mark[i] = stamp;
        nd->e0 = g->n_edges;
        int c0 = g->n_calls;
        while (sp) {
            int u = stack[--sp];
            if (t.final[u]) nd->final = true;
            for (int k = t.head[u]; k >= 0; k = t.e[k].next) {
                tedge *e = &t.e[k];
                if (e->kind == 0) {
                    if (mark[e->to] != stamp) mark[e->to] = stamp, stack[sp++] = e->to;
                } else if (e->kind == 1) {
                    if (g->n_edges == cap_e) {
                        cap_e *= 2;
                        gm_edge *ne = realloc(g->edges, (size_t)cap_e * sizeof(gm_edge));
                        if (!ne) {
                            st = fail(b, CLLM_ENOMEM, "out of memory", NULL);
                            goto done;
                        }
                        g->edges = ne;
                    }
                    g->edges[g->n_edges++] = (gm_edge){e->lo, e->hi, map[e->to]};
                } else {
                    if (g->n_calls == cap_c) {
                        cap_c *= 2;
                        gm_call *nc = realloc(g->calls, (size_t)cap_c * sizeof(gm_call));
                        if (!nc) {
                            st = fail(b, CLLM_ENOMEM, "out of memory", NULL);
                            goto done;
                        }
                        g->calls = nc;
                    }
                    g->calls[g->n_calls++] = (gm_call){e->rule, map[e->to]};
                }
            }
        }
        nd->ne = g->n_edges - nd->e0;
        nd->c0 = c0;
        nd->nc = g->n_calls - c0;
        qsort(g->edges + nd->e0, (size_t)nd->ne, sizeof(gm_edge), cmp_edge);
        /* drop duplicate edges (alternatives that share a prefix byte and target) */
        int k = 0;
        for (int j = 0; j < nd->ne; j++)
            if (!k || cmp_edge(&g->edges[nd->e0 + k - 1], &g->edges[nd->e0 + j]))
                g->edges[nd->e0 + k++] = g->edges[nd->e0 + j];
        g->n_edges = nd->e0 + k;
        nd->ne = k;
    }
    /* productivity: a node is productive when some path from it ends its rule */
    bool *prod = calloc((size_t)M, sizeof(bool)), *rprod = calloc((size_t)g->n_rules, 1);
    bool *null = calloc((size_t)g->n_rules, 1);
    if (!prod || !rprod || !null) {
        free(prod), free(rprod), free(null);
        st = fail(b, CLLM_ENOMEM, "out of memory", NULL);
        goto done;
    }
    /* a worklist over reverse edges, O(nodes + edges): a fixpoint sweep was quadratic on long
     * chains (fuzz_grammar: a 155-byte GBNF input took 78 s) */
    if (!productive(g, M, prod, rprod)) {
        free(prod), free(rprod), free(null);
        st = fail(b, CLLM_ENOMEM, "out of memory", NULL);
        goto done;
    }
    if (!prod[g->root_start]) {
        free(prod), free(rprod), free(null);
        st = fail(b, CLLM_EINVAL, "the grammar matches nothing (no way to finish the root rule)",
                  b->empty_hint[0] ? b->empty_hint : NULL);
        goto done;
    }
    for (int i = 0; i < M; i++) { /* prune edges into dead ends */
        gm_node *nd = &g->nodes[i];
        int k = 0;
        for (int j = 0; j < nd->ne; j++)
            if (prod[g->edges[nd->e0 + j].to]) g->edges[nd->e0 + k++] = g->edges[nd->e0 + j];
        nd->ne = k;
        k = 0;
        for (int j = 0; j < nd->nc; j++) {
            gm_call c = g->calls[nd->c0 + j];
            if (rprod[c.rule] && prod[c.ret]) g->calls[nd->c0 + k++] = c;
        }
        nd->nc = k;
    }
    /* nullable rules, then left recursion: a rule reaching a call of itself without a byte */
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < g->n_rules; r++) {
            if (null[r]) continue;
            stamp++;
            int sp = 0;
            stack[sp++] = g->rule_start[r];
            while (sp && !null[r]) {
                int u = stack[--sp];
                gm_node *nd = &g->nodes[u];
                if (nd->final) null[r] = changed = true;
                for (int j = 0; j < nd->nc; j++) {
                    gm_call c = g->calls[nd->c0 + j];
                    if (null[c.rule] && c.ret < N && mark[c.ret] != stamp)
                        mark[c.ret] = stamp, stack[sp++] = c.ret;
                }
            }
        }
    }
    for (int r = 0; r < g->n_rules && st == CLLM_OK; r++) {
        /* rules reachable from r's start without consuming a byte */
        stamp++;
        int sp = 0;
        stack[sp++] = g->rule_start[r];
        mark[g->rule_start[r]] = stamp;
        while (sp) {
            int u = stack[--sp];
            gm_node *nd = &g->nodes[u];
            for (int j = 0; j < nd->nc; j++) {
                gm_call c = g->calls[nd->c0 + j];
                if (c.rule == r) {
                    st = fail(b, CLLM_EINVAL, "left recursion in rule",
                              b->rule_name[r] ? b->rule_name[r] : "(generated)");
                    break;
                }
                int s2 = g->rule_start[c.rule];
                if (mark[s2] != stamp) mark[s2] = stamp, stack[sp++] = s2;
                if (null[c.rule] && mark[c.ret] != stamp) mark[c.ret] = stamp, stack[sp++] = c.ret;
            }
            if (st != CLLM_OK) break;
        }
    }
    free(prod), free(rprod), free(null);
    if (st != CLLM_OK) goto done;
    g->refs = 1;
    pthread_mutex_init(&g->mu, NULL);
    if (!gm_probe_start(g)) {
        /* known now, so a 400 instead of a request that fails (or stops short) at its start */
        cllm_gm_unref(g);
        g = NULL;
        st = fail(b, CLLM_ERANGE,
                  "grammar too ambiguous: more than 4096 parse stacks live at once early in the "
                  "output (too many alternatives that share a prefix and are not plain "
                  "strings)",
                  NULL);
        goto done;
    }
    *out = g;
    g = NULL;
done:
    if (g) {
        free(g->nodes);
        free(g->edges);
        free(g->calls);
        free(g->rule_start);
        free(g->in_root);
        free(g->node_rule);
        free(g);
    }
    free(map);
    free(stack);
    free(mark);
    free(tstart);
    free(t.head);
    free(t.final);
    free(t.rule);
    free(t.e);
    return st;
}

cllm_gm *cllm_gm_ref(cllm_gm *g) {
    if (g) __atomic_add_fetch(&g->refs, 1, __ATOMIC_RELAXED);
    return g;
}

void cllm_gm_unref(cllm_gm *g) {
    if (!g || __atomic_sub_fetch(&g->refs, 1, __ATOMIC_ACQ_REL)) return;
    if (g->cache) {
        for (int i = 0; i < g->n_nodes; i++) {
            free(g->cache[i].ids);
            free(g->cache[i].bits);
            free(g->cache[i].unc);
            free(g->cache[i].unc_blob);
        }
        free(g->cache);
    }
    pthread_mutex_destroy(&g->mu);
    free(g->nodes);
    free(g->edges);
    free(g->calls);
    free(g->rule_start);
    free(g->in_root);
    free(g->node_rule);
    free(g->follow);
    free(g->follow2);
    free(g->cache_rep);
    free(g);
}

int cllm_gm_n_nodes(const cllm_gm *g) {
    return g->n_nodes;
}
