/* Allocation-failure walk (base/fault.h) over the real engine and server on models/tiny:
 *  - engine create (model load, tokenizer load, KV/state pools, step thread): every armed
 *    failure gives an error status with a message, or a working engine (a failure it tolerates);
 *  - HTTP requests against a running server: completions, streamed completions with n=2 and
 *    stop strings, chat (template render), streamed chat, and a fresh long prompt (prefix-cache
 *    insert): each armed failure answers a valid HTTP response (200, or an error status with an
 *    OpenAI error object; a stream ends with [DONE] or an error event), and the next request
 *    without a fault gets its full answer.
 * Leaks are ASan's job: build with -DCLLM_SANITIZE=ON -DCLLM_FAULT_INJECT=ON (a LeakSanitizer
 * report fails the test). Without CLLM_FAULT_INJECT the test only says it was skipped.
 *
 * Points: the first WALK_HEAD allocations of an operation are each failed; past them
 * CLLM_FAULT_WALK_POINTS (default 120) evenly spread ones; CLLM_FAULT_WALK_FULL=1 walks every
 * allocation (minutes). The count of points covered is printed per operation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "test_server_client.h"
#include "base/fault.h"
#include "engine/engine.h"
#include "server/server.h"

#define WALK_HEAD 40

static long g_points_total;

static void engine_opts(cllm_engine_opts *o, const char *dir) {
    cllm_engine_opts_defaults(o);
    o->model_dir = dir;
    o->n_threads = 1;
    o->max_num_seqs = 4;
    o->max_model_len = 512;
    o->kv_cache_bytes = 2u << 20;
    o->enable_prefix_caching = true;
}

/* The n-th point to fail (1-based) of an operation that made `total` allocations. */
static long point(int i, long total, int budget, bool full) {
    if (full || total <= WALK_HEAD + budget) return i + 1;
    if (i < WALK_HEAD) return i + 1;
    return WALK_HEAD + 1 + (long)((double)(i - WALK_HEAD) * (double)(total - WALK_HEAD) / budget);
}

static int walk_points(long total, int budget, bool full) {
    long n = full || total <= WALK_HEAD + budget ? total : WALK_HEAD + budget;
    return (int)n;
}

static void walk_engine_create(const char *dir, int budget, bool full) {
    cllm_engine_opts o;
    engine_opts(&o, dir);
    cllm_error err = {0};
    cllm_engine *e = NULL;
    long c0 = cllm_fault_count();
    CHECK_MSG(cllm_engine_create(&o, &e, &err) == CLLM_OK, "engine create: %s", err.msg);
    long total = cllm_fault_count() - c0;
    cllm_engine_free(e);
    int np = walk_points(total, budget, full), covered = 0, failed_ok = 0;
    for (int i = 0; i < np; i++) {
        long n = point(i, total, budget, full);
        memset(&err, 0, sizeof(err));
        e = NULL;
        cllm_fault_arm(n, 1);
        cllm_status st = cllm_engine_create(&o, &e, &err);
        bool fired = cllm_fault_fired();
        cllm_fault_arm(0, 0);
        if (!fired) {
            if (e) cllm_engine_free(e);
            break;
        }
        covered++;
        if (st == CLLM_OK) {
            CHECK_MSG(e != NULL, "n=%ld: OK without an engine", n);
            cllm_engine_free(e);
        } else {
            failed_ok++;
            CHECK_MSG(err.msg[0] != 0,
                      "engine create, allocation %ld failed: status %s, no message", n,
                      cllm_status_name(st));
            CHECK_MSG(e == NULL, "engine create, allocation %ld: error but an engine", n);
        }
    }
    fprintf(stderr, "  engine create: %ld allocations, %d points failed, %d gave an error status\n",
            total, covered, failed_ok);
    g_points_total += covered;
}

typedef struct req_kind {
    const char *name, *path, *body; /* body: printf format with one %ld (made unique per run) */
    bool stream;
    const char *want; /* in a good answer */
} req_kind;

static const req_kind KINDS[] = {
    {"completions", "/v1/completions",
     "{\"prompt\":\"Once upon a time %ld\",\"max_tokens\":6,\"ignore_eos\":true}", false,
     "\"finish_reason\":\"length\""},
    {"completions stream n=2 stop", "/v1/completions",
     "{\"prompt\":\"The river %ld\",\"max_tokens\":6,\"n\":2,\"stop\":[\"zzz\"],\"stream\":true,"
     "\"ignore_eos\":true}",
     true, "[DONE]"},
    {"chat (template render)", "/v1/chat/completions",
     "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief %ld.\"},{\"role\":\"user\","
     "\"content\":\"hello\"}],\"max_tokens\":5}",
     false, "\"object\":\"chat.completion\""},
    {"chat stream", "/v1/chat/completions",
     "{\"messages\":[{\"role\":\"user\",\"content\":\"tell me %ld\"}],\"max_tokens\":5,"
     "\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
     true, "[DONE]"},
    {"long prompt (prefix-cache insert)", "/v1/completions",
     "{\"prompt\":\"%ld the quiet garden under the long road of the city at night, the storm over "
     "the stone light and the river of the night garden, quiet stone, long city light, under "
     "the storm of the road\",\"max_tokens\":3}",
     false, "\"finish_reason\""},
};

static long g_uniq;

static void do_req(int port, const req_kind *k, http_res *r) {
    char body[1024];
    snprintf(body, sizeof(body), k->body, ++g_uniq);
    http_post(port, k->path, NULL, body, r);
}

/* The answer to a request made under an armed fault is one a client can handle. */
static void check_answer(const req_kind *k, long n, const http_res *r) {
    if (r->status == 200) {
        if (k->stream)
            CHECK_MSG(strstr(r->body, "[DONE]") || strstr(r->body, "\"error\""),
                      "%s, allocation %ld failed: stream cut without [DONE] or error: %.300s",
                      k->name, n, r->body);
        else
            CHECK_MSG(strstr(r->body, "\"choices\"") || strstr(r->body, "\"error\""),
                      "%s, allocation %ld failed: 200 without choices: %.300s", k->name, n,
                      r->body);
        return;
    }
    CHECK_MSG(r->status == 400 || r->status == 500 || r->status == 503 || r->status == 429,
              "%s, allocation %ld failed: HTTP %ld (0 = no response): %.300s", k->name, n,
              r->status, r->body);
    if (r->status)
        CHECK_MSG(strstr(r->body, "\"error\"") != NULL,
                  "%s, allocation %ld failed: "
                  "HTTP %ld without an error object: %.300s",
                  k->name, n, r->status, r->body);
}

static void walk_requests(int port, int budget, bool full) {
    for (size_t ki = 0; ki < sizeof(KINDS) / sizeof(KINDS[0]); ki++) {
        const req_kind *k = &KINDS[ki];
        http_res r;
        long c0 = cllm_fault_count();
        do_req(port, k, &r);
        CHECK_MSG(r.status == 200 && strstr(r.body, k->want), "%s: %ld %.300s", k->name, r.status,
                  r.body);
        http_free(&r);
        usleep(20000); /* the engine thread's clean-up after the final event */
        long total = cllm_fault_count() - c0;
        int np = walk_points(total, budget, full), covered = 0, errors = 0;
        for (int i = 0; i < np; i++) {
            long n = point(i, total, budget, full);
            cllm_fault_arm(n, 1);
            do_req(port, k, &r);
            usleep(5000);
            bool fired = cllm_fault_fired();
            cllm_fault_arm(0, 0);
            check_answer(k, n, &r);
            if (r.status != 200 || strstr(r.body, "\"error\"")) errors++;
            http_free(&r);
            if (fired) covered++;
            /* the next request without a fault gets its full answer */
            do_req(port, k, &r);
            CHECK_MSG(r.status == 200 && strstr(r.body, k->want),
                      "%s after allocation %ld failed: next request %ld %.300s", k->name, n,
                      r.status, r.body);
            http_free(&r);
        }
        fprintf(stderr, "  %-36s %ld allocations, %d points failed, %d answered an error\n",
                k->name, total, covered, errors);
        g_points_total += covered;
    }
}

int main(void) {
    if (!cllm_fault_enabled()) {
        fprintf(stderr, "test_fault_walk: skipped (not a -DCLLM_FAULT_INJECT=ON build)\n");
        CHECK(1);
        return test_report("test_fault_walk");
    }
    const char *src = getenv("CLLM_SRC");
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/models/tiny", src ? src : ".");
    const char *bp = getenv("CLLM_FAULT_WALK_POINTS");
    int budget = bp ? atoi(bp) : 120;
    const char *fp = getenv("CLLM_FAULT_WALK_FULL");
    bool full = fp && *fp == '1';
    if (budget < 1) budget = 1;
    walk_engine_create(dir, budget, full); /* on this thread: it counts */

    cllm_fault_exempt_thread(true); /* now this thread is the client: only server/engine count */
    curl_global_init(CURL_GLOBAL_ALL);

    cllm_engine_opts o;
    engine_opts(&o, dir);
    cllm_error err = {0};
    cllm_engine *e = NULL;
    CHECK_MSG(cllm_engine_create(&o, &e, &err) == CLLM_OK, "engine: %s", err.msg);
    if (!e) return test_report("test_fault_walk");
    cllm_engine *holder = NULL;
    cllm_server_engine ops;
    cllm_server_engine_real(&ops, &holder);
    cllm_server_opts so;
    cllm_server_opts_defaults(&so);
    so.port = 0;
    so.served_model_name = "tiny";
    so.access_log = false;
    so.stats_interval_s = 0;
    cllm_server *s = NULL;
    CHECK_MSG(cllm_server_start(&so, &ops, &s, &err) == CLLM_OK, "server: %s", err.msg);
    if (s) {
        holder = e;
        cllm_server_set_ready(s, true);
        walk_requests(cllm_server_port(s), budget, full);
        cllm_server_drain(s, 10);
        cllm_server_stop(s);
    }
    cllm_engine_free(e);
    curl_global_cleanup();
    fprintf(stderr, "test_fault_walk: %ld injection points covered\n", g_points_total);
    return test_report("test_fault_walk");
}
