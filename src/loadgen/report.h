/* bench-serve outputs beyond the printed block: --save-result JSON (vLLM's field names plus
 * per-request records) and --plot PNG (gnuplot, latency and throughput over time). */
#ifndef CLLM_LOADGEN_REPORT_H
#define CLLM_LOADGEN_REPORT_H

#include "base/status.h"
#include "loadgen/client.h"
#include "loadgen/metrics.h"

typedef struct lg_run_info {
    const char *backend; /* "openai" | "openai-chat" */
    const char *base_url;
    const char *dataset; /* "random" | path */
    double request_rate; /* inf when unset */
    double burstiness;
    long max_concurrency, users, num_prompts;
    double think_lo, think_hi, duration_s;
} lg_run_info;

cllm_status lg_save_result(const char *path, const lg_run_info *info, const lg_result *res,
                           const lg_summary *s, cllm_error *err);

/* Writes PATH.dat beside the PNG and runs gnuplot on it. */
cllm_status lg_plot(const char *png, const lg_result *res, cllm_error *err);

#endif
