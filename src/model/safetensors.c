/* safetensors parsing and mapping; see safetensors.h. */
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/half.h"

double cllm_tensor_elem(const cllm_tensor *t, uint64_t i) {
    const unsigned char *p = (const unsigned char *)t->data + i * cllm_dtype_size(t->dtype);
    uint16_t h;
    float f;
    double d;
    switch (t->dtype) {
    case CLLM_DT_F32:
        memcpy(&f, p, 4);
        return f;
    case CLLM_DT_F64:
        memcpy(&d, p, 8);
        return d;
    case CLLM_DT_BF16:
        memcpy(&h, p, 2);
        return cllm_bf16_to_f32(h);
    case CLLM_DT_F16:
        memcpy(&h, p, 2);
        return cllm_f16_to_f32(h);
    case CLLM_DT_F8_E4M3:
        return cllm_f8e4m3_to_f32(*p);
    case CLLM_DT_F8_E5M2:
        return NAN;
    case CLLM_DT_I64: {
        int64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    case CLLM_DT_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case CLLM_DT_I16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case CLLM_DT_I8:
        return (int8_t)*p;
    case CLLM_DT_U64: {
        uint64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    case CLLM_DT_U32: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    case CLLM_DT_U16:
        memcpy(&h, p, 2);
        return h;
    case CLLM_DT_U8:
    case CLLM_DT_BOOL:
        return *p;
    case CLLM_DT_COUNT:
        break;
    }
    return NAN;
}

void cllm_shape_str(const int64_t *shape, int n_dims, char *buf, size_t cap) {
    size_t o = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < n_dims && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static void free_tensors(cllm_st_file *f) {
    for (size_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->metadata_format);
    f->tensors = NULL;
    f->n_tensors = 0;
    f->metadata_format = NULL;
}

static int cmp_offset(const void *a, const void *b) {
    const cllm_tensor *x = *(const cllm_tensor *const *)a, *y = *(const cllm_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Fills one tensor from its JSON entry; returns an error naming it on any inconsistency. */
static cllm_status parse_entry(const char *label, const char *name, json_t *v, uint64_t data_size,
                               cllm_tensor *t, cllm_error *err) {
    if (!json_is_object(v))
        return cllm_err_set(err, CLLM_EFORMAT, "%s: tensor '%s': entry is not an object", label,
                            name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo))
        return cllm_err_set(err, CLLM_EFORMAT,
                            "%s: tensor '%s': needs string dtype, array shape, array data_offsets",
                            label, name);
    if (json_object_size(v) != 3)
        return cllm_err_set(err, CLLM_EFORMAT, "%s: tensor '%s': unexpected keys in entry", label,
                            name);
    if (cllm_dtype_parse(json_string_value(jd), &t->dtype) != 0)
        return cllm_err_set(err, CLLM_EFORMAT, "%s: tensor '%s': unknown dtype '%s'", label, name,
                            json_string_value(jd));
    size_t nd = json_array_size(js);
    if (nd > CLLM_ST_MAX_DIMS)
        return cllm_err_set(err, CLLM_EUNSUPPORTED, "%s: tensor '%s': %zu dims (max %d)", label,
                            name, nd, CLLM_ST_MAX_DIMS);
    t->n_dims = (int)nd;
    uint64_t n = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return cllm_err_set(err, CLLM_EFORMAT,
                                "%s: tensor '%s': shape[%zu] is not a non-negative integer", label,
                                name, i);
        t->shape[i] = (int64_t)json_integer_value(d);
        if (__builtin_mul_overflow(n, (uint64_t)t->shape[i], &n))
            return cllm_err_set(err, CLLM_EFORMAT, "%s: tensor '%s': shape overflows", label, name);
    }
    t->n_elems = n;
    uint64_t bytes;
    if (__builtin_mul_overflow(n, (uint64_t)cllm_dtype_size(t->dtype), &bytes))
        return cllm_err_set(err, CLLM_EFORMAT, "%s: tensor '%s': byte size overflows", label, name);
    if (json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return cllm_err_set(err, CLLM_EFORMAT, "%s: tensor '%s': data_offsets must be [begin, end]",
                            label, name);
    json_int_t b = json_integer_value(json_array_get(jo, 0)),
               e = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || e < b)
        return cllm_err_set(err, CLLM_EFORMAT, "%s: tensor '%s': bad data_offsets [%lld, %lld]",
                            label, name, (long long)b, (long long)e);
    if ((uint64_t)e > data_size)
        return cllm_err_set(
            err, CLLM_EFORMAT,
            "%s: tensor '%s': data_offsets end %lld beyond data size %llu (truncated file?)", label,
            name, (long long)e, (unsigned long long)data_size);
    if ((uint64_t)(e - b) != bytes) {
        char sh[160];
        cllm_shape_str(t->shape, t->n_dims, sh, sizeof(sh));
        return cllm_err_set(err, CLLM_EFORMAT,
                            "%s: tensor '%s': %lld bytes in file but shape %s x %s needs %llu",
                            label, name, (long long)(e - b), sh, cllm_dtype_name(t->dtype),
                            (unsigned long long)bytes);
    }
    t->offset = (uint64_t)b;
    t->nbytes = bytes;
    return CLLM_OK;
}

cllm_status cllm_st_parse_header(const char *json, size_t len, uint64_t data_size,
                                 const char *label, cllm_st_file *out, cllm_error *err) {
    if (len > CLLM_ST_MAX_HEADER)
        return cllm_err_set(err, CLLM_EFORMAT, "%s: header of %zu bytes exceeds the %u-byte cap",
                            label, len, CLLM_ST_MAX_HEADER);
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return cllm_err_set(err, CLLM_EFORMAT, "%s: header is not valid JSON (%s at byte %d)",
                            label, je.text, je.position);
    cllm_status st = CLLM_OK;
    if (!json_is_object(root)) {
        st = cllm_err_set(err, CLLM_EFORMAT, "%s: header is not a JSON object", label);
        goto done;
    }
    size_t cap = json_object_size(root);
    out->tensors = calloc(cap ? cap : 1, sizeof(cllm_tensor));
    if (!out->tensors) {
        st = cllm_err_set(err, CLLM_ENOMEM, "%s: out of memory for %zu tensors", label, cap);
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(val)) {
                st = cllm_err_set(err, CLLM_EFORMAT, "%s: __metadata__ is not an object", label);
                goto done;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    st = cllm_err_set(err, CLLM_EFORMAT, "%s: __metadata__.%s is not a string",
                                      label, mk);
                    goto done;
                }
            }
            json_t *fmt = json_object_get(val, "format");
            if (fmt) out->metadata_format = strdup(json_string_value(fmt));
            continue;
        }
        cllm_tensor *t = &out->tensors[out->n_tensors];
        st = parse_entry(label, key, val, data_size, t, err);
        if (st != CLLM_OK) goto done;
        t->name = strdup(key);
        if (!t->name) {
            st = cllm_err_set(err, CLLM_ENOMEM, "%s: out of memory", label);
            goto done;
        }
        out->n_tensors++;
    }
    /* Overlap / coverage check on offsets sorted by begin. */
    cllm_tensor **order = malloc((out->n_tensors ? out->n_tensors : 1) * sizeof(*order));
    if (!order) {
        st = cllm_err_set(err, CLLM_ENOMEM, "%s: out of memory", label);
        goto done;
    }
    for (size_t i = 0; i < out->n_tensors; i++) order[i] = &out->tensors[i];
    qsort(order, out->n_tensors, sizeof(*order), cmp_offset);
    uint64_t pos = 0;
    for (size_t i = 0; i < out->n_tensors && st == CLLM_OK; i++) {
        const cllm_tensor *t = order[i];
        if (t->offset < pos)
            st = cllm_err_set(err, CLLM_EFORMAT, "%s: tensor '%s' overlaps tensor '%s'", label,
                              t->name, order[i - 1]->name);
        else if (t->offset > pos)
            st = cllm_err_set(err, CLLM_EFORMAT,
                              "%s: tensor '%s' starts at %llu leaving a gap after byte %llu", label,
                              t->name, (unsigned long long)t->offset, (unsigned long long)pos);
        pos = t->offset + t->nbytes;
    }
    if (st == CLLM_OK && pos != data_size)
        st = cllm_err_set(err, CLLM_EFORMAT,
                          "%s: tensors cover %llu bytes but the data region has %llu", label,
                          (unsigned long long)pos, (unsigned long long)data_size);
    free(order);
done:
    json_decref(root);
    if (st != CLLM_OK) free_tensors(out);
    return st;
}

cllm_status cllm_st_open(const char *path, cllm_st_file **out, cllm_error *err) {
    *out = NULL;
    cllm_st_file *f = calloc(1, sizeof(*f));
    if (!f) return cllm_err_set(err, CLLM_ENOMEM, "%s: out of memory", path);
    f->path = strdup(path);
    cllm_status st = CLLM_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        st = cllm_err_set(err, errno == ENOENT ? CLLM_ENOTFOUND : CLLM_EIO, "%s: cannot open: %s",
                          path, strerror(errno));
        goto fail;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = cllm_err_set(err, CLLM_EIO, "%s: not a regular file", path);
        goto fail;
    }
    if (sb.st_size < 8) {
        st = cllm_err_set(err, CLLM_EFORMAT, "%s: file of %lld bytes is too short for a header",
                          path, (long long)sb.st_size);
        goto fail;
    }
    f->map_size = (size_t)sb.st_size;
    f->map = mmap(NULL, f->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        st = cllm_err_set(err, CLLM_EIO, "%s: mmap failed: %s", path, strerror(errno));
        goto fail;
    }
    const unsigned char *p = f->map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | p[i];
    if (n > f->map_size - 8) {
        st = cllm_err_set(
            err, CLLM_EFORMAT,
            "%s: header length %llu exceeds the file size %zu (truncated or not safetensors)", path,
            (unsigned long long)n, f->map_size);
        goto fail;
    }
    f->header_len = n;
    f->data_size = f->map_size - 8 - n;
    st = cllm_st_parse_header((const char *)p + 8, n, f->data_size, path, f, err);
    if (st != CLLM_OK) goto fail;
    for (size_t i = 0; i < f->n_tensors; i++) {
        f->tensors[i].data = p + 8 + n + f->tensors[i].offset;
        f->tensors[i].file = f->path;
    }
    close(fd);
    *out = f;
    return CLLM_OK;
fail:
    if (fd >= 0) close(fd);
    cllm_st_close(f);
    return st;
}

void cllm_st_close(cllm_st_file *f) {
    if (!f) return;
    free_tensors(f);
    if (f->map) munmap(f->map, f->map_size);
    free(f->path);
    free(f);
}

const cllm_tensor *cllm_st_find(const cllm_st_file *f, const char *name) {
    for (size_t i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}
