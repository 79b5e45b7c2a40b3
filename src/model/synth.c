/* Random-weight checkpoint writer; see synth.h.
 *
 * Initialisation (keeps activations O(1) through any depth, so forward-pass tests exercise real
 * numerics instead of overflow or all-zero paths):
 *  - embeddings: std 1;  projections: std 1/sqrt(fan_in);
 *  - projections that write back into the residual stream (o_proj, out_proj, down_proj): std
 *    1/sqrt(fan_in) / sqrt(2 * n_layers), so the residual variance stays below ~2 after all layers;
 *  - (1 + w) norms: w uniform in +-0.1 (so a loader that forgets the +1 is caught);
 *    plain-w norms: 1 + uniform +-0.1;
 *  - conv1d taps std 1/sqrt(kernel); A_log = log(U(1, 16)); dt_bias = softplus^-1(dt) with
 *    log dt uniform in [log 1e-3, log 1e-1] (the HF Mamba-2 / GDN init);
 *  - biases 0.
 * Values are uniform with the stated std (bounded, which avoids rare huge outliers). */
#include "model/synth.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file.h"
#include "base/half.h"
#include "base/log.h"
#include "base/strmap.h"
#include "model/config.h"

#define CHUNK 65536

typedef struct spec_list {
    cllm_tensor_spec *v;
    size_t n, cap;
    int oom;
} spec_list;

static void collect(void *ctx, const cllm_tensor_spec *s) {
    spec_list *l = ctx;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 256;
        cllm_tensor_spec *nv = realloc(l->v, nc * sizeof(*nv));
        if (!nv) {
            l->oom = 1;
            return;
        }
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = *s;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 random bits. */
static inline float unif(uint64_t *s) {
    return (float)(splitmix(s) >> 40) * (1.0f / 16777216.0f);
}

static void fill(const cllm_tensor_spec *s, const cllm_config *cfg, uint64_t *rng, float *buf,
                 size_t n) {
    const float sq3 = 1.7320508f;
    float std;
    switch (s->init) {
    case CLLM_INIT_ZERO:
        memset(buf, 0, n * sizeof(float));
        return;
    case CLLM_INIT_EMBED:
        std = 1.0f;
        break;
    case CLLM_INIT_LINEAR:
        std = 1.0f / sqrtf((float)s->fan_in);
        break;
    case CLLM_INIT_OUT_PROJ:
        std = 1.0f / sqrtf((float)s->fan_in) / sqrtf(2.0f * (float)cfg->n_layers);
        break;
    case CLLM_INIT_CONV:
        std = 1.0f / sqrtf((float)s->fan_in);
        break;
    case CLLM_INIT_NORM_1P:
        for (size_t i = 0; i < n; i++) buf[i] = 0.2f * unif(rng) - 0.1f;
        return;
    case CLLM_INIT_NORM:
        for (size_t i = 0; i < n; i++) buf[i] = 0.9f + 0.2f * unif(rng);
        return;
    case CLLM_INIT_A_LOG:
        for (size_t i = 0; i < n; i++) buf[i] = logf(1.0f + 15.0f * unif(rng));
        return;
    case CLLM_INIT_DT_BIAS:
        for (size_t i = 0; i < n; i++) {
            float dt = expf(logf(1e-3f) + (logf(1e-1f) - logf(1e-3f)) * unif(rng));
            buf[i] = dt + logf(-expm1f(-dt));
        }
        return;
    default:
        std = 0.02f;
    }
    float a = std * sq3;
    for (size_t i = 0; i < n; i++) buf[i] = a * (2.0f * unif(rng) - 1.0f);
}

/* The RNG stream of a tensor, keyed by (seed, name). A per-expert projection draws from the
 * stream of the fused tensor it is a slice of (gate_up_proj [E][2I][H]: gate rows first, then up;
 * down_proj [E][H][I]), skipped ahead to its offset, so --experts fused and per-expert with one
 * seed hold the same values (splitmix64 is a counter: skipping n draws adds n to the state). */
static uint64_t tensor_rng(uint64_t seed, const cllm_tensor_spec *s) {
    char fused[160];
    const char *name = s->name, *ex = strstr(name, ".experts.");
    uint64_t skip = 0;
    if (ex && s->n_dims == 2) {
        const char *p = ex + 9;
        char *end;
        unsigned long e = strtoul(p, &end, 10);
        uint64_t rows = (uint64_t)s->shape[0], cols = (uint64_t)s->shape[1];
        int pre = (int)(ex + 9 - name);
        if (end != p && *end == '.') {
            if (!strcmp(end, ".gate_proj.weight") || !strcmp(end, ".up_proj.weight")) {
                snprintf(fused, sizeof(fused), "%.*sgate_up_proj", pre, name);
                skip = e * 2 * rows * cols + (end[1] == 'u' ? rows * cols : 0);
                name = fused;
            } else if (!strcmp(end, ".down_proj.weight")) {
                snprintf(fused, sizeof(fused), "%.*sdown_proj", pre, name);
                skip = e * rows * cols;
                name = fused;
            }
        }
    }
    return (seed * 0x9e3779b97f4a7c15ull ^ cllm_hash_bytes(name, strlen(name))) +
           skip * 0x9e3779b97f4a7c15ull;
}

typedef struct writer {
    FILE *f;
    char *path;
} writer;

static cllm_dtype tensor_dtype(const cllm_tensor_spec *s, cllm_dtype bulk) {
    return s->force_f32 ? CLLM_DT_F32 : bulk;
}

/* Builds the JSON header for specs [a, b), padded with spaces to a multiple of 8. */
static char *build_header(const cllm_tensor_spec *v, size_t a, size_t b, cllm_dtype bulk,
                          size_t *len) {
    size_t cap = 256 + (b - a) * 256, o = 0;
    char *h = malloc(cap);
    if (!h) return NULL;
    o += (size_t)snprintf(h + o, cap - o, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (size_t i = a; i < b; i++) {
        cllm_dtype dt = tensor_dtype(&v[i], bulk);
        uint64_t bytes = cllm_tensor_spec_elems(&v[i]) * cllm_dtype_size(dt);
        o += (size_t)snprintf(h + o, cap - o, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", v[i].name,
                              cllm_dtype_name(dt));
        for (int d = 0; d < v[i].n_dims; d++)
            o += (size_t)snprintf(h + o, cap - o, "%s%lld", d ? "," : "", (long long)v[i].shape[d]);
        o += (size_t)snprintf(h + o, cap - o, "],\"data_offsets\":[%llu,%llu]}",
                              (unsigned long long)off, (unsigned long long)(off + bytes));
        off += bytes;
    }
    o += (size_t)snprintf(h + o, cap - o, "}");
    while (o % 8) h[o++] = ' ';
    *len = o;
    return h;
}

static cllm_status write_shard(const cllm_synth_opts *o, const cllm_config *cfg,
                               const cllm_tensor_spec *v, size_t a, size_t b, const char *path,
                               uint64_t *done_bytes, uint64_t total_bytes, cllm_error *err) {
    size_t hlen;
    char *hdr = build_header(v, a, b, o->dtype, &hlen);
    if (!hdr) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    char tmp[4400];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        free(hdr);
        return cllm_err_set(err, CLLM_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    }
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hdr, 1, hlen, f) == hlen;
    free(hdr);
    float *fb = malloc(CHUNK * sizeof(float));
    uint16_t *hb = malloc(CHUNK * sizeof(uint16_t));
    if (!fb || !hb) ok = 0;
    for (size_t i = a; ok && i < b; i++) {
        const cllm_tensor_spec *s = &v[i];
        uint64_t rng = tensor_rng(o->seed, s);
        cllm_dtype dt = tensor_dtype(s, o->dtype);
        uint64_t n = cllm_tensor_spec_elems(s);
        for (uint64_t k = 0; ok && k < n; k += CHUNK) {
            size_t m = (size_t)(n - k < CHUNK ? n - k : CHUNK);
            fill(s, cfg, &rng, fb, m);
            if (dt == CLLM_DT_F32) {
                ok = fwrite(fb, 4, m, f) == m;
            } else {
                if (dt == CLLM_DT_BF16)
                    cllm_f32_to_bf16_row(fb, hb, m);
                else
                    cllm_f32_to_f16_row(fb, hb, m);
                ok = fwrite(hb, 2, m, f) == m;
            }
            *done_bytes += m * cllm_dtype_size(dt);
        }
        if (o->progress)
            fprintf(stderr, "\rsynth: %5.1f%% %-70.70s",
                    100.0 * (double)*done_bytes / (double)total_bytes, s->name);
    }
    free(fb);
    free(hb);
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        remove(tmp);
        return cllm_err_set(err, CLLM_EIO, "%s: write failed (disk full?)", tmp);
    }
    if (rename(tmp, path) != 0)
        return cllm_err_set(err, CLLM_EIO, "%s: rename failed: %s", path, strerror(errno));
    return CLLM_OK;
}

static cllm_status copy_file(const char *src, const char *dst, bool optional, cllm_error *err) {
    FILE *in = fopen(src, "rb");
    if (!in) return optional ? CLLM_OK : cllm_err_set(err, CLLM_ENOTFOUND, "%s: cannot open", src);
    FILE *out = fopen(dst, "wb");
    if (!out) {
        fclose(in);
        return cllm_err_set(err, CLLM_EIO, "%s: cannot create", dst);
    }
    char buf[65536];
    size_t n;
    int ok = 1;
    while (ok && (n = fread(buf, 1, sizeof(buf), in)) > 0) ok = fwrite(buf, 1, n, out) == n;
    fclose(in);
    if (fclose(out) != 0) ok = 0;
    return ok ? CLLM_OK : cllm_err_set(err, CLLM_EIO, "%s: write failed", dst);
}

static cllm_status write_gen_config(const char *dir, const cllm_config *cfg, cllm_error *err) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/generation_config.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return cllm_err_set(err, CLLM_EIO, "%s: cannot create", path);
    fprintf(
        f,
        "{\n  \"do_sample\": true,\n  \"temperature\": 1.0,\n  \"top_p\": 0.95,\n  \"top_k\": 20,\n"
        "  \"eos_token_id\": [");
    for (int i = 0; i < cfg->n_eos; i++) fprintf(f, "%s%d", i ? ", " : "", cfg->eos_ids[i]);
    fprintf(f, "]\n}\n");
    return fclose(f) == 0 ? CLLM_OK : cllm_err_set(err, CLLM_EIO, "%s: write failed", path);
}

cllm_status cllm_synth(const cllm_synth_opts *o, cllm_error *err) {
    if (o->dtype != CLLM_DT_BF16 && o->dtype != CLLM_DT_F16 && o->dtype != CLLM_DT_F32)
        return cllm_err_set(err, CLLM_EINVAL, "synth: dtype must be bf16, f16 or f32");
    size_t len = 0;
    char *text = cllm_read_file(o->config_path, 16u << 20, &len, err);
    if (!text) return err ? err->code : CLLM_EIO;
    cllm_config cfg;
    cllm_status st = cllm_config_parse(text, len, o->config_path, &cfg, err);
    if (st) {
        free(text);
        return st;
    }
    spec_list l = {0};
    cllm_tensor_plan(&cfg, o->layout, o->include_mtp, false, collect, &l);
    if (l.oom) {
        st = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        goto done;
    }
    if (mkdir(o->out_dir, 0755) != 0 && errno != EEXIST) {
        st = cllm_err_set(err, CLLM_EIO, "%s: cannot create directory: %s", o->out_dir,
                          strerror(errno));
        goto done;
    }
    char path[4200];
    snprintf(path, sizeof(path), "%s/config.json", o->out_dir);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, len, f) != len) {
        if (f) fclose(f);
        st = cllm_err_set(err, CLLM_EIO, "%s: cannot write", path);
        goto done;
    }
    fclose(f);
    if ((st = write_gen_config(o->out_dir, &cfg, err))) goto done;
    if (o->tokenizer_dir) {
        const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
        for (int i = 0; i < 2 && !st; i++) {
            char src[4200];
            snprintf(src, sizeof(src), "%s/%s", o->tokenizer_dir, files[i]);
            snprintf(path, sizeof(path), "%s/%s", o->out_dir, files[i]);
            st = copy_file(src, path, i == 1, err);
        }
        if (st) goto done;
    }
    /* Shard plan: greedy in plan order, a new shard when the next tensor would overflow. */
    size_t *starts = calloc(l.n + 1, sizeof(size_t));
    if (!starts) {
        st = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        goto done;
    }
    size_t n_shards = 0;
    uint64_t cur = 0, total = 0;
    for (size_t i = 0; i < l.n; i++) {
        uint64_t bytes =
            cllm_tensor_spec_elems(&l.v[i]) * cllm_dtype_size(tensor_dtype(&l.v[i], o->dtype));
        if (i == 0 || (o->shard_bytes && cur + bytes > o->shard_bytes && cur > 0)) {
            starts[n_shards++] = i;
            cur = 0;
        }
        cur += bytes;
        total += bytes;
    }
    starts[n_shards] = l.n;
    LOG_INFO("synth: %s: %zu tensors, %.3f GB in %zu shard(s)", o->out_dir, l.n,
             (double)total / 1e9, n_shards);
    uint64_t done_bytes = 0;
    FILE *idx = NULL;
    if (n_shards > 1) {
        snprintf(path, sizeof(path), "%s/model.safetensors.index.json", o->out_dir);
        idx = fopen(path, "wb");
        if (!idx) {
            free(starts);
            st = cllm_err_set(err, CLLM_EIO, "%s: cannot create", path);
            goto done;
        }
        fprintf(idx, "{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {",
                (unsigned long long)total);
    }
    for (size_t s = 0; s < n_shards && !st; s++) {
        char name[128];
        if (n_shards == 1)
            snprintf(name, sizeof(name), "model.safetensors");
        else if (o->qwen_shard_names)
            snprintf(name, sizeof(name), "model.safetensors-%05zu-of-%05zu.safetensors", s + 1,
                     n_shards);
        else
            snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, n_shards);
        snprintf(path, sizeof(path), "%s/%s", o->out_dir, name);
        st = write_shard(o, &cfg, l.v, starts[s], starts[s + 1], path, &done_bytes, total, err);
        for (size_t i = starts[s]; idx && i < starts[s + 1]; i++)
            fprintf(idx, "%s\n    \"%s\": \"%s\"", i ? "," : "", l.v[i].name, name);
    }
    if (o->progress) fprintf(stderr, "\n");
    if (idx) {
        fprintf(idx, "\n  }\n}\n");
        if (fclose(idx) != 0 && !st) st = cllm_err_set(err, CLLM_EIO, "index write failed");
    }
    free(starts);
done:
    free(l.v);
    free(text);
    cllm_config_free(&cfg);
    return st;
}
