/* The HTTP front: libmicrohttpd daemon, routing, auth, body caps, admission, health/drain and the
 * periodic stats line. Generation requests are parsed by openai.c, submitted and streamed by
 * srv_req.c, formatted by oai_fmt.c; metrics.c renders /metrics.
 *
 * Threads: MHD's internal polling threads (o.n_threads, epoll) run every callback here; the
 * engine thread only runs srv_req.c's event callback; one stats thread logs every
 * o.stats_interval_s. A waiting request is a suspended MHD connection, never a parked thread. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "server/srv_console_int.h"
#include "server/srv_int.h"

void cllm_server_opts_defaults(cllm_server_opts *o) {
    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->port = 8000;
    o->limit_mm_images = 999; /* vLLM's default per modality */
    o->auth_public_health = true;
    o->max_body_size = 16u << 20;
    o->max_json_depth = 64;
    o->max_logprobs = 20;
    o->max_n = 128;
    o->stats_interval_s = 5;
    o->access_log = true;
    o->n_threads = 2;
    o->connection_limit = 1024;
    o->header_timeout_s = 60; /* nginx's client_header_timeout */
    o->body_timeout_s = 60;   /* nginx's client_body_timeout (whole body here, not per read) */
    /* uvicorn's (vLLM's) 5 s races the pools of node's fetch (4 s, coarse timers) and httpx (5 s):
     * they reuse a connection the server is closing and do not retry the POST (seen in
     * tests/grammar/grammar_e2e.sh); 20 s outlasts them, aiohttp's 15 s too */
    o->keepalive_timeout_s = 20;
    o->send_timeout_s = 30; /* nginx's send_timeout is 60; a stalled stream holds a sequence */
    o->console = true;
    o->console_requests = 1000;
}

/* ---- responses ---- */

/* close: the request's framing is not to be trusted, so nothing after it on the connection is */
static void common_headers(cllm_server *s, struct MHD_Response *resp, bool close) {
    if (s->o.allowed_origins) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->o.allowed_origins);
        /* browsers refuse credentials with the wildcard origin: only with a named one */
        if (strcmp(s->o.allowed_origins, "*")) {
            MHD_add_response_header(resp, "Access-Control-Allow-Credentials", "true");
            MHD_add_response_header(resp, "Vary", "Origin");
        }
    }
    if (close || __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE))
        MHD_add_response_header(resp, "Connection", "close");
}

static enum MHD_Result send_buf(srv_req *r, unsigned status, const char *ctype, char *body,
                                size_t len, int retry_after) {
    cllm_server *s = r->srv;
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    if (ctype) MHD_add_response_header(resp, "Content-Type", ctype);
    if (retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof(ra), "%d", retry_after);
        MHD_add_response_header(resp, "Retry-After", ra);
    }
    if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    common_headers(s, resp, r->close_conn);
    srv_conn_enter(s, r->conn, SRV_CONN_BUSY);
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->status = status;
    r->bytes_sent = len;
    /* scrapes and probes are not traffic (vLLM's http metrics exclude them too): a monitor, or
     * `cllm doctor`, polling /metrics must not dilute the error rate it computes */
    if (!(srv_route_flags(r->url) & SRV_RT_PROBE)) srv_metrics_http(&s->m, status);
    return ret;
}

static enum MHD_Result send_json(srv_req *r, unsigned status, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) return MHD_NO;
    return send_buf(r, status, "application/json", s, strlen(s), 0);
}

static enum MHD_Result send_err(srv_req *r, const srv_err *e) {
    char *s = srv_fmt_error_json(e);
    if (!s) return MHD_NO;
    return send_buf(r, e->status, "application/json", s, strlen(s),
                    e->status == 429 || e->status == 503 ? 1 : 0);
}

static enum MHD_Result fail(srv_req *r, unsigned status, const char *type, const char *param,
                            const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result fail(srv_req *r, unsigned status, const char *type, const char *param,
                            const char *fmt, ...) {
    srv_err e;
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    srv_err_set(&e, status, type, param, "%s", msg);
    return send_err(r, &e);
}

/* ---- auth ---- */

/* Constant-time over the longer of the two strings: the time does not reveal a matching prefix. */
static bool ct_equal(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b), n = la > lb ? la : lb;
    unsigned char d = (unsigned char)(la != lb);
    for (size_t i = 0; i < n; i++) {
        unsigned char x = i < la ? (unsigned char)a[i] : 0, y = i < lb ? (unsigned char)b[i] : 0;
        d |= x ^ y;
    }
    return d == 0;
}

static bool authorized(cllm_server *s, struct MHD_Connection *c) {
    if (!s->o.api_key || !*s->o.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h) return false;
    if (strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    return ct_equal(h, s->o.api_key);
}

/* ---- JSON body ---- */

/* Nesting depth of JSON text (brackets outside strings); checked before jansson recurses. */
static int json_depth(const char *p, size_t n) {
    int d = 0, maxd = 0;
    bool str = false;
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (str) {
            if (ch == '\\')
                i++;
            else if (ch == '"')
                str = false;
        } else if (ch == '"') {
            str = true;
        } else if (ch == '[' || ch == '{') {
            if (++d > maxd) maxd = d;
        } else if (ch == ']' || ch == '}') {
            d--;
        }
    }
    return maxd;
}

static json_t *parse_body(srv_req *r, srv_err *e) {
    cllm_server *s = r->srv;
    if (!r->body.len) {
        srv_err_set(e, 400, "invalid_request_error", NULL,
                    "the request body is empty; expected JSON");
        return NULL;
    }
    if (json_depth(r->body.p, r->body.len) > s->o.max_json_depth) {
        srv_err_set(e, 400, "invalid_request_error", NULL, "JSON nesting deeper than %d",
                    s->o.max_json_depth);
        return NULL;
    }
    json_error_t je;
    json_t *o = json_loadb(r->body.p, r->body.len, 0, &je);
    if (!o) {
        srv_err_set(e, 400, "invalid_request_error", NULL, "invalid JSON at line %d column %d: %s",
                    je.line, je.column, je.text);
        return NULL;
    }
    return o;
}

/* ---- route handlers: one per row of the table below; body is the request's JSON for
 * SRV_RT_BODY rows, else NULL ---- */

static bool serving(cllm_server *s) {
    return __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&s->draining, __ATOMIC_ACQUIRE);
}

static enum MHD_Result h_health(srv_req *r, json_t *body) {
    (void)body;
    cllm_server *s = r->srv;
    /* vLLM's codes; llama-server's {"status":"ok"} body, and the word `healthy` that
     * inspection scripts grep for (no 503 body contains it) */
    if (serving(s))
        return send_json(r, 200, json_pack("{s:s, s:s}", "status", "ok", "health", "healthy"));
    return fail(r, 503, "service_unavailable", NULL,
                __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE) ? "draining" : "loading model");
}

static enum MHD_Result h_ping(srv_req *r, json_t *body) {
    (void)body;
    return send_buf(r, serving(r->srv) ? 200 : 503, NULL, NULL, 0, 0);
}

static enum MHD_Result h_version(srv_req *r, json_t *body) {
    (void)body;
    return send_json(r, 200, json_pack("{s:s}", "version", CLLM_VERSION));
}

static enum MHD_Result h_metrics(srv_req *r, json_t *body) {
    (void)body;
    char *t = srv_metrics_render(r->srv);
    if (!t) return MHD_NO;
    return send_buf(r, 200, "text/plain; version=0.0.4; charset=utf-8", t, strlen(t), 0);
}

static json_t *model_card(cllm_server *s, const char *id) {
    return json_pack("{s:s, s:s, s:i, s:s, s:s, s:n, s:i, s:[]}", "id", id, "object", "model",
                     "created", (json_int_t)s->started, "owned_by", "cllm", "root",
                     s->o.model_dir ? s->o.model_dir : s->model_name, "parent", "max_model_len",
                     s->max_model_len, "permission");
}

/* One card per served name (vLLM lists every --served-model-name). */
static enum MHD_Result h_models(srv_req *r, json_t *body) {
    (void)body;
    cllm_server *s = r->srv;
    json_t *data = json_array();
    json_array_append_new(data, model_card(s, s->model_name));
    for (int i = 0; i < s->o.n_model_aliases; i++)
        if (s->o.model_aliases[i] && strcmp(s->o.model_aliases[i], s->model_name))
            json_array_append_new(data, model_card(s, s->o.model_aliases[i]));
    return send_json(r, 200, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

/* OpenAI's retrieve: the card of a served name. */
static enum MHD_Result h_model(srv_req *r, json_t *body) {
    (void)body;
    const char *id = r->url_tail;
    if (!srv_model_known(r->srv, id))
        return fail(r, 404, "NotFoundError", "model", "The model `%.200s` does not exist.", id);
    return send_json(r, 200, model_card(r->srv, id));
}

/* llama-server's /props and /slots (llama_api.c) */
static enum MHD_Result h_props(srv_req *r, json_t *body) {
    (void)body;
    return send_json(r, 200, srv_llama_props(r->srv));
}

static enum MHD_Result h_slots(srv_req *r, json_t *body) {
    (void)body;
    int free_slots = 0;
    json_t *slots = srv_llama_slots(r->srv, &free_slots);
    const char *f = MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, "fail_on_no_slot");
    if (f && strcmp(f, "0") && !free_slots) {
        json_decref(slots);
        return fail(r, 503, "unavailable_error", NULL, "no slot available");
    }
    return send_json(r, 200, slots);
}

static enum MHD_Result h_resp_cancel(srv_req *r, json_t *body) {
    (void)body;
    srv_err ce;
    json_t *o = srv_resp_cancel(r->srv, r->url_tail, &ce);
    return o ? send_json(r, 200, o) : send_err(r, &ce);
}

static enum MHD_Result h_resp_get(srv_req *r, json_t *body) {
    (void)body;
    json_t *o = srv_resp_lookup(r->srv, r->url_tail);
    if (!o)
        return fail(r, 404, "invalid_request_error", NULL, "Response with id '%.60s' not found.",
                    r->url_tail);
    return send_json(r, 200, o);
}

static enum MHD_Result h_tokenize(srv_req *r, json_t *body) {
    cllm_server *s = r->srv;
    srv_gen g;
    srv_err e;
    if (!srv_parse_tokenize(s, body, &g, &e)) {
        srv_gen_free(&g);
        return send_err(r, &e);
    }
    json_t *toks = json_array();
    for (size_t i = 0; i < g.prompt.n; i++)
        json_array_append_new(toks, json_integer(g.prompt.ids[i]));
    json_t *strs = json_null();
    if (json_is_true(json_object_get(body, "return_token_strs"))) {
        strs = json_array();
        for (size_t i = 0; i < g.prompt.n; i++) {
            size_t n;
            const char *b = cllm_tok_token_bytes(s->tok, g.prompt.ids[i], &n);
            char *t = cllm_tok_utf8_sanitize(b ? b : "", b ? n : 0, &n);
            json_array_append_new(strs, t ? json_stringn(t, n) : json_string(""));
            free(t);
        }
    }
    json_t *o = json_pack("{s:i, s:i, s:o, s:o}", "count", (json_int_t)g.prompt.n, "max_model_len",
                          s->max_model_len, "tokens", toks, "token_strs", strs);
    srv_gen_free(&g);
    return send_json(r, 200, o);
}

static enum MHD_Result h_detokenize(srv_req *r, json_t *body) {
    cllm_server *s = r->srv;
    if (!s->tok) return fail(r, 400, "invalid_request_error", NULL, "this model has no tokenizer");
    json_t *toks = json_object_get(body, "tokens");
    if (!json_is_array(toks))
        return fail(r, 400, "invalid_request_error", "tokens",
                    "'tokens' must be an array of token ids");
    size_t n = json_array_size(toks);
    int32_t *ids = malloc((n ? n : 1) * sizeof(int32_t));
    if (!ids) return MHD_NO;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(toks, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) >= cllm_tok_n_vocab(s->tok)) {
            free(ids);
            return fail(r, 400, "invalid_request_error", "tokens",
                        "tokens[%zu] is not a token id of this model", i);
        }
        ids[i] = (int32_t)json_integer_value(x);
    }
    char *text = NULL;
    size_t len = 0;
    cllm_error ce = {0};
    cllm_status st = cllm_tok_decode(s->tok, ids, n, false, &text, &len, &ce);
    free(ids);
    if (st != CLLM_OK) return fail(r, 400, "invalid_request_error", "tokens", "%s", ce.msg);
    json_t *o = json_pack("{s:o}", "prompt", json_stringn(text, len));
    free(text);
    return send_json(r, 200, o);
}

static void make_id(srv_req *r, const srv_fmt *f) {
    cllm_server *s = r->srv;
    pthread_mutex_lock(&s->mu);
    uint64_t n = ++s->next_id;
    pthread_mutex_unlock(&s->mu);
    uint64_t x =
        (n * 0x9E3779B97F4A7C15ULL) ^ ((uint64_t)(srv_now() * 1e9) * 0xBF58476D1CE4E5B9ULL);
    snprintf(r->id, sizeof(r->id), "%s%016llx", f->id_prefix, (unsigned long long)x);
    r->created = (long)time(NULL);
}

#define STREAM_SNDBUF (32 * 1024)

/* The generation routes after their parser (the h_ functions below): submit, then the body or
 * the stream. e: the parser's error when !parsed. */
static enum MHD_Result generate(srv_req *r, bool parsed, srv_err *e) {
    cllm_server *s = r->srv;
    const srv_fmt *f = srv_fmt_of(r->route);
    if (!parsed) return send_err(r, e);
    /* vLLM's --enable-force-include-usage: as if stream_options.include_usage were true */
    if (s->o.force_include_usage && f->usage_chunks) r->gen.include_usage = true;
    make_id(r, f);
    if (!srv_req_submit(r, e)) return send_err(r, e);
    if (!r->gen.stream) {
        bool susp;
        if (!srv_req_pump(r, &susp)) return MHD_YES; /* suspended until the engine reports */
        srv_err fe;
        json_t *o = srv_fmt_final(r, &fe);
        return o ? send_json(r, 200, o) : send_err(r, &fe);
    }
    /* The kernel grows a socket's send buffer to megabytes on a fast link, and every byte of it
     * a client that stopped reading absorbs before --send-timeout can start counting (its own
     * receive buffer, 64-128 KiB by default, absorbs the rest). 32 KiB (the kernel doubles it)
     * still carries 300 KiB/s at 200 ms RTT, far above any token stream. */
    const union MHD_ConnectionInfo *fdi =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    int sndbuf = STREAM_SNDBUF;
    if (fdi) setsockopt(fdi->connect_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    /* no bytes before the first token (the role chunk goes with it: oai_fmt.c) */
    pthread_mutex_lock(&r->mu);
    r->refs++; /* the response's reference */
    pthread_mutex_unlock(&r->mu);
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, 16 * 1024, srv_req_stream_reader, r, srv_req_stream_free);
    if (!resp) {
        srv_req_unref(r);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type",
                            f->ndjson ? "application/x-ndjson"
                                      : "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    common_headers(s, resp, false);
    enum MHD_Result ret = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    r->status = 200;
    srv_metrics_http(&s->m, 200);
    return ret;
}

/* completions, chat and vLLM's /generate (r->route says which) */
static enum MHD_Result h_openai(srv_req *r, json_t *body) {
    srv_err e;
    return generate(r, srv_parse_gen(r->srv, r->route, body, &r->gen, &e), &e);
}

static enum MHD_Result h_responses(srv_req *r, json_t *body) {
    srv_err e;
    return generate(r, srv_resp_parse(r->srv, body, &r->gen, &r->resp, &e), &e);
}

static enum MHD_Result h_embeddings(srv_req *r, json_t *body) {
    srv_err e;
    return generate(r, srv_parse_embed(r->srv, body, &r->gen, &e), &e);
}

static enum MHD_Result h_llama(srv_req *r, json_t *body) {
    srv_err e;
    return generate(r, srv_llama_parse(r->srv, body, &r->gen, &e), &e);
}

/* ---- the route table ---- */

enum { M_GET = 1, M_POST = 2, M_OTHER = 4, M_ANY = 7 }; /* M_GET takes HEAD too */

/* The HTTP API, one row per endpoint (docs/architecture.md "Add an endpoint"). path is exact,
 * or a pattern whose {id} matches any bytes, '/' included, up to what follows it in the pattern
 * (one byte at least when something follows, none needed at the end), as the prefix tests these
 * rows replaced did; the handler finds them at r->url_tail and judges them itself. First match
 * wins, so /v1/responses/{id}/cancel goes before /v1/responses/{id}. The console's URLs are
 * console.c's (srv_console_owns). */
static const struct route {
    unsigned methods; /* M_ bits; any other method gets 405 */
    const char *path;
    unsigned flags; /* SRV_RT_ (srv_int.h) */
    enum MHD_Result (*fn)(srv_req *r, json_t *body);
    srv_route fmt; /* SRV_RT_ADMITTED rows: r->route, the parser and output format (oai_fmt.c) */
} routes[] = {
#define PROBE (SRV_RT_PROBE | SRV_RT_PUBLIC)
#define GEN   (SRV_RT_ADMITTED | SRV_RT_BODY | SRV_RT_DOWN)
    {M_GET, "/health", PROBE | SRV_RT_DOWN, h_health, 0},
    {M_ANY, "/ping", PROBE, h_ping, 0},
    {M_ANY, "/version", PROBE, h_version, 0},
    {M_GET, "/metrics", PROBE, h_metrics, 0},
    {M_GET, "/v1/models", 0, h_models, 0},
    {M_GET, "/v1/models/{id}", 0, h_model, 0},
    {M_GET, "/props", 0, h_props, 0},
    {M_GET, "/slots", 0, h_slots, 0},
    {M_POST, "/v1/responses/{id}/cancel", 0, h_resp_cancel, 0},
    {M_GET, "/v1/responses/{id}", 0, h_resp_get, 0},
    {M_POST, "/tokenize", SRV_RT_BODY, h_tokenize, 0},
    {M_POST, "/detokenize", SRV_RT_BODY, h_detokenize, 0},
    {M_POST, "/v1/completions", GEN, h_openai, SRV_COMPLETIONS},
    {M_POST, "/v1/chat/completions", GEN, h_openai, SRV_CHAT},
    {M_POST, "/generate", GEN, h_openai, SRV_GENERATE},
    {M_POST, "/v1/responses", GEN, h_responses, SRV_RESPONSES},
    {M_POST, "/v1/embeddings", GEN, h_embeddings, SRV_EMBEDDINGS},
    {M_POST, "/completion", GEN, h_llama, SRV_LLAMA},  /* llama-server's native route */
    {M_POST, "/completions", GEN, h_llama, SRV_LLAMA}, /* and its alias */
#undef PROBE
#undef GEN
};

/* Whether url matches path p; *tail: where p's {id} begins in url (NULL for an exact path). */
static bool match(const char *p, const char *url, const char **tail) {
    *tail = NULL;
    const char *id = strstr(p, "{id}");
    if (!id) return !strcmp(p, url);
    size_t pre = (size_t)(id - p), n = strlen(url);
    const char *suf = id + 4;
    size_t ns = strlen(suf);
    if (strncmp(url, p, pre)) return false;
    /* a suffix needs an id of at least one byte before it */
    if (ns && (n <= pre + ns || strcmp(url + n - ns, suf))) return false;
    *tail = url + pre;
    return true;
}

static const struct route *find_route(const char *url, const char **tail) {
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (match(routes[i].path, url, tail)) return &routes[i];
    *tail = NULL;
    return NULL;
}

unsigned srv_route_flags(const char *url) {
    const char *tail;
    const struct route *rt = find_route(url, &tail);
    return rt ? rt->flags : 0;
}

/* A SRV_RT_BODY row: the body's caps, drain, then the handler with the parsed JSON. */
static enum MHD_Result dispatch_body(srv_req *r, const struct route *rt) {
    cllm_server *s = r->srv;
    if (r->body.oom) /* an allocation failed (the size cap is body_too_large alone) */
        return fail(r, 503, "service_unavailable", NULL,
                    "out of memory while reading the request body; retry later");
    if (r->body_too_large)
        return fail(r, 413, "invalid_request_error", NULL,
                    "request body over --max-body-size (%llu bytes)",
                    (unsigned long long)s->o.max_body_size);
    if ((rt->flags & SRV_RT_ADMITTED) && __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE))
        return fail(r, 503, "service_unavailable", NULL,
                    "The server is shutting down; retry on another replica.");
    srv_err e;
    json_t *body = parse_body(r, &e);
    if (!body) return send_err(r, &e);
    r->route = rt->fmt;
    enum MHD_Result ret = rt->fn(r, body);
    json_decref(body);
    return ret;
}

/* Called once the whole body is in (or for GET at once). Probes answer while the model loads;
 * every other URL waits for it, a failed engine first. */
static enum MHD_Result dispatch(srv_req *r) {
    cllm_server *s = r->srv;
    const struct route *rt = find_route(r->url, &r->url_tail);
    unsigned flags = rt ? rt->flags : 0;
    if (__atomic_load_n(&s->failed, __ATOMIC_ACQUIRE) == 1 && (flags & SRV_RT_DOWN))
        return fail(r, 503, "service_unavailable", NULL, "%s", s->failed_msg);
    if (!(flags & SRV_RT_PROBE)) {
        if (srv_console_owns(s, r->url)) return srv_console_dispatch(r); /* also while loading */
        if (!__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE))
            return fail(r, 503, "service_unavailable", NULL, "the model is still loading");
        if (!rt)
            return fail(r, 404, "NotFoundError", NULL, "no route %s %.200s", r->method, r->url);
    }
    const char *m = r->method;
    unsigned mb = !strcmp(m, "GET") || !strcmp(m, "HEAD") ? M_GET
                  : !strcmp(m, "POST")                    ? M_POST
                                                          : M_OTHER;
    if (!(rt->methods & mb))
        return fail(r, 405, "invalid_request_error", NULL, "%s",
                    rt->methods & M_GET ? "use GET" : "use POST");
    if (rt->flags & SRV_RT_BODY) return dispatch_body(r, rt);
    return rt->fn(r, NULL);
}

/* No memory for the request state: answer 503 from static memory (so the client gets an error
 * object and a Retry-After instead of a dropped connection) and mark the connection with no_req
 * so the rest of the body is skipped and on_completed has nothing to free. */
static char no_req;
static enum MHD_Result answer_no_memory(cllm_server *s, struct MHD_Connection *c, void **con_cls) {
    static const char body[] = "{\"error\":{\"message\":\"out of memory; retry later\",\"type\":"
                               "\"service_unavailable\",\"param\":null,\"code\":503}}";
    *con_cls = &no_req;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(sizeof(body) - 1, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "application/json");
    MHD_add_response_header(resp, "Retry-After", "1");
    MHD_add_response_header(resp, "Connection", "close");
    enum MHD_Result ret = MHD_queue_response(c, 503, resp);
    MHD_destroy_response(resp);
    srv_metrics_http(&s->m, 503);
    return ret;
}

static unsigned secs(double t) {
    return t <= 0 ? 0 : t < 1 ? 1 : (unsigned)(t + 0.5);
}

/* A chunked body (its size unknown at the head) passed --max-body-size: MHD queues no response
 * while it reads a body, so the 413 goes straight to the socket and MHD closes the connection
 * (MHD_NO) instead of reading the rest. */
static enum MHD_Result refuse_body(srv_req *r) {
    cllm_server *s = r->srv;
    srv_err e;
    srv_err_set(&e, 413, "invalid_request_error", NULL,
                "request body over --max-body-size (%llu bytes)",
                (unsigned long long)s->o.max_body_size);
    char *j = srv_fmt_error_json(&e);
    srv_conn_write_raw(r->conn, 413, j);
    srv_conn_linger(s, r->conn);
    r->status = 413;
    r->bytes_sent = j ? strlen(j) : 0;
    free(j);
    srv_metrics_http(&s->m, 413);
    return MHD_NO;
}

/* A request body the head announces: a Content-Length above 0, or a Transfer-Encoding. */
static bool body_announced(struct MHD_Connection *c) {
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    return (cl && strtoull(cl, NULL, 10) > 0) ||
           MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Transfer-Encoding");
}

/* The first access-handler call of a request (its head): the checks and answers that need no
 * body. MHD_YES with nothing queued: read the body. */
static enum MHD_Result on_head(cllm_server *s, srv_req *r, struct MHD_Connection *c,
                               const char *url, const char *method, const char *version) {
    /* until the response is written, a pause of --send-timeout (not the shorter keep-alive
     * timeout) ends the connection; on_completed sets it back */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, secs(s->o.send_timeout_s));
    if (!srv_conn_enter(s, c, SRV_CONN_BODY)) return MHD_NO; /* a deadline cut it */
    char hm[160];
    unsigned hs = srv_conn_check_head(c, version, hm, sizeof(hm));
    if (hs) {
        r->close_conn = true;
        return fail(r, hs, "invalid_request_error", NULL, "%s", hm);
    }
    unsigned rflags = srv_route_flags(url);
    if (rflags & SRV_RT_ADMITTED) {
        r->is_gen = true;
        pthread_mutex_lock(&s->mu);
        s->open_gen_conns++;
        pthread_mutex_unlock(&s->mu);
    }
    if (!strcmp(method, "OPTIONS") && s->o.allowed_origins) {
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
        if (!resp) return MHD_NO;
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
        common_headers(s, resp, false);
        srv_conn_enter(s, c, SRV_CONN_BUSY);
        enum MHD_Result ret = MHD_queue_response(c, 204, resp);
        MHD_destroy_response(resp);
        r->status = 204;
        srv_metrics_http(&s->m, 204);
        return ret;
    }
    if (!(s->o.auth_public_health && (rflags & SRV_RT_PUBLIC)) && !srv_console_public(s, url) &&
        !authorized(s, c)) {
        srv_err e;
        srv_err_set(&e, 401, "invalid_request_error", NULL, "Incorrect API key provided.");
        snprintf(e.code, sizeof(e.code), "invalid_api_key");
        return send_err(r, &e);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > s->o.max_body_size) {
        r->close_conn = true;
        return fail(r, 413, "invalid_request_error", NULL,
                    "request body over --max-body-size (%llu bytes)",
                    (unsigned long long)s->o.max_body_size);
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls) {
    cllm_server *s = cls;
    srv_req *r = *con_cls;
    if (*con_cls == &no_req) { /* the 503 below is queued: drop the body */
        *upload_size = 0;
        return MHD_YES;
    }
    if (!r) {
        r = srv_req_new(s, c, method, url);
        enum MHD_Result ret;
        if (r) {
            *con_cls = r;
            ret = on_head(s, r, c, url, method, version);
        } else {
            ret = answer_no_memory(s, c, con_cls);
        }
        /* answered from the head (401, 413, a refused head, the 503 of a failed allocation):
         * MHD will close the connection without reading the body the head announced */
        if ((!r || r->status) && body_announced(c)) srv_conn_linger(s, c);
        return ret;
    }
    if (r->status) { /* a response is queued already (early 4xx): discard the rest */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (r->body.len + *upload_size > s->o.max_body_size) return refuse_body(r);
        srv_buf_add(&r->body, upload_data, *upload_size);
        if (r->body.oom) r->body_too_large = true;
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->submitted) { /* resumed non-stream request */
        bool susp;
        if (!srv_req_pump(r, &susp)) return MHD_YES;
        srv_err fe;
        json_t *o = srv_fmt_final(r, &fe);
        return o ? send_json(r, 200, o) : send_err(r, &fe);
    }
    if (!srv_conn_enter(s, c, SRV_CONN_BUSY)) return MHD_NO; /* --client-body-timeout cut it */
    return dispatch(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    cllm_server *s = cls;
    srv_req *r = *con_cls;
    *con_cls = NULL;
    srv_conn_enter(s, c, SRV_CONN_HEAD); /* the next request's head deadline starts now */
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) /* kept alive: idle until the next one */
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, secs(s->o.keepalive_timeout_s));
    bool watched = false; /* srv_conn.c's stall watch cut it (and counted it) first */
    if (r && (void *)r != &no_req) {
        pthread_mutex_lock(&r->mu);
        watched = r->watch_cancelled;
        pthread_mutex_unlock(&r->mu);
    }
    if (toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED && !watched) {
        /* MHD's inactivity timeout: in the head, the body, or a response nobody reads */
        int why = !r ? SRV_DL_HEADER : !r->status && !r->submitted ? SRV_DL_BODY : SRV_DL_SEND;
        pthread_mutex_lock(&s->m.mu);
        s->m.deadline_closes[why]++;
        pthread_mutex_unlock(&s->m.mu);
    }
    if ((void *)r == &no_req) return;
    if (!r || !r->status) {
        /* a response MHD made itself (its HTML errors: a malformed head or chunk, a chunk line
         * longer than its buffer): counted like ours */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
        if (ci && ci->http_status) {
            srv_metrics_http(&s->m, ci->http_status);
            if (r) r->status = ci->http_status;
        }
    }
    if (!r) return;
    if (s->o.access_log && !srv_path_listed(s->o.access_log_skip, r->url)) {
        char ip[64] = "-";
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, ip, sizeof(ip));
            else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, ip, sizeof(ip));
        }
        LOG_INFO("access: %s \"%s %s\" %u %llu bytes %.1f ms%s%s%s", ip, r->method, r->url,
                 r->status, (unsigned long long)r->bytes_sent, (srv_now() - r->t_arrival) * 1e3,
                 r->id[0] ? " id=" : "", r->id,
                 toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection closed early)");
    }
    srv_console_record(r, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
    srv_req_conn_done(r);
    if (r->is_gen) {
        pthread_mutex_lock(&s->mu);
        s->open_gen_conns--;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
    srv_req_unref(r);
}

/* Registered only so that MHD reports (on_completed) the requests it answers itself after the
 * request line; the request state is still made by the first on_request call. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)cls, (void)uri, (void)c;
    return NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n') msg[--n] = 0;
    LOG_DEBUG("mhd: %s", msg);
}

/* ---- housekeeping thread: disconnect watch + stats line ---- */

/* MHD does not watch a suspended connection, so a client that hangs up while its request waits
 * (non-streaming, or a stream before its first token) would go unnoticed until the end. Every
 * WATCH_INTERVAL this peeks at the sockets of suspended requests; a peer that closed gets its
 * engine request cancelled (its final event then resumes the connection and MHD closes it).
 * Safe because r->suspended is only cleared under r->mu, and MHD never closes a suspended
 * connection, so the fd stays ours while we hold r->mu. */
#define WATCH_INTERVAL_S 0.25

static void watch_disconnects(cllm_server *s) {
    uint64_t ids[64];
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (srv_req *r = s->reg_head; r && n < 64; r = r->reg_next) {
        pthread_mutex_lock(&r->mu);
        if (r->suspended && !r->conn_gone && r->submitted && !r->watch_cancelled) {
            const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
            if (ci) {
                struct pollfd pfd = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
                char b;
                if (poll(&pfd, 1, 0) > 0 &&
                    ((pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) ||
                     ((pfd.revents & POLLIN) &&
                      recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0))) {
                    r->watch_cancelled = true;
                    for (int k = 0; k < r->n_subs && n < 64; k++)
                        if (r->subs[k].submitted) ids[n++] = r->subs[k].id;
                }
            }
        }
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++) {
        s->ops.cancel(s->ops.ctx, ids[i]);
        LOG_INFO("engine request %llu cancelled: client disconnected while waiting",
                 (unsigned long long)ids[i]);
    }
    if (n) {
        pthread_mutex_lock(&s->m.mu);
        s->m.requests_cancelled_disconnect += (uint64_t)n;
        pthread_mutex_unlock(&s->m.mu);
    }
}

static void *house_main(void *arg) {
    cllm_server *s = arg;
    double next_stats = srv_now() + s->o.stats_interval_s;
    pthread_mutex_lock(&s->mu);
    while (!s->stop_stats) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(WATCH_INTERVAL_S * 1e9);
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        while (!s->stop_stats && pthread_cond_timedwait(&s->cv, &s->mu, &ts) == 0) {
        }
        if (s->stop_stats) break;
        pthread_mutex_unlock(&s->mu);
        watch_disconnects(s);
        srv_conn_watch(s);
        srv_console_tick(s);
        if (s->o.stats_interval_s > 0 && srv_now() >= next_stats) {
            srv_metrics_log_line(s);
            next_stats = srv_now() + s->o.stats_interval_s;
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- lifecycle ---- */

/* Each connection is a file descriptor: a soft open-file limit below --max-connections (1024 is
 * a common default) would refuse connections before MHD's limit does, so raise it toward the hard
 * limit (as Go's runtime does) and say so when even that is short. */
static void fit_nofile(unsigned conn_limit) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return;
    rlim_t want = (rlim_t)conn_limit + 128; /* model files, logs, pipes */
    if (rl.rlim_cur >= want) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < want)
        LOG_WARN(
            "open-file limit %llu is below --max-connections %u + 128: connections past it are "
            "refused (raise it with ulimit -n)",
            (unsigned long long)rl.rlim_cur, conn_limit);
}

/* Why MHD could not listen: binds a probe socket to the same address (MHD does not say). */
static int bind_errno(const struct addrinfo *ai) {
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0) return errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int e = bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    close(fd);
    return e ? e : EADDRNOTAVAIL;
}

cllm_status cllm_server_start(const cllm_server_opts *o, const cllm_server_engine *ops,
                              cllm_server **out, cllm_error *err) {
    *out = NULL;
    cllm_server *s = calloc(1, sizeof(*s));
    if (!s) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    s->o = *o;
    s->ops = *ops;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->conn_mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->started = (long)time(NULL);
    s->model_name = strdup(o->served_model_name ? o->served_model_name : "cllm");
    cllm_status rc = CLLM_OK;
    if (!s->model_name || srv_metrics_init(&s->m, 0)) {
        rc = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        goto fail;
    }
    if (o->default_chat_template_kwargs) {
        s->default_kwargs = json_loads(o->default_chat_template_kwargs, 0, NULL);
        if (!json_is_object(s->default_kwargs)) {
            rc = cllm_err_set(err, CLLM_EINVAL,
                              "--default-chat-template-kwargs must be a JSON object");
            goto fail;
        }
    }
    s->console = srv_console_new(s);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof(port), "%d", o->port);
    if (getaddrinfo(o->host && *o->host ? o->host : NULL, port, &hints, &ai) || !ai) {
        rc = cllm_err_set(err, CLLM_EINVAL, "cannot resolve --host %s", o->host ? o->host : "");
        goto fail;
    }
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_DUAL_STACK; /* "::" also takes IPv4 */
    unsigned conn_limit = o->connection_limit ? o->connection_limit : 1024;
    fit_nofile(conn_limit);
    unsigned per_ip = o->per_ip_connection_limit ? o->per_ip_connection_limit
                      : conn_limit >= 4          ? conn_limit / 4
                                                 : 1;
    /* MHD refuses connections over both limits at accept (it closes them unanswered); its
     * inactivity timeout is the keep-alive one between requests (on_request raises it to
     * --send-timeout for the request); srv_conn.c adds the header and body deadlines. */
    s->d = MHD_start_daemon(
        flags, (uint16_t)o->port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, srv_conn_notify,
        s, MHD_OPTION_URI_LOG_CALLBACK, on_uri, s, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)(o->n_threads > 0 ? o->n_threads : 1), MHD_OPTION_CONNECTION_LIMIT, conn_limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_CONNECTION_TIMEOUT,
        secs(o->keepalive_timeout_s), MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_END);
    /* No MHD_OPTION_LISTENING_ADDRESS_REUSE: it sets SO_REUSEPORT, and then a second server on
     * the same port starts and splits the traffic. MHD's default SO_REUSEADDR still lets a
     * restart bind while old connections sit in TIME_WAIT. */
    if (!s->d) {
        int e = bind_errno(ai);
        freeaddrinfo(ai);
        /* uvicorn's words, which vLLM operators grep for */
        rc = cllm_err_set(err, CLLM_EIO,
                          "[Errno %d] error while attempting to bind on address ('%s', %d): %s", e,
                          o->host && *o->host ? o->host : "0.0.0.0", o->port,
                          e == EADDRINUSE ? "address already in use" : strerror(e));
        goto fail;
    }
    freeaddrinfo(ai);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    if (pthread_create(&s->stats_thread, NULL, house_main, s) == 0)
        s->stats_running = true;
    else
        LOG_WARN("no housekeeping thread: no stats line, disconnects seen only when a response is "
                 "written");
    LOG_INFO("listening on http://%s:%d (model %s)", o->host ? o->host : "*", s->port,
             s->model_name);
    *out = s;
    return CLLM_OK;
fail:
    json_decref(s->default_kwargs);
    cllm_jinja_free(s->tmpl);
    srv_console_free(s->console);
    if (s->m.tok_bounds) srv_metrics_free(&s->m);
    free(s->model_name);
    free(s);
    return rc;
}

int cllm_server_port(const cllm_server *s) {
    return s->port;
}

/* Reads what the routes need from the engine. Only while not ready: no route reads these then. */
static void load_model_info(cllm_server *s) {
    s->tok = s->ops.tokenizer ? s->ops.tokenizer(s->ops.ctx) : NULL;
    memset(&s->vision, 0, sizeof(s->vision));
    if (s->ops.vision) s->ops.vision(s->ops.ctx, &s->vision);
    srv_image_load_prep(s);
    cllm_engine_stats st;
    memset(&st, 0, sizeof(st));
    if (s->ops.stats) s->ops.stats(s->ops.ctx, &st);
    if (st.max_model_len != s->max_model_len) {
        s->max_model_len = st.max_model_len;
        srv_metrics_set_max_len(&s->m, s->max_model_len);
    }
    cllm_jinja_free(s->tmpl);
    s->tmpl = NULL;
    const char *tsrc = srv_chat_template_src(s);
    if (tsrc) {
        cllm_error te = {0};
        if (cllm_jinja_compile(tsrc, strlen(tsrc), &s->tmpl, &te) != CLLM_OK)
            LOG_WARN("chat template does not compile (%s); /v1/chat/completions disabled", te.msg);
    }
}

void cllm_server_set_ready(cllm_server *s, bool ready) {
    if (ready && !__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE)) load_model_info(s);
    __atomic_store_n(&s->ready, ready ? 1 : 0, __ATOMIC_RELEASE);
}

void cllm_server_set_failed(cllm_server *s, const char *msg) {
    int none = 0; /* 0 none, 2 being written, 1 set */
    if (!__atomic_compare_exchange_n(&s->failed, &none, 2, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return;
    snprintf(s->failed_msg, sizeof(s->failed_msg), "%s", msg);
    __atomic_store_n(&s->failed, 1, __ATOMIC_RELEASE);
}

int cllm_server_in_flight(cllm_server *s) {
    pthread_mutex_lock(&s->mu);
    int n = s->in_flight;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* Waits (s->mu held) until nothing is in flight and every generation response is written. */
static bool wait_idle(cllm_server *s, double timeout_s) {
    double end = srv_now() + timeout_s;
    while (s->in_flight > 0 || s->open_gen_conns > 0) {
        double left = end - srv_now();
        if (left <= 0) return false;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double w = left < 0.2 ? left : 0.2;
        ts.tv_nsec += (long)(w * 1e9);
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    return true;
}

static int cancel_all(cllm_server *s) {
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (srv_req *r = s->reg_head; r; r = r->reg_next) n += r->n_subs;
    uint64_t *ids = calloc((size_t)(n ? n : 1), sizeof(uint64_t));
    int k = 0;
    for (srv_req *r = s->reg_head; r && ids; r = r->reg_next)
        for (int j = 0; j < r->n_subs; j++)
            if (r->subs[j].submitted) ids[k++] = r->subs[j].id;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < k; i++) s->ops.cancel(s->ops.ctx, ids[i]);
    free(ids);
    return k;
}

int cllm_server_drain(cllm_server *s, double timeout_s) {
    if (__atomic_exchange_n(&s->draining, 1, __ATOMIC_ACQ_REL)) return 0;
    if (s->ops.drain) s->ops.drain(s->ops.ctx);
    pthread_mutex_lock(&s->mu);
    int left = s->in_flight;
    pthread_mutex_unlock(&s->mu);
    LOG_INFO("draining: %d request(s) in flight, waiting up to %.0f s", left, timeout_s);
    pthread_mutex_lock(&s->mu);
    bool ok = wait_idle(s, timeout_s);
    pthread_mutex_unlock(&s->mu);
    int cancelled = 0;
    if (!ok) {
        cancelled = cancel_all(s);
        LOG_WARN("drain timeout: cancelled %d request(s)", cancelled);
        pthread_mutex_lock(&s->mu);
        ok = wait_idle(s, 10.0);
        pthread_mutex_unlock(&s->mu);
        if (!ok) LOG_ERROR("requests still in flight after cancelling; stopping anyway");
    }
    return cancelled;
}

void cllm_server_stop(cllm_server *s) {
    if (!s) return;
    __atomic_store_n(&s->draining, 1, __ATOMIC_RELEASE);
    if (cllm_server_in_flight(s) > 0) {
        cancel_all(s);
        pthread_mutex_lock(&s->mu);
        wait_idle(s, 10.0);
        pthread_mutex_unlock(&s->mu);
    }
    if (s->stats_running) {
        pthread_mutex_lock(&s->mu);
        s->stop_stats = true;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->stats_thread, NULL);
    }
    MHD_stop_daemon(s->d);
    srv_conn_linger_free(s);
    json_decref(s->default_kwargs);
    cllm_jinja_free(s->tmpl);
    srv_resp_store_free(s->resp_store);
    srv_metrics_free(&s->m);
    srv_console_free(s->console);
    free(s->model_name);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->conn_mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

char *cllm_server_metrics_text(cllm_server *s) {
    return srv_metrics_render(s);
}
