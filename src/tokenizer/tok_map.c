/* Hash maps for the tokenizer: vocabulary (bytes -> id) and merges ((id, id) -> rank, id).
 * Built once at load time, then read concurrently by encode; no locking needed for reads. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

/* FNV-1a is enough here: keys are short and the table is sized at 2x load. */
uint32_t tok_hash_bytes(const char *p, size_t len) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)p[i]) * 16777619u;
    return h;
}

static int strmap_grow(tok_strmap *m) {
    size_t ncap = m->cap ? m->cap * 2 : 1024;
    uint32_t *ns = calloc(ncap, sizeof(*ns));
    if (!ns) return -1;
    for (size_t i = 0; i < m->n; i++) {
        size_t j = m->ents[i].hash & (ncap - 1);
        while (ns[j]) j = (j + 1) & (ncap - 1);
        ns[j] = (uint32_t)(i + 1);
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    return 0;
}

int tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val) {
    if ((m->n + 1) * 2 > m->cap && strmap_grow(m)) return -1;
    uint32_t h = tok_hash_bytes(key, len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j]) {
        struct tok_strent *e = &m->ents[m->slots[j] - 1];
        if (e->hash == h && e->len == len && !memcmp(e->key, key, len)) {
            e->val = val; /* later entries win, as in a JSON object */
            return 0;
        }
        j = (j + 1) & (m->cap - 1);
    }
    if (m->n == m->ents_cap) {
        size_t nc = m->ents_cap ? m->ents_cap * 2 : 1024;
        void *p = realloc(m->ents, nc * sizeof(*m->ents));
        if (!p) return -1;
        m->ents = p;
        m->ents_cap = nc;
    }
    char *k = malloc(len + 1);
    if (!k) return -1;
    memcpy(k, key, len);
    k[len] = 0;
    m->ents[m->n] = (struct tok_strent){k, (uint32_t)len, h, val};
    m->slots[j] = (uint32_t)(++m->n);
    return 0;
}

int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    uint32_t h = tok_hash_bytes(key, len);
    size_t j = h & (m->cap - 1);
    while (m->slots[j]) {
        const struct tok_strent *e = &m->ents[m->slots[j] - 1];
        if (e->hash == h && e->len == len && !memcmp(e->key, key, len)) return e->val;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void tok_strmap_free(tok_strmap *m) {
    for (size_t i = 0; i < m->n; i++) free((void *)m->ents[i].key);
    free(m->ents);
    free(m->slots);
    memset(m, 0, sizeof(*m));
}

static inline uint64_t pair_key(int32_t a, int32_t b) {
    return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
}

static inline size_t pair_slot(uint64_t k, size_t cap) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

int tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t ncap = m->cap ? m->cap * 2 : 1024;
        struct tok_pairent *ns = calloc(ncap, sizeof(*ns));
        if (!ns) return -1;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->slots[i].key) continue;
            size_t j = pair_slot(m->slots[i].key, ncap);
            while (ns[j].key) j = (j + 1) & (ncap - 1);
            ns[j] = m->slots[i];
        }
        free(m->slots);
        m->slots = ns;
        m->cap = ncap;
    }
    uint64_t k = pair_key(a, b);
    size_t j = pair_slot(k, m->cap);
    while (m->slots[j].key && m->slots[j].key != k) j = (j + 1) & (m->cap - 1);
    /* A duplicated pair keeps its last rank: HF collects merges into a HashMap, later wins. */
    if (m->slots[j].key != k) m->n++;
    m->slots[j] = (struct tok_pairent){k, rank, id};
    return 0;
}

const struct tok_pairent *tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b) {
    if (!m->cap) return NULL;
    uint64_t k = pair_key(a, b);
    size_t j = pair_slot(k, m->cap);
    while (m->slots[j].key) {
        if (m->slots[j].key == k) return &m->slots[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

void tok_pairmap_free(tok_pairmap *m) {
    free(m->slots);
    memset(m, 0, sizeof(*m));
}
