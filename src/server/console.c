/* The web console's routes and request log: serves the embedded single-page app (console/ ->
 * console_assets.c at build time) at / and /console/..., the model card at /console/info, the
 * ring of the last N finished requests at /console/requests, and delegates /console/stats to
 * console_stats.c. server.c calls in from its MHD callbacks (see srv_console_int.h).
 *
 * Privacy: the ring keeps token counts and timings only; prompt text is copied in only when the
 * operator started the server with --console-log-prompts, and the answer text never is. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "server/console_assets_int.h"
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
    /* whether the chat offers image parts: s->vision is written only while not ready
     * (server.c load_model_info), so before ready it is unknown (null) and the page asks again
     * once the server is ready */
    bool ready = __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != 0;
    json_object_set_new(o, "vision", ready ? json_boolean(s->vision.present) : json_null());
    json_object_set_new(o, "vision_why_not",
                        !ready || s->vision.present ? json_null()
                        : s->vision.why_not         ? json_string(s->vision.why_not)
                                                    : json_string(SRV_NO_VISION));
    /* what the chat's settings are checked against before a request is sent: the API's own
     * bounds (openai.c parse_sampling / max_tokens), except temperature, which the API takes up
     * to 100 but the console offers in OpenAI's 0..2 */
    const cllm_console_alerts *al = &s->o.console_alerts;
    json_object_set_new(
        o, "thresholds",
        al->warn_pct > 0
            ? json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s}", "warn_pct", al->warn_pct,
                        "crit_pct", al->crit_pct, "sustain_s", al->sustain_s, "err_warn_pct",
                        al->err_warn_pct, "err_crit_pct", al->err_crit_pct, "mem_warn_pct",
                        al->mem_warn_pct, "mem_crit_pct", al->mem_crit_pct, "source", "cllm doctor")
            : json_null());
    int mml = st.max_model_len;
    json_object_set_new(o, "limits",
                        json_pack("{s:i, s:i, s:i, s:f, s:f, s:f, s:f, s:i}", "max_model_len", mml,
                                  "max_tokens_min", 1, "max_tokens_max",
                                  mml > 1 ? mml - 1 : 1 << 30, "temperature_min", 0.0,
                                  "temperature_max", 2.0, "top_p_min", 0.01, "top_p_max", 1.0,
                                  "max_n", s->o.max_n));
    /* images travel base64 inside the JSON body: the chat checks a request against this first */
    json_object_set_new(json_object_get(o, "limits"), "max_body_size",
                        json_integer((json_int_t)s->o.max_body_size));
    return reply_json(r, 200, o);
}

/* ---- /console/requests: filter, sort, page ---- */

typedef struct req_query {
    uint64_t after;                 /* only seq > after */
    unsigned status_lo, status_hi;  /* 0, 0 = any */
    const char *route, *finish, *q; /* substrings (q: id, route, finish, prompt), case-blind */
    double min_ms, since, until;    /* total time at least; finished within [since, until] */
    char sort; /* 't'ime, 'd'uration, 'f'irst token, 'p'rompt, 'o'utput, 's'tatus */
    bool asc;
    long offset, limit;
} req_query;

static const char *arg(srv_req *r, const char *k) {
    const char *v = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, k);
    return v && *v ? v : NULL;
}

static void parse_query(srv_req *r, long cap, req_query *q) {
    memset(q, 0, sizeof(*q));
    const char *v;
    if ((v = arg(r, "after"))) q->after = strtoull(v, NULL, 10);
    if ((v = arg(r, "status"))) {
        /* "2xx", "4xx", "5xx", "err" (4xx and 5xx) or one code */
        if (!strcmp(v, "err"))
            q->status_lo = 400, q->status_hi = 599;
        else if (strlen(v) == 3 && v[1] == 'x' && v[0] >= '1' && v[0] <= '5')
            q->status_lo = (unsigned)(v[0] - '0') * 100, q->status_hi = q->status_lo + 99;
        else
            q->status_lo = q->status_hi = (unsigned)strtoul(v, NULL, 10);
    }
    q->route = arg(r, "route");
    q->finish = arg(r, "finish");
    q->q = arg(r, "q");
    if ((v = arg(r, "min_ms"))) q->min_ms = strtod(v, NULL);
    if ((v = arg(r, "since"))) q->since = strtod(v, NULL);
    if ((v = arg(r, "until"))) q->until = strtod(v, NULL);
    v = arg(r, "sort");
    q->sort = !v                     ? 't'
              : !strcmp(v, "total")  ? 'd'
              : !strcmp(v, "ttft")   ? 'f'
              : !strcmp(v, "prompt") ? 'p'
              : !strcmp(v, "output") ? 'o'
              : !strcmp(v, "status") ? 's'
                                     : 't';
    q->asc = (v = arg(r, "order")) && !strcmp(v, "asc");
    q->offset = (v = arg(r, "offset")) ? strtol(v, NULL, 10) : 0;
    if (q->offset < 0) q->offset = 0;
    q->limit = (v = arg(r, "limit")) ? strtol(v, NULL, 10) : 200;
    if (q->limit <= 0 || q->limit > cap) q->limit = cap;
}

/* ASCII case-blind substring (URLs, ids, finish reasons; prompt text as bytes). */
static bool has_text(const char *hay, const char *needle) {
    if (!needle) return true;
    if (!hay) return false;
    size_t n = strlen(needle);
    for (const char *p = hay; *p; p++) {
        size_t i = 0;
        while (i < n && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n) return true;
    }
    return false;
}

static bool matches(const srv_con_entry *e, const req_query *q) {
    if (e->seq <= q->after) return false;
    if (q->status_lo && (e->status < q->status_lo || e->status > q->status_hi)) return false;
    if (q->route && !has_text(e->path, q->route)) return false;
    if (q->finish && strcmp(e->finish, q->finish)) return false;
    if (q->min_ms > 0 && e->total_s * 1e3 < q->min_ms) return false;
    if (q->since > 0 && e->t_wall < q->since) return false;
    if (q->until > 0 && e->t_wall > q->until) return false;
    if (q->q && !has_text(e->id, q->q) && !has_text(e->path, q->q) && !has_text(e->finish, q->q) &&
        !has_text(e->prompt_text, q->q))
        return false;
    return true;
}

typedef struct req_hit {
    double key;
    uint64_t seq;
    const srv_con_entry *e;
} req_hit;

static int cmp_hit_desc(const void *a, const void *b) {
    const req_hit *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? 1 : -1;
    return x->seq < y->seq ? 1 : x->seq > y->seq ? -1 : 0;
}

static int cmp_hit_asc(const void *a, const void *b) {
    return cmp_hit_desc(b, a);
}

static double sort_key(const srv_con_entry *e, char sort) {
    switch (sort) {
    case 'd':
        return e->total_s;
    case 'f':
        return e->ttft_s; /* -1 (none) sorts below every real one */
    case 'p':
        return e->prompt;
    case 'o':
        return e->output;
    case 's':
        return e->status;
    default:
        return (double)e->seq;
    }
}

static json_t *entry_json(const srv_con_entry *e) {
    json_t *o = json_pack("{s:I, s:f, s:s, s:s, s:s, s:i, s:b, s:b, s:i, s:f, s:s}", "seq",
                          (json_int_t)e->seq, "time", e->t_wall, "method", e->method, "route",
                          e->path, "id", e->id, "status", (int)e->status, "gen", e->gen, "stream",
                          e->stream, "n", e->n, "total_ms", e->total_s * 1e3, "finish", e->finish);
    if (!o) return NULL;
    if (e->gen) {
        json_object_set_new(o, "prompt_tokens", json_integer(e->prompt));
        json_object_set_new(o, "cached_tokens", json_integer(e->cached));
        json_object_set_new(o, "output_tokens", json_integer(e->output));
        json_object_set_new(o, "ttft_ms",
                            e->ttft_s >= 0 ? json_real(e->ttft_s * 1e3) : json_null());
        json_object_set_new(o, "temperature", json_real(e->temperature));
        json_object_set_new(o, "top_p", json_real(e->top_p));
        json_object_set_new(o, "max_tokens", json_integer(e->max_tokens));
        if (e->seed >= 0) json_object_set_new(o, "seed", json_integer(e->seed));
    }
    if (e->prompt_text) json_object_set_new(o, "prompt", json_string(e->prompt_text));
    return o;
}

/* GET /console/requests: the ring, newest first by default. Filters: after=SEQ (only newer),
 * status=2xx|4xx|5xx|err|CODE, route=, finish=, q= (text in id, route, finish, prompt),
 * min_ms= (total time), since= / until= (unix seconds). sort=time|total|ttft|prompt|output|
 * status, order=desc|asc; offset= and limit= (default 200, at most the ring) page the result;
 * "total" is how many matched. */
static enum MHD_Result route_requests(srv_req *r) {
    srv_console *c = r->srv->console;
    req_query q;
    parse_query(r, c->cap, &q);
    json_t *arr = json_array();
    req_hit *hits = malloc(sizeof(req_hit) * (size_t)c->cap);
    if (!arr || !hits) {
        json_decref(arr);
        free(hits);
        return MHD_NO;
    }
    long n = 0;
    pthread_mutex_lock(&c->mu);
    uint64_t last = c->last_seq, oldest = last > (uint64_t)c->cap ? last - (uint64_t)c->cap + 1 : 1;
    for (uint64_t k = last; k >= oldest && k > 0; k--) {
        const srv_con_entry *e = &c->ring[(k - 1) % (uint64_t)c->cap];
        if (matches(e, &q)) hits[n++] = (req_hit){sort_key(e, q.sort), e->seq, e};
    }
    if (q.sort != 't' || q.asc)
        qsort(hits, (size_t)n, sizeof(*hits), q.asc ? cmp_hit_asc : cmp_hit_desc);
    for (long i = q.offset; i < n && i < q.offset + q.limit; i++) {
        json_t *o = entry_json(hits[i].e);
        if (o) json_array_append_new(arr, o);
    }
    pthread_mutex_unlock(&c->mu);
    free(hits);
    return reply_json(r, 200,
                      json_pack("{s:I, s:i, s:b, s:i, s:i, s:o}", "last_seq", (json_int_t)last,
                                "capacity", c->cap, "log_prompts", c->log_prompts, "total", (int)n,
                                "offset", (int)q.offset, "requests", arr));
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

/* A content array as the log shows it: its text parts, each image as "[image]" (never the image's
 * bytes, which would fill the kept text with base64). NULL if there is nothing to show. */
static char *parts_text(json_t *parts) {
    char *out = malloc(PROMPT_KEEP + 1);
    if (!out) return NULL;
    size_t n = 0;
    for (size_t k = 0; k < json_array_size(parts) && n < PROMPT_KEEP; k++) {
        json_t *p = json_array_get(parts, k);
        const char *ty = json_string_value(json_object_get(p, "type"));
        const char *t = !ty                   ? NULL
                        : !strcmp(ty, "text") ? json_string_value(json_object_get(p, "text"))
                        : strstr(ty, "image") ? "[image]"
                                              : NULL;
        if (!t) continue;
        n += (size_t)snprintf(out + n, PROMPT_KEEP + 1 - n, "%s%s", n ? " " : "", t);
        if (n > PROMPT_KEEP) n = PROMPT_KEEP;
    }
    out[n] = 0;
    if (!n) {
        free(out);
        return NULL;
    }
    return out;
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
        if (!role || strcmp(role, "user")) continue;
        if (json_is_string(ct))
            out = strndup(json_string_value(ct), PROMPT_KEEP);
        else if (json_is_array(ct))
            out = parts_text(ct);
        break; /* the last user message, whatever it holds */
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
        e.temperature = (float)r->gen.s.temperature;
        e.top_p = (float)r->gen.s.top_p;
        e.max_tokens = r->gen.s.max_tokens;
        e.seed = r->gen.s.has_seed ? (long long)(r->gen.s.seed & 0x7fffffffffffffffULL) : -1;
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
