/* Block manager and state-slot manager: the bookkeeping behind the paged KV pool and the Gated
 * DeltaNet state pool. Pure data structures (no model, no threads): the scheduler (sched.c) owns
 * one of each and is the only caller; tests drive them directly.
 *
 * KV blocks: ref-counted; a block with ref 0 is either on the free list (no content worth
 * keeping) or, when it carries a prefix hash, on the LRU list of cached blocks, where a later
 * prompt with the same hash chain can take it back (blk_ref) or an allocation can evict it.
 *
 * State slots: slots [0, n_live) are live slots (one per running sequence); slots
 * [n_live, n_live + n_snap) hold GDN state snapshots, keyed by the hash of the block chain that
 * ends where the snapshot was taken. A snapshot is FREE, CACHED (keyed, on an LRU list, evictable)
 * or OWNED (taken by a sequence, not yet keyed; committed or released later). */
#ifndef CLLM_ENGINE_BLOCKS_H
#define CLLM_ENGINE_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct blk_hash {
    uint64_t lo, hi; /* XXH3-128 */
} blk_hash;

static inline bool blk_hash_eq(blk_hash a, blk_hash b) {
    return a.lo == b.lo && a.hi == b.hi;
}

/* Chained hash index from blk_hash to entry ids in [0, n). */
typedef struct blk_index {
    int n, n_buckets; /* n_buckets: power of two */
    int *bucket;      /* [n_buckets] first entry or -1 */
    int *next;        /* [n] next entry in the chain or -1 */
    blk_hash *key;    /* [n] */
    uint8_t *in;      /* [n] 1 while the entry is indexed */
} blk_index;

/* A doubly linked LRU list over entry ids [0, n). */
typedef struct blk_lru {
    int *prev, *next; /* [n] */
    uint8_t *on;      /* [n] */
    int head, tail, count;
} blk_lru;

typedef struct blk_mgr {
    int n_blocks, block_size;
    int *ref;       /* [n_blocks] */
    int *free_list; /* stack of free blocks (ref 0, not hashed) */
    int n_free;
    blk_index idx; /* hashed blocks */
    blk_lru lru;   /* ref-0 hashed blocks, least recently used first */
    uint64_t evictions;
} blk_mgr;

/* Returns 0 or -1 on allocation failure. */
int blk_init(blk_mgr *m, int n_blocks, int block_size);
void blk_free(blk_mgr *m);
/* Blocks an allocation can get right now (free + evictable cached). */
int blk_available(const blk_mgr *m);
int blk_used(const blk_mgr *m); /* blocks with ref > 0 */
/* A block with ref 1 and no hash (evicting the least recently used cached block if needed), or
 * -1 when none is left. */
int blk_alloc(blk_mgr *m);
/* Takes a reference (a cached ref-0 block leaves the LRU). */
void blk_ref(blk_mgr *m, int b);
/* Drops a reference; at 0 the block goes to the LRU if hashed, else to the free list. */
void blk_unref(blk_mgr *m, int b);
/* The block holding this hash, or -1. */
int blk_lookup(const blk_mgr *m, blk_hash h);
/* Keys a referenced, full block by its chain hash. Returns false (block left unhashed) when the
 * hash is already held by another block or the block is already hashed. */
bool blk_register(blk_mgr *m, int b, blk_hash h);
bool blk_is_hashed(const blk_mgr *m, int b);
/* Forgets every cached (ref-0) block's hash: they become free. Referenced hashed blocks keep
 * their hash. */
void blk_reset_cache(blk_mgr *m);
/* Internal consistency: free list, LRU and index agree with ref counts. expected_ref (may be
 * NULL) gives the ref count every block must have. Returns NULL or a static description. */
const char *blk_check(const blk_mgr *m, const int *expected_ref);

typedef enum snap_state { SNAP_FREE = 0, SNAP_CACHED, SNAP_OWNED } snap_state;

typedef struct slot_mgr {
    int n_live, n_snap;
    int *live_free; /* stack of free live slots */
    int n_live_free;
    uint8_t *live_used; /* [n_live] */
    uint8_t *snap_st;   /* [n_snap] snap_state */
    int *snap_free;     /* stack of free snapshot indices */
    int n_snap_free;
    blk_index idx; /* cached snapshots by chain hash (entry = snapshot index) */
    blk_lru lru;   /* cached snapshots */
    uint64_t evictions;
} slot_mgr;

int slot_init(slot_mgr *s, int n_live, int n_snap);
void slot_free(slot_mgr *s);
int slot_live_alloc(slot_mgr *s); /* -1 when none */
void slot_live_release(slot_mgr *s, int slot);
int slot_live_used(const slot_mgr *s);
/* A snapshot slot (pool index n_live + i) in state OWNED, evicting the least recently used cached
 * snapshot if needed; -1 when every snapshot is owned. */
int slot_snap_alloc(slot_mgr *s);
/* OWNED -> CACHED under h; if h is already cached the slot is released instead. */
void slot_snap_commit(slot_mgr *s, int slot, blk_hash h);
void slot_snap_release(slot_mgr *s, int slot); /* OWNED -> FREE */
/* Pool index of the cached snapshot for h (touched as most recently used), or -1. */
int slot_snap_lookup(slot_mgr *s, blk_hash h, bool touch);
int slot_snap_cached(const slot_mgr *s);
void slot_reset_cache(slot_mgr *s);
/* expected_live_used / expected_snap_owned (may be NULL): [n_live] / [n_snap] flags. */
const char *slot_check(const slot_mgr *s, const uint8_t *expected_live_used,
                       const uint8_t *expected_snap_owned);

#endif
