/* The web console's routes and request log: serves the embedded single-page app (console/ ->
 * console_assets.c at build time) at / and /console/..., the model card at /console/info, the
 * ring of the last N finished requests at /console/requests, and delegates /console/stats to
 * console_stats.c. server.c calls in from its MHD callbacks (see console.h).
 *
 * Privacy: the ring keeps token counts and timings only; prompt text is copied in only when the
 * operator started the server with --console-log-prompts, and the answer text never is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "server/console_assets.h"
#include "server/console_int.h"

/* Prompt text kept per entry with --console-log-prompts: enough to recognise a request. */
#define PROMPT_KEEP 2000

srv_console *srv_console_new(const cllm_server *s) {
    if (!s->o.console) return NULL;
    srv_console *c = calloc(1, sizeof(*c));
    int cap = s->o.console_requests > 0 ? s->o.console_requests : 1000;
    if (c) c->ring = calloc((size_t)cap, sizeof(srv_con_entry));
    if (!c || !c->ring || !srv_con_hist_init(&c->hist, SRV_CON_HIST)) {
        if (c) free(c->ring);
        free(c);
        LOG_WARN("console: out of memory for a %d-request log; console off", cap);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->hmu, NULL);
    c->cap = cap;
    c->log_prompts = s->o.console_log_prompts;
    return c;
}

void srv_console_free(srv_console *c) {
    if (!c) return;
    for (int i = 0; i < c->cap; i++) free(c->ring[i].prompt_text);
    free(c->ring);
    free(c->card);
    srv_con_hist_free(&c->hist);
    pthread_mutex_destroy(&c->hmu);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void cllm_server_set_card(cllm_server *s, const char *json) {
    srv_console *c = s->console;
    if (!c) return;
    char *d = json ? strdup(json) : NULL;
    pthread_mutex_lock(&c->mu);
    free(c->card);
    c->card = d;
    pthread_mutex_unlock(&c->mu);
}

/* ---- urls ---- */

static bool is_data(const char *url) {
    return !strcmp(url, "/console/stats") || !strcmp(url, "/console/info") ||
           !strcmp(url, "/console/requests");
}

static const srv_asset *find_asset(const char *url) {
    const char *name;
    if (!strcmp(url, "/") || !strcmp(url, "/console") || !strcmp(url, "/console/"))
        name = "index.html";
    else if (!strncmp(url, "/console/", 9))
        name = url + 9;
    else
        return NULL;
    /* exact names from the build's table: no path is ever built from the url */
    for (int i = 0; i < srv_console_n_assets; i++)
        if (!strcmp(srv_console_assets[i].name, name)) return &srv_console_assets[i];
    return NULL;
}

bool srv_console_owns(const cllm_server *s, const char *url) {
    return s->console &&
           (!strcmp(url, "/") || !strcmp(url, "/console") || !strncmp(url, "/console/", 9));
}

bool srv_console_public(const cllm_server *s, const char *url) {
    return srv_console_owns(s, url) && !is_data(url);
}

static const char *ctype_of(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!strncmp(name, "vendor/LICENSE", 14)) return "text/plain; charset=utf-8";
    if (!dot) return "application/octet-stream";
    if (!strcmp(dot, ".html")) return "text/html; charset=utf-8";
    if (!strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
    if (!strcmp(dot, ".css")) return "text/css; charset=utf-8";
    if (!strcmp(dot, ".svg")) return "image/svg+xml";
    if (!strcmp(dot, ".png")) return "image/png";
    if (!strcmp(dot, ".json")) return "application/json";
    return "application/octet-stream";
}

/* ---- responses ---- */

/* body: static (persistent) or malloc'd (must_free). Same bookkeeping as server.c's send_buf. */
static enum MHD_Result reply(srv_req *r, unsigned status, const char *ctype, const void *body,
                             size_t len, bool must_free, bool page) {
    cllm_server *s = r->srv;
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, (void *)(body ? body : ""),
        body && must_free ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        if (must_free) free((void *)body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", ctype);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    if (page) {
        /* everything the page runs is ours and same-origin; model output can never execute */
        MHD_add_response_header(resp, "Content-Security-Policy",
                                "default-src 'none'; script-src 'self'; style-src 'self'; "
                                "img-src 'self' data:; connect-src 'self'; "
                                "frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
        MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
    } else {
        MHD_add_response_header(resp, "Cache-Control", "no-store");
    }
    if (__atomic_load_n(&s->draining, __ATOMIC_ACQUIRE))
        MHD_add_response_header(resp, "Connection", "close");
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->status = status;
    r->bytes_sent = len;
    srv_metrics_http(&s->m, status);
    return ret;
}

static enum MHD_Result reply_json(srv_req *r, unsigned status, json_t *o) {
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!t) return MHD_NO;
    return reply(r, status, "application/json", t, strlen(t), true, false);
}

static enum MHD_Result reply_err(srv_req *r, unsigned status, const char *msg) {
    return reply_json(r, status,
                      json_pack("{s:{s:s, s:s, s:n, s:i}}", "error", "message", msg, "type",
                                status == 404 ? "NotFoundError" : "invalid_request_error", "param",
                                "code", (json_int_t)status));
}

/* /console/info: the model card plus what the server and engine know now. */
static enum MHD_Result route_info(srv_req *r) {
    cllm_server *s = r->srv;
    srv_console *c = s->console;
    cllm_engine_stats st;
    memset(&st, 0, sizeof(st));
    if (s->ops.stats) s->ops.stats(s->ops.ctx, &st);
    pthread_mutex_lock(&c->mu);
    json_t *card = c->card ? json_loads(c->card, 0, NULL) : NULL;
    pthread_mutex_unlock(&c->mu);
    json_t *o = json_pack(
        "{s:s, s:s, s:b, s:b, s:i, s:i, s:i, s:I, s:I, s:i, s:b, s:i, s:b, s:i, s:f}", "model",
        s->model_name, "version", CLLM_VERSION, "ready",
        __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != 0, "draining",
        __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE) != 0, "max_model_len", st.max_model_len,
        "block_size", st.block_size, "state_slots_total", st.state_slots_total, "kv_blocks_total",
        (json_int_t)st.kv_blocks_total, "kv_tokens_total",
        (json_int_t)(st.kv_blocks_total * (uint64_t)(st.block_size > 0 ? st.block_size : 0)),
        "requests_log_size", c->cap, "log_prompts", c->log_prompts, "max_num_queued_reqs",
        s->o.max_num_queued_reqs, "prefix_caching", st.prefix_caching, "window_s",
        (int)SRV_CON_WINDOW_S, "started", (double)s->started);
    if (!o) {
        json_decref(card);
        return MHD_NO;
    }
    json_object_set_new(o, "card", card ? card : json_object());
    /* what the chat's settings are checked against before a request is sent: the API's own
     * bounds (openai.c parse_sampling / max_tokens), except temperature, which the API takes up
     * to 100 but the console offers in OpenAI's 0..2 */
    int mml = st.max_model_len;
    json_object_set_new(o, "limits",
                        json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:i}", "max_model_len", mml,
                                  "max_tokens_min", 1, "max_tokens_max",
                                  mml > 1 ? mml - 1 : 1 << 30, "temperature_min", 0.0,
                                  "temperature_max", 2.0, "top_p_min", 0.01, "top_p_max", 1.0,
                                  "max_n", s->o.max_n));
    return reply_json(r, 200, o);
}

/* GET /console/requests[?after=SEQ][&limit=N]: newest first, at most limit (default 200), only
 * entries with seq > after (the page polls with the last seq it has). */
static enum MHD_Result route_requests(srv_req *r) {
    srv_console *c = r->srv->console;
    const char *a = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "after");
    const char *l = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "limit");
    uint64_t after = a ? strtoull(a, NULL, 10) : 0;
    long limit = l ? strtol(l, NULL, 10) : 200;
    if (limit <= 0 || limit > c->cap) limit = c->cap;
    json_t *arr = json_array();
    if (!arr) return MHD_NO;
    pthread_mutex_lock(&c->mu);
    uint64_t last = c->last_seq, oldest = last > (uint64_t)c->cap ? last - (uint64_t)c->cap + 1 : 1;
    for (uint64_t q = last; q >= oldest && q > after && limit > 0 && q > 0; q--, limit--) {
        const srv_con_entry *e = &c->ring[(q - 1) % (uint64_t)c->cap];
        json_t *o =
            json_pack("{s:I, s:f, s:s, s:s, s:s, s:i, s:b, s:b, s:i, s:f, s:s}", "seq",
                      (json_int_t)e->seq, "time", e->t_wall, "method", e->method, "route", e->path,
                      "id", e->id, "status", (int)e->status, "gen", e->gen, "stream", e->stream,
                      "n", e->n, "total_ms", e->total_s * 1e3, "finish", e->finish);
        if (!o) continue;
        if (e->gen) {
            json_object_set_new(o, "prompt_tokens", json_integer(e->prompt));
            json_object_set_new(o, "cached_tokens", json_integer(e->cached));
            json_object_set_new(o, "output_tokens", json_integer(e->output));
            json_object_set_new(o, "ttft_ms",
                                e->ttft_s >= 0 ? json_real(e->ttft_s * 1e3) : json_null());
        }
        if (e->prompt_text) json_object_set_new(o, "prompt", json_string(e->prompt_text));
        json_array_append_new(arr, o);
    }
    pthread_mutex_unlock(&c->mu);
    return reply_json(r, 200,
                      json_pack("{s:I, s:i, s:b, s:o}", "last_seq", (json_int_t)last, "capacity",
                                c->cap, "log_prompts", c->log_prompts, "requests", arr));
}

enum MHD_Result srv_console_dispatch(srv_req *r) {
    cllm_server *s = r->srv;
    const char *url = r->url;
    if (strcmp(r->method, "GET") && strcmp(r->method, "HEAD")) return reply_err(r, 405, "use GET");
    if (!strcmp(url, "/console/stats")) {
        /* ?since=T (unix seconds; 0 = all): also the history ring's samples after T */
        const char *since = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "since");
        size_t n = 0;
        char *t = since ? srv_console_stats_since_json(s, strtod(since, NULL), &n)
                        : srv_console_stats_json(s, &n);
        if (!t) return MHD_NO;
        return reply(r, 200, "application/json", t, n, true, false);
    }
    if (!strcmp(url, "/console/info")) return route_info(r);
    if (!strcmp(url, "/console/requests")) return route_requests(r);
    const srv_asset *a = find_asset(url);
    if (!a) return reply_err(r, 404, "no such console file");
    return reply(r, 200, ctype_of(a->name), a->data, a->len, false, true);
}

/* ---- the request log ---- */

static bool skip_url(const cllm_server *s, const char *url) {
    return srv_console_owns(s, url) || (srv_route_flags(url) & SRV_RT_PROBE);
}

/* The user's words of the request: the prompt string, or the last user message of a chat. */
static char *prompt_of(srv_req *r) {
    if (r->route != SRV_CHAT)
        return r->gen.prompt_text ? strndup(r->gen.prompt_text, PROMPT_KEEP) : NULL;
    if (!r->body.len || r->body_too_large) return NULL;
    json_t *b = json_loadb(r->body.p, r->body.len, 0, NULL);
    json_t *msgs = json_object_get(b, "messages");
    char *out = NULL;
    for (size_t i = json_array_size(msgs); i-- > 0 && !out;) {
        json_t *m = json_array_get(msgs, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *ct = json_object_get(m, "content");
        if (role && !strcmp(role, "user") && json_is_string(ct))
            out = strndup(json_string_value(ct), PROMPT_KEEP);
    }
    json_decref(b);
    return out;
}

static const char *const finish_names[5] = {"", "stop", "length", "abort", "error"};

void srv_console_record(srv_req *r, bool completed_ok) {
    cllm_server *s = r->srv;
    srv_console *c = s->console;
    if (!c || !r->status || skip_url(s, r->url) || !strcmp(r->method, "OPTIONS")) return;
    srv_con_entry e;
    memset(&e, 0, sizeof(e));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    e.t_wall = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
    e.t_mono = srv_now();
    snprintf(e.method, sizeof(e.method), "%.7s", r->method);
    snprintf(e.path, sizeof(e.path), "%.127s", r->url);
    snprintf(e.id, sizeof(e.id), "%.47s", r->id);
    e.status = r->status;
    e.total_s = e.t_mono - r->t_arrival;
    e.prompt = e.cached = e.output = -1;
    e.ttft_s = -1;
    e.gen = r->submitted && r->choices;
    if (e.gen) {
        e.n = r->gen.n;
        e.stream = r->gen.stream;
        e.prompt = r->prompt_tokens ? r->prompt_tokens : (int)r->gen.prompt.n;
        e.cached = r->cached_tokens;
        e.output = 0;
        for (int i = 0; i < r->gen.n; i++) e.output += r->choices[i].completion_tokens;
        pthread_mutex_lock(&r->mu);
        if (r->first_token_seen) e.ttft_s = r->t_first_token - r->t_arrival;
        bool engine_done = r->n_finished_engine >= r->gen.n, watched = r->watch_cancelled;
        pthread_mutex_unlock(&r->mu);
        cllm_finish f = r->choices[0].finish;
        /* the client left before the end: the server cancels it right after this, or the
         * disconnect watch already did (then the engine's final says abort) */
        if (watched ||
            (!completed_ok && (!engine_done || f == CLLM_FINISH_NONE || f == CLLM_FINISH_ABORT)))
            snprintf(e.finish, sizeof(e.finish), "cancelled");
        else
            snprintf(e.finish, sizeof(e.finish), "%s", (unsigned)f < 5 ? finish_names[f] : "error");
    }
    if (c->log_prompts && r->is_gen) e.prompt_text = prompt_of(r);
    pthread_mutex_lock(&c->mu);
    e.seq = ++c->last_seq;
    srv_con_entry *slot = &c->ring[(e.seq - 1) % (uint64_t)c->cap];
    char *old = slot->prompt_text;
    *slot = e;
    pthread_mutex_unlock(&c->mu);
    free(old);
}
