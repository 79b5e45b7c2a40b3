/* Model hyper-parameters from config.json / generation_config.json.
 *
 * Supported model_type: "qwen3_5_moe" (keys under text_config; also "qwen3_5_moe_text" flat),
 * "qwen3_moe", "qwen3", "qwen2". Missing optional keys take the Hugging Face class defaults
 * (documented per key in config.c). Anything inconsistent (head counts that do not divide,
 * layer_types of the wrong length, top-k > experts...) is an error naming the key. */
#ifndef CLLM_MODEL_CONFIG_H
#define CLLM_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

typedef enum cllm_arch {
    CLLM_ARCH_QWEN35_MOE, /* hybrid Gated DeltaNet + gated attention, MoE with shared expert */
    CLLM_ARCH_QWEN3_MOE,  /* attention + MoE (no shared expert) */
    CLLM_ARCH_QWEN3,      /* dense attention + SwiGLU */
    CLLM_ARCH_QWEN2,      /* dense attention with q/k/v bias, no q/k norms + SwiGLU */
} cllm_arch;

typedef enum cllm_layer_type {
    CLLM_LAYER_FULL_ATTN = 0,
    CLLM_LAYER_LINEAR_ATTN = 1, /* Gated DeltaNet */
} cllm_layer_type;

#define CLLM_MAX_EOS 16

typedef struct cllm_vision_config {
    bool present;
    int depth, hidden_size, num_heads, intermediate_size, patch_size, temporal_patch_size,
        spatial_merge_size, out_hidden_size, num_position_embeddings, in_channels;
    char hidden_act[32]; /* "gelu_pytorch_tanh" (the default) is the one the tower runs */
    int n_deepstack;     /* entries of deepstack_visual_indexes (Qwen3.5: none) */
} cllm_vision_config;

typedef struct cllm_config {
    cllm_arch arch;
    char model_type[32];
    char weight_prefix[32]; /* "model.language_model." (qwen3_5_moe) or "model." */

    int hidden_size, n_layers, vocab_size;
    int n_heads, n_kv_heads, head_dim;
    bool attn_output_gate; /* q_proj rows are per-head [query | gate] */
    bool attention_bias;   /* q/k/v projections have biases (Qwen2 always) */
    bool no_qk_norm;       /* no per-head RMSNorm of q and k (Qwen2); Qwen3 and Qwen3.5 have it */
    bool norm_one_plus;    /* RMSNorm weight applied as (1 + w): Qwen3.5 */
    uint8_t *layer_types;  /* [n_layers] cllm_layer_type */
    uint8_t *layer_is_moe; /* [n_layers] 1 = MoE block, 0 = dense MLP */
    int intermediate_size; /* dense MLP width */

    /* Gated DeltaNet */
    int lin_n_k_heads, lin_n_v_heads, lin_k_dim, lin_v_dim, lin_conv_kernel;

    /* MoE */
    int n_experts, n_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size;
    bool norm_topk_prob;

    double rope_theta, partial_rotary_factor;
    int rotary_dim; /* head_dim * partial_rotary_factor, even */
    /* M-RoPE (rope_parameters.mrope_section): rotary frequency slots per position component
     * (temporal, height, width); all 0 when the config has none. Interleaved (Qwen3-VL, Qwen3.5):
     * slot i takes component i % 3 while i < 3 * section[that component], else temporal;
     * contiguous (Qwen2-VL): the first section[0] slots temporal, the next section[1] height,
     * the rest width. For text all three components are equal, so either is plain RoPE. */
    int mrope_section[3];
    bool mrope_interleaved;
    /* image input (top-level config ids; -1 when absent) */
    int image_token_id, vision_start_token_id, vision_end_token_id;
    int max_position_embeddings;
    double rms_norm_eps;
    bool tie_word_embeddings;

    int eos_ids[CLLM_MAX_EOS];
    int n_eos;
    int bos_token_id; /* -1 when none */

    int mtp_num_hidden_layers;
    cllm_vision_config vision;
    char dtype[16]; /* "bfloat16", ... as written; informative */
} cllm_config;

typedef struct cllm_gen_config {
    bool present;
    bool do_sample;
    double temperature, top_p, min_p, repetition_penalty, presence_penalty;
    int top_k;
    int eos_ids[CLLM_MAX_EOS];
    int n_eos;
} cllm_gen_config;

/* Parses JSON text (label names it in errors). cfg must be freed with cllm_config_free. */
cllm_status cllm_config_parse(const char *json, size_t len, const char *label, cllm_config *cfg,
                              cllm_error *err);
/* Reads dir/config.json. */
cllm_status cllm_config_load(const char *dir, cllm_config *cfg, cllm_error *err);
void cllm_config_free(cllm_config *cfg);

/* Reads dir/generation_config.json if present (gen->present = false otherwise; not an error).
 * Defaults: do_sample false, temperature 1, top_p 1, top_k 0 (off), min_p 0, penalties neutral. */
cllm_status cllm_gen_config_load(const char *dir, cllm_gen_config *gen, cllm_error *err);
cllm_status cllm_gen_config_parse(const char *json, size_t len, const char *label,
                                  cllm_gen_config *gen, cllm_error *err);

/* vLLM's `--generation-config vllm`: the sampling defaults become neutral (greedy unless a
 * request says otherwise); the end tokens stay. */
void cllm_gen_config_neutral(cllm_gen_config *gen);
/* vLLM's `--override-generation-config JSON`: temperature, top_p, top_k, min_p,
 * repetition_penalty, presence_penalty over gen (they become the defaults, as in vLLM, whatever
 * do_sample says); any other key is CLLM_EINVAL naming it. */
cllm_status cllm_gen_config_override(cllm_gen_config *gen, const char *json, cllm_error *err);

/* Number of layers of each type. */
int cllm_config_count_layers(const cllm_config *cfg, cllm_layer_type t);

#endif
