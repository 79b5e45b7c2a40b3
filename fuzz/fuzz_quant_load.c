/* libFuzzer target: the quantized-checkpoint loading path (quantization_config checks, GPTQ
 * v1/v2 and compressed-tensors pack-quantized tensors: dtypes, shapes, bits and group size
 * inferred from shapes, zero points, g_idx, weight_shape, the compressed-tensors conversion).
 *
 * Each input becomes a model directory (config.json + model.safetensors, rewritten in one
 * per-process directory under /tmp) for one of two tiny built-in configs; every tensor the
 * config implies is written as deterministic BF16 unless the input supplies the tensors of that
 * Linear. Then cllm_model_load (+ one 2-token cllm_forward when it loads: garbage codes and NaN
 * scales must not crash either) and cllm_verify run on it. tests/model/test_quant_load_replay.c
 * replays the seeds and every regression input through qload_run without libFuzzer.
 *
 * Input format (little-endian):
 *   u8  flags      bit 0: base config (0 Qwen3.5-MoE 2 layers, 1 Qwen3 dense 1 layer, MLP
 *                  width 120: N = 8 * odd, group sizes 8, 24, 40, 120)
 *                  bit 1: odd header padding (every tensor's data unaligned)
 *   u16 qc_len, qc_len bytes: the quantization_config value, JSON text spliced into config.json
 *                  as is (0: no quantization_config)
 *   records until the end:
 *     u8 lin       Linear index (mod the number of 2-D "*.weight" tensors of the plan)
 *     u8 suf       suffix index (mod N_SUF, see suffixes[]): tensor "<base>.<suffix>"
 *     u8 dtype     cllm_dtype (mod CLLM_DT_COUNT)
 *     u8 ndims     (mod 4), then ndims u16 dims
 *     u16 len, len bytes: the data, repeated to fill the tensor (zeros when len is 0)
 *   A later record with the same name replaces an earlier one. A Linear named by any record
 *   other than suffix "weight" gets no default "<base>.weight".
 *
 * Seeds: fuzz/seeds/quant_load/ (made by fuzz/quant_load_seeds.sh from `cllm quantize` and
 * tools/ref/ct_writer.py outputs through the encoder below: CLLM_FUZZ_QL_ENCODE). Run:
 *   nice -n 10 build-fuzz/fuzz_quant_load -jobs=1 corpus-dir fuzz/seeds/quant_load */
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/fwd_int.h" /* m->ckpt: the mmaps to poison */
#include "model/tensor_plan.h"
#include "model/verify.h"
#include "model/qformat.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QL_ASAN 1
#endif
#elif defined(__SANITIZE_ADDRESS__)
#define QL_ASAN 1
#endif
#ifdef QL_ASAN
#include <sanitizer/asan_interface.h>
#endif

#define QL_PAD       64         /* bytes of a "__pad.N" tensor written after every tensor */
#define QL_MAX_BYTES (8u << 20) /* cap on the tensor bytes one input may ask for */
#define QL_MAX_DIM   65535

static const char *const ql_configs[2] = {
    "\"architectures\": [\"Qwen3_5MoeForConditionalGeneration\"], \"model_type\": "
    "\"qwen3_5_moe\", \"text_config\": {\"model_type\": \"qwen3_5_moe_text\", \"vocab_size\": 64, "
    "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"layer_types\": [\"linear_attention\", "
    "\"full_attention\"], \"full_attention_interval\": 2, \"num_attention_heads\": 4, "
    "\"num_key_value_heads\": 2, \"head_dim\": 32, \"attn_output_gate\": true, "
    "\"attention_bias\": false, \"linear_num_key_heads\": 2, \"linear_num_value_heads\": 4, "
    "\"linear_key_head_dim\": 16, \"linear_value_head_dim\": 16, \"linear_conv_kernel_dim\": 4, "
    "\"num_experts\": 4, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
    "\"shared_expert_intermediate_size\": 32, \"mlp_only_layers\": [], \"hidden_act\": "
    "\"silu\", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000, "
    "\"partial_rotary_factor\": 0.25, \"mrope_section\": [11, 11, 10], \"mrope_interleaved\": "
    "true}, \"partial_rotary_factor\": 0.25, \"max_position_embeddings\": 4096, "
    "\"rms_norm_eps\": 1e-06, \"tie_word_embeddings\": false, \"mtp_num_hidden_layers\": 0, "
    "\"eos_token_id\": 63, \"dtype\": \"bfloat16\"}, \"tie_word_embeddings\": false",
    "\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"vocab_size\": 64, "
    "\"hidden_size\": 64, \"intermediate_size\": 120, \"num_hidden_layers\": 1, "
    "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 32, \"rope_theta\": "
    "1000000, \"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-06, "
    "\"tie_word_embeddings\": false, \"attention_bias\": false, \"eos_token_id\": 63, "
    "\"bos_token_id\": 62"};

static const char *const suffixes[] = {
    "qweight",           "qzeros",       "scales",       "g_idx", "weight_packed", "weight_scale",
    "weight_zero_point", "weight_shape", "weight_g_idx", "weight"};
#define N_SUF ((int)(sizeof(suffixes) / sizeof(suffixes[0])))

/* The plan of one base config: every tensor, and the Linears (2-D "*.weight") by index. */
typedef struct ql_plan {
    cllm_tensor_spec *specs;
    size_t n, cap;
    int *lin; /* [n_lin] indices into specs */
    int n_lin;
} ql_plan;

static void plan_add(void *ctx, const cllm_tensor_spec *s) {
    ql_plan *p = ctx;
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->specs = realloc(p->specs, p->cap * sizeof(*p->specs));
        if (!p->specs) abort();
    }
    p->specs[p->n++] = *s;
}

static char *config_text(int base, const char *qc, size_t qc_len) {
    size_t cap = strlen(ql_configs[base]) + qc_len + 64;
    char *t = malloc(cap);
    if (!t) abort();
    if (qc_len)
        snprintf(t, cap, "{\"quantization_config\": %.*s, %s}\n", (int)qc_len, qc,
                 ql_configs[base]);
    else
        snprintf(t, cap, "{%s}\n", ql_configs[base]);
    return t;
}

static ql_plan *get_plan(int base) {
    static ql_plan plans[2];
    ql_plan *p = &plans[base];
    if (p->specs) return p;
    char *t = config_text(base, NULL, 0);
    cllm_config c;
    cllm_error err;
    if (cllm_config_parse(t, strlen(t), "fuzz", &c, &err) != CLLM_OK) {
        fprintf(stderr, "fuzz_quant_load: base config %d: %s\n", base, err.msg);
        abort();
    }
    free(t);
    cllm_tensor_plan(&c, CLLM_EXPERTS_PER_EXPERT, true, false, plan_add, p);
    cllm_config_free(&c);
    p->lin = malloc(p->n * sizeof(int));
    if (!p->lin) abort();
    for (size_t i = 0; i < p->n; i++) {
        size_t nl = strlen(p->specs[i].name);
        if (p->specs[i].n_dims == 2 && nl > 7 && !strcmp(p->specs[i].name + nl - 7, ".weight"))
            p->lin[p->n_lin++] = (int)i;
    }
    return p;
}

/* Base name of Linear i ("...q_proj"). */
static void lin_base(const ql_plan *p, int i, char *buf, size_t cap) {
    const char *n = p->specs[p->lin[i]].name;
    snprintf(buf, cap, "%.*s", (int)(strlen(n) - 7), n);
}

typedef struct ql_tensor {
    char name[200];
    cllm_dtype dt;
    int nd;
    int64_t shape[4];
    uint64_t nbytes;
    const uint8_t *src; /* repeated to fill; NULL: deterministic default or zeros */
    size_t src_len;
    bool deflt; /* default BF16 values */
} ql_tensor;

typedef struct ql_reader {
    const uint8_t *p;
    size_t n;
} ql_reader;

static int rd(ql_reader *r, void *out, size_t k) {
    if (r->n < k) return -1;
    memcpy(out, r->p, k);
    r->p += k;
    r->n -= k;
    return 0;
}

static char ql_dir[64];
static FILE *ql_null;

static void rm_dir(void) {
    if (!ql_dir[0]) return;
    char p[128];
    snprintf(p, sizeof(p), "%s/config.json", ql_dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/model.safetensors", ql_dir);
    unlink(p);
    rmdir(ql_dir);
}

static int setup(void) {
    if (ql_dir[0]) return 0;
    cllm_log_set_level(CLLM_LOG_ERROR);
    snprintf(ql_dir, sizeof(ql_dir), "/tmp/cllm_fuzz_ql.XXXXXX");
    if (!mkdtemp(ql_dir)) {
        ql_dir[0] = 0;
        return -1;
    }
    atexit(rm_dir);
    ql_null = fopen("/dev/null", "w");
    return ql_null ? 0 : -1;
}

static uint16_t default_bf16(uint64_t i, size_t t) {
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (t + 7) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 32;
    /* about +-0.06: sign, exponent 2^-5 .. 2^-4, 7 random mantissa bits */
    return (uint16_t)(((x & 1) << 15) | (0x7Au << 7) | ((x >> 1) & 0x7f));
}

/* Writes dir/model.safetensors from the tensor list; returns 0 or -1. */
static int write_st(const ql_tensor *t, size_t n, bool odd_pad) {
    size_t hcap = 256 + n * 420, hl = 0;
    char *h = malloc(hcap);
    if (!h) return -1;
    uint64_t off = 0;
    hl += (size_t)snprintf(h + hl, hcap - hl, "{");
    for (size_t i = 0; i < n; i++) {
        hl += (size_t)snprintf(h + hl, hcap - hl,
                               "%s\"__pad.%zu\":{\"dtype\":\"U8\",\"shape\":[%d],\"data_offsets\":"
                               "[%llu,%llu]},",
                               i ? "," : "", i, QL_PAD, (unsigned long long)off,
                               (unsigned long long)(off + QL_PAD));
        off += QL_PAD;
        hl += (size_t)snprintf(h + hl, hcap - hl, "\"%s\":{\"dtype\":\"%s\",\"shape\":[", t[i].name,
                               cllm_dtype_name(t[i].dt));
        for (int d = 0; d < t[i].nd; d++)
            hl += (size_t)snprintf(h + hl, hcap - hl, "%s%lld", d ? "," : "",
                                   (long long)t[i].shape[d]);
        hl += (size_t)snprintf(h + hl, hcap - hl, "],\"data_offsets\":[%llu,%llu]}",
                               (unsigned long long)off, (unsigned long long)(off + t[i].nbytes));
        off += t[i].nbytes;
    }
    hl += (size_t)snprintf(h + hl, hcap - hl, "}");
    while ((hl % 8) != (odd_pad ? 1u : 0u)) h[hl++] = ' ';
    char path[128];
    snprintf(path, sizeof(path), "%s/model.safetensors", ql_dir);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(h);
        return -1;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(h, 1, hl, f);
    free(h);
    uint8_t buf[4096];
    for (size_t i = 0; i < n; i++) {
        memset(buf, 0xA5, QL_PAD);
        fwrite(buf, 1, QL_PAD, f);
        uint64_t done = 0;
        while (done < t[i].nbytes) {
            size_t k =
                t[i].nbytes - done < sizeof(buf) ? (size_t)(t[i].nbytes - done) : sizeof(buf);
            for (size_t j = 0; j < k; j++) {
                uint64_t b = done + j;
                if (t[i].deflt) {
                    uint16_t v = default_bf16(b / 2, i);
                    buf[j] = (uint8_t)(b & 1 ? v >> 8 : v);
                } else {
                    buf[j] = t[i].src_len ? t[i].src[b % t[i].src_len] : 0;
                }
            }
            fwrite(buf, 1, k, f);
            done += k;
        }
    }
    return fclose(f) ? -1 : 0;
}

static int write_config(int base, const char *qc, size_t qc_len) {
    char path[128];
    snprintf(path, sizeof(path), "%s/config.json", ql_dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    char *t = config_text(base, qc, qc_len);
    fputs(t, f);
    free(t);
    return fclose(f) ? -1 : 0;
}

/* Under ASan, poisons the safetensors header and every "__pad.N" tensor of the loaded model's
 * mmaps (poison = 1) or unpoisons the whole maps (0, before they are unmapped), so a read past a
 * quantized tensor's bytes by the converter or a kernel is reported instead of landing silently
 * in the neighbouring tensor. */
static void poison(const cllm_ckpt *ck, int on) {
#ifdef QL_ASAN
    for (size_t i = 0; i < ck->n_files; i++) {
        const cllm_st_file *f = ck->files[i];
        if (!f) continue;
        if (!on) {
            ASAN_UNPOISON_MEMORY_REGION(f->map, f->map_size);
            continue;
        }
        ASAN_POISON_MEMORY_REGION(f->map, 8 + f->header_len);
        for (size_t k = 0; k < f->n_tensors; k++)
            if (!strncmp(f->tensors[k].name, "__pad.", 6))
                ASAN_POISON_MEMORY_REGION(f->tensors[k].data, f->tensors[k].nbytes);
    }
#else
    (void)ck;
    (void)on;
#endif
}

typedef struct ql_allocs {
    void *p[8];
    int n;
} ql_allocs;

static void *ql_alloc(void *ctx, size_t bytes) {
    ql_allocs *a = ctx;
    return a->n < 8 ? (a->p[a->n++] = calloc(1, bytes ? bytes : 1)) : NULL;
}

/* Binds every Linear of the plan straight from the checkpoint, with its mmap poisoned (so the
 * compressed-tensors and gptq_v2 conversions are checked for over-reads too, whether or not the
 * whole model loads), then dequantizes every row of each bound matrix. */
static void bind_all(const ql_plan *p) {
    cllm_ckpt *ck;
    cllm_error err;
    unsigned qfmt = 0;
    if (cllm_qformat_check_config(ql_dir, &qfmt, &err) != CLLM_OK) qfmt = 0;
    if (cllm_ckpt_open(ql_dir, false, &ck, &err) != CLLM_OK) return;
    poison(ck, 1);
    for (int l = 0; l < p->n_lin; l++) {
        const cllm_tensor_spec *s = &p->specs[p->lin[l]];
        char b[192];
        lin_base(p, l, b, sizeof(b));
        ql_allocs a = {{0}, 0};
        cllm_qweight q;
        if (cllm_qformat_bind_any(ck, b, (int)s->shape[0], (int)s->shape[1], qfmt, ql_alloc, &a, &q,
                                  &err) == CLLM_OK) {
            cllm_qformat_check_sym_zeros(&q, qfmt, b, &err);
            float *row = malloc((size_t)q.K * sizeof(float));
            for (int n = 0; row && n < q.N; n++) cllm_qformat_dequant_row(&q, n, row);
            free(row);
        }
        for (int i = 0; i < a.n; i++) free(a.p[i]);
    }
    poison(ck, 0);
    cllm_ckpt_close(ck);
}

/* One 2-token forward pass on a loaded model. */
static void run_forward(const cllm_model *m) {
    cllm_error err;
    cllm_fwd_ctx *ctx = NULL;
    cllm_kv_pool kv;
    cllm_state_pool sp;
    memset(&kv, 0, sizeof(kv));
    memset(&sp, 0, sizeof(sp));
    int V = cllm_model_config(m)->vocab_size;
    float *lg = malloc((size_t)V * sizeof(float));
    if (lg && cllm_fwd_ctx_create(m, NULL, &ctx, &err) == CLLM_OK &&
        cllm_kv_pool_init(&kv, m, 2, 16, CLLM_KV_F32, &err) == CLLM_OK &&
        cllm_state_pool_init(&sp, m, 1, CLLM_KV_F32, &err) == CLLM_OK) {
        static const int32_t toks[2] = {1, 5};
        static const int32_t table[2] = {0, 1};
        cllm_seq_batch sb = {toks, 2, 0, table, 2, 0, CLLM_LOGITS_LAST};
        cllm_batch b = {&sb, 1};
        cllm_forward(ctx, &b, &kv, &sp, lg, &err);
    }
    cllm_fwd_ctx_free(ctx);
    cllm_kv_pool_free(&kv);
    cllm_state_pool_free(&sp);
    free(lg);
}

/* Builds the model directory for one input, loads it (forward on success) and verifies it.
 * Returns the load status; err gets its message. -1 (as int) when the input is not usable. */
int qload_run(const uint8_t *data, size_t size, cllm_error *err);
int qload_run(const uint8_t *data, size_t size, cllm_error *err) {
    ql_reader r = {data, size};
    uint8_t flags;
    uint16_t qc_len;
    if (setup() || rd(&r, &flags, 1) || rd(&r, &qc_len, 2) || qc_len > r.n) return -1;
    const char *qc = (const char *)r.p;
    r.p += qc_len;
    r.n -= qc_len;
    int base = flags & 1;
    ql_plan *p = get_plan(base);
    size_t cap = p->n + 64, nt = 0;
    ql_tensor *t = calloc(cap, sizeof(*t));
    bool *has_q = calloc((size_t)p->n_lin, sizeof(bool));
    uint64_t total = 0;
    int rc = -1;
    if (!t || !has_q) goto out;
    /* records first (into the tail of t), then the defaults they leave */
    ql_tensor *rec = t + p->n;
    size_t nrec = 0;
    for (;;) {
        uint8_t hd[4];
        uint16_t dims[4] = {0}, len;
        if (rd(&r, hd, 4)) break;
        int nd = hd[3] % 4;
        if (rd(&r, dims, 2 * (size_t)nd) || rd(&r, &len, 2) || len > r.n) break;
        ql_tensor x;
        memset(&x, 0, sizeof(x));
        int li = hd[0] % p->n_lin, si = hd[1] % N_SUF;
        char b[192];
        lin_base(p, li, b, sizeof(b));
        snprintf(x.name, sizeof(x.name), "%s.%s", b, suffixes[si]);
        x.dt = (cllm_dtype)(hd[2] % CLLM_DT_COUNT);
        x.nd = nd;
        uint64_t ne = 1;
        for (int d = 0; d < nd; d++) ne *= (x.shape[d] = dims[d]);
        x.nbytes = ne * cllm_dtype_size(x.dt); /* <= 65535^3 * 8: no overflow */
        x.src = r.p;
        x.src_len = len;
        r.p += len;
        r.n -= len;
        if (x.nbytes > QL_MAX_BYTES || total + x.nbytes > QL_MAX_BYTES) continue;
        total += x.nbytes;
        if (si != N_SUF - 1) has_q[li] = true;
        size_t j = 0;
        while (j < nrec && strcmp(rec[j].name, x.name)) j++;
        if (j < nrec) {
            total -= rec[j].nbytes;
            rec[j] = x;
        } else if (nrec < 64) {
            rec[nrec++] = x;
        }
    }
    for (size_t i = 0; i < p->n; i++) {
        const cllm_tensor_spec *s = &p->specs[i];
        bool skip = false;
        for (int l = 0; l < p->n_lin; l++)
            if (p->lin[l] == (int)i) skip = has_q[l];
        for (size_t j = 0; j < nrec && !skip; j++) skip = !strcmp(rec[j].name, s->name);
        if (skip || s->optional) continue;
        ql_tensor *x = &t[nt++];
        snprintf(x->name, sizeof(x->name), "%s", s->name);
        x->dt = CLLM_DT_BF16;
        x->nd = s->n_dims;
        x->nbytes = 2;
        for (int d = 0; d < s->n_dims; d++) x->nbytes *= (uint64_t)(x->shape[d] = s->shape[d]);
        x->deflt = true;
    }
    memmove(t + nt, rec, nrec * sizeof(*t));
    nt += nrec;
    if (write_config(base, qc, qc_len) || write_st(t, nt, flags & 2)) goto out;

    bind_all(p);
    cllm_model *m = NULL;
    rc = (int)cllm_model_load(ql_dir, NULL, &m, err);
    if (rc == CLLM_OK) {
        poison(m->ckpt, 1);
        run_forward(m);
        poison(m->ckpt, 0);
        cllm_model_free(m);
    }
    cllm_verify_opts vo = {false, true, false};
    cllm_verify_result vr;
    cllm_error verr;
    cllm_verify(ql_dir, &vo, ql_null, &vr, &verr);
    fflush(ql_null);
out:
    free(t);
    free(has_q);
    return rc;
}

#ifndef QLOAD_NO_FUZZER_MAIN /* tests/model/test_quant_load_replay.c includes this file */
/* Encoder for seeds: CLLM_FUZZ_QL_ENCODE="FLAGS:MODEL_DIR:OUT_FILE[:SUBSTR,SUBSTR...]" writes an
 * input holding MODEL_DIR's quantization_config and the quantized tensors of every Linear whose
 * base name contains one of the SUBSTRs (all quantized Linears without the list), then exits.
 * CLLM_FUZZ_QL_CONFIG="BASE:FILE" writes base config BASE (0/1) as config.json text. */
static int encode(const char *spec) {
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", spec);
    char *fl = strtok(buf, ":"), *dir = strtok(NULL, ":"), *outp = strtok(NULL, ":"),
         *filt = strtok(NULL, ":");
    if (!fl || !dir || !outp) return 1;
    int flags = atoi(fl);
    ql_plan *p = get_plan(flags & 1);
    char cpath[4200];
    snprintf(cpath, sizeof(cpath), "%s/config.json", dir);
    json_t *root = json_load_file(cpath, 0, NULL);
    json_t *qcj = root ? json_object_get(root, "quantization_config") : NULL;
    char *qc = qcj ? json_dumps(qcj, JSON_COMPACT) : NULL;
    cllm_ckpt *ck;
    cllm_error err;
    if (cllm_ckpt_open(dir, false, &ck, &err) != CLLM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    FILE *f = fopen(outp, "wb");
    if (!f) return 1;
    uint16_t ql = qc ? (uint16_t)strlen(qc) : 0;
    fputc(flags, f);
    fwrite(&ql, 2, 1, f);
    if (ql) fwrite(qc, 1, ql, f);
    int nrec = 0;
    for (int l = 0; l < p->n_lin; l++) {
        char b[192], name[256];
        lin_base(p, l, b, sizeof(b));
        if (filt) {
            char fb[1024], *save = NULL;
            snprintf(fb, sizeof(fb), "%s", filt);
            bool hit = false;
            for (char *s = strtok_r(fb, ",", &save); s && !hit; s = strtok_r(NULL, ",", &save))
                hit = strstr(b, s) != NULL;
            if (!hit) continue;
        }
        for (int s = 0; s < N_SUF - 1; s++) {
            snprintf(name, sizeof(name), "%s.%s", b, suffixes[s]);
            const cllm_tensor *x = cllm_ckpt_get(ck, name);
            if (!x || x->n_dims > 3 || x->nbytes > 65535) continue;
            uint8_t hd[4] = {(uint8_t)l, (uint8_t)s, (uint8_t)x->dtype, (uint8_t)x->n_dims};
            fwrite(hd, 1, 4, f);
            for (int d = 0; d < x->n_dims; d++) {
                uint16_t v = (uint16_t)x->shape[d];
                fwrite(&v, 2, 1, f);
            }
            uint16_t len = (uint16_t)x->nbytes;
            fwrite(&len, 2, 1, f);
            fwrite(x->data, 1, len, f);
            nrec++;
        }
    }
    fclose(f);
    fprintf(stderr, "%s: %d records\n", outp, nrec);
    cllm_ckpt_close(ck);
    free(qc);
    json_decref(root);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *e = getenv("CLLM_FUZZ_QL_ENCODE"), *c = getenv("CLLM_FUZZ_QL_CONFIG");
    if (e) exit(encode(e));
    if (c && (c[0] == '0' || c[0] == '1') && c[1] == ':') {
        FILE *f = fopen(c + 2, "w");
        char *t = config_text(c[0] - '0', NULL, 0);
        if (f) fputs(t, f);
        free(t);
        exit(!f || fclose(f));
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int verbose = -1;
    if (verbose < 0) verbose = getenv("CLLM_FUZZ_QL_VERBOSE") != NULL;
    cllm_error err = {0};
    int rc = qload_run(data, size, &err);
    if (verbose) fprintf(stderr, "load: %d %s\n", rc, rc > 0 ? err.msg : "");
    return 0;
}
#endif
