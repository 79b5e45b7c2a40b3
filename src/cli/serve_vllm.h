/* Every flag of `vllm serve` that cllm has no flag of its own for (cli/serve_vllm.c): each is
 * either accepted with one INFO line saying why it has no effect on a CPU server, or refused with
 * the reason (LoRA, TLS, data parallel, a GPU-only or Python-only feature). The flags cllm does
 * honour are listed too (as "native"), so the table is the whole vLLM CLI and
 * `cllm serve --list-vllm-flags` prints it for docs/vllm-flags.md and the test that feeds every
 * flag (tests/cli/serve_vllm_flags.sh). Used by cmd_serve.c only. */
#ifndef CLLM_CLI_SERVE_VLLM_H
#define CLLM_CLI_SERVE_VLLM_H

#include <stdbool.h>

#include "cli/cli.h"

typedef struct serve_vflag {
    const char *name, *alias; /* "--data-parallel-size", "-dp" (or NULL) */
    const char *arg;          /* NULL: a switch; else a value a vLLM launch line carries */
    const char *accept;       /* values accepted as no-ops ("1", "auto|safetensors"); NULL: any */
    const char *noop;         /* why it has no effect here (the INFO line); NULL: never accepted */
    const char *refuse;       /* why it is refused (other values, or always when noop is NULL) */
    const char *bad;          /* a value that is refused (test sample), when accept is set */
    const char *native;       /* taken by cllm elsewhere: what it does (NULL otherwise) */
    bool many;                /* takes one or more values (argparse nargs='+'), like CLI_LIST */
} serve_vflag;

/* The table, terminated by a zero entry. native entries with no `native` text, `noop` and
 * `refuse` are flags of cmd_serve.c's own table. */
extern const serve_vflag serve_vflags[];

/* What the command line gave for the non-native entries (filled through the cli_opt targets). */
typedef struct serve_vstate {
    bool set[256];
    const char *val[256];
    cli_list lists[8]; /* values of the `many` entries, in table order */
    int list_of[256];  /* entry -> 1 + index into lists (0: not a list) */
} serve_vstate;

/* Appends a cli_opt for every non-native entry to opts[*n..cap) (targets in st). Returns 0, or -1
 * when cap is too small (a programming error, reported by the caller). */
int serve_vllm_add_opts(cli_opt *opts, int *n, int cap, serve_vstate *st);

/* After parsing: logs one INFO line per accepted no-op flag; returns 1 with a message on stderr
 * for the first refused one, 0 otherwise. */
int serve_vllm_check(const serve_vstate *st);

/* Prints the table (every vLLM flag and what cllm does with it): markdown for docs, or tsv
 * (name, alias, kind, sample value, refused sample) for tests. own is cmd_serve.c's table, where
 * the native flags' help text comes from. Returns 0, or 1 when a native entry is missing from
 * own (the table drifted). */
int serve_vllm_print(const cli_opt *own, bool tsv);

#endif
