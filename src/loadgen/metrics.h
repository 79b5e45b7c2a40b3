/* bench-serve metrics: per-request records and the vLLM `bench serve` arithmetic over them.
 *
 * The client (loadgen/client.c) fills one lg_req per request with raw timestamps taken at chunk
 * arrival; lg_metrics_compute turns a set of them into the summary that `cllm bench-serve` prints
 * with vLLM's labels. Pure functions, no I/O except lg_metrics_print: tests feed synthetic
 * timestamps and check the numbers exactly.
 *
 * Definitions (vllm/benchmarks/serve.py calculate_metrics):
 *   TTFT = first chunk carrying generated text (content, reasoning or a tool call; any `choices`
 *          chunk when none does) - send time
 *   E2EL = last chunk carrying `choices` - send time
 *   TPOT = (E2EL - TTFT) / (output_tokens - 1), only for requests with output_tokens > 1
 *          (0 for goodput when output_tokens <= 1)
 *   ITL  = every gap between consecutive `choices` chunks from that first text chunk on, pooled
 *          over requests (per chunk)
 *   throughputs = completed / duration, sum(out) / duration, (sum(in) + sum(out)) / duration
 *   goodput = requests with TTFT, TPOT, E2EL all <= their SLOs, / duration
 *   percentiles: numpy's default (linear interpolation); median = P50; std = population. */
#ifndef CLLM_LOADGEN_METRICS_H
#define CLLM_LOADGEN_METRICS_H

#include <stdbool.h>
#include <stdio.h>

typedef enum lg_err {
    LG_ERR_NONE = 0,
    LG_ERR_CONNECT,  /* could not connect / connection refused / resolve */
    LG_ERR_TIMEOUT,  /* per-request timeout hit */
    LG_ERR_HTTP_4XX, /* server answered 4xx */
    LG_ERR_HTTP_5XX, /* server answered 5xx */
    LG_ERR_STREAM,   /* malformed SSE/JSON, connection cut mid-stream, no [DONE] */
    LG_ERR_SERVER,   /* server sent an `error` object in the stream */
    LG_ERR_NO_CHUNK, /* 200 but never a chunk with `choices` (vLLM marks it failed) */
    LG_ERR_OTHER,
    LG_ERR_COUNT
} lg_err;

const char *lg_err_name(lg_err e); /* "connect", "timeout", "http_4xx", ... */

/* One request as measured. Times are seconds on one monotonic clock (the benchmark's t0 = 0). */
typedef struct lg_req {
    double t_sent;    /* request handed to the transport */
    double *t_chunks; /* [n_chunks] arrival time of each SSE event with a non-empty `choices` */
    int n_chunks, cap_chunks;
    int n_text_chunks;    /* chunks whose text/content was non-empty (fallback token count) */
    int first_text_chunk; /* index in t_chunks of the first chunk carrying content, reasoning or
                             a tool call (-1: none yet); TTFT and ITL start there, so a role
                             chunk sent before prefill does not read as the first token (no
                             such chunk: the last one, with finish_reason) */
    int usage_prompt;     /* server usage.prompt_tokens, -1 when not sent */
    int usage_completion; /* server usage.completion_tokens, -1 when not sent */
    int est_prompt;       /* dataset's own estimate of the prompt length in tokens */
    int max_tokens;       /* requested output length */
    lg_err err;
    int http_status; /* 0 when no response */
    int conv, turn;  /* conversation id and turn index (0-based) */
} lg_req;

/* Derived per-request values, seconds. Valid when err == LG_ERR_NONE. */
double lg_req_ttft(const lg_req *r);
double lg_req_e2el(const lg_req *r);
int lg_req_out_tokens(const lg_req *r); /* usage if sent, else chunks with text; 0 on failure */
int lg_req_in_tokens(const lg_req *r);  /* usage if sent, else the dataset estimate */
/* Appends an arrival; false when out of memory. */
bool lg_req_add_chunk(lg_req *r, double t);
void lg_req_free(lg_req *r);

typedef struct lg_stat {
    double mean, median, std, p95, p99, min, max; /* milliseconds */
    long n;
} lg_stat;

typedef struct lg_slo {
    double ttft_ms, tpot_ms, e2el_ms; /* <= 0: not part of the goodput definition */
} lg_slo;

typedef struct lg_summary {
    long completed, failed;
    long errors[LG_ERR_COUNT];
    double duration_s;
    long total_input, total_output;
    double request_throughput, output_throughput, total_token_throughput;
    bool has_goodput;
    long good_completed;
    double request_goodput;
    double peak_output_throughput; /* max chunks arriving in one whole second of the run */
    long peak_concurrency;         /* most requests between send and last chunk at once */
    lg_stat ttft, tpot, itl, e2el;
} lg_summary;

/* numpy.percentile(x, p) with linear interpolation over sorted[0..n); 0 when n == 0. */
double lg_percentile_sorted(const double *sorted, long n, double p);
/* numpy.median of x[0..n) (sorts x in place); 0 when n == 0. */
double lg_median(double *x, long n);

/* Fills *s from reqs[0..n). duration_s is the benchmark's wall time. slo may be NULL.
 * Returns false only on allocation failure. */
bool lg_metrics_compute(const lg_req *reqs, long n, double duration_s, const lg_slo *slo,
                        lg_summary *s);

typedef struct lg_print_info {
    long max_concurrency; /* 0: not set */
    double request_rate;  /* <= 0 or inf: not printed */
    long users;           /* closed-loop users, 0: not used */
    const char *think;    /* "2-5" or NULL */
} lg_print_info;

/* Prints the result block with vLLM's labels (`%-40s %-10.2f`). */
void lg_metrics_print(FILE *f, const lg_summary *s, const lg_print_info *info);

#endif
