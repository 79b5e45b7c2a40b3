/* The text model's tensor tables and the per-architecture layer builders; see tensor_table_int.h.
 * Row order is the plan's order (the order `cllm synth` writes and `cllm verify` lists). */
#include <stddef.h>

#include "model/fwd_int.h"
#include "model/tensor_plan.h"
#include "model/tensor_table_int.h"

/* where a layer row lands: its block's struct inside fwd_layer (fwd_int.h) */
#define NRM_(f) offsetof(fwd_layer, norm.f)
#define ATT_(f) offsetof(fwd_layer, attn.f)
#define GDN_(f) offsetof(fwd_layer, gdn.f)
#define MOE_(f) offsetof(fwd_layer, moe.f)
#define MLP_(f) offsetof(fwd_layer, mlp.f)
#define M_(f)   offsetof(cllm_model, f)
/* matrix [r][c]; vector [n]; norm [n] */
#define MAT(name, r, c, g, init, split, range, off)                                                \
    { name, TT_MAT, 2, {r, c, 0}, g, init, TW_ALWAYS, 0, 0, split, range, off }
#define VEC(name, n, g, init, when, split, range, off)                                             \
    { name, TT_VEC, 1, {n, 0, 0}, g, init, when, 0, 0, split, range, off }
#define NORM(name, n, split, off)                                                                  \
    { name, TT_NORM, 1, {n, 0, 0}, CLLM_TG_NORM, 0, TW_ALWAYS, 0, 0, split, TR_ALL, off }
#define NORM_IF(name, n, when, off)                                                                \
    { name, TT_NORM, 1, {n, 0, 0}, CLLM_TG_NORM, 0, when, 0, 0, TS_REPL, TR_ALL, off }
#define NORM1P(name, n, off)                                                                       \
    { name, TT_NORM_1P, 1, {n, 0, 0}, CLLM_TG_NORM, 0, TW_ALWAYS, 0, 1, TS_NONE, TR_ALL, off }
#define ROWS(name) (sizeof(name) / sizeof(name[0]))

static const tt_row norm_rows[] = {
    NORM("input_layernorm.weight", TD_H, TS_REPL, NRM_(in)),
    NORM("post_attention_layernorm.weight", TD_H, TS_REPL, NRM_(post)),
};

static const tt_row attn_rows[] = {
    MAT("self_attn.q_proj.weight", TD_QROWS, TD_H, CLLM_TG_ATTN, CLLM_INIT_LINEAR, TS_ROWS,
        TR_QHEADS, ATT_(q)),
    MAT("self_attn.k_proj.weight", TD_KV, TD_H, CLLM_TG_ATTN, CLLM_INIT_LINEAR, TS_ROWS, TR_KV,
        ATT_(k)),
    MAT("self_attn.v_proj.weight", TD_KV, TD_H, CLLM_TG_ATTN, CLLM_INIT_LINEAR, TS_ROWS, TR_KV,
        ATT_(v)),
    MAT("self_attn.o_proj.weight", TD_H, TD_ATTN, CLLM_TG_ATTN, CLLM_INIT_OUT_PROJ, TS_COLS,
        TR_OHEADS, ATT_(o)),
    VEC("self_attn.q_proj.bias", TD_QROWS, CLLM_TG_ATTN, CLLM_INIT_BIAS, TW_ATTN_BIAS, TS_ROWS,
        TR_QHEADS, ATT_(q_bias)),
    VEC("self_attn.k_proj.bias", TD_KV, CLLM_TG_ATTN, CLLM_INIT_BIAS, TW_ATTN_BIAS, TS_ROWS, TR_KV,
        ATT_(k_bias)),
    VEC("self_attn.v_proj.bias", TD_KV, CLLM_TG_ATTN, CLLM_INIT_BIAS, TW_ATTN_BIAS, TS_ROWS, TR_KV,
        ATT_(v_bias)),
    NORM_IF("self_attn.q_norm.weight", TD_HD, TW_QK_NORM, ATT_(q_norm)),
    NORM_IF("self_attn.k_norm.weight", TD_HD, TW_QK_NORM, ATT_(k_norm)),
};

static const tt_row gdn_rows[] = {
    MAT("linear_attn.in_proj_qkv.weight", TD_CONV, TD_H, CLLM_TG_GDN, CLLM_INIT_LINEAR, TS_ROWS,
        TR_GQKV, GDN_(qkv)),
    MAT("linear_attn.in_proj_z.weight", TD_VD, TD_H, CLLM_TG_GDN, CLLM_INIT_LINEAR, TS_ROWS, TR_GV,
        GDN_(z)),
    MAT("linear_attn.in_proj_b.weight", TD_HV, TD_H, CLLM_TG_GDN, CLLM_INIT_LINEAR, TS_ROWS, TR_GVH,
        GDN_(b)),
    MAT("linear_attn.in_proj_a.weight", TD_HV, TD_H, CLLM_TG_GDN, CLLM_INIT_LINEAR, TS_ROWS, TR_GVH,
        GDN_(a)),
    /* [conv_ch][1][kernel], bound as [conv_ch][kernel] (weights.c makes it tap-major) */
    {"linear_attn.conv1d.weight",
     TT_VEC,
     3,
     {TD_CONV, TD_1, TD_CK},
     CLLM_TG_GDN,
     CLLM_INIT_CONV,
     TW_ALWAYS,
     0,
     0,
     TS_ROWS,
     TR_GQKV,
     GDN_(conv_w)},
    VEC("linear_attn.dt_bias", TD_HV, CLLM_TG_GDN, CLLM_INIT_DT_BIAS, TW_ALWAYS, TS_ROWS, TR_GVH,
        GDN_(dt_bias)),
    /* stored F32 in official checkpoints; bound as A = -exp(A_log) */
    {"linear_attn.A_log",
     TT_VEC,
     1,
     {TD_HV, 0, 0},
     CLLM_TG_GDN,
     CLLM_INIT_A_LOG,
     TW_ALWAYS,
     1,
     0,
     TS_ROWS,
     TR_GVH,
     GDN_(A)},
    VEC("linear_attn.norm.weight", TD_DV, CLLM_TG_NORM, CLLM_INIT_NORM, TW_ALWAYS, TS_REPL, TR_ALL,
        GDN_(gnorm)),
    MAT("linear_attn.out_proj.weight", TD_H, TD_VD, CLLM_TG_GDN, CLLM_INIT_OUT_PROJ, TS_COLS, TR_GV,
        GDN_(out)),
};

static const tt_row moe_rows[] = {
    MAT("mlp.gate.weight", TD_E, TD_H, CLLM_TG_ROUTER, CLLM_INIT_LINEAR, TS_REPL, TR_ALL,
        MOE_(router)),
    {"mlp.experts",
     TT_EXPERTS,
     0,
     {TD_E, TD_MI, TD_H},
     CLLM_TG_EXPERTS,
     CLLM_INIT_LINEAR,
     TW_ALWAYS,
     0,
     0,
     TS_EXPERTS,
     TR_ALL,
     MOE_(experts)},
};

static const tt_row shared_rows[] = {
    MAT("mlp.shared_expert.gate_proj.weight", TD_SI, TD_H, CLLM_TG_SHARED, CLLM_INIT_LINEAR,
        TS_ROWS, TR_SI, MOE_(shared.gate)),
    MAT("mlp.shared_expert.up_proj.weight", TD_SI, TD_H, CLLM_TG_SHARED, CLLM_INIT_LINEAR, TS_ROWS,
        TR_SI, MOE_(shared.up)),
    MAT("mlp.shared_expert.down_proj.weight", TD_H, TD_SI, CLLM_TG_SHARED, CLLM_INIT_OUT_PROJ,
        TS_COLS, TR_SI, MOE_(shared.down)),
    MAT("mlp.shared_expert_gate.weight", TD_1, TD_H, CLLM_TG_SHARED, CLLM_INIT_LINEAR, TS_REPL,
        TR_ALL, MOE_(shared_gate)),
};

static const tt_row mlp_rows[] = {
    MAT("mlp.gate_proj.weight", TD_I, TD_H, CLLM_TG_MLP, CLLM_INIT_LINEAR, TS_ROWS, TR_I,
        MLP_(gate)),
    MAT("mlp.up_proj.weight", TD_I, TD_H, CLLM_TG_MLP, CLLM_INIT_LINEAR, TS_ROWS, TR_I, MLP_(up)),
    MAT("mlp.down_proj.weight", TD_H, TD_I, CLLM_TG_MLP, CLLM_INIT_OUT_PROJ, TS_COLS, TR_I,
        MLP_(down)),
};

/* embed_tokens and norm get the config's weight_prefix (tensor_plan.c, weights.c); the lm_head
 * is cut by weights_tp.c's own rule (vocabulary rows, or a view of the tied embedding's) */
static const tt_row embed_rows[] = {
    MAT("embed_tokens.weight", TD_VOCAB, TD_H, CLLM_TG_EMBED, CLLM_INIT_EMBED, TS_REPL, TR_ALL,
        M_(embed)),
};

static const tt_row head_rows[] = {
    NORM("norm.weight", TD_H, TS_REPL, M_(final_norm)),
    {"lm_head.weight",
     TT_MAT,
     2,
     {TD_VOCAB, TD_H, 0},
     CLLM_TG_LM_HEAD,
     CLLM_INIT_LINEAR,
     TW_UNTIED,
     0,
     1,
     TS_NONE,
     TR_ALL,
     M_(lm_head)},
};

static const tt_row mtp_rows[] = {
    {"mtp.fc.weight",
     TT_MAT,
     2,
     {TD_H, TD_2H, 0},
     CLLM_TG_MTP,
     CLLM_INIT_LINEAR,
     TW_ALWAYS,
     0,
     1,
     TS_NONE,
     TR_ALL,
     M_(mtp_fc)},
    NORM1P("mtp.pre_fc_norm_embedding.weight", TD_H, M_(mtp_pre_emb)),
    NORM1P("mtp.pre_fc_norm_hidden.weight", TD_H, M_(mtp_pre_hidden)),
    NORM1P("mtp.norm.weight", TD_H, M_(mtp_norm)),
};

const tt_block tt_norms = {TB_NORMS, "", norm_rows, ROWS(norm_rows)};
const tt_block tt_attn = {TB_ATTN, "self_attn", attn_rows, ROWS(attn_rows)};
const tt_block tt_gdn = {TB_GDN, "linear_attn", gdn_rows, ROWS(gdn_rows)};
const tt_block tt_moe = {TB_MOE, "mlp.experts", moe_rows, ROWS(moe_rows)};
const tt_block tt_shared = {TB_SHARED, "mlp.shared_expert", shared_rows, ROWS(shared_rows)};
const tt_block tt_mlp = {TB_MLP, "mlp", mlp_rows, ROWS(mlp_rows)};
const tt_block tt_embed = {TB_TOP, "", embed_rows, ROWS(embed_rows)};
const tt_block tt_head = {TB_TOP, "", head_rows, ROWS(head_rows)};
const tt_block tt_mtp = {TB_TOP, "mtp", mtp_rows, ROWS(mtp_rows)};

const tt_block *const tt_layer_block_list[] = {&tt_norms, &tt_attn,   &tt_gdn,
                                               &tt_moe,   &tt_shared, &tt_mlp};
const size_t tt_n_layer_blocks = ROWS(tt_layer_block_list);

/* Qwen3.5 MoE: Gated DeltaNet or gated attention by layer_types; MoE with a shared expert
 * (when shared_expert_intermediate_size > 0) or a dense MLP by layer_is_moe. */
static int qwen35_moe_layer(const cllm_config *c, cllm_layer_type type, bool moe,
                            const tt_block **out) {
    int n = 0;
    out[n++] = &tt_norms;
    out[n++] = type == CLLM_LAYER_LINEAR_ATTN ? &tt_gdn : &tt_attn;
    out[n++] = moe ? &tt_moe : &tt_mlp;
    if (moe && c->shared_expert_intermediate_size > 0) out[n++] = &tt_shared;
    return n;
}

/* Qwen3-MoE: attention; MoE (no shared expert) or, for mlp_only_layers, a dense MLP. */
static int qwen3_moe_layer(const cllm_config *c, cllm_layer_type type, bool moe,
                           const tt_block **out) {
    (void)c, (void)type;
    out[0] = &tt_norms;
    out[1] = &tt_attn;
    out[2] = moe ? &tt_moe : &tt_mlp;
    return 3;
}

/* Qwen3 and Qwen2 (dense): attention and a SwiGLU MLP (Qwen2's q/k/v biases and missing q/k
 * norms are the rows' predicates). */
static int qwen3_layer(const cllm_config *c, cllm_layer_type type, bool moe, const tt_block **out) {
    (void)c, (void)type, (void)moe;
    out[0] = &tt_norms;
    out[1] = &tt_attn;
    out[2] = &tt_mlp;
    return 3;
}

int tt_layer_blocks(const cllm_config *c, cllm_layer_type type, bool moe, const tt_block **out) {
    switch (c->arch) {
    case CLLM_ARCH_QWEN35_MOE:
        return qwen35_moe_layer(c, type, moe, out);
    case CLLM_ARCH_QWEN3_MOE:
        return qwen3_moe_layer(c, type, moe, out);
    case CLLM_ARCH_QWEN3:
    case CLLM_ARCH_QWEN2:
        return qwen3_layer(c, type, moe, out);
    }
    return 0;
}

bool tt_has_block(const cllm_config *c, const tt_block *b) {
    for (int l = 0; l < c->n_layers; l++) {
        const tt_block *bl[TT_MAX_BLOCKS];
        int n = tt_layer_blocks(c, (cllm_layer_type)c->layer_types[l], c->layer_is_moe[l], bl);
        for (int i = 0; i < n; i++)
            if (bl[i] == b) return true;
    }
    return false;
}

size_t tt_layer_mat_rows(void) {
    size_t n = 0;
    for (size_t b = 0; b < tt_n_layer_blocks; b++)
        for (size_t i = 0; i < tt_layer_block_list[b]->n; i++)
            n += tt_layer_block_list[b]->rows[i].kind == TT_MAT;
    return n;
}

int64_t tt_dim(const cllm_config *c, int d) {
    switch ((tt_dimension)d) {
    case TD_1:
        return 1;
    case TD_H:
        return c->hidden_size;
    case TD_2H:
        return 2 * (int64_t)c->hidden_size;
    case TD_VOCAB:
        return c->vocab_size;
    case TD_HD:
        return c->head_dim;
    case TD_QROWS:
        return (int64_t)c->n_heads * c->head_dim * (c->attn_output_gate ? 2 : 1);
    case TD_KV:
        return (int64_t)c->n_kv_heads * c->head_dim;
    case TD_ATTN:
        return (int64_t)c->n_heads * c->head_dim;
    case TD_CONV:
        return 2 * (int64_t)c->lin_n_k_heads * c->lin_k_dim +
               (int64_t)c->lin_n_v_heads * c->lin_v_dim;
    case TD_VD:
        return (int64_t)c->lin_n_v_heads * c->lin_v_dim;
    case TD_HV:
        return c->lin_n_v_heads;
    case TD_DV:
        return c->lin_v_dim;
    case TD_CK:
        return c->lin_conv_kernel;
    case TD_E:
        return c->n_experts;
    case TD_MI:
        return c->moe_intermediate_size;
    case TD_SI:
        return c->shared_expert_intermediate_size;
    case TD_I:
        return c->intermediate_size;
    }
    return 0;
}

bool tt_present(const cllm_config *c, const tt_row *r) {
    switch ((tt_when)r->when) {
    case TW_ALWAYS:
        return true;
    case TW_ATTN_BIAS:
        return c->attention_bias;
    case TW_UNTIED:
        return !c->tie_word_embeddings;
    case TW_QK_NORM:
        return !c->no_qk_norm;
    }
    return false;
}
