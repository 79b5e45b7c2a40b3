/* A scripted fake engine for the HTTP server tests, plugged in through cllm_server_engine (the
 * real engine is never linked in these tests). Included by tests/server/test_server*.c only.
 *
 * The output is chosen by a marker in the decoded prompt:
 *   SCRIPT=tool   a Qwen3.5 XML tool call       SCRIPT=think  reasoning then "</think>" then an
 * answer SCRIPT=slow   the default text, 50 ms/token SCRIPT=error  fails after one token
 *   SCRIPT=long   200 tokens, 20 ms each        (default)     "Hello world! How are you?"
 * Text is emitted in pieces of up to 3 bytes (never splitting a UTF-8 character), one piece per
 * step and sample; every step sleeps fake->step_us on a condition variable. Prompt logprobs, when
 * asked for, come on the request's first event: prompt token j (j >= 1) has logprob -0.5 * j and
 * rank j + 1, and the row's top k (k >= 1) are tokens 9 + k with logprob -0.125 * k and rank k.
 * An embedding request (sampling.embed) gets one final event with the vector {3, 4, prompt_len}. */
#ifndef CLLM_TESTS_TEST_SERVER_FAKE_H
#define CLLM_TESTS_TEST_SERVER_FAKE_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server.h"
#include "tokenizer/tokenizer.h"

typedef struct fake_req {
    struct fake_req *next;
    uint64_t id;
    cllm_event_fn fn;
    void *user;
    char *script;
    size_t pos[8]; /* per sample */
    int ntok[8];
    bool done[8];
    int n, max_tokens, logprobs, prompt_len;
    int32_t *prompt; /* [prompt_len], for the prompt logprobs */
    int prompt_top;  /* -1: no prompt logprobs */
    bool embed;      /* sampling.embed: one final event with the vector {3, 4, prompt_len} */
    bool prompt_lp_sent;
    int delay_ms;
    bool cancelled, error;
    double t_next;
} fake_req;

typedef struct fake_engine {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool stop, draining;
    fake_req *reqs;
    uint64_t next_id;
    int step_us;
    int fake_waiting; /* reported as stats.waiting when > 0 */
    bool paused;      /* no steps while set (requests stay queued) */
    int max_model_len;
    uint64_t cancels, submits, finished;
    cllm_tok *tok;
} fake_engine;

static double fake_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *fake_script(const char *prompt, int *delay_ms) {
    *delay_ms = 0;
    if (strstr(prompt, "SCRIPT=tool"))
        return "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</"
               "function>\n</tool_call>";
    if (strstr(prompt, "SCRIPT=think"))
        return "Two plus two is four.\n</think>\n\nThe answer is 4.";
    if (strstr(prompt, "SCRIPT=emptythink")) return "\n</think>\n\nThe answer is 4.";
    if (strstr(prompt, "SCRIPT=error")) return "oops";
    if (strstr(prompt, "SCRIPT=slow")) {
        *delay_ms = 50;
        return "Hello world! How are you?";
    }
    if (strstr(prompt, "SCRIPT=long")) {
        *delay_ms = 20;
        return "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
               "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
               "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
               "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
               "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
               "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
               "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz"
               "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz";
    }
    return "Hello world! How are you?";
}

static void fake_emit(fake_engine *f, fake_req *r, int i, cllm_finish fin, const char *text,
                      size_t len) {
    int tok[1] = {100 + (int)(r->pos[i] % 50)};
    cllm_token_logprob lp[1 + 20];
    for (int k = 0; k <= 20; k++) lp[k] = (cllm_token_logprob){tok[0] + k, -0.25f * (float)(k + 1)};
    cllm_prompt_logprob *plp = NULL;
    int n_plp = 0;
    if (r->prompt_top >= 0 && !r->prompt_lp_sent && fin != CLLM_FINISH_ABORT &&
        fin != CLLM_FINISH_ERROR) {
        r->prompt_lp_sent = true;
        n_plp = r->prompt_len - 1;
        int w = r->prompt_top + 1;
        plp = calloc((size_t)(n_plp > 0 ? n_plp : 1) * (size_t)w, sizeof(*plp));
        for (int j = 0; plp && j < n_plp; j++) {
            plp[j * w] = (cllm_prompt_logprob){r->prompt[j + 1], j + 2, -0.5 * (j + 1)};
            for (int k = 1; k < w; k++)
                plp[j * w + k] = (cllm_prompt_logprob){10 + k - 1, k, -0.125 * k};
        }
    }
    cllm_event ev = {.request_id = r->id,
                     .prompt_lp = plp,
                     .n_prompt_lp = plp ? n_plp : 0,
                     .n_prompt_top = r->prompt_top,
                     .index = i,
                     .text = text,
                     .text_len = len,
                     .token_ids = len ? tok : NULL,
                     .n_tokens = len ? 1 : 0,
                     .logprobs = len && r->logprobs >= 0 ? lp : NULL,
                     .n_top_logprobs = r->logprobs > 0 ? r->logprobs : 0,
                     .finish = fin,
                     .error = fin == CLLM_FINISH_ERROR ? "fake engine failure" : NULL,
                     .prompt_tokens = r->prompt_len,
                     .completion_tokens = r->ntok[i],
                     .cached_prompt_tokens = 0,
                     .t_arrival = 1.0,
                     .t_scheduled = 1.001,
                     .t_first_token = 1.01,
                     .t_finished = 1.1};
    r->fn(r->user, &ev);
    free(plp);
}

/* One step for one sample; returns true when the sample finished. */
static bool fake_step(fake_engine *f, fake_req *r, int i) {
    if (r->cancelled) {
        fake_emit(f, r, i, CLLM_FINISH_ABORT, "", 0);
        return true;
    }
    if (r->embed) {
        float v[3] = {3, 4, (float)r->prompt_len};
        cllm_event ev = {.request_id = r->id,
                         .text = "",
                         .embedding = v,
                         .n_embedding = 3,
                         .finish = CLLM_FINISH_STOP,
                         .prompt_tokens = r->prompt_len};
        r->fn(r->user, &ev);
        return true;
    }
    size_t len = strlen(r->script), p = r->pos[i];
    if (!strcmp(r->script, "oops") && r->ntok[i] >= 1) {
        fake_emit(f, r, i, CLLM_FINISH_ERROR, "", 0);
        return true;
    }
    if (p >= len) {
        fake_emit(f, r, i, CLLM_FINISH_STOP, "", 0);
        return true;
    }
    size_t e = p + 3 < len ? p + 3 : len;
    while (e < len && ((unsigned char)r->script[e] & 0xC0) == 0x80) e++;
    r->ntok[i]++;
    r->pos[i] = e;
    cllm_finish fin = CLLM_FINISH_NONE;
    if (e >= len)
        fin = CLLM_FINISH_STOP;
    else if (r->max_tokens > 0 && r->ntok[i] >= r->max_tokens)
        fin = CLLM_FINISH_LENGTH;
    fake_emit(f, r, i, fin, r->script + p, e - p);
    return fin != CLLM_FINISH_NONE;
}

static void *fake_main(void *arg) {
    fake_engine *f = arg;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        if (!f->reqs || f->paused) {
            pthread_cond_wait(&f->cv, &f->mu);
            continue;
        }
        double now = fake_now();
        /* events are delivered with f->mu held, like an engine step holding its own state */
        for (fake_req **pp = &f->reqs; *pp;) {
            fake_req *r = *pp;
            if (!r->cancelled && r->t_next > now) {
                pp = &r->next;
                continue;
            }
            bool all = true;
            for (int i = 0; i < r->n; i++) {
                if (r->done[i]) continue;
                r->done[i] = fake_step(f, r, i);
                all = all && r->done[i];
            }
            r->t_next = now + r->delay_ms / 1000.0;
            if (all) {
                *pp = r->next;
                free(r->script);
                free(r->prompt);
                free(r);
                f->finished++;
            } else {
                pp = &r->next;
            }
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += f->step_us * 1000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&f->cv, &f->mu, &ts);
    }
    /* shutdown: abort what is left */
    while (f->reqs) {
        fake_req *r = f->reqs;
        f->reqs = r->next;
        for (int i = 0; i < r->n; i++)
            if (!r->done[i]) fake_emit(f, r, i, CLLM_FINISH_ABORT, "", 0);
        free(r->script);
        free(r->prompt);
        free(r);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

static cllm_status fake_submit(void *ctx, const cllm_request *rq, uint64_t *id, cllm_error *err) {
    fake_engine *f = ctx;
    if (rq->sampling.n > 8) return cllm_err_set(err, CLLM_EINVAL, "fake: n > 8");
    fake_req *r = calloc(1, sizeof(*r));
    char *prompt = NULL;
    size_t plen;
    if (!r) return CLLM_ENOMEM;
    if (cllm_tok_decode(f->tok, (const int32_t *)rq->prompt, (size_t)rq->n_prompt, false, &prompt,
                        &plen, err)) {
        free(r);
        return CLLM_EINVAL;
    }
    r->script = strdup(fake_script(prompt, &r->delay_ms));
    free(prompt);
    r->fn = rq->on_event;
    r->user = rq->user;
    r->n = rq->sampling.n;
    r->max_tokens = rq->sampling.max_tokens;
    r->logprobs = rq->sampling.logprobs;
    r->prompt_len = rq->n_prompt;
    r->prompt_top = rq->sampling.has_prompt_logprobs ? rq->sampling.prompt_logprobs : -1;
    r->embed = rq->sampling.embed;
    r->prompt = malloc((size_t)rq->n_prompt * sizeof(int32_t));
    if (r->prompt) memcpy(r->prompt, rq->prompt, (size_t)rq->n_prompt * sizeof(int32_t));
    pthread_mutex_lock(&f->mu);
    if (f->draining) {
        pthread_mutex_unlock(&f->mu);
        free(r->script);
        free(r->prompt);
        free(r);
        return cllm_err_set(err, CLLM_EBUSY, "draining");
    }
    r->id = *id = ++f->next_id;
    r->next = f->reqs;
    f->reqs = r;
    f->submits++;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return CLLM_OK;
}

static void fake_cancel(void *ctx, uint64_t id) {
    fake_engine *f = ctx;
    pthread_mutex_lock(&f->mu);
    for (fake_req *r = f->reqs; r; r = r->next)
        if (r->id == id && !r->cancelled) {
            r->cancelled = true;
            f->cancels++;
        }
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void fake_drain(void *ctx) {
    fake_engine *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->draining = true;
    pthread_mutex_unlock(&f->mu);
}

static void fake_stats(void *ctx, cllm_engine_stats *s) {
    fake_engine *f = ctx;
    memset(s, 0, sizeof(*s));
    pthread_mutex_lock(&f->mu);
    for (fake_req *r = f->reqs; r; r = r->next) s->running++;
    s->waiting = f->fake_waiting;
    pthread_mutex_unlock(&f->mu);
    s->kv_blocks_total = 100;
    s->kv_blocks_used = (uint64_t)s->running * 2;
    s->state_slots_total = 8;
    s->state_slots_used = s->running;
    s->block_size = 16;
    s->max_model_len = f->max_model_len;
    s->prefix_caching = true;
}

static void fake_defaults(void *ctx, cllm_sampling *s) {
    (void)ctx;
    memset(s, 0, sizeof(*s));
    s->temperature = 1.0;
    s->top_p = 0.95;
    s->top_k = 20;
    s->repetition_penalty = 1;
    s->skip_special_tokens = true;
    s->logprobs = -1;
    s->n = 1;
}

static const struct cllm_tok *fake_tokenizer(void *ctx) {
    return ((fake_engine *)ctx)->tok;
}

static int fake_start(fake_engine *f, const char *tok_dir) {
    memset(f, 0, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->step_us = 1000;
    f->max_model_len = 512;
    cllm_error err = {0};
    if (cllm_tok_load(tok_dir, &f->tok, &err)) {
        fprintf(stderr, "fake engine: %s\n", err.msg);
        return -1;
    }
    return pthread_create(&f->th, NULL, fake_main, f);
}

static void fake_stop(fake_engine *f) {
    pthread_mutex_lock(&f->mu);
    f->stop = true;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    pthread_join(f->th, NULL);
    cllm_tok_free(f->tok);
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
}

static cllm_server_engine fake_ops(fake_engine *f) {
    cllm_server_engine o = {f,          fake_submit,   fake_cancel,   fake_drain,
                            fake_stats, fake_defaults, fake_tokenizer};
    return o;
}

#endif
