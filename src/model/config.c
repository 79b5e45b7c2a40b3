/* config.json / generation_config.json parsing; see config.h.
 *
 * HF defaults used for missing keys (from the transformers configuration classes):
 *  qwen3_5_moe text: vocab 248320, hidden 2048, layers 40, heads 16, kv heads 2, head_dim 256,
 *    linear k/v heads 16/32, linear k/v dim 128/128, conv kernel 4, experts 256, top-k 8,
 *    moe width 512, shared width 512, rope_theta 1e7, partial_rotary_factor 0.25,
 *    max_position_embeddings 32768 (the real checkpoint says 262144), rms eps 1e-6,
 *    full_attention_interval 4 (when layer_types is absent), attn_output_gate true,
 *    router always renormalises top-k (norm_topk_prob true), untied embeddings.
 *  qwen3: vocab 151936, hidden 4096, intermediate 22016, layers 32, heads 32, kv heads 32,
 *    head_dim 128, rope_theta 10000, eps 1e-6, max positions 32768, tie_word_embeddings false.
 *  qwen3_moe: vocab 151936, hidden 2048, intermediate 6144, layers 24, heads 32, kv heads 4,
 *    head_dim hidden/heads, experts 128, top-k 8, moe width 768, decoder_sparse_step 1,
 *    mlp_only_layers [], norm_topk_prob false, rope_theta 10000.
 *  qwen2: vocab 151936, hidden 4096, intermediate 22016, layers 32, heads 32, kv heads = heads,
 *    head_dim hidden/heads, rope_theta 10000, eps 1e-6, max positions 32768,
 *    tie_word_embeddings false, use_sliding_window false (sliding_window 4096 and
 *    max_window_layers 28 only matter when it is true); q/k/v bias always, no q/k norms.
 * rope parameters are read from rope_parameters (new HF layout), then rope_scaling, then the
 * top level. A rope_type other than "default" is rejected as unsupported for now. */
#include "model/config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#define CONFIG_MAX_BYTES (64u << 20) /* a config is a few KB; anything huge is not one */
#define DIM_MAX          (1 << 20)   /* sanity cap on any width or count, keeps products in range */

typedef struct reader {
    const char *label;
    cllm_error *err;
    cllm_status st;
} reader;

static bool rd_int(reader *r, json_t *o, const char *key, int def, int lo, int hi, int *out) {
    if (r->st) return false;
    json_t *v = o ? json_object_get(o, key) : NULL;
    if (!v || json_is_null(v)) {
        *out = def;
        return true;
    }
    if (!json_is_integer(v)) {
        r->st = cllm_err_set(r->err, CLLM_EFORMAT, "%s: '%s' must be an integer", r->label, key);
        return false;
    }
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi) {
        r->st = cllm_err_set(r->err, CLLM_ERANGE, "%s: '%s' = %lld outside [%d, %d]", r->label, key,
                             (long long)x, lo, hi);
        return false;
    }
    *out = (int)x;
    return true;
}

static bool rd_num(reader *r, json_t *o, const char *key, double def, double *out) {
    if (r->st) return false;
    json_t *v = o ? json_object_get(o, key) : NULL;
    if (!v || json_is_null(v)) {
        *out = def;
        return true;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v))) {
        r->st = cllm_err_set(r->err, CLLM_EFORMAT, "%s: '%s' must be a number", r->label, key);
        return false;
    }
    *out = json_number_value(v);
    return true;
}

static bool rd_bool(reader *r, json_t *o, const char *key, bool def, bool *out) {
    if (r->st) return false;
    json_t *v = o ? json_object_get(o, key) : NULL;
    if (!v || json_is_null(v)) {
        *out = def;
        return true;
    }
    if (!json_is_boolean(v)) {
        r->st = cllm_err_set(r->err, CLLM_EFORMAT, "%s: '%s' must be true or false", r->label, key);
        return false;
    }
    *out = json_is_true(v);
    return true;
}

/* eos_token_id may be an integer or a list of integers. */
static void rd_ids(reader *r, json_t *o, const char *key, int *ids, int *n) {
    if (r->st) return;
    json_t *v = o ? json_object_get(o, key) : NULL;
    if (!v || json_is_null(v)) return;
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) goto bad;
        ids[0] = (int)json_integer_value(v);
        *n = 1;
        return;
    }
    if (!json_is_array(v) || json_array_size(v) > CLLM_MAX_EOS) goto bad;
    *n = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX)
            goto bad;
        ids[(*n)++] = (int)json_integer_value(e);
    }
    return;
bad:
    r->st = cllm_err_set(r->err, CLLM_EFORMAT,
                         "%s: '%s' must be a token id or a list of at most %d ids", r->label, key,
                         CLLM_MAX_EOS);
}

int cllm_config_count_layers(const cllm_config *cfg, cllm_layer_type t) {
    int n = 0;
    for (int i = 0; i < cfg->n_layers; i++) n += cfg->layer_types[i] == t;
    return n;
}

static void read_vision(reader *r, json_t *v, cllm_vision_config *vc) {
    if (!json_is_object(v)) return;
    vc->present = true;
    rd_int(r, v, "depth", 27, 0, DIM_MAX, &vc->depth);
    rd_int(r, v, "hidden_size", 1152, 1, DIM_MAX, &vc->hidden_size);
    rd_int(r, v, "num_heads", 16, 1, DIM_MAX, &vc->num_heads);
    rd_int(r, v, "intermediate_size", 4304, 1, DIM_MAX, &vc->intermediate_size);
    rd_int(r, v, "patch_size", 16, 1, 1024, &vc->patch_size);
    rd_int(r, v, "temporal_patch_size", 2, 1, 64, &vc->temporal_patch_size);
    rd_int(r, v, "spatial_merge_size", 2, 1, 64, &vc->spatial_merge_size);
    rd_int(r, v, "out_hidden_size", 2048, 1, DIM_MAX, &vc->out_hidden_size);
    rd_int(r, v, "num_position_embeddings", 2304, 0, DIM_MAX, &vc->num_position_embeddings);
    rd_int(r, v, "in_channels", 3, 1, 16, &vc->in_channels);
    json_t *act = json_object_get(v, "hidden_act");
    snprintf(vc->hidden_act, sizeof(vc->hidden_act), "%s",
             json_is_string(act) ? json_string_value(act) : "gelu_pytorch_tanh");
    json_t *ds = json_object_get(v, "deepstack_visual_indexes");
    vc->n_deepstack = json_is_array(ds) ? (int)json_array_size(ds) : 0;
}

static void read_rope(reader *r, json_t *top, json_t *tc, cllm_config *c, double theta_def,
                      double prf_def) {
    json_t *rp = json_object_get(tc, "rope_parameters");
    if (!json_is_object(rp)) rp = json_object_get(tc, "rope_scaling");
    if (!json_is_object(rp)) rp = NULL;
    double th = theta_def, prf = prf_def;
    rd_num(r, tc, "rope_theta", theta_def, &th);
    rd_num(r, tc, "partial_rotary_factor", prf_def, &prf);
    if (tc != top && !json_object_get(tc, "partial_rotary_factor"))
        rd_num(r, top, "partial_rotary_factor", prf, &prf);
    if (rp) {
        rd_num(r, rp, "rope_theta", th, &th);
        rd_num(r, rp, "partial_rotary_factor", prf, &prf);
        json_t *type = json_object_get(rp, "rope_type");
        if (!type) type = json_object_get(rp, "type");
        if (!r->st && type &&
            (!json_is_string(type) || (strcmp(json_string_value(type), "default") &&
                                       strcmp(json_string_value(type), "mrope"))))
            r->st =
                cllm_err_set(r->err, CLLM_EUNSUPPORTED, "%s: rope_type '%s' is not supported yet",
                             r->label, json_is_string(type) ? json_string_value(type) : "?");
    }
    c->rope_theta = th;
    c->partial_rotary_factor = prf;
    json_t *ms = rp ? json_object_get(rp, "mrope_section") : NULL;
    if (!r->st && ms) {
        long sum = 0;
        bool ok = json_is_array(ms) && json_array_size(ms) == 3;
        for (size_t i = 0; ok && i < 3; i++) {
            json_t *v = json_array_get(ms, i);
            ok = json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= 65536;
            if (ok) c->mrope_section[i] = (int)json_integer_value(v), sum += c->mrope_section[i];
        }
        if (!ok || sum == 0)
            r->st = cllm_err_set(r->err, CLLM_EINVAL,
                                 "%s: rope mrope_section must be three non-negative integers",
                                 r->label);
        rd_bool(r, rp, "mrope_interleaved", false, &c->mrope_interleaved);
    }
}

static cllm_status validate(reader *r, cllm_config *c) {
    if (r->st) return r->st;
#define BAD(...) (r->st = cllm_err_set(r->err, CLLM_EFORMAT, __VA_ARGS__))
    if (c->n_heads % c->n_kv_heads)
        return BAD("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                   r->label, c->n_heads, c->n_kv_heads);
    if (c->head_dim % 2) return BAD("%s: head_dim %d must be even", r->label, c->head_dim);
    if (!(c->partial_rotary_factor > 0 && c->partial_rotary_factor <= 1))
        return BAD("%s: partial_rotary_factor %g must be in (0, 1]", r->label,
                   c->partial_rotary_factor);
    if (!(c->rope_theta > 0)) return BAD("%s: rope_theta must be positive", r->label);
    c->rotary_dim = (int)lround(c->head_dim * c->partial_rotary_factor);
    if (c->rotary_dim % 2 || c->rotary_dim < 2)
        return BAD("%s: head_dim * partial_rotary_factor = %d must be even and >= 2", r->label,
                   c->rotary_dim);
    int msum = c->mrope_section[0] + c->mrope_section[1] + c->mrope_section[2];
    /* interleaved sections may name more slots than exist (HF slices past the end; small
     * synthetic configs keep the full model's [11, 11, 10]); contiguous ones split the slots */
    if (msum && !c->mrope_interleaved && msum != c->rotary_dim / 2)
        return BAD("%s: mrope_section [%d, %d, %d] must split the %d rotary frequency slots",
                   r->label, c->mrope_section[0], c->mrope_section[1], c->mrope_section[2],
                   c->rotary_dim / 2);
    if (!(c->rms_norm_eps > 0 && c->rms_norm_eps < 1))
        return BAD("%s: rms_norm_eps %g out of range", r->label, c->rms_norm_eps);
    int any_moe = 0, any_lin = 0;
    for (int i = 0; i < c->n_layers; i++) {
        any_moe |= c->layer_is_moe[i];
        any_lin |= c->layer_types[i] == CLLM_LAYER_LINEAR_ATTN;
    }
    if (any_moe && (c->n_experts_per_tok > c->n_experts || c->n_experts_per_tok < 1))
        return BAD("%s: num_experts_per_tok %d must be in [1, num_experts %d]", r->label,
                   c->n_experts_per_tok, c->n_experts);
    if (any_lin && c->lin_n_v_heads % c->lin_n_k_heads)
        return BAD("%s: linear_num_value_heads %d is not a multiple of linear_num_key_heads %d",
                   r->label, c->lin_n_v_heads, c->lin_n_k_heads);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] >= c->vocab_size)
            return BAD("%s: eos_token_id %d >= vocab_size %d", r->label, c->eos_ids[i],
                       c->vocab_size);
#undef BAD
    return CLLM_OK;
}

/* layer_types list, or every full_attention_interval-th layer full attention. */
static void read_layer_types(reader *r, json_t *tc, cllm_config *c) {
    json_t *lt = json_object_get(tc, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || json_array_size(lt) != (size_t)c->n_layers) {
            r->st = cllm_err_set(
                r->err, CLLM_EFORMAT, "%s: layer_types must list one entry per layer (%d), has %zu",
                r->label, c->n_layers, json_is_array(lt) ? json_array_size(lt) : 0);
            return;
        }
        for (int i = 0; i < c->n_layers; i++) {
            const char *s = json_string_value(json_array_get(lt, (size_t)i));
            if (s && !strcmp(s, "full_attention"))
                c->layer_types[i] = CLLM_LAYER_FULL_ATTN;
            else if (s && !strcmp(s, "linear_attention"))
                c->layer_types[i] = CLLM_LAYER_LINEAR_ATTN;
            else {
                r->st = cllm_err_set(
                    r->err, CLLM_EFORMAT,
                    "%s: layer_types[%d] = '%s' (expected full_attention or linear_attention)",
                    r->label, i, s ? s : "(not a string)");
                return;
            }
        }
        return;
    }
    int interval;
    if (!rd_int(r, tc, "full_attention_interval", 4, 1, DIM_MAX, &interval)) return;
    for (int i = 0; i < c->n_layers; i++)
        c->layer_types[i] = (i + 1) % interval == 0 ? CLLM_LAYER_FULL_ATTN : CLLM_LAYER_LINEAR_ATTN;
}

static bool alloc_layers(reader *r, cllm_config *c) {
    c->layer_types = calloc((size_t)c->n_layers, 1);
    c->layer_is_moe = calloc((size_t)c->n_layers, 1);
    if (!c->layer_types || !c->layer_is_moe) {
        r->st = cllm_err_set(r->err, CLLM_ENOMEM, "out of memory");
        return false;
    }
    return true;
}

static void parse_qwen35(reader *r, json_t *top, json_t *tc, cllm_config *c) {
    c->arch = CLLM_ARCH_QWEN35_MOE;
    snprintf(c->weight_prefix, sizeof(c->weight_prefix), "model.language_model.");
    c->norm_one_plus = true;
    rd_int(r, tc, "vocab_size", 248320, 1, 1 << 24, &c->vocab_size);
    rd_int(r, tc, "hidden_size", 2048, 1, DIM_MAX, &c->hidden_size);
    rd_int(r, tc, "num_hidden_layers", 40, 1, 4096, &c->n_layers);
    rd_int(r, tc, "num_attention_heads", 16, 1, 4096, &c->n_heads);
    rd_int(r, tc, "num_key_value_heads", 2, 1, 4096, &c->n_kv_heads);
    rd_int(r, tc, "head_dim", 256, 2, 65536, &c->head_dim);
    rd_bool(r, tc, "attn_output_gate", true, &c->attn_output_gate);
    rd_bool(r, tc, "attention_bias", false, &c->attention_bias);
    rd_int(r, tc, "linear_num_key_heads", 16, 1, 4096, &c->lin_n_k_heads);
    rd_int(r, tc, "linear_num_value_heads", 32, 1, 4096, &c->lin_n_v_heads);
    rd_int(r, tc, "linear_key_head_dim", 128, 1, 65536, &c->lin_k_dim);
    rd_int(r, tc, "linear_value_head_dim", 128, 1, 65536, &c->lin_v_dim);
    rd_int(r, tc, "linear_conv_kernel_dim", 4, 1, 64, &c->lin_conv_kernel);
    rd_int(r, tc, "num_experts", 256, 1, 65536, &c->n_experts);
    rd_int(r, tc, "num_experts_per_tok", 8, 1, 65536, &c->n_experts_per_tok);
    rd_int(r, tc, "moe_intermediate_size", 512, 1, DIM_MAX, &c->moe_intermediate_size);
    rd_int(r, tc, "shared_expert_intermediate_size", 512, 0, DIM_MAX,
           &c->shared_expert_intermediate_size);
    rd_int(r, tc, "intermediate_size", 0, 0, DIM_MAX, &c->intermediate_size);
    c->norm_topk_prob = true; /* the HF Qwen3.5 router always renormalises */
    rd_int(r, tc, "max_position_embeddings", 32768, 1, 1 << 30, &c->max_position_embeddings);
    rd_num(r, tc, "rms_norm_eps", 1e-6, &c->rms_norm_eps);
    read_rope(r, top, tc, c, 1e7, 0.25);
    bool tie_top = false;
    rd_bool(r, top, "tie_word_embeddings", false, &tie_top);
    rd_bool(r, tc, "tie_word_embeddings", tie_top, &c->tie_word_embeddings);
    rd_int(r, tc, "mtp_num_hidden_layers", 0, 0, 64, &c->mtp_num_hidden_layers);
    rd_ids(r, tc, "eos_token_id", c->eos_ids, &c->n_eos);
    if (!c->n_eos) rd_ids(r, top, "eos_token_id", c->eos_ids, &c->n_eos);
    if (r->st || !alloc_layers(r, c)) return;
    read_layer_types(r, tc, c);
    memset(c->layer_is_moe, 1, (size_t)c->n_layers);
    if (top != tc) read_vision(r, json_object_get(top, "vision_config"), &c->vision);
    rd_int(r, top, "image_token_id", -1, -1, INT32_MAX, &c->image_token_id);
    rd_int(r, top, "vision_start_token_id", -1, -1, INT32_MAX, &c->vision_start_token_id);
    rd_int(r, top, "vision_end_token_id", -1, -1, INT32_MAX, &c->vision_end_token_id);
}

static void parse_qwen3(reader *r, json_t *tc, cllm_config *c, bool moe) {
    c->arch = moe ? CLLM_ARCH_QWEN3_MOE : CLLM_ARCH_QWEN3;
    snprintf(c->weight_prefix, sizeof(c->weight_prefix), "model.");
    c->norm_one_plus = false;
    c->attn_output_gate = false;
    rd_int(r, tc, "vocab_size", 151936, 1, 1 << 24, &c->vocab_size);
    rd_int(r, tc, "hidden_size", moe ? 2048 : 4096, 1, DIM_MAX, &c->hidden_size);
    rd_int(r, tc, "intermediate_size", moe ? 6144 : 22016, 0, DIM_MAX, &c->intermediate_size);
    rd_int(r, tc, "num_hidden_layers", moe ? 24 : 32, 1, 4096, &c->n_layers);
    rd_int(r, tc, "num_attention_heads", 32, 1, 4096, &c->n_heads);
    rd_int(r, tc, "num_key_value_heads", moe ? 4 : 32, 1, 4096, &c->n_kv_heads);
    if (r->st) return;
    rd_int(r, tc, "head_dim", moe ? c->hidden_size / c->n_heads : 128, 2, 65536, &c->head_dim);
    rd_bool(r, tc, "attention_bias", false, &c->attention_bias);
    rd_int(r, tc, "max_position_embeddings", 32768, 1, 1 << 30, &c->max_position_embeddings);
    rd_num(r, tc, "rms_norm_eps", 1e-6, &c->rms_norm_eps);
    read_rope(r, tc, tc, c, 10000.0, 1.0);
    rd_bool(r, tc, "tie_word_embeddings", false, &c->tie_word_embeddings);
    rd_ids(r, tc, "eos_token_id", c->eos_ids, &c->n_eos);
    int bos;
    rd_int(r, tc, "bos_token_id", -1, -1, INT32_MAX, &bos);
    c->bos_token_id = bos;
    if (r->st || !alloc_layers(r, c)) return;
    memset(c->layer_types, CLLM_LAYER_FULL_ATTN, (size_t)c->n_layers);
    if (!moe) return;
    rd_int(r, tc, "num_experts", 128, 1, 65536, &c->n_experts);
    rd_int(r, tc, "num_experts_per_tok", 8, 1, 65536, &c->n_experts_per_tok);
    rd_int(r, tc, "moe_intermediate_size", 768, 1, DIM_MAX, &c->moe_intermediate_size);
    rd_bool(r, tc, "norm_topk_prob", false, &c->norm_topk_prob);
    int step;
    rd_int(r, tc, "decoder_sparse_step", 1, 0, 4096, &step);
    if (r->st) return;
    for (int i = 0; i < c->n_layers; i++) c->layer_is_moe[i] = step > 0 && (i + 1) % step == 0;
    json_t *mlp_only = json_object_get(tc, "mlp_only_layers");
    if (mlp_only && !json_is_null(mlp_only)) {
        if (!json_is_array(mlp_only)) {
            r->st =
                cllm_err_set(r->err, CLLM_EFORMAT, "%s: mlp_only_layers must be a list", r->label);
            return;
        }
        for (size_t i = 0; i < json_array_size(mlp_only); i++) {
            json_t *e = json_array_get(mlp_only, i);
            if (!json_is_integer(e) || json_integer_value(e) < 0 ||
                json_integer_value(e) >= c->n_layers) {
                r->st = cllm_err_set(r->err, CLLM_EFORMAT,
                                     "%s: mlp_only_layers[%zu] is not a layer index", r->label, i);
                return;
            }
            c->layer_is_moe[json_integer_value(e)] = 0;
        }
    }
}

/* Qwen2 (HF Qwen2Config / modeling_qwen2.py): Qwen3's dense layout with q/k/v biases always
 * (o_proj none), no q/k norms, head_dim hidden / heads unless given. Sliding-window layers
 * (use_sliding_window: layers from max_window_layers on, or "sliding_attention" in
 * layer_types) are refused: every layer here attends to the whole context. */
static void parse_qwen2(reader *r, json_t *tc, cllm_config *c) {
    c->arch = CLLM_ARCH_QWEN2;
    snprintf(c->weight_prefix, sizeof(c->weight_prefix), "model.");
    c->attention_bias = true;
    c->no_qk_norm = true;
    rd_int(r, tc, "vocab_size", 151936, 1, 1 << 24, &c->vocab_size);
    rd_int(r, tc, "hidden_size", 4096, 1, DIM_MAX, &c->hidden_size);
    rd_int(r, tc, "intermediate_size", 22016, 1, DIM_MAX, &c->intermediate_size);
    rd_int(r, tc, "num_hidden_layers", 32, 1, 4096, &c->n_layers);
    rd_int(r, tc, "num_attention_heads", 32, 1, 4096, &c->n_heads);
    rd_int(r, tc, "num_key_value_heads", c->n_heads, 1, 4096, &c->n_kv_heads);
    if (r->st) return;
    rd_int(r, tc, "head_dim", c->hidden_size / c->n_heads, 2, 65536, &c->head_dim);
    rd_int(r, tc, "max_position_embeddings", 32768, 1, 1 << 30, &c->max_position_embeddings);
    rd_num(r, tc, "rms_norm_eps", 1e-6, &c->rms_norm_eps);
    read_rope(r, tc, tc, c, 10000.0, 1.0);
    rd_bool(r, tc, "tie_word_embeddings", false, &c->tie_word_embeddings);
    rd_ids(r, tc, "eos_token_id", c->eos_ids, &c->n_eos);
    int bos, mwl = 28;
    rd_int(r, tc, "bos_token_id", -1, -1, INT32_MAX, &bos);
    c->bos_token_id = bos;
    bool sw = false;
    rd_bool(r, tc, "use_sliding_window", false, &sw);
    rd_int(r, tc, "max_window_layers", 28, 0, 1 << 20, &mwl);
    json_t *lt = json_object_get(tc, "layer_types");
    for (size_t i = 0; !r->st && json_is_array(lt) && i < json_array_size(lt); i++) {
        const char *s = json_string_value(json_array_get(lt, i));
        if (!s || strcmp(s, "full_attention"))
            r->st =
                cllm_err_set(r->err, CLLM_EUNSUPPORTED,
                             "%s: layer_types[%zu] = '%s' is not supported (full_attention only)",
                             r->label, i, s ? s : "(not a string)");
    }
    json_t *win = json_object_get(tc, "sliding_window");
    if (!r->st && !lt && sw && win && !json_is_null(win) && mwl < c->n_layers)
        r->st = cllm_err_set(r->err, CLLM_EUNSUPPORTED,
                             "%s: use_sliding_window with max_window_layers %d < "
                             "num_hidden_layers %d: sliding-window attention is not supported",
                             r->label, mwl, c->n_layers);
    if (r->st || !alloc_layers(r, c)) return;
    memset(c->layer_types, CLLM_LAYER_FULL_ATTN, (size_t)c->n_layers);
}

cllm_status cllm_config_parse(const char *json, size_t len, const char *label, cllm_config *cfg,
                              cllm_error *err) {
    memset(cfg, 0, sizeof(*cfg));
    cfg->bos_token_id = -1;
    cfg->image_token_id = cfg->vision_start_token_id = cfg->vision_end_token_id = -1;
    json_error_t je;
    json_t *top = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!top)
        return cllm_err_set(err, CLLM_EFORMAT, "%s: not valid JSON (%s, line %d)", label, je.text,
                            je.line);
    reader r = {label, err, CLLM_OK};
    if (!json_is_object(top)) {
        r.st = cllm_err_set(err, CLLM_EFORMAT, "%s: not a JSON object", label);
        goto done;
    }
    const char *mt = json_string_value(json_object_get(top, "model_type"));
    if (!mt) {
        r.st = cllm_err_set(err, CLLM_EFORMAT, "%s: missing 'model_type'", label);
        goto done;
    }
    snprintf(cfg->model_type, sizeof(cfg->model_type), "%s", mt);
    json_t *dt = json_object_get(top, "dtype");
    if (!json_is_string(dt)) dt = json_object_get(top, "torch_dtype");
    if (json_is_string(dt)) snprintf(cfg->dtype, sizeof(cfg->dtype), "%s", json_string_value(dt));
    if (!strcmp(mt, "qwen3_5_moe")) {
        json_t *tc = json_object_get(top, "text_config");
        if (!json_is_object(tc)) {
            r.st = cllm_err_set(err, CLLM_EFORMAT, "%s: qwen3_5_moe needs a 'text_config' object",
                                label);
            goto done;
        }
        parse_qwen35(&r, top, tc, cfg);
    } else if (!strcmp(mt, "qwen3_5_moe_text")) {
        parse_qwen35(&r, top, top, cfg);
    } else if (!strcmp(mt, "qwen3_moe")) {
        parse_qwen3(&r, top, cfg, true);
    } else if (!strcmp(mt, "qwen3")) {
        parse_qwen3(&r, top, cfg, false);
    } else if (!strcmp(mt, "qwen2")) {
        parse_qwen2(&r, top, cfg);
    } else {
        r.st = cllm_err_set(
            err, CLLM_EUNSUPPORTED,
            "%s: model_type '%s' is not supported (qwen3_5_moe, qwen3_moe, qwen3, qwen2)", label,
            mt);
        goto done;
    }
    validate(&r, cfg);
done:
    json_decref(top);
    if (r.st) cllm_config_free(cfg);
    return r.st;
}

cllm_status cllm_config_load(const char *dir, cllm_config *cfg, cllm_error *err) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    size_t len;
    char *buf = cllm_read_file(path, CONFIG_MAX_BYTES, &len, err);
    if (!buf) return err ? err->code : CLLM_EIO;
    cllm_status st = cllm_config_parse(buf, len, path, cfg, err);
    free(buf);
    return st;
}

void cllm_config_free(cllm_config *cfg) {
    free(cfg->layer_types);
    free(cfg->layer_is_moe);
    cfg->layer_types = cfg->layer_is_moe = NULL;
}

cllm_status cllm_gen_config_parse(const char *json, size_t len, const char *label,
                                  cllm_gen_config *g, cllm_error *err) {
    memset(g, 0, sizeof(*g));
    g->temperature = 1.0;
    g->top_p = 1.0;
    g->repetition_penalty = 1.0;
    json_error_t je;
    json_t *o = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!o) return cllm_err_set(err, CLLM_EFORMAT, "%s: not valid JSON (%s)", label, je.text);
    reader r = {label, err, CLLM_OK};
    if (!json_is_object(o)) r.st = cllm_err_set(err, CLLM_EFORMAT, "%s: not a JSON object", label);
    rd_bool(&r, o, "do_sample", false, &g->do_sample);
    rd_num(&r, o, "temperature", 1.0, &g->temperature);
    rd_num(&r, o, "top_p", 1.0, &g->top_p);
    rd_num(&r, o, "min_p", 0.0, &g->min_p);
    rd_num(&r, o, "repetition_penalty", 1.0, &g->repetition_penalty);
    rd_num(&r, o, "presence_penalty", 0.0, &g->presence_penalty);
    rd_int(&r, o, "top_k", 0, 0, 1 << 24, &g->top_k);
    rd_ids(&r, o, "eos_token_id", g->eos_ids, &g->n_eos);
    json_decref(o);
    if (!r.st) g->present = true;
    return r.st;
}

cllm_status cllm_gen_config_load(const char *dir, cllm_gen_config *g, cllm_error *err) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/generation_config.json", dir);
    char *buf;
    size_t len;
    memset(g, 0, sizeof(*g));
    g->temperature = 1.0;
    g->top_p = 1.0;
    g->repetition_penalty = 1.0;
    FILE *f = fopen(path, "rb");
    if (!f) return CLLM_OK; /* optional file */
    fclose(f);
    buf = cllm_read_file(path, CONFIG_MAX_BYTES, &len, err);
    if (!buf) return err ? err->code : CLLM_EIO;
    cllm_status st = cllm_gen_config_parse(buf, len, path, g, err);
    free(buf);
    return st;
}

void cllm_gen_config_neutral(cllm_gen_config *g) {
    g->do_sample = false;
    g->temperature = 1.0;
    g->top_p = 1.0;
    g->min_p = 0.0;
    g->repetition_penalty = 1.0;
    g->presence_penalty = 0.0;
    g->top_k = 0;
}

cllm_status cllm_gen_config_override(cllm_gen_config *g, const char *json, cllm_error *err) {
    static const char *const keys[] = {"temperature",        "top_p",           "top_k", "min_p",
                                       "repetition_penalty", "presence_penalty"};
    const char *label = "--override-generation-config";
    json_error_t je;
    json_t *o = json_loads(json, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        return cllm_err_set(err, CLLM_EINVAL,
                            "%s: expected a JSON object like "
                            "'{\"temperature\": 0.6}'",
                            label);
    }
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        bool known = false;
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) known |= !strcmp(k, keys[i]);
        if (!known) {
            cllm_status st = cllm_err_set(err, CLLM_EINVAL,
                                          "%s: '%.60s' is not supported (temperature, top_p, "
                                          "top_k, min_p, repetition_penalty, presence_penalty)",
                                          label, k);
            json_decref(o);
            return st;
        }
    }
    reader r = {label, err, CLLM_OK};
    rd_num(&r, o, "temperature", g->temperature, &g->temperature);
    rd_num(&r, o, "top_p", g->top_p, &g->top_p);
    rd_num(&r, o, "min_p", g->min_p, &g->min_p);
    rd_num(&r, o, "repetition_penalty", g->repetition_penalty, &g->repetition_penalty);
    rd_num(&r, o, "presence_penalty", g->presence_penalty, &g->presence_penalty);
    rd_int(&r, o, "top_k", g->top_k, -1, 1 << 24, &g->top_k);
    json_decref(o);
    if (r.st) return r.st;
    if (g->temperature < 0 || g->top_p <= 0 || g->top_p > 1 || g->min_p < 0 || g->min_p > 1 ||
        g->repetition_penalty <= 0)
        return cllm_err_set(err, CLLM_ERANGE,
                            "%s: a value is out of range (temperature >= 0, 0 < top_p <= 1, "
                            "0 <= min_p <= 1, repetition_penalty > 0)",
                            label);
    if (g->top_k < 0) g->top_k = 0; /* vLLM's -1: no top-k */
    /* vLLM applies these whatever do_sample says; here they are the defaults from now on */
    g->present = true;
    g->do_sample = true;
    return CLLM_OK;
}
