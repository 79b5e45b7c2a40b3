/* config.json parsing: shipped configs, HF defaults for missing keys, and inconsistent configs
 * rejected with the key named. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/tensor_plan.h"
#include "test.h"

static cllm_status parse(const char *json, cllm_config *c, char *msg) {
    cllm_error err = {0};
    cllm_status st = cllm_config_parse(json, strlen(json), "config.json", c, &err);
    snprintf(msg, 512, "%s", st ? err.msg : "");
    return st;
}

#define EXPECT_FAIL(json, needle)                                                                  \
    do {                                                                                           \
        cllm_config c_;                                                                            \
        char m_[512];                                                                              \
        CHECK_MSG(parse(json, &c_, m_) != CLLM_OK, "accepted: %s", json);                          \
        CHECK_MSG(strstr(m_, needle), "message '%s' lacks '%s'", m_, needle);                      \
    } while (0)

static void count(void *ctx, const cllm_tensor_spec *s) {
    (*(uint64_t *)ctx) += cllm_tensor_spec_elems(s);
}

/* Counts the specs whose name ends in suffix (ctx: {suffix, count}). */
typedef struct suffix_count {
    const char *suffix;
    int n;
} suffix_count;
static void count_suffix(void *ctx, const cllm_tensor_spec *s) {
    suffix_count *sc = ctx;
    size_t a = strlen(s->name), b = strlen(sc->suffix);
    sc->n += a >= b && !strcmp(s->name + a - b, sc->suffix);
}

int main(void) {
    const char *src = getenv("CLLM_SRC");
    char path[600];
    cllm_config c;
    cllm_error err;
    char msg[512];

    /* The real shape: 40 layers, full attention at i%4==3, 35.95B parameters with MTP + vision. */
    snprintf(path, sizeof(path), "%s/configs", src ? src : ".");
    char d[700];
    snprintf(d, sizeof(d), "%s/tmp-cfg", test_tmp());
    FILE *in;
    snprintf(path, sizeof(path), "%s/configs/qwen3.5-35b-a3b.json", src ? src : ".");
    in = fopen(path, "rb");
    CHECK(in != NULL);
    static char buf[1 << 16];
    size_t n = in ? fread(buf, 1, sizeof(buf) - 1, in) : 0;
    if (in) fclose(in);
    buf[n] = 0;
    CHECK(cllm_config_parse(buf, n, path, &c, &err) == CLLM_OK);
    if (c.layer_types) {
        CHECK(c.arch == CLLM_ARCH_QWEN35_MOE && c.n_layers == 40 && c.hidden_size == 2048);
        CHECK(c.layer_types[3] == CLLM_LAYER_FULL_ATTN &&
              c.layer_types[0] == CLLM_LAYER_LINEAR_ATTN);
        CHECK(cllm_config_count_layers(&c, CLLM_LAYER_FULL_ATTN) == 10);
        CHECK(c.rotary_dim == 64 && c.rope_theta == 1e7 && c.n_experts == 256 &&
              c.n_experts_per_tok == 8);
        CHECK(c.norm_one_plus && c.attn_output_gate && c.mtp_num_hidden_layers == 1 &&
              c.vision.present);
        CHECK(!strcmp(c.weight_prefix, "model.language_model.") && c.n_eos == 1 &&
              c.eos_ids[0] == 248044);
        uint64_t total = 0;
        size_t nt = cllm_tensor_plan(&c, CLLM_EXPERTS_FUSED, true, true, count, &total);
        CHECK_MSG(nt == 1811, "tensors %zu", nt);
        CHECK_MSG(total > 35.94e9 && total < 35.96e9, "params %llu", (unsigned long long)total);
        uint64_t text = 0;
        CHECK(cllm_tensor_plan(&c, CLLM_EXPERTS_FUSED, false, false, count, &text) == 693);
        cllm_config_free(&c);
    }

    /* Defaults: a minimal qwen3_5_moe text config gets the HF class defaults. */
    CHECK(parse("{\"model_type\":\"qwen3_5_moe\",\"text_config\":{}}", &c, msg) == CLLM_OK);
    if (!msg[0]) {
        CHECK(c.vocab_size == 248320 && c.n_layers == 40 && c.head_dim == 256 &&
              c.lin_n_v_heads == 32);
        CHECK(c.layer_types[39] == CLLM_LAYER_FULL_ATTN &&
              c.layer_types[38] == CLLM_LAYER_LINEAR_ATTN);
        CHECK(c.max_position_embeddings == 32768 && c.rms_norm_eps == 1e-6);
        cllm_config_free(&c);
    }
    /* full_attention_interval without layer_types. */
    CHECK(parse("{\"model_type\":\"qwen3_5_moe_text\",\"num_hidden_layers\":6,\"full_attention_"
                "interval\":3}",
                &c, msg) == CLLM_OK);
    if (!msg[0]) {
        CHECK(c.layer_types[2] == CLLM_LAYER_FULL_ATTN &&
              c.layer_types[5] == CLLM_LAYER_FULL_ATTN &&
              c.layer_types[4] == CLLM_LAYER_LINEAR_ATTN);
        cllm_config_free(&c);
    }
    /* qwen3 dense defaults and qwen3_moe sparse step / mlp_only_layers. */
    CHECK(parse("{\"model_type\":\"qwen3\"}", &c, msg) == CLLM_OK);
    if (!msg[0]) {
        CHECK(c.arch == CLLM_ARCH_QWEN3 && c.head_dim == 128 && c.rotary_dim == 128 &&
              !c.norm_one_plus);
        CHECK(!c.layer_is_moe[0] && !strcmp(c.weight_prefix, "model."));
        cllm_config_free(&c);
    }
    CHECK(parse("{\"model_type\":\"qwen3_moe\",\"num_hidden_layers\":4,\"decoder_sparse_step\":2,"
                "\"mlp_only_layers\":[3]}",
                &c, msg) == CLLM_OK);
    if (!msg[0]) {
        CHECK(!c.layer_is_moe[0] && c.layer_is_moe[1] && !c.layer_is_moe[2] && !c.layer_is_moe[3]);
        CHECK(!c.norm_topk_prob && c.n_experts == 128);
        /* the layer builders (model/tensor_table.c): layer 1's router and fused experts, no
         * shared expert; the 3 dense layers' MLP; per layer 2 norms, 4 projections, q/k norms;
         * embed, norm and lm_head */
        suffix_count sc = {"mlp.gate.weight", 0};
        CHECK(cllm_tensor_plan(&c, CLLM_EXPERTS_FUSED, true, true, count_suffix, &sc) ==
              3 + 4 * 8 + 3 + 3 * 3);
        CHECK(sc.n == 1);
        sc = (suffix_count){"shared_expert.up_proj.weight", 0};
        cllm_tensor_plan(&c, CLLM_EXPERTS_PER_EXPERT, true, true, count_suffix, &sc);
        CHECK(sc.n == 0);
        cllm_config_free(&c);
    }
    /* presence predicates: attention_bias adds three biases a layer; a tied lm_head is none */
    CHECK(parse("{\"model_type\":\"qwen3\",\"num_hidden_layers\":3,\"attention_bias\":true,"
                "\"tie_word_embeddings\":true}",
                &c, msg) == CLLM_OK);
    if (!msg[0]) {
        suffix_count sc = {"_proj.bias", 0};
        CHECK(cllm_tensor_plan(&c, CLLM_EXPERTS_FUSED, true, true, count_suffix, &sc) ==
              2 + 3 * 14);
        CHECK(sc.n == 9);
        sc = (suffix_count){"lm_head.weight", 0};
        cllm_tensor_plan(&c, CLLM_EXPERTS_FUSED, true, true, count_suffix, &sc);
        CHECK(sc.n == 0);
        cllm_config_free(&c);
    }

    /* qwen2 (HF Qwen2Config): head_dim hidden / heads, kv heads = heads, rope_theta 1e4, untied;
     * q/k/v biases always, no q/k norms: per layer 2 norms, 4 projections, 3 biases; the
     * sliding window only counts when use_sliding_window is true */
    CHECK(parse("{\"model_type\":\"qwen2\",\"num_hidden_layers\":3,\"hidden_size\":896,"
                "\"num_attention_heads\":14,\"use_sliding_window\":false,\"sliding_window\":64,"
                "\"max_window_layers\":1}",
                &c, msg) == CLLM_OK);
    if (!msg[0]) {
        CHECK(c.arch == CLLM_ARCH_QWEN2 && c.head_dim == 64 && c.n_kv_heads == 14 &&
              c.rotary_dim == 64 && c.rope_theta == 10000.0 && !c.tie_word_embeddings);
        CHECK(c.attention_bias && c.no_qk_norm && !c.norm_one_plus && !c.attn_output_gate);
        CHECK(!c.layer_is_moe[2] && c.layer_types[2] == CLLM_LAYER_FULL_ATTN &&
              !strcmp(c.weight_prefix, "model."));
        suffix_count sc = {"_norm.weight", 0};
        CHECK(cllm_tensor_plan(&c, CLLM_EXPERTS_FUSED, true, true, count_suffix, &sc) ==
              3 + 3 * 12);
        CHECK(sc.n == 0);
        sc = (suffix_count){"_proj.bias", 0};
        cllm_tensor_plan(&c, CLLM_EXPERTS_FUSED, true, true, count_suffix, &sc);
        CHECK(sc.n == 9);
        cllm_config_free(&c);
    }
    EXPECT_FAIL("{\"model_type\":\"qwen2\",\"num_hidden_layers\":4,\"use_sliding_window\":true,"
                "\"sliding_window\":64,\"max_window_layers\":2}",
                "sliding-window");
    EXPECT_FAIL("{\"model_type\":\"qwen2\",\"num_hidden_layers\":2,\"layer_types\":"
                "[\"full_attention\",\"sliding_attention\"]}",
                "layer_types[1]");

    /* Bad configs. */
    EXPECT_FAIL("{\"model_type\":\"llama\"}", "not supported");
    EXPECT_FAIL("{\"text_config\":{}}", "model_type");
    EXPECT_FAIL("{\"model_type\":\"qwen3_5_moe\"}", "text_config");
    EXPECT_FAIL("{\"model_type\":\"qwen3\",\"num_attention_heads\":6,\"num_key_value_heads\":4}",
                "multiple");
    EXPECT_FAIL("{\"model_type\":\"qwen3_5_moe_text\",\"linear_num_key_heads\":3,\"linear_num_"
                "value_heads\":4}",
                "linear_num_value_heads");
    EXPECT_FAIL("{\"model_type\":\"qwen3_5_moe_text\",\"num_hidden_layers\":2,\"layer_types\":["
                "\"full_attention\"]}",
                "layer_types");
    EXPECT_FAIL(
        "{\"model_type\":\"qwen3_5_moe_text\",\"num_hidden_layers\":1,\"layer_types\":[\"mamba\"]}",
        "layer_types[0]");
    EXPECT_FAIL("{\"model_type\":\"qwen3_moe\",\"num_experts\":4,\"num_experts_per_tok\":8}",
                "num_experts_per_tok");
    EXPECT_FAIL("{\"model_type\":\"qwen3\",\"hidden_size\":\"big\"}", "hidden_size");
    EXPECT_FAIL("{\"model_type\":\"qwen3\",\"hidden_size\":-4}", "hidden_size");
    EXPECT_FAIL("{\"model_type\":\"qwen3\",\"head_dim\":7}", "head_dim");
    EXPECT_FAIL("{\"model_type\":\"qwen3\",\"vocab_size\":10,\"eos_token_id\":12}", "eos_token_id");
    EXPECT_FAIL("{\"model_type\":\"qwen3\",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}",
                "yarn");
    EXPECT_FAIL("{\"model_type\":\"qwen3\",\"model_type\":\"qwen3\"}", "not valid JSON");
    EXPECT_FAIL("not json", "not valid JSON");
    EXPECT_FAIL("{\"model_type\":\"qwen3_moe\",\"mlp_only_layers\":[99]}", "mlp_only_layers");

    /* generation_config. */
    cllm_gen_config g;
    const char *gj = "{\"do_sample\":true,\"temperature\":0.7,\"top_k\":20,\"top_p\":0.95,\"eos_"
                     "token_id\":[248046,248044]}";
    CHECK(cllm_gen_config_parse(gj, strlen(gj), "gen", &g, &err) == CLLM_OK);
    CHECK(g.do_sample && g.temperature == 0.7 && g.top_k == 20 && g.n_eos == 2 &&
          g.eos_ids[1] == 248044);
    CHECK(cllm_gen_config_parse("{\"top_k\":\"x\"}", 13, "gen", &g, &err) != CLLM_OK);
    return test_report("test_config");
}
