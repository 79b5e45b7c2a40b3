/* Block manager and state-slot manager unit tests: allocation to exhaustion, ref counting, the
 * hash index, LRU eviction order of cached blocks and snapshots, blk_check / slot_check catching
 * corrupted states, and a random operation sequence checked against a model. */
#include <string.h>

#include "test.h"
#include "engine/blocks.h"

static blk_hash H(uint64_t x) {
    blk_hash h = {x * 0x9e3779b97f4a7c15ull + 1, x};
    return h;
}

static void test_blocks_basic(void) {
    blk_mgr m;
    CHECK(blk_init(&m, 4, 16) == 0);
    CHECK(blk_available(&m) == 4 && blk_used(&m) == 0);
    int b[4];
    for (int i = 0; i < 4; i++) b[i] = blk_alloc(&m);
    CHECK(b[0] == 0 && b[3] == 3);
    CHECK(blk_alloc(&m) == -1 && blk_available(&m) == 0);
    CHECK(blk_register(&m, b[0], H(10)) && blk_register(&m, b[1], H(11)));
    CHECK(!blk_register(&m, b[2], H(10))); /* hash held by another block */
    CHECK(!blk_register(&m, b[0], H(12))); /* already hashed */
    CHECK(blk_lookup(&m, H(10)) == b[0] && blk_lookup(&m, H(12)) == -1);
    blk_ref(&m, b[0]);
    CHECK(m.ref[b[0]] == 2);
    CHECK(blk_check(&m, NULL) == NULL);
    /* release: hashed -> LRU (order of release), unhashed -> free */
    blk_unref(&m, b[0]);
    blk_unref(&m, b[1]);
    blk_unref(&m, b[0]);
    blk_unref(&m, b[2]);
    blk_unref(&m, b[3]);
    CHECK(blk_available(&m) == 4 && blk_used(&m) == 0 && m.lru.count == 2);
    int expect[4] = {0, 0, 0, 0};
    CHECK(blk_check(&m, expect) == NULL);
    /* free blocks go first, then the LRU head (b[1] released before b[0]) */
    int x = blk_alloc(&m), y = blk_alloc(&m);
    CHECK((x == b[2] || x == b[3]) && (y == b[2] || y == b[3]));
    CHECK(blk_alloc(&m) == b[1] && blk_lookup(&m, H(11)) == -1 && m.evictions == 1);
    /* a cached block taken back leaves the LRU */
    blk_ref(&m, b[0]);
    CHECK(m.lru.count == 0 && blk_alloc(&m) == -1);
    int exp2[4];
    exp2[b[0]] = 1, exp2[b[1]] = 1, exp2[x] = 1, exp2[y] = 1;
    CHECK(blk_check(&m, exp2) == NULL);
    exp2[b[0]] = 2;
    CHECK(blk_check(&m, exp2) != NULL); /* the checker notices a wrong count */
    /* corruption: a block both referenced and on the free list */
    m.free_list[m.n_free++] = x;
    CHECK(blk_check(&m, NULL) != NULL);
    m.n_free--;
    blk_unref(&m, b[0]);
    blk_reset_cache(&m);
    CHECK(m.lru.count == 0 && blk_lookup(&m, H(10)) == -1 && blk_check(&m, NULL) == NULL);
    blk_free(&m);
}

static void test_slots(void) {
    slot_mgr s;
    CHECK(slot_init(&s, 2, 3) == 0);
    int a = slot_live_alloc(&s), b = slot_live_alloc(&s);
    CHECK(a >= 0 && b >= 0 && a != b && slot_live_alloc(&s) == -1 && slot_live_used(&s) == 2);
    slot_live_release(&s, a);
    slot_live_release(&s, a); /* idempotent */
    CHECK(slot_live_used(&s) == 1);
    int p = slot_snap_alloc(&s), q = slot_snap_alloc(&s), r = slot_snap_alloc(&s);
    CHECK(p >= 2 && q >= 2 && r >= 2 && p != q && q != r &&
          slot_snap_alloc(&s) == -1); /* all owned */
    slot_snap_commit(&s, p, H(1));
    slot_snap_commit(&s, q, H(2));
    slot_snap_commit(&s, r, H(1)); /* duplicate key: r is released */
    CHECK(slot_snap_cached(&s) == 2 && s.n_snap_free == 1);
    CHECK(slot_snap_lookup(&s, H(1), true) == p && slot_snap_lookup(&s, H(3), false) == -1);
    CHECK(slot_check(&s, NULL, NULL) == NULL);
    /* evicts the least recently used: H(2) (H(1) was touched) */
    int t = slot_snap_alloc(&s), u = slot_snap_alloc(&s);
    CHECK(t >= 0 && u == q && slot_snap_lookup(&s, H(2), false) == -1 && s.evictions == 1);
    slot_snap_release(&s, t);
    slot_snap_release(&s, u);
    uint8_t live[2] = {0, 0};
    live[b] = 1;
    CHECK(slot_check(&s, live, NULL) == NULL);
    live[b] = 0;
    CHECK(slot_check(&s, live, NULL) != NULL);
    slot_reset_cache(&s);
    CHECK(slot_snap_cached(&s) == 0 && s.n_snap_free == 3);
    slot_free(&s);
}

/* Random ops against a simple model of ref counts. */
static void test_random(void) {
    enum { N = 64 };
    blk_mgr m;
    blk_init(&m, N, 4);
    int ref[N] = {0};
    int held[4096], nh = 0;
    uint64_t st = 7;
    int bad = 0;
    for (int it = 0; it < 20000; it++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        int op = (int)((st >> 33) % 4);
        if (op == 0) {
            int b = blk_alloc(&m);
            if (b >= 0) {
                if (ref[b] != 0) bad++;
                ref[b] = 1;
                held[nh++] = b;
            } else if (blk_available(&m) != 0) {
                bad++;
            }
        } else if (op == 1 && nh > 0) {
            int i = (int)((st >> 20) % (uint64_t)nh);
            blk_unref(&m, held[i]);
            ref[held[i]]--;
            held[i] = held[--nh];
        } else if (op == 2 && nh > 0 && nh < 4096) {
            int b = held[(st >> 20) % (uint64_t)nh];
            blk_register(&m, b, H((st >> 40) % 200));
        } else if (op == 3) {
            int b = blk_lookup(&m, H((st >> 40) % 200));
            if (b >= 0 && nh < 4096) {
                blk_ref(&m, b);
                ref[b]++;
                held[nh++] = b;
            }
        }
        if (blk_check(&m, ref) != NULL) bad++;
    }
    CHECK_MSG(bad == 0, "%d inconsistencies", bad);
    blk_free(&m);
}

int main(void) {
    test_blocks_basic();
    test_slots();
    test_random();
    return test_report("test_blocks");
}
