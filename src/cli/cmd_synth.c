/* `cllm synth --config CONFIG OUT`: front end of model/synth.c. */
#include <stdio.h>
#include <unistd.h>
#include <string.h>

#include "model/synth.h"
#include "cli/cli.h"
#include "cli/commands.h"

int cmd_synth(int argc, char **argv) {
    const char *config = NULL, *dtype = "bf16", *experts = NULL, *tokenizer = NULL;
    const char *scheme = NULL, *lm_head = "int8", *qlayout = "gptq";
    long seed = 0, group = 128;
    uint64_t shard = 4000000000ull;
    bool qwen_names = false, no_mtp = false, no_vision = false, quiet = false;
    const cli_opt opts[] = {
        {"--config", "-c", CLI_STR, &config, "config.json to follow (e.g. configs/tiny.json)"},
        {"--seed", "-s", CLI_INT, &seed, "random seed (same seed, same weights)", NULL, 0, 9.2e18},
        {"--dtype", NULL, CLI_CHOICE, &dtype, "storage type of the weights", "bf16|f16|f32"},
        {"--experts", NULL, CLI_CHOICE, &experts,
         "expert tensor layout (default fused; per-expert with --scheme)", "fused|per-expert"},
        {"--scheme", NULL, CLI_CHOICE, &scheme,
         "write GPTQ-layout quantized weights directly (random codes; the tensors `cllm "
         "quantize` keeps stay in --dtype)",
         "w4a16|w8a16|w4a8|w4a4"},
        {"--layout", NULL, CLI_CHOICE, &qlayout,
         "quantized layout: gptq (v1, with --scheme), awq (AutoAWQ gemm, --scheme w4a16 implied, "
         "lm_head kept), fp8 (block e4m3 + weight_scale_inv, no --scheme, lm_head kept)",
         "gptq|awq|fp8"},
        {"--group-size", NULL, CLI_INT, &group,
         "quantization group along in_features (--scheme); with --layout fp8 the block side", NULL,
         8, 1 << 20},
        {"--lm-head", NULL, CLI_CHOICE, &lm_head, "lm_head precision with --scheme",
         "int8|int4|bf16"},
        {"--shard-size", NULL, CLI_SIZE, &shard, "largest shard file (default 4GB; 0 = one file)"},
        {"--qwen-shard-names", NULL, CLI_FLAG, &qwen_names,
         "name shards model.safetensors-000NN-of-000MM.safetensors"},
        {"--no-mtp", NULL, CLI_FLAG, &no_mtp, "leave out the MTP head even if the config has one"},
        {"--no-vision", NULL, CLI_FLAG, &no_vision,
         "leave out the vision tower (model.visual.*) even if the config has one"},
        {"--tokenizer", NULL, CLI_STR, &tokenizer,
         "copy tokenizer.json (+ tokenizer_config.json) from this dir"},
        {"--quiet", "-q", CLI_FLAG, &quiet, "no progress output"},
        {0}};
    const cli_spec spec = {
        "synth",
        "--config CONFIG OUT_DIR [options]",
        "Write a random-weight model in exact HF layout (config.json, safetensors "
        "shards + index, generation_config.json), streaming, deterministic per seed; with "
        "--scheme a quantized checkpoint in the GPTQ layout, written directly.",
        opts,
        1,
        1};
    const char *pos[1];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    if (!config) {
        fprintf(stderr, "cllm synth: --config is required\n");
        return 2;
    }
    bool awq = !strcmp(qlayout, "awq"), fp8 = !strcmp(qlayout, "fp8");
    if (awq && !scheme) scheme = "w4a16";
    cllm_synth_opts o = {
        .config_path = config,
        .out_dir = pos[0],
        .seed = (uint64_t)seed,
        .dtype = !strcmp(dtype, "bf16")  ? CLLM_DT_BF16
                 : !strcmp(dtype, "f16") ? CLLM_DT_F16
                                         : CLLM_DT_F32,
        .layout = experts
                      ? (!strcmp(experts, "fused") ? CLLM_EXPERTS_FUSED : CLLM_EXPERTS_PER_EXPERT)
                      : (scheme || fp8 ? CLLM_EXPERTS_PER_EXPERT : CLLM_EXPERTS_FUSED),
        .shard_bytes = shard,
        .qwen_shard_names = qwen_names,
        .include_mtp = !no_mtp,
        .include_vision = !no_vision,
        .tokenizer_dir = tokenizer,
        .progress = !quiet,
        .tty = isatty(STDERR_FILENO), /* a \r bar only on a terminal, lines in a log */
        .scheme = scheme,
        .group = (int)group,
        .lm_head_bits = !strcmp(lm_head, "int8")   ? 8
                        : !strcmp(lm_head, "int4") ? 4
                                                   : 16,
        .qlayout = awq   ? CLLM_SYNTH_AWQ
                   : fp8 ? CLLM_SYNTH_FP8
                         : CLLM_SYNTH_GPTQ,
    };
    cllm_error err;
    if (cllm_synth(&o, &err) != CLLM_OK) {
        fprintf(stderr, "cllm synth: %s\n", err.msg);
        return 1;
    }
    return 0;
}
