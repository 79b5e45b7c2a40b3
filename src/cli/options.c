/* The option table: every environment variable cllm reads, its flag, default and documentation,
 * and the one parser of each (see options.h). docs/env.md is this table printed
 * (`cllm --list-env md`; tests/cli/env_doc.sh fails when they differ). This file is the only
 * one in src/ that calls getenv for a setting (scripts/check-layering.py). */
#include "cli/options.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/log.h"

typedef cllm_status (*opt_parse_fn)(cllm_opts *o, const char *v, const char *name, cllm_error *err);

typedef struct opt_row {
    const char *env;    /* the variable */
    const char *flag;   /* the flag that stands for it on the commands that have it, or NULL */
    const char *def;    /* the default, as documented */
    const char *values; /* accepted values, as documented */
    const char *doc;    /* one paragraph */
    opt_parse_fn parse; /* fills cllm_opts; NULL: read where it acts (reader) */
    const char *reader; /* for parse == NULL: the file that reads it, and why there */
} opt_row;

/* Strict integer in [lo, hi]. */
static bool int_in(const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (!*v || *end || errno || n < lo || n > hi) return false;
    *out = n;
    return true;
}

static cllm_status p_act16(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    if (!*v || !strcmp(v, "int"))
        o->fwd.act16 = CLLM_ACT16_INT;
    else if (!strcmp(v, "float"))
        o->fwd.act16 = CLLM_ACT16_FLOAT;
    else if (!strcmp(v, "int8"))
        o->fwd.act16 = CLLM_ACT16_INT8;
    else
        return cllm_err_set(err, CLLM_EINVAL, "%s=%s: expected int, int8 or float", name, v);
    return CLLM_OK;
}

static cllm_status p_lm_screen(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    long n = 0;
    if (!*v || !strcmp(v, "auto"))
        o->fwd.lm_screen = CLLM_LM_SCREEN_AUTO;
    else if (int_in(v, 0, CLLM_LM_SCREEN_MAX, &n))
        o->fwd.lm_screen = n ? (int)n : CLLM_LM_SCREEN_OFF;
    else
        return cllm_err_set(err, CLLM_EINVAL, "%s=%s: expected auto, 0 or 1..%d", name, v,
                            CLLM_LM_SCREEN_MAX);
    return CLLM_OK;
}

static cllm_status p_lm_est(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    if (!*v || !strcmp(v, "2"))
        o->fwd.lm_est_bits = 2;
    else if (!strcmp(v, "4"))
        o->fwd.lm_est_bits = 4;
    else
        return cllm_err_set(err, CLLM_EINVAL, "%s=%s: expected 2 or 4", name, v);
    return CLLM_OK;
}

static cllm_status zero_one(const char *v, const char *name, bool *off, cllm_error *err) {
    if (strcmp(v, "0") && strcmp(v, "1"))
        return cllm_err_set(err, CLLM_EINVAL, "%s=%s: expected 0 or 1", name, v);
    *off = !strcmp(v, "0");
    return CLLM_OK;
}
static cllm_status p_panel(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    return zero_one(v, name, &o->fwd.no_panels, err);
}
static cllm_status p_lm_panel(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    return zero_one(v, name, &o->fwd.no_lm_panel, err);
}
static cllm_status p_panel_evict(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    bool off = true;
    cllm_status s = zero_one(v, name, &off, err);
    o->fwd.panel_evict = !off;
    return s;
}

static cllm_status p_profile(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    static const char *names[] = {"0", "1", "prefill", "mtp"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(v, names[i])) {
            o->fwd.profile = (cllm_fwd_profile)i; /* the enum's order */
            return CLLM_OK;
        }
    if (!*v) {
        o->fwd.profile = CLLM_PROFILE_OFF;
        return CLLM_OK;
    }
    return cllm_err_set(err, CLLM_EINVAL, "%s=%s: expected 0, 1, prefill or mtp", name, v);
}

static cllm_status p_tp_topk(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    o->fwd.no_tp_topk = v[0] == '0';
    return CLLM_OK;
}

static cllm_status p_seconds(const char *v, const char *name, int *out, cllm_error *err) {
    long n;
    if (!int_in(v, 0, 1000000000, &n))
        return cllm_err_set(err, CLLM_EINVAL, "%s=%s: expected whole seconds (0 = off)", name, v);
    *out = (int)n;
    return CLLM_OK;
}
static cllm_status p_tp_timeout(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    return p_seconds(v, name, &o->dist.timeout_s, err);
}
static cllm_status p_tp_startup(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    return p_seconds(v, name, &o->dist.startup_timeout_s, err);
}

static cllm_status p_tp_stall(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    const char *colon = strchr(v, ':');
    long r, s;
    char rank[24];
    size_t rl = colon ? (size_t)(colon - v) : 0;
    if (!colon || rl >= sizeof(rank))
        return cllm_err_set(err, CLLM_EINVAL, "%s=%s: expected RANK:SECONDS", name, v);
    memcpy(rank, v, rl);
    rank[rl] = 0;
    if (!int_in(rank, 0, 1 << 20, &r) || !int_in(colon + 1, 0, 86400, &s))
        return cllm_err_set(err, CLLM_EINVAL, "%s=%s: expected RANK:SECONDS", name, v);
    o->dist.stall_rank = (int)r;
    o->dist.stall_s = (int)s;
    return CLLM_OK;
}

static cllm_status p_isa(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    o->isa = *v ? v : NULL; /* an unknown name is warned about where the tier is chosen */
    return CLLM_OK;
}
static cllm_status p_log(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    o->log = v;
    return CLLM_OK;
}
static cllm_status p_api_key(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    if (!o->api_key) o->api_key = v; /* CLLM_API_KEY's row comes first: it wins */
    return CLLM_OK;
}
static cllm_status p_stats_interval(cllm_opts *o, const char *v, const char *name,
                                    cllm_error *err) {
    char *end;
    double x = strtod(v, &end);
    if (*v && !*end && x >= 0) o->log_stats_interval = x; /* vLLM's: garbage is ignored */
    return CLLM_OK;
}
static cllm_status p_vllm_level(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    o->vllm_logging_level = *v ? v : NULL;
    return CLLM_OK;
}
static cllm_status p_mpirun_args(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    o->mpirun_args = v;
    return CLLM_OK;
}
static cllm_status p_tp_stats(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    o->tp_stats = true; /* set at all, whatever its value */
    return CLLM_OK;
}
static cllm_status p_fake_avail(cllm_opts *o, const char *v, const char *name, cllm_error *err) {
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (!*v || *end || errno || !n)
        return cllm_err_set(err, CLLM_EINVAL, "%s=%s: expected a byte count > 0", name, v);
    o->quant_fake_avail = n;
    return CLLM_OK;
}

#define LAUNCHER                                                                                   \
    "src/dist/dist_common.c: set by the MPI launcher; read before any argument is parsed, to "     \
    "decide whether the process is one rank of a job"

static const opt_row rows[] = {
    /* the model (cllm_fwd_opts) */
    {"CLLM_ACT16", "--act16", "int", "int, int8, float",
     "How the GPTQ matmuls of a 16-bit-activation model (w4a16, w8a16, GPTQ checkpoints) take "
     "their activations: int16 codes; int8 codes on the int4 matrices (W4A8's kernels: faster "
     "prefill and batched decode, a small quality cost); or the float kernels (A/B checks). The "
     "flag wins over the variable.",
     p_act16, NULL},
    {"CLLM_LM_SCREEN", NULL, "auto", "auto, 0, 1..4096",
     "Screening of an int8 lm_head: auto screens one of at least 65536 rows with 128 candidates "
     "per row on the 2-bit estimate (32 with CLLM_LM_EST=4), N forces N candidates at any "
     "vocabulary size, 0 keeps the plain int8 lm_head (README, Quantization).",
     p_lm_screen, NULL},
    {"CLLM_LM_EST", NULL, "2", "2, 4",
     "Bits of the screened lm_head's estimate: 2 (a 2-bit quantization of each column and group "
     "of the int8 lm_head, a quarter of its bytes; 128 candidates by default) or 4 (the hi "
     "nibbles of the int8 codes, half its bytes; 32 candidates; the rule until 2026-12-06). The "
     "candidates are computed exactly either way (README, Quantization).",
     p_lm_est, NULL},
    {"CLLM_PANEL", NULL, "1", "0, 1",
     "0: no repack of GPTQ weights into column panels at load (the matmuls read the checkpoint's "
     "layout; slower, for A/B checks).",
     p_panel, NULL},
    {"CLLM_LM_PANEL", NULL, "1", "0, 1",
     "0: the lm_head alone is not repacked into panels (and so never screened).", p_lm_panel, NULL},
    {"CLLM_PANEL_EVICT", NULL, "0", "0, 1",
     "1: each GPTQ matrix's checkpoint pages leave the page cache once copied into panels "
     "(MADV_PAGEOUT), so the panels find free memory for huge pages when a cached checkpoint "
     "nearly fills RAM (full shape, 24 GiB: 8.5 -> 18.1 GB of 19.2 on huge pages; decode the same "
     "on Zen 3); the next start reads the file from disk again.",
     p_panel_evict, NULL},
    {"CLLM_PROFILE", NULL, "0", "0, 1, prefill, mtp",
     "Wall time per op family of the decode steps (1), of the prefill steps (prefill) or of the "
     "speculative MTP head's passes (mtp), summed over a forward context's life and logged when "
     "it is freed.",
     p_profile, NULL},
    {"CLLM_TP_TOPK", NULL, "1", "0, 1",
     "Tensor parallel: 0 sends every rank's whole logits slice instead of its best k per row "
     "(A/B checks; the sampled tokens are the same).",
     p_tp_topk, NULL},
    /* kernels and logging (process-wide, applied by main) */
    {"CLLM_ISA", NULL, "the best tier the CPU has", "ref, avx2, avx512, neon",
     "Forces a kernel tier (tests, bug reports); a tier the CPU lacks is refused with a warning.",
     p_isa, NULL},
    {"CLLM_LOG", "--log-level", "info", "debug, info, warn, error",
     "Log level; the global flag wins over the variable.", p_log, NULL},
    /* serve */
    {"CLLM_API_KEY", "--api-key", "none", "a string",
     "serve: the bearer key every /v1 request must carry. The flag wins.", p_api_key, NULL},
    {"VLLM_API_KEY", "--api-key", "none", "a string",
     "serve: vLLM's name for CLLM_API_KEY (used "
     "when CLLM_API_KEY is not set).",
     p_api_key, NULL},
    {"VLLM_LOG_STATS_INTERVAL", "--log-stats-interval", "10", "seconds >= 0",
     "serve: seconds between the engine stats log lines, as vLLM reads it; the flag wins, a "
     "value that does not parse is ignored.",
     p_stats_interval, NULL},
    {"VLLM_LOGGING_LEVEL", NULL, "unset", "DEBUG, INFO, WARNING, ERROR (any case)",
     "serve: log level under vLLM's name; an unknown level is warned about and ignored.",
     p_vllm_level, NULL},
    /* tensor parallel (cllm_dist_opts, cli/cli_tp.c) */
    {"CLLM_MPIRUN_ARGS", NULL, "none", "mpirun arguments",
     "Extra arguments for the mpirun that --tensor-parallel-size N re-launches cllm through "
     "(split at spaces).",
     p_mpirun_args, NULL},
    {"CLLM_TP_STATS", NULL, "unset", "set or unset",
     "Tensor parallel: when set, each rank prints its collective counts and times at exit.",
     p_tp_stats, NULL},
    {"CLLM_TP_TIMEOUT_S", NULL, "60", "seconds, 0 = off",
     "Tensor parallel: a collective (or a follower's wait for rank 0's heartbeat) that waits "
     "longer ends the job with the hung rank named.",
     p_tp_timeout, NULL},
    {"CLLM_TP_STARTUP_TIMEOUT_S", NULL, "600", "seconds, 0 = off",
     "Tensor parallel: bound on start-up (MPI_Init, loading and prefaulting every rank's "
     "slices), the late rank named where rank 0 can tell.",
     p_tp_startup, NULL},
    {"CLLM_TP_TEST_STALL", NULL, "unset", "RANK:SECONDS",
     "Tests only (tests/dist/tp_hang.sh): rank RANK sleeps SECONDS once in its first startup "
     "check, to exercise the timeouts.",
     p_tp_stall, NULL},
    /* quantize */
    {"CLLM_QUANT_FAKE_AVAIL", NULL, "unset", "bytes > 0",
     "Tests only: quantize takes this as the free space of the output's file system instead of "
     "asking it (the disk-space refusal).",
     p_fake_avail, NULL},
    /* read where they act */
    {"CLLM_FAULT_ALLOC", NULL, "unset", "N",
     "Builds with -DCLLM_FAULT_INJECT=ON only: the Nth counted allocation fails (the fault walks "
     "of tests/*/fault_*).",
     NULL,
     "src/base/fault.c: read inside the allocator wrappers, on the first allocation, before "
     "main() has parsed anything"},
    {"CLLM_FAULT_TRACE", NULL, "unset", "1",
     "Fault-injection builds: log each injected failure with its call site.", NULL,
     "src/base/fault.c: the allocator wrappers (as CLLM_FAULT_ALLOC)"},
    {"CLLM_FAULT_REPORT", NULL, "unset", "1",
     "Fault-injection builds: print the number of counted allocations at exit (how far a walk "
     "must go).",
     NULL, "src/base/fault.c: the allocator wrappers (as CLLM_FAULT_ALLOC)"},
    {"TMPDIR", NULL, "/tmp", "a folder",
     "Where `cllm serve FILE.gguf` (and eval, verify, bench) makes the private folder it loads a "
     "GGUF "
     "through (config.json, tokenizer files, links; removed at exit).",
     NULL, "src/cli/cli_model.c: the POSIX temporary folder, read when a .gguf path is given"},
    {"OMPI_COMM_WORLD_SIZE", NULL, "set by mpirun", "a rank count",
     "Open MPI's job size: with PMI_SIZE, PMIX_SIZE and PMIX_RANK it tells cllm it runs under an "
     "MPI launcher.",
     NULL, LAUNCHER},
    {"PMI_SIZE", NULL, "set by the launcher", "a rank count", "MPICH / Slurm job size.", NULL,
     LAUNCHER},
    {"PMIX_SIZE", NULL, "set by the launcher", "a rank count", "PMIx job size.", NULL, LAUNCHER},
    {"PMIX_RANK", NULL, "set by the launcher", "a rank", "PMIx rank: its presence alone.", NULL,
     LAUNCHER},
    {"OMPI_COMM_WORLD_RANK", NULL, "set by mpirun", "a rank",
     "Names the rank in the message of an MPI_Init that fails.", NULL,
     "src/dist/dist_mpi.c: set by the MPI launcher; read when MPI_Init fails, before the rank is "
     "known any other way"},
};
#define N_ROWS (sizeof(rows) / sizeof(rows[0]))

static void defaults(cllm_opts *o) {
    memset(o, 0, sizeof(*o));
    o->dist = (cllm_dist_opts)CLLM_DIST_OPTS_DEFAULT;
    o->log_stats_interval = -1;
}

cllm_status cllm_opts_from_env(cllm_opts *o, cllm_error *err) {
    defaults(o);
    for (size_t i = 0; i < N_ROWS; i++) {
        if (!rows[i].parse) continue;
        const char *v = getenv(rows[i].env);
        if (!v) continue;
        cllm_status st = rows[i].parse(o, v, rows[i].env, err);
        if (st != CLLM_OK) return st;
    }
    return CLLM_OK;
}

cllm_status cllm_opts_set(cllm_opts *o, const char *env, const char *value, const char *flag,
                          cllm_error *err) {
    for (size_t i = 0; i < N_ROWS; i++)
        if (rows[i].parse && !strcmp(rows[i].env, env))
            return rows[i].parse(o, value, flag ? flag : env, err);
    return cllm_err_set(err, CLLM_EINVAL, "%s: not an option of the table", env);
}

int cllm_opts_print(FILE *f, const char *format) {
    if (!strcmp(format, "names")) {
        for (size_t i = 0; i < N_ROWS; i++) fprintf(f, "%s\n", rows[i].env);
        return 0;
    }
    if (strcmp(format, "md")) return -1;
    fprintf(f, "# Environment variables\n\n"
               "<!-- Generated by `cllm --list-env md` from the option table in "
               "src/cli/options.c; tests/cli/env_doc.sh fails when this page differs. Edit the "
               "table, then regenerate. -->\n\n"
               "cllm reads its settings from flags and from these variables once, at start-up, "
               "through one table (src/cli/options.c); a flag given wins over its variable. The "
               "libraries (model, engine, kernels) read no environment: library users pass "
               "`cllm_fwd_opts` to `cllm_model_load` (or `cllm_engine_opts.fwd`), and may fill "
               "it with `cllm_opts_from_env`. A bad value is refused at start-up naming the "
               "variable.\n\n"
               "| variable | flag | default | values | what it does |\n"
               "|---|---|---|---|---|\n");
    for (size_t i = 0; i < N_ROWS; i++) {
        const opt_row *r = &rows[i];
        fprintf(f, "| `%s` | %s%s%s | %s | %s | %s", r->env, r->flag ? "`" : "",
                r->flag ? r->flag : "—", r->flag ? "`" : "", r->def, r->values, r->doc);
        if (r->reader) fprintf(f, " Read in %s.", r->reader);
        fprintf(f, " |\n");
    }
    return 0;
}

static cllm_opts g_opts;
static bool g_loaded;

int cli_opts_load(void) {
    cllm_error err = {0};
    if (cllm_opts_from_env(&g_opts, &err) != CLLM_OK) {
        fprintf(stderr, "cllm: %s\n", err.msg);
        return 2;
    }
    g_loaded = true;
    if (g_opts.log) cllm_log_set_level_name(g_opts.log); /* an unknown name: ignored, as ever */
    if (g_opts.isa) cllm_cpu_set_isa(g_opts.isa);
    return 0;
}

const cllm_opts *cli_opts(void) {
    if (!g_loaded) defaults(&g_opts); /* a command run without main() (none today) */
    return &g_opts;
}
