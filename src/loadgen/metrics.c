/* vLLM `bench serve` metric arithmetic over measured requests; see metrics.h for definitions. */
#include "loadgen/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const err_names[LG_ERR_COUNT] = {
    "none",   "connect",      "timeout",  "http_4xx", "http_5xx",
    "stream", "server_error", "no_chunk", "other",
};

const char *lg_err_name(lg_err e) {
    return (unsigned)e < LG_ERR_COUNT ? err_names[e] : "?";
}

/* Where generation starts in t_chunks: the first chunk with text; for an answer without any
 * (the first token was EOS) the last chunk, the one with finish_reason, sent when that token was.
 * Falling back to the first chunk timed a server's early role chunk as the first token: chat
 * turns with an empty answer then read as a TTFT of ~0.5 ms (the multi-turn soak's p50). */
static int first_chunk(const lg_req *r) {
    if (r->first_text_chunk >= 0 && r->first_text_chunk < r->n_chunks) return r->first_text_chunk;
    return r->n_chunks > 0 ? r->n_chunks - 1 : 0;
}

double lg_req_ttft(const lg_req *r) {
    return r->n_chunks ? r->t_chunks[first_chunk(r)] - r->t_sent : 0.0;
}

double lg_req_e2el(const lg_req *r) {
    return r->n_chunks ? r->t_chunks[r->n_chunks - 1] - r->t_sent : 0.0;
}

int lg_req_out_tokens(const lg_req *r) {
    if (r->err != LG_ERR_NONE) return 0;
    /* vLLM: `output_len = output.output_tokens; if not output_len: re-tokenize the text` */
    if (r->usage_completion > 0) return r->usage_completion;
    return r->n_text_chunks;
}

int lg_req_in_tokens(const lg_req *r) {
    return r->usage_prompt >= 0 ? r->usage_prompt : r->est_prompt;
}

bool lg_req_add_chunk(lg_req *r, double t) {
    if (r->n_chunks == r->cap_chunks) {
        int cap = r->cap_chunks ? r->cap_chunks * 2 : 64;
        double *p = realloc(r->t_chunks, (size_t)cap * sizeof(double));
        if (!p) return false;
        r->t_chunks = p;
        r->cap_chunks = cap;
    }
    r->t_chunks[r->n_chunks++] = t;
    return true;
}

void lg_req_free(lg_req *r) {
    free(r->t_chunks);
    r->t_chunks = NULL;
    r->n_chunks = r->cap_chunks = 0;
}

double lg_percentile_sorted(const double *x, long n, double p) {
    if (n <= 0) return 0.0;
    double pos = (double)(n - 1) * p / 100.0;
    long lo = (long)floor(pos);
    if (lo >= n - 1) return x[n - 1];
    if (lo < 0) return x[0];
    double frac = pos - (double)lo;
    return x[lo] + (x[lo + 1] - x[lo]) * frac;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double lg_median(double *x, long n) {
    if (n > 1) qsort(x, (size_t)n, sizeof(double), cmp_double);
    return lg_percentile_sorted(x, n, 50);
}

/* Statistics of x[0..n) in seconds, reported in ms. Sorts x in place. */
static void stat_of(double *x, long n, lg_stat *st) {
    memset(st, 0, sizeof(*st));
    st->n = n;
    if (n == 0) return;
    double sum = 0;
    for (long i = 0; i < n; i++) sum += x[i];
    double mean = sum / (double)n, var = 0;
    for (long i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    qsort(x, (size_t)n, sizeof(double), cmp_double);
    st->mean = mean * 1000.0;
    st->std = sqrt(var / (double)n) * 1000.0;
    st->median = lg_percentile_sorted(x, n, 50) * 1000.0;
    st->p95 = lg_percentile_sorted(x, n, 95) * 1000.0;
    st->p99 = lg_percentile_sorted(x, n, 99) * 1000.0;
    st->min = x[0] * 1000.0;
    st->max = x[n - 1] * 1000.0;
}

bool lg_metrics_compute(const lg_req *reqs, long n, double duration_s, const lg_slo *slo,
                        lg_summary *s) {
    memset(s, 0, sizeof(*s));
    s->duration_s = duration_s;
    long n_itl = 0;
    for (long i = 0; i < n; i++)
        if (reqs[i].err == LG_ERR_NONE && reqs[i].n_chunks > 1)
            n_itl += reqs[i].n_chunks - 1 - first_chunk(&reqs[i]);
    double *ttft = malloc(sizeof(double) * (size_t)(n + 1));
    double *tpot = malloc(sizeof(double) * (size_t)(n + 1));
    double *e2el = malloc(sizeof(double) * (size_t)(n + 1));
    double *itl = malloc(sizeof(double) * (size_t)(n_itl + 1));
    if (!ttft || !tpot || !e2el || !itl) {
        free(ttft), free(tpot), free(e2el), free(itl);
        return false;
    }
    long nt = 0, np = 0, ni = 0;
    double t_min = INFINITY, t_max = -INFINITY;
    for (long i = 0; i < n; i++) {
        const lg_req *r = &reqs[i];
        if (r->err != LG_ERR_NONE) {
            s->failed++;
            s->errors[r->err]++;
            continue;
        }
        s->completed++;
        int out = lg_req_out_tokens(r);
        s->total_output += out;
        s->total_input += lg_req_in_tokens(r);
        double t1 = lg_req_ttft(r), el = lg_req_e2el(r), tp = 0;
        if (out > 1) {
            tp = (el - t1) / (double)(out - 1);
            tpot[np++] = tp;
        }
        ttft[nt++] = t1;
        e2el[nt - 1] = el;
        for (int k = first_chunk(r) + 1; k < r->n_chunks; k++)
            itl[ni++] = r->t_chunks[k] - r->t_chunks[k - 1];
        if (slo && (slo->ttft_ms > 0 || slo->tpot_ms > 0 || slo->e2el_ms > 0)) {
            bool good = (slo->ttft_ms <= 0 || t1 <= slo->ttft_ms / 1000.0) &&
                        (slo->tpot_ms <= 0 || tp <= slo->tpot_ms / 1000.0) &&
                        (slo->e2el_ms <= 0 || el <= slo->e2el_ms / 1000.0);
            s->good_completed += good;
        }
        if (r->t_sent < t_min) t_min = r->t_sent;
        if (r->t_sent + el > t_max) t_max = r->t_sent + el;
    }
    s->has_goodput = slo && (slo->ttft_ms > 0 || slo->tpot_ms > 0 || slo->e2el_ms > 0);
    if (duration_s > 0) {
        s->request_throughput = (double)s->completed / duration_s;
        s->output_throughput = (double)s->total_output / duration_s;
        s->total_token_throughput = (double)(s->total_input + s->total_output) / duration_s;
        s->request_goodput = (double)s->good_completed / duration_s;
    }
    /* Peak output throughput and concurrency in whole-second buckets, as vLLM computes them:
     * one token per chunk at its arrival; a request counts in every second it touches. */
    if (s->completed) {
        long nb = (long)ceil(t_max - t_min) + 1;
        double *tok = calloc((size_t)nb, sizeof(double));
        long *conc = calloc((size_t)nb, sizeof(long));
        if (!tok || !conc) {
            free(tok), free(conc), free(ttft), free(tpot), free(e2el), free(itl);
            return false;
        }
        for (long i = 0; i < n; i++) {
            const lg_req *r = &reqs[i];
            if (r->err != LG_ERR_NONE) continue;
            for (int k = 0; k < r->n_chunks; k++) {
                long b = (long)(r->t_chunks[k] - t_min);
                if (b >= 0 && b < nb) tok[b] += 1;
            }
            long b0 = (long)(r->t_sent - t_min), b1 = (long)(r->t_sent + lg_req_e2el(r) - t_min);
            for (long b = b0; b <= b1 && b < nb; b++) conc[b]++;
        }
        for (long b = 0; b < nb; b++) {
            if (tok[b] > s->peak_output_throughput) s->peak_output_throughput = tok[b];
            if (conc[b] > s->peak_concurrency) s->peak_concurrency = conc[b];
        }
        free(tok), free(conc);
    }
    stat_of(ttft, nt, &s->ttft);
    stat_of(tpot, np, &s->tpot);
    stat_of(itl, ni, &s->itl);
    stat_of(e2el, nt, &s->e2el);
    free(ttft), free(tpot), free(e2el), free(itl);
    return true;
}

static void center(FILE *f, const char *title, char c) {
    int len = (int)strlen(title), left = (50 - len) / 2, right = 50 - len - left;
    for (int i = 0; i < left; i++) fputc(c, f);
    fputs(title, f);
    for (int i = 0; i < right; i++) fputc(c, f);
    fputc('\n', f);
}

static void row_l(FILE *f, const char *label, long v) {
    fprintf(f, "%-40s %-10ld\n", label, v);
}
static void row_f(FILE *f, const char *label, double v) {
    fprintf(f, "%-40s %-10.2f\n", label, v);
}

static void stat_block(FILE *f, const char *title, const char *m, const lg_stat *st) {
    char l[64];
    center(f, title, '-');
    snprintf(l, sizeof(l), "Mean %s (ms):", m), row_f(f, l, st->mean);
    snprintf(l, sizeof(l), "Median %s (ms):", m), row_f(f, l, st->median);
    snprintf(l, sizeof(l), "P95 %s (ms):", m), row_f(f, l, st->p95);
    snprintf(l, sizeof(l), "P99 %s (ms):", m), row_f(f, l, st->p99);
}

void lg_metrics_print(FILE *f, const lg_summary *s, const lg_print_info *info) {
    center(f, " Serving Benchmark Result ", '=');
    row_l(f, "Successful requests:", s->completed);
    row_l(f, "Failed requests:", s->failed);
    if (info && info->max_concurrency > 0)
        row_l(f, "Maximum request concurrency:", info->max_concurrency);
    if (info && info->request_rate > 0 && isfinite(info->request_rate))
        row_f(f, "Request rate configured (RPS):", info->request_rate);
    if (info && info->users > 0) {
        row_l(f, "Closed-loop users:", info->users);
        if (info->think) fprintf(f, "%-40s %-10s\n", "Think time (s):", info->think);
    }
    row_f(f, "Benchmark duration (s):", s->duration_s);
    row_l(f, "Total input tokens:", s->total_input);
    row_l(f, "Total generated tokens:", s->total_output);
    row_f(f, "Request throughput (req/s):", s->request_throughput);
    if (s->has_goodput) row_f(f, "Request goodput (req/s):", s->request_goodput);
    row_f(f, "Output token throughput (tok/s):", s->output_throughput);
    row_f(f, "Peak output token throughput (tok/s):", s->peak_output_throughput);
    row_l(f, "Peak concurrent requests:", s->peak_concurrency);
    row_f(f, "Total Token throughput (tok/s):", s->total_token_throughput);
    stat_block(f, "Time to First Token", "TTFT", &s->ttft);
    stat_block(f, "Time per Output Token (excl. 1st token)", "TPOT", &s->tpot);
    stat_block(f, "Inter-token Latency", "ITL", &s->itl);
    stat_block(f, "End-to-end Latency", "E2EL", &s->e2el);
    long total = s->completed + s->failed;
    center(f, "Errors", '-');
    row_f(f, "Error rate (%):", total ? 100.0 * (double)s->failed / (double)total : 0.0);
    for (int e = 1; e < LG_ERR_COUNT; e++) {
        if (!s->errors[e]) continue;
        char l[64];
        snprintf(l, sizeof(l), "Errors (%s):", lg_err_name((lg_err)e));
        row_l(f, l, s->errors[e]);
    }
    center(f, "", '=');
}
