/* See strmap.h. Capacity is a power of two kept at most half full. */
#include "base/strmap.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

uint64_t cllm_hash_bytes(const void *p, size_t n) {
    return XXH3_64bits(p, n);
}

int cllm_strmap_init(cllm_strmap *m, size_t expected) {
    memset(m, 0, sizeof(*m));
    size_t cap = 16;
    while (cap < expected * 2 + 1) cap <<= 1;
    m->keys = calloc(cap, sizeof(*m->keys));
    m->key_lens = calloc(cap, sizeof(*m->key_lens));
    m->vals = calloc(cap, sizeof(*m->vals));
    if (!m->keys || !m->key_lens || !m->vals) {
        cllm_strmap_free(m);
        return -1;
    }
    m->cap = cap;
    return 0;
}

void cllm_strmap_free(cllm_strmap *m) {
    free(m->keys);
    free(m->key_lens);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

static size_t find_slot(const cllm_strmap *m, const char *key, size_t len) {
    size_t i = (size_t)cllm_hash_bytes(key, len) & (m->cap - 1);
    while (m->keys[i] && !(m->key_lens[i] == len && !memcmp(m->keys[i], key, len)))
        i = (i + 1) & (m->cap - 1);
    return i;
}

static int grow(cllm_strmap *m) {
    cllm_strmap n;
    if (cllm_strmap_init(&n, m->cap) != 0) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t s = find_slot(&n, m->keys[i], m->key_lens[i]);
        n.keys[s] = m->keys[i];
        n.key_lens[s] = m->key_lens[i];
        n.vals[s] = m->vals[i];
        n.count++;
    }
    cllm_strmap_free(m);
    *m = n;
    return 0;
}

int cllm_strmap_put(cllm_strmap *m, const char *key, size_t len, void *val) {
    if ((m->count + 1) * 2 > m->cap && grow(m) != 0) return -1;
    size_t s = find_slot(m, key, len);
    if (m->keys[s]) {
        m->vals[s] = val;
        return 1;
    }
    m->keys[s] = key;
    m->key_lens[s] = len;
    m->vals[s] = val;
    m->count++;
    return 0;
}

void *cllm_strmap_get(const cllm_strmap *m, const char *key, size_t len) {
    if (!m->cap) return NULL;
    size_t s = find_slot(m, key, len);
    return m->keys[s] ? m->vals[s] : NULL;
}
