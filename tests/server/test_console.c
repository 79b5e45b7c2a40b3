/* The web console's server side (issue 17) against the scripted fake engine: the page and its
 * files are served (CSP, content types) without the API key, the data endpoints need it; the
 * request ring (size, wrap, fields, cancelled streams, no prompt text unless asked);
 * /console/stats fields and window percentiles; --no-console (opts.console false) 404s;
 * /console/info's vision field (the chat's image attach) and request size limit.
 * Also times /console/stats while 64 streams run (printed, not asserted). */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/console_int.h"
#include "test.h"
#include "test_server_client.h"
#include "test_server_fake.h"

#define KEY "console-test-key"

static const char *const AUTH[] = {"Authorization: Bearer " KEY, NULL};

static json_t *get_json(int port, const char *path, long *status) {
    http_res r;
    http_do(port, "GET", path, AUTH, NULL, 0, &r);
    *status = r.status;
    json_t *j = json_loads(r.body, 0, NULL);
    http_free(&r);
    return j;
}

/* A request is logged when MHD reports its connection done, just after the client has the
 * response: wait for the ring to reach seq n. */
static void wait_seq(int port, long long n) {
    for (int i = 0; i < 200; i++) {
        long st;
        json_t *j = get_json(port, "/console/requests?limit=1", &st);
        long long last = json_integer_value(json_object_get(j, "last_seq"));
        json_decref(j);
        if (last >= n) return;
        usleep(5000);
    }
}

static cllm_server *start(fake_engine *f, bool console, int ring, bool prompts) {
    cllm_server_engine ops = fake_ops(f);
    cllm_server_opts o;
    cllm_server_opts_defaults(&o);
    o.port = 0;
    o.api_key = KEY;
    o.served_model_name = "tiny";
    o.stats_interval_s = 0;
    o.access_log = false;
    o.console = console;
    o.console_requests = ring;
    o.console_log_prompts = prompts;
    cllm_server *s = NULL;
    cllm_error err = {0};
    CHECK_MSG(cllm_server_start(&o, &ops, &s, &err) == CLLM_OK, "%s", err.msg);
    if (s) cllm_server_set_ready(s, true);
    return s;
}

static void test_page_and_auth(int port) {
    http_res r;
    http_do(port, "GET", "/", NULL, NULL, 0, &r);
    CHECK_MSG(r.status == 200, "GET / without key: %ld", r.status);
    CHECK(strstr(r.headers, "text/html") != NULL);
    CHECK(strstr(r.headers, "Content-Security-Policy: default-src 'none'; script-src 'self'") !=
          NULL);
    CHECK(strstr(r.body, "role=\"tablist\"") != NULL);
    http_free(&r);
    const char *assets[] = {"/console/", "/console/app.js", "/console/vendor/purify.min.js",
                            "/console/vendor/LICENSE.uplot", "/console/console.css"};
    for (size_t i = 0; i < sizeof(assets) / sizeof(*assets); i++) {
        http_do(port, "GET", assets[i], NULL, NULL, 0, &r);
        CHECK_MSG(r.status == 200 && r.len > 100, "%s: %ld (%zu bytes)", assets[i], r.status,
                  r.len);
        http_free(&r);
    }
    http_do(port, "GET", "/console/app.js", NULL, NULL, 0, &r);
    CHECK(strstr(r.headers, "text/javascript") != NULL);
    http_free(&r);
    const char *missing[] = {"/console/%2e%2e/server.c", "/console/nope.js", "/console/vendor/",
                             "/console/index.html/x"};
    for (size_t i = 0; i < sizeof(missing) / sizeof(*missing); i++) {
        http_do(port, "GET", missing[i], NULL, NULL, 0, &r);
        CHECK_MSG(r.status == 404, "%s: %ld", missing[i], r.status);
        http_free(&r);
    }
    const char *data[] = {"/console/stats", "/console/info", "/console/requests"};
    for (size_t i = 0; i < 3; i++) {
        http_do(port, "GET", data[i], NULL, NULL, 0, &r);
        CHECK_MSG(r.status == 401, "%s without key: %ld", data[i], r.status);
        http_free(&r);
        http_do(port, "GET", data[i], AUTH, NULL, 0, &r);
        CHECK_MSG(r.status == 200, "%s with key: %ld", data[i], r.status);
        CHECK(strstr(r.headers, "Cache-Control: no-store") != NULL);
        http_free(&r);
    }
    http_post(port, "/console/stats", KEY, "{}", &r);
    CHECK_MSG(r.status == 405, "POST /console/stats: %ld", r.status);
    http_free(&r);
}

static void test_ring(int port) {
    http_res r;
    /* 5 requests into a ring of 3: the newest three stay, newest first */
    for (int i = 0; i < 5; i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"prompt\":\"secret %d\",\"max_tokens\":3}", i);
        http_post(port, "/v1/completions", KEY, body, &r);
        CHECK_MSG(r.status == 200, "completion %d: %ld", i, r.status);
        http_free(&r);
    }
    http_post(port, "/v1/completions", KEY, "{\"prompt\":\"x\",\"temperature\":-5}", &r);
    CHECK(r.status == 400);
    http_free(&r);
    wait_seq(port, 6);
    long st;
    json_t *j = get_json(port, "/console/requests", &st);
    CHECK(st == 200 && j);
    json_t *a = json_object_get(j, "requests");
    CHECK_MSG(json_array_size(a) == 3, "ring of 3 holds %zu", json_array_size(a));
    CHECK(json_integer_value(json_object_get(j, "last_seq")) == 6);
    CHECK(json_integer_value(json_object_get(j, "capacity")) == 3);
    json_t *e0 = json_array_get(a, 0), *e1 = json_array_get(a, 1);
    CHECK(json_integer_value(json_object_get(e0, "status")) == 400);
    CHECK(json_integer_value(json_object_get(e1, "status")) == 200);
    CHECK(!strcmp(json_string_value(json_object_get(e1, "route")), "/v1/completions"));
    CHECK(json_integer_value(json_object_get(e1, "output_tokens")) == 3);
    CHECK(json_integer_value(json_object_get(e1, "prompt_tokens")) > 0);
    CHECK(json_number_value(json_object_get(e1, "ttft_ms")) > 0);
    CHECK(json_number_value(json_object_get(e1, "total_ms")) >=
          json_number_value(json_object_get(e1, "ttft_ms")));
    CHECK(!strcmp(json_string_value(json_object_get(e1, "finish")), "length"));
    char *txt = json_dumps(j, 0);
    CHECK_MSG(txt && !strstr(txt, "secret"), "prompt text leaked: %s", txt);
    free(txt);
    json_decref(j);
    /* after= returns only newer entries */
    j = get_json(port, "/console/requests?after=5", &st);
    CHECK(json_array_size(json_object_get(j, "requests")) == 1);
    json_decref(j);
    j = get_json(port, "/console/requests?limit=2", &st);
    CHECK(json_array_size(json_object_get(j, "requests")) == 2);
    json_decref(j);
    /* console urls and probes are not logged */
    http_do(port, "GET", "/health", NULL, NULL, 0, &r);
    http_free(&r);
    j = get_json(port, "/console/requests", &st);
    CHECK(json_integer_value(json_object_get(j, "last_seq")) == 6);
    json_decref(j);
}

static void test_stats(int port) {
    long st;
    json_t *j = get_json(port, "/console/stats", &st);
    CHECK(st == 200 && j);
    const char *fields[] = {"running",
                            "waiting",
                            "kv_blocks_used",
                            "kv_blocks_total",
                            "state_slots_used",
                            "state_slots_total",
                            "prefix_queries_tokens",
                            "prefix_hits_tokens",
                            "engine_generation_tokens",
                            "preemptions",
                            "http_429",
                            "cancelled_disconnect",
                            "proc_cpu_s",
                            "proc_rss_bytes",
                            "host_cpu_total",
                            "mem_total_bytes",
                            "mem_available_bytes"};
    for (size_t i = 0; i < sizeof(fields) / sizeof(*fields); i++)
        CHECK_MSG(json_is_number(json_object_get(j, fields[i])), "stats.%s missing", fields[i]);
    CHECK(json_number_value(json_object_get(j, "proc_rss_bytes")) > 0);
    CHECK(json_number_value(json_object_get(j, "mem_total_bytes")) > 0);
    CHECK(json_integer_value(json_object_get(j, "generation_tokens")) >= 15);
    json_t *tt = json_object_get(j, "ttft_ms");
    /* the window covers the ring: 3 entries, the 400 has no TTFT */
    CHECK_MSG(json_integer_value(json_object_get(tt, "n")) == 2, "window ttft n %lld",
              (long long)json_integer_value(json_object_get(tt, "n")));
    CHECK(json_number_value(json_object_get(tt, "p99")) >=
          json_number_value(json_object_get(tt, "p50")));
    CHECK(json_is_object(json_object_get(j, "e2e_ms")) &&
          json_is_object(json_object_get(j, "itl_ms")));
    json_decref(j);
    j = get_json(port, "/console/info", &st);
    CHECK(!strcmp(json_string_value(json_object_get(j, "model")), "tiny"));
    CHECK(json_is_object(json_object_get(j, "card")));
    CHECK(json_integer_value(json_object_get(j, "requests_log_size")) == 3);
    json_decref(j);
}

/* The dashboard's history ring on its own: wrap, ?since= filtering, rates from consecutive
 * samples (the oldest kept has no predecessor: null), gauges and NAN latencies. */
static void test_hist_ring(void) {
    srv_con_hist h;
    CHECK(srv_con_hist_init(&h, 100));
    srv_buf b = {0};
    srv_con_hist_json(&h, 0, &b); /* empty: columns with nothing in them */
    CHECK(b.p && strstr(b.p, "\"n\":0") && strstr(b.p, "\"t\":[]"));
    srv_buf_free(&b);
    for (int i = 0; i < 250; i++) {
        srv_con_sample x;
        memset(&x, 0, sizeof(x));
        x.t = 1000 + i;
        x.gen_tokens = 10.0 * i; /* 10 tok/s */
        x.http_total = 2.0 * i;  /* 2 requests a second */
        x.running = (float)(i % 7);
        for (int k = 0; k < 3; k++)
            x.ttft[k] = i % 2 ? 5.0f * (k + 1) : NAN, x.itl[k] = x.e2e[k] = 1;
        srv_con_hist_push(&h, &x);
    }
    CHECK(h.n == 250);
    struct {
        double since;
        int n;
        double first_t;
    } cases[] = {{0, 100, 1150}, {1245.5, 4, 1246}, {1249, 0, 0}, {1100, 100, 1150}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(*cases); c++) {
        srv_buf o = {0};
        srv_buf_adds(&o, "{\"x\":0");
        srv_con_hist_json(&h, cases[c].since, &o);
        srv_buf_adds(&o, "}");
        json_t *d = json_loadb(o.p, o.len, 0, NULL);
        json_t *hist = json_object_get(d, "history");
        CHECK_MSG(hist, "since %g: not JSON: %.200s", cases[c].since, o.p);
        json_t *t = json_object_get(hist, "t");
        CHECK_MSG((int)json_array_size(t) == cases[c].n &&
                      json_integer_value(json_object_get(hist, "n")) == cases[c].n,
                  "since %g: %zu samples, want %d", cases[c].since, json_array_size(t), cases[c].n);
        if (cases[c].n) {
            CHECK_MSG(json_number_value(json_array_get(t, 0)) == cases[c].first_t,
                      "since %g: first t %g", cases[c].since,
                      json_number_value(json_array_get(t, 0)));
            json_t *g = json_object_get(hist, "gtps"), *rq = json_object_get(hist, "req");
            size_t last = json_array_size(g) - 1;
            CHECK(json_number_value(json_array_get(g, last)) == 10);
            CHECK(json_number_value(json_array_get(rq, last)) == 2);
            /* the oldest sample in the ring has nothing before it */
            if (cases[c].first_t == 1150)
                CHECK(json_is_null(json_array_get(g, 0)));
            else
                CHECK(json_number_value(json_array_get(g, 0)) == 10);
            json_t *tt = json_object_get(hist, "ttft95");
            CHECK(json_array_size(tt) == json_array_size(t));
            int nulls = 0;
            for (size_t i = 0; i < json_array_size(tt); i++)
                nulls += json_is_null(json_array_get(tt, i));
            CHECK(nulls > 0 && nulls < (int)json_array_size(tt) + 1);
            json_t *run = json_object_get(hist, "running");
            CHECK(json_number_value(json_array_get(run, last)) == 249 % 7);
        }
        json_decref(d);
        srv_buf_free(&o);
    }
    srv_con_hist_free(&h);
    /* a full hour, as a freshly opened dashboard asks for it: size and time (printed) */
    CHECK(srv_con_hist_init(&h, SRV_CON_HIST));
    for (int i = 0; i < SRV_CON_HIST + 10; i++) {
        srv_con_sample x = {
            .t = 1.8e9 + i, .gen_tokens = 1234.0 * i, .running = 3, .kv_pct = 41.5f};
        for (int k = 0; k < 3; k++) x.ttft[k] = 12.5f, x.itl[k] = 3.25f, x.e2e[k] = 812.0f;
        srv_con_hist_push(&h, &x);
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    srv_buf o = {0};
    srv_con_hist_json(&h, 0, &o);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK(!o.oom && strstr(o.p, "\"n\":3600"));
    printf("history JSON for %d samples: %zu bytes in %.2f ms\n", SRV_CON_HIST, o.len,
           (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
    srv_buf_free(&o);
    srv_con_hist_free(&h);
}

/* The running server samples once a second: ?since=0 has the history, ?since=<newest> only
 * what came after, plain /console/stats none; /console/info carries the chat's limits. */
static void test_history_endpoint(int port) {
    long st;
    json_t *j = NULL;
    for (int i = 0; i < 60; i++) { /* the first sample closes after ~1 s, the second ~2 s */
        json_decref(j);
        j = get_json(port, "/console/stats?since=0", &st);
        if (json_array_size(json_object_get(json_object_get(j, "history"), "t")) >= 2) break;
        usleep(100000);
    }
    json_t *h = json_object_get(j, "history");
    size_t n = json_array_size(json_object_get(h, "t"));
    CHECK_MSG(st == 200 && n >= 2, "history after 2 s: %zu samples", n);
    const char *cols[] = {"ptps",    "gtps",   "running", "waiting", "kv",   "slots",
                          "pcpu",    "hcpu",   "hmem",    "req",     "e5xx", "r429",
                          "preempt", "ttft50", "itl95",   "e2e99"};
    for (size_t i = 0; i < sizeof(cols) / sizeof(*cols); i++)
        CHECK_MSG(json_array_size(json_object_get(h, cols[i])) == n, "history.%s", cols[i]);
    double newest = json_number_value(json_array_get(json_object_get(h, "t"), n - 1));
    CHECK(newest > 1.7e9); /* unix seconds, not rounded away */
    json_decref(j);
    char url[96];
    snprintf(url, sizeof(url), "/console/stats?since=%.3f", newest);
    j = get_json(port, url, &st);
    CHECK(json_array_size(json_object_get(json_object_get(j, "history"), "t")) <= 1);
    json_decref(j);
    j = get_json(port, "/console/stats", &st);
    CHECK(st == 200 && !json_object_get(j, "history"));
    json_decref(j);
    j = get_json(port, "/console/info", &st);
    json_t *l = json_object_get(j, "limits");
    CHECK(json_is_object(l));
    CHECK(json_number_value(json_object_get(l, "temperature_max")) == 2);
    CHECK(json_integer_value(json_object_get(l, "max_tokens_min")) == 1);
    CHECK(json_integer_value(json_object_get(l, "max_tokens_max")) >= 1);
    json_decref(j);
}

static int count_of(int port, const char *path, long long *total) {
    long st;
    json_t *j = get_json(port, path, &st);
    int n = st == 200 ? (int)json_array_size(json_object_get(j, "requests")) : -1;
    if (total) *total = json_integer_value(json_object_get(j, "total"));
    json_decref(j);
    return n;
}

/* /console/requests' filters, sort and paging (issue 35), on a ring with prompt text. */
static void test_query(int port) {
    http_res r;
    for (int i = 1; i <= 4; i++) {
        char body[128];
        snprintf(body, sizeof(body),
                 "{\"prompt\":\"alpha %d\",\"max_tokens\":%d,\"temperature\":0.5,\"seed\":7}", i,
                 i);
        http_post(port, "/v1/completions", KEY, body, &r);
        CHECK(r.status == 200);
        http_free(&r);
    }
    http_post(port, "/v1/completions", KEY, "{\"prompt\":\"x\",\"temperature\":-5}", &r);
    http_free(&r);
    http_do(port, "GET", "/v1/nothing", AUTH, NULL, 0, &r);
    CHECK(r.status == 404);
    http_free(&r);
    wait_seq(port, 6);
    static const struct {
        const char *q;
        int n;
    } cases[] = {
        {"", 6},
        {"?status=4xx", 2},
        {"?status=err", 2},
        {"?status=200", 4},
        {"?status=2xx&route=completions", 4},
        {"?route=COMPLETIONS", 5},
        {"?route=chat", 0},
        {"?q=alpha%202", 1},
        {"?q=nothing", 1},
        {"?finish=length", 4},
        {"?min_ms=1e9", 0},
        {"?since=1e12", 0},
        {"?until=1", 0},
        {"?status=2xx&offset=1&limit=2", 2},
        {"?status=2xx&offset=3&limit=2", 1},
        {"?offset=99", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        char path[128];
        snprintf(path, sizeof(path), "/console/requests%s", cases[i].q);
        int n = count_of(port, path, NULL);
        CHECK_MSG(n == cases[i].n, "%s: %d rows, want %d", path, n, cases[i].n);
    }
    long long total = 0;
    count_of(port, "/console/requests?status=2xx&offset=1&limit=2", &total);
    CHECK_MSG(total == 4, "total counts every match, not the page: %lld", total);
    long st;
    json_t *j = get_json(port, "/console/requests?status=2xx&sort=output&order=asc", &st);
    json_t *a = json_object_get(j, "requests");
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *e = json_array_get(a, i);
        CHECK_MSG(json_integer_value(json_object_get(e, "output_tokens")) == (json_int_t)i + 1,
                  "sorted by output, ascending: row %zu", i);
        CHECK(json_integer_value(json_object_get(e, "max_tokens")) == (json_int_t)i + 1);
        CHECK(json_number_value(json_object_get(e, "temperature")) == 0.5);
        CHECK(json_integer_value(json_object_get(e, "seed")) == 7);
    }
    json_decref(j);
    j = get_json(port, "/console/requests?sort=total", &st);
    a = json_object_get(j, "requests");
    for (size_t i = 1; i < json_array_size(a); i++)
        CHECK(json_number_value(json_object_get(json_array_get(a, i - 1), "total_ms")) >=
              json_number_value(json_object_get(json_array_get(a, i), "total_ms")));
    json_decref(j);
}

/* A stream whose client leaves early shows as "cancelled". */
static void test_cancelled(int port) {
    http_res r;
    const char *h[] = {"Content-Type: application/json", AUTH[0], NULL};
    const char *body = "{\"prompt\":\"SCRIPT=long\",\"stream\":true,\"max_tokens\":200}";
    CURL *c = curl_easy_init();
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/completions", port);
    struct curl_slist *sl = NULL;
    for (int i = 0; h[i]; i++) sl = curl_slist_append(sl, h[i]);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, sl);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 300L); /* 200 tokens x 20 ms: cut off mid-stream */
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    memset(&r, 0, sizeof(r));
    void *bud[2] = {&r.body, &r.len};
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, (void *)bud);
    curl_easy_perform(c);
    curl_slist_free_all(sl);
    curl_easy_cleanup(c);
    free(r.body);
    json_t *e = NULL;
    long st;
    for (int i = 0; i < 100 && !e; i++) {
        usleep(20000);
        json_t *j = get_json(port, "/console/requests?limit=1", &st);
        json_t *x = json_array_get(json_object_get(j, "requests"), 0);
        const char *fin = json_string_value(json_object_get(x, "finish"));
        if (fin && !strcmp(fin, "cancelled")) e = json_incref(x);
        json_decref(j);
    }
    CHECK_MSG(e != NULL, "cut-off stream not logged as cancelled");
    if (e) CHECK(json_integer_value(json_object_get(e, "output_tokens")) < 200);
    json_decref(e);
}

typedef struct stream_arg {
    int port;
} stream_arg;

static void *one_stream(void *p) {
    stream_arg *a = p;
    http_res r;
    http_post(a->port, "/v1/completions", KEY,
              "{\"prompt\":\"SCRIPT=long\",\"stream\":true,\"max_tokens\":60}", &r);
    http_free(&r);
    return NULL;
}

/* /console/stats round trips while 64 streams run (client-side, includes HTTP). */
static void time_stats(int port, cllm_server *s) {
    enum { N = 64 };
    pthread_t th[N];
    stream_arg a = {port};
    for (int i = 0; i < N; i++) pthread_create(&th[i], NULL, one_stream, &a);
    double t0 = fake_now();
    while (cllm_server_in_flight(s) < N && fake_now() - t0 < 5) usleep(2000);
    int inflight = cllm_server_in_flight(s);
    double best = 1e9, sum = 0;
    int calls = 0;
    for (; calls < 200 && cllm_server_in_flight(s) >= N / 2; calls++) {
        http_res r;
        double t = fake_now();
        http_do(port, "GET", "/console/stats", AUTH, NULL, 0, &r);
        double dt = fake_now() - t;
        CHECK(r.status == 200);
        http_free(&r);
        sum += dt;
        if (dt < best) best = dt;
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    if (calls)
        printf("console stats with %d streams in flight: %d calls, mean %.3f ms, best %.3f ms "
               "(round trip over loopback)\n",
               inflight, calls, sum / calls * 1e3, best * 1e3);
}

/* /console/info says whether the chat may offer image parts: true with a tower, false with the
 * reason without one (the server's own 400 text, or the engine's why_not), null before ready. */
static void vision_yes(void *ctx, cllm_vision_info *vi) {
    (void)ctx;
    vi->present = true;
    vi->patch_size = 16;
}
static void vision_tp(void *ctx, cllm_vision_info *vi) {
    (void)ctx;
    vi->why_not = "images are not served under tensor parallel";
}

static void test_vision_field(fake_engine *f) {
    static const struct {
        void (*op)(void *, cllm_vision_info *);
        int want; /* 1 true, 0 false */
        const char *why;
    } cases[] = {
        {NULL, 0, "this model takes no images (it has no vision tower)"},
        {vision_yes, 1, NULL},
        {vision_tp, 0, "images are not served under tensor parallel"},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        cllm_server_engine ops = fake_ops(f);
        ops.vision = cases[k].op;
        cllm_server_opts o;
        cllm_server_opts_defaults(&o);
        o.port = 0;
        o.api_key = KEY;
        o.stats_interval_s = 0;
        o.access_log = false;
        o.console = true;
        o.max_body_size = 3u << 20;
        cllm_server *s = NULL;
        cllm_error err = {0};
        CHECK_MSG(cllm_server_start(&o, &ops, &s, &err) == CLLM_OK, "%s", err.msg);
        if (!s) continue;
        int port = cllm_server_port(s);
        long st;
        json_t *j = get_json(port, "/console/info", &st);
        CHECK_MSG(st == 200 && json_is_null(json_object_get(j, "vision")) &&
                      json_is_null(json_object_get(j, "vision_why_not")),
                  "case %zu: before ready vision is unknown", k);
        json_decref(j);
        cllm_server_set_ready(s, true);
        j = get_json(port, "/console/info", &st);
        json_t *v = json_object_get(j, "vision");
        const char *why = json_string_value(json_object_get(j, "vision_why_not"));
        CHECK_MSG(json_is_boolean(v) && json_is_true(v) == (cases[k].want == 1),
                  "case %zu: vision %s", k, json_is_true(v) ? "true" : "not true");
        CHECK_MSG(cases[k].why ? why && !strcmp(why, cases[k].why)
                               : json_is_null(json_object_get(j, "vision_why_not")),
                  "case %zu: vision_why_not '%s'", k, why ? why : "(null)");
        json_t *l = json_object_get(j, "limits");
        CHECK(json_integer_value(json_object_get(l, "max_body_size")) == 3 << 20);
        json_decref(j);
        cllm_server_stop(s);
    }
}

int main(void) {
    const char *src = getenv("CLLM_SRC");
    if (!src) src = ".";
    curl_global_init(CURL_GLOBAL_ALL);
    char tokdir[512];
    snprintf(tokdir, sizeof(tokdir), "%s/models/tiny", src);
    fake_engine f;
    if (fake_start(&f, tokdir)) return 1;

    test_hist_ring();
    test_vision_field(&f);
    cllm_server *s = start(&f, true, 3, false);
    if (s) {
        int port = cllm_server_port(s);
        test_page_and_auth(port);
        test_ring(port);
        test_stats(port);
        test_cancelled(port);
        test_history_endpoint(port);
        time_stats(port, s);
        cllm_server_stop(s);
    }
    /* console off: its urls are unknown routes again */
    s = start(&f, false, 0, false);
    if (s) {
        int port = cllm_server_port(s);
        http_res r;
        http_do(port, "GET", "/", AUTH, NULL, 0, &r);
        CHECK_MSG(r.status == 404, "console off: GET / %ld", r.status);
        http_free(&r);
        http_do(port, "GET", "/console/stats", AUTH, NULL, 0, &r);
        CHECK(r.status == 404);
        http_free(&r);
        http_do(port, "GET", "/console/app.js", NULL, NULL, 0, &r);
        CHECK_MSG(r.status == 401, "console off: assets are not public: %ld", r.status);
        http_free(&r);
        cllm_server_stop(s);
    }
    s = start(&f, true, 20, true);
    if (s) {
        test_query(cllm_server_port(s));
        cllm_server_stop(s);
    }
    /* with prompt logging */
    s = start(&f, true, 10, true);
    if (s) {
        int port = cllm_server_port(s);
        http_res r;
        http_post(port, "/v1/chat/completions", KEY,
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"my words\"}],\"max_tokens\":2}",
                  &r);
        CHECK(r.status == 200);
        http_free(&r);
        wait_seq(port, 1);
        long st;
        json_t *j = get_json(port, "/console/requests", &st);
        json_t *e = json_array_get(json_object_get(j, "requests"), 0);
        const char *p = json_string_value(json_object_get(e, "prompt"));
        char *dump = json_dumps(e, 0);
        CHECK_MSG(p && !strcmp(p, "my words"), "logged prompt: %s", dump);
        free(dump);
        json_decref(j);
        /* an image turn logs its text with "[image]" for each image, never the data URL (this
         * engine has no tower: the request is a 400, logged all the same) */
        http_post(port, "/v1/chat/completions", KEY,
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"earlier\"},"
                  "{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":"
                  "{\"url\":\"data:image/png;base64,iVBORw0KGgo=\"}},{\"type\":\"text\","
                  "\"text\":\"what is it\"}]}],\"max_tokens\":2}",
                  &r);
        CHECK_MSG(r.status == 400, "image part without a tower: %ld", r.status);
        http_free(&r);
        wait_seq(port, 2);
        j = get_json(port, "/console/requests", &st);
        e = json_array_get(json_object_get(j, "requests"), 0);
        p = json_string_value(json_object_get(e, "prompt"));
        CHECK_MSG(p && !strcmp(p, "[image] what is it"), "logged image prompt: %s",
                  p ? p : "(none)");
        json_decref(j);
        cllm_server_stop(s);
    }
    fake_stop(&f);
    curl_global_cleanup();
    return test_report("test_console");
}
