/* MoE block (docs/model.md §2.5; Qwen3-MoE without the shared expert) and the dense SwiGLU MLP.
 *
 * Routing per token: router logits -> fp32 softmax -> top-k (ties to the lower expert id) ->
 * renormalise when norm_topk_prob. The T*k (token, slot) assignments are counting-sorted by
 * expert (stable, token order), the tokens' normed rows gathered per expert, and each active
 * expert then runs gate/up and down ONCE over all of its tokens, all experts of the layer in one
 * parallel matmul pass. The per-token combine sums the k expert outputs in slot (rank) order, so
 * the result of a token does not depend on which other tokens are in the batch. */
#include <math.h>
#include <string.h>

#include "model/fwd_int.h"

#define MOE_INLINE_ROWS 16 /* expert rows (tokens x k) gathered and activated inline */

typedef struct moe_job {
    cllm_fwd_ctx *c;
    const fwd_moe_w *w;
    int T, k, E, I;
} moe_job;

static void route_worker(void *vj, size_t b, size_t e, int tid) {
    moe_job *j = vj;
    cllm_fwd_ctx *c = j->c;
    bool renorm = c->m->cfg.norm_topk_prob;
    for (size_t t = b; t < e; t++) {
        float *lg = c->proj + t * (size_t)j->E; /* softmax in place */
        float mx = lg[0];
        for (int i = 1; i < j->E; i++) mx = lg[i] > mx ? lg[i] : mx;
        double sum = 0.0;
        for (int i = 0; i < j->E; i++) {
            lg[i] = expf(lg[i] - mx);
            sum += lg[i];
        }
        float inv = (float)(1.0 / sum);
        for (int i = 0; i < j->E; i++) lg[i] *= inv;
        int *id = c->top_id + t * j->k;
        float *w = c->top_w + t * j->k, tot = 0.0f;
        /* one pass keeping the k best in order (value descending; an equal value goes after
         * the lower ids already held, so ties go to the lower expert id) */
        int n = 0;
        for (int i = 0; i < j->E; i++) {
            if (n == j->k && !(lg[i] > lg[id[n - 1]])) continue;
            int p = n < j->k ? n++ : n - 1;
            for (; p > 0 && lg[i] > lg[id[p - 1]]; p--) id[p] = id[p - 1];
            id[p] = i;
        }
        for (int s = 0; s < j->k; s++) {
            w[s] = lg[id[s]];
            tot += w[s];
        }
        if (renorm)
            for (int s = 0; s < j->k; s++) w[s] /= tot;
    }
}

static void gather_worker(void *vj, size_t b, size_t e, int tid) {
    moe_job *j = vj;
    cllm_fwd_ctx *c = j->c;
    int H = c->m->cfg.hidden_size;
    for (size_t p = b; p < e; p++)
        memcpy(c->xg + p * H, c->xn + (size_t)(c->slot_at[p] / j->k) * H,
               (size_t)H * sizeof(float));
}

/* act[i] = silu(gate[i]) * up[i], in place into the gate half of rows of width 2I. */
typedef struct act_job {
    const cllm_kern_ops *k;
    float *gu;
    int I;
} act_job;

static void act_worker(void *vj, size_t b, size_t e, int tid) {
    act_job *j = vj;
    for (size_t r = b; r < e; r++) {
        float *g = j->gu + r * 2 * (size_t)j->I, *u = g + j->I;
        j->k->silu_mul(g, g, u, j->I);
    }
}

static void combine_worker(void *vj, size_t b, size_t e, int tid) {
    moe_job *j = vj;
    cllm_fwd_ctx *c = j->c;
    int H = c->m->cfg.hidden_size;
    int Ish = c->m->cfg.shared_expert_intermediate_size;
    for (size_t t = b; t < e; t++) {
        float *y = c->tmp + t * H;
        for (int i = 0; i < H; i++) y[i] = 0.0f;
        for (int s = 0; s < j->k; s++) {
            float w = c->top_w[t * j->k + s];
            const float *d = c->dn + (size_t)c->pos_of[t * j->k + s] * H;
            for (int i = 0; i < H; i++) y[i] += w * d[i];
        }
        if (j->w->has_shared) {
            float g = fwd_sigmoid(c->proj2[t * (2 * (size_t)Ish + 1) + 2 * (size_t)Ish]);
            const float *sd = c->o + t * H;
            for (int i = 0; i < H; i++) y[i] += sd[i] * g;
        }
        float *x = c->x + t * H;
        for (int i = 0; i < H; i++) x[i] += y[i];
    }
}

cllm_status fwd_moe(cllm_fwd_ctx *c, const fwd_moe_w *w, int T) {
    const cllm_config *f = &c->m->cfg;
    int H = f->hidden_size;
    moe_job j = {c, w, T, f->n_experts_per_tok, f->n_experts, f->moe_intermediate_size};
    int Ish = f->shared_expert_intermediate_size, lds = 2 * Ish + 1;
    cllm_status s = fwd_mm_add(c, &w->router, c->xn, H, T, c->proj, (size_t)j.E);
    if (s == CLLM_OK && w->has_shared) {
        s = fwd_mm_add(c, &w->shared.gate, c->xn, H, T, c->proj2, lds);
        if (s == CLLM_OK) s = fwd_mm_add(c, &w->shared.up, c->xn, H, T, c->proj2 + Ish, lds);
        if (s == CLLM_OK) s = fwd_mm_add(c, &w->shared_gate, c->xn, H, T, c->proj2 + 2 * Ish, lds);
    }
    if (s == CLLM_OK) s = fwd_mm_run(c);
    if (s != CLLM_OK) return s;
    cllm_pool_for(c->pool, (size_t)T, route_worker, &j);
    /* counting sort of assignments by expert, stable in (token, slot) order */
    int n = T * j.k;
    memset(c->exp_cnt, 0, (size_t)j.E * sizeof(int));
    for (int a = 0; a < n; a++) c->exp_cnt[c->top_id[a]]++;
    c->exp_off[0] = 0;
    for (int e = 0; e < j.E; e++) c->exp_off[e + 1] = c->exp_off[e] + c->exp_cnt[e];
    for (int e = 0; e < j.E; e++) c->exp_cnt[e] = 0;
    for (int a = 0; a < n; a++) {
        int e = c->top_id[a], p = c->exp_off[e] + c->exp_cnt[e]++;
        c->pos_of[a] = p;
        c->slot_at[p] = a;
    }
    /* decode (one token, k rows of H; SiLU over k x I): microseconds of work, less than a
     * parallel region's hand-off, so the caller does it */
    cllm_pool *small = n <= MOE_INLINE_ROWS ? NULL : c->pool;
    cllm_pool_for(small, (size_t)n, gather_worker, &j);
    int I = j.I;
    for (int e = 0; e < j.E; e++) {
        int cnt = c->exp_cnt[e];
        if (!cnt) continue;
        const fwd_mlp *x = &w->experts[e];
        if (!x->gate.data) {                 /* expert not bound in this process */
            if (c->m->tp_size > 1) continue; /* expert parallel: another rank owns it */
            return CLLM_EUNSUPPORTED;
        }
        float *X = c->xg + (size_t)c->exp_off[e] * H, *Y = c->gu + (size_t)c->exp_off[e] * 2 * I;
        s = fwd_mm_add(c, &x->gate, X, H, cnt, Y, 2 * (size_t)I);
        if (s == CLLM_OK) s = fwd_mm_add(c, &x->up, X, H, cnt, Y + I, 2 * (size_t)I);
        if (s != CLLM_OK) return s;
    }
    if ((s = fwd_mm_run(c)) != CLLM_OK) return s;
    act_job aj = {c->k, c->gu, I};
    cllm_pool_for(small, (size_t)n, act_worker, &aj);
    if (w->has_shared) {
        /* shared act: rows of width lds, gate at 0, up at Ish */
        for (int t = 0; t < T; t++) {
            float *g = c->proj2 + (size_t)t * lds, *u = g + Ish;
            c->k->silu_mul(g, g, u, Ish);
        }
        if ((s = fwd_mm_add(c, &w->shared.down, c->proj2, lds, T, c->o, H)) != CLLM_OK) return s;
    }
    for (int e = 0; e < j.E; e++) {
        int cnt = c->exp_cnt[e];
        if (!cnt) continue;
        const fwd_mlp *x = &w->experts[e];
        if (!x->down.data) { /* expert parallel: the owner adds it in the all-reduce */
            memset(c->dn + (size_t)c->exp_off[e] * H, 0, (size_t)cnt * H * sizeof(float));
            continue;
        }
        s = fwd_mm_add(c, &x->down, c->gu + (size_t)c->exp_off[e] * 2 * I, 2 * (size_t)I, cnt,
                       c->dn + (size_t)c->exp_off[e] * H, H);
        if (s != CLLM_OK) return s;
    }
    if ((s = fwd_mm_run(c)) != CLLM_OK) return s;
    cllm_pool_for(c->pool, (size_t)T, combine_worker, &j);
    return CLLM_OK;
}

cllm_status fwd_mlp_dense(cllm_fwd_ctx *c, const fwd_mlp *mlp, int T) {
    int H = c->m->cfg.hidden_size, I = mlp->gate.rows;
    /* proj holds [T][2I] (sized for 2 * intermediate_size) */
    cllm_status s = fwd_mm_add(c, &mlp->gate, c->xn, H, T, c->proj, 2 * (size_t)I);
    if (s == CLLM_OK) s = fwd_mm_add(c, &mlp->up, c->xn, H, T, c->proj + I, 2 * (size_t)I);
    if (s == CLLM_OK) s = fwd_mm_run(c);
    if (s != CLLM_OK) return s;
    act_job aj = {c->k, c->proj, I};
    cllm_pool_for(c->pool, (size_t)T, act_worker, &aj);
    s = fwd_mm_add(c, &mlp->down, c->proj, 2 * (size_t)I, T, c->tmp, H);
    if (s == CLLM_OK) s = fwd_mm_run(c);
    if (s != CLLM_OK) return s;
    size_t n = (size_t)T * H;
    for (size_t i = 0; i < n; i++) c->x[i] += c->tmp[i];
    return CLLM_OK;
}
