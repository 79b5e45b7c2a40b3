/* Per-request state shared between the MHD thread (the connection side) and the engine thread
 * (the event callback), and the streaming response reader.
 *
 * Protocol (no thread sleeps per request, nothing busy-waits):
 *  - the engine callback copies each event into r's queue under r->mu and, when the connection
 *    side has suspended the connection, resumes it (also under r->mu);
 *  - the connection side takes the whole queue under r->mu; when it is empty and the request is
 *    not finished it suspends the connection before releasing r->mu, so a resume can never be
 *    issued for a connection that is not suspended (MHD calls that undefined behaviour) and no
 *    event is missed;
 *  - MHD never closes a suspended connection, and after MHD reports the connection finished
 *    (conn_gone) the engine side never touches it again.
 * r is reference counted: the connection, the streaming response and the engine (from submit
 * until the last final event) each hold one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "server/srv_int.h"

srv_req *srv_req_new(cllm_server *s, struct MHD_Connection *c, const char *method,
                     const char *url) {
    srv_req *r = calloc(1, sizeof(*r));
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    r->refs = 1;
    r->srv = s;
    r->conn = c;
    snprintf(r->method, sizeof(r->method), "%s", method);
    snprintf(r->url, sizeof(r->url), "%s", url);
    r->t_arrival = r->t_drain = srv_now();
    return r;
}

static void ev_free(srv_ev *e) {
    while (e) {
        srv_ev *n = e->next;
        free(e->text);
        free(e->tokens);
        free(e->lp);
        free(e->plp);
        free(e->emb);
        free(e->error);
        free(e->stop_str);
        free(e);
        e = n;
    }
}

static void choices_free(srv_req *r) {
    if (!r->choices) return;
    for (int i = 0; i < r->gen.n; i++) {
        srv_choice *c = &r->choices[i];
        srv_buf_free(&c->text);
        srv_buf_free(&c->content);
        srv_buf_free(&c->reasoning);
        cllm_outp_free(c->parser);
        json_decref(c->tool_calls);
        json_decref(c->lp);
        free(c->emb);
        free(c->error);
        free(c->stop_str);
    }
    free(r->choices);
    r->choices = NULL;
}

void srv_req_unref(srv_req *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left) return;
    ev_free(r->head);
    choices_free(r);
    srv_gen_free(&r->gen);
    srv_buf_free(&r->body);
    srv_buf_free(&r->out);
    free(r->t_last_token);
    free(r->subs);
    srv_plp_free(r);
    srv_resp_state_free(r->resp);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static srv_ev *ev_copy(const cllm_event *ev) {
    srv_ev *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->index = ev->index;
    c->finish = ev->finish;
    c->prompt_tokens = ev->prompt_tokens;
    c->completion_tokens = ev->completion_tokens;
    c->cached_prompt_tokens = ev->cached_prompt_tokens;
    size_t tl = ev->text ? ev->text_len : 0;
    c->text = malloc(tl + 1);
    if (!c->text) goto fail;
    if (tl) memcpy(c->text, ev->text, tl);
    c->text[tl] = 0;
    c->text_len = tl;
    if (ev->n_tokens > 0 && ev->token_ids) {
        c->tokens = malloc(sizeof(int) * (size_t)ev->n_tokens);
        if (!c->tokens) goto fail;
        memcpy(c->tokens, ev->token_ids, sizeof(int) * (size_t)ev->n_tokens);
        c->n_tokens = ev->n_tokens;
        if (ev->logprobs) {
            size_t n = (size_t)ev->n_tokens * (size_t)(1 + ev->n_top_logprobs);
            c->lp = malloc(sizeof(cllm_token_logprob) * n);
            if (!c->lp) goto fail;
            memcpy(c->lp, ev->logprobs, sizeof(cllm_token_logprob) * n);
            c->n_top = ev->n_top_logprobs;
        }
    }
    if (ev->prompt_lp && ev->n_prompt_lp > 0) {
        size_t n = (size_t)ev->n_prompt_lp * (size_t)(ev->n_prompt_top + 1);
        c->plp = malloc(n * sizeof(cllm_prompt_logprob));
        if (!c->plp) goto fail;
        memcpy(c->plp, ev->prompt_lp, n * sizeof(cllm_prompt_logprob));
        c->n_plp = ev->n_prompt_lp;
        c->plp_top = ev->n_prompt_top;
    }
    if (ev->embedding && ev->n_embedding > 0) {
        c->emb = malloc((size_t)ev->n_embedding * sizeof(float));
        if (!c->emb) goto fail;
        memcpy(c->emb, ev->embedding, (size_t)ev->n_embedding * sizeof(float));
        c->n_emb = ev->n_embedding;
    }
    if (ev->error) c->error = strdup(ev->error);
    if (ev->stop_str && !(c->stop_str = strdup(ev->stop_str))) goto fail;
    c->has_stop_token = ev->has_stop_token;
    c->stop_token = ev->stop_token;
    return c;
fail:
    ev_free(c);
    return NULL;
}

/* The per-request histograms, from the engine's timings on the last event. m->mu held. */
static void request_done_metrics(srv_metrics *m, const srv_req *r, const cllm_event *ev) {
    m->cached_tokens += (uint64_t)(ev->cached_prompt_tokens > 0 ? ev->cached_prompt_tokens : 0);
    srv_metrics_observe(m, SRV_H_PROMPT, ev->prompt_tokens);
    srv_metrics_observe(m, SRV_H_KV_COMPUTED, ev->prompt_tokens - ev->cached_prompt_tokens);
    srv_metrics_observe(m, SRV_H_PARAMS_N, r->gen.n);
    if (r->gen.s.max_tokens > 0) srv_metrics_observe(m, SRV_H_PARAMS_MAX, r->gen.s.max_tokens);
    if (ev->t_scheduled > 0 && ev->t_arrival > 0)
        srv_metrics_observe(m, SRV_H_QUEUE, ev->t_scheduled - ev->t_arrival);
    if (ev->t_scheduled > 0 && ev->t_finished >= ev->t_scheduled)
        srv_metrics_observe(m, SRV_H_INFERENCE, ev->t_finished - ev->t_scheduled);
    if (ev->t_first_token > 0 && ev->t_scheduled > 0 && ev->t_first_token >= ev->t_scheduled) {
        srv_metrics_observe(m, SRV_H_PREFILL, ev->t_first_token - ev->t_scheduled);
        if (ev->t_finished >= ev->t_first_token) {
            double dec = ev->t_finished - ev->t_first_token;
            srv_metrics_observe(m, SRV_H_DECODE, dec);
            if (ev->completion_tokens > 1)
                srv_metrics_observe(m, SRV_H_TPOT, dec / (ev->completion_tokens - 1));
        }
    }
}

/* Engine thread. Copies the event, records timings, wakes the connection. Never blocks beyond
 * short mutex sections. */
static void on_event(void *user, const cllm_event *ev) {
    srv_sub *sub = user;
    srv_req *r = sub->r;
    cllm_server *s = r->srv;
    double now = srv_now();
    srv_ev *c = ev_copy(ev);
    int n = r->gen.n, idx = sub->base + ev->index;
    if (ev->index < 0 || idx >= n) idx = sub->base;
    bool first = false, last = false, dequeue = false;
    double gap = -1;

    pthread_mutex_lock(&r->mu);
    if (ev->n_tokens > 0 || ev->embedding) { /* an embedding is its request's "first token" */
        if (!r->first_token_seen) {
            first = true;
            r->t_first_token = now;
        }
        r->first_token_seen = true;
        if (r->t_last_token && r->t_last_token[idx] > 0)
            gap = (now - r->t_last_token[idx]) / ev->n_tokens;
        if (r->t_last_token) r->t_last_token[idx] = now;
    }
    if (r->queued_tokens_counted) {
        r->queued_tokens_counted = false;
        dequeue = true;
    }
    if (c) {
        c->index = idx;
        if (r->tail)
            r->tail->next = c;
        else
            r->head = c;
        r->tail = c;
    } else {
        r->ev_oom = true;
    }
    if (ev->finish != CLLM_FINISH_NONE) last = ++r->n_finished_engine == n;
    if (r->suspended && !r->conn_gone) {
        r->suspended = false;
        r->t_drain = now; /* --send-timeout counts from here, not from the suspension */
        MHD_resume_connection(r->conn);
    }
    pthread_mutex_unlock(&r->mu);

    srv_metrics *m = &s->m;
    pthread_mutex_lock(&m->mu);
    if (first) {
        srv_metrics_observe(m, SRV_H_TTFT, now - r->t_arrival);
        /* counted when prefill is done (as vLLM), not when the request ends */
        m->prompt_tokens += r->gen.prompt_total;
    }
    for (int i = 0; gap >= 0 && i < ev->n_tokens; i++) srv_metrics_observe(m, SRV_H_ITL, gap);
    /* every step's tokens at once, so rate() is right during long generations */
    m->generation_tokens += (uint64_t)(ev->n_tokens > 0 ? ev->n_tokens : 0);
    if (ev->finish != CLLM_FINISH_NONE) {
        m->success[ev->finish < 5 ? ev->finish : CLLM_FINISH_ERROR]++;
        srv_metrics_observe(m, SRV_H_GEN, ev->completion_tokens);
        srv_metrics_observe(m, SRV_H_E2E, now - r->t_arrival);
        if (last) request_done_metrics(m, r, ev);
    }
    pthread_mutex_unlock(&m->mu);

    if (dequeue || last) {
        pthread_mutex_lock(&s->mu);
        if (dequeue) s->queued_tokens -= r->gen.prompt_total;
        if (last) {
            if (r->reg_prev)
                r->reg_prev->reg_next = r->reg_next;
            else
                s->reg_head = r->reg_next;
            if (r->reg_next) r->reg_next->reg_prev = r->reg_prev;
            r->reg_prev = r->reg_next = NULL;
            s->in_flight--;
            pthread_cond_broadcast(&s->cv);
        }
        pthread_mutex_unlock(&s->mu);
    }
    if (last) srv_req_unref(r); /* the engine's reference */
}

/* Cancels every engine request of r (ids copied under s->mu by the caller's choice). */
static void srv_req_cancel_engine(srv_req *r) {
    cllm_server *s = r->srv;
    uint64_t ids[64];
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < r->n_subs && n < 64; i++)
        if (r->subs[i].submitted) ids[n++] = r->subs[i].id;
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++) s->ops.cancel(s->ops.ctx, ids[i]);
}

/* One engine request per prompt. When a later one is refused, the earlier ones are cancelled
 * and the never-submitted samples are counted as finished, so the last abort of the earlier
 * ones completes the request's accounting; the caller answers with the error. */
static cllm_status submit_subs(srv_req *r, cllm_error *ce) {
    cllm_server *s = r->srv;
    srv_gen *g = &r->gen;
    int nb = g->n_batch ? g->n_batch : 1, per = g->n_batch ? g->s.n : g->n;
    for (int b = 0; b < nb; b++) {
        const cllm_tok_ids *p = g->n_batch ? &g->batch[b] : &g->prompt;
        srv_sub *sub = &r->subs[b];
        sub->r = r;
        sub->base = b * per;
        cllm_request req = {.prompt = p->ids,
                            .n_prompt = (int)p->n,
                            .sampling = g->s,
                            .on_event = on_event,
                            .user = sub,
                            .cache_salt = g->cache_salt,
                            .images = g->images,
                            .n_images = g->n_images};
        uint64_t id = 0;
        cllm_status st = s->ops.submit(s->ops.ctx, &req, &id, ce);
        if (st != CLLM_OK) {
            if (b == 0) return st;
            pthread_mutex_lock(&r->mu);
            r->n_finished_engine += per * (nb - b);
            pthread_mutex_unlock(&r->mu);
            srv_req_cancel_engine(r);
            return st;
        }
        /* published under s->mu: the drain and the disconnect watch read them from other threads */
        pthread_mutex_lock(&s->mu);
        sub->id = id;
        sub->submitted = true;
        if (b == 0) r->engine_id = id;
        r->submitted = true;
        pthread_mutex_unlock(&s->mu);
    }
    return CLLM_OK;
}

bool srv_req_submit(srv_req *r, srv_err *e) {
    cllm_server *s = r->srv;
    srv_gen *g = &r->gen;
    r->n_subs = g->n_batch ? g->n_batch : 1;
    r->choices = calloc((size_t)g->n, sizeof(srv_choice));
    r->t_last_token = calloc((size_t)g->n, sizeof(double));
    r->subs = calloc((size_t)r->n_subs, sizeof(srv_sub));
    if (g->s.has_prompt_logprobs) r->plp = calloc((size_t)r->n_subs, sizeof(srv_plp));
    if (!r->choices || !r->t_last_token || !r->subs || (g->s.has_prompt_logprobs && !r->plp)) {
        srv_err_set(e, 500, "InternalServerError", NULL, "out of memory");
        return false;
    }
    for (int i = 0; i < g->n; i++) {
        if (g->route != SRV_CHAT && g->route != SRV_RESPONSES) continue;
        cllm_outp_opts po = {.reasoning = g->parse_reasoning,
                             .starts_in_reasoning = g->starts_in_reasoning,
                             .tool_calls = g->parse_tools,
                             .tools = g->tools};
        r->choices[i].parser = cllm_outp_new(&po);
        if (!r->choices[i].parser) {
            srv_err_set(e, 500, "InternalServerError", NULL, "out of memory");
            return false;
        }
    }
    /* admission control before the engine sees it */
    cllm_engine_stats st;
    memset(&st, 0, sizeof(st));
    if (s->o.max_num_queued_reqs > 0 && s->ops.stats) s->ops.stats(s->ops.ctx, &st);
    int rej = -1;
    pthread_mutex_lock(&s->mu);
    if (__atomic_load_n(&s->draining, __ATOMIC_ACQUIRE))
        rej = SRV_REJ_DRAINING;
    else if (s->o.max_num_queued_reqs > 0 && st.waiting >= s->o.max_num_queued_reqs)
        rej = SRV_REJ_QUEUE;
    else if (s->o.max_queued_tokens > 0 && s->queued_tokens > 0 &&
             s->queued_tokens + g->prompt_total > s->o.max_queued_tokens)
        rej = SRV_REJ_TOKENS;
    if (rej < 0) {
        s->queued_tokens += g->prompt_total;
        r->queued_tokens_counted = true;
        s->in_flight++;
        if (s->in_flight > s->in_flight_peak) s->in_flight_peak = s->in_flight;
        r->reg_next = s->reg_head;
        if (s->reg_head) s->reg_head->reg_prev = r;
        s->reg_head = r;
        r->refs++; /* the engine's reference (no one else can see r yet) */
    }
    pthread_mutex_unlock(&s->mu);
    if (rej >= 0) goto reject;

    cllm_error ce = {0};
    cllm_status st2 = submit_subs(r, &ce);
    if (st2 == CLLM_OK) return true;
    /* no events will come: undo the registration */
    pthread_mutex_lock(&s->mu);
    if (r->queued_tokens_counted) s->queued_tokens -= g->prompt_total;
    r->queued_tokens_counted = false;
    if (r->reg_prev)
        r->reg_prev->reg_next = r->reg_next;
    else
        s->reg_head = r->reg_next;
    if (r->reg_next) r->reg_next->reg_prev = r->reg_prev;
    r->reg_prev = r->reg_next = NULL;
    s->in_flight--;
    pthread_cond_broadcast(&s->cv);
    r->refs--;
    pthread_mutex_unlock(&s->mu);
    if (st2 == CLLM_EBUSY) {
        rej = __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE) ? SRV_REJ_DRAINING : SRV_REJ_ENGINE;
        snprintf(e->msg, sizeof(e->msg), "%s", ce.msg);
        goto reject;
    }
    if (st2 == CLLM_EINVAL || st2 == CLLM_ERANGE)
        srv_err_set(e, 400, "invalid_request_error", NULL, "%s", ce.msg);
    else
        srv_err_set(e, 500, "InternalServerError", NULL, "engine: %s",
                    ce.msg[0] ? ce.msg : cllm_status_name(st2));
    return false;

reject:
    pthread_mutex_lock(&s->m.mu);
    s->m.rejections[rej]++;
    pthread_mutex_unlock(&s->m.mu);
    if (rej == SRV_REJ_DRAINING)
        srv_err_set(e, 503, "service_unavailable", NULL,
                    "The server is shutting down; retry on another replica.");
    else if (rej == SRV_REJ_ENGINE)
        srv_err_set(e, 429, "rate_limit_exceeded", NULL,
                    "The server is overloaded (engine queue full); retry later.");
    else
        srv_err_set(e, 429, "rate_limit_exceeded", NULL,
                    "The server is overloaded: %s reached; retry later.",
                    rej == SRV_REJ_QUEUE ? "--max-num-queued-reqs" : "--max-queued-tokens");
    snprintf(e->code, sizeof(e->code), "%s",
             e->status == 429 ? "rate_limit_exceeded" : "service_unavailable");
    return false;
}

bool srv_req_pump(srv_req *r, bool *suspended) {
    *suspended = false;
    if (r->all_done) return true;
    pthread_mutex_lock(&r->mu);
    srv_ev *list = r->head;
    r->head = r->tail = NULL;
    int fin = r->n_finished_engine;
    bool oom = r->ev_oom;
    if (!list && fin < r->gen.n && !oom) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
        pthread_mutex_unlock(&r->mu);
        *suspended = true;
        return false;
    }
    pthread_mutex_unlock(&r->mu);
    srv_fmt_events(r, list);
    ev_free(list);
    if (oom) {
        /* an event could not be copied: end the request as failed rather than hang or lie */
        if (r->submitted) srv_req_cancel_engine(r);
        for (int i = 0; i < r->gen.n; i++)
            if (r->choices[i].finish == CLLM_FINISH_NONE) {
                r->choices[i].finish = CLLM_FINISH_ERROR;
                free(r->choices[i].error);
                r->choices[i].error = strdup("out of memory while streaming");
            }
        fin = r->gen.n;
    }
    if (fin == r->gen.n) r->all_done = true;
    return r->all_done;
}

/* The end of a stream whose formatted bytes were lost to a failed allocation: from static
 * memory, so it always goes out. */
static const char OOM_SSE[] = "data: {\"error\":{\"message\":\"out of memory while streaming\","
                              "\"type\":\"InternalServerError\",\"param\":null,\"code\":500}}\n\n"
                              "data: [DONE]\n\n";
static const char OOM_NDJSON[] = "{\"error\":{\"message\":\"out of memory while streaming\","
                                 "\"type\":\"InternalServerError\",\"param\":null,\"code\":500}}\n";

ssize_t srv_req_stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    srv_req *r = cls;
    /* MHD asks for bytes only when its socket took the last ones: the client is reading */
    pthread_mutex_lock(&r->mu);
    r->t_drain = srv_now();
    pthread_mutex_unlock(&r->mu);
    for (;;) {
        if (r->out.oom && !r->oom_tail) {
            /* a chunk could not be formatted: stop the request and end the stream with an error
             * event instead of cutting it (a cut stream looks like a network fault) */
            pthread_mutex_lock(&r->mu);
            bool busy = r->submitted && r->n_finished_engine < r->gen.n && !r->watch_cancelled;
            r->watch_cancelled = true; /* not a client disconnect */
            pthread_mutex_unlock(&r->mu);
            if (busy) srv_req_cancel_engine(r);
            r->oom_tail = true;
            r->out_off = 0;
        }
        if (r->oom_tail) {
            const char *t = srv_fmt_of(r->route)->ndjson ? OOM_NDJSON : OOM_SSE;
            size_t n = strlen(t) - r->out_off;
            if (!n) return MHD_CONTENT_READER_END_OF_STREAM;
            if (n > max) n = max;
            memcpy(buf, t + r->out_off, n);
            r->out_off += n;
            r->bytes_sent += n;
            return (ssize_t)n;
        }
        if (r->out_off < r->out.len) {
            size_t n = r->out.len - r->out_off;
            if (n > max) n = max;
            memcpy(buf, r->out.p + r->out_off, n);
            r->out_off += n;
            if (r->out_off == r->out.len) r->out.len = r->out_off = 0;
            r->bytes_sent += n;
            return (ssize_t)n;
        }
        if (r->trailer_sent) return MHD_CONTENT_READER_END_OF_STREAM;
        if (r->all_done) {
            srv_fmt_trailer(r);
            r->trailer_sent = true;
            continue;
        }
        bool susp;
        srv_req_pump(r, &susp);
        if (susp) return 0;
    }
}

void srv_req_stream_free(void *cls) {
    srv_req_unref(cls);
}

void srv_req_conn_done(srv_req *r) {
    cllm_server *s = r->srv;
    pthread_mutex_lock(&r->mu);
    r->conn_gone = true;
    bool engine_busy = r->submitted && r->n_finished_engine < r->gen.n && !r->watch_cancelled;
    pthread_mutex_unlock(&r->mu);
    if (engine_busy) {
        /* the client went away (or the response failed): free its blocks and slot */
        srv_req_cancel_engine(r);
        pthread_mutex_lock(&s->m.mu);
        s->m.requests_cancelled_disconnect++;
        pthread_mutex_unlock(&s->m.mu);
        LOG_INFO("request %s cancelled: client disconnected", r->id);
    }
}
