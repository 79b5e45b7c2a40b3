/* `cllm doctor`: the daily health inspection of a running server as one command.
 *
 * Checks, in order: server reachable + /health; model loaded (/v1/models); from /metrics scraped
 * over a short window: KV cache usage (vllm:kv_cache_usage_perc, else vllm:gpu_cache_usage_perc)
 * and recurrent-state slot usage (cllm:state_slots_usage_perc, else cllm_state_slots_used /
 * cllm_state_slots_capacity as `cllm serve` exports them; fractions 0..1 as in
 * vLLM), the request error rate and preemptions between the first and last scrape; errors in
 * the tail of a log file; host memory headroom (/proc/meminfo). Each check is OK, WARN, CRIT or
 * SKIP (no data); the report's level is the worst one.
 *
 * Usage thresholds: WARN above warn_pct; CRIT only when above crit_pct for sustain_s seconds
 * (doctor keeps scraping every interval_s while a gauge stays above crit_pct, up to sustain_s);
 * a spike above crit_pct that falls back is WARN.
 * Error counters read: cllm:request_errors_total (all), http_requests_total{status=5..},
 * cllm_http_responses_total{code=5..},
 * vllm:request_success_total{finished_reason="error"}; totals: cllm:requests_total, else
 * cllm_http_responses_total, else http_requests_total, else vllm:request_success_total.
 * Preemptions: vllm:num_preemptions_total (or cllm:preemptions_total). */
#ifndef CLLM_DOCTOR_DOCTOR_H
#define CLLM_DOCTOR_DOCTOR_H

#include <stdbool.h>
#include <stdio.h>

#include "base/status.h"

typedef enum dr_level { DR_OK = 0, DR_WARN = 1, DR_CRIT = 2, DR_SKIP = 3 } dr_level;

const char *dr_level_name(dr_level l); /* "ok", "warn", "critical", "skip" */

typedef struct dr_opts {
    const char *url;
    const char *api_key;
    const char *log_path;              /* NULL: no log check */
    const char *meminfo_path;          /* NULL: /proc/meminfo */
    double window_s;                   /* between the first and last /metrics scrape (default 2) */
    double sustain_s;                  /* usage above crit_pct this long is critical (default 30) */
    double interval_s;                 /* scrape period while waiting (default 1) */
    double warn_pct, crit_pct;         /* usage thresholds (92, 95) */
    double err_warn_pct, err_crit_pct; /* error rate over the window (1, 5) */
    double mem_warn_pct, mem_crit_pct; /* MemAvailable below this % of MemTotal (10, 5) */
    double timeout_s;                  /* per HTTP call (5) */
    long log_tail_bytes;               /* how much of the log's end to read (1 MiB) */
} dr_opts;

void dr_opts_default(dr_opts *o);

typedef struct dr_check {
    const char *name; /* "server", "health", "model", "kv_cache", "state_slots", "errors",
                         "preemptions", "log", "memory" */
    dr_level level;
    double value; /* the number the level came from (percent, rate, count); NAN if none */
    char detail[320];
} dr_check;

#define DR_MAX_CHECKS 12

typedef struct dr_report {
    dr_check checks[DR_MAX_CHECKS];
    int n;
    dr_level overall; /* worst of OK/WARN/CRIT */
    double elapsed_s;
} dr_report;

/* Runs every check; never fails (problems are checks). */
void dr_run(const dr_opts *o, dr_report *r);

/* Pure helpers, exposed for tests. */
/* Scans a log tail: counts error lines and critical ones (fatal/panic/OOM/segfault), copies
 * the last matching line. */
void dr_scan_log(const char *text, size_t n, long *errors, long *critical, char *last, size_t cap);
/* Parses /proc/meminfo text; false when MemTotal/MemAvailable are missing. kB. */
bool dr_parse_meminfo(const char *text, double *total_kb, double *avail_kb);

void dr_print_text(FILE *f, const dr_opts *o, const dr_report *r);
void dr_print_json(FILE *f, const dr_opts *o, const dr_report *r);

#endif
