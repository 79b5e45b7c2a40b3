/* bench-serve: metric arithmetic on synthetic timestamps (exact), SSE reader, datasets, gamma
 * draws, and end-to-end runs against an in-process stub server that streams with known delays
 * (tolerances), including 500 concurrent streams and the CLI with --save-result/--plot. */
#include <jansson.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "loadgen/client.h"
#include "loadgen/dataset.h"
#include "loadgen/metrics.h"
#include "loadgen/rng.h"
#include "loadgen/sse.h"
#include "test.h"
#include "test_bench_serve_stub.h"

#define NEAR(a, b) (fabs((a) - (b)) < 1e-9)

static lg_req mk(double sent, const double *chunks, int n, int usage_out, int usage_in, int est) {
    lg_req r = {0};
    r.t_sent = sent;
    for (int i = 0; i < n; i++) lg_req_add_chunk(&r, chunks[i]);
    r.n_text_chunks = n;
    r.usage_completion = usage_out;
    r.usage_prompt = usage_in;
    r.est_prompt = est;
    return r;
}

static void test_metrics_exact(void) {
    lg_req q[4];
    q[0] = mk(0.0, (double[]){0.1, 0.15, 0.2, 0.3}, 4, 4, 10, 99);
    q[1] = mk(1.0, (double[]){1.2, 1.25}, 2, -1, -1, 7); /* no usage: chunks count, estimate */
    q[2] = mk(0.2, NULL, 0, -1, -1, 50);
    q[2].err = LG_ERR_CONNECT;
    q[3] = mk(0.5, (double[]){0.9}, 1, 1, 5, 0);
    lg_slo slo = {.ttft_ms = 250, .tpot_ms = 60};
    lg_summary s;
    CHECK(lg_metrics_compute(q, 4, 2.0, &slo, &s));
    CHECK(s.completed == 3 && s.failed == 1 && s.errors[LG_ERR_CONNECT] == 1);
    CHECK(s.total_input == 22 && s.total_output == 7);
    CHECK(NEAR(s.request_throughput, 1.5) && NEAR(s.output_throughput, 3.5));
    CHECK(NEAR(s.total_token_throughput, 14.5));
    /* TTFT .1 .2 .4: numpy mean/median/p95/p99 */
    CHECK_MSG(NEAR(s.ttft.mean, 700.0 / 3), "%f", s.ttft.mean);
    CHECK(NEAR(s.ttft.median, 200) && NEAR(s.ttft.p95, 380) && NEAR(s.ttft.p99, 396));
    /* TPOT only for out > 1: (0.3-0.1)/3 and (0.25-0.2)/1 */
    CHECK(s.tpot.n == 2 && NEAR(s.tpot.mean, (200.0 / 3 + 50) / 2));
    /* ITL pooled: .05 .05 .1 (A) and .05 (B) */
    CHECK(s.itl.n == 4 && NEAR(s.itl.mean, 62.5) && NEAR(s.itl.median, 50));
    CHECK_MSG(NEAR(s.itl.p99, 50 + 50 * 0.97), "%f", s.itl.p99);
    CHECK(NEAR(s.e2el.mean, (300 + 250 + 400) / 3.0) && NEAR(s.e2el.median, 300));
    CHECK(NEAR(s.e2el.std, 1000 * sqrt(((0.3 - 0.95 / 3) * (0.3 - 0.95 / 3) +
                                        (0.25 - 0.95 / 3) * (0.25 - 0.95 / 3) +
                                        (0.4 - 0.95 / 3) * (0.4 - 0.95 / 3)) /
                                       3)));
    /* goodput: A fails tpot (66.7 > 60), D fails ttft (400 > 250), B passes */
    CHECK(s.has_goodput && s.good_completed == 1 && NEAR(s.request_goodput, 0.5));
    /* whole-second buckets from t=0: second 0 has A's 4 chunks + D's 1 */
    CHECK(NEAR(s.peak_output_throughput, 5) && s.peak_concurrency == 2);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    lg_metrics_print(f, &s, &(lg_print_info){.max_concurrency = 8, .request_rate = INFINITY});
    fclose(f);
    CHECK(strstr(buf, "============ Serving Benchmark Result ============\n") != NULL);
    CHECK(strstr(buf, "Successful requests:                     3         \n") != NULL);
    CHECK(strstr(buf, "Benchmark duration (s):                  2.00      \n") != NULL);
    CHECK(strstr(buf, "Request goodput (req/s):                 0.50") != NULL);
    CHECK(strstr(buf, "Maximum request concurrency:             8") != NULL);
    CHECK(strstr(buf, "Request rate configured") == NULL);
    CHECK(strstr(buf, "---------------Time to First Token----------------\n") != NULL);
    CHECK(strstr(buf, "-----Time per Output Token (excl. 1st token)------\n") != NULL);
    CHECK(strstr(buf, "Median TTFT (ms):                        200.00") != NULL);
    CHECK(strstr(buf, "P99 TTFT (ms):                           396.00") != NULL);
    CHECK(strstr(buf, "Mean ITL (ms):                           62.50") != NULL);
    CHECK(strstr(buf, "Mean E2EL (ms):") &&
          strstr(buf, "Total Token throughput (tok/s):          14.50"));
    CHECK(strstr(buf, "Errors (connect):                        1") != NULL);
    CHECK(strstr(buf, "Error rate (%):                          25.00") != NULL);
    free(buf);
    for (int i = 0; i < 4; i++) lg_req_free(&q[i]);

    double x[5] = {1, 2, 3, 4, 5};
    CHECK(NEAR(lg_percentile_sorted(x, 5, 99), 4.96) && NEAR(lg_percentile_sorted(x, 5, 50), 3));
    CHECK(NEAR(lg_percentile_sorted(x, 1, 99), 1) && lg_percentile_sorted(x, 0, 50) == 0);
    lg_summary e;
    CHECK(lg_metrics_compute(NULL, 0, 1.0, NULL, &e) && e.completed == 0 && e.ttft.mean == 0);
}

typedef struct ev_log {
    char ev[8][64];
    int n;
} ev_log;

static bool log_ev(void *ctx, const char *d, size_t n) {
    ev_log *l = ctx;
    if (l->n < 8) snprintf(l->ev[l->n++], 64, "%.*s", (int)n, d);
    return true;
}

static void test_sse(void) {
    const char *s =
        ": ping\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: l1\ndata: l2\n\ndata:[DONE]\n\n";
    ev_log l = {0};
    lg_sse p;
    lg_sse_init(&p, 1024, log_ev, &l);
    for (size_t i = 0; s[i]; i++) CHECK(lg_sse_feed(&p, s + i, 1)); /* byte by byte */
    CHECK(lg_sse_finish(&p));
    CHECK(l.n == 3 && !strcmp(l.ev[0], "{\"a\":1}") && !strcmp(l.ev[1], "l1\nl2") &&
          !strcmp(l.ev[2], "[DONE]"));
    lg_sse_free(&p);
    /* unterminated last event is delivered by finish; overlong line fails */
    ev_log l2 = {0};
    lg_sse_init(&p, 16, log_ev, &l2);
    CHECK(lg_sse_feed(&p, "data: x", 7) && lg_sse_finish(&p) && l2.n == 1 &&
          !strcmp(l2.ev[0], "x"));
    CHECK(!lg_sse_feed(&p, "data: 0123456789012345678901234567890\n", 38) && p.overflow);
    lg_sse_free(&p);
}

static int words(const char *s) {
    return count_words(s);
}

static void test_datasets(void) {
    cllm_error err;
    lg_dataset a, b;
    lg_random_opts o = {.n = 50,
                        .input_len = 100,
                        .output_len = 20,
                        .range_ratio = 0.5,
                        .prefix_len = 7,
                        .turns = 2,
                        .seed = 3};
    CHECK(lg_dataset_random(&o, &a, &err) == CLLM_OK && lg_dataset_random(&o, &b, &err) == CLLM_OK);
    bool same = true, in_range = true, prefix = true;
    for (long i = 0; i < a.n; i++) {
        same &= !strcmp(a.convs[i].turns[1].prompt, b.convs[i].turns[1].prompt);
        for (int t = 0; t < 2; t++) {
            const lg_turn *u = &a.convs[i].turns[t];
            int w = words(u->prompt) - (t == 0 ? 7 : 0);
            in_range &= w >= 50 && w <= 150 && u->max_tokens >= 10 && u->max_tokens <= 30 &&
                        u->est_tokens == words(u->prompt);
        }
        /* the first 7 words (the shared prefix) are the same in every conversation */
        const char *p0 = a.convs[0].turns[0].prompt;
        size_t pl = 0;
        for (int sp = 0; p0[pl] && sp < 7; pl++) sp += p0[pl] == ' ';
        prefix &= !strncmp(a.convs[i].turns[0].prompt, p0, pl);
    }
    CHECK(same && in_range && prefix);
    lg_dataset_free(&a), lg_dataset_free(&b);
    o.range_ratio = 1.5;
    CHECK(lg_dataset_random(&o, &a, &err) == CLLM_EINVAL);

    char path[4096];
    snprintf(path, sizeof(path), "%s/tests/data/bench/prompts.jsonl", test_src());
    CHECK_MSG(lg_dataset_jsonl(path, 9, &a, &err) == CLLM_OK, "%s", err.msg);
    CHECK(a.n == 4);
    if (a.n == 4) {
        CHECK(a.convs[0].n_turns == 1 && a.convs[0].turns[0].max_tokens == 5);
        CHECK(a.convs[1].turns[0].max_tokens == 3 && a.convs[2].n_turns == 2 &&
              a.convs[2].turns[1].max_tokens == 4);
        CHECK(a.convs[3].n_turns == 2 && !strcmp(a.convs[3].turns[1].prompt, "how are you") &&
              a.convs[3].turns[0].max_tokens == 9);
    }
    lg_dataset_free(&a);
    const char *tmp = test_tmp();
    mkdir(tmp, 0755);
    snprintf(path, sizeof(path), "%s/bs_bad.jsonl", tmp);
    FILE *f = fopen(path, "w");
    fputs("{\"prompt\": \"ok\"}\n{\"prompt\": 5}\n", f);
    fclose(f);
    CHECK(lg_dataset_jsonl(path, 9, &a, &err) == CLLM_EFORMAT && strstr(err.msg, ":2:"));
    CHECK(lg_dataset_jsonl("/nonexistent.jsonl", 9, &a, &err) == CLLM_ENOTFOUND);
}

static void test_gamma(void) {
    lg_rng r;
    lg_rng_seed(&r, 1);
    for (int k = 0; k < 3; k++) {
        double shape = k == 0 ? 0.5 : k == 1 ? 1 : 4, theta = 1.0 / (10 * shape), sum = 0, sq = 0;
        int n = 40000;
        for (int i = 0; i < n; i++) {
            double g = lg_rng_gamma(&r, shape, theta);
            sum += g, sq += g * g;
        }
        double mean = sum / n, var = sq / n - mean * mean;
        CHECK_MSG(fabs(mean - 0.1) < 0.003, "shape %g mean %f", shape, mean);
        CHECK_MSG(fabs(var - shape * theta * theta) < 0.1 * shape * theta * theta,
                  "shape %g var %f", shape, var);
    }
}

static lg_config base_cfg(const char *url, const lg_dataset *ds) {
    return (lg_config){.base_url = url,
                       .request_rate = INFINITY,
                       .burstiness = 1,
                       .timeout_s = 30,
                       .include_usage = true,
                       .temperature = -1,
                       .ds = ds};
}

static void test_e2e_stub(void) {
    stub sv;
    CHECK(stub_start(&sv, &(stub_cfg){.ttft_ms = 100, .itl_ms = 20}) == 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", sv.port);
    cllm_error err;
    lg_dataset ds;
    lg_random_opts ro = {.n = 16, .input_len = 12, .output_len = 10, .turns = 1, .seed = 1};
    CHECK(lg_dataset_random(&ro, &ds, &err) == CLLM_OK);

    /* 16 requests, 4 at a time, usage on: exact token counts, timing within tolerance */
    lg_config c = base_cfg(url, &ds);
    c.num_prompts = 16, c.max_concurrency = 4, c.num_warmups = 2;
    lg_result res;
    CHECK_MSG(lg_bench_run(&c, &res, &err) == CLLM_OK, "%s", err.msg);
    CHECK(!strcmp(res.model, "stub-model"));
    lg_summary s;
    CHECK(lg_metrics_compute(res.reqs, res.n, res.duration_s, NULL, &s));
    CHECK_MSG(s.completed == 16 && s.failed == 0, "%ld %ld", s.completed, s.failed);
    CHECK(s.total_output == 160 && s.total_input == 16 * 12);
    CHECK_MSG(s.ttft.mean >= 100 && s.ttft.mean < 160, "ttft %f", s.ttft.mean);
    CHECK_MSG(s.itl.median >= 15 && s.itl.median < 35, "itl %f", s.itl.median);
    CHECK_MSG(s.tpot.mean >= 19 && s.tpot.mean < 30, "tpot %f", s.tpot.mean);
    CHECK_MSG(s.e2el.mean >= 280 && s.e2el.mean < 400, "e2el %f", s.e2el.mean);
    CHECK(res.ov.peak_inflight == 4 && s.itl.n == 16 * 9);
    /* 4 waves of ~0.28 s */
    CHECK_MSG(res.duration_s > 1.1 && res.duration_s < 2.0, "dur %f", res.duration_s);
    CHECK(NEAR(s.output_throughput, 160 / res.duration_s));
    long n_gen_before = atomic_load(&sv.n_gen);
    CHECK(n_gen_before == 18); /* warmups went out too */
    lg_result_free(&res);

    /* no usage: chunk counting; chat backend */
    c.include_usage = false, c.chat = true, c.num_warmups = 0, c.num_prompts = 4,
    c.max_concurrency = 0;
    CHECK(lg_bench_run(&c, &res, &err) == CLLM_OK);
    CHECK(lg_metrics_compute(res.reqs, res.n, res.duration_s, NULL, &s));
    CHECK(s.completed == 4 && s.total_output == 40 && s.total_input == 4 * 12 &&
          res.reqs[0].usage_completion == -1);
    lg_result_free(&res);

    /* open loop at 50 req/s, 20 prompts: arrivals rescaled so the last goes out at 0.4 s */
    c.chat = false, c.include_usage = true, c.request_rate = 50, c.num_prompts = 20;
    CHECK(lg_bench_run(&c, &res, &err) == CLLM_OK);
    CHECK(res.n == 20);
    double last = 0;
    bool sorted = true;
    for (long i = 0; i < res.n; i++) {
        if (res.reqs[i].t_sent < last) sorted = false;
        last = res.reqs[i].t_sent;
    }
    CHECK_MSG(sorted && last > 0.38 && last < 0.5, "last send %f", last);
    CHECK_MSG(res.ov.lag_max_ms < 50, "lag %f", res.ov.lag_max_ms);
    lg_result_free(&res);

    /* failures by kind: every 3rd request answered 500 */
    stub bad;
    CHECK(stub_start(&bad, &(stub_cfg){.ttft_ms = 5, .itl_ms = 1, .fail_every = 3}) == 0);
    char burl[64];
    snprintf(burl, sizeof(burl), "http://127.0.0.1:%d", bad.port);
    lg_config cb = base_cfg(burl, &ds);
    cb.num_prompts = 9, cb.max_concurrency = 1;
    CHECK(lg_bench_run(&cb, &res, &err) == CLLM_OK);
    CHECK(lg_metrics_compute(res.reqs, res.n, res.duration_s, NULL, &s));
    CHECK_MSG(s.completed == 6 && s.failed == 3 && s.errors[LG_ERR_HTTP_5XX] == 3, "%ld %ld",
              s.completed, s.failed);
    lg_result_free(&res);
    stub_stop(&bad);

    /* connection refused: connect errors; warmup failure is an error */
    char durl[64];
    snprintf(durl, sizeof(durl), "http://127.0.0.1:%d", stub_dead_port());
    lg_config cd = base_cfg(durl, &ds);
    cd.model = "m", cd.num_prompts = 3;
    CHECK(lg_bench_run(&cd, &res, &err) == CLLM_OK);
    CHECK(lg_metrics_compute(res.reqs, res.n, res.duration_s, NULL, &s));
    CHECK(s.failed == 3 && s.errors[LG_ERR_CONNECT] == 3);
    lg_result_free(&res);
    cd.num_warmups = 1;
    CHECK(lg_bench_run(&cd, &res, &err) == CLLM_EIO && strstr(err.msg, "warmup"));
    cd.model = NULL;
    CHECK(lg_bench_run(&cd, &res, &err) == CLLM_EIO); /* /v1/models unreachable */

    lg_dataset_free(&ds);
    stub_stop(&sv);
}

static void test_users_and_turns(void) {
    stub sv;
    CHECK(stub_start(&sv, &(stub_cfg){.ttft_ms = 20, .itl_ms = 5}) == 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", sv.port);
    cllm_error err;
    lg_dataset ds;
    lg_random_opts ro = {.n = 8, .input_len = 10, .output_len = 4, .turns = 3, .seed = 2};
    CHECK(lg_dataset_random(&ro, &ds, &err) == CLLM_OK);
    for (int chat = 0; chat < 2; chat++) {
        lg_config c = base_cfg(url, &ds);
        c.users = 3, c.think_lo = 0.05, c.think_hi = 0.1, c.duration_s = 0.8, c.chat = chat;
        lg_result res;
        CHECK_MSG(lg_bench_run(&c, &res, &err) == CLLM_OK, "%s", err.msg);
        /* closed loop: never more than one request per user in flight */
        CHECK_MSG(res.ov.peak_inflight <= 3 && res.n >= 6, "peak %ld n %ld", res.ov.peak_inflight,
                  res.n);
        /* a user's requests: each ~40 ms + 50-100 ms think => ~6 each in 0.8 s */
        CHECK_MSG(res.n <= 3 * 8, "n %ld", res.n);
        /* follow-up turns carry the history: turn k prompt = turns 0..k questions + answers */
        bool grew = true, saw_turn2 = false;
        for (long i = 0; i < res.n; i++) {
            const lg_req *q = &res.reqs[i];
            if (q->err != LG_ERR_NONE || q->turn == 0) continue;
            int want = 0;
            for (int t = 0; t <= q->turn; t++) want += ds.convs[q->conv].turns[t].est_tokens;
            want += q->turn * 4;                  /* the stub's answers, 4 words each */
            if (!chat) want += 2 * (q->turn + 1); /* "User:" and "Assistant:" per turn */
            if (q->usage_prompt != want) grew = false;
            saw_turn2 |= q->turn == 2;
        }
        CHECK_MSG(grew && saw_turn2, "chat=%d", chat);
        lg_result_free(&res);
    }
    lg_dataset_free(&ds);
    stub_stop(&sv);
}

static void test_500_streams(void) {
    stub sv;
    CHECK(stub_start(&sv, &(stub_cfg){.ttft_ms = 300, .itl_ms = 30}) == 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", sv.port);
    cllm_error err;
    lg_dataset ds;
    lg_random_opts ro = {.n = 500, .input_len = 8, .output_len = 20, .turns = 1, .seed = 4};
    CHECK(lg_dataset_random(&ro, &ds, &err) == CLLM_OK);
    lg_config c = base_cfg(url, &ds);
    c.num_prompts = 500, c.model = "m";
    lg_result res;
    CHECK_MSG(lg_bench_run(&c, &res, &err) == CLLM_OK, "%s", err.msg);
    lg_summary s;
    CHECK(lg_metrics_compute(res.reqs, res.n, res.duration_s, NULL, &s));
    CHECK_MSG(s.completed == 500 && s.total_output == 500 * 20, "completed %ld failed %ld",
              s.completed, s.failed);
    CHECK_MSG(res.ov.peak_inflight == 500 && atomic_load(&sv.max_open) >= 450, "peak %ld open %ld",
              res.ov.peak_inflight, atomic_load(&sv.max_open));
    CHECK_MSG(s.peak_concurrency == 500, "%ld", s.peak_concurrency);
    fprintf(stderr,
            "500 streams: duration %.2f s, ttft mean %.1f ms p99 %.1f, itl mean %.1f ms p99 %.1f\n",
            res.duration_s, s.ttft.mean, s.ttft.p99, s.itl.mean, s.itl.p99);
    lg_overhead_print(stderr, &res);
    lg_result_free(&res);
    lg_dataset_free(&ds);
    stub_stop(&sv);
}

static void test_cli(void) {
    const char *bin = getenv("CLLM_BIN"), *tmp = test_tmp();
    if (!bin) {
        fprintf(stderr, "CLLM_BIN not set: CLI checks skipped\n");
        return;
    }
    stub sv;
    CHECK(stub_start(&sv, &(stub_cfg){.ttft_ms = 30, .itl_ms = 10}) == 0);
    mkdir(tmp, 0755);
    char cmd[4096];
    snprintf(
        cmd, sizeof(cmd),
        "%s bench-serve --url http://127.0.0.1:%d --random-input-len 16 --random-output-len 8 "
        "--num-prompts 12 --request-rate 100 --burstiness 0.5 --num-warmups 1 -q ttft:1000 tpot:5 "
        "--save-result %s/bs.json --plot %s/bs.png > %s/bs.out 2> %s/bs.err",
        bin, sv.port, tmp, tmp, tmp, tmp);
    int rc = system(cmd);
    CHECK_MSG(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "rc %d: %s", rc, cmd);
    char path[4096];
    snprintf(path, sizeof(path), "%s/bs.out", tmp);
    FILE *f = fopen(path, "r");
    char out[16384] = "";
    if (f) out[fread(out, 1, sizeof(out) - 1, f)] = 0, fclose(f);
    CHECK(strstr(out, "Successful requests:                     12") != NULL);
    CHECK(strstr(out, "Total generated tokens:                  96") != NULL);
    CHECK(strstr(out, "Request goodput (req/s):                 0.00") !=
          NULL); /* tpot 10 ms > 5 */
    CHECK(strstr(out, "Request rate configured (RPS):           100.00") != NULL);
    CHECK(strstr(out, "Client CPU time (s):") != NULL);
    snprintf(path, sizeof(path), "%s/bs.json", tmp);
    json_t *j = json_load_file(path, 0, NULL);
    CHECK(j && json_integer_value(json_object_get(j, "completed")) == 12);
    CHECK(j && json_array_size(json_object_get(j, "requests")) == 12);
    CHECK(j && json_integer_value(json_object_get(j, "total_output_tokens")) == 96);
    CHECK(j && json_real_value(json_object_get(j, "mean_itl_ms")) > 5);
    json_t *r0 = json_array_get(json_object_get(j, "requests"), 0);
    CHECK(r0 && json_array_size(json_object_get(r0, "itls_s")) == 7 &&
          json_is_true(json_object_get(r0, "ok")));
    json_decref(j);
    snprintf(path, sizeof(path), "%s/bs.png", tmp);
    f = fopen(path, "rb");
    unsigned char mg[8] = {0};
    if (f) {
        CHECK(fread(mg, 1, 8, f) == 8);
        fclose(f);
    }
    CHECK_MSG(!memcmp(mg, "\x89PNG", 4), "no PNG at %s", path);
    /* usage errors */
    snprintf(cmd, sizeof(cmd),
             "%s bench-serve --url http://x --think-time 5-2 --users 2 --duration 1 2>/dev/null",
             bin);
    rc = system(cmd);
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    snprintf(cmd, sizeof(cmd), "%s bench-serve --num-prompts 2 2>/dev/null", bin);
    rc = system(cmd);
    CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 2);
    stub_stop(&sv);
}

/* A server that sends the chat role chunk before prefill (ttft_ms later comes the first token):
 * TTFT is stamped at the first chunk with text, so it is not ~0; ITL starts there too. */
static void test_ttft_first_text(void) {
    stub sv;
    CHECK(stub_start(&sv, &(stub_cfg){.ttft_ms = 150, .itl_ms = 10, .early_role = true}) == 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", sv.port);
    cllm_error err;
    lg_dataset ds;
    lg_random_opts ro = {.n = 2, .input_len = 8, .output_len = 5, .turns = 1, .seed = 1};
    CHECK(lg_dataset_random(&ro, &ds, &err) == CLLM_OK);
    lg_config c = base_cfg(url, &ds);
    c.chat = true, c.num_prompts = 2;
    lg_result res;
    CHECK_MSG(lg_bench_run(&c, &res, &err) == CLLM_OK, "%s", err.msg);
    lg_summary s;
    CHECK(lg_metrics_compute(res.reqs, res.n, res.duration_s, NULL, &s));
    CHECK_MSG(s.completed == 2, "completed %ld", s.completed);
    /* the role chunk came at ~0 ms; the first token no sooner than 150 ms */
    CHECK_MSG(s.ttft.min >= 150, "ttft %f ms: stamped at the role chunk", s.ttft.min);
    CHECK_MSG(res.reqs[0].first_text_chunk == 1 && res.reqs[0].n_chunks == 6,
              "first text chunk %d of %d", res.reqs[0].first_text_chunk, res.reqs[0].n_chunks);
    CHECK_MSG(s.itl.n == 2 * 4, "itl samples %ld (the role->token gap is not an ITL)", s.itl.n);
    lg_result_free(&res);
    lg_dataset_free(&ds);
    stub_stop(&sv);
}

/* The same over a multi-turn chat (the soak's case: TTFT p50 0.5 ms): every turn's TTFT is at its
 * first token; and an answer without text (EOS first) is timed at its finish chunk, not at the
 * role chunk. */
static void test_ttft_multi_turn(void) {
    stub sv;
    CHECK(stub_start(&sv, &(stub_cfg){.ttft_ms = 120, .itl_ms = 5, .early_role = true}) == 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", sv.port);
    cllm_error err;
    lg_dataset ds;
    lg_random_opts ro = {.n = 1, .input_len = 8, .output_len = 3, .turns = 3, .seed = 2};
    CHECK(lg_dataset_random(&ro, &ds, &err) == CLLM_OK);
    lg_config c = base_cfg(url, &ds);
    c.chat = true, c.users = 1, c.num_prompts = 3;
    lg_result res;
    CHECK_MSG(lg_bench_run(&c, &res, &err) == CLLM_OK, "%s", err.msg);
    CHECK_MSG(res.n == 3, "requests %ld", res.n);
    int turns_seen = 0;
    for (long i = 0; i < res.n; i++) {
        turns_seen |= 1 << res.reqs[i].turn;
        CHECK_MSG(lg_req_ttft(&res.reqs[i]) >= 0.12, "turn %d ttft %.1f ms: the role chunk",
                  res.reqs[i].turn, lg_req_ttft(&res.reqs[i]) * 1e3);
    }
    CHECK_MSG(turns_seen == 7, "turns seen %x", turns_seen);
    lg_result_free(&res);
    lg_dataset_free(&ds);
    stub_stop(&sv);
    /* an empty answer: role chunk at 1 ms, finish chunk at 300 ms, no text chunk */
    lg_req q = mk(0.0, (double[]){0.001, 0.3}, 2, 1, 5, 5);
    q.first_text_chunk = -1;
    q.n_text_chunks = 0;
    CHECK_MSG(NEAR(lg_req_ttft(&q), 0.3), "empty answer ttft %f", lg_req_ttft(&q));
    lg_summary sm;
    CHECK(lg_metrics_compute(&q, 1, 1.0, NULL, &sm));
    CHECK_MSG(sm.itl.n == 0 && NEAR(sm.ttft.median, 300), "itl %ld ttft %f", sm.itl.n,
              sm.ttft.median);
    lg_req_free(&q);
}

int main(void) {
    test_metrics_exact();
    test_sse();
    test_datasets();
    test_gamma();
    test_e2e_stub();
    test_ttft_first_text();
    test_ttft_multi_turn();
    test_users_and_turns();
    test_500_streams();
    test_cli();
    return test_report("test_bench_serve");
}
