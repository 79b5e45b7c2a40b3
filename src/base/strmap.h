/* String -> pointer hash map (open addressing, linear probing). Keys are borrowed: the caller keeps
 * them alive as long as the map. Used for tensor-name lookup and vocabularies. */
#ifndef CLLM_BASE_STRMAP_H
#define CLLM_BASE_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct cllm_strmap {
    const char **keys;
    size_t *key_lens;
    void **vals;
    size_t cap, count;
} cllm_strmap;

uint64_t cllm_hash_bytes(const void *p, size_t n);

int cllm_strmap_init(cllm_strmap *m, size_t expected); /* 0 ok, -1 ENOMEM */
void cllm_strmap_free(cllm_strmap *m);
/* Inserts or replaces; 0 ok, -1 ENOMEM. Returns 1 if the key already existed (value replaced). */
int cllm_strmap_put(cllm_strmap *m, const char *key, size_t len, void *val);
void *cllm_strmap_get(const cllm_strmap *m, const char *key, size_t len);

#endif
