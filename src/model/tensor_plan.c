/* Expected-tensor enumeration; see tensor_plan.h. The text model's tensors are the rows of
 * model/tensor_table.c (its layers' blocks from the architecture's builder); the vision tower's
 * are listed here. Shapes follow the spec (§2, §3). */
#include "model/tensor_plan.h"

#include "model/tensor_table_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct plan {
    const cllm_config *cfg;
    void (*fn)(void *, const cllm_tensor_spec *);
    void *ctx;
    size_t n;
    bool optional;
    cllm_tensor_group force_group; /* CLLM_TG_COUNT = none */
    const tt_row *row;             /* the table row being emitted; NULL: the vision tower */
} plan;

const char *cllm_tensor_group_name(cllm_tensor_group g) {
    static const char *const names[CLLM_TG_COUNT] = {
        "embeddings",     "lm_head",       "norms",     "attention", "gated_deltanet", "router",
        "routed_experts", "shared_expert", "dense_mlp", "mtp",       "vision"};
    return (unsigned)g < CLLM_TG_COUNT ? names[g] : "?";
}

uint64_t cllm_tensor_spec_elems(const cllm_tensor_spec *s) {
    uint64_t n = 1;
    for (int i = 0; i < s->n_dims; i++) n *= (uint64_t)s->shape[i];
    return n;
}

static void emit(plan *p, cllm_tensor_group g, cllm_tensor_init init, int fan_in, int num, int den,
                 int nd, const int64_t *shape, const char *fmt, ...)
    __attribute__((format(printf, 9, 10)));
static void emit(plan *p, cllm_tensor_group g, cllm_tensor_init init, int fan_in, int num, int den,
                 int nd, const int64_t *shape, const char *fmt, ...) {
    cllm_tensor_spec s;
    memset(&s, 0, sizeof(s));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s.name, sizeof(s.name), fmt, ap);
    va_end(ap);
    s.n_dims = nd;
    memcpy(s.shape, shape, (size_t)nd * sizeof(int64_t));
    s.group = p->force_group != CLLM_TG_COUNT ? p->force_group : g;
    s.init = init;
    s.fan_in = fan_in;
    s.active_num = num;
    s.active_den = den;
    s.optional = p->optional;
    s.force_f32 = init == CLLM_INIT_A_LOG;
    s.tp_split = p->row ? p->row->split : TS_NONE;
    s.tp_range = p->row ? p->row->range : TR_ALL;
    p->fn(p->ctx, &s);
    p->n++;
}

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})

static void vec(plan *p, cllm_tensor_group g, cllm_tensor_init init, int64_t n, const char *name) {
    emit(p, g, init, 1, 1, 1, 1, SHAPE(n), "%s", name);
}

static void mat(plan *p, cllm_tensor_group g, cllm_tensor_init init, int64_t rows, int64_t cols,
                const char *name) {
    emit(p, g, init, (int)cols, 1, 1, 2, SHAPE(rows, cols), "%s", name);
}

static void experts(plan *p, const char *lp, int H, cllm_expert_layout layout) {
    const cllm_config *c = p->cfg;
    int E = c->n_experts, I = c->moe_intermediate_size, k = c->n_experts_per_tok;
    if (layout == CLLM_EXPERTS_FUSED) {
        emit(p, CLLM_TG_EXPERTS, CLLM_INIT_LINEAR, H, k, E, 3, SHAPE(E, 2 * I, H),
             "%smlp.experts.gate_up_proj", lp);
        emit(p, CLLM_TG_EXPERTS, CLLM_INIT_OUT_PROJ, I, k, E, 3, SHAPE(E, H, I),
             "%smlp.experts.down_proj", lp);
        return;
    }
    for (int e = 0; e < E; e++) {
        emit(p, CLLM_TG_EXPERTS, CLLM_INIT_LINEAR, H, k, E, 2, SHAPE(I, H),
             "%smlp.experts.%d.gate_proj.weight", lp, e);
        emit(p, CLLM_TG_EXPERTS, CLLM_INIT_LINEAR, H, k, E, 2, SHAPE(I, H),
             "%smlp.experts.%d.up_proj.weight", lp, e);
        emit(p, CLLM_TG_EXPERTS, CLLM_INIT_OUT_PROJ, I, k, E, 2, SHAPE(H, I),
             "%smlp.experts.%d.down_proj.weight", lp, e);
    }
}

/* The present rows of block b under prefix lp (a layer's "model.language_model.layers.3.", or
 * the model's weight_prefix; a top-level row takes none). */
static void block(plan *p, const tt_block *b, const char *lp, cllm_expert_layout layout) {
    const cllm_config *c = p->cfg;
    for (size_t i = 0; i < b->n; i++) {
        const tt_row *r = &b->rows[i];
        if (!tt_present(c, r)) continue;
        p->row = r;
        if (r->kind == TT_EXPERTS) {
            experts(p, lp, c->hidden_size, layout);
            p->row = NULL;
            continue;
        }
        int64_t shape[3];
        for (int d = 0; d < r->nd; d++) shape[d] = tt_dim(c, r->dims[d]);
        cllm_tensor_init init = (cllm_tensor_init)r->init;
        if (r->kind == TT_NORM) init = c->norm_one_plus ? CLLM_INIT_NORM_1P : CLLM_INIT_NORM;
        if (r->kind == TT_NORM_1P) init = CLLM_INIT_NORM_1P;
        /* a token reads one embedding row: active share 1/vocab */
        int den = r->group == CLLM_TG_EMBED ? c->vocab_size : 1;
        emit(p, (cllm_tensor_group)r->group, init, r->nd > 1 ? (int)shape[r->nd - 1] : 1, 1, den,
             r->nd, shape, "%s%s", r->top ? "" : lp, r->name);
        p->row = NULL;
    }
}

/* One decoder layer under prefix lp: the blocks its architecture's builder lists. */
static void layer(plan *p, const char *lp, cllm_layer_type type, bool is_moe,
                  cllm_expert_layout layout) {
    const tt_block *bl[TT_MAX_BLOCKS];
    int n = tt_layer_blocks(p->cfg, type, is_moe, bl);
    for (int i = 0; i < n; i++) block(p, bl[i], lp, layout);
}

static void mtp(plan *p) {
    const cllm_config *c = p->cfg;
    p->optional = true;
    p->force_group = CLLM_TG_MTP;
    block(p, &tt_mtp, "", CLLM_EXPERTS_PER_EXPERT);
    for (int l = 0; l < c->mtp_num_hidden_layers; l++) {
        char lp[64];
        snprintf(lp, sizeof(lp), "mtp.layers.%d.", l);
        /* Official checkpoints store MTP experts per expert even when the main layers are fused. */
        layer(p, lp, CLLM_LAYER_FULL_ATTN, true, CLLM_EXPERTS_PER_EXPERT);
    }
    p->optional = false;
    p->force_group = CLLM_TG_COUNT;
}

/* Vision tower (Qwen3-VL style names; docs/model.md "Vision tower"), bound by the loader when
 * present (model/vision_bind.c). Biases and LayerNorm biases get small random values so a
 * synthetic tower exercises them (the real ones are far from zero). */
static void vision(plan *p) {
    const cllm_vision_config *v = &p->cfg->vision;
    int D = v->hidden_size, F = v->intermediate_size, P = v->patch_size;
    int M = D * v->spatial_merge_size * v->spatial_merge_size;
    p->optional = true;
    p->force_group = CLLM_TG_VISION;
    emit(p, CLLM_TG_VISION, CLLM_INIT_LINEAR, v->in_channels * v->temporal_patch_size * P * P, 1, 1,
         5, SHAPE(D, v->in_channels, v->temporal_patch_size, P, P),
         "model.visual.patch_embed.proj.weight");
    vec(p, CLLM_TG_VISION, CLLM_INIT_BIAS, D, "model.visual.patch_embed.proj.bias");
    mat(p, CLLM_TG_VISION, CLLM_INIT_EMBED, v->num_position_embeddings, D,
        "model.visual.pos_embed.weight");
    for (int b = 0; b < v->depth; b++) {
        char n[160];
        const char *vn[] = {"norm1", "norm2"};
        for (int i = 0; i < 2; i++) {
            snprintf(n, sizeof(n), "model.visual.blocks.%d.%s.weight", b, vn[i]);
            vec(p, CLLM_TG_VISION, CLLM_INIT_NORM, D, n);
            snprintf(n, sizeof(n), "model.visual.blocks.%d.%s.bias", b, vn[i]);
            vec(p, CLLM_TG_VISION, CLLM_INIT_BIAS, D, n);
        }
        struct {
            const char *name;
            int rows, cols;
        } lin[] = {{"attn.qkv", 3 * D, D},
                   {"attn.proj", D, D},
                   {"mlp.linear_fc1", F, D},
                   {"mlp.linear_fc2", D, F}};
        for (int i = 0; i < 4; i++) {
            snprintf(n, sizeof(n), "model.visual.blocks.%d.%s.weight", b, lin[i].name);
            mat(p, CLLM_TG_VISION, CLLM_INIT_LINEAR, lin[i].rows, lin[i].cols, n);
            snprintf(n, sizeof(n), "model.visual.blocks.%d.%s.bias", b, lin[i].name);
            vec(p, CLLM_TG_VISION, CLLM_INIT_BIAS, lin[i].rows, n);
        }
    }
    vec(p, CLLM_TG_VISION, CLLM_INIT_NORM, D, "model.visual.merger.norm.weight");
    vec(p, CLLM_TG_VISION, CLLM_INIT_BIAS, D, "model.visual.merger.norm.bias");
    mat(p, CLLM_TG_VISION, CLLM_INIT_LINEAR, M, M, "model.visual.merger.linear_fc1.weight");
    vec(p, CLLM_TG_VISION, CLLM_INIT_BIAS, M, "model.visual.merger.linear_fc1.bias");
    mat(p, CLLM_TG_VISION, CLLM_INIT_LINEAR, v->out_hidden_size, M,
        "model.visual.merger.linear_fc2.weight");
    vec(p, CLLM_TG_VISION, CLLM_INIT_BIAS, v->out_hidden_size,
        "model.visual.merger.linear_fc2.bias");
    p->optional = false;
    p->force_group = CLLM_TG_COUNT;
}

size_t cllm_tensor_plan(const cllm_config *cfg, cllm_expert_layout layout, bool include_mtp,
                        bool include_vision, void (*fn)(void *ctx, const cllm_tensor_spec *s),
                        void *ctx) {
    plan p = {cfg, fn, ctx, 0, false, CLLM_TG_COUNT, NULL};
    const char *pre = cfg->weight_prefix;
    block(&p, &tt_embed, pre, layout);
    for (int l = 0; l < cfg->n_layers; l++) {
        char lp[96];
        snprintf(lp, sizeof(lp), "%slayers.%d.", pre, l);
        layer(&p, lp, (cllm_layer_type)cfg->layer_types[l], cfg->layer_is_moe[l], layout);
    }
    block(&p, &tt_head, pre, layout);
    if (include_mtp && cfg->mtp_num_hidden_layers > 0) mtp(&p);
    if (include_vision && cfg->vision.present) vision(&p);
    return p.n;
}
