/* Private to model/: the text model's tensors as data. One table per block type (norms,
 * attention, Gated DeltaNet, MoE router + routed experts, shared expert, dense MLP; the model's
 * own tensors and the MTP head's extras), each row a tensor: its name after the layer prefix, its
 * shape in config dimensions, its group and init (the plan's), whether the config has it, where
 * it lands (offsetof in fwd_layer or cllm_model) and how tensor parallel cuts it. A per-
 * architecture builder (tt_layer_blocks) lists the blocks of a decoder layer.
 *
 * Walked by the tensor plan (tensor_plan.c: verify, synth, quantize, the loader's check), the
 * binder (weights.c), the tensor-parallel slicer (weights_tp.c), the shard plan's byte count
 * (tp_shard.c) and fwd_layer_mats (panels, decode bytes, the TP prefault). The vision tower has
 * its own two tables (vision_bind.c). */
#ifndef CLLM_MODEL_TENSOR_TABLE_INT_H
#define CLLM_MODEL_TENSOR_TABLE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/config.h"

/* A dimension in terms of the config (tt_dim gives its value; under tensor parallel the rank's
 * local config gives the rank's). */
typedef enum tt_dimension {
    TD_1,
    TD_H,     /* hidden_size */
    TD_2H,    /* 2 * hidden_size (the MTP fc's input) */
    TD_VOCAB, /* vocab_size */
    TD_HD,    /* head_dim */
    TD_QROWS, /* q_proj rows: n_heads * head_dim, twice that with attn_output_gate */
    TD_KV,    /* n_kv_heads * head_dim */
    TD_ATTN,  /* n_heads * head_dim (o_proj input) */
    TD_CONV,  /* GDN conv channels: 2 * k_heads * k_dim + v_heads * v_dim */
    TD_VD,    /* GDN v_heads * v_dim */
    TD_HV,    /* GDN v_heads */
    TD_DV,    /* GDN v_dim */
    TD_CK,    /* GDN conv kernel */
    TD_E,     /* n_experts */
    TD_MI,    /* moe_intermediate_size */
    TD_SI,    /* shared_expert_intermediate_size */
    TD_I,     /* intermediate_size */
} tt_dimension;

typedef enum tt_kind {
    TT_MAT,     /* a matrix [d0][d1] bound in place (fwd_wt) */
    TT_VEC,     /* d0 * d1 * d2 values copied to fp32 (float *) */
    TT_NORM,    /* an RMSNorm weight: (1 + w) when the config says norm_one_plus */
    TT_NORM_1P, /* an RMSNorm weight stored for (1 + w) whatever the config (the MTP head's) */
    TT_EXPERTS, /* the routed experts (fwd_mlp[E] at off): fused "P.gate_up_proj" [E][2I][H] and
                   "P.down_proj" [E][H][I], or "P.E.{gate,up,down}_proj.weight"; each walker
                   has its own function for them */
} tt_kind;

typedef enum tt_when {
    TW_ALWAYS,
    TW_ATTN_BIAS, /* config attention_bias */
    TW_UNTIED,    /* !tie_word_embeddings */
    TW_QK_NORM,   /* !no_qk_norm: per-head q/k RMSNorm (not Qwen2) */
} tt_when;

/* What tensor parallel keeps on a rank (weights_tp.c, tp_shard.h): the whole tensor, a range of
 * output rows (a vector's elements follow its rows), a range of input columns, or the experts'
 * rule (whole experts under expert parallel, else their intermediate rows). TS_NONE: never cut
 * (the MTP head: full views, unused by the sharded forward). */
typedef enum tt_split { TS_REPL, TS_ROWS, TS_COLS, TS_EXPERTS, TS_NONE } tt_split;

/* The ranges of a split, from the rank's cllm_shard (weights_tp.c range_of). */
typedef enum tt_range {
    TR_ALL,
    TR_QHEADS, /* query heads' rows (h0, nh) * (head_dim, twice that with the output gate) */
    TR_KV,     /* KV heads' rows (kv0, nkv) * head_dim */
    TR_OHEADS, /* query heads' columns (h0, nh) * head_dim */
    TR_GQKV,   /* GDN q, k and v channel ranges of this rank's key and value heads */
    TR_GV,     /* GDN value heads' rows (gv0, ngv) * v_dim */
    TR_GVH,    /* GDN value heads (gv0, ngv) */
    TR_I,      /* dense MLP intermediate (i0, ni) */
    TR_SI,     /* shared-expert intermediate (si0, nsi) */
} tt_range;

typedef struct tt_row {
    const char *name; /* after the layer prefix ("self_attn.q_proj.weight") or the top name */
    unsigned char kind, nd, dims[3]; /* tt_kind; shape (nd dims of tt_dimension) */
    unsigned char group, init;       /* cllm_tensor_group, cllm_tensor_init (norms: by kind) */
    unsigned char when;              /* tt_when */
    unsigned char neg_exp;           /* bound as -exp(v) (A_log) */
    unsigned char top;               /* named at the checkpoint's top level, without a prefix */
    unsigned char split, range;      /* tt_split, tt_range */
    size_t
        off; /* offsetof in fwd_layer (a layer block) or cllm_model (tt_embed, tt_head, tt_mtp) */
} tt_row;

typedef enum tt_role { TB_NORMS, TB_ATTN, TB_GDN, TB_MOE, TB_SHARED, TB_MLP, TB_TOP } tt_role;

typedef struct tt_block {
    tt_role role;
    const char *what; /* its part of a name in tensor-parallel messages ("self_attn") */
    const tt_row *rows;
    size_t n;
} tt_block;

extern const tt_block tt_norms, tt_attn, tt_gdn, tt_moe, tt_shared, tt_mlp;
/* The model's own tensors under weight_prefix or at the top: tt_embed before the layers,
 * tt_head (final norm, lm_head) after them; the MTP head's besides its layers (mtp.*). */
extern const tt_block tt_embed, tt_head, tt_mtp;
/* Every layer block, in the order fwd_layer_mats hands out their matrices. */
extern const tt_block *const tt_layer_block_list[];
extern const size_t tt_n_layer_blocks;

enum { TT_MAX_BLOCKS = 4 };
/* The blocks of a decoder layer of type `type` (moe: a MoE layer) of c's architecture, written
 * to out[0..n) in the plan's order; returns n. The MTP head's layers are full-attention MoE
 * layers of the same builder. */
int tt_layer_blocks(const cllm_config *c, cllm_layer_type type, bool moe, const tt_block **out);
/* True when some decoder layer of c has block b. */
bool tt_has_block(const cllm_config *c, const tt_block *b);
int64_t tt_dim(const cllm_config *c, int d);
/* Matrix rows in all layer blocks together: the most fwd_layer_mats hands out besides experts. */
size_t tt_layer_mat_rows(void);
/* Whether c has the row's tensor. */
bool tt_present(const cllm_config *c, const tt_row *r);

#endif
