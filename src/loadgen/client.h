/* bench-serve runner: drives an OpenAI-compatible server with streaming requests from one
 * thread over libcurl multi, timestamps every SSE chunk on arrival and returns the per-request
 * records (metrics.h) plus the client's own overhead.
 *
 * Load shapes (vLLM `bench serve` semantics where vLLM has them):
 *   open loop   arrivals at --request-rate R with Gamma(burstiness, 1/(R*burstiness)) gaps
 *               (burstiness 1 = Poisson; R <= 0 or inf = everything at t0); with --num-prompts N
 *               the gaps are rescaled so the last arrival lands at N/R as vLLM does.
 *               --max-concurrency caps requests in flight (arrivals queue, FIFO).
 *   closed loop --users N: each user sends, waits for the whole response, thinks a uniform
 *               [think_lo, think_hi] seconds, sends the next (the locust scenario of the seed).
 * Multi-turn conversations: a follow-up turn is sent after the previous one completes (plus the
 * think time), with the earlier questions and the server's answers in its prompt/messages.
 * The run ends after num_prompts requests were sent, or when duration_s has passed (no new
 * requests after that; requests in flight finish), whichever comes first. */
#ifndef CLLM_LOADGEN_CLIENT_H
#define CLLM_LOADGEN_CLIENT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "loadgen/dataset.h"
#include "loadgen/metrics.h"

typedef struct lg_config {
    const char *base_url;      /* "http://127.0.0.1:8000" */
    bool chat;                 /* /v1/chat/completions instead of /v1/completions */
    const char *model;         /* "model" field; NULL = first id from /v1/models */
    const char *api_key;       /* NULL: no Authorization header */
    double request_rate;       /* req/s; <= 0 or inf: all at t0 */
    double burstiness;         /* gamma shape, 1 = Poisson */
    long max_concurrency;      /* 0: unlimited */
    long users;                /* > 0: closed loop */
    double think_lo, think_hi; /* seconds */
    double ramp_up_s;          /* closed loop: users start evenly over this many seconds */
    double duration_s;         /* 0: no time limit */
    long num_prompts;          /* 0: no count limit (then duration_s must be set) */
    long num_warmups;          /* requests sent and discarded before t0 */
    double timeout_s;          /* per request */
    bool ignore_eos;           /* send "ignore_eos": true (vLLM extension) */
    double temperature;        /* < 0: not sent */
    bool include_usage;        /* stream_options.include_usage */
    uint64_t seed;
    const lg_dataset *ds;
    bool progress; /* one status line per second on stderr */
} lg_config;

typedef struct lg_overhead {
    double cpu_s;       /* user+sys CPU of this process during the measured run */
    double cb_s;        /* time inside the chunk callbacks (SSE + JSON parse, timestamps) */
    double lag_mean_ms; /* send time minus max(scheduled time, time a capped slot freed) */
    double lag_max_ms;
    long lag_n;
    long chunks;        /* SSE events handled */
    long peak_inflight; /* most requests in flight at once (transport view) */
} lg_overhead;

typedef struct lg_result {
    lg_req *reqs; /* [n], owned; in send order */
    long n;
    double duration_s; /* t0 to the last response */
    char model[256];   /* model name used */
    lg_overhead ov;
} lg_result;

cllm_status lg_bench_run(const lg_config *c, lg_result *out, cllm_error *err);
void lg_result_free(lg_result *r);

/* Prints the client-overhead block (CPU, callback time, scheduling lag). */
void lg_overhead_print(FILE *f, const lg_result *r);

#endif
