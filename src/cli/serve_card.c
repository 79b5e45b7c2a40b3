/* Builds the console's model card (serve_card.h): architecture, parameter count, quantization,
 * dtype, context, layers/experts from config.json and the checkpoint's tensor headers; threads,
 * kernel tier and build from this process. Parameter count: elements of every stored tensor, with
 * packed GPTQ qweight int32 words counted as 32/bits weights and their qzeros/scales/g_idx
 * metadata left out, so a quantized checkpoint reports its model's size, not its storage. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/cpu.h"
#include "cli/serve_card.h"
#include "model/checkpoint.h"

typedef struct count_ctx {
    double params;
    int qbits;
} count_ctx;

static bool ends_with(const char *s, const char *t) {
    size_t n = strlen(s), m = strlen(t);
    return n >= m && !strcmp(s + n - m, t);
}

static void count_tensor(void *ctx, const cllm_tensor *t) {
    count_ctx *c = ctx;
    if (ends_with(t->name, ".qzeros") || ends_with(t->name, ".scales") ||
        ends_with(t->name, ".g_idx") || ends_with(t->name, "_scale") ||
        ends_with(t->name, "_zero_point"))
        return;
    double k = 1;
    if (ends_with(t->name, ".qweight") || ends_with(t->name, "weight_packed"))
        k = 32.0 / (c->qbits > 0 ? c->qbits : 4);
    c->params += (double)t->n_elems * k;
}

/* text_config's field, else the top level's (plain Qwen3 MoE configs are flat). */
static json_t *cfg_get(json_t *root, const char *key) {
    json_t *tc = json_object_get(root, "text_config");
    json_t *v = tc ? json_object_get(tc, key) : NULL;
    return v ? v : json_object_get(root, key);
}

void cli_serve_card_set(cllm_server *srv, const char *model_dir, const char *name,
                        const cllm_engine_opts *eo) {
    json_t *card = json_object();
    if (!card) return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", model_dir);
    json_t *root = json_load_file(path, 0, NULL);
    json_object_set_new(card, "name", json_string(name));
    json_object_set_new(card, "path", json_string(model_dir));
    count_ctx cc = {0, 0};
    if (root) {
        json_t *arch = json_array_get(json_object_get(root, "architectures"), 0);
        if (json_is_string(arch)) json_object_set(card, "architecture", arch);
        json_t *mt = json_object_get(root, "model_type");
        if (json_is_string(mt)) json_object_set(card, "model_type", mt);
        static const char *const ints[] = {
            "num_hidden_layers",       "hidden_size", "num_experts", "num_experts_per_tok",
            "max_position_embeddings", "vocab_size"};
        for (size_t i = 0; i < sizeof(ints) / sizeof(*ints); i++) {
            json_t *v = cfg_get(root, ints[i]);
            if (json_is_integer(v)) json_object_set(card, ints[i], v);
        }
        json_t *dt = cfg_get(root, "dtype");
        if (!json_is_string(dt)) dt = cfg_get(root, "torch_dtype");
        if (json_is_string(dt)) json_object_set(card, "dtype", dt);
        json_t *qc = json_object_get(root, "quantization_config");
        const char *qm = json_string_value(json_object_get(qc, "quant_method"));
        json_t *bits = json_object_get(qc, "bits");
        if (json_is_integer(bits)) cc.qbits = (int)json_integer_value(bits);
        char q[128];
        if (qm) {
            json_t *gs = json_object_get(qc, "group_size"),
                   *ab = json_object_get(qc, "cllm_act_bits");
            int n = snprintf(q, sizeof(q), "%s", qm);
            if (cc.qbits && n < (int)sizeof(q))
                n += snprintf(q + n, sizeof(q) - (size_t)n, " w%d", cc.qbits);
            if (json_is_integer(ab) && n < (int)sizeof(q))
                n += snprintf(q + n, sizeof(q) - (size_t)n, "a%d", (int)json_integer_value(ab));
            if (json_is_integer(gs) && n < (int)sizeof(q))
                snprintf(q + n, sizeof(q) - (size_t)n, " g%d", (int)json_integer_value(gs));
        } else {
            snprintf(q, sizeof(q), "none (%s)",
                     json_is_string(dt) ? json_string_value(dt) : "float");
        }
        json_object_set_new(card, "quantization", json_string(q));
        json_decref(root);
    }
    cllm_ckpt *ck = NULL;
    cllm_error err = {0};
    if (cllm_ckpt_open(model_dir, false, &ck, &err) == CLLM_OK) {
        cllm_ckpt_foreach(ck, count_tensor, &cc);
        json_object_set_new(card, "parameters", json_real(cc.params));
        cllm_ckpt_close(ck);
    }
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    json_object_set_new(card, "threads",
                        json_integer(eo->n_threads > 0 ? eo->n_threads
                                     : nproc > 0       ? nproc
                                                       : 1));
    json_object_set_new(card, "isa_tier", json_string(cllm_cpu_tier_name(cllm_cpu_tier())));
    char feat[256];
    cllm_cpu_describe(feat, sizeof(feat));
    json_object_set_new(card, "cpu_features", json_string(feat));
    json_object_set_new(card, "version", json_string(CLLM_VERSION));
    json_object_set_new(card, "build", json_string(CLLM_BUILD_TYPE));
    json_object_set_new(card, "kv_cache_dtype", json_string(eo->kv_cache_bf16 ? "bf16" : "fp32"));
    json_object_set_new(card, "ssm_cache_dtype", json_string(eo->ssm_state_bf16 ? "bf16" : "fp32"));
    json_object_set_new(card, "prefix_caching", json_boolean(eo->enable_prefix_caching));
    char *t = json_dumps(card, JSON_COMPACT);
    json_decref(card);
    if (t) cllm_server_set_card(srv, t);
    free(t);
}
