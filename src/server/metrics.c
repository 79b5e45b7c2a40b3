/* Metrics registry and Prometheus text exposition with vLLM's metric names (so existing
 * dashboards and autoscalers work), plus cllm's own, and the periodic vLLM-like stats log line.
 *
 * Histograms and the token counters are observed from the engine's event callback (srv_req.c)
 * under m->mu, so vllm:generation_tokens_total moves with every engine step (not when a request
 * ends); gauges and engine counters are read from the engine's stats at scrape time. Numbers are
 * printed in their shortest exact form (le="0.005"). Process and host metrics: metrics_proc.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "server/srv_int.h"

/* Bucket bounds copied from vLLM v1/metrics/loggers.py so dashboards' quantiles line up. */
static const double ttft_b[] = {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
                                0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
                                20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
static const double itl_b[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                               0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double lat_b[] = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                               5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

static const double n_b[] = {1, 2, 5, 10, 20};

static int hist_init(srv_hist *h, const double *b, int n) {
    h->bounds = b;
    h->n_bounds = n;
    h->counts = calloc((size_t)n + 1, sizeof(uint64_t));
    return h->counts ? 0 : -1;
}

/* 1, 2, 5, 10, 20, 50, ... up to max_model_len (vLLM's build_1_2_5_buckets). */
static double *tok_buckets(int max_model_len, int *n_out) {
    int cap = 64, n = 0;
    double *b = malloc(sizeof(double) * (size_t)cap);
    if (!b) return NULL;
    if (max_model_len <= 0) max_model_len = 1 << 20;
    static const int mant[] = {1, 2, 5};
    for (double p = 1; n < cap - 3; p *= 10) {
        int i = 0;
        for (; i < 3 && mant[i] * p <= max_model_len; i++) b[n++] = mant[i] * p;
        if (i < 3) break;
    }
    *n_out = n;
    return b;
}

int srv_metrics_init(srv_metrics *m, int max_model_len) {
    memset(m, 0, sizeof(*m));
    pthread_mutex_init(&m->mu, NULL);
    int n = 0;
    m->tok_bounds = tok_buckets(max_model_len, &n);
    if (!m->tok_bounds) return -1;
    if (hist_init(&m->h[SRV_H_TTFT], ttft_b, (int)(sizeof(ttft_b) / sizeof(*ttft_b))) ||
        hist_init(&m->h[SRV_H_ITL], itl_b, (int)(sizeof(itl_b) / sizeof(*itl_b))) ||
        hist_init(&m->h[SRV_H_E2E], lat_b, (int)(sizeof(lat_b) / sizeof(*lat_b))) ||
        hist_init(&m->h[SRV_H_QUEUE], lat_b, (int)(sizeof(lat_b) / sizeof(*lat_b))) ||
        hist_init(&m->h[SRV_H_PROMPT], m->tok_bounds, n) ||
        hist_init(&m->h[SRV_H_GEN], m->tok_bounds, n) ||
        hist_init(&m->h[SRV_H_PREFILL], lat_b, (int)(sizeof(lat_b) / sizeof(*lat_b))) ||
        hist_init(&m->h[SRV_H_DECODE], lat_b, (int)(sizeof(lat_b) / sizeof(*lat_b))) ||
        hist_init(&m->h[SRV_H_INFERENCE], lat_b, (int)(sizeof(lat_b) / sizeof(*lat_b))) ||
        hist_init(&m->h[SRV_H_TPOT], itl_b, (int)(sizeof(itl_b) / sizeof(*itl_b))) ||
        hist_init(&m->h[SRV_H_PARAMS_N], n_b, (int)(sizeof(n_b) / sizeof(*n_b))) ||
        hist_init(&m->h[SRV_H_PARAMS_MAX], m->tok_bounds, n) ||
        hist_init(&m->h[SRV_H_KV_COMPUTED], m->tok_bounds, n))
        return -1;
    m->last_t = srv_now();
    return 0;
}

/* Re-buckets the token-count histograms once max_model_len is known (model loaded). Other
 * threads may be scraping or counting: done under m->mu. */
/* The histograms whose buckets follow max_model_len. */
static const int tok_hists[] = {SRV_H_PROMPT, SRV_H_GEN, SRV_H_PARAMS_MAX, SRV_H_KV_COMPUTED};
#define N_TOK_HISTS ((int)(sizeof(tok_hists) / sizeof(*tok_hists)))

void srv_metrics_set_max_len(srv_metrics *m, int max_model_len) {
    int n = 0;
    double *b = tok_buckets(max_model_len, &n);
    uint64_t *c[N_TOK_HISTS];
    bool ok = b != NULL;
    for (int i = 0; i < N_TOK_HISTS; i++) {
        c[i] = calloc((size_t)n + 1, sizeof(uint64_t));
        ok = ok && c[i];
    }
    if (!ok) {
        free(b);
        for (int i = 0; i < N_TOK_HISTS; i++) free(c[i]);
        return;
    }
    pthread_mutex_lock(&m->mu);
    free(m->tok_bounds);
    m->tok_bounds = b;
    for (int i = 0; i < N_TOK_HISTS; i++) {
        free(m->h[tok_hists[i]].counts);
        m->h[tok_hists[i]] = (srv_hist){b, n, c[i], 0, 0};
    }
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_free(srv_metrics *m) {
    for (int i = 0; i < SRV_H_COUNT; i++) free(m->h[i].counts);
    free(m->tok_bounds);
    pthread_mutex_destroy(&m->mu);
}

/* Caller holds m->mu. */
void srv_metrics_observe(srv_metrics *m, int which, double v) {
    srv_hist *h = &m->h[which];
    if (!h->counts || !isfinite(v)) return;
    if (v < 0) v = 0;
    int i = 0;
    while (i < h->n_bounds && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void srv_metrics_http(srv_metrics *m, unsigned status) {
    pthread_mutex_lock(&m->mu);
    if (status < 600) m->http[status]++;
    pthread_mutex_unlock(&m->mu);
}

static void esc_label(srv_buf *b, const char *v) {
    for (; *v; v++) {
        if (*v == '\\')
            srv_buf_adds(b, "\\\\");
        else if (*v == '"')
            srv_buf_adds(b, "\\\"");
        else if (*v == '\n')
            srv_buf_adds(b, "\\n");
        else
            srv_buf_add(b, v, 1);
    }
}

static void head(srv_buf *b, const char *name, const char *type, const char *help) {
    srv_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void srv_metrics_num(char *out, size_t cap, double v) {
    if (isnan(v)) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    /* a count as its digits: the shortest form below read 140 drafts as 1.4e+02 */
    if (v == trunc(v) && fabs(v) < 9007199254740992.0) { /* 2^53: every integer exact */
        snprintf(out, cap, "%.0f", v);
        return;
    }
    /* 0.005, not 0.0050000000000000001: the fewest digits that read back as the same value */
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, v);
        if (strtod(out, NULL) == v) return;
    }
}

static void sample(srv_buf *b, const char *name, const char *labels, const char *extra, double v) {
    char num[40];
    srv_metrics_num(num, sizeof(num), v);
    srv_buf_printf(b, "%s{%s%s%s} %s\n", name, labels, extra && *extra ? "," : "",
                   extra ? extra : "", num);
}

static void hist_out(srv_buf *b, const char *name, const char *help, const srv_hist *h,
                     const char *labels) {
    head(b, name, "histogram", help);
    uint64_t cum = 0;
    char nm[160];
    snprintf(nm, sizeof(nm), "%s_bucket", name);
    for (int i = 0; i <= h->n_bounds; i++) {
        cum += h->counts ? h->counts[i] : 0;
        char le[64];
        if (i < h->n_bounds) {
            char num[40];
            srv_metrics_num(num, sizeof(num), h->bounds[i]);
            snprintf(le, sizeof(le), "le=\"%s\"", num);
        } else
            snprintf(le, sizeof(le), "le=\"+Inf\"");
        sample(b, nm, labels, le, (double)cum);
    }
    snprintf(nm, sizeof(nm), "%s_sum", name);
    sample(b, nm, labels, NULL, h->sum);
    snprintf(nm, sizeof(nm), "%s_count", name);
    sample(b, nm, labels, NULL, (double)h->count);
}

static const char *const finish_label[5] = {"none", "stop", "length", "abort", "error"};
static const char *const rej_label[SRV_REJ_COUNT] = {"max_num_queued_reqs", "max_queued_tokens",
                                                     "engine_busy", "draining"};

char *srv_metrics_render(cllm_server *s) {
    cllm_engine_stats st;
    memset(&st, 0, sizeof(st));
    if (s->ops.stats) s->ops.stats(s->ops.ctx, &st);
    srv_buf lb = {0};
    srv_buf_adds(&lb, "model_name=\"");
    esc_label(&lb, s->model_name);
    srv_buf_adds(&lb, "\",engine=\"0\"");
    if (lb.oom) {
        srv_buf_free(&lb);
        return NULL;
    }
    const char *L = lb.p;
    srv_buf b = {0};
    srv_metrics *m = &s->m;

    head(&b, "vllm:num_requests_running", "gauge",
         "Number of requests in model execution batches.");
    sample(&b, "vllm:num_requests_running", L, NULL, st.running);
    head(&b, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
    sample(&b, "vllm:num_requests_waiting", L, NULL, st.waiting);
    head(&b, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.");
    sample(&b, "vllm:kv_cache_usage_perc", L, NULL,
           st.kv_blocks_total ? (double)st.kv_blocks_used / (double)st.kv_blocks_total : 0.0);
    head(&b, "vllm:prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.");
    sample(&b, "vllm:prefix_cache_queries_total", L, NULL, (double)st.prefix_queries_tokens);
    head(&b, "vllm:prefix_cache_hits_total", "counter",
         "Prefix cache hits, in terms of number of cached tokens.");
    sample(&b, "vllm:prefix_cache_hits_total", L, NULL, (double)st.prefix_hits_tokens);
    head(&b, "vllm:num_preemptions_total", "counter",
         "Cumulative number of preemption from the engine.");
    sample(&b, "vllm:num_preemptions_total", L, NULL, (double)st.preemptions);
    if (st.spec_k > 0) { /* vLLM exports these only with --speculative-config */
        head(&b, "vllm:spec_decode_num_drafts_total", "counter",
             "Number of spec decoding drafts (verify rows).");
        sample(&b, "vllm:spec_decode_num_drafts_total", L, NULL, (double)st.spec_drafts);
        head(&b, "vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.");
        sample(&b, "vllm:spec_decode_num_draft_tokens_total", L, NULL,
               (double)st.spec_draft_tokens);
        head(&b, "vllm:spec_decode_num_accepted_tokens_total", "counter",
             "Number of accepted tokens.");
        sample(&b, "vllm:spec_decode_num_accepted_tokens_total", L, NULL,
               (double)st.spec_accepted_tokens);
        head(&b, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
             "Accepted tokens per draft position.");
        for (int i = 0; i < st.spec_k && i < CLLM_SPEC_MAX_K; i++) {
            char pos[32];
            snprintf(pos, sizeof(pos), "position=\"%d\"", i);
            sample(&b, "vllm:spec_decode_num_accepted_tokens_per_pos_total", L, pos,
                   (double)st.spec_accepted_per_pos[i]);
        }
    }

    srv_buf cfg = {0};
    srv_buf_printf(&cfg,
                   "block_size=\"%d\",cache_dtype=\"auto\",enable_prefix_caching=\"%s\","
                   "num_gpu_blocks=\"%llu\",max_model_len=\"%d\"",
                   st.block_size, st.prefix_caching ? "True" : "False",
                   (unsigned long long)st.kv_blocks_total, st.max_model_len);
    head(&b, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig.");
    sample(&b, "vllm:cache_config_info", L, cfg.p ? cfg.p : "", 1);
    srv_buf_free(&cfg);

    pthread_mutex_lock(&m->mu);
    head(&b, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.");
    sample(&b, "vllm:prompt_tokens_total", L, NULL, (double)m->prompt_tokens);
    head(&b, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.");
    sample(&b, "vllm:generation_tokens_total", L, NULL, (double)m->generation_tokens);
    head(&b, "vllm:prompt_tokens_cached_total", "counter",
         "Number of cached prompt tokens (local prefix cache).");
    sample(&b, "vllm:prompt_tokens_cached_total", L, NULL, (double)m->cached_tokens);
    head(&b, "vllm:request_success_total", "counter", "Count of successfully processed requests.");
    for (int i = 1; i < 5; i++) {
        char fr[48];
        snprintf(fr, sizeof(fr), "finished_reason=\"%s\"", finish_label[i]);
        sample(&b, "vllm:request_success_total", L, fr, (double)m->success[i]);
    }
    uint64_t rej_total = 0;
    for (int i = 0; i < SRV_REJ_COUNT; i++) rej_total += m->rejections[i];
    head(&b, "vllm:admission_rejections_total", "counter",
         "Requests rejected by admission control.");
    sample(&b, "vllm:admission_rejections_total", L, NULL, (double)rej_total);
    /* tokens per engine step, from the engine's own counts (the server sees events, not steps) */
    static const double iter_b[CLLM_ITER_N_BOUNDS] = CLLM_ITER_BOUNDS;
    srv_hist ih = {iter_b, CLLM_ITER_N_BOUNDS, st.iter_tokens_counts, (double)st.iter_tokens_sum,
                   st.iter_steps};
    hist_out(&b, "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
             &ih, L);
    hist_out(&b, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
             &m->h[SRV_H_TTFT], L);
    hist_out(&b, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
             &m->h[SRV_H_ITL], L);
    hist_out(&b, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
             &m->h[SRV_H_E2E], L);
    hist_out(&b, "vllm:request_queue_time_seconds",
             "Histogram of time spent in WAITING phase for request.", &m->h[SRV_H_QUEUE], L);
    hist_out(&b, "vllm:request_inference_time_seconds",
             "Histogram of time spent in RUNNING phase for request.", &m->h[SRV_H_INFERENCE], L);
    hist_out(&b, "vllm:request_prefill_time_seconds",
             "Histogram of time spent in PREFILL phase for request.", &m->h[SRV_H_PREFILL], L);
    hist_out(&b, "vllm:request_decode_time_seconds",
             "Histogram of time spent in DECODE phase for request.", &m->h[SRV_H_DECODE], L);
    hist_out(&b, "vllm:request_time_per_output_token_seconds",
             "Histogram of time_per_output_token_seconds per request.", &m->h[SRV_H_TPOT], L);
    hist_out(&b, "vllm:request_prompt_tokens", "Number of prefill tokens processed.",
             &m->h[SRV_H_PROMPT], L);
    hist_out(&b, "vllm:request_generation_tokens", "Number of generation tokens processed.",
             &m->h[SRV_H_GEN], L);
    hist_out(&b, "vllm:request_prefill_kv_computed_tokens",
             "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
             &m->h[SRV_H_KV_COMPUTED], L);
    hist_out(&b, "vllm:request_params_n", "Histogram of the n request parameter.",
             &m->h[SRV_H_PARAMS_N], L);
    hist_out(&b, "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
             &m->h[SRV_H_PARAMS_MAX], L);

    head(&b, "cllm_admission_rejections_total", "counter",
         "Requests rejected with 429/503, by reason.");
    for (int i = 0; i < SRV_REJ_COUNT; i++) {
        char rl[64];
        snprintf(rl, sizeof(rl), "reason=\"%s\"", rej_label[i]);
        sample(&b, "cllm_admission_rejections_total", L, rl, (double)m->rejections[i]);
    }
    head(&b, "cllm_http_responses_total", "counter", "HTTP responses sent, by status code.");
    for (int c = 100; c < 600; c++) {
        if (!m->http[c]) continue;
        char cl[32];
        snprintf(cl, sizeof(cl), "code=\"%d\"", c);
        sample(&b, "cllm_http_responses_total", L, cl, (double)m->http[c]);
    }
    head(&b, "cllm_requests_cancelled_on_disconnect_total", "counter",
         "Requests aborted because the client went away.");
    sample(&b, "cllm_requests_cancelled_on_disconnect_total", L, NULL,
           (double)m->requests_cancelled_disconnect);
    head(&b, "cllm_http_deadline_closes_total", "counter",
         "Connections cut by a deadline: request head (--client-header-timeout), body "
         "(--client-body-timeout), or a response the client stopped reading (--send-timeout).");
    static const char *const dl_label[SRV_DL_COUNT] = {"header_timeout", "body_timeout",
                                                       "send_timeout"};
    for (int i = 0; i < SRV_DL_COUNT; i++) {
        char rl[48];
        snprintf(rl, sizeof(rl), "reason=\"%s\"", dl_label[i]);
        sample(&b, "cllm_http_deadline_closes_total", L, rl, (double)m->deadline_closes[i]);
    }
    pthread_mutex_unlock(&m->mu);

    head(&b, "cllm_state_slots_used", "gauge", "Gated DeltaNet recurrent-state slots in use.");
    sample(&b, "cllm_state_slots_used", L, NULL, st.state_slots_used);
    head(&b, "cllm_state_slots_capacity", "gauge", "Gated DeltaNet recurrent-state slots.");
    sample(&b, "cllm_state_slots_capacity", L, NULL, st.state_slots_total);
    head(&b, "cllm_kv_blocks_used", "gauge", "Paged KV blocks in use.");
    sample(&b, "cllm_kv_blocks_used", L, NULL, (double)st.kv_blocks_used);
    head(&b, "cllm_kv_blocks_capacity", "gauge", "Paged KV blocks.");
    sample(&b, "cllm_kv_blocks_capacity", L, NULL, (double)st.kv_blocks_total);
    head(&b, "cllm_prefill_tokens_saved_total", "counter",
         "Prefill tokens skipped thanks to prefix caching.");
    sample(&b, "cllm_prefill_tokens_saved_total", L, NULL, (double)st.prefill_tokens_saved);
    if (s->vision.present) { /* image input (engine/sched_img.c) */
        head(&b, "cllm_images_encoded_total", "counter", "Images run through the vision tower.");
        sample(&b, "cllm_images_encoded_total", L, NULL, (double)st.images_encoded);
        head(&b, "cllm_image_tokens_total", "counter", "Text tokens the encoded images became.");
        sample(&b, "cllm_image_tokens_total", L, NULL, (double)st.image_tokens);
        head(&b, "cllm_image_encode_seconds_total", "counter",
             "Engine-thread time spent in the vision tower.");
        sample(&b, "cllm_image_encode_seconds_total", L, NULL, st.image_encode_s);
    }
    head(&b, "cllm_prefill_tokens_computed_total", "counter",
         "Prompt tokens run through the model, advanced per prefill chunk (engine step).");
    sample(&b, "cllm_prefill_tokens_computed_total", L, NULL, (double)st.prompt_tokens);
    pthread_mutex_lock(&s->mu);
    int inflight = s->in_flight;
    pthread_mutex_unlock(&s->mu);
    head(&b, "cllm_requests_in_flight", "gauge", "Generation requests submitted and not finished.");
    sample(&b, "cllm_requests_in_flight", L, NULL, inflight);
    head(&b, "cllm_server_draining", "gauge", "1 while the server drains for shutdown.");
    sample(&b, "cllm_server_draining", L, NULL, __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE));
    srv_metrics_process(&b);
    srv_buf_free(&lb);
    if (b.oom) {
        srv_buf_free(&b);
        return NULL;
    }
    return b.p;
}

/* vLLM's loggers.py line: throughput since the last line, queue sizes, KV usage, prefix hits. */
void srv_metrics_log_line(cllm_server *s) {
    cllm_engine_stats st;
    memset(&st, 0, sizeof(st));
    if (s->ops.stats) s->ops.stats(s->ops.ctx, &st);
    srv_metrics *m = &s->m;
    pthread_mutex_lock(&m->mu);
    double now = srv_now(), dt = now - m->last_t;
    uint64_t dp = m->prompt_tokens - m->last_prompt, dg = m->generation_tokens - m->last_gen;
    uint64_t dq = st.prefix_queries_tokens - m->last_pq, dh = st.prefix_hits_tokens - m->last_ph;
    m->last_prompt = m->prompt_tokens;
    m->last_gen = m->generation_tokens;
    m->last_pq = st.prefix_queries_tokens;
    m->last_ph = st.prefix_hits_tokens;
    m->last_t = now;
    pthread_mutex_unlock(&m->mu);
    if (dt <= 0) dt = 1e-9;
    /* like vLLM: stay quiet while idle */
    if (!dp && !dg && !st.running && !st.waiting) return;
    LOG_INFO("Engine 000: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f "
             "tokens/s, Running: %d reqs, Waiting: %d reqs, KV cache usage: %.1f%%, Prefix cache "
             "hit rate: %.1f%%, State slots: %d/%d",
             (double)dp / dt, (double)dg / dt, st.running, st.waiting,
             st.kv_blocks_total ? 100.0 * (double)st.kv_blocks_used / (double)st.kv_blocks_total
                                : 0.0,
             dq ? 100.0 * (double)dh / (double)dq : 0.0, st.state_slots_used, st.state_slots_total);
}
