/* GGUF parsing with every read bounds-checked; see gguf.h. */
#include "model/gguf.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAX_DIMS   4
#define GGUF_MAX_SPLITS 1024
#define GGUF_MAX_NAME   (64u * 1024)

/* A cursor over one mapped file; the first failure sticks (later reads return zeros). */
typedef struct rd {
    const unsigned char *p;
    size_t size, off;
    const char *path;
    cllm_error *err;
    cllm_status st;
} rd;

static bool rd_take(rd *r, size_t n, const void **at, const char *what) {
    if (r->st != CLLM_OK) return false;
    if (n > r->size - r->off) {
        r->st = cllm_err_set(r->err, CLLM_EFORMAT,
                             "%s: truncated at byte %zu reading %s (%zu bytes, file is %zu)",
                             r->path, r->off, what, n, r->size);
        return false;
    }
    *at = r->p + r->off;
    r->off += n;
    return true;
}

static uint64_t rd_u(rd *r, size_t n, const char *what) {
    const void *at;
    uint64_t v = 0;
    if (rd_take(r, n, &at, what)) memcpy(&v, at, n); /* little-endian hosts only (x86, arm64) */
    return v;
}

/* A gguf string: u64 length then bytes. */
static bool rd_str(rd *r, const char **s, uint64_t *len, const char *what) {
    uint64_t n = rd_u(r, 8, what);
    const void *at;
    if (r->st != CLLM_OK || !rd_take(r, n, &at, what)) return false;
    *s = at;
    *len = n;
    return true;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static size_t scalar_size(int t) {
    static const size_t sz[CLLM_GGUF_N_TYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t >= 0 && t < CLLM_GGUF_N_TYPES ? sz[t] : 0;
}

static cllm_status read_kv(rd *r, cllm_gguf_kv *kv) {
    const char *k;
    uint64_t kl;
    if (!rd_str(r, &k, &kl, "a metadata key")) return r->st;
    if (!(kv->key = dup_n(k, kl))) return cllm_err_set(r->err, CLLM_ENOMEM, "out of memory");
    kv->type = (int)rd_u(r, 4, "a value type");
    kv->arr_type = kv->type;
    kv->n = 1;
    if (kv->type == CLLM_GGUF_ARRAY) {
        kv->arr_type = (int)rd_u(r, 4, "an array type");
        kv->n = rd_u(r, 8, "an array length");
    }
    if (r->st != CLLM_OK) return r->st;
    if (kv->arr_type == CLLM_GGUF_ARRAY || kv->arr_type < 0 || kv->arr_type >= CLLM_GGUF_N_TYPES)
        return cllm_err_set(r->err, CLLM_EFORMAT, "%s: key %s: value type %d is not supported",
                            r->path, kv->key, kv->arr_type);
    if (kv->arr_type != CLLM_GGUF_STRING) {
        size_t es = scalar_size(kv->arr_type);
        if (kv->n > (r->size - r->off) / es)
            return cllm_err_set(r->err, CLLM_EFORMAT,
                                "%s: key %s: %llu elements run past the end of the file", r->path,
                                kv->key, (unsigned long long)kv->n);
        rd_take(r, (size_t)kv->n * es, &kv->data, kv->key);
        return r->st;
    }
    if (kv->n > (r->size - r->off) / 8) /* every string takes at least its 8-byte length */
        return cllm_err_set(r->err, CLLM_EFORMAT,
                            "%s: key %s: %llu strings run past the end of the file", r->path,
                            kv->key, (unsigned long long)kv->n);
    kv->strs = malloc((size_t)kv->n * sizeof(*kv->strs) + 1);
    kv->str_lens = malloc((size_t)kv->n * sizeof(*kv->str_lens) + 1);
    if (!kv->strs || !kv->str_lens) return cllm_err_set(r->err, CLLM_ENOMEM, "out of memory");
    kv->data = r->p + r->off;
    for (uint64_t i = 0; i < kv->n && r->st == CLLM_OK; i++)
        rd_str(r, &kv->strs[i], &kv->str_lens[i], kv->key);
    return r->st;
}

int cllm_ggml_block(int type, int *bytes) {
    static const struct {
        int type, block, bytes;
    } t[] = {{CLLM_GGML_F32, 1, 4},      {CLLM_GGML_F16, 1, 2},      {CLLM_GGML_BF16, 1, 2},
             {CLLM_GGML_Q4_0, 32, 18},   {CLLM_GGML_Q4_1, 32, 20},   {CLLM_GGML_Q5_0, 32, 22},
             {CLLM_GGML_Q5_1, 32, 24},   {CLLM_GGML_Q8_0, 32, 34},   {CLLM_GGML_Q2_K, 256, 84},
             {CLLM_GGML_Q3_K, 256, 110}, {CLLM_GGML_Q4_K, 256, 144}, {CLLM_GGML_Q5_K, 256, 176},
             {CLLM_GGML_Q6_K, 256, 210}, {CLLM_GGML_IQ4_NL, 32, 18}, {CLLM_GGML_IQ4_XS, 256, 136}};
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
        if (t[i].type == type) {
            if (bytes) *bytes = t[i].bytes;
            return t[i].block;
        }
    if (bytes) *bytes = 0;
    return 0;
}

const char *cllm_ggml_type_name(int type) {
    switch (type) {
    case CLLM_GGML_F32:
        return "F32";
    case CLLM_GGML_F16:
        return "F16";
    case CLLM_GGML_BF16:
        return "BF16";
    case CLLM_GGML_Q4_0:
        return "Q4_0";
    case CLLM_GGML_Q4_1:
        return "Q4_1";
    case CLLM_GGML_Q5_0:
        return "Q5_0";
    case CLLM_GGML_Q5_1:
        return "Q5_1";
    case CLLM_GGML_Q8_0:
        return "Q8_0";
    case CLLM_GGML_Q2_K:
        return "Q2_K";
    case CLLM_GGML_Q3_K:
        return "Q3_K";
    case CLLM_GGML_Q4_K:
        return "Q4_K";
    case CLLM_GGML_Q5_K:
        return "Q5_K";
    case CLLM_GGML_Q6_K:
        return "Q6_K";
    case CLLM_GGML_IQ4_NL:
        return "IQ4_NL";
    case CLLM_GGML_IQ4_XS:
        return "IQ4_XS";
    default:
        return "unknown";
    }
}

static cllm_status read_tensor(rd *r, cllm_gguf_tensor *t) {
    const char *s;
    uint64_t sl;
    if (!rd_str(r, &s, &sl, "a tensor name")) return r->st;
    if (sl > GGUF_MAX_NAME)
        return cllm_err_set(r->err, CLLM_EFORMAT, "%s: a tensor name of %llu bytes", r->path,
                            (unsigned long long)sl);
    if (!(t->name = dup_n(s, sl))) return cllm_err_set(r->err, CLLM_ENOMEM, "out of memory");
    uint32_t nd = (uint32_t)rd_u(r, 4, t->name);
    if (r->st == CLLM_OK && (nd < 1 || nd > GGUF_MAX_DIMS))
        return cllm_err_set(r->err, CLLM_EFORMAT, "%s: tensor %s: %u dimensions (1 to %d allowed)",
                            r->path, t->name, nd, GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    t->n_elems = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < nd && r->st == CLLM_OK; d++) {
        int64_t v = (int64_t)rd_u(r, 8, t->name);
        if (r->st == CLLM_OK && (v <= 0 || (uint64_t)v > (UINT64_C(1) << 40) / t->n_elems))
            return cllm_err_set(r->err, CLLM_EFORMAT, "%s: tensor %s: dimension %u is %lld",
                                r->path, t->name, d, (long long)v);
        t->ne[d] = v;
        t->n_elems *= (uint64_t)v;
    }
    t->type = (int)rd_u(r, 4, t->name);
    uint64_t off = rd_u(r, 8, t->name);
    if (r->st != CLLM_OK) return r->st;
    int bytes, blk = cllm_ggml_block(t->type, &bytes);
    if (!blk)
        return cllm_err_set(r->err, CLLM_EUNSUPPORTED,
                            "%s: tensor %s: ggml type %d is not one cllm reads (F32, F16, BF16, "
                            "Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ4_NL, IQ4_XS)",
                            r->path, t->name, t->type);
    if (t->ne[0] % blk)
        return cllm_err_set(r->err, CLLM_EFORMAT,
                            "%s: tensor %s: row length %lld is not a multiple of %s's block of %d",
                            r->path, t->name, (long long)t->ne[0], cllm_ggml_type_name(t->type),
                            blk);
    t->nbytes = t->n_elems / (uint64_t)blk * (uint64_t)bytes;
    t->data = (const void *)(uintptr_t)off; /* an offset until the data region is known */
    return CLLM_OK;
}

/* Maps one file and parses it into g (tensors appended, tagged with file index fi). */
static cllm_status open_one(cllm_gguf *g, const char *path, int fi, cllm_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return cllm_err_set(err, CLLM_EIO, "%s: cannot open", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 24) {
        close(fd);
        return cllm_err_set(err, CLLM_EFORMAT, "%s: not a GGUF file (too small)", path);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return cllm_err_set(err, CLLM_EIO, "%s: mmap failed", path);
    g->maps[fi] = map;
    g->map_sizes[fi] = (size_t)sb.st_size;
    rd r = {map, (size_t)sb.st_size, 0, path, err, CLLM_OK};
    if (memcmp(map, "GGUF", 4))
        return cllm_err_set(err, CLLM_EFORMAT, "%s: not a GGUF file (magic)", path);
    r.off = 4;
    uint32_t ver = (uint32_t)rd_u(&r, 4, "the version");
    if (ver < 2 || ver > 3)
        return cllm_err_set(err, CLLM_EUNSUPPORTED, "%s: GGUF version %u (2 and 3 are read)", path,
                            ver);
    if (fi == 0) g->version = ver;
    uint64_t nt = rd_u(&r, 8, "the tensor count"), nkv = rd_u(&r, 8, "the key count");
    if (nt > r.size / 24 || nkv > r.size / 12) /* the least a tensor info / key can take */
        return cllm_err_set(err, CLLM_EFORMAT, "%s: %llu tensors / %llu keys cannot fit", path,
                            (unsigned long long)nt, (unsigned long long)nkv);
    cllm_gguf_kv *kv = calloc((size_t)nkv + 1, sizeof(*kv));
    if (!kv) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    cllm_status st = CLLM_OK;
    uint64_t align = 32;
    size_t i = 0;
    for (; i < nkv && st == CLLM_OK; i++) {
        st = read_kv(&r, &kv[i]);
        if (st == CLLM_OK && !strcmp(kv[i].key, "general.alignment")) {
            if (kv[i].type != CLLM_GGUF_U32 || !(align = *(const uint32_t *)kv[i].data) ||
                (align & (align - 1)))
                st = cllm_err_set(err, CLLM_EFORMAT,
                                  "%s: general.alignment must be a u32 power of two", path);
        }
    }
    if (fi == 0) {
        g->kv = kv;
        g->n_kv = i;
    } else { /* later splits' keys only describe the split */
        for (size_t j = 0; j < i; j++) free(kv[j].key), free(kv[j].strs), free(kv[j].str_lens);
        free(kv);
    }
    if (st != CLLM_OK) return st;
    cllm_gguf_tensor *nt_arr = realloc(g->tensors, (g->n_tensors + nt + 1) * sizeof(*nt_arr));
    if (!nt_arr) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    g->tensors = nt_arr;
    size_t first = g->n_tensors;
    for (uint64_t k = 0; k < nt && st == CLLM_OK; k++) {
        cllm_gguf_tensor *t = &g->tensors[g->n_tensors];
        memset(t, 0, sizeof(*t));
        g->n_tensors++;
        t->file = fi;
        st = read_tensor(&r, t);
    }
    if (st != CLLM_OK) return st;
    size_t data0 = (r.off + align - 1) / align * align;
    if (data0 > r.size && nt)
        return cllm_err_set(err, CLLM_EFORMAT, "%s: no data region after the header", path);
    for (size_t k = first; k < g->n_tensors; k++) {
        cllm_gguf_tensor *t = &g->tensors[k];
        uint64_t off = (uint64_t)(uintptr_t)t->data;
        if (off % align || off > r.size - data0 || t->nbytes > r.size - data0 - off)
            return cllm_err_set(err, CLLM_EFORMAT,
                                "%s: tensor %s: data [%llu, +%llu) is misaligned or past the end "
                                "of the file",
                                path, t->name, (unsigned long long)off,
                                (unsigned long long)t->nbytes);
        t->data = (const unsigned char *)map + data0 + off;
        for (size_t j = 0; j < k; j++)
            if (!strcmp(g->tensors[j].name, t->name))
                return cllm_err_set(err, CLLM_EFORMAT, "%s: tensor %s appears twice", path,
                                    t->name);
    }
    return CLLM_OK;
}

bool cllm_gguf_is_path(const char *path) {
    size_t n = strlen(path);
    return n > 5 && !strcmp(path + n - 5, ".gguf");
}

/* "dir/name-00001-of-00003.gguf" -> prefix length up to "-00001", count 3; 0 when not split. */
static int split_name(const char *path, size_t *pre) {
    size_t n = strlen(path);
    const char *tail = "-00001-of-"; /* + 5 digits + ".gguf" */
    if (n < 5 + 15) return 0;
    const char *p = path + n - 5 - 15;
    if (strncmp(p, tail, 10)) return 0;
    int count = 0;
    for (int i = 10; i < 15; i++) {
        if (p[i] < '0' || p[i] > '9') return 0;
        count = count * 10 + (p[i] - '0');
    }
    *pre = (size_t)(p - path);
    return count;
}

cllm_status cllm_gguf_open(const char *path, cllm_gguf **out, cllm_error *err) {
    *out = NULL;
    cllm_gguf *g = calloc(1, sizeof(*g));
    size_t pre = 0;
    int n = split_name(path, &pre);
    if (n < 1 || n > GGUF_MAX_SPLITS) n = 1;
    if (!g || !(g->paths = calloc((size_t)n, sizeof(char *))) ||
        !(g->maps = calloc((size_t)n, sizeof(void *))) ||
        !(g->map_sizes = calloc((size_t)n, sizeof(size_t)))) {
        cllm_gguf_close(g);
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    g->n_files = n;
    cllm_status st = CLLM_OK;
    for (int i = 0; i < n && st == CLLM_OK; i++) {
        size_t len = strlen(path) + 1;
        if (!(g->paths[i] = malloc(len))) {
            st = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
            break;
        }
        memcpy(g->paths[i], path, len);
        if (n > 1) snprintf(g->paths[i] + pre, len - pre, "-%05d-of-%05d.gguf", i + 1, n);
        st = open_one(g, g->paths[i], i, err);
    }
    int64_t count = 1;
    if (st == CLLM_OK && cllm_gguf_get_int(g, "split.count", &count) && count != n)
        st = cllm_err_set(err, CLLM_EFORMAT, "%s: split.count is %lld but the name says %d files",
                          path, (long long)count, n);
    if (st != CLLM_OK) {
        cllm_gguf_close(g);
        return st;
    }
    *out = g;
    return CLLM_OK;
}

void cllm_gguf_close(cllm_gguf *g) {
    if (!g) return;
    for (int i = 0; i < g->n_files; i++) {
        if (g->maps && g->maps[i]) munmap(g->maps[i], g->map_sizes[i]);
        if (g->paths) free(g->paths[i]);
    }
    for (size_t i = 0; i < g->n_kv; i++) {
        free(g->kv[i].key);
        free(g->kv[i].strs);
        free(g->kv[i].str_lens);
    }
    for (size_t i = 0; i < g->n_tensors; i++) free(g->tensors[i].name);
    free(g->kv);
    free(g->tensors);
    free(g->paths);
    free(g->maps);
    free(g->map_sizes);
    free(g);
}

const cllm_gguf_kv *cllm_gguf_kv_find(const cllm_gguf *g, const char *key) {
    for (size_t i = 0; i < g->n_kv; i++)
        if (g->kv[i].key && !strcmp(g->kv[i].key, key)) return &g->kv[i];
    return NULL;
}

const cllm_gguf_tensor *cllm_gguf_tensor_find(const cllm_gguf *g, const char *name) {
    for (size_t i = 0; i < g->n_tensors; i++)
        if (!strcmp(g->tensors[i].name, name)) return &g->tensors[i];
    return NULL;
}

static bool int_at(int t, const void *p, int64_t *v) {
    switch (t) {
    case CLLM_GGUF_U8:
        *v = *(const uint8_t *)p;
        return true;
    case CLLM_GGUF_I8:
        *v = *(const int8_t *)p;
        return true;
    case CLLM_GGUF_BOOL:
        *v = *(const uint8_t *)p != 0;
        return true;
    case CLLM_GGUF_U16: {
        uint16_t x;
        memcpy(&x, p, 2);
        *v = x;
        return true;
    }
    case CLLM_GGUF_I16: {
        int16_t x;
        memcpy(&x, p, 2);
        *v = x;
        return true;
    }
    case CLLM_GGUF_U32: {
        uint32_t x;
        memcpy(&x, p, 4);
        *v = x;
        return true;
    }
    case CLLM_GGUF_I32: {
        int32_t x;
        memcpy(&x, p, 4);
        *v = x;
        return true;
    }
    case CLLM_GGUF_U64: {
        uint64_t x;
        memcpy(&x, p, 8);
        if (x > INT64_MAX) return false;
        *v = (int64_t)x;
        return true;
    }
    case CLLM_GGUF_I64:
        memcpy(v, p, 8);
        return true;
    default:
        return false;
    }
}

bool cllm_gguf_get_int(const cllm_gguf *g, const char *key, int64_t *v) {
    const cllm_gguf_kv *kv = cllm_gguf_kv_find(g, key);
    return kv && kv->type != CLLM_GGUF_ARRAY && int_at(kv->type, kv->data, v);
}

bool cllm_gguf_get_f64(const cllm_gguf *g, const char *key, double *v) {
    const cllm_gguf_kv *kv = cllm_gguf_kv_find(g, key);
    if (!kv || kv->type == CLLM_GGUF_ARRAY) return false;
    if (kv->type == CLLM_GGUF_F32) {
        float f;
        memcpy(&f, kv->data, 4);
        *v = f;
        return true;
    }
    if (kv->type == CLLM_GGUF_F64) {
        memcpy(v, kv->data, 8);
        return true;
    }
    int64_t i;
    if (!int_at(kv->type, kv->data, &i)) return false;
    *v = (double)i;
    return true;
}

bool cllm_gguf_get_bool(const cllm_gguf *g, const char *key, bool *v) {
    int64_t i;
    if (!cllm_gguf_get_int(g, key, &i)) return false;
    *v = i != 0;
    return true;
}

char *cllm_gguf_get_str(const cllm_gguf *g, const char *key) {
    const cllm_gguf_kv *kv = cllm_gguf_kv_find(g, key);
    if (!kv || kv->type != CLLM_GGUF_STRING) return NULL;
    return dup_n(kv->strs[0], (size_t)kv->str_lens[0]);
}

bool cllm_gguf_arr_int(const cllm_gguf_kv *kv, uint64_t i, int64_t *v) {
    if (!kv || i >= kv->n || kv->arr_type == CLLM_GGUF_STRING) return false;
    size_t es = scalar_size(kv->arr_type);
    return int_at(kv->arr_type, (const char *)kv->data + i * es, v);
}
