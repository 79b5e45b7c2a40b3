/* Table-driven command-line parsing shared by every subcommand.
 *
 * A subcommand describes its flags in a cli_opt table; cli_parse fills the targets, prints
 * `--help` from the table, and turns bad values into a one-line error. Unknown flags are all
 * reported in one message, each with the closest known flag ("did you mean --x?"). Long flags
 * may be spelled with '_' for '-' (`--max_model_len`, as vLLM's argparse accepts).
 * Return convention for subcommands: 0 ok, 1 failure at run time, 2 usage error. */
#ifndef CLLM_CLI_CLI_H
#define CLLM_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "model/forward.h"

typedef enum cli_type {
    CLI_FLAG,   /* bool, no value */
    CLI_INT,    /* long */
    CLI_FLOAT,  /* double */
    CLI_STR,    /* const char * (points into argv) */
    CLI_SIZE,   /* uint64_t bytes; accepts 4GB, 512MiB, 1e9 */
    CLI_CHOICE, /* const char *, must be one of choices ("a|b|c") */
    CLI_LIST,   /* cli_list: one or more values (following arguments up to the next flag, and
                   comma-separated parts), like argparse nargs='+' */
} cli_type;

#define CLI_LIST_MAX 8
typedef struct cli_list {
    int n;
    char v[CLI_LIST_MAX][128];
} cli_list;

typedef struct cli_opt {
    const char *name;  /* "--threads" */
    const char *alias; /* "-t" or NULL */
    cli_type type;
    void *target;
    const char *help;    /* one line; NULL: parsed but not listed by --help */
    const char *choices; /* CLI_CHOICE only */
    double min, max;     /* CLI_INT / CLI_FLOAT bounds when min < max */
} cli_opt;

typedef struct cli_spec {
    const char *command;  /* "verify" */
    const char *usage;    /* "MODEL [options]" */
    const char *summary;  /* one line */
    const cli_opt *opts;  /* terminated by an entry with name == NULL */
    int min_pos, max_pos; /* positional argument count bounds */
} cli_spec;

/* Parses argv[1..argc) (argv[0] is the subcommand name). Positional arguments are returned in
 * pos[0..*n_pos). Returns 0 to proceed, 2 on a usage error (message already printed), or -1 when
 * --help was printed (caller returns 0). */
int cli_parse(const cli_spec *spec, int argc, char **argv, const char **pos, int *n_pos);

/* 0 when *path is a directory, or a .gguf file: then *path becomes a private folder made for it
 * (cllm_gguf_model_dir, removed at exit). Otherwise prints a hint naming the mistake (a file
 * instead of its directory, a Hugging Face id to download first, a missing path, a GGUF that
 * cannot be read) and returns 1. */
int cli_check_model_dir(const char *command, const char **path);

/* --act16: how the GPTQ matmuls of a 16-bit-activation model (w4a16, w8a16, GPTQ checkpoints)
 * take their activations (README, CLLM_ACT16): int16 codes (default), int8 codes on the int4
 * matrices (W4A8's kernels: faster prefill and batched decode, a small quality cost), or the
 * float kernels. Commands that run a model list it in their table with a const char * target. */
#define CLI_ACT16_HELP                                                                             \
    "activations of 16-bit-activation GPTQ matmuls: int16 codes, int8 codes on int4 matrices "     \
    "(faster prefill), or float kernels (default: $CLLM_ACT16, else int)"
#define CLI_ACT16_CHOICES "int|int8|float"
/* The state options of the commands that run one sequence (generate, eval, bench-forward): their
 * table rows, with a const char * target each; HOW_PPL adds eval --ppl's "of the model under
 * test" (its --compare base runs f32). */
#define CLI_GDN_PREFILL_ROW(target)                                                                \
    {                                                                                              \
        "--gdn-prefill", NULL, CLI_CHOICE, (target),                                               \
            "Gated DeltaNet prefill: token-by-token recurrence or the chunked form "               \
            "(docs/model.md 2.4)",                                                                 \
            "recurrent|chunked"                                                                    \
    }
#define CLI_SSM_DTYPE_ROW(target, more)                                                            \
    {                                                                                              \
        "--ssm-dtype", NULL, CLI_CHOICE, (target),                                                 \
            "Gated DeltaNet recurrent state element type (serve: --mamba-ssm-cache-dtype" more     \
            ")",                                                                                   \
            "f32|bf16"                                                                             \
    }
/* A numeric macro's value as a string literal, for a default named in a help text:
 * "(default " CLI_STR_OF(CLLM_MAX_NUM_BATCHED_TOKENS_DEFAULT) ")". */
#define CLI_STR_(x)   #x
#define CLI_STR_OF(x) CLI_STR_(x)
/* The process's cllm_fwd_opts (cli/options.h: from the environment) with a parsed --act16 over
 * CLLM_ACT16 (NULL: not given, the environment stands): what every model the command opens runs
 * under (the engine's, eval's base and compared models). Under tensor parallel each rank parses
 * the same argv and environment. */
cllm_fwd_opts cli_fwd_opts(const char *act16);

#endif
