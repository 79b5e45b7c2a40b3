/* Thread pool: workers spin on a generation counter for up to POOL_SPIN_S (a cheap hand-off
 * between the many small parallel regions of a decode step), then sleep on a condition
 * variable. */
#include "base/threadpool.h"

#include "base/mem.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

/* The caller's spin iterations before it yields while waiting for the workers' chunks. */
#define POOL_SPIN 20000
/* How long an idle worker spins before it sleeps on the condition variable: longer than the
 * caller's serial stretches inside a decode step (the screened lm_head's pick over a 248k
 * vocabulary is ~0.3 ms, then the sampler), which the old bound of 20000 iterations (~10 us on
 * a 3.2 GHz Zen 3) turned into a sleep and a ~25 us wake-up, 15-35 times a step. Past
 * POOL_YIELD_S a spinning worker yields between checks, so a busy machine's other threads get
 * the core. */
#define POOL_SPIN_S  2e-3
#define POOL_YIELD_S 1e-4
#define JOB_CLOSED   (1ull << 31)
#define JOB_COUNT    (JOB_CLOSED - 1)

struct cllm_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* The current job: generation << 32 | JOB_CLOSED | workers inside it (low bits). A worker
     * joins a job by incrementing the count, only while the generation matches and the job is
     * open; the caller of a dynamic job closes it once every item is taken and waits for the
     * count to drop, so a worker that wakes late never holds the caller up, and one that
     * arrives after the close never touches the job. */
    _Atomic uint64_t job;
    atomic_int pending; /* static jobs: workers still to run their chunk */
    atomic_int stop;
    cllm_pool_fn fn;
    void *ctx;
    size_t n_items, grain;
    int dyn;            /* cllm_pool_for_dyn: items handed out one at a time from next */
    atomic_size_t next; /* first item not yet taken (dyn) */
    /* cllm_pool_profile: regions run through the workers and the caller's time waiting for them
     * after its own chunk (imbalance + wake-up latency), touched only by the calling thread */
    int prof;
    unsigned long long prof_calls;
    double prof_wait;
};

void cllm_pool_range(size_t n, size_t grain, int nt, int t, size_t *begin, size_t *end) {
    if (grain == 0) grain = 1;
    size_t units = (n + grain - 1) / grain;
    size_t per = units / (size_t)nt, extra = units % (size_t)nt;
    size_t ub = (size_t)t * per + ((size_t)t < extra ? (size_t)t : extra);
    size_t ue = ub + per + ((size_t)t < extra ? 1 : 0);
    size_t b = ub * grain, e = ue * grain;
    *begin = b < n ? b : n;
    *end = e < n ? e : n;
}

static void run_chunk(cllm_pool *p, int t) {
    if (p->dyn) {
        size_t n = p->n_items, i;
        while ((i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed)) < n)
            p->fn(p->ctx, i, i + 1, t);
        return;
    }
    size_t b, e;
    cllm_pool_range(p->n_items, p->grain, p->n, t, &b, &e);
    if (b < e) p->fn(p->ctx, b, e, t);
}

typedef struct worker_arg {
    cllm_pool *p;
    int t;
} worker_arg;

/* A spin-wait hint: fewer, cheaper polls of the job word, and the sibling hyperthread runs. */
static inline void pool_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    cllm_pool *p = wa.p;
    /* generation 0 at creation: a job posted before this thread got here must still run here. */
    uint64_t seen = 0, st;
    for (;;) {
        const double t0 = cllm_time_s();
        for (unsigned spins = 1;
             (st = atomic_load_explicit(&p->job, memory_order_acquire)) >> 32 == seen &&
             !atomic_load(&p->stop);
             spins++) {
            pool_relax();
            if (spins % 256 == 0) { /* the clock every 256 checks (a few microseconds) */
                double t = cllm_time_s() - t0;
                if (t > POOL_SPIN_S) break;
                if (t > POOL_YIELD_S) sched_yield();
            }
        }
        if (st >> 32 == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            while ((st = atomic_load(&p->job)) >> 32 == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        uint64_t g = st >> 32;
        seen = g;
        bool in = false;
        while (st >> 32 == g && !(st & JOB_CLOSED) &&
               !(in = atomic_compare_exchange_weak_explicit(
                     &p->job, &st, st + 1, memory_order_acquire, memory_order_acquire)))
            ;
        if (!in) continue; /* a dynamic job that ended before this thread woke */
        int dyn = p->dyn;  /* job g's: its caller waits for this thread before posting another */
        run_chunk(p, wa.t);
        if (dyn)
            atomic_fetch_sub_explicit(&p->job, 1, memory_order_release);
        else
            atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

cllm_pool *cllm_pool_create(int n_threads) {
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    cllm_pool *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!p->threads) {
        free(p);
        return NULL;
    }
    for (int t = 1; t < n_threads; t++) {
        worker_arg *wa = malloc(sizeof(*wa));
        if (!wa || (wa->p = p, wa->t = t, pthread_create(&p->threads[t], NULL, worker_main, wa))) {
            free(wa);
            p->n = t; /* run with the threads we got */
            break;
        }
    }
    return p;
}

void cllm_pool_free(cllm_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int t = 1; t < p->n; t++) pthread_join(p->threads[t], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p);
}

int cllm_pool_size(const cllm_pool *p) {
    return p ? p->n : 1;
}

static void pool_run(cllm_pool *p, size_t n, size_t grain, int dyn, cllm_pool_fn fn, void *ctx) {
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n;
    p->grain = grain;
    p->dyn = dyn;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store(&p->pending, p->n - 1);
    uint64_t g = (atomic_load_explicit(&p->job, memory_order_relaxed) >> 32) + 1;
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->job, g << 32, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    run_chunk(p, 0);
    double t0 = p->prof ? cllm_time_s() : 0.0;
    /* Spin briefly, then yield: on an oversubscribed machine the workers may need this core.
     * A static job waits for every worker's chunk; a dynamic one only for the workers that
     * joined it before it was closed (all its items are taken by now). */
    if (dyn) atomic_fetch_or_explicit(&p->job, JOB_CLOSED, memory_order_acq_rel);
    for (int spins = 0; dyn ? (atomic_load_explicit(&p->job, memory_order_acquire) & JOB_COUNT)
                            : atomic_load_explicit(&p->pending, memory_order_acquire) > 0;
         spins++)
        if (spins > POOL_SPIN) sched_yield();
    if (p->prof) {
        p->prof_calls++;
        p->prof_wait += cllm_time_s() - t0;
    }
}

void cllm_pool_for_grain(cllm_pool *p, size_t n, size_t grain, cllm_pool_fn fn, void *ctx) {
    if (n == 0) return;
    if (!p || p->n == 1 || n <= (grain ? grain : 1)) {
        fn(ctx, 0, n, 0);
        return;
    }
    pool_run(p, n, grain, 0, fn, ctx);
}

void cllm_pool_for_dyn(cllm_pool *p, size_t n, cllm_pool_fn fn, void *ctx) {
    if (n == 0) return;
    if (!p || p->n == 1 || n == 1) {
        fn(ctx, 0, n, 0);
        return;
    }
    pool_run(p, n, 1, 1, fn, ctx);
}

void cllm_pool_profile(cllm_pool *p, int on, unsigned long long *calls, double *wait_s) {
    if (!p) {
        if (calls) *calls = 0;
        if (wait_s) *wait_s = 0.0;
        return;
    }
    p->prof = on;
    if (calls) *calls = p->prof_calls;
    if (wait_s) *wait_s = p->prof_wait;
}

void cllm_pool_for(cllm_pool *p, size_t n, cllm_pool_fn fn, void *ctx) {
    cllm_pool_for_grain(p, n, 1, fn, ctx);
}
