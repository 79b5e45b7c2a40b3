/* `cllm quantize IN OUT [--scheme w4a16] [--method rtn|gptq] ...`: front end of quant/quantize.c.
 */
#include <stdio.h>
#include <unistd.h>
#include <string.h>

#include "quant/quantize.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "cli/commands.h"

int cmd_quantize(int argc, char **argv) {
    const char *scheme = "w4a16", *sdt = "fp16", *method = "rtn", *lm = "int8", *keep = NULL,
               *calib = NULL, *preset = NULL;
    long group = 128, samples = 32, seq_len = 256, min_tok = 16, threads = 0;
    double damp = 0.01;
    uint64_t shard = 4000000000ull, gmem = 0;
    bool no_def = false, quiet = false, dry = false, official = false, asym = false;
    const cli_opt opts[] = {
        {"--scheme", NULL, CLI_CHOICE, &scheme, "weights/activations", "w4a16|w8a16|w4a8|w4a4"},
        {"--group-size", "-g", CLI_INT, &group, "inputs per scale (32, 64, 128)", NULL, 1, 1 << 20},
        {"--asym", NULL, CLI_FLAG, &asym, "per-group zero points (default symmetric)"},
        {"--scale-dtype", NULL, CLI_CHOICE, &sdt, "dtype of the scales tensors", "fp16|bf16"},
        {"--method", NULL, CLI_CHOICE, &method, "round-to-nearest or GPTQ with calibration",
         "rtn|gptq"},
        {"--lm-head", NULL, CLI_CHOICE, &lm, "output layer precision", "int8|int4|bf16"},
        {"--keep", NULL, CLI_STR, &keep, "extra comma-separated name globs kept 16-bit"},
        {"--no-default-keep", NULL, CLI_FLAG, &no_def,
         "quantize what the default keep list protects (embeddings stay)"},
        {"--calib", NULL, CLI_STR, &calib, "GPTQ calibration token ids file"},
        {"--calib-samples", NULL, CLI_INT, &samples, "calibration sequences", NULL, 1, 1e6},
        {"--calib-seq-len", NULL, CLI_INT, &seq_len, "tokens per calibration sequence", NULL, 1,
         1e6},
        {"--min-expert-tokens", NULL, CLI_INT, &min_tok, "GPTQ: fewer routed tokens -> RTN", NULL,
         0, 1e9},
        {"--gptq-mem", NULL, CLI_SIZE, &gmem,
         "GPTQ: Hessian bytes held at once; layers are calibrated in groups that fit "
         "(default a quarter of RAM)"},
        {"--damp", NULL, CLI_FLOAT, &damp, "GPTQ dampening (fraction of mean diag H)", NULL, 0, 10},
        {"--shard-size", NULL, CLI_SIZE, &shard,
         "largest output shard (default 4GB; 0 = one file)"},
        {"--threads", "-t", CLI_INT, &threads, "threads for calibration (0 = all)", NULL, 0, 1024},
        {"--qwen-gptq-int4", NULL, CLI_FLAG, &official,
         "the official Qwen GPTQ-Int4 selection: only routed experts int4 (attention, GDN, shared "
         "expert, MTP, lm_head kept)"},
        {"--dry-run", NULL, CLI_FLAG, &dry, "print the plan only"},
        {"--quiet", "-q", CLI_FLAG, &quiet,
         "no progress (bar, lines or calibration), only the plan and the result"},
        {0}};
    const cli_spec spec = {
        "quantize",
        "IN_DIR OUT_DIR [options]",
        "Quantize a checkpoint to int4/int8 weights in the GPTQ layout (loads in "
        "cllm; official Qwen GPTQ-Int4 tensor layout).",
        opts,
        2,
        2};
    const char *pos[2];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    if (official) {
        if (keep || strcmp(lm, "int8") || strcmp(scheme, "w4a16")) {
            fprintf(stderr,
                    "cllm quantize: --qwen-gptq-int4 fixes --keep, --lm-head and --scheme\n");
            return 2;
        }
        preset = "*.self_attn.*,*.linear_attn.*,*shared_expert*,mtp.*";
        lm = "bf16";
    }
    cllm_quant_opts o = {
        .in_dir = pos[0],
        .out_dir = pos[1],
        .scheme = scheme,
        .group = (int)group,
        .asym = asym,
        .scale_bf16 = !strcmp(sdt, "bf16"),
        .lm_head_bits = !strcmp(lm, "int8")   ? 8
                        : !strcmp(lm, "int4") ? 4
                                              : 16,
        .keep = keep,
        .preset_keep = preset,
        .no_default_keep = no_def,
        .method = method,
        .calib = calib,
        .calib_samples = (int)samples,
        .calib_seq_len = (int)seq_len,
        .min_expert_tokens = (int)min_tok,
        .damp = damp,
        .gptq_mem = gmem,
        .shard_bytes = shard,
        .threads = (int)threads,
        .progress = !quiet,
        .tty = isatty(STDERR_FILENO), /* a \r bar only on a terminal, lines in a log */
        .dry_run = dry,
        .out = stdout,
        .fake_avail = cli_opts()->quant_fake_avail,
        .fwd = cli_opts()->fwd,
    };
    cllm_error err;
    if (cllm_quantize(&o, &err) != CLLM_OK) {
        fprintf(stderr, "cllm quantize: %s\n", err.msg);
        return err.code == CLLM_EINVAL ? 2 : 1;
    }
    return 0;
}
