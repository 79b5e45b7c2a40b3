/* Tensor-parallel slicing of a bound model (dist/shard.h says which part a rank owns).
 *
 * cllm_model_load binds every tensor as a full view into the mmap first (which touches no page),
 * then, for a rank of N > 1, this file replaces each view by the rank's slice and the model's
 * config by the rank's local dims, so the unchanged forward code runs a "narrower" model:
 *  - column-parallel matrices (q/k/v, in_proj_*, gate/up, lm_head) keep a range of output rows:
 *    one contiguous range of a float matrix stays a view in the mmap; several ranges (GDN
 *    in_proj_qkv: q, k and v parts) are gathered into an owned copy; a GPTQ matrix (packed
 *    along K, N contiguous) is copied column-wise (ranges multiples of 8);
 *  - row-parallel matrices (o_proj, out_proj, down_proj) keep a range of input columns: an
 *    owned copy for float weights; for GPTQ whole groups, so qweight/qzeros/scales stay views
 *    (rows along K are contiguous);
 *  - per-head vectors (A_log, dt_bias, conv taps, biases) follow their heads or channels;
 *  - expert parallel: a rank keeps its experts whole and leaves the others unbound.
 * Which rule a tensor follows is its table row's split and range (model/tensor_table.c).
 * Only the slices are ever read, so a rank's resident weights are its slice plus the replicated
 * parts (embeddings, norms, router). The MTP head (unused by the forward pass) keeps its full
 * views and is never touched. */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "dist/dist.h"
#include "model/tensor_table_int.h"
#include "model/tp_shard.h"
#include "model/weights_int.h"

typedef struct rng {
    int off, n;
} rng;

typedef struct tp_ctx {
    cllm_model *m;
    cllm_error *err;
    int size;
} tp_ctx;

static cllm_status refuse(tp_ctx *t, const char *name, const char *why, int a, int b) {
    return cllm_err_set(t->err, CLLM_EINVAL,
                        "tensor parallel %d: %s: %s (%d, %d); choose a --tensor-parallel-size "
                        "that divides it",
                        t->size, name, why, a, b);
}

static void *take(tp_ctx *t, size_t bytes) {
    return fwd_model_own(t->m, bytes);
}

/* After copying a slice out of the checkpoint: drops this process's mapping of the source pages
 * (read-only file mapping, so a later read would simply fault them in again), so the rank's RSS
 * holds its copy and not the whole tensor. Sources that are not in the mmap are left alone. */
static void drop_src(tp_ctx *t, const void *p, size_t n) {
    fwd_ckpt_drop(t->m->ckpt, p, n);
}

/* Keeps output rows r[0..nr) (in that order). */
static cllm_status wt_rows(tp_ctx *t, fwd_wt *w, const rng *r, int nr, const char *name) {
    if (!w->data) return CLLM_OK;
    int n = 0;
    for (int i = 0; i < nr; i++) n += r[i].n;
    if (w->q.bits) {
        cllm_qweight *q = &w->q;
        int per = 32 / q->bits, kw = q->K / per, kg = q->K / q->group;
        for (int i = 0; i < nr; i++)
            if (r[i].off % 8 || r[i].n % 8)
                return refuse(t, name, "GPTQ output columns must be cut in multiples of 8, slice",
                              r[i].off, r[i].n);
        int32_t *qw = take(t, (size_t)kw * n * 4), *qz = take(t, (size_t)kg * (n / per) * 4);
        uint16_t *sc = take(t, (size_t)kg * n * 2);
        if (!qw || !qz || !sc) return cllm_err_set(t->err, CLLM_ENOMEM, "out of memory: %s", name);
        for (int k = 0, o = 0; k < kw; k++, o = 0)
            for (int i = 0; i < nr; o += r[i].n, i++)
                memcpy(qw + (size_t)k * n + o, q->qweight + (size_t)k * q->N + r[i].off,
                       (size_t)r[i].n * 4);
        for (int g = 0, o = 0; g < kg; g++, o = 0)
            for (int i = 0; i < nr; o += r[i].n, i++) {
                memcpy(sc + (size_t)g * n + o, q->scales + (size_t)g * q->N + r[i].off,
                       (size_t)r[i].n * 2);
                memcpy(qz + (size_t)g * (n / per) + o / per,
                       q->qzeros + (size_t)g * (q->N / per) + r[i].off / per,
                       (size_t)(r[i].n / per) * 4);
            }
        drop_src(t, q->qweight, (size_t)kw * q->N * 4);
        drop_src(t, q->scales, (size_t)kg * q->N * 2);
        q->qweight = qw;
        q->qzeros = qz;
        q->scales = sc;
        q->N = n;
        w->data = qw;
        w->rows = n;
        return CLLM_OK;
    }
    size_t es = cllm_dtype_size(w->dt), rb = (size_t)w->cols * es;
    if (nr == 1) {
        w->data = (const char *)w->data + (size_t)r[0].off * rb;
        w->rows = n;
        return CLLM_OK;
    }
    char *d = take(t, (size_t)n * rb);
    if (!d) return cllm_err_set(t->err, CLLM_ENOMEM, "out of memory: %s", name);
    for (int i = 0, o = 0; i < nr; o += r[i].n, i++)
        memcpy(d + (size_t)o * rb, (const char *)w->data + (size_t)r[i].off * rb,
               (size_t)r[i].n * rb);
    drop_src(t, w->data, (size_t)w->rows * rb);
    w->data = d;
    w->rows = n;
    return CLLM_OK;
}

/* Keeps input columns [c0, c0 + nc). */
static cllm_status wt_cols(tp_ctx *t, fwd_wt *w, int c0, int nc, const char *name) {
    if (!w->data) return CLLM_OK;
    if (w->q.bits) {
        cllm_qweight *q = &w->q;
        int per = 32 / q->bits;
        if (c0 % q->group || nc % q->group || c0 % per || nc % per)
            return refuse(t, name, "a GPTQ input (K) slice must be whole groups, slice", c0, nc);
        q->qweight += (size_t)(c0 / per) * q->N;
        q->scales += (size_t)(c0 / q->group) * q->N;
        q->qzeros += (size_t)(c0 / q->group) * (q->N / per);
        q->K = nc;
        w->data = q->qweight;
        w->cols = nc;
        return CLLM_OK;
    }
    size_t es = cllm_dtype_size(w->dt);
    char *d = take(t, (size_t)w->rows * nc * es);
    if (!d) return cllm_err_set(t->err, CLLM_ENOMEM, "out of memory: %s", name);
    for (int r = 0; r < w->rows; r++)
        memcpy(d + (size_t)r * nc * es, (const char *)w->data + ((size_t)r * w->cols + c0) * es,
               (size_t)nc * es);
    drop_src(t, w->data, (size_t)w->rows * w->cols * es);
    w->data = d;
    w->cols = nc;
    return CLLM_OK;
}

static cllm_status mlp_slice(tp_ctx *t, fwd_mlp *x, int off, int n, const char *name) {
    rng r = {off, n};
    cllm_status s;
    if ((s = wt_rows(t, &x->gate, &r, 1, name)) || (s = wt_rows(t, &x->up, &r, 1, name)) ||
        (s = wt_cols(t, &x->down, off, n, name)))
        return s;
    return CLLM_OK;
}

/* The rank's part of a table row's rows (tt_range, model/tensor_table_int.h): range_of writes
 * them to out and returns how many (GDN in_proj_qkv: q, k and v parts). */
static int range_of(const cllm_config *g, const cllm_shard *sh, int range, rng *out) {
    int hd = g->head_dim, dk = g->lin_k_dim, dv = g->lin_v_dim, Kd = g->lin_n_k_heads * dk;
    switch ((tt_range)range) {
    case TR_ALL:
        return 0;
    case TR_QHEADS: {
        int qs = g->attn_output_gate ? 2 * hd : hd;
        out[0] = (rng){sh->h0 * qs, sh->nh * qs};
        return 1;
    }
    case TR_KV:
        out[0] = (rng){sh->kv0 * hd, sh->nkv * hd};
        return 1;
    case TR_OHEADS:
        out[0] = (rng){sh->h0 * hd, sh->nh * hd};
        return 1;
    case TR_GQKV:
        out[0] = (rng){sh->gk0 * dk, sh->ngk * dk};
        out[1] = (rng){Kd + sh->gk0 * dk, sh->ngk * dk};
        out[2] = (rng){2 * Kd + sh->gv0 * dv, sh->ngv * dv};
        return 3;
    case TR_GV:
        out[0] = (rng){sh->gv0 * dv, sh->ngv * dv};
        return 1;
    case TR_GVH:
        out[0] = (rng){sh->gv0, sh->ngv};
        return 1;
    case TR_I:
        out[0] = (rng){sh->i0, sh->ni};
        return 1;
    case TR_SI:
        out[0] = (rng){sh->si0, sh->nsi};
        return 1;
    }
    return 0;
}

/* A vector cut with its rows (per values a row: a conv channel's taps): one range stays a view
 * into the model's copy, several are gathered into a new one. */
static cllm_status vec_rows(tp_ctx *t, float **v, const rng *r, int nr, size_t per,
                            const char *name) {
    if (!*v || !nr) return CLLM_OK;
    if (nr == 1) {
        *v += (size_t)r[0].off * per;
        return CLLM_OK;
    }
    size_t n = 0;
    for (int i = 0; i < nr; i++) n += (size_t)r[i].n;
    float *d = take(t, n * per * sizeof(float));
    if (!d) return cllm_err_set(t->err, CLLM_ENOMEM, "out of memory: %s", name);
    for (int i = 0, o = 0; i < nr; o += r[i].n, i++)
        memcpy(d + (size_t)o * per, *v + (size_t)r[i].off * per,
               (size_t)r[i].n * per * sizeof(float));
    *v = d;
    return CLLM_OK;
}

/* The routed experts: whole ones under expert parallel (the others left unbound: fwd_moe skips
 * them), else every expert's intermediate rows. */
static cllm_status experts_slice(tp_ctx *t, fwd_mlp *ex, const cllm_shard *sh, const char *nm) {
    cllm_status s;
    for (int e = 0; e < t->m->cfg.n_experts; e++)
        if (sh->ep) {
            if (e < sh->e0 || e >= sh->e0 + sh->ne) ex[e] = (fwd_mlp){0};
        } else if ((s = mlp_slice(t, &ex[e], sh->mi0, sh->nmi, nm))) {
            return s;
        }
    return CLLM_OK;
}

/* Cuts each present row of the layer's blocks (model/tensor_table.c) by its split rule. */
static cllm_status layer_slice(tp_ctx *t, fwd_layer *L, int l, const cllm_shard *sh) {
    const cllm_config *g = &t->m->cfg; /* still the global config here */
    const tt_block *bl[TT_MAX_BLOCKS];
    int nb = tt_layer_blocks(g, L->type, L->is_moe, bl);
    cllm_status s = CLLM_OK;
    for (int b = 0; b < nb && s == CLLM_OK; b++) {
        char nm[96];
        snprintf(nm, sizeof(nm), "layers.%d.%s", l, bl[b]->what);
        for (size_t i = 0; i < bl[b]->n && s == CLLM_OK; i++) {
            const tt_row *r = &bl[b]->rows[i];
            void *at = (char *)L + r->off;
            rng rg[3];
            int nr = range_of(g, sh, r->range, rg);
            if (!tt_present(g, r)) continue;
            if (r->split == TS_EXPERTS) {
                s = experts_slice(t, *(fwd_mlp **)at, sh, nm);
            } else if (r->split == TS_ROWS && r->kind == TT_MAT) {
                s = wt_rows(t, at, rg, nr, nm);
            } else if (r->split == TS_COLS && r->kind == TT_MAT) {
                s = wt_cols(t, at, rg[0].off, rg[0].n, nm);
            } else if (r->split == TS_ROWS) {
                size_t per = 1;
                for (int d = 1; d < r->nd; d++) per *= (size_t)tt_dim(g, r->dims[d]);
                s = vec_rows(t, at, rg, nr, per, nm);
            }
        }
    }
    return s;
}

cllm_status fwd_tp_shard(cllm_model *m, int rank, int size, cllm_error *err) {
    if (size <= 1) return CLLM_OK;
    const cllm_config *g = &m->cfg;
    /* quantized models cut intermediate dims in whole GPTQ groups (row-parallel down_proj) */
    int align = 1;
    for (int l = 0; l < g->n_layers && align == 1; l++) {
        const fwd_layer *L = &m->layers[l];
        const fwd_moe_w *mo = &L->moe;
        const fwd_wt *d = L->is_moe ? (mo->experts ? &mo->experts[0].down : NULL) : &L->mlp.down;
        if (d && d->q.bits) align = d->q.group > 8 ? d->q.group : 8;
        if (mo->has_shared && mo->shared.down.q.bits)
            align = mo->shared.down.q.group > 8 ? mo->shared.down.q.group : 8;
    }
    int ep = cllm_dist_expert_parallel();
    cllm_shard sh;
    cllm_status s = cllm_shard_plan(g, rank, size, align, ep, &sh, err);
    if (s != CLLM_OK) return s;
    tp_ctx t = {m, err, size};
    for (int l = 0; l < g->n_layers; l++)
        if ((s = layer_slice(&t, &m->layers[l], l, &sh)) != CLLM_OK) return s;
    rng v = {sh.v0, sh.nv};
    if (m->lm_head.data == m->embed.data && !m->lm_head.q.bits) { /* tied: a view of the rows */
        m->lm_head.data = (const char *)m->embed.data +
                          (size_t)v.off * m->embed.cols * cllm_dtype_size(m->embed.dt);
        m->lm_head.rows = v.n;
    } else if ((s = wt_rows(&t, &m->lm_head, &v, 1, "lm_head")) != CLLM_OK) {
        return s;
    }
    m->tp_vsplit = take(&t, 2 * (size_t)size * sizeof(int));
    if (!m->tp_vsplit) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    for (int r = 0; r < size; r++) {
        cllm_shard o;
        if ((s = cllm_shard_plan(g, r, size, align, ep, &o, err)) != CLLM_OK) return s;
        m->tp_vsplit[2 * r] = o.v0;
        m->tp_vsplit[2 * r + 1] = o.nv;
    }
    m->tp_rank = rank;
    m->tp_size = size;
    m->tp_hash = cllm_shard_plan_hash(g, size, align, ep);
    cllm_config loc;
    cllm_shard_local_config(g, &sh, &loc);
    m->cfg = loc;
    const cllm_config *c = &m->cfg;
    m->q_rows = c->n_heads * c->head_dim * (c->attn_output_gate ? 2 : 1);
    m->kv_dim = c->n_kv_heads * c->head_dim;
    m->conv_ch = 2 * c->lin_n_k_heads * c->lin_k_dim + c->lin_n_v_heads * c->lin_v_dim;
    return CLLM_OK;
}

/* cllm_model_prefault under tensor parallel: touches the pages of this rank's slices only (the
 * whole-checkpoint walk would map every other rank's weights into this process too). */
typedef struct touch {
    volatile uint8_t sink;
    uint64_t bytes;
} touch;

static void touch_range(touch *t, const void *p, size_t n) {
    const uint8_t *b = p;
    uint8_t s = 0;
    for (size_t i = 0; i < n; i += 4096) s ^= b[i];
    if (n) s ^= b[n - 1];
    t->sink ^= s;
    t->bytes += n;
}

static void touch_wt(touch *t, const fwd_wt *w) {
    if (!w->data) return;
    if (w->q.bits) {
        const cllm_qweight *q = &w->q;
        int per = 32 / q->bits;
        touch_range(t, q->qweight, (size_t)(q->K / per) * q->N * 4);
        touch_range(t, q->scales, (size_t)(q->K / q->group) * q->N * 2);
        touch_range(t, q->qzeros, (size_t)(q->K / q->group) * (q->N / per) * 4);
        return;
    }
    touch_range(t, w->data, (size_t)w->rows * w->cols * cllm_dtype_size(w->dt));
}

static void touch_mat(void *vt, const fwd_wt *w, int expert) {
    (void)expert;
    touch_wt(vt, w);
}

uint64_t fwd_tp_prefault(const cllm_model *m) {
    touch t = {0, 0};
    touch_wt(&t, &m->embed);
    touch_wt(&t, &m->lm_head);
    for (int l = 0; l < m->cfg.n_layers; l++)
        fwd_layer_mats(&m->layers[l], m->cfg.n_experts, touch_mat, &t);
    return t.bytes;
}
