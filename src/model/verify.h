/* Model directory verification (`cllm verify`): files, index, tensors vs the config's plan,
 * NaN/Inf scan, parameter and byte summary. Used by the CLI and by tests. */
#ifndef CLLM_MODEL_VERIFY_H
#define CLLM_MODEL_VERIFY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"
#include "model/tensor_plan.h"

typedef struct cllm_verify_opts {
    bool config_only; /* only the config: no weight files needed */
    bool full_scan;   /* scan every value for NaN/Inf (default: a sample per tensor) */
    bool json;        /* summary as one JSON object instead of text */
} cllm_verify_opts;

typedef struct cllm_verify_result {
    size_t n_problems;
    size_t n_tensors_expected, n_tensors_found;
    uint64_t params_total, params_active; /* text model + MTP + vision as present */
    uint64_t params_by_group[CLLM_TG_COUNT];
    uint64_t active_by_group[CLLM_TG_COUNT];
    uint64_t values_scanned, nonfinite;
} cllm_verify_result;

/* Prints the report to out (problems as lines starting "problem: "). Returns CLLM_OK when the
 * verification could run (even if it found problems: see res->n_problems); an error status when
 * the directory or config cannot be read at all. */
cllm_status cllm_verify(const char *dir, const cllm_verify_opts *opts, FILE *out,
                        cllm_verify_result *res, cllm_error *err);

#endif
