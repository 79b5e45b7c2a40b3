/* safetensors reader: strict header validation, mmap'd tensor data.
 *
 * File layout: u64 little-endian header length N, N bytes of JSON ({name: {dtype, shape,
 * data_offsets: [begin, end]}, "__metadata__": {str: str}}), then the data region. Offsets are
 * relative to the data region. We require what the reference Rust implementation requires:
 * well-formed UTF-8 JSON without duplicate keys, known dtypes, end - begin == prod(shape) * size,
 * tensors non-overlapping and together covering the data region exactly. */
#ifndef CLLM_MODEL_SAFETENSORS_H
#define CLLM_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "base/dtype.h"

#define CLLM_ST_MAX_DIMS   8                    /* more dims is rejected as unsupported */
#define CLLM_ST_MAX_HEADER (100u * 1024 * 1024) /* same cap as the Rust implementation */

typedef struct cllm_tensor {
    char *name;
    cllm_dtype dtype;
    int n_dims;
    int64_t shape[CLLM_ST_MAX_DIMS];
    uint64_t n_elems;
    uint64_t nbytes;
    uint64_t offset;  /* within the data region */
    const void *data; /* into the mmap; NULL when only the header was parsed */
    const char *file; /* path of the shard holding it (owned by the file) */
    /* a GGUF's matrix kept in ggml blocks (model/gguf_ckpt.c): CLLM_KQ_* of kernels.h, dtype U8,
     * shape the logical [N][K], nbytes N * the row's block bytes; 0 for everything else */
    int kq_type;
} cllm_tensor;

typedef struct cllm_st_file {
    char *path;
    void *map; /* whole file, read-only */
    size_t map_size;
    uint64_t header_len;
    uint64_t data_size; /* bytes after the header */
    cllm_tensor *tensors;
    size_t n_tensors;
    char *metadata_format; /* __metadata__.format if present ("pt"), else NULL */
} cllm_st_file;

/* Parses a header (the JSON bytes only). data_size is the size of the data region (to check
 * offsets). On success fills out->tensors / n_tensors / metadata_format (caller frees with
 * cllm_st_close). Errors name the tensor and the problem; `label` (file name) prefixes them. */
cllm_status cllm_st_parse_header(const char *json, size_t len, uint64_t data_size,
                                 const char *label, cllm_st_file *out, cllm_error *err);

/* Opens and validates a file; tensor data pointers point into a read-only mmap. */
cllm_status cllm_st_open(const char *path, cllm_st_file **out, cllm_error *err);
void cllm_st_close(cllm_st_file *f);

/* Linear search by name (files are indexed by the checkpoint layer for fast lookup). */
const cllm_tensor *cllm_st_find(const cllm_st_file *f, const char *name);

/* Element i of tensor t as a double: F32, F16, BF16, F64, F8_E4M3 decoded exactly; integer and
 * BOOL dtypes give their value; F8_E5M2 gives NaN (no decoder). i must be < t->n_elems. */
double cllm_tensor_elem(const cllm_tensor *t, uint64_t i);

/* Writes "[a, b, c]" into buf. */
void cllm_shape_str(const int64_t *shape, int n_dims, char *buf, size_t cap);

#endif
