/* safetensors writer; see st_write.h. */
#include "model/st_write.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

uint64_t cllm_st_entry_bytes(const cllm_st_entry *e) {
    uint64_t n = 1;
    for (int d = 0; d < e->n_dims; d++) n *= (uint64_t)e->shape[d];
    return n * cllm_dtype_size(e->dtype);
}

int cllm_st_layout(cllm_st_entry *v, size_t n, uint64_t shard_bytes) {
    int shard = 0;
    uint64_t cur = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i; /* [i, j] travel together */
        uint64_t need = v[i].nbytes;
        while (v[j].with_next && j + 1 < n) need += v[++j].nbytes;
        if (shard_bytes && cur > 0 && cur + need > shard_bytes) {
            shard++;
            cur = 0;
        }
        cur += need;
        for (; i <= j; i++) v[i].shard = shard;
    }
    return shard + 1;
}

void cllm_st_shard_name(int s, int n_shards, bool qwen_names, char *buf, size_t cap) {
    if (n_shards == 1)
        snprintf(buf, cap, "model.safetensors");
    else if (qwen_names)
        snprintf(buf, cap, "model.safetensors-%05d-of-%05d.safetensors", s + 1, n_shards);
    else
        snprintf(buf, cap, "model-%05d-of-%05d.safetensors", s + 1, n_shards);
}

cllm_status cllm_st_write_header(FILE *f, const cllm_st_entry *v, size_t n, int shard,
                                 const char *const *meta, const char *path, cllm_error *err) {
    json_t *hdr = json_object(), *md = json_object();
    json_object_set_new(md, "format", json_string("pt"));
    for (size_t i = 0; meta && meta[i] && meta[i + 1]; i += 2)
        json_object_set_new(md, meta[i], json_string(meta[i + 1]));
    json_object_set_new(hdr, "__metadata__", md);
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].shard != shard) continue;
        json_t *e = json_object(), *sh = json_array(), *of = json_array();
        json_object_set_new(e, "dtype", json_string(cllm_dtype_name(v[i].dtype)));
        for (int d = 0; d < v[i].n_dims; d++)
            json_array_append_new(sh, json_integer(v[i].shape[d]));
        json_object_set_new(e, "shape", sh);
        json_array_append_new(of, json_integer((json_int_t)off));
        json_array_append_new(of, json_integer((json_int_t)(off + v[i].nbytes)));
        json_object_set_new(e, "data_offsets", of);
        json_object_set_new(hdr, v[i].name, e);
        off += v[i].nbytes;
    }
    char *js = json_dumps(hdr, JSON_COMPACT);
    json_decref(hdr);
    if (!js) return cllm_err_set(err, CLLM_ENOMEM, "%s: out of memory for the header", path);
    size_t jl = strlen(js), pad = (8 - jl % 8) % 8;
    uint64_t hl = jl + pad;
    unsigned char l8[8];
    for (int b = 0; b < 8; b++) l8[b] = (unsigned char)(hl >> (8 * b));
    int ok = fwrite(l8, 1, 8, f) == 8 && fwrite(js, 1, jl, f) == jl &&
             fwrite("        ", 1, pad, f) == pad;
    free(js);
    return ok ? CLLM_OK : cllm_err_set(err, CLLM_EIO, "%s: write failed (disk full?)", path);
}

cllm_status cllm_st_write_index(const char *dir, const cllm_st_entry *v, size_t n, int n_shards,
                                bool qwen_names, cllm_error *err) {
    if (n_shards <= 1) return CLLM_OK;
    json_t *idx = json_object(), *wm = json_object(), *md = json_object();
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        char name[96];
        cllm_st_shard_name(v[i].shard, n_shards, qwen_names, name, sizeof(name));
        json_object_set_new(wm, v[i].name, json_string(name));
        total += v[i].nbytes;
    }
    json_object_set_new(md, "total_size", json_integer((json_int_t)total));
    json_object_set_new(idx, "metadata", md);
    json_object_set_new(idx, "weight_map", wm);
    char path[4200];
    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
    int rc = json_dump_file(idx, path, JSON_INDENT(2));
    json_decref(idx);
    return rc ? cllm_err_set(err, CLLM_EIO, "%s: cannot write", path) : CLLM_OK;
}
