/* Thread pool: workers spin briefly on a generation counter (cheap hand-off between the many
 * small parallel regions of a decode step), then sleep on a condition variable. */
#include "base/threadpool.h"

#include "base/mem.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

/* Spin iterations before sleeping; ~20-50 us on a 2.5 GHz core, long enough to bridge the gap
 * between consecutive kernels of one forward pass, short enough not to steal an idle core. */
#define POOL_SPIN 20000

struct cllm_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;    /* bumped for each job */
    atomic_int pending; /* workers still running the current job */
    atomic_int stop;
    cllm_pool_fn fn;
    void *ctx;
    size_t n_items, grain;
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
    size_t b, e;
    cllm_pool_range(p->n_items, p->grain, p->n, t, &b, &e);
    if (b < e) p->fn(p->ctx, b, e, t);
}

typedef struct worker_arg {
    cllm_pool *p;
    int t;
} worker_arg;

static void *worker_main(void *arg) {
    worker_arg wa = *(worker_arg *)arg;
    free(arg);
    cllm_pool *p = wa.p;
    /* gen is 0 at creation: a job posted before this thread got here must still run here. */
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop) && spins < POOL_SPIN)
            spins++;
        if (g == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) return NULL;
        seen = g;
        run_chunk(p, wa.t);
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

void cllm_pool_for_grain(cllm_pool *p, size_t n, size_t grain, cllm_pool_fn fn, void *ctx) {
    if (n == 0) return;
    if (!p || p->n == 1 || n <= (grain ? grain : 1)) {
        fn(ctx, 0, n, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n;
    p->grain = grain;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    run_chunk(p, 0);
    double t0 = p->prof ? cllm_time_s() : 0.0;
    /* Spin briefly, then yield: on an oversubscribed machine the workers may need this core. */
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++)
        if (spins > POOL_SPIN) sched_yield();
    if (p->prof) {
        p->prof_calls++;
        p->prof_wait += cllm_time_s() - t0;
    }
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
