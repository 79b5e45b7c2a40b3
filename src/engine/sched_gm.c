/* Structured-output preparation off the engine thread (vLLM's "waiting for the grammar").
 *
 * A constrained request's masks come from per-node caches that each cost a walk of the whole
 * vocabulary trie (tens of ms for 248k tokens); filled lazily on the engine thread they stall
 * every row of the batch. So a constrained request whose grammar is not yet prepared waits in
 * s->gm_wait while one helper thread builds the vocabulary trie (once) and fills the grammar's
 * caches; the step loop admits it when that is done. Grammars shared between requests (the
 * server's compile cache) are prepared once. Grammars over PREP_MAX_NODES nodes are not
 * prepared (their caches fill on first use). */
#include <stdlib.h>
#include <time.h>

#include "base/log.h"
#include "base/mem.h"
#include "engine/sched_int.h"

/* Jobs are taken in turn, PREP_SLICE_S of cache filling each, so one large grammar (5,000
 * optional properties: ~0.3 s at 248k tokens; 2,000 took 9 s before gm_schema_keys.c) does not
 * hold up the small ones queued behind it (a guided_regex waited 8.9 s, issue 32). */
#define PREP_SLICE_S 0.01
/* Past this many nodes the caches fill on first use (the request is not held for them): 4,000
 * optional properties make 120k nodes. */
enum { PREP_MAX_NODES = 400000 };

static void *prep_main(void *arg) {
    sched *s = arg;
    gm_prep *p = &s->prep;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->stop && p->n_jobs == 0) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop) break;
        cllm_gm *g = p->jobs[0];
        p->n_jobs--;
        for (int i = 0; i < p->n_jobs; i++) p->jobs[i] = p->jobs[i + 1];
        pthread_mutex_unlock(&p->mu);
        if (!p->v && !p->v_failed) {
            cllm_error err = {0};
            cllm_gm_vocab *v = NULL;
            double t0 = cllm_time_s();
            if (cllm_gm_vocab_from_tok(s->cfg.tok, s->cfg.eos_ids, s->cfg.n_eos, &v, &err)) {
                LOG_ERROR("structured outputs: token trie: %s", err.msg);
                v = NULL;
            } else {
                LOG_INFO("structured outputs: token trie of %d tokens built in %.0f ms",
                         cllm_gm_vocab_size(v), (cllm_time_s() - t0) * 1e3);
            }
            pthread_mutex_lock(&p->mu);
            p->v = v;
            p->v_failed = !v;
            pthread_mutex_unlock(&p->mu);
        }
        double t0 = cllm_time_s();
        bool done = true;
        if (p->v && cllm_gm_n_nodes(g) <= PREP_MAX_NODES)
            done = cllm_gm_prepare_some(g, p->v, PREP_SLICE_S);
        else if (p->v)
            cllm_gm_prepare(g, p->v, &p->stop, PREP_MAX_NODES); /* marks it, fills nothing */
        double dt = cllm_time_s() - t0;
        pthread_mutex_lock(&p->mu);
        p->prep_s += dt;
        if (!done) { /* to the back of the queue: the jobs behind it get their slice first */
            if (sched_grow((void **)&p->jobs, &p->cap_jobs, p->n_jobs + 1, sizeof(cllm_gm *)) ==
                CLLM_OK) {
                p->jobs[p->n_jobs++] = g;
                continue;
            }
            /* out of memory: finish it now */
            pthread_mutex_unlock(&p->mu);
            while (!p->stop && !cllm_gm_prepare_some(g, p->v, PREP_SLICE_S)) {
            }
            pthread_mutex_lock(&p->mu);
        }
        pthread_mutex_unlock(&p->mu);
        cllm_gm_unref(g);
        pthread_mutex_lock(&p->mu);
        p->done_gen++;
        pthread_cond_broadcast(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Ready to admit: the grammar is prepared for the vocabulary (or the trie failed, and seq_new
 * reports the error). */
static bool prep_ready(sched *s, cllm_gm *g) {
    gm_prep *p = &s->prep;
    pthread_mutex_lock(&p->mu);
    const cllm_gm_vocab *v = p->v;
    bool failed = p->v_failed;
    pthread_mutex_unlock(&p->mu);
    return failed || (v && cllm_gm_is_prepared(g, v));
}

bool sched_gm_hold(sched *s, eng_req *q) {
    cllm_gm *g = q->sp.grammar;
    if (!g || !s->cfg.tok || prep_ready(s, g)) return false;
    gm_prep *p = &s->prep;
    if (sched_grow((void **)&s->gm_wait, &s->cap_gm_wait, s->n_gm_wait + 1, sizeof(eng_req *)))
        return false; /* out of memory: admitted now, caches fill lazily */
    pthread_mutex_lock(&p->mu);
    if (!p->started) {
        if (pthread_create(&p->th, NULL, prep_main, s) != 0) {
            pthread_mutex_unlock(&p->mu);
            return false;
        }
        p->started = true;
    }
    if (sched_grow((void **)&p->jobs, &p->cap_jobs, p->n_jobs + 1, sizeof(cllm_gm *))) {
        pthread_mutex_unlock(&p->mu);
        return false;
    }
    p->jobs[p->n_jobs++] = cllm_gm_ref(g);
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
    s->gm_wait[s->n_gm_wait++] = q;
    return true;
}

int sched_gm_admit(sched *s) {
    int n = 0;
    for (int i = 0; i < s->n_gm_wait;) {
        eng_req *q = s->gm_wait[i];
        if (!prep_ready(s, q->sp.grammar)) {
            i++;
            continue;
        }
        for (int j = i; j + 1 < s->n_gm_wait; j++) s->gm_wait[j] = s->gm_wait[j + 1];
        s->n_gm_wait--;
        sched_add_now(s, q);
        n++;
    }
    return n;
}

void sched_gm_idle_wait(sched *s, double max_s) {
    gm_prep *p = &s->prep;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long ns = ts.tv_nsec + (long)(max_s * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    pthread_mutex_lock(&p->mu);
    uint64_t gen = p->done_gen;
    while (p->done_gen == gen && !p->stop)
        if (pthread_cond_timedwait(&p->done_cv, &p->mu, &ts)) break;
    pthread_mutex_unlock(&p->mu);
}

bool sched_gm_cancel(sched *s, uint64_t id) {
    for (int i = 0; i < s->n_gm_wait; i++) {
        eng_req *q = s->gm_wait[i];
        if (q->id != id) continue;
        for (int j = i; j + 1 < s->n_gm_wait; j++) s->gm_wait[j] = s->gm_wait[j + 1];
        s->n_gm_wait--;
        for (int k = 0; k < q->sp.n; k++) sched_emit_unstarted(s, q, k, CLLM_FINISH_ABORT, NULL);
        sched_req_free(q);
        return true;
    }
    return false;
}

const cllm_gm_vocab *sched_gm_vocab(sched *s) {
    gm_prep *p = &s->prep;
    pthread_mutex_lock(&p->mu);
    const cllm_gm_vocab *v = p->v;
    pthread_mutex_unlock(&p->mu);
    return v;
}

void sched_gm_init(sched *s) {
    gm_prep *p = &s->prep;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
}

void sched_gm_free(sched *s) {
    gm_prep *p = &s->prep;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (p->started) pthread_join(p->th, NULL);
    while (s->n_gm_wait > 0) sched_gm_cancel(s, s->gm_wait[0]->id);
    for (int i = 0; i < p->n_jobs; i++) cllm_gm_unref(p->jobs[i]);
    free(p->jobs);
    free(s->gm_wait);
    cllm_gm_vocab_free(p->v);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->done_cv);
}
