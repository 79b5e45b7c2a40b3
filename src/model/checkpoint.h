/* A model directory's weights: one model.safetensors, or shards listed by
 * model.safetensors.index.json (any shard file names), or failing both every *.safetensors file,
 * or failing that one GGUF file (or the first of a split set) seen under HF names
 * (model/gguf_ckpt.h).
 * Tensor lookup by name across shards. All data stays in the shards' read-only mmaps. */
#ifndef CLLM_MODEL_CHECKPOINT_H
#define CLLM_MODEL_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"
#include "base/strmap.h"
#include "model/safetensors.h"

typedef struct cllm_ckpt {
    char *dir;
    cllm_st_file **files; /* [n_files], NULL for a shard that failed to open (lenient mode) */
    char **file_names;    /* [n_files] names relative to dir */
    size_t n_files;
    bool has_index;
    cllm_strmap by_name; /* name -> const cllm_tensor* */
    size_t n_tensors;
    char **problems; /* lenient mode: one line per inconsistency found while opening */
    size_t n_problems;
    void *owner; /* a GGUF checkpoint's file and converted data (model/gguf_ckpt.c) */
    void (*owner_free)(void *owner);
} cllm_ckpt;

/* Opens the checkpoint in dir. Strict mode (lenient=false) fails on the first problem (missing
 * shard, tensor listed in the index but absent from its shard, tensor in two shards, ...). Lenient
 * mode opens what it can and lists every problem in ckpt->problems (used by `cllm verify`); it
 * still fails when not a single weight file can be found. */
cllm_status cllm_ckpt_open(const char *dir, bool lenient, cllm_ckpt **out, cllm_error *err);
void cllm_ckpt_close(cllm_ckpt *c);

const cllm_tensor *cllm_ckpt_get(const cllm_ckpt *c, const char *name);

/* Calls fn for every tensor of every opened shard. */
void cllm_ckpt_foreach(const cllm_ckpt *c, void (*fn)(void *ctx, const cllm_tensor *t), void *ctx);

#endif
