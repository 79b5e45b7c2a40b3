/* Per-token output: sampling, stop conditions (EOS, stop ids, stop strings matched across token
 * boundaries, max_tokens, max_model_len, min_tokens), incremental text and the events the
 * request's callback receives. Called by sched.c on the engine thread. */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "engine/sched_int.h"

static int text_append(eng_seq *e, const char *t, size_t n) {
    if (n == 0) return 0;
    if (e->text_len + n + 1 > e->text_cap) {
        size_t nc = e->text_cap ? e->text_cap : 64;
        while (nc < e->text_len + n + 1) nc *= 2;
        char *p = realloc(e->text, nc);
        if (!p) return -1;
        e->text = p;
        e->text_cap = nc;
    }
    memcpy(e->text + e->text_len, t, n);
    e->text_len += n;
    e->text[e->text_len] = 0;
    return 0;
}

static void fill_usage(sched *s, eng_seq *e, cllm_event *ev) {
    ev->prompt_tokens = e->n_prompt;
    ev->completion_tokens = e->n_tokens - e->n_prompt;
    ev->cached_prompt_tokens = e->cached_prompt;
    ev->t_arrival = e->req->t_arrival;
    ev->t_scheduled = e->t_scheduled;
    ev->t_first_token = e->t_first_token;
    ev->t_finished = cllm_time_s();
    s->stats.requests_finished[ev->finish]++;
}

void sched_emit_final(sched *s, eng_seq *e, cllm_finish fin, const char *msg) {
    cllm_event ev = {0};
    ev.request_id = e->req->id;
    ev.index = e->index;
    ev.text = e->text ? e->text + e->emitted : "";
    ev.text_len = e->text_len - e->emitted;
    e->emitted = e->text_len;
    ev.finish = fin;
    ev.error = fin == CLLM_FINISH_ERROR ? (msg ? msg : "error") : NULL;
    fill_usage(s, e, &ev);
    if (fin != CLLM_FINISH_ERROR && fin != CLLM_FINISH_ABORT) sched_score_attach(e->req, &ev);
    e->req->on_event(e->req->user, &ev);
}

void sched_emit_unstarted(sched *s, eng_req *q, int index, cllm_finish fin, const char *msg) {
    cllm_event ev = {0};
    ev.request_id = q->id;
    ev.index = index;
    ev.text = "";
    ev.finish = fin;
    ev.error = fin == CLLM_FINISH_ERROR ? (msg ? msg : "error") : NULL;
    ev.prompt_tokens = q->n_prompt;
    ev.t_arrival = q->t_arrival;
    ev.t_finished = cllm_time_s();
    s->stats.requests_finished[fin]++;
    q->on_event(q->user, &ev);
}

static bool has_id(const int *ids, int n, int t) {
    for (int i = 0; i < n; i++)
        if (ids[i] == t) return true;
    return false;
}

/* Pooling: the row is the last prompt token's hidden state (CLLM_LOGITS_HIDDEN); one final
 * event carries it. */
static void emit_embedding(sched *s, eng_seq *e, const float *row) {
    cllm_event ev = {0};
    ev.request_id = e->req->id;
    ev.text = "";
    ev.finish = CLLM_FINISH_STOP;
    ev.embedding = row;
    ev.n_embedding = s->cfg.hidden_size;
    if (e->t_first_token == 0) e->t_first_token = cllm_time_s();
    fill_usage(s, e, &ev);
    e->req->on_event(e->req->user, &ev);
    sched_seq_finish(s, e);
}

void sched_sample(sched *s, eng_seq *e, const float *logits) {
    sched_sample_tok(s, e, logits, -1);
}

bool sched_sample_tok(sched *s, eng_seq *e, const float *logits, int forced) {
    eng_req *q = e->req;
    const cllm_sampling *p = &q->sp;
    if (p->embed) {
        emit_embedding(s, e, logits);
        return false; /* the request ends with its vector */
    }
    int n_out = e->n_tokens - e->n_prompt;
    smp_input in = {.logits = logits,
                    .prompt = e->tokens,
                    .n_prompt = e->n_prompt,
                    .out = e->tokens + e->n_prompt,
                    .n_out = n_out,
                    .forbid = q->forbid,
                    .n_forbid = n_out < p->min_tokens ? q->n_forbid : 0,
                    .seed = q->seed,
                    .index = e->index,
                    .step = n_out};
    double t_gm = e->gm && e->gm_on ? cllm_time_s() : 0;
    if (e->gm && e->gm_on) {
        int allowed = cllm_gm_matcher_mask(e->gm, s->gmask);
        s->stats.grammar_s += cllm_time_s() - t_gm;
        s->stats.grammar_masks++;
        if (allowed < 0) {
            sched_emit_final(s, e, CLLM_FINISH_ERROR,
                             "structured output: the grammar's state outgrew its caps (4096 "
                             "stacks); the grammar is too ambiguous");
            sched_seq_finish(s, e);
            return false;
        }
        if (allowed == 0) {
            /* the structure is complete and nothing (not even EOS) may follow */
            sched_emit_final(s, e, CLLM_FINISH_STOP, NULL);
            sched_seq_finish(s, e);
            return false;
        }
        in.allow = s->gmask;
    }
    int tok = smp_sample(&s->smp, p, &in, p->logprobs >= 0 ? e->lp : NULL);
    if (forced >= 0) {
        tok = forced;
        if (p->logprobs >= 0) e->lp[0].token = tok;
    }
    bool gm_done = false;
    if (e->gm && e->gm_on) {
        t_gm = cllm_time_s();
        bool ok = cllm_gm_matcher_accept_token(e->gm, tok);
        s->stats.grammar_s += cllm_time_s() - t_gm;
        if (!ok) {
            sched_emit_final(s, e, CLLM_FINISH_ERROR,
                             cllm_gm_matcher_hit_cap(e->gm)
                                 ? "structured output: the grammar's state outgrew its caps "
                                   "(4096 stacks); the grammar is too ambiguous"
                                 : "structured output: sampled token rejected");
            sched_seq_finish(s, e);
            return false;
        }
        gm_done = cllm_gm_matcher_is_done(e->gm);
    } else if (e->gm && tok == p->grammar_after) {
        e->gm_on = true;
    }
    if (e->n_tokens + 1 > e->cap_tokens) {
        int nc = e->cap_tokens * 2;
        int32_t *t = realloc(e->tokens, (size_t)nc * sizeof(int32_t));
        if (!t) {
            sched_emit_final(s, e, CLLM_FINISH_ERROR, "out of memory");
            sched_seq_finish(s, e);
            return false;
        }
        e->tokens = t;
        e->cap_tokens = nc;
    }
    e->tokens[e->n_tokens++] = tok;
    n_out++;
    s->stats.generation_tokens++;
    double now = cllm_time_s();
    if (e->t_first_token == 0) e->t_first_token = now;

    cllm_finish fin = CLLM_FINISH_NONE;
    bool min_ok = n_out >= p->min_tokens;
    bool is_eos = !p->ignore_eos && has_id(s->cfg.eos_ids, s->cfg.n_eos, tok);
    bool is_stop_id = has_id(q->stop_ids, p->n_stop_token_ids, tok);
    if (min_ok && (is_eos || is_stop_id)) fin = CLLM_FINISH_STOP;
    const char *stop_str = NULL; /* the stop string that ended it */
    bool truncated = false;
    const cllm_tok *tk = s->cfg.tok;
    if (tk && (fin == CLLM_FINISH_NONE || p->include_stop_str_in_output)) {
        size_t prev = e->text_len, n;
        cllm_error err = {0};
        const char *d = cllm_tok_stream_push(&e->detok, tok, &n, &err);
        if (d && text_append(e, d, n) != 0) {
            sched_emit_final(s, e, CLLM_FINISH_ERROR, "out of memory");
            sched_seq_finish(s, e);
            return false;
        }
        if (fin == CLLM_FINISH_NONE && p->n_stop > 0 && min_ok && e->text_len > prev) {
            size_t ml = (size_t)q->max_stop_len;
            size_t start = prev >= ml - 1 ? prev - (ml - 1) : 0;
            size_t best = (size_t)-1, best_len = 0;
            for (int i = 0; i < p->n_stop; i++) {
                size_t l = strlen(q->stop[i]);
                const char *m = memmem(e->text + start, e->text_len - start, q->stop[i], l);
                if (m && (size_t)(m - e->text) < best) {
                    best = (size_t)(m - e->text);
                    best_len = l;
                    stop_str = q->stop[i];
                }
            }
            if (best != (size_t)-1) {
                fin = CLLM_FINISH_STOP;
                truncated = true;
                e->text_len = best + (p->include_stop_str_in_output ? best_len : 0);
                e->text[e->text_len] = 0;
            }
        }
    }
    if (fin == CLLM_FINISH_NONE && gm_done) fin = CLLM_FINISH_STOP; /* nothing more may follow */
    if (fin == CLLM_FINISH_NONE && (n_out >= q->max_out || e->n_tokens >= s->cfg.max_model_len))
        fin = CLLM_FINISH_LENGTH;
    if (fin != CLLM_FINISH_NONE && tk && !truncated) {
        size_t n;
        const char *d = cllm_tok_stream_flush(&e->detok, &n);
        if (d) text_append(e, d, n);
    }
    size_t end = e->text_len;
    if (fin == CLLM_FINISH_NONE && p->n_stop > 0) {
        size_t hold = (size_t)q->max_stop_len - 1;
        end = end > hold ? end - hold : 0;
        while (end > e->emitted && end < e->text_len &&
               ((unsigned char)e->text[end] & 0xC0) == 0x80)
            end--;
    }
    if (end < e->emitted) end = e->emitted;

    cllm_event ev = {0};
    ev.request_id = q->id;
    ev.index = e->index;
    ev.text = e->text ? e->text + e->emitted : "";
    ev.text_len = end - e->emitted;
    e->emitted = end;
    ev.token_ids = &tok;
    ev.n_tokens = 1;
    if (p->logprobs >= 0) {
        ev.logprobs = e->lp;
        ev.n_top_logprobs = p->logprobs;
    }
    ev.finish = fin;
    if (fin == CLLM_FINISH_STOP) {
        ev.stop_str = stop_str;
        /* EOS is no stop_reason (vLLM: null); a stop_token_ids entry is */
        ev.has_stop_token = !stop_str && is_stop_id && !is_eos;
        ev.stop_token = ev.has_stop_token ? tok : 0;
    }
    if (fin != CLLM_FINISH_NONE) fill_usage(s, e, &ev);
    sched_score_attach(q, &ev);
    q->on_event(q->user, &ev);
    if (fin != CLLM_FINISH_NONE) {
        sched_seq_finish(s, e);
        return false;
    }
    return true;
}
