/* The process's settings that come from the environment (and the flags that stand for some of
 * them), read in one place: one table in cli/options.c holds each variable's name, flag, default
 * and documentation, fills a cllm_opts once, and prints docs/env.md (`cllm --list-env md`). The
 * libraries below the CLI read no environment: the model gets cllm_fwd_opts, dist cllm_dist_opts,
 * the quantizer cllm_quant_opts fields, the kernels their tier through cllm_cpu_set_isa.
 *
 * main() calls cli_opts_load first thing; library-level tests that want the documented variables
 * honoured call cllm_opts_from_env themselves. The few variables still read where they act
 * (MPI launcher variables, CLLM_FAULT_*: before anything else exists) are listed in the table
 * with their reader and in scripts/check-layering.py with the reason. */
#ifndef CLLM_CLI_OPTIONS_H
#define CLLM_CLI_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "dist/dist.h"
#include "model/forward.h"

typedef struct cllm_opts {
    cllm_fwd_opts fwd;   /* CLLM_ACT16, CLLM_LM_SCREEN, CLLM_PANEL, CLLM_LM_PANEL, CLLM_PROFILE,
                            CLLM_TP_TOPK */
    cllm_dist_opts dist; /* CLLM_TP_TIMEOUT_S, CLLM_TP_STARTUP_TIMEOUT_S, CLLM_TP_TEST_STALL */
    const char *isa;     /* CLLM_ISA, or NULL: the best tier the CPU has */
    const char *log;     /* CLLM_LOG, or NULL */
    const char *api_key; /* CLLM_API_KEY, else VLLM_API_KEY, or NULL */
    double log_stats_interval;      /* VLLM_LOG_STATS_INTERVAL seconds; < 0: not set */
    const char *vllm_logging_level; /* VLLM_LOGGING_LEVEL, or NULL */
    const char *mpirun_args;        /* CLLM_MPIRUN_ARGS, or NULL */
    bool tp_stats;                  /* CLLM_TP_STATS set */
    uint64_t quant_fake_avail;      /* CLLM_QUANT_FAKE_AVAIL bytes; 0: not set */
} cllm_opts;

/* Fills *o with the defaults, then from the environment (every variable of the table). Values
 * point into the environment (valid while it is not changed). CLLM_EINVAL naming the variable
 * and the accepted values for a bad one; *o then holds the defaults and what parsed before it. */
cllm_status cllm_opts_from_env(cllm_opts *o, cllm_error *err);

/* Sets one option by its variable name from a flag's value (a flag given wins over the
 * environment): the same parser as the variable's. CLLM_EINVAL for a bad value or an unknown
 * name; the message names flag (e.g. "--act16") when given, else the variable. */
cllm_status cllm_opts_set(cllm_opts *o, const char *env, const char *value, const char *flag,
                          cllm_error *err);

/* Prints the table: "md" docs/env.md as committed (tests/cli/env_doc.sh checks it), "names" one
 * variable a line. 0, or -1 for another format. */
int cllm_opts_print(FILE *f, const char *format);

/* The process's options (the CLI's): loaded once by main() through cli_opts_load, which also
 * applies the process-wide ones (CLLM_LOG, CLLM_ISA). Commands copy from it and apply their flags
 * on their copy. cli_opts_load returns 0, or 2 after printing the error. */
int cli_opts_load(void);
const cllm_opts *cli_opts(void);

#endif
