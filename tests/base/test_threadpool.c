/* Thread pool: ranges partition [0, n) exactly, grain respected, every index run once, the same
 * partition every time; dynamic regions (cllm_pool_for_dyn) run every index exactly once, one at a
 * time, alternating with static ones (workers that skip a closed dynamic job must still run the
 * next static one), including regions smaller than the pool and slow items. */
#include <stdatomic.h>
#include <string.h>

#include "base/threadpool.h"
#include "test.h"

typedef struct ctx {
    atomic_int *hits;
    int *owner;
} ctx;

static void mark(void *c, size_t b, size_t e, int tid) {
    ctx *x = c;
    for (size_t i = b; i < e; i++) {
        atomic_fetch_add(&x->hits[i], 1);
        x->owner[i] = tid;
    }
}

/* as mark, one item at a time (dyn) and slow enough that the workers wake while items remain */
static atomic_int wide_items; /* dyn items of more than one index (CHECK is not thread-safe) */
static void mark_slow(void *c, size_t b, size_t e, int tid) {
    if (e != b + 1) atomic_fetch_add(&wide_items, 1);
    volatile unsigned x = 0;
    for (int k = 0; k < 2000; k++) x += (unsigned)k;
    mark(c, b, e, tid);
}

int main(void) {
    for (int nt = 1; nt <= 5; nt++) {
        for (size_t n = 0; n < 300; n += 7) {
            for (size_t g = 1; g <= 16; g *= 4) {
                size_t covered = 0, prev_end = 0;
                for (int t = 0; t < nt; t++) {
                    size_t b, e;
                    cllm_pool_range(n, g, nt, t, &b, &e);
                    CHECK(b == prev_end && e >= b && e <= n);
                    CHECK(b % g == 0 || b == n);
                    covered += e - b;
                    prev_end = e;
                }
                CHECK(covered == n && prev_end == n);
            }
        }
    }
    cllm_pool *p = cllm_pool_create(3);
    CHECK(p && cllm_pool_size(p) == 3);
    enum { N = 10007 };
    static atomic_int hits[N];
    static int owner[N], owner2[N];
    ctx c = {hits, owner};
    for (int rep = 0; rep < 200; rep++) {
        memset(hits, 0, sizeof(hits));
        cllm_pool_for_grain(p, N, 8, mark, &c);
        int ok = 1;
        for (int i = 0; i < N; i++) ok &= hits[i] == 1;
        CHECK(ok);
        if (rep == 0)
            memcpy(owner2, owner, sizeof(owner));
        else
            CHECK(!memcmp(owner, owner2, sizeof(owner))); /* same partition every time */
    }
    /* dynamic regions between static ones, sizes around the thread count, uneven item costs */
    size_t sizes[] = {1, 2, 3, 4, 5, 17, 300, N};
    for (int rep = 0; rep < 300; rep++) {
        size_t n = sizes[rep % 8];
        memset(hits, 0, sizeof(hits));
        cllm_pool_for_dyn(p, n, rep % 3 ? mark : mark_slow, &c);
        int ok = 1;
        for (size_t i = 0; i < N; i++) ok &= hits[i] == (i < n);
        CHECK(ok);
        memset(hits, 0, sizeof(hits));
        cllm_pool_for_grain(p, n, 1, mark, &c);
        ok = 1;
        for (size_t i = 0; i < N; i++) ok &= hits[i] == (i < n);
        CHECK(ok);
    }
    CHECK(atomic_load(&wide_items) == 0);
    cllm_pool_for(NULL, 5, mark, &c); /* NULL pool runs inline */
    CHECK(owner[4] == 0);
    cllm_pool_free(p);
    return test_report("test_threadpool");
}
