/* --save-result and --plot for bench-serve; see report.h. */
#include "loadgen/report.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

static void put_stat(json_t *o, const char *m, const lg_stat *st) {
    char k[64];
    snprintf(k, sizeof(k), "mean_%s_ms", m), json_object_set_new(o, k, json_real(st->mean));
    snprintf(k, sizeof(k), "median_%s_ms", m), json_object_set_new(o, k, json_real(st->median));
    snprintf(k, sizeof(k), "std_%s_ms", m), json_object_set_new(o, k, json_real(st->std));
    snprintf(k, sizeof(k), "p95_%s_ms", m), json_object_set_new(o, k, json_real(st->p95));
    snprintf(k, sizeof(k), "p99_%s_ms", m), json_object_set_new(o, k, json_real(st->p99));
}

cllm_status lg_save_result(const char *path, const lg_run_info *info, const lg_result *res,
                           const lg_summary *s, cllm_error *err) {
    json_t *o = json_object();
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof(date), "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
    json_object_set_new(o, "date", json_string(date));
    json_object_set_new(o, "backend", json_string(info->backend));
    json_object_set_new(o, "base_url", json_string(info->base_url));
    json_object_set_new(o, "model_id", json_string(res->model));
    json_object_set_new(o, "dataset", json_string(info->dataset));
    json_object_set_new(o, "num_prompts", json_integer(info->num_prompts));
    json_object_set_new(o, "request_rate",
                        isfinite(info->request_rate) ? json_real(info->request_rate)
                                                     : json_string("inf"));
    json_object_set_new(o, "burstiness", json_real(info->burstiness));
    json_object_set_new(o, "max_concurrency",
                        info->max_concurrency ? json_integer(info->max_concurrency) : json_null());
    json_object_set_new(o, "users", json_integer(info->users));
    json_object_set_new(o, "think_time_s", json_pack("[f,f]", info->think_lo, info->think_hi));
    json_object_set_new(o, "duration", json_real(s->duration_s));
    json_object_set_new(o, "completed", json_integer(s->completed));
    json_object_set_new(o, "failed", json_integer(s->failed));
    json_object_set_new(o, "total_input_tokens", json_integer(s->total_input));
    json_object_set_new(o, "total_output_tokens", json_integer(s->total_output));
    json_object_set_new(o, "request_throughput", json_real(s->request_throughput));
    json_object_set_new(o, "request_goodput",
                        s->has_goodput ? json_real(s->request_goodput) : json_null());
    json_object_set_new(o, "output_throughput", json_real(s->output_throughput));
    json_object_set_new(o, "total_token_throughput", json_real(s->total_token_throughput));
    json_object_set_new(o, "max_output_tokens_per_s", json_real(s->peak_output_throughput));
    json_object_set_new(o, "max_concurrent_requests", json_integer(s->peak_concurrency));
    put_stat(o, "ttft", &s->ttft);
    put_stat(o, "tpot", &s->tpot);
    put_stat(o, "itl", &s->itl);
    put_stat(o, "e2el", &s->e2el);
    json_t *errs = json_object();
    for (int e = 1; e < LG_ERR_COUNT; e++)
        if (s->errors[e])
            json_object_set_new(errs, lg_err_name((lg_err)e), json_integer(s->errors[e]));
    json_object_set_new(o, "errors_by_kind", errs);
    json_t *ov = json_object();
    json_object_set_new(ov, "cpu_s", json_real(res->ov.cpu_s));
    json_object_set_new(ov, "chunk_callback_s", json_real(res->ov.cb_s));
    json_object_set_new(ov, "chunks", json_integer(res->ov.chunks));
    json_object_set_new(ov, "mean_send_lag_ms", json_real(res->ov.lag_mean_ms));
    json_object_set_new(ov, "max_send_lag_ms", json_real(res->ov.lag_max_ms));
    json_object_set_new(ov, "peak_in_flight", json_integer(res->ov.peak_inflight));
    json_object_set_new(o, "client_overhead", ov);
    /* vLLM's per-request arrays (seconds), then one record per request */
    json_t *in = json_array(), *outl = json_array(), *ttfts = json_array(), *itls = json_array(),
           *reqs = json_array();
    for (long i = 0; i < res->n; i++) {
        const lg_req *q = &res->reqs[i];
        bool ok = q->err == LG_ERR_NONE;
        json_array_append_new(in, json_integer(lg_req_in_tokens(q)));
        json_array_append_new(outl, json_integer(lg_req_out_tokens(q)));
        json_array_append_new(ttfts, json_real(ok ? lg_req_ttft(q) : 0));
        json_t *gaps = json_array();
        if (ok)
            for (int k = 1; k < q->n_chunks; k++)
                json_array_append_new(gaps, json_real(q->t_chunks[k] - q->t_chunks[k - 1]));
        json_array_append(itls, gaps);
        json_t *r = json_object();
        json_object_set_new(r, "t_sent_s", json_real(q->t_sent));
        json_object_set_new(r, "ok", json_boolean(ok));
        json_object_set_new(r, "error", ok ? json_null() : json_string(lg_err_name(q->err)));
        json_object_set_new(r, "http_status", json_integer(q->http_status));
        json_object_set_new(r, "conversation", json_integer(q->conv));
        json_object_set_new(r, "turn", json_integer(q->turn));
        json_object_set_new(r, "input_tokens", json_integer(lg_req_in_tokens(q)));
        json_object_set_new(r, "output_tokens", json_integer(lg_req_out_tokens(q)));
        json_object_set_new(r, "max_tokens", json_integer(q->max_tokens));
        json_object_set_new(r, "usage_reported", json_boolean(q->usage_completion >= 0));
        json_object_set_new(r, "chunks", json_integer(q->n_chunks));
        json_object_set_new(r, "ttft_ms", ok ? json_real(1000 * lg_req_ttft(q)) : json_null());
        json_object_set_new(r, "e2el_ms", ok ? json_real(1000 * lg_req_e2el(q)) : json_null());
        int out = lg_req_out_tokens(q);
        json_object_set_new(r, "tpot_ms",
                            ok && out > 1
                                ? json_real(1000 * (lg_req_e2el(q) - lg_req_ttft(q)) / (out - 1))
                                : json_null());
        json_object_set_new(r, "itls_s", gaps);
        json_array_append_new(reqs, r);
    }
    json_object_set_new(o, "input_lens", in);
    json_object_set_new(o, "output_lens", outl);
    json_object_set_new(o, "ttfts", ttfts);
    json_object_set_new(o, "itls", itls);
    json_object_set_new(o, "requests", reqs);
    int rc = json_dump_file(o, path, JSON_INDENT(1) | JSON_REAL_PRECISION(9));
    json_decref(o);
    if (rc) return cllm_err_set(err, CLLM_EIO, "%s: cannot write", path);
    return CLLM_OK;
}

cllm_status lg_plot(const char *png, const lg_result *res, cllm_error *err) {
    char dat[4096], dat2[4096];
    snprintf(dat, sizeof(dat), "%s.requests.dat", png);
    snprintf(dat2, sizeof(dat2), "%s.seconds.dat", png);
    FILE *f = fopen(dat, "w");
    if (!f) return cllm_err_set(err, CLLM_EIO, "%s: %s", dat, strerror(errno));
    fprintf(f, "# t_sent_s ttft_ms e2el_ms ok\n");
    double t_end = 0;
    for (long i = 0; i < res->n; i++) {
        const lg_req *q = &res->reqs[i];
        bool ok = q->err == LG_ERR_NONE;
        fprintf(f, "%.6f %.3f %.3f %d\n", q->t_sent, ok ? 1000 * lg_req_ttft(q) : NAN,
                ok ? 1000 * lg_req_e2el(q) : NAN, ok);
        if (q->n_chunks && q->t_chunks[q->n_chunks - 1] > t_end)
            t_end = q->t_chunks[q->n_chunks - 1];
    }
    fclose(f);
    long nb = (long)t_end + 1;
    double *tok = calloc((size_t)nb, sizeof(double)), *fl = calloc((size_t)nb, sizeof(double));
    if (!tok || !fl) {
        free(tok), free(fl);
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    for (long i = 0; i < res->n; i++) {
        const lg_req *q = &res->reqs[i];
        for (int k = 0; k < q->n_chunks; k++)
            tok[(long)q->t_chunks[k] < nb ? (long)q->t_chunks[k] : nb - 1] += 1;
        double end = q->n_chunks ? q->t_chunks[q->n_chunks - 1] : q->t_sent;
        for (long b = (long)q->t_sent; b <= (long)end && b < nb; b++) fl[b] += 1;
    }
    f = fopen(dat2, "w");
    if (!f) {
        free(tok), free(fl);
        return cllm_err_set(err, CLLM_EIO, "%s: %s", dat2, strerror(errno));
    }
    fprintf(f, "# second chunks_per_s requests_active\n");
    for (long b = 0; b < nb; b++) fprintf(f, "%ld %.0f %.0f\n", b, tok[b], fl[b]);
    fclose(f);
    free(tok), free(fl);
    FILE *g = popen("gnuplot 2>&1", "w");
    if (!g) return cllm_err_set(err, CLLM_EIO, "cannot run gnuplot: %s", strerror(errno));
    fprintf(g,
            "set terminal pngcairo size 1000,800\nset output '%s'\nset multiplot layout 2,1 title "
            "'cllm bench-serve: %s'\n"
            "set xlabel 'time since start (s)'\nset ylabel 'ms'\nset key top left\nset grid\n"
            "plot '%s' using 1:2 with points pt 7 ps 0.4 title 'TTFT', '' using 1:3 with points pt "
            "7 ps 0.4 title 'E2EL'\n"
            "set ylabel 'output tok/s (chunks/s)'\nset y2label 'requests active'\nset y2tics\nset "
            "ytics nomirror\n"
            "plot '%s' using 1:2 with steps title 'output chunks/s', '' using 1:3 axes x1y2 with "
            "steps title 'requests active'\n"
            "unset multiplot\n",
            png, res->model, dat, dat2);
    int rc = pclose(g);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0)
        return cllm_err_set(err, CLLM_EIO, "gnuplot failed writing %s (exit %d)", png,
                            WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
    return CLLM_OK;
}
