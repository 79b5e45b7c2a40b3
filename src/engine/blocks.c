/* Block manager (ref-counted KV blocks, free list, hash-chain index, LRU of cached blocks) and
 * state-slot manager (live slots, GDN snapshots keyed by chain hash with LRU eviction).
 * See blocks.h. Called only from the scheduler thread. */
#include "engine/blocks.h"

#include <stdlib.h>
#include <string.h>

/* ---- hash index ---- */

static int idx_init(blk_index *x, int n) {
    memset(x, 0, sizeof(*x));
    x->n = n;
    x->n_buckets = 16;
    while (x->n_buckets < 2 * n) x->n_buckets *= 2;
    x->bucket = malloc((size_t)x->n_buckets * sizeof(int));
    x->next = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    x->key = calloc((size_t)(n > 0 ? n : 1), sizeof(blk_hash));
    x->in = calloc((size_t)(n > 0 ? n : 1), 1);
    if (!x->bucket || !x->next || !x->key || !x->in) return -1;
    for (int i = 0; i < x->n_buckets; i++) x->bucket[i] = -1;
    for (int i = 0; i < n; i++) x->next[i] = -1;
    return 0;
}

static void idx_free(blk_index *x) {
    free(x->bucket);
    free(x->next);
    free(x->key);
    free(x->in);
    memset(x, 0, sizeof(*x));
}

static int idx_find(const blk_index *x, blk_hash h) {
    for (int e = x->bucket[h.lo & (uint64_t)(x->n_buckets - 1)]; e >= 0; e = x->next[e])
        if (blk_hash_eq(x->key[e], h)) return e;
    return -1;
}

static void idx_insert(blk_index *x, int e, blk_hash h) {
    int b = (int)(h.lo & (uint64_t)(x->n_buckets - 1));
    x->key[e] = h;
    x->next[e] = x->bucket[b];
    x->bucket[b] = e;
    x->in[e] = 1;
}

static void idx_remove(blk_index *x, int e) {
    if (!x->in[e]) return;
    int *p = &x->bucket[x->key[e].lo & (uint64_t)(x->n_buckets - 1)];
    while (*p != e) p = &x->next[*p];
    *p = x->next[e];
    x->next[e] = -1;
    x->in[e] = 0;
}

/* ---- LRU ---- */

static int lru_init(blk_lru *l, int n) {
    memset(l, 0, sizeof(*l));
    size_t m = (size_t)(n > 0 ? n : 1);
    l->prev = malloc(m * sizeof(int));
    l->next = malloc(m * sizeof(int));
    l->on = calloc(m, 1);
    l->head = l->tail = -1;
    return (l->prev && l->next && l->on) ? 0 : -1;
}

static void lru_free(blk_lru *l) {
    free(l->prev);
    free(l->next);
    free(l->on);
    memset(l, 0, sizeof(*l));
}

static void lru_push(blk_lru *l, int e) {
    l->prev[e] = l->tail;
    l->next[e] = -1;
    if (l->tail >= 0)
        l->next[l->tail] = e;
    else
        l->head = e;
    l->tail = e;
    l->on[e] = 1;
    l->count++;
}

static void lru_remove(blk_lru *l, int e) {
    if (!l->on[e]) return;
    if (l->prev[e] >= 0)
        l->next[l->prev[e]] = l->next[e];
    else
        l->head = l->next[e];
    if (l->next[e] >= 0)
        l->prev[l->next[e]] = l->prev[e];
    else
        l->tail = l->prev[e];
    l->on[e] = 0;
    l->count--;
}

/* ---- blocks ---- */

int blk_init(blk_mgr *m, int n_blocks, int block_size) {
    memset(m, 0, sizeof(*m));
    m->n_blocks = n_blocks;
    m->block_size = block_size;
    m->ref = calloc((size_t)n_blocks + 1, sizeof(int));
    m->free_list = malloc(((size_t)n_blocks + 1) * sizeof(int));
    if (!m->ref || !m->free_list || idx_init(&m->idx, n_blocks) || lru_init(&m->lru, n_blocks)) {
        blk_free(m);
        return -1;
    }
    /* Pop order 0, 1, 2, ... */
    for (int i = 0; i < n_blocks; i++) m->free_list[i] = n_blocks - 1 - i;
    m->n_free = n_blocks;
    return 0;
}

void blk_free(blk_mgr *m) {
    free(m->ref);
    free(m->free_list);
    idx_free(&m->idx);
    lru_free(&m->lru);
    memset(m, 0, sizeof(*m));
}

int blk_available(const blk_mgr *m) {
    return m->n_free + m->lru.count;
}
int blk_used(const blk_mgr *m) {
    return m->n_blocks - blk_available(m);
}

int blk_alloc(blk_mgr *m) {
    int b;
    if (m->n_free > 0) {
        b = m->free_list[--m->n_free];
    } else if (m->lru.head >= 0) {
        b = m->lru.head;
        lru_remove(&m->lru, b);
        idx_remove(&m->idx, b);
        m->evictions++;
    } else {
        return -1;
    }
    m->ref[b] = 1;
    return b;
}

void blk_ref(blk_mgr *m, int b) {
    if (m->ref[b] == 0) lru_remove(&m->lru, b);
    m->ref[b]++;
}

void blk_unref(blk_mgr *m, int b) {
    if (--m->ref[b] > 0) return;
    if (m->idx.in[b])
        lru_push(&m->lru, b);
    else
        m->free_list[m->n_free++] = b;
}

int blk_lookup(const blk_mgr *m, blk_hash h) {
    return idx_find(&m->idx, h);
}

bool blk_register(blk_mgr *m, int b, blk_hash h) {
    if (m->idx.in[b] || idx_find(&m->idx, h) >= 0) return false;
    idx_insert(&m->idx, b, h);
    return true;
}

bool blk_is_hashed(const blk_mgr *m, int b) {
    return m->idx.in[b] != 0;
}

void blk_reset_cache(blk_mgr *m) {
    while (m->lru.head >= 0) {
        int b = m->lru.head;
        lru_remove(&m->lru, b);
        idx_remove(&m->idx, b);
        m->free_list[m->n_free++] = b;
    }
}

const char *blk_check(const blk_mgr *m, const int *expected_ref) {
    int n = m->n_blocks;
    char *seen = calloc((size_t)n + 1, 1);
    const char *bad = NULL;
    if (!seen) return "out of memory in blk_check";
    if (m->n_free < 0 || m->n_free > n) bad = "free count out of range";
    for (int i = 0; !bad && i < m->n_free; i++) {
        int b = m->free_list[i];
        if (b < 0 || b >= n)
            bad = "free list holds an out-of-range block";
        else if (seen[b]++)
            bad = "block twice on the free list";
        else if (m->ref[b] != 0)
            bad = "referenced block on the free list";
        else if (m->idx.in[b])
            bad = "hashed block on the free list";
    }
    int cnt = 0;
    for (int b = m->lru.head, prev = -1; !bad && b >= 0; prev = b, b = m->lru.next[b]) {
        if (++cnt > n)
            bad = "LRU cycle";
        else if (m->lru.prev[b] != prev)
            bad = "LRU back link broken";
        else if (seen[b]++)
            bad = "block both free and cached, or twice in LRU";
        else if (m->ref[b] != 0)
            bad = "referenced block on the LRU";
        else if (!m->idx.in[b])
            bad = "unhashed block on the LRU";
    }
    if (!bad && cnt != m->lru.count) bad = "LRU count wrong";
    for (int b = 0; !bad && b < n; b++) {
        if (m->ref[b] < 0)
            bad = "negative ref count";
        else if (m->ref[b] == 0 && !seen[b])
            bad = "leaked block (ref 0, neither free nor cached)";
        else if (expected_ref && m->ref[b] != expected_ref[b])
            bad = "ref count differs from the block tables";
        else if (m->idx.in[b] && idx_find(&m->idx, m->idx.key[b]) != b)
            bad = "hash index broken";
    }
    free(seen);
    return bad;
}

/* ---- state slots ---- */

int slot_init(slot_mgr *s, int n_live, int n_snap) {
    memset(s, 0, sizeof(*s));
    s->n_live = n_live;
    s->n_snap = n_snap;
    s->live_free = malloc(((size_t)n_live + 1) * sizeof(int));
    s->live_used = calloc((size_t)n_live + 1, 1);
    s->snap_st = calloc((size_t)n_snap + 1, 1);
    s->snap_free = malloc(((size_t)n_snap + 1) * sizeof(int));
    if (!s->live_free || !s->live_used || !s->snap_st || !s->snap_free ||
        idx_init(&s->idx, n_snap) || lru_init(&s->lru, n_snap)) {
        slot_free(s);
        return -1;
    }
    for (int i = 0; i < n_live; i++) s->live_free[i] = n_live - 1 - i;
    s->n_live_free = n_live;
    for (int i = 0; i < n_snap; i++) s->snap_free[i] = n_snap - 1 - i;
    s->n_snap_free = n_snap;
    return 0;
}

void slot_free(slot_mgr *s) {
    free(s->live_free);
    free(s->live_used);
    free(s->snap_st);
    free(s->snap_free);
    idx_free(&s->idx);
    lru_free(&s->lru);
    memset(s, 0, sizeof(*s));
}

int slot_live_alloc(slot_mgr *s) {
    if (s->n_live_free == 0) return -1;
    int k = s->live_free[--s->n_live_free];
    s->live_used[k] = 1;
    return k;
}

void slot_live_release(slot_mgr *s, int slot) {
    if (slot < 0 || slot >= s->n_live || !s->live_used[slot]) return;
    s->live_used[slot] = 0;
    s->live_free[s->n_live_free++] = slot;
}

int slot_live_used(const slot_mgr *s) {
    return s->n_live - s->n_live_free;
}

int slot_snap_alloc(slot_mgr *s) {
    int i;
    if (s->n_snap_free > 0) {
        i = s->snap_free[--s->n_snap_free];
    } else if (s->lru.head >= 0) {
        i = s->lru.head;
        lru_remove(&s->lru, i);
        idx_remove(&s->idx, i);
        s->evictions++;
    } else {
        return -1;
    }
    s->snap_st[i] = SNAP_OWNED;
    return s->n_live + i;
}

void slot_snap_release(slot_mgr *s, int slot) {
    int i = slot - s->n_live;
    if (i < 0 || i >= s->n_snap || s->snap_st[i] != SNAP_OWNED) return;
    s->snap_st[i] = SNAP_FREE;
    s->snap_free[s->n_snap_free++] = i;
}

void slot_snap_commit(slot_mgr *s, int slot, blk_hash h) {
    int i = slot - s->n_live;
    if (i < 0 || i >= s->n_snap || s->snap_st[i] != SNAP_OWNED) return;
    int old = idx_find(&s->idx, h);
    if (old >= 0) {
        lru_remove(&s->lru, old);
        lru_push(&s->lru, old);
        slot_snap_release(s, slot);
        return;
    }
    s->snap_st[i] = SNAP_CACHED;
    idx_insert(&s->idx, i, h);
    lru_push(&s->lru, i);
}

int slot_snap_lookup(slot_mgr *s, blk_hash h, bool touch) {
    int i = idx_find(&s->idx, h);
    if (i < 0) return -1;
    if (touch) {
        lru_remove(&s->lru, i);
        lru_push(&s->lru, i);
    }
    return s->n_live + i;
}

int slot_snap_cached(const slot_mgr *s) {
    return s->lru.count;
}

void slot_reset_cache(slot_mgr *s) {
    while (s->lru.head >= 0) {
        int i = s->lru.head;
        lru_remove(&s->lru, i);
        idx_remove(&s->idx, i);
        s->snap_st[i] = SNAP_FREE;
        s->snap_free[s->n_snap_free++] = i;
    }
}

const char *slot_check(const slot_mgr *s, const uint8_t *expected_live_used,
                       const uint8_t *expected_snap_owned) {
    int used = 0;
    for (int k = 0; k < s->n_live; k++) {
        used += s->live_used[k];
        if (expected_live_used && (s->live_used[k] != 0) != (expected_live_used[k] != 0))
            return "live slot use differs from the running sequences";
    }
    if (used + s->n_live_free != s->n_live) return "leaked live slot";
    int n_free = 0, n_cached = 0;
    for (int i = 0; i < s->n_snap; i++) {
        if (s->snap_st[i] == SNAP_FREE) n_free++;
        if (s->snap_st[i] == SNAP_CACHED) {
            n_cached++;
            if (!s->idx.in[i] || !s->lru.on[i]) return "cached snapshot not indexed";
        } else if (s->idx.in[i] || s->lru.on[i]) {
            return "uncached snapshot indexed";
        }
        if (expected_snap_owned && (s->snap_st[i] == SNAP_OWNED) != (expected_snap_owned[i] != 0))
            return "owned snapshot differs from the sequences";
    }
    if (n_free != s->n_snap_free) return "leaked snapshot slot";
    if (n_cached != s->lru.count) return "snapshot LRU count wrong";
    return NULL;
}
