/* A small LRU of compiled grammars keyed by their source (see grammar.h). A grammar keeps its
 * filled mask caches, so a schema that comes back costs neither a compile nor a preparation. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

typedef struct gc_ent {
    char *key;
    size_t len;
    cllm_gm *g;
    uint64_t used;
} gc_ent;

struct cllm_gm_cache {
    pthread_mutex_t mu;
    gc_ent *e;
    int n, cap;
    uint64_t clock, hits, misses;
};

cllm_gm_cache *cllm_gm_cache_new(int cap) {
    cllm_gm_cache *c = calloc(1, sizeof(*c));
    if (!c) return NULL;
    c->cap = cap > 0 ? cap : 1;
    c->e = calloc((size_t)c->cap, sizeof(gc_ent));
    if (!c->e) {
        free(c);
        return NULL;
    }
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void cllm_gm_cache_free(cllm_gm_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].key);
        cllm_gm_unref(c->e[i].g);
    }
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

cllm_gm *cllm_gm_cache_get(cllm_gm_cache *c, const char *key, size_t len) {
    if (!c) return NULL;
    cllm_gm *g = NULL;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n && !g; i++)
        if (c->e[i].len == len && !memcmp(c->e[i].key, key, len)) {
            c->e[i].used = ++c->clock;
            g = cllm_gm_ref(c->e[i].g);
        }
    if (g)
        c->hits++;
    else
        c->misses++;
    pthread_mutex_unlock(&c->mu);
    return g;
}

void cllm_gm_cache_put(cllm_gm_cache *c, const char *key, size_t len, cllm_gm *g) {
    if (!c || !g) return;
    char *k = malloc(len ? len : 1);
    if (!k) return; /* not cached: only a later compile is lost */
    memcpy(k, key, len);
    pthread_mutex_lock(&c->mu);
    int slot = c->n;
    if (c->n == c->cap) { /* evict the least recently used */
        slot = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[slot].used) slot = i;
        free(c->e[slot].key);
        cllm_gm_unref(c->e[slot].g);
    } else {
        c->n++;
    }
    c->e[slot] = (gc_ent){k, len, cllm_gm_ref(g), ++c->clock};
    pthread_mutex_unlock(&c->mu);
}

void cllm_gm_cache_stats(cllm_gm_cache *c, uint64_t *hits, uint64_t *misses) {
    pthread_mutex_lock(&c->mu);
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}
