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
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file.h"
#include "base/half.h"
#include "base/log.h"
#include "base/progress.h"
#include "base/strmap.h"
#include "base/tmp_sweep.h"
#include "model/config.h"
#include "model/qformat.h"
#include "model/st_write.h"

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

/* Standard deviation of a projection's weights (LINEAR / OUT_PROJ), 0.02 for other inits. */
static float proj_std(const cllm_tensor_spec *s, const cllm_config *cfg) {
    if (s->init == CLLM_INIT_LINEAR) return 1.0f / sqrtf((float)s->fan_in);
    if (s->init == CLLM_INIT_OUT_PROJ)
        return 1.0f / sqrtf((float)s->fan_in) / sqrtf(2.0f * (float)cfg->n_layers);
    return 0.02f;
}

static void fill(const cllm_tensor_spec *s, const cllm_config *cfg, uint64_t *rng, float *buf,
                 size_t n) {
    const float sq3 = 1.7320508f;
    float std;
    switch (s->init) {
    case CLLM_INIT_ZERO:
        memset(buf, 0, n * sizeof(float));
        return;
    case CLLM_INIT_BIAS:
        std = 0.05f;
        break;
    case CLLM_INIT_EMBED:
        std = 1.0f;
        break;
    case CLLM_INIT_LINEAR:
    case CLLM_INIT_OUT_PROJ:
        std = proj_std(s, cfg);
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

static cllm_dtype tensor_dtype(const cllm_tensor_spec *s, cllm_dtype bulk) {
    return s->force_f32 ? CLLM_DT_F32 : bulk;
}

/* One output tensor: a float tensor of the plan, or one of the parts of a quantized Linear: the
 * four GPTQ ones (--scheme), AWQ's three (--layout awq), or FP8's weight and scale (--layout
 * fp8). */
enum { PART_FLOAT, PART_QW, PART_QZ, PART_SC, PART_GI, PART_F8, PART_SINV };
static const char *const part_suffix[] = {"weight", "qweight", "qzeros",          "scales",
                                          "g_idx",  "weight",  "weight_scale_inv"};

typedef struct out_tensor {
    const cllm_tensor_spec *spec;
    int part, bits;
    cllm_synth_qlayout ql;
    char name[176];
} out_tensor;

/* f32 -> e4m3 (bias 7, no inf, 448 the largest finite), round to nearest even; |x| <= 448 here. */
static uint8_t f32_to_e4m3(float x) {
    uint8_t sign = signbit(x) ? 0x80 : 0;
    float a = fabsf(x);
    int e2;
    frexpf(a, &e2); /* a = m * 2^e2, m in [0.5, 1): floor(log2 a) = e2 - 1 */
    int e = a > 0 ? e2 - 1 : -6;
    if (e < -6) e = -6;                /* subnormals share 2^-6's quantum, 2^-9 */
    float q = rintf(ldexpf(a, 3 - e)); /* in quanta of 2^(e-3): 8..16, or 0..8 subnormal */
    if (q >= 16.0f) q = 8.0f, e++;     /* rounded up into the next binade */
    if (e > 8 || (e == 8 && q > 14.0f)) return sign | 0x7e; /* saturate at 448 */
    if (q < 8.0f) return sign | (uint8_t)q; /* subnormal (or zero): exponent field 0 */
    return sign | (uint8_t)((e + 7) << 3) | (uint8_t)(q - 8.0f);
}

/* FP8 synth: the scale_inv of block b is the tensor's base scale (the init's bound over 448)
 * times a factor in [1, 2) drawn from b, so blocks differ and every |w / scale| stays <= 448. */
static float fp8_block_scale(const cllm_tensor_spec *s, const cllm_config *cfg, uint64_t b) {
    uint64_t h = b * 0x2545f4914f6cdd1dull;
    float f = 1.0f + (float)(splitmix(&h) >> 40) * (1.0f / 16777216.0f);
    return proj_std(s, cfg) * 1.7320508f / 448.0f * f;
}

/* FP8 codes or scales of elements first..first+m of t: the float init divided by its block's
 * scale and rounded to e4m3 (codes), or each block's scale (PART_SINV [ceil(N/B)][ceil(K/B)]). */
static void fill_fp8(const out_tensor *t, const cllm_config *cfg, int B, uint64_t *rng,
                     uint64_t first, size_t m, float *fb, uint8_t *codes) {
    const cllm_tensor_spec *s = t->spec;
    uint64_t K = (uint64_t)s->shape[1], KB = (K + B - 1) / B;
    if (t->part == PART_SINV) {
        for (size_t i = 0; i < m; i++) fb[i] = fp8_block_scale(s, cfg, first + i);
        return;
    }
    fill(s, cfg, rng, fb, m);
    for (size_t i = 0; i < m; i++) {
        uint64_t n = (first + i) / K, k = (first + i) % K;
        codes[i] = f32_to_e4m3(fb[i] / fp8_block_scale(s, cfg, n / B * KB + k / B));
    }
}

/* Random GPTQ codes stand for the weights: every code uniform in [0, 2^b), the symmetric zero,
 * one scale per tensor giving the float init's standard deviation (a uniform code minus the
 * zero has variance (4^b - 1) / 12), g_idx = k / group. */
static void fill_part(const out_tensor *t, const cllm_config *cfg, int group, uint64_t *rng,
                      uint64_t first, size_t m, uint32_t *words, uint16_t *halves) {
    const cllm_tensor_spec *s = t->spec;
    int b = t->bits;
    switch (t->part) {
    case PART_QW:
        for (size_t i = 0; i < m; i++) words[i] = (uint32_t)splitmix(rng);
        break;
    case PART_QZ:
        if (t->ql == CLLM_SYNTH_AWQ) { /* true zeros 6..9, and 0 (1 in 32) for the zero-0 path */
            for (size_t i = 0; i < m; i++) {
                uint64_t r = splitmix(rng);
                uint32_t w = 0;
                for (int j = 0; j < 8; j++) {
                    uint32_t z = (r >> (8 * j)) & 31 ? 6 + ((r >> (8 * j + 5)) & 3) : 0;
                    w |= z << (4 * j);
                }
                words[i] = w;
            }
            break;
        }
        for (size_t i = 0; i < m; i++) words[i] = b == 4 ? 0x77777777u : 0x7f7f7f7fu;
        break;
    case PART_SC: {
        float var = ((float)(1u << (2 * b)) - 1.0f) / 12.0f;
        uint16_t h = cllm_f32_to_f16(proj_std(s, cfg) / sqrtf(var));
        for (size_t i = 0; i < m; i++) halves[i] = h;
        break;
    }
    default:
        for (size_t i = 0; i < m; i++) words[i] = (uint32_t)((first + i) / (uint64_t)group);
    }
}

static cllm_status write_shard(const cllm_synth_opts *o, const cllm_config *cfg,
                               const out_tensor *ot, const cllm_st_entry *ents, size_t n, int shard,
                               const char *path, uint64_t *done_bytes, uint64_t total_bytes,
                               cllm_progress *prog, cllm_error *err) {
    char tmp[4400];
    if (!cllm_tmp_path(tmp, sizeof(tmp), path))
        return cllm_err_set(err, CLLM_EINVAL, "%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return cllm_err_set(err, CLLM_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    cllm_status st = cllm_st_write_header(f, ents, n, shard, NULL, tmp, err);
    int ok = st == CLLM_OK;
    float *fb = malloc(CHUNK * sizeof(float));
    uint16_t *hb = malloc(CHUNK * sizeof(uint16_t));
    uint32_t *wb = malloc(CHUNK * sizeof(uint32_t));
    if (!fb || !hb || !wb) ok = 0;
    for (size_t i = 0; ok && i < n; i++) {
        if (ents[i].shard != shard) continue;
        const out_tensor *t = &ot[i];
        const cllm_tensor_spec *s = t->spec;
        uint64_t rng = tensor_rng(o->seed, s);
        cllm_dtype dt = ents[i].dtype;
        size_t es = cllm_dtype_size(dt);
        uint64_t ne = ents[i].nbytes / es;
        for (uint64_t k = 0; ok && k < ne; k += CHUNK) {
            size_t m = (size_t)(ne - k < CHUNK ? ne - k : CHUNK);
            if (t->part == PART_F8 || t->part == PART_SINV) {
                fill_fp8(t, cfg, o->group ? o->group : 128, &rng, k, m, fb, (uint8_t *)wb);
                ok = fwrite(t->part == PART_F8 ? (void *)wb : (void *)fb, es, m, f) == m;
            } else if (t->part != PART_FLOAT) {
                fill_part(t, cfg, o->group, &rng, k, m, wb, hb);
                ok = fwrite(t->part == PART_SC ? (void *)hb : (void *)wb, es, m, f) == m;
            } else {
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
            }
            *done_bytes += m * es;
        }
        cllm_progress_update(prog, (double)*done_bytes, (double)total_bytes, t->name);
    }
    free(fb);
    free(hb);
    free(wb);
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        remove(tmp);
        return st ? st : cllm_err_set(err, CLLM_EIO, "%s: write failed (disk full?)", tmp);
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

/* Weight and activation bits of a --scheme (0 for none / "bf16": float weights). */
static int scheme_bits(const char *scheme, int *abits) {
    static const struct {
        const char *name;
        int w, a;
    } S[] = {{"w4a16", 4, 16}, {"w8a16", 8, 16}, {"w4a8", 4, 8}, {"w4a4", 4, 4}};
    *abits = 16;
    if (!scheme) return 0;
    for (size_t i = 0; i < sizeof(S) / sizeof(*S); i++)
        if (!strcmp(scheme, S[i].name)) return *abits = S[i].a, S[i].w;
    return -1;
}

/* The globs a quantized synth keeps 16-bit: the embeddings and the default keep list, as
 * `cllm quantize` without --keep does. */
#define MAX_KEEP 32
static int keep_globs(char g[MAX_KEEP][64], const char *list) {
    int n = 0;
    for (const char *p = list; *p && n < MAX_KEEP;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k && k < 64) memcpy(g[n], p, k), g[n++][k] = 0;
        p += k + (e != NULL);
    }
    return n;
}

/* Output tensors: the plan's, with each quantized Linear ("P.weight" [N][K], not kept) as
 * P.qweight, P.qzeros, P.scales, P.g_idx in the GPTQ v1 layout (model/qformat.h). */
static cllm_status plan_outputs(const cllm_synth_opts *o, const spec_list *l, out_tensor **oto,
                                cllm_st_entry **eo, size_t *no, cllm_error *err) {
    int abits, wbits = scheme_bits(o->scheme, &abits), G = o->group ? o->group : 128;
    bool fp8 = o->qlayout == CLLM_SYNTH_FP8, awq = o->qlayout == CLLM_SYNTH_AWQ;
    out_tensor *ot = calloc(4 * l->n + 1, sizeof(*ot));
    cllm_st_entry *e = calloc(4 * l->n + 1, sizeof(*e));
    *oto = ot, *eo = e, *no = 0;
    if (!ot || !e) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++) {
        const cllm_tensor_spec *s = &l->v[i];
        size_t len = strlen(s->name);
        bool lm = !strcmp(s->name, "lm_head.weight");
        /* AutoAWQ and the FP8 releases keep lm_head 16-bit */
        int bits = lm ? (fp8 || awq ? 16 : o->lm_head_bits) : fp8 ? 8 : wbits;
        bool quant = (wbits > 0 || fp8) && bits < 16 && s->n_dims == 2 && len > 7 &&
                     !strcmp(s->name + len - 7, ".weight") &&
                     !cllm_qformat_glob_match("*embed_tokens*", s->name) &&
                     !cllm_qformat_glob_match(cllm_qformat_default_keep, s->name);
        if (!quant) {
            ot[n] = (out_tensor){.spec = s, .part = PART_FLOAT};
            snprintf(ot[n].name, sizeof(ot[n].name), "%s", s->name);
            e[n] = (cllm_st_entry){
                .name = ot[n].name, .dtype = tensor_dtype(s, o->dtype), .n_dims = s->n_dims};
            for (int d = 0; d < s->n_dims; d++) e[n].shape[d] = s->shape[d];
            e[n].nbytes = cllm_st_entry_bytes(&e[n]);
            n++;
            continue;
        }
        int N = (int)s->shape[0], K = (int)s->shape[1], per = 32 / bits;
        if (fp8) { /* P.weight F8 [N][K], P.weight_scale_inv F32 [ceil(N/G)][ceil(K/G)] */
            for (int p = PART_F8; p <= PART_SINV; p++) {
                ot[n] = (out_tensor){.spec = s, .part = p, .bits = 8, .ql = o->qlayout};
                snprintf(ot[n].name, sizeof(ot[n].name), "%.*s.%s", (int)(len - 7), s->name,
                         part_suffix[p]);
                e[n] = (cllm_st_entry){.name = ot[n].name,
                                       .dtype = p == PART_F8 ? CLLM_DT_F8_E4M3 : CLLM_DT_F32,
                                       .n_dims = 2,
                                       .with_next = p == PART_F8};
                e[n].shape[0] = p == PART_F8 ? N : (N + G - 1) / G;
                e[n].shape[1] = p == PART_F8 ? K : (K + G - 1) / G;
                e[n].nbytes = cllm_st_entry_bytes(&e[n]);
                n++;
            }
            continue;
        }
        if (K % G)
            return cllm_err_set(err, CLLM_EINVAL,
                                "%s: group size %d does not divide in_features %d "
                                "(--group-size)",
                                s->name, G, K);
        if (N % 8)
            return cllm_err_set(err, CLLM_EINVAL,
                                "%s: out_features %d is not a multiple of 8 (GPTQ packs zeros "
                                "along N)",
                                s->name, N);
        int last = awq ? PART_SC : PART_GI; /* AWQ: no g_idx */
        for (int p = PART_QW; p <= last; p++) {
            ot[n] = (out_tensor){.spec = s, .part = p, .bits = bits, .ql = o->qlayout};
            snprintf(ot[n].name, sizeof(ot[n].name), "%.*s.%s", (int)(len - 7), s->name,
                     part_suffix[p]);
            e[n] = (cllm_st_entry){
                .name = ot[n].name, .dtype = CLLM_DT_I32, .n_dims = 2, .with_next = p != last};
            int64_t d0 = p == PART_QW ? K / per : p == PART_GI ? K : K / G;
            int64_t d1 = p == PART_QZ ? N / per : N;
            if (awq) /* qweight [K][N/8], qzeros [K/G][N/8], scales [K/G][N] */
                d0 = p == PART_QW ? K : K / G, d1 = p == PART_SC ? N : N / 8;
            if (p == PART_SC) e[n].dtype = CLLM_DT_F16;
            e[n].shape[0] = d0;
            e[n].shape[1] = d1;
            if (p == PART_GI) e[n].n_dims = 1;
            e[n].nbytes = cllm_st_entry_bytes(&e[n]);
            n++;
        }
    }
    *no = n;
    return CLLM_OK;
}

/* quantization_config of an AWQ (AutoAWQ's keys) or FP8 (the Qwen FP8 releases' keys) synth. */
static cllm_status other_config(json_t *root, const cllm_synth_opts *o, const char *const *keep,
                                int n_keep, cllm_error *err) {
    int G = o->group ? o->group : 128;
    json_t *qc = json_object(), *nc = json_array();
    json_array_append_new(nc, json_string("lm_head"));
    if (o->qlayout == CLLM_SYNTH_AWQ) {
        json_object_set_new(qc, "quant_method", json_string("awq"));
        json_object_set_new(qc, "bits", json_integer(4));
        json_object_set_new(qc, "group_size", json_integer(G));
        json_object_set_new(qc, "zero_point", json_true());
        json_object_set_new(qc, "version", json_string("gemm"));
    } else {
        json_t *bs = json_array();
        json_array_append_new(bs, json_integer(G));
        json_array_append_new(bs, json_integer(G));
        json_object_set_new(qc, "quant_method", json_string("fp8"));
        json_object_set_new(qc, "fmt", json_string("e4m3"));
        json_object_set_new(qc, "activation_scheme", json_string("dynamic"));
        json_object_set_new(qc, "weight_block_size", bs);
    }
    for (int i = 0; i < n_keep; i++) { /* the keep globs, once each (the lists overlap) */
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= !strcmp(keep[i], keep[j]);
        if (!dup) json_array_append_new(nc, json_string(keep[i]));
    }
    json_object_set_new(qc, "modules_to_not_convert", nc);
    if (json_object_set_new(root, "quantization_config", qc))
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    return CLLM_OK;
}

/* config.json: the input's text as is, or with quantization_config added for a --scheme. */
static cllm_status write_config(const cllm_synth_opts *o, const char *text, size_t len,
                                cllm_error *err) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/config.json", o->out_dir);
    int abits, wbits = scheme_bits(o->scheme, &abits);
    if (wbits <= 0 && o->qlayout != CLLM_SYNTH_FP8) {
        FILE *f = fopen(path, "wb");
        int ok = f && fwrite(text, 1, len, f) == len;
        if (f && fclose(f)) ok = 0;
        return ok ? CLLM_OK : cllm_err_set(err, CLLM_EIO, "%s: cannot write", path);
    }
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    if (!root) return cllm_err_set(err, CLLM_EFORMAT, "%s: %s", o->config_path, je.text);
    char g[MAX_KEEP][64];
    const char *gp[MAX_KEEP];
    int ng = keep_globs(g, "*embed_tokens*");
    ng += keep_globs(g + ng, cllm_qformat_default_keep);
    for (int i = 0; i < ng; i++) gp[i] = g[i];
    cllm_qformat_config_spec qs = {
        wbits, o->group ? o->group : 128, false, false, o->lm_head_bits, gp, ng, o->scheme, "synth",
        abits};
    cllm_status st = o->qlayout == CLLM_SYNTH_GPTQ ? cllm_qformat_config_set(root, &qs, err)
                                                   : other_config(root, o, gp, ng, err);
    if (!st && json_dump_file(root, path, JSON_INDENT(2)))
        st = cllm_err_set(err, CLLM_EIO, "%s: cannot write", path);
    json_decref(root);
    return st;
}

/* Options a run cannot start with. */
static cllm_status check_opts(const cllm_synth_opts *o, cllm_error *err) {
    if (o->dtype != CLLM_DT_BF16 && o->dtype != CLLM_DT_F16 && o->dtype != CLLM_DT_F32)
        return cllm_err_set(err, CLLM_EINVAL, "synth: dtype must be bf16, f16 or f32");
    int abits, wbits = scheme_bits(o->scheme, &abits);
    if (wbits < 0)
        return cllm_err_set(err, CLLM_EINVAL,
                            "synth: unsupported scheme '%s' (w4a16|w8a16|w4a8|w4a4)", o->scheme);
    if (o->qlayout == CLLM_SYNTH_AWQ && (wbits != 4 || abits != 16))
        return cllm_err_set(err, CLLM_EINVAL, "synth --layout awq: needs --scheme w4a16");
    if (o->qlayout == CLLM_SYNTH_FP8 && wbits)
        return cllm_err_set(err, CLLM_EINVAL,
                            "synth --layout fp8: block FP8 has no --scheme (--group-size sets the "
                            "block side)");
    if (o->qlayout == CLLM_SYNTH_FP8) wbits = 8;
    if (wbits > 0 && o->layout == CLLM_EXPERTS_FUSED)
        return cllm_err_set(err, CLLM_EINVAL,
                            "synth --scheme %s: quantized experts are stored per expert "
                            "(--experts per-expert; no tool writes fused quantized experts)",
                            o->scheme ? o->scheme : "(--layout fp8)");
    if (wbits > 0 && (o->group < 0 || o->group % 8))
        return cllm_err_set(err, CLLM_EINVAL,
                            "synth: group size %d is not a positive multiple of 8", o->group);
    if (wbits > 0 && o->lm_head_bits != 4 && o->lm_head_bits != 8 && o->lm_head_bits != 16)
        return cllm_err_set(err, CLLM_EINVAL, "synth: lm_head bits %d (4, 8 or 16)",
                            o->lm_head_bits);
    return CLLM_OK;
}

/* OUT_DIR with config.json, generation_config.json and the tokenizer files when asked. */
static cllm_status write_meta(const cllm_synth_opts *o, const cllm_config *cfg, const char *text,
                              size_t len, cllm_error *err) {
    if (mkdir(o->out_dir, 0755) != 0 && errno != EEXIST)
        return cllm_err_set(err, CLLM_EIO, "%s: cannot create directory: %s", o->out_dir,
                            strerror(errno));
    cllm_status st;
    if ((st = write_config(o, text, len, err))) return st;
    if ((st = write_gen_config(o->out_dir, cfg, err))) return st;
    if (!o->tokenizer_dir) return CLLM_OK;
    const char *files[] = {"tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 2 && !st; i++) {
        char src[4200], path[4200];
        snprintf(src, sizeof(src), "%s/%s", o->tokenizer_dir, files[i]);
        snprintf(path, sizeof(path), "%s/%s", o->out_dir, files[i]);
        st = copy_file(src, path, i == 1, err);
    }
    return st;
}

/* The shards (with the progress) and the index. */
static cllm_status write_shards(const cllm_synth_opts *o, const cllm_config *cfg,
                                const out_tensor *ot, cllm_st_entry *ents, size_t n_out,
                                cllm_error *err) {
    int n_shards = cllm_st_layout(ents, n_out, o->shard_bytes);
    uint64_t total = 0, done_bytes = 0;
    for (size_t i = 0; i < n_out; i++) total += ents[i].nbytes;
    LOG_INFO("synth: %s: %zu tensors, %.3f GB in %d shard(s)", o->out_dir, n_out,
             (double)total / 1e9, n_shards);
    cllm_progress prog;
    cllm_progress_init(&prog, o->progress ? stderr : NULL, o->tty, 10, 30, "synth");
    /* shard temporaries (NAME.safetensors.tmp-PID) of runs killed before their rename */
    cllm_tmp_sweep(
        &(cllm_tmp_sweep_spec){
            .dir = o->out_dir, .stem = ".safetensors", .stem_is_suffix = true, .who = "synth"},
        NULL);
    /* The index goes first, so the last shard's rename is the commit point: `cllm verify`
     * accepts shards without an index, and a run killed between its last shard and the index
     * left a directory verify accepted that was not the run's output (tests/quant/kill_safety.sh).
     * Now every interrupted run lacks a shard the index names. */
    cllm_status st =
        cllm_st_write_index(o->out_dir, ents, n_out, n_shards, o->qwen_shard_names, err);
    for (int sh = 0; sh < n_shards && !st; sh++) {
        char name[96], path[4200];
        cllm_st_shard_name(sh, n_shards, o->qwen_shard_names, name, sizeof(name));
        snprintf(path, sizeof(path), "%s/%s", o->out_dir, name);
        st = write_shard(o, cfg, ot, ents, n_out, sh, path, &done_bytes, total, &prog, err);
    }
    cllm_progress_break(&prog);
    return st;
}

cllm_status cllm_synth(const cllm_synth_opts *o, cllm_error *err) {
    cllm_status st = check_opts(o, err);
    if (st) return st;
    size_t len = 0;
    char *text = cllm_read_file(o->config_path, 16u << 20, &len, err);
    if (!text) return err ? err->code : CLLM_EIO;
    cllm_config cfg;
    if ((st = cllm_config_parse(text, len, o->config_path, &cfg, err))) {
        free(text);
        return st;
    }
    spec_list l = {0};
    out_tensor *ot = NULL;
    cllm_st_entry *ents = NULL;
    size_t n_out = 0;
    cllm_tensor_plan(&cfg, o->layout, o->include_mtp, o->include_vision, collect, &l);
    if (l.oom)
        st = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    else if (!(st = plan_outputs(o, &l, &ot, &ents, &n_out, err)) && /* refusals before writes */
             !(st = write_meta(o, &cfg, text, len, err)))
        st = write_shards(o, &cfg, ot, ents, n_out, err);
    free(ot);
    free(ents);
    free(l.v);
    free(text);
    cllm_config_free(&cfg);
    return st;
}
