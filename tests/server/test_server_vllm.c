/* What a vLLM operator checks on the HTTP layer, against the scripted fake engine
 * (tests/lib/test_server_fake.h):
 *  - streaming: no SSE bytes before the first generated token; the chat role chunk goes out
 *    together with it (the engine is held paused while the client waits);
 *  - metrics: a scrape during a long generation shows vllm:generation_tokens_total growing while
 *    the request still runs; the vLLM v1 histograms and process metrics are there; bucket bounds
 *    are short (le="0.005"); probes (/metrics, /health) are not counted as HTTP traffic;
 *  - served names: aliases and the model path are accepted as `model`, /v1/models lists them;
 *  - llama-server's /slots?fail_on_no_slot=1 is 503 while no place is idle, 200 otherwise. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "test_server_client.h"
#include "test_server_fake.h"

typedef struct stream_arg {
    int port;
    const char *body;
    atomic_size_t bytes; /* body bytes received so far */
    char *out;
    size_t len;
} stream_arg;

static size_t stream_sink(char *p, size_t sz, size_t n, void *ud) {
    stream_arg *a = ud;
    size_t add = sz * n;
    char *nb = realloc(a->out, a->len + add + 1);
    if (!nb) return 0;
    memcpy(nb + a->len, p, add);
    a->len += add;
    nb[a->len] = 0;
    a->out = nb;
    atomic_fetch_add(&a->bytes, add);
    return add;
}

static void *stream_main(void *arg) {
    stream_arg *a = arg;
    CURL *c = curl_easy_init();
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/v1/chat/completions", a->port);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, a->body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, stream_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_perform(c);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return NULL;
}

static void test_role_with_first_token(int port, fake_engine *f) {
    pthread_mutex_lock(&f->mu);
    f->paused = true; /* the request is queued; no token can come */
    pthread_mutex_unlock(&f->mu);
    stream_arg a = {.port = port,
                    .body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":"
                            "true,\"max_tokens\":4}"};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, stream_main, &a) == 0);
    usleep(400 * 1000); /* time enough for any early chunk to arrive */
    size_t early = atomic_load(&a.bytes);
    CHECK_MSG(early == 0, "%zu SSE bytes before the first token", early);
    pthread_mutex_lock(&f->mu);
    f->paused = false;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(th, NULL);
    /* first event: the role chunk; the next one carries the first token's text */
    const char *ev1 = a.out ? strstr(a.out, "data: ") : NULL;
    const char *ev2 = ev1 ? strstr(ev1 + 6, "data: ") : NULL;
    CHECK_MSG(ev1 && strstr(ev1, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}") &&
                  strstr(ev1, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}") < ev2,
              "first event is not the role chunk: %s", a.out ? a.out : "(nothing)");
    const char *end2 = ev2 ? strstr(ev2, "\n\n") : NULL;
    char *e2 = ev2 ? strndup(ev2, end2 ? (size_t)(end2 - ev2) : strlen(ev2)) : NULL;
    CHECK_MSG(e2 && !strstr(e2, "\"role\"") && !strstr(e2, "\"delta\":{}") &&
                  (strstr(e2, "\"content\":\"") || strstr(e2, "\"reasoning_content\":\"")),
              "second event has no token text: %s", e2 ? e2 : "(none)");
    free(e2);
    free(a.out);
}

/* The value of the first sample line of `name` in a /metrics text; -1 when absent. */
static double metric_value(const char *text, const char *name) {
    char pat[128];
    snprintf(pat, sizeof(pat), "\n%s{", name);
    const char *p = strstr(text, pat);
    if (!p) return -1;
    p = strchr(p + 1, '}');
    return p ? strtod(p + 1, NULL) : -1;
}

static double scrape(int port, const char *name, double *running) {
    http_res r;
    http_do(port, "GET", "/metrics", NULL, NULL, 0, &r);
    double v = metric_value(r.body, name);
    if (running) *running = metric_value(r.body, "vllm:num_requests_running");
    http_free(&r);
    return v;
}

typedef struct post_arg {
    int port;
    const char *body;
    long status;
} post_arg;

static void *post_main(void *arg) {
    post_arg *a = arg;
    http_res r;
    http_post(a->port, "/v1/completions", NULL, a->body, &r);
    a->status = r.status;
    http_free(&r);
    return NULL;
}

static void test_growing_counters(int port) {
    double g0 = scrape(port, "vllm:generation_tokens_total", NULL);
    /* SCRIPT=long: 20 ms per token; 100 tokens take 2 s */
    post_arg a = {port, "{\"prompt\":\"SCRIPT=long\",\"max_tokens\":100}", 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, post_main, &a) == 0);
    double g1 = g0, run1 = 0;
    for (int i = 0; i < 200 && g1 <= g0; i++) {
        usleep(10 * 1000);
        g1 = scrape(port, "vllm:generation_tokens_total", &run1);
    }
    usleep(200 * 1000);
    double run2 = 0, g2 = scrape(port, "vllm:generation_tokens_total", &run2);
    CHECK_MSG(g1 > g0 && run1 == 1, "no tokens counted while running: %g -> %g (running %g)", g0,
              g1, run1);
    CHECK_MSG(g2 > g1 && run2 == 1,
              "counter did not grow during the generation: %g -> %g "
              "(running %g)",
              g1, g2, run2);
    pthread_join(th, NULL);
    CHECK(a.status == 200);
    double g3 = scrape(port, "vllm:generation_tokens_total", NULL);
    CHECK_MSG(g3 == g0 + 100, "after the request: %g, want %g", g3, g0 + 100);
    double p = scrape(port, "vllm:prompt_tokens_total", NULL);
    CHECK_MSG(p > 0, "prompt tokens %g", p);
}

static void test_metric_names(int port) {
    http_res r;
    http_do(port, "GET", "/metrics", NULL, NULL, 0, &r);
    static const char *const names[] = {"vllm:request_prefill_time_seconds_bucket{",
                                        "vllm:request_decode_time_seconds_bucket{",
                                        "vllm:request_inference_time_seconds_count{",
                                        "vllm:request_time_per_output_token_seconds_sum{",
                                        "vllm:request_prefill_kv_computed_tokens_bucket{",
                                        "vllm:request_params_n_bucket{",
                                        "vllm:request_params_max_tokens_bucket{",
                                        "le=\"0.005\"",
                                        "\nprocess_cpu_seconds_total ",
                                        "\nprocess_resident_memory_bytes ",
                                        "\nprocess_start_time_seconds ",
                                        "\nprocess_open_fds ",
                                        "\ncllm_host_cpu_seconds_total{mode=\"idle\"} ",
                                        "\ncllm_host_memory_available_bytes ",
                                        NULL};
    for (int i = 0; names[i]; i++)
        CHECK_MSG(strstr(r.body, names[i]) != NULL, "/metrics lacks %s", names[i]);
    const char *lf = strstr(r.body, "000000000001\"");
    CHECK_MSG(!lf, "a long bucket bound in /metrics: %.80s", lf ? lf - 40 : "");
    /* the fake engine's timings: scheduled 1.001, first token 1.01, finished 1.1 */
    CHECK_MSG(metric_value(r.body, "vllm:request_prefill_time_seconds_count") > 0,
              "no prefill time observed");
    http_free(&r);
    /* probes are not traffic: scraping does not move cllm_http_responses_total{code="200"} */
    http_do(port, "GET", "/metrics", NULL, NULL, 0, &r);
    const char *a = strstr(r.body, "cllm_http_responses_total{");
    char *c1 = a ? strndup(a, 200) : NULL;
    http_free(&r);
    http_do(port, "GET", "/health", NULL, NULL, 0, &r);
    http_free(&r);
    http_do(port, "GET", "/metrics", NULL, NULL, 0, &r);
    const char *b = strstr(r.body, "cllm_http_responses_total{");
    CHECK_MSG(c1 && b && !strncmp(c1, b, strlen(c1)), "scrapes counted as responses");
    free(c1);
    http_free(&r);
}

static void test_names(int port) {
    http_res r;
    http_do(port, "GET", "/v1/models", NULL, NULL, 0, &r);
    CHECK_MSG(strstr(r.body, "\"id\":\"tiny\"") && strstr(r.body, "\"id\":\"alias2\""),
              "models: %s", r.body);
    http_free(&r);
    const char *ok[] = {"tiny", "alias2", "models/tiny", "models/tiny/"};
    for (int i = 0; i < 4; i++) {
        char body[200];
        snprintf(body, sizeof(body), "{\"model\":\"%s\",\"prompt\":\"hi\",\"max_tokens\":2}",
                 ok[i]);
        http_post(port, "/v1/completions", NULL, body, &r);
        CHECK_MSG(r.status == 200 && strstr(r.body, "\"model\":\"tiny\""), "model %s: %ld %s",
                  ok[i], r.status, r.body);
        http_free(&r);
    }
    http_post(port, "/v1/completions", NULL, "{\"model\":\"nope\",\"prompt\":\"hi\"}", &r);
    CHECK(r.status == 404);
    http_free(&r);
}

/* llama-server's GET /slots?fail_on_no_slot=1: 503 while every place runs a request (one place
 * here: no --max-num-seqs), 200 when one is idle; without the parameter always 200. */
static void test_slots_full(int port, fake_engine *f) {
    http_res r;
    http_do(port, "GET", "/slots?fail_on_no_slot=1", NULL, NULL, 0, &r);
    CHECK_MSG(r.status == 200, "idle: /slots?fail_on_no_slot=1 answered %ld", r.status);
    http_free(&r);
    pthread_mutex_lock(&f->mu);
    f->paused = true; /* the request holds its place, no token comes */
    pthread_mutex_unlock(&f->mu);
    post_arg a = {port, "{\"prompt\":\"hi\",\"max_tokens\":4}", 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, post_main, &a) == 0);
    bool busy = false;
    for (int i = 0; i < 300 && !busy; i++) {
        http_do(port, "GET", "/slots", NULL, NULL, 0, &r);
        busy = r.status == 200 && r.body && strstr(r.body, "\"is_processing\":true");
        http_free(&r);
        if (!busy) usleep(10 * 1000);
    }
    CHECK_MSG(busy, "/slots never showed the running request");
    http_do(port, "GET", "/slots?fail_on_no_slot=1", NULL, NULL, 0, &r);
    CHECK_MSG(r.status == 503 && r.body && strstr(r.body, "no slot available"),
              "all places busy: /slots?fail_on_no_slot=1 answered %ld %s", r.status,
              r.body ? r.body : "");
    http_free(&r);
    http_do(port, "GET", "/slots?fail_on_no_slot=0", NULL, NULL, 0, &r);
    CHECK_MSG(r.status == 200, "fail_on_no_slot=0 answered %ld", r.status);
    http_free(&r);
    pthread_mutex_lock(&f->mu);
    f->paused = false;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(th, NULL);
    CHECK(a.status == 200);
    long st = 0;
    for (int i = 0; i < 300 && st != 200; i++) { /* the answered request leaves the engine */
        http_do(port, "GET", "/slots?fail_on_no_slot=1", NULL, NULL, 0, &r);
        st = r.status;
        http_free(&r);
        if (st != 200) usleep(10 * 1000);
    }
    CHECK_MSG(st == 200, "after the request: /slots?fail_on_no_slot=1 answered %ld", st);
}

int main(void) {
    const char *src = getenv("CLLM_SRC");
    if (!src) src = ".";
    curl_global_init(CURL_GLOBAL_ALL);
    char tokdir[512];
    snprintf(tokdir, sizeof(tokdir), "%s/models/tiny", src);
    fake_engine f;
    if (fake_start(&f, tokdir)) return 1;
    cllm_server_engine ops = fake_ops(&f);
    cllm_server_opts o;
    cllm_server_opts_defaults(&o);
    o.port = 0;
    o.served_model_name = "tiny";
    const char *aliases[] = {"alias2"};
    o.model_aliases = aliases;
    o.n_model_aliases = 1;
    o.model_dir = "models/tiny";
    o.stats_interval_s = 0;
    o.access_log = false;
    cllm_server *s;
    cllm_error err = {0};
    CHECK_MSG(cllm_server_start(&o, &ops, &s, &err) == CLLM_OK, "%s", err.msg);
    int port = cllm_server_port(s);
    cllm_server_set_ready(s, true);
    test_role_with_first_token(port, &f);
    test_growing_counters(port);
    test_metric_names(port);
    test_names(port);
    test_slots_full(port, &f);
    cllm_server_stop(s);
    fake_stop(&f);
    curl_global_cleanup();
    return test_report("test_server_vllm");
}
