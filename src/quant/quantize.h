/* `cllm quantize IN OUT`: streaming conversion of a 16/32-bit checkpoint into the GPTQ layout
 * (model/qformat.h). Reads the input through its mmap one tensor at a time, writes shards into
 * OUT.tmp-PID and renames to OUT at the end (an interrupted run leaves no OUT, and the next run to
 * OUT removes the OUT.tmp-PID it left: base/tmp_sweep.h), refuses to start when the file system
 * lacks the space, prints the plan first and a summary after. */
#ifndef CLLM_QUANT_QUANTIZE_H
#define CLLM_QUANT_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "model/forward.h"

typedef struct cllm_quant_opts {
    const char *in_dir, *out_dir;
    const char *scheme;      /* "w4a16" | "w8a16" | "w4a8" | "w4a4" */
    int group;               /* group size along K (default 128) */
    bool asym;               /* per-group zero points (config "sym": false) */
    bool scale_bf16;         /* scales stored BF16 instead of F16 */
    int lm_head_bits;        /* 8, 4, or 16 (kept) */
    const char *keep;        /* extra comma-separated globs kept 16-bit (warned when unmatched) */
    const char *preset_keep; /* globs of a preset (--qwen-gptq-int4), never warned about */
    bool no_default_keep;    /* drop the default keep list (embeddings are always kept) */
    const char *method;      /* "rtn" | "gptq" */
    const char *calib; /* GPTQ calibration text/token file (tokens: ids separated by , or space) */
    int calib_samples, calib_seq_len;
    int min_expert_tokens; /* GPTQ: experts with fewer routed calibration tokens use RTN */
    double damp;           /* GPTQ dampening, fraction of mean diag(H) */
    uint64_t gptq_mem;     /* GPTQ: Hessian bytes held at once (0 = a quarter of RAM); decides how
                              many layers share one calibration pass */
    uint64_t shard_bytes;
    int threads;
    bool progress; /* progress (writing, GPTQ calibration) on stderr; false = silent (-q) */
    bool tty;      /* stderr is a terminal: a \r bar; otherwise a line per 10% (base/progress.h) */
    bool dry_run;
    FILE *out; /* plan and summary */
    uint64_t
        fake_avail;    /* tests (CLLM_QUANT_FAKE_AVAIL): free bytes assumed; 0: the file system's */
    cllm_fwd_opts fwd; /* how GPTQ's calibration forward runs (zeroed: defaults) */
} cllm_quant_opts;

cllm_status cllm_quantize(const cllm_quant_opts *o, cllm_error *err);

#endif
