/* BPE merge loop for one pre-token, plus the word cache in front of it.
 *
 * Works on raw bytes: the byte-level alphabet is undone at load time, so the initial symbols are
 * the ids of single bytes and merges are looked up by (left id, right id). The order of merges is
 * HF's: always the lowest-rank pair, leftmost first, via a binary heap with lazy invalidation, so
 * long words (whitespace runs, long CJK runs) stay O(n log n). */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

cllm_status tok_ids_push(cllm_tok_ids *v, int32_t id) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->ids, nc * sizeof(*p));
        if (!p) return CLLM_ENOMEM;
        v->ids = p;
        v->cap = nc;
    }
    v->ids[v->n++] = id;
    return CLLM_OK;
}

cllm_status tok_ids_append(cllm_tok_ids *v, const int32_t *ids, size_t n) {
    if (v->n + n > v->cap) {
        size_t nc = v->cap ? v->cap : 64;
        while (nc < v->n + n) nc *= 2;
        int32_t *p = realloc(v->ids, nc * sizeof(*p));
        if (!p) return CLLM_ENOMEM;
        v->ids = p;
        v->cap = nc;
    }
    if (n) memcpy(v->ids + v->n, ids, n * sizeof(*ids));
    v->n += n;
    return CLLM_OK;
}

void cllm_tok_ids_free(cllm_tok_ids *v) {
    free(v->ids);
    memset(v, 0, sizeof(*v));
}

typedef struct cand {
    int32_t rank, pos, new_id, right_id;
} cand;

static inline bool cand_less(const cand *a, const cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(cand *h, int *n, cand c) {
    int i = (*n)++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_less(&c, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, int *n) {
    cand top = h[0], last = h[--(*n)];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        const cand *mv = &last;
        if (l < *n && cand_less(&h[l], mv)) m = l, mv = &h[l];
        if (r < *n && cand_less(&h[r], mv)) m = r;
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = last;
    return top;
}

/* Merges the byte symbols of w in place; writes the resulting ids to out. */
static cllm_status bpe_merge(const cllm_tok *tok, const char *w, size_t len, cllm_tok_ids *out) {
    enum { STACK = 64 };
    /* The heap holds stale candidates too: n-1 initial pushes plus at most 2 per merge. */
    int32_t s_id[STACK], s_next[STACK], s_prev[STACK];
    cand s_heap[3 * STACK];
    int32_t *id = s_id, *next = s_next, *prev = s_prev;
    cand *heap = s_heap;
    void *mem = NULL;
    if (len > STACK) {
        mem = malloc(len * (3 * sizeof(int32_t) + 3 * sizeof(cand)));
        if (!mem) return CLLM_ENOMEM;
        id = mem;
        next = id + len;
        prev = next + len;
        heap = (cand *)(prev + len);
    }
    /* Bytes missing from the vocabulary are dropped, as HF BPE does without an unk token. */
    int n = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t b = tok->byte_id[(unsigned char)w[i]];
        if (b >= 0) id[n++] = b;
    }
    for (int i = 0; i < n; i++) next[i] = i + 1 < n ? i + 1 : -1, prev[i] = i - 1;
    int nh = 0;
    for (int i = 0; i + 1 < n; i++) {
        const struct tok_pairent *e = tok_pairmap_get(&tok->merges, id[i], id[i + 1]);
        if (e) heap_push(heap, &nh, (cand){e->rank, i, e->id, id[i + 1]});
    }
    while (nh) {
        cand c = heap_pop(heap, &nh);
        int r = next[c.pos];
        /* Stale candidate: the left symbol was merged away or its right neighbour changed. */
        if (id[c.pos] < 0 || r < 0 || id[r] != c.right_id) continue;
        const struct tok_pairent *e = tok_pairmap_get(&tok->merges, id[c.pos], id[r]);
        if (!e || e->id != c.new_id) continue;
        id[c.pos] = c.new_id;
        id[r] = -1;
        next[c.pos] = next[r];
        if (next[r] >= 0) prev[next[r]] = c.pos;
        int p = prev[c.pos];
        if (p >= 0) {
            e = tok_pairmap_get(&tok->merges, id[p], id[c.pos]);
            if (e) heap_push(heap, &nh, (cand){e->rank, p, e->id, id[c.pos]});
        }
        if (next[c.pos] >= 0) {
            e = tok_pairmap_get(&tok->merges, id[c.pos], id[next[c.pos]]);
            if (e) heap_push(heap, &nh, (cand){e->rank, c.pos, e->id, id[next[c.pos]]});
        }
    }
    cllm_status st = CLLM_OK;
    for (int i = n ? 0 : -1; i >= 0 && st == CLLM_OK; i = next[i]) st = tok_ids_push(out, id[i]);
    free(mem);
    return st;
}

enum { CACHE_MAX_WORD = 128 };

static tok_cache_ent *cache_find(const cllm_tok *tok, const char *w, size_t len, uint32_t h) {
    size_t j = h & (tok->cache_cap - 1);
    for (;;) {
        tok_cache_ent *e = &tok->cache[j];
        if (!e->key) return e;
        if (e->hash == h && e->len == len && !memcmp(e->key, w, len)) return e;
        j = (j + 1) & (tok->cache_cap - 1);
    }
}

static void cache_clear(cllm_tok *tok) {
    for (size_t i = 0; i < tok->cache_cap; i++) {
        free(tok->cache[i].key);
        free(tok->cache[i].ids);
    }
    memset(tok->cache, 0, tok->cache_cap * sizeof(*tok->cache));
    tok->cache_n = 0;
}

cllm_status tok_bpe_word(const cllm_tok *ctok, const char *w, size_t len, cllm_tok_ids *out) {
    if (len == 1) {
        int32_t b = ctok->byte_id[(unsigned char)w[0]];
        return b >= 0 ? tok_ids_push(out, b) : CLLM_OK;
    }
    if (ctok->ignore_merges) {
        int32_t v = tok_strmap_get(&ctok->vocab, w, len);
        if (v >= 0) return tok_ids_push(out, v);
    }
    /* The cache is a memo only; the const cast is confined to these lines under the lock. */
    cllm_tok *tok = (cllm_tok *)ctok;
    bool cacheable = tok->cache && len <= CACHE_MAX_WORD;
    uint32_t h = 0;
    if (cacheable && pthread_mutex_trylock(&tok->cache_mu) == 0) {
        h = tok_hash_bytes(w, len);
        tok_cache_ent *e = cache_find(tok, w, len, h);
        if (e->key) {
            cllm_status st = tok_ids_append(out, e->ids, e->n);
            pthread_mutex_unlock(&tok->cache_mu);
            return st;
        }
        pthread_mutex_unlock(&tok->cache_mu);
    } else {
        cacheable = false;
    }
    size_t start = out->n;
    cllm_status st = bpe_merge(tok, w, len, out);
    if (st != CLLM_OK || !cacheable || pthread_mutex_trylock(&tok->cache_mu) != 0) return st;
    if ((tok->cache_n + 1) * 2 > tok->cache_cap) cache_clear(tok);
    tok_cache_ent *e = cache_find(tok, w, len, h);
    if (!e->key) {
        size_t n = out->n - start;
        char *k = malloc(len ? len : 1);
        int32_t *ids = malloc((n ? n : 1) * sizeof(int32_t));
        if (k && ids) {
            memcpy(k, w, len);
            memcpy(ids, out->ids + start, n * sizeof(int32_t));
            *e = (tok_cache_ent){k, (uint32_t)len, h, ids, (uint32_t)n};
            tok->cache_n++;
        } else {
            free(k);
            free(ids);
        }
    }
    pthread_mutex_unlock(&tok->cache_mu);
    return st;
}
