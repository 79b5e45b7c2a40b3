/* safetensors writer: the shard layout, the header of each shard and model.safetensors.index.json,
 * shared by `cllm synth` (model/synth.c) and `cllm quantize` (quant/quantize.c). Callers stream
 * the tensor bytes themselves, in entry order, right after cllm_st_write_header.
 *
 * The header is compact JSON in entry order ({"__metadata__": {"format": "pt", ...}, name:
 * {dtype, shape, data_offsets}, ...}) padded with spaces to a multiple of 8 bytes, as the format
 * allows and the reference implementation writes. */
#ifndef CLLM_MODEL_ST_WRITE_H
#define CLLM_MODEL_ST_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/dtype.h"
#include "base/status.h"
#include "model/safetensors.h"

typedef struct cllm_st_entry {
    const char *name; /* borrowed */
    cllm_dtype dtype;
    int n_dims;
    int64_t shape[CLLM_ST_MAX_DIMS];
    uint64_t nbytes;
    bool with_next; /* stays in the shard of the next entry (the parts of one quantized Linear) */
    int shard;      /* set by cllm_st_layout */
} cllm_st_entry;

/* Bytes of an entry from its dtype and shape. */
uint64_t cllm_st_entry_bytes(const cllm_st_entry *e);

/* Greedy shard plan in entry order: a new shard starts when the next entry (with the entries
 * chained to it by with_next) would take the current one past shard_bytes (0: one file). Sets
 * every entry's shard and returns the number of shards (1 when n is 0). */
int cllm_st_layout(cllm_st_entry *v, size_t n, uint64_t shard_bytes);

/* "model.safetensors" for one shard, else "model-0000S-of-0000N.safetensors", or with qwen_names
 * "model.safetensors-0000S-of-0000N.safetensors" (how some Qwen releases name them). */
void cllm_st_shard_name(int s, int n_shards, bool qwen_names, char *buf, size_t cap);

/* Writes the 8-byte length and the header of shard `shard` (the entries with that shard, in
 * order) to f. meta: extra "__metadata__" string pairs after "format": "pt", as key, value, ...,
 * NULL (meta itself may be NULL). */
cllm_status cllm_st_write_header(FILE *f, const cllm_st_entry *v, size_t n, int shard,
                                 const char *const *meta, const char *path, cllm_error *err);

/* dir/model.safetensors.index.json: {"metadata": {"total_size"}, "weight_map": {name: shard}}.
 * Written only when there is more than one shard (a single file needs no index). */
cllm_status cllm_st_write_index(const char *dir, const cllm_st_entry *v, size_t n, int n_shards,
                                bool qwen_names, cllm_error *err);

#endif
