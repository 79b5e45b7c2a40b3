/* Persistent thread pool with a deterministic parallel-for.
 *
 * cllm_pool_for splits [0, n) into n_threads contiguous ranges by a fixed formula, so which thread
 * computes which index never depends on timing. Kernels that keep every output element's
 * reduction inside one range therefore give bitwise identical results for any thread count.
 * The calling thread is worker 0. Calls are not reentrant: one parallel-for at a time per pool. */
#ifndef CLLM_BASE_THREADPOOL_H
#define CLLM_BASE_THREADPOOL_H

#include <stddef.h>

typedef struct cllm_pool cllm_pool;

/* fn(ctx, begin, end, thread_index) processes indices [begin, end). */
typedef void (*cllm_pool_fn)(void *ctx, size_t begin, size_t end, int tid);

/* n_threads <= 0 picks the number of online CPUs. NULL on failure. */
cllm_pool *cllm_pool_create(int n_threads);
void cllm_pool_free(cllm_pool *p);
int cllm_pool_size(const cllm_pool *p);

/* Runs fn over [0, n) split into contiguous chunks, one per thread (empty chunks skipped);
 * returns when all are done. p may be NULL (runs inline on the caller). */
void cllm_pool_for(cllm_pool *p, size_t n, cllm_pool_fn fn, void *ctx);

/* As cllm_pool_for but chunk boundaries are multiples of `grain` (e.g. a SIMD width or a cache
 * line's worth of rows), still a pure function of (n, grain, n_threads). */
void cllm_pool_for_grain(cllm_pool *p, size_t n, size_t grain, cllm_pool_fn fn, void *ctx);

/* As cllm_pool_for, but the items are handed out one at a time, in order, to whichever thread is
 * free (fn sees ranges [i, i + 1)): a thread that starts late, runs slower or is preempted does
 * not hold up the region. Which thread runs an item then depends on timing, so only for fn whose
 * every output is computed inside one item (results stay bitwise the same for any schedule);
 * items should be several microseconds of work each. */
void cllm_pool_for_dyn(cllm_pool *p, size_t n, cllm_pool_fn fn, void *ctx);

/* Profiling (off by default): on != 0 counts the parallel regions that go through the workers
 * and the caller's wait for them after finishing its own chunk; returns the totals so far in
 * *calls / *wait_s (either may be NULL). Call from the thread that runs the regions. */
void cllm_pool_profile(cllm_pool *p, int on, unsigned long long *calls, double *wait_s);

/* Range of thread t out of nt for n items with the given grain (exposed for tests). */
void cllm_pool_range(size_t n, size_t grain, int nt, int t, size_t *begin, size_t *end);

#endif
