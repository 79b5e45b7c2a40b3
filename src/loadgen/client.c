/* bench-serve runner over libcurl multi; see client.h for the load shapes.
 *
 * One thread: curl_multi_poll wakes on socket activity or the next scheduled send; the write
 * callback stamps the arrival time of each block of bytes before the SSE reader splits it into
 * events, so every event in one read shares the time the bytes arrived. Requests go out in
 * scheduled order from a min-heap of due times. */
#include "loadgen/client.h"

#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "base/log.h"
#include "base/http.h"
#include "loadgen/rng.h"
#include "loadgen/sse.h"

#define MAX_TEXT  (4u << 20) /* answer text kept per request (multi-turn history) */
#define MAX_EVENT (4u << 20) /* one SSE line/event */

typedef struct sess {
    long conv;    /* dataset index */
    int turn;     /* next turn to send */
    long user;    /* closed-loop user, -1 in open loop */
    json_t *msgs; /* chat history */
    char *hist;   /* completions history */
    size_t hist_len, hist_cap;
    int hist_est; /* estimated tokens in the history */
} sess;

typedef struct item {
    double due;
    sess *s;
} item;

struct run;

typedef struct flight {
    struct run *run;
    CURL *h;
    struct curl_slist *hdr;
    char *body;
    long rec;
    sess *s;
    lg_sse sse;
    char *text;
    size_t text_len, text_cap;
    double now;                 /* arrival time of the bytes being parsed */
    struct flight *prev, *next; /* run's list of flights in progress */
    bool done, server_err, bad_json, http_err;
} flight;

typedef struct run {
    const lg_config *c;
    CURLM *m;
    char url[1024];
    const char *model;
    lg_req *recs;
    long n_recs, cap_recs;
    item *heap;
    long n_heap, cap_heap;
    struct timespec t0;
    long inflight, issued, convs_started, limit;
    bool warm;
    lg_rng rng;
    double *arrivals; /* open loop with a count: precomputed, rescaled */
    long n_arrivals, next_arr;
    double next_arrival; /* open loop with a duration: lazily drawn */
    bool arrivals_done;
    lg_overhead ov;
    double lag_sum;
    double last_finish; /* when a request last completed (frees a --max-concurrency slot) */
    flight *flights;    /* in progress */
    cllm_error *err;
    cllm_status fatal;
} run;

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double elapsed(const run *r) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)(ts.tv_sec - r->t0.tv_sec) + (double)(ts.tv_nsec - r->t0.tv_nsec) * 1e-9;
}

static double cpu_now(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* ---- heap of scheduled sends ---- */

static bool heap_push(run *r, double due, sess *s) {
    if (r->n_heap == r->cap_heap) {
        long c = r->cap_heap ? r->cap_heap * 2 : 256;
        item *q = realloc(r->heap, (size_t)c * sizeof(item));
        if (!q) return false;
        r->heap = q, r->cap_heap = c;
    }
    long i = r->n_heap++;
    while (i > 0 && r->heap[(i - 1) / 2].due > due) {
        r->heap[i] = r->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    r->heap[i] = (item){due, s};
    return true;
}

static item heap_pop(run *r) {
    item top = r->heap[0], last = r->heap[--r->n_heap];
    long i = 0, n = r->n_heap;
    for (;;) {
        long l = 2 * i + 1, m = i;
        double dm = last.due;
        if (l < n && r->heap[l].due < dm) m = l, dm = r->heap[l].due;
        if (l + 1 < n && r->heap[l + 1].due < dm) m = l + 1;
        if (m == i) break;
        r->heap[i] = r->heap[m];
        i = m;
    }
    if (n) r->heap[i] = last;
    return top;
}

/* ---- sessions ---- */

static void sess_free(sess *s) {
    if (!s) return;
    json_decref(s->msgs);
    free(s->hist);
    free(s);
}

static sess *sess_new(run *r, long user) {
    sess *s = calloc(1, sizeof(sess));
    if (!s) return NULL;
    s->conv = r->convs_started++ % r->c->ds->n;
    s->user = user;
    return s;
}

static bool hist_append(sess *s, const char *a, size_t n) {
    if (s->hist_len + n + 1 > s->hist_cap) {
        size_t c = s->hist_cap ? s->hist_cap : 1024;
        while (c < s->hist_len + n + 1) c *= 2;
        char *q = realloc(s->hist, c);
        if (!q) return false;
        s->hist = q, s->hist_cap = c;
    }
    memcpy(s->hist + s->hist_len, a, n);
    s->hist_len += n;
    s->hist[s->hist_len] = 0;
    return true;
}

static double think(run *r) {
    const lg_config *c = r->c;
    if (c->think_hi <= 0) return 0;
    return c->think_lo + (c->think_hi - c->think_lo) * lg_rng_unit(&r->rng);
}

/* ---- SSE events ---- */

static bool text_append(flight *f, const char *t, size_t n) {
    if (f->text_len + n + 1 > MAX_TEXT) return true; /* keep the head; history is a load shape */
    if (f->text_len + n + 1 > f->text_cap) {
        size_t c = f->text_cap ? f->text_cap : 1024;
        while (c < f->text_len + n + 1) c *= 2;
        char *q = realloc(f->text, c);
        if (!q) return false;
        f->text = q, f->text_cap = c;
    }
    memcpy(f->text + f->text_len, t, n);
    f->text_len += n;
    f->text[f->text_len] = 0;
    return true;
}

static bool on_event(void *ctx, const char *data, size_t len) {
    flight *f = ctx;
    run *r = f->run;
    r->ov.chunks++;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        f->done = true;
        return true;
    }
    json_error_t je;
    json_t *j = json_loadb(data, len, JSON_ALLOW_NUL, &je); /* "\u0000" is valid text */
    if (!j || !json_is_object(j)) {
        json_decref(j);
        f->bad_json = true;
        LOG_DEBUG("bench-serve: bad SSE JSON (%s): %.200s", je.text, data);
        return false;
    }
    lg_req *q = &r->recs[f->rec];
    json_t *e = json_object_get(j, "error");
    if (e && !json_is_null(e)) f->server_err = true;
    json_t *ch = json_object_get(j, "choices");
    if (json_is_array(ch) && json_array_size(ch) > 0) {
        if (!lg_req_add_chunk(q, f->now)) {
            json_decref(j);
            return false;
        }
        json_t *c0 = json_array_get(ch, 0);
        json_t *t = json_object_get(c0, "text");
        bool tool = false;
        if (!t) {
            json_t *d = json_object_get(c0, "delta");
            t = json_object_get(d, "content");
            if (!json_is_string(t) || !json_string_length(t)) t = json_object_get(d, "reasoning");
            if (!json_is_string(t) || !json_string_length(t))
                t = json_object_get(d, "reasoning_content");
            tool = json_array_size(json_object_get(d, "tool_calls")) > 0;
        }
        bool has_text = json_is_string(t) && json_string_length(t);
        if ((has_text || tool) && q->first_text_chunk < 0) q->first_text_chunk = q->n_chunks - 1;
        if (has_text) {
            q->n_text_chunks++;
            if (!text_append(f, json_string_value(t), json_string_length(t))) {
                json_decref(j);
                return false;
            }
        }
    }
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        json_t *pt = json_object_get(u, "prompt_tokens"),
               *ct = json_object_get(u, "completion_tokens");
        if (json_is_integer(pt)) q->usage_prompt = (int)json_integer_value(pt);
        if (json_is_integer(ct)) q->usage_completion = (int)json_integer_value(ct);
    }
    json_decref(j);
    return true;
}

static size_t on_data(char *p, size_t sz, size_t nm, void *ud) {
    flight *f = ud;
    double t_in = mono();
    size_t n = sz * nm;
    f->now = elapsed(f->run);
    if (f->http_err) return n;
    long status = 0;
    curl_easy_getinfo(f->h, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 400) {
        f->http_err = true;
        return n;
    }
    bool ok = lg_sse_feed(&f->sse, p, n);
    f->run->ov.cb_s += mono() - t_in;
    return ok ? n : 0;
}

/* ---- sending ---- */

static void flight_free(flight *f) {
    if (!f) return;
    if (f->h) curl_easy_cleanup(f->h);
    curl_slist_free_all(f->hdr);
    free(f->body);
    lg_sse_free(&f->sse);
    free(f->text);
    free(f);
}

static lg_req *new_rec(run *r) {
    if (r->n_recs == r->cap_recs) {
        long c = r->cap_recs ? r->cap_recs * 2 : 1024;
        lg_req *q = realloc(r->recs, (size_t)c * sizeof(lg_req));
        if (!q) return NULL;
        r->recs = q, r->cap_recs = c;
    }
    lg_req *q = &r->recs[r->n_recs++];
    memset(q, 0, sizeof(*q));
    q->usage_prompt = q->usage_completion = -1;
    q->first_text_chunk = -1;
    return q;
}

static char *build_body(run *r, sess *s, const lg_turn *t, int *est) {
    const lg_config *c = r->c;
    const lg_conv *cv = &c->ds->convs[s->conv];
    json_t *b = json_object();
    json_object_set_new(b, "model", json_string(r->model));
    if (c->chat) {
        if (!s->msgs) s->msgs = json_array();
        json_t *m = json_object();
        json_object_set_new(m, "role", json_string("user"));
        json_object_set_new(m, "content", json_string(t->prompt));
        json_array_append_new(s->msgs, m);
        json_object_set(b, "messages", s->msgs);
        s->hist_est += t->est_tokens;
        *est = s->hist_est;
    } else if (cv->n_turns == 1) {
        json_object_set_new(b, "prompt", json_string(t->prompt));
        *est = t->est_tokens;
    } else {
        const char *sep = s->turn ? "\n" : "";
        if (!hist_append(s, sep, strlen(sep)) || !hist_append(s, "User: ", 6) ||
            !hist_append(s, t->prompt, strlen(t->prompt)) || !hist_append(s, "\nAssistant:", 11)) {
            json_decref(b);
            return NULL;
        }
        json_object_set_new(b, "prompt", json_string(s->hist));
        s->hist_est += t->est_tokens + 4;
        *est = s->hist_est;
    }
    json_object_set_new(b, "max_tokens", json_integer(t->max_tokens));
    json_object_set_new(b, "stream", json_true());
    if (c->include_usage) {
        json_t *so = json_object();
        json_object_set_new(so, "include_usage", json_true());
        json_object_set_new(so, "continuous_usage_stats", json_false());
        json_object_set_new(b, "stream_options", so);
    }
    if (c->temperature >= 0) json_object_set_new(b, "temperature", json_real(c->temperature));
    if (c->ignore_eos) json_object_set_new(b, "ignore_eos", json_true());
    char *out = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return out;
}

static cllm_status start_request(run *r, sess *s, double due, double now) {
    const lg_config *c = r->c;
    const lg_turn *t = &c->ds->convs[s->conv].turns[s->turn];
    flight *f = calloc(1, sizeof(flight));
    lg_req *q = f ? new_rec(r) : NULL;
    if (!q) {
        free(f);
        return cllm_err_set(r->err, CLLM_ENOMEM, "bench-serve: out of memory");
    }
    f->run = r;
    f->rec = r->n_recs - 1;
    f->s = s;
    q->conv = (int)s->conv;
    q->turn = s->turn;
    q->max_tokens = t->max_tokens;
    lg_sse_init(&f->sse, MAX_EVENT, on_event, f);
    f->body = build_body(r, s, t, &q->est_prompt);
    f->h = curl_easy_init();
    if (!f->body || !f->h) {
        flight_free(f);
        return cllm_err_set(r->err, CLLM_ENOMEM, "bench-serve: out of memory");
    }
    f->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    f->hdr = curl_slist_append(f->hdr, "Accept: text/event-stream");
    if (c->api_key) {
        char auth[512];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", c->api_key);
        f->hdr = curl_slist_append(f->hdr, auth);
    }
    CURL *h = f->h;
    curl_easy_setopt(h, CURLOPT_URL, r->url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, f->body);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, f->hdr);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(h, CURLOPT_PRIVATE, f);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(c->timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    if (curl_multi_add_handle(r->m, h) != CURLM_OK) {
        flight_free(f);
        return cllm_err_set(r->err, CLLM_EIO, "bench-serve: curl_multi_add_handle failed");
    }
    f->next = r->flights;
    if (r->flights) r->flights->prev = f;
    r->flights = f;
    q->t_sent = now;
    r->issued++;
    r->inflight++;
    if (r->inflight > r->ov.peak_inflight) r->ov.peak_inflight = r->inflight;
    /* a send held back by --max-concurrency is queueing, not client lag */
    if (!r->warm) {
        double base = due;
        if (c->max_concurrency > 0 && r->last_finish > base) base = r->last_finish;
        double lag = now - base;
        if (lag < 0) lag = 0;
        r->lag_sum += lag;
        r->ov.lag_n++;
        if (lag * 1000 > r->ov.lag_max_ms) r->ov.lag_max_ms = lag * 1000;
    }
    return CLLM_OK;
}

static lg_err classify(const flight *f, CURLcode res, long status, const lg_req *q) {
    if (res == CURLE_OPERATION_TIMEDOUT) return LG_ERR_TIMEOUT;
    if (res == CURLE_COULDNT_CONNECT || res == CURLE_COULDNT_RESOLVE_HOST ||
        res == CURLE_COULDNT_RESOLVE_PROXY)
        return LG_ERR_CONNECT;
    if (status >= 500) return LG_ERR_HTTP_5XX;
    if (status >= 400) return LG_ERR_HTTP_4XX;
    if (res != CURLE_OK) return f->server_err ? LG_ERR_SERVER : LG_ERR_STREAM;
    if (f->server_err) return LG_ERR_SERVER;
    if (q->n_chunks == 0) return LG_ERR_NO_CHUNK;
    if (!f->done) return LG_ERR_STREAM;
    return LG_ERR_NONE;
}

/* A request finished: record it, then schedule what its user/conversation does next. */
static cllm_status finish(run *r, flight *f, CURLcode res) {
    const lg_config *c = r->c;
    long status = 0;
    curl_easy_getinfo(f->h, CURLINFO_RESPONSE_CODE, &status);
    if (res == CURLE_OK && !f->http_err) lg_sse_finish(&f->sse);
    lg_req *q = &r->recs[f->rec];
    q->http_status = (int)status;
    q->err = classify(f, res, status, q);
    if (q->err != LG_ERR_NONE)
        LOG_DEBUG("bench-serve: request %ld failed (%s): curl '%s', HTTP %ld, bad_json %d, "
                  "overflow %d, done %d",
                  f->rec, lg_err_name(q->err), curl_easy_strerror(res), status, f->bad_json,
                  f->sse.overflow, f->done);
    r->inflight--;
    r->last_finish = elapsed(r);
    sess *s = f->s;
    const lg_conv *cv = &c->ds->convs[s->conv];
    double now = elapsed(r);
    cllm_status st = CLLM_OK;
    if (q->err == LG_ERR_NONE && s->turn + 1 < cv->n_turns && !r->warm) {
        /* the answer becomes part of the next turn's prompt */
        if (c->chat) {
            json_t *m = json_object();
            json_object_set_new(m, "role", json_string("assistant"));
            json_object_set_new(m, "content", json_stringn(f->text ? f->text : "", f->text_len));
            json_array_append_new(s->msgs, m);
        } else if (f->text_len && !hist_append(s, f->text, f->text_len)) {
            st = cllm_err_set(r->err, CLLM_ENOMEM, "bench-serve: out of memory");
        }
        s->hist_est += lg_req_out_tokens(q);
        s->turn++;
        if (!st && !heap_push(r, now + think(r), s))
            st = cllm_err_set(r->err, CLLM_ENOMEM, "out of memory");
    } else if (s->user >= 0 && !r->warm) {
        long user = s->user;
        sess_free(s);
        sess *n = sess_new(r, user);
        if (!n || !heap_push(r, now + think(r), n)) {
            sess_free(n);
            st = cllm_err_set(r->err, CLLM_ENOMEM, "bench-serve: out of memory");
        }
    } else {
        sess_free(s);
    }
    if (f->prev)
        f->prev->next = f->next;
    else
        r->flights = f->next;
    if (f->next) f->next->prev = f->prev;
    curl_multi_remove_handle(r->m, f->h);
    flight_free(f);
    return st;
}

/* Open-loop arrivals due by now become scheduled conversations. */
static cllm_status feed_arrivals(run *r, double now) {
    const lg_config *c = r->c;
    while (!r->arrivals_done) {
        double t;
        if (r->arrivals) {
            if (r->next_arr >= r->n_arrivals) {
                r->arrivals_done = true;
                break;
            }
            t = r->arrivals[r->next_arr];
        } else {
            t = r->next_arrival;
        }
        if (c->duration_s > 0 && t >= c->duration_s) {
            r->arrivals_done = true;
            break;
        }
        if (t > now) break;
        sess *s = sess_new(r, -1);
        if (!s || !heap_push(r, t, s)) {
            sess_free(s);
            return cllm_err_set(r->err, CLLM_ENOMEM, "bench-serve: out of memory");
        }
        if (r->arrivals) {
            r->next_arr++;
        } else {
            double rate = c->request_rate, b = c->burstiness > 0 ? c->burstiness : 1;
            r->next_arrival += lg_rng_gamma(&r->rng, b, 1.0 / (rate * b));
        }
    }
    return CLLM_OK;
}

static double next_arrival_time(const run *r) {
    if (r->arrivals_done) return INFINITY;
    return r->arrivals ? r->arrivals[r->next_arr] : r->next_arrival;
}

/* Runs one phase (warmup or measured) to completion. */
static cllm_status run_phase(run *r) {
    const lg_config *c = r->c;
    double last_progress = 0;
    for (;;) {
        double now = elapsed(r);
        if (!r->warm && c->users <= 0) {
            cllm_status st = feed_arrivals(r, now);
            if (st) return st;
        }
        while (r->n_heap && r->heap[0].due <= now &&
               (c->max_concurrency <= 0 || r->inflight < c->max_concurrency)) {
            item it = heap_pop(r);
            bool over = (r->limit > 0 && r->issued >= r->limit) ||
                        (!r->warm && c->duration_s > 0 && now >= c->duration_s);
            if (over) {
                sess_free(it.s);
                continue;
            }
            cllm_status st = start_request(r, it.s, it.due, now);
            if (st) {
                sess_free(it.s);
                return st;
            }
        }
        if (!r->inflight && !r->n_heap && (r->warm || c->users > 0 || r->arrivals_done)) break;
        if (!r->inflight && !r->n_heap && r->limit > 0 && r->issued >= r->limit) break;
        int running = 0;
        curl_multi_perform(r->m, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(r->m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            flight *f = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&f);
            cllm_status st = finish(r, f, msg->data.result);
            if (st) return st;
        }
        now = elapsed(r);
        if (c->progress && !r->warm && now - last_progress >= 1.0) {
            last_progress = now;
            fprintf(stderr, "[bench-serve] t=%.1fs sent=%ld in-flight=%ld\n", now, r->issued,
                    r->inflight);
        }
        double next = INFINITY;
        if (r->n_heap && (c->max_concurrency <= 0 || r->inflight < c->max_concurrency))
            next = r->heap[0].due;
        if (!r->warm && c->users <= 0) {
            double a = next_arrival_time(r);
            if (a < next) next = a;
        }
        double wait = next - now;
        int ms = wait <= 0 ? 0 : wait > 0.1 ? 100 : (int)ceil(wait * 1000);
        if (ms > 0 || r->inflight) curl_multi_poll(r->m, NULL, 0, ms, NULL);
    }
    return CLLM_OK;
}

static cllm_status discover_model(const lg_config *c, char *out, size_t cap, cllm_error *err) {
    char url[1024];
    cllm_url_join(url, sizeof(url), c->base_url, "/v1/models");
    cllm_http_resp resp;
    cllm_status st = cllm_http_get(url, c->api_key, 10, 1 << 20, &resp, err);
    if (st) return st;
    json_t *j = json_loads(resp.body, 0, NULL);
    int status = resp.status;
    cllm_http_resp_free(&resp);
    const char *id =
        json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
    if (status != 200 || !id) {
        json_decref(j);
        return cllm_err_set(err, CLLM_EFORMAT, "%s: HTTP %d, no data[0].id (pass --model)", url,
                            status);
    }
    snprintf(out, cap, "%s", id);
    json_decref(j);
    return CLLM_OK;
}

static void run_clear(run *r) {
    for (long i = 0; i < r->n_heap; i++) sess_free(r->heap[i].s);
    r->n_heap = 0;
    /* abandon anything still in flight (only after an error) */
    while (r->flights) {
        flight *f = r->flights;
        r->flights = f->next;
        curl_multi_remove_handle(r->m, f->h);
        sess_free(f->s);
        flight_free(f);
    }
}

cllm_status lg_bench_run(const lg_config *c, lg_result *out, cllm_error *err) {
    memset(out, 0, sizeof(*out));
    if (!c->ds || c->ds->n <= 0)
        return cllm_err_set(err, CLLM_EINVAL, "bench-serve: empty dataset");
    if (c->num_prompts <= 0 && c->duration_s <= 0)
        return cllm_err_set(err, CLLM_EINVAL, "bench-serve: need --num-prompts or --duration");
    if (c->users > 0 && c->think_hi < c->think_lo)
        return cllm_err_set(err, CLLM_EINVAL, "bench-serve: think time range is reversed");
    if (c->model) {
        snprintf(out->model, sizeof(out->model), "%s", c->model);
    } else {
        cllm_status st = discover_model(c, out->model, sizeof(out->model), err);
        if (st) return st;
    }
    run r = {.c = c, .model = out->model, .err = err};
    lg_rng_seed(&r.rng, c->seed ^ 0x5eedull);
    cllm_url_join(r.url, sizeof(r.url), c->base_url,
                  c->chat ? "/v1/chat/completions" : "/v1/completions");
    r.m = curl_multi_init();
    if (!r.m) return cllm_err_set(err, CLLM_ENOMEM, "curl_multi_init failed");
    curl_multi_setopt(r.m, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
    curl_multi_setopt(r.m, CURLMOPT_MAXCONNECTS, 4096L);
    cllm_status st = CLLM_OK;

    /* warmup: num_warmups first turns, all at once (capped by --max-concurrency) */
    if (c->num_warmups > 0) {
        r.warm = true;
        r.limit = c->num_warmups;
        clock_gettime(CLOCK_MONOTONIC, &r.t0);
        for (long i = 0; i < c->num_warmups && !st; i++) {
            sess *s = sess_new(&r, -1);
            if (!s || !heap_push(&r, 0, s)) {
                sess_free(s);
                st = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
            }
        }
        if (!st) st = run_phase(&r);
        long ok = 0;
        lg_err first = LG_ERR_NONE;
        for (long i = 0; i < r.n_recs; i++) {
            if (r.recs[i].err == LG_ERR_NONE)
                ok++;
            else if (first == LG_ERR_NONE)
                first = r.recs[i].err;
            lg_req_free(&r.recs[i]);
        }
        if (!st && ok == 0)
            st = cllm_err_set(err, CLLM_EIO, "bench-serve: every warmup request failed (%s) at %s",
                              lg_err_name(first), r.url);
        r.n_recs = 0;
        r.issued = 0;
        r.convs_started = 0;
        r.warm = false;
    }

    /* measured run */
    if (!st) {
        r.limit = c->num_prompts;
        if (c->users > 0) {
            for (long u = 0; u < c->users && !st; u++) {
                sess *s = sess_new(&r, u);
                double due = c->ramp_up_s > 0 ? c->ramp_up_s * (double)u / (double)c->users : 0;
                if (!s || !heap_push(&r, due, s)) {
                    sess_free(s);
                    st = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
                }
            }
        } else if (c->request_rate > 0 && isfinite(c->request_rate)) {
            double b = c->burstiness > 0 ? c->burstiness : 1;
            if (c->num_prompts > 0) {
                r.n_arrivals = c->num_prompts;
                r.arrivals = malloc((size_t)r.n_arrivals * sizeof(double));
                if (!r.arrivals) st = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
                double acc = 0;
                for (long i = 0; !st && i < r.n_arrivals; i++) {
                    acc += lg_rng_gamma(&r.rng, b, 1.0 / (c->request_rate * b));
                    r.arrivals[i] = acc;
                }
                /* vLLM: rescale so the last request goes out at N / rate */
                double scale = acc > 0 ? ((double)r.n_arrivals / c->request_rate) / acc : 1;
                for (long i = 0; !st && i < r.n_arrivals; i++) r.arrivals[i] *= scale;
            } else {
                r.next_arrival = lg_rng_gamma(&r.rng, b, 1.0 / (c->request_rate * b));
            }
        } else {
            /* infinite rate: everything at t0 */
            r.n_arrivals = c->num_prompts > 0       ? c->num_prompts
                           : c->max_concurrency > 0 ? c->max_concurrency
                                                    : 1;
            if (c->num_prompts <= 0)
                LOG_WARN("bench-serve: --duration without --num-prompts, --request-rate or --users "
                         "sends %ld requests at t0",
                         r.n_arrivals);
            r.arrivals = calloc((size_t)r.n_arrivals, sizeof(double));
            if (!r.arrivals) st = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        }
        double cpu0 = cpu_now();
        clock_gettime(CLOCK_MONOTONIC, &r.t0);
        if (!st) st = run_phase(&r);
        out->duration_s = elapsed(&r);
        r.ov.cpu_s = cpu_now() - cpu0;
        r.ov.lag_mean_ms = r.ov.lag_n ? r.lag_sum / (double)r.ov.lag_n * 1000 : 0;
    }
    run_clear(&r);
    free(r.heap);
    free(r.arrivals);
    curl_multi_cleanup(r.m);
    out->reqs = r.recs;
    out->n = r.n_recs;
    out->ov = r.ov;
    if (st) lg_result_free(out);
    return st;
}

void lg_result_free(lg_result *r) {
    for (long i = 0; i < r->n; i++) lg_req_free(&r->reqs[i]);
    free(r->reqs);
    r->reqs = NULL;
    r->n = 0;
}

void lg_overhead_print(FILE *f, const lg_result *r) {
    const lg_overhead *o = &r->ov;
    int len = (int)strlen("Client overhead"), left = (50 - len) / 2;
    fprintf(f, "%.*s%s%.*s\n", left, "--------------------------------------------------",
            "Client overhead", 50 - len - left,
            "--------------------------------------------------");
    fprintf(f, "%-40s %-10.2f\n", "Client CPU time (s):", o->cpu_s);
    fprintf(f, "%-40s %-10.2f\n",
            "Client CPU (% of one core):", r->duration_s > 0 ? 100 * o->cpu_s / r->duration_s : 0);
    fprintf(f, "%-40s %-10.2f\n",
            "Client CPU per request (ms):", r->n ? 1000 * o->cpu_s / (double)r->n : 0);
    fprintf(f, "%-40s %-10.2f\n",
            "Chunk handling per chunk (us):", o->chunks ? 1e6 * o->cb_s / (double)o->chunks : 0);
    fprintf(f, "%-40s %-10.2f\n", "Mean send lag (ms):", o->lag_mean_ms);
    fprintf(f, "%-40s %-10.2f\n", "Max send lag (ms):", o->lag_max_ms);
    fprintf(f, "%-40s %-10ld\n", "Peak requests in flight:", o->peak_inflight);
}
