/* cllm entry point: global flags (--version, --log-level, --log-format) and subcommand dispatch.
 * Each subcommand parses its own flags through cli/cli.h. */
#include <stdio.h>
#include <string.h>

#include "base/cpu.h"
#include "base/log.h"
#include "cli/cli_tp.h"
#include "cli/commands.h"
#include "cli/options.h"

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"serve", cmd_serve,
     "OpenAI- and vLLM-compatible HTTP server (SSE, /metrics, /health, drain on SIGTERM)"},
    {"tokenize", cmd_tokenize,
     "encode text with the model's tokenizer (--bench FILE for throughput)"},
    {"detokenize", cmd_detokenize, "decode token ids to text"},
    {"chat-template", cmd_chat_template, "render the chat template for a messages JSON file"},
    {"verify", cmd_verify, "check a model directory: files, index, tensors, shapes, NaN/Inf"},
    {"synth", cmd_synth, "write a random-weight model in HF layout from a config"},
    {"quantize", cmd_quantize,
     "quantize a checkpoint to int4/int8 weights (GPTQ layout; rtn or gptq)"},
    {"cpuinfo", cmd_cpuinfo, "print detected CPU features and the kernel tier in use"},
    {"generate", cmd_generate,
     "generate text from a prompt on one sequence (prefill and decode tok/s)"},
    {"eval", cmd_eval,
     "logits dump/hash, perplexity, KL divergence / top-1 / BLEU against a base model"},
    {"bench", cmd_bench,
     "offline engine benchmark: llama-bench table, batched sweep, multi-turn prefix reuse"},
    {"bench-forward", cmd_bench_forward,
     "prefill and decode tok/s beside the memory-bandwidth roofline"},
    {"bench-vision", cmd_bench_vision,
     "vision tower encode time, tokens and memory per image size"},
    {"bench-grammar", cmd_bench_grammar,
     "structured-output mask and compile times beside xgrammar (JSON schemas)"},
    {"bench-serve", cmd_bench_serve,
     "load-test an OpenAI-compatible server (vLLM bench serve metrics, think-time users)"},
    {"doctor", cmd_doctor, "health inspection of a running server (exit 0 ok, 1 warn, 2 critical)"},
};

static void print_usage(FILE *f) {
    fprintf(
        f,
        "usage: cllm [--version] [--log-level L] [--log-format text|json] COMMAND [args]\n"
        "       cllm --list-env md|names  (the environment variables cllm reads: docs/env.md)\n\n"
        "commands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'cllm COMMAND --help' describes a command's options.\n");
}

static void print_version(void) {
    char feat[256];
    cllm_cpu_describe(feat, sizeof(feat));
    printf("cllm %s\ncompiler: %s\nbuild type: %s\ncpu features: %s\nkernel tier: %s\n",
           CLLM_VERSION,
#if defined(__clang__)
           "clang " __clang_version__,
#elif defined(__GNUC__)
           "gcc " __VERSION__,
#else
           "unknown",
#endif
           CLLM_BUILD_TYPE, feat, cllm_cpu_tier_name(cllm_cpu_tier()));
}

int main(int argc, char **argv) {
    /* the environment, once (cli/options.c): CLLM_LOG and CLLM_ISA apply here, before anything
     * logs or picks a kernel; the flags below win */
    int i = 1, rc = cli_opts_load();
    if (rc) return rc;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--list-env") && i + 1 < argc) {
            if (cllm_opts_print(stdout, argv[i + 1]) == 0) return 0;
            fprintf(stderr, "cllm: bad --list-env '%s' (md|names)\n", argv[i + 1]);
            return 2;
        } else if (!strcmp(a, "--version") || !strcmp(a, "-V")) {
            print_version();
            return 0;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            print_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--log-level") && i + 1 < argc) {
            if (cllm_log_set_level_name(argv[++i]) != 0) {
                fprintf(stderr, "cllm: bad --log-level '%s' (debug|info|warn|error)\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--log-format") && i + 1 < argc) {
            if (cllm_log_set_format_name(argv[++i]) != 0) {
                fprintf(stderr, "cllm: bad --log-format '%s' (text|json)\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "cllm: unknown option '%s' (see cllm --help)\n", a);
            return 2;
        }
    }
    if (i >= argc) {
        print_usage(stderr);
        return 2;
    }
    for (size_t c = 0; c < sizeof(commands) / sizeof(commands[0]); c++)
        if (!strcmp(argv[i], commands[c].name)) {
            /* --tensor-parallel-size: MPI set-up or a re-launch through mpirun (cli/cli_tp.c) */
            int sub_argc = argc - i;
            char **sub_argv = argv + i;
            rc = cli_tp_setup(argv[i], &sub_argc, &sub_argv);
            if (rc) return rc;
            rc = commands[c].run(sub_argc, sub_argv);
            return cli_tp_finish(argv[i], sub_argc > 1 ? sub_argv[sub_argc - 1] : NULL, rc);
        }
    fprintf(stderr, "cllm: unknown command '%s' (see cllm --help)\n", argv[i]);
    return 2;
}
