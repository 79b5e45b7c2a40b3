/* Prometheus text exposition (format 0.0.4) reader for `cllm doctor`: parses a /metrics body into
 * samples and answers "sum / max of metric NAME over label sets (optionally with a label)".
 * Comments (# HELP / # TYPE) are skipped; timestamps ignored; malformed lines are skipped and
 * counted so one bad line does not hide the rest. */
#ifndef CLLM_DOCTOR_PROM_H
#define CLLM_DOCTOR_PROM_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

typedef struct prom_sample {
    char *name;   /* "vllm:kv_cache_usage_perc" */
    char *labels; /* "model_name=\"x\",engine=\"0\"" without braces, "" when none */
    double value;
} prom_sample;

typedef struct prom_set {
    prom_sample *s; /* [n], owned */
    size_t n, cap;
    size_t bad_lines;
} prom_set;

cllm_status prom_parse(const char *text, prom_set *out, cllm_error *err);
void prom_free(prom_set *p);

/* Value of label `key` in a sample's label string into buf; false when absent. */
bool prom_label(const prom_sample *s, const char *key, char *buf, size_t cap);

/* Sum / max of NAME over all samples, only those whose label `key` starts with `prefix` when
 * key != NULL. False when no sample matched (the metric is not exported). */
bool prom_sum(const prom_set *p, const char *name, const char *key, const char *prefix,
              double *out);
bool prom_max(const prom_set *p, const char *name, double *out);

#endif
