/* Binding of the vision tower's tensors (model.visual.*, docs/model.md "Vision tower"), driven by
 * two tables: the tower's own tensors and one block's, each entry a name, its kind (matrix bound
 * in place, or vector copied to fp32), its dimensions in units of the config and where it lands
 * in fwd_vision / fwd_vblock. The shapes are the tensor plan's (model/tensor_plan.c vision()),
 * which `cllm verify` and the loader's check pass have already compared; the element count is
 * rechecked here. Called by cllm_model_load (weights.c) once the text model is bound. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "model/vision_int.h"

/* A dimension of the tower in terms of its config. */
typedef enum vdim {
    VD_1,
    VD_D,     /* hidden_size */
    VD_3D,    /* q, k, v rows */
    VD_F,     /* intermediate_size */
    VD_M,     /* hidden_size * merge^2: the merger's width */
    VD_OUT,   /* out_hidden_size */
    VD_PATCH, /* in_channels * temporal_patch * patch^2 */
    VD_POS,   /* num_position_embeddings * hidden_size (the table as one vector) */
} vdim;

typedef struct vtensor {
    const char *name; /* after "model.visual." ("blocks.%d." prefixed for a block's) */
    bool mat;         /* a matrix [rows][cols] bound in place; else a vector of rows elements */
    vdim rows, cols;
    size_t off; /* offsetof in fwd_vision (tower) or fwd_vblock (block) */
} vtensor;

#define VMAT(n, r, c, s, f)                                                                        \
    { n, true, r, c, offsetof(s, f) }
#define VVEC(n, r, s, f)                                                                           \
    { n, false, r, VD_1, offsetof(s, f) }

static const vtensor tower_tensors[] = {
    VMAT("patch_embed.proj.weight", VD_D, VD_PATCH, fwd_vision, patch_w),
    VVEC("patch_embed.proj.bias", VD_D, fwd_vision, patch_b),
    VVEC("pos_embed.weight", VD_POS, fwd_vision, pos),
    VVEC("merger.norm.weight", VD_D, fwd_vision, mn_w),
    VVEC("merger.norm.bias", VD_D, fwd_vision, mn_b),
    VMAT("merger.linear_fc1.weight", VD_M, VD_M, fwd_vision, mfc1),
    VVEC("merger.linear_fc1.bias", VD_M, fwd_vision, mfc1_b),
    VMAT("merger.linear_fc2.weight", VD_OUT, VD_M, fwd_vision, mfc2),
    VVEC("merger.linear_fc2.bias", VD_OUT, fwd_vision, mfc2_b),
};

static const vtensor block_tensors[] = {
    VVEC("norm1.weight", VD_D, fwd_vblock, n1_w),
    VVEC("norm1.bias", VD_D, fwd_vblock, n1_b),
    VVEC("norm2.weight", VD_D, fwd_vblock, n2_w),
    VVEC("norm2.bias", VD_D, fwd_vblock, n2_b),
    VMAT("attn.qkv.weight", VD_3D, VD_D, fwd_vblock, qkv),
    VVEC("attn.qkv.bias", VD_3D, fwd_vblock, qkv_b),
    VMAT("attn.proj.weight", VD_D, VD_D, fwd_vblock, proj),
    VVEC("attn.proj.bias", VD_D, fwd_vblock, proj_b),
    VMAT("mlp.linear_fc1.weight", VD_F, VD_D, fwd_vblock, fc1),
    VVEC("mlp.linear_fc1.bias", VD_F, fwd_vblock, fc1_b),
    VMAT("mlp.linear_fc2.weight", VD_D, VD_F, fwd_vblock, fc2),
    VVEC("mlp.linear_fc2.bias", VD_D, fwd_vblock, fc2_b),
};

static size_t dim_of(const fwd_vision *v, const cllm_vision_config *vc, vdim d) {
    switch (d) {
    case VD_1:
        return 1;
    case VD_D:
        return (size_t)v->D;
    case VD_3D:
        return 3 * (size_t)v->D;
    case VD_F:
        return (size_t)v->F;
    case VD_M:
        return (size_t)v->D * v->merge * v->merge;
    case VD_OUT:
        return (size_t)v->out;
    case VD_PATCH:
        return (size_t)v->patch_dim;
    case VD_POS:
        return (size_t)vc->num_position_embeddings * v->D;
    }
    return 0;
}

static void bind_table(binder *b, const fwd_vision *v, const cllm_vision_config *vc,
                       const vtensor *tab, size_t n, void *dst, const char *prefix) {
    for (size_t i = 0; i < n && fwd_bind_status(b) == CLLM_OK; i++) {
        char name[200];
        snprintf(name, sizeof(name), "%s%s", prefix, tab[i].name);
        char *at = (char *)dst + tab[i].off;
        size_t r = dim_of(v, vc, tab[i].rows), c = dim_of(v, vc, tab[i].cols);
        if (tab[i].mat)
            *(fwd_wt *)(void *)at = fwd_bind_mat(b, (int)r, (int)c, name);
        else
            *(float **)(void *)at = fwd_bind_vec(b, r, name);
    }
}

cllm_status fwd_vision_bind(cllm_model *m, binder *b, cllm_error *err) {
    const cllm_vision_config *vc = &m->cfg.vision;
    const int H = m->cfg.hidden_size;
    if (vc->out_hidden_size != H)
        return cllm_err_set(err, CLLM_EFORMAT,
                            "vision_config.out_hidden_size %d differs from the text hidden_size %d",
                            vc->out_hidden_size, H);
    if (strcmp(vc->hidden_act, "gelu_pytorch_tanh"))
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "vision_config.hidden_act '%s' is not supported (gelu_pytorch_tanh)",
                            vc->hidden_act);
    if (vc->n_deepstack)
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "vision_config.deepstack_visual_indexes: deepstack features are not "
                            "supported (Qwen3.5 has none)");
    if (vc->hidden_size % vc->num_heads || (vc->hidden_size / vc->num_heads) % 4)
        return cllm_err_set(err, CLLM_EFORMAT,
                            "vision_config: hidden_size %d over num_heads %d must give a head "
                            "dimension divisible by 4 (2-D rotary)",
                            vc->hidden_size, vc->num_heads);
    int side = 0;
    while ((side + 1) * (side + 1) <= vc->num_position_embeddings) side++;
    if (side < 1 || side * side != vc->num_position_embeddings)
        return cllm_err_set(err, CLLM_EFORMAT,
                            "vision_config.num_position_embeddings %d is not a square grid",
                            vc->num_position_embeddings);
    fwd_vision *v = fwd_model_own(m, sizeof(*v));
    if (!v) return cllm_err_set(err, CLLM_ENOMEM, "out of memory (vision tower)");
    v->depth = vc->depth;
    v->D = vc->hidden_size;
    v->heads = vc->num_heads;
    v->hd = vc->hidden_size / vc->num_heads;
    v->F = vc->intermediate_size;
    v->patch = vc->patch_size;
    v->tpatch = vc->temporal_patch_size;
    v->in_ch = vc->in_channels;
    v->patch_dim = vc->in_channels * vc->temporal_patch_size * vc->patch_size * vc->patch_size;
    v->merge = vc->spatial_merge_size;
    v->out = vc->out_hidden_size;
    v->side = side;
    if (v->depth > 0 && !(v->blocks = fwd_model_own(m, (size_t)v->depth * sizeof(fwd_vblock))))
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory (vision tower)");
    bind_table(b, v, vc, tower_tensors, sizeof(tower_tensors) / sizeof(tower_tensors[0]), v,
               "model.visual.");
    for (int l = 0; l < v->depth; l++) {
        char prefix[64];
        snprintf(prefix, sizeof(prefix), "model.visual.blocks.%d.", l);
        bind_table(b, v, vc, block_tensors, sizeof(block_tensors) / sizeof(block_tensors[0]),
                   &v->blocks[l], prefix);
    }
    cllm_status st = fwd_bind_status(b);
    if (st != CLLM_OK) return st;
    m->vision = v;
    return CLLM_OK;
}
