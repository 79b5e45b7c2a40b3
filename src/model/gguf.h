/* GGUF reader (llama.cpp's model file format, version 2 and 3): header, metadata key/values and
 * tensor infos, with the tensor data left in a read-only mmap.
 *
 * File layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv; n_kv key/values
 * (gguf string key, u32 value type, value); n_tensors infos (string name, u32 n_dims, u64
 * ne[n_dims], u32 ggml type, u64 offset); padding to general.alignment (default 32); the data
 * region. A gguf string is u64 length + bytes (no NUL). Arrays are u32 element type + u64 count +
 * elements. ne[0] is the fastest-varying (row length): a PyTorch [N][K] matrix is ne = {K, N}.
 * Split files (name-00001-of-0000N.gguf, split.count / split.no keys) are opened together by
 * cllm_gguf_open; tensor infos then come from all of them.
 *
 * Every count and offset is checked against the file size before it is used: a file that lies
 * gets CLLM_EFORMAT naming the key or tensor, never a read past the map. */
#ifndef CLLM_MODEL_GGUF_H
#define CLLM_MODEL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Metadata value types (gguf_type in ggml's gguf.h). */
enum {
    CLLM_GGUF_U8,
    CLLM_GGUF_I8,
    CLLM_GGUF_U16,
    CLLM_GGUF_I16,
    CLLM_GGUF_U32,
    CLLM_GGUF_I32,
    CLLM_GGUF_F32,
    CLLM_GGUF_BOOL,
    CLLM_GGUF_STRING,
    CLLM_GGUF_ARRAY,
    CLLM_GGUF_U64,
    CLLM_GGUF_I64,
    CLLM_GGUF_F64,
    CLLM_GGUF_N_TYPES
};

/* Tensor types (ggml_type ids as written in files). Only the ones cllm can read are named. */
enum {
    CLLM_GGML_F32 = 0,
    CLLM_GGML_F16 = 1,
    CLLM_GGML_Q4_0 = 2,
    CLLM_GGML_Q4_1 = 3,
    CLLM_GGML_Q5_0 = 6,
    CLLM_GGML_Q5_1 = 7,
    CLLM_GGML_Q8_0 = 8,
    CLLM_GGML_Q2_K = 10,
    CLLM_GGML_Q3_K = 11,
    CLLM_GGML_Q4_K = 12,
    CLLM_GGML_Q5_K = 13,
    CLLM_GGML_Q6_K = 14,
    CLLM_GGML_IQ4_NL = 20,
    CLLM_GGML_IQ4_XS = 23,
    CLLM_GGML_BF16 = 30,
    CLLM_GGML_N_TYPES = 64 /* ids at or past this are rejected */
};

typedef struct cllm_gguf_kv {
    char *key;
    int type;           /* CLLM_GGUF_*; for arrays CLLM_GGUF_ARRAY */
    int arr_type;       /* element type of an array */
    uint64_t n;         /* array length (1 for scalars) */
    const void *data;   /* scalar or first array element, in the map (strings: see below) */
    const char **strs;  /* string value / string array: n pointers (not NUL-terminated) */
    uint64_t *str_lens; /* their lengths */
} cllm_gguf_kv;

typedef struct cllm_gguf_tensor {
    char *name;
    int type; /* CLLM_GGML_* */
    int n_dims;
    int64_t ne[4];
    uint64_t n_elems, nbytes;
    const void *data; /* in the map of file `file` */
    int file;         /* index into cllm_gguf.paths */
} cllm_gguf_tensor;

typedef struct cllm_gguf {
    char **paths; /* [n_files] */
    void **maps;
    size_t *map_sizes;
    int n_files;
    uint32_t version;
    cllm_gguf_kv *kv; /* of the first file */
    size_t n_kv;
    cllm_gguf_tensor *tensors; /* of every file, in file order */
    size_t n_tensors;
} cllm_gguf;

/* True when path names a .gguf file (by suffix). */
bool cllm_gguf_is_path(const char *path);

/* Opens path and, when it is the first of a split set (split.count > 1), its siblings
 * (path with -00001-of- replaced by each number). Errors name the file and the bad field. */
cllm_status cllm_gguf_open(const char *path, cllm_gguf **out, cllm_error *err);
void cllm_gguf_close(cllm_gguf *g);

const cllm_gguf_kv *cllm_gguf_kv_find(const cllm_gguf *g, const char *key);
const cllm_gguf_tensor *cllm_gguf_tensor_find(const cllm_gguf *g, const char *name);

/* Scalar getters: false when the key is absent or not a number / string of that kind (integers
 * of any width convert to int64 when in range; F32/F64 to double). */
bool cllm_gguf_get_int(const cllm_gguf *g, const char *key, int64_t *v);
bool cllm_gguf_get_f64(const cllm_gguf *g, const char *key, double *v);
bool cllm_gguf_get_bool(const cllm_gguf *g, const char *key, bool *v);
/* A malloc'd NUL-terminated copy of a string value, NULL when absent or not a string. */
char *cllm_gguf_get_str(const cllm_gguf *g, const char *key);
/* Element i of an integer array as int64 (false: not an integer array or i out of range). */
bool cllm_gguf_arr_int(const cllm_gguf_kv *kv, uint64_t i, int64_t *v);

/* Block geometry of a tensor type: weights per block and bytes per block (0 when unknown). */
int cllm_ggml_block(int type, int *bytes);
const char *cllm_ggml_type_name(int type);

#endif
