/* The tensors a config implies, by HF name and shape: the single source of truth used by
 * `cllm verify` (what must be present), `cllm synth` (what to write) and the weight binder.
 *
 * Names follow the official checkpoints: Qwen3.5 text tensors under "model.language_model.",
 * lm_head and mtp.* at the top level, the vision tower under "model.visual." (optional);
 * Qwen3/Qwen3-MoE under "model.". Expert weights come fused ("mlp.experts.gate_up_proj"
 * [E, 2I, H] gate rows first, "mlp.experts.down_proj" [E, H, I]) or per expert
 * ("mlp.experts.E.{gate,up,down}_proj.weight"). */
#ifndef CLLM_MODEL_TENSOR_PLAN_H
#define CLLM_MODEL_TENSOR_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "model/config.h"

typedef enum cllm_expert_layout {
    CLLM_EXPERTS_FUSED,
    CLLM_EXPERTS_PER_EXPERT,
} cllm_expert_layout;

typedef enum cllm_tensor_group {
    CLLM_TG_EMBED,
    CLLM_TG_LM_HEAD,
    CLLM_TG_NORM,
    CLLM_TG_ATTN, /* full attention projections */
    CLLM_TG_GDN,  /* Gated DeltaNet projections, conv, A_log, dt_bias */
    CLLM_TG_ROUTER,
    CLLM_TG_EXPERTS, /* routed experts */
    CLLM_TG_SHARED,  /* shared expert and its gate */
    CLLM_TG_MLP,     /* dense MLP */
    CLLM_TG_MTP,     /* multi-token-prediction head (all of it) */
    CLLM_TG_VISION,
    CLLM_TG_COUNT
} cllm_tensor_group;

typedef enum cllm_tensor_init {
    CLLM_INIT_LINEAR,   /* std 1/sqrt(fan_in) */
    CLLM_INIT_OUT_PROJ, /* residual-branch output: scaled down by depth */
    CLLM_INIT_EMBED,    /* std 1 */
    CLLM_INIT_NORM_1P,  /* stored w for (1 + w) norms: small around 0 */
    CLLM_INIT_NORM,     /* plain-w norms: around 1 */
    CLLM_INIT_CONV,     /* depthwise conv taps */
    CLLM_INIT_A_LOG,    /* log(uniform(1, 16)) */
    CLLM_INIT_DT_BIAS,  /* inverse softplus of dt in [1e-3, 1e-1] */
    CLLM_INIT_ZERO,
    CLLM_INIT_BIAS, /* small uniform around 0 (std 0.05): biases a synthetic test must see */
} cllm_tensor_init;

typedef struct cllm_tensor_spec {
    char name[160];
    int n_dims;
    int64_t shape[5];
    bool force_f32; /* stored F32 in official checkpoints (A_log) */
    bool optional;  /* MTP and vision: absent is fine */
    cllm_tensor_group group;
    cllm_tensor_init init;
    int fan_in; /* for init */
    /* Fraction of these parameters used per token, as num/den (experts: top_k/E). */
    int active_num, active_den;
    /* How tensor parallel cuts it: its table row's tt_split and tt_range
     * (model/tensor_table_int.h); TS_NONE (not cut) for the vision tower */
    unsigned char tp_split, tp_range;
} cllm_tensor_spec;

/* Calls fn once per expected tensor, in a stable order (layer by layer). include_mtp adds the
 * MTP head when the config has one; include_vision adds the vision tower when present.
 * Returns the number of tensors. */
size_t cllm_tensor_plan(const cllm_config *cfg, cllm_expert_layout layout, bool include_mtp,
                        bool include_vision, void (*fn)(void *ctx, const cllm_tensor_spec *s),
                        void *ctx);

const char *cllm_tensor_group_name(cllm_tensor_group g);
uint64_t cllm_tensor_spec_elems(const cllm_tensor_spec *s);

#endif
