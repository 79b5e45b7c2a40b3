/* `cllm quantize`: see quantize.h and model/qformat.h (format). */
#include "quant/quantize.h"

#include <ctype.h>
#include <errno.h>
#include <fnmatch.h>
#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <dirent.h>
#include <unistd.h>

#include "base/file.h"
#include "base/mem.h"
#include "base/half.h"
#include "base/progress.h"
#include "base/tmp_sweep.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "quant/gptq.h"
#include "model/qformat.h"
#include "model/st_write.h"
#include "quant/quant.h"

/* P_DEQ: an FP8 tensor kept unquantized, written as BF16 dequantized (cllm does not serve FP8). */
enum { P_COPY, P_QW, P_QZ, P_SC, P_GI, P_DEQ };

typedef struct unit { /* one Linear to quantize */
    const cllm_tensor *src;
    const cllm_tensor *sinv; /* FP8 input: src's weight_scale_inv F32 [ceil(N/bn)][ceil(K/bk)] */
    uint64_t off;            /* element offset of the [N][K] slice */
    int N, K, bits, bn, bk;
    char base[200];
} unit;

typedef struct outt {
    char name[224];
    cllm_dtype dt;
    int n_dims;
    int64_t shape[CLLM_ST_MAX_DIMS];
    uint64_t nbytes;
    int part;
    const cllm_tensor *src;  /* P_COPY, P_DEQ */
    const cllm_tensor *sinv; /* P_DEQ: src's weight_scale_inv */
    int unit;                /* P_Q* */
    int shard;
} outt;

typedef struct vec {
    void *v;
    size_t n, cap, es;
} vec;
static void *vpush(vec *v) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? 2 * v->cap : 256;
        void *nv = realloc(v->v, nc * v->es);
        if (!nv) return NULL;
        v->v = nv;
        v->cap = nc;
    }
    void *p = (char *)v->v + v->n++ * v->es;
    memset(p, 0, v->es);
    return p;
}

typedef struct globs {
    char **g;
    int n;
    int *hits;
    bool *user;
} globs;

static int add_globs(globs *gl, const char *list, bool user) {
    if (!list || !*list) return 0;
    char *dup = strdup(list), *save = NULL;
    if (!dup) return -1;
    for (char *p = strtok_r(dup, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        while (*p == ' ') p++;
        if (!*p) continue;
        char **ng = realloc(gl->g, (gl->n + 1) * sizeof(*ng));
        int *nh = realloc(gl->hits, (gl->n + 1) * sizeof(*nh));
        bool *nu = realloc(gl->user, (gl->n + 1) * sizeof(*nu));
        if (ng) gl->g = ng;
        if (nh) gl->hits = nh;
        if (nu) gl->user = nu;
        if (!ng || !nh || !nu) {
            free(dup);
            return -1;
        }
        gl->g[gl->n] = strdup(p);
        gl->hits[gl->n] = 0;
        gl->user[gl->n] = user;
        gl->n++;
    }
    free(dup);
    return 0;
}

static bool kept(globs *gl, const char *name) {
    bool k = false;
    for (int i = 0; i < gl->n; i++)
        if (!fnmatch(gl->g[i], name, 0)) {
            gl->hits[i]++;
            k = true;
        }
    return k;
}

static const char *group_of(const char *n) {
    if (strstr(n, "embed_tokens")) return "embed";
    if (!strncmp(n, "lm_head", 7)) return "lm_head";
    if (!strncmp(n, "mtp.", 4)) return "mtp";
    if (!strncmp(n, "model.visual.", 13)) return "vision";
    if (strstr(n, "norm")) return "norms";
    if (strstr(n, "self_attn.")) return "attention";
    if (strstr(n, "linear_attn.")) return "deltanet";
    if (strstr(n, "mlp.experts")) return "experts";
    if (strstr(n, "shared_expert")) return "shared_expert";
    if (strstr(n, "mlp.gate.")) return "router";
    if (strstr(n, "mlp.")) return "mlp";
    return "other";
}

/* Natural order (digit runs compare as numbers): layers.2 before layers.10, so GPTQ groups come
 * in layer order and each calibration pass can resume from the previous group's residuals. */
static int cmp_natural(const char *a, const char *b) {
    while (*a && *b) {
        if (isdigit((unsigned char)*a) && isdigit((unsigned char)*b)) {
            while (*a == '0' && isdigit((unsigned char)a[1])) a++;
            while (*b == '0' && isdigit((unsigned char)b[1])) b++;
            size_t la = 0, lb = 0;
            while (isdigit((unsigned char)a[la])) la++;
            while (isdigit((unsigned char)b[lb])) lb++;
            if (la != lb) return la < lb ? -1 : 1;
            int c = strncmp(a, b, la);
            if (c) return c;
            a += la, b += lb;
            continue;
        }
        if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        a++, b++;
    }
    return *a ? 1 : *b ? -1 : 0;
}

static int cmp_tensor(const void *a, const void *b) {
    const char *na = (*(const cllm_tensor *const *)a)->name;
    const char *nb = (*(const cllm_tensor *const *)b)->name;
    int c = cmp_natural(na, nb);
    return c ? c : strcmp(na, nb); /* "01" vs "1": still a total order */
}

static void collect_t(void *ctx, const cllm_tensor *t) {
    const cllm_tensor **p = vpush(ctx);
    if (p) *p = t;
}

/* Rows n0..n1 of a block-FP8 matrix w [N][K] (model/qformat.h cllm_qformat_fp8_config) into dst
 * [n1 - n0][K]: each e4m3 value times its block's scale_inv, one f32 rounding (the e4m3 decode
 * is exact). Returns the flat index of the first NaN code (0x7f/0xff), or -1. */
static int64_t fp8_rows(const cllm_tensor *w, const cllm_tensor *sinv, int bn, int bk, int K,
                        int n0, int n1, float *dst) {
    const uint8_t *q = w->data;
    int kb = (K + bk - 1) / bk;
    for (int n = n0; n < n1; n++)
        for (int k = 0; k < K; k++) {
            size_t i = (size_t)n * K + k;
            float s;
            memcpy(&s, (const char *)sinv->data + 4 * ((size_t)(n / bn) * kb + k / bk), 4);
            float v = cllm_f8e4m3_to_f32(q[i]);
            if (isnan(v)) return (int64_t)i;
            dst[(size_t)(n - n0) * K + k] = v * s;
        }
    return -1;
}

static cllm_status fp8_nan(const cllm_tensor *t, int64_t i, int K, cllm_error *err) {
    return cllm_err_set(err, CLLM_EFORMAT, "tensor %s: F8_E4M3 NaN code at [%lld, %lld]", t->name,
                        (long long)(i / K), (long long)(i % K));
}

static cllm_status src_rows(const unit *u, int n0, int n1, float *dst, cllm_error *err) {
    uint64_t b = u->off + (uint64_t)n0 * u->K, n = (uint64_t)(n1 - n0) * u->K;
    if (u->sinv) {
        int64_t bad = fp8_rows(u->src, u->sinv, u->bn, u->bk, u->K, n0, n1, dst);
        return bad < 0 ? CLLM_OK : fp8_nan(u->src, bad, u->K, err);
    }
    if (u->src->dtype == CLLM_DT_BF16)
        cllm_bf16_to_f32_row((const uint16_t *)u->src->data + b, dst, n);
    else if (u->src->dtype == CLLM_DT_F16)
        cllm_f16_to_f32_row((const uint16_t *)u->src->data + b, dst, n);
    else
        for (uint64_t i = 0; i < n; i++) dst[i] = (float)cllm_tensor_elem(u->src, b + i);
    return CLLM_OK;
}

static bool add_unit(vec *units, vec *outs, const cllm_tensor *src, uint64_t off, int N, int K,
                     int bits, const char *base) {
    unit *u = vpush(units);
    if (!u) return false;
    u->src = src;
    u->off = off;
    u->N = N;
    u->K = K;
    u->bits = bits;
    snprintf(u->base, sizeof(u->base), "%s", base);
    return true;
    (void)outs;
}

static void qsizes(const unit *u, int G, bool bf16, int part, int64_t *d0, int64_t *d1,
                   cllm_dtype *dt) {
    int per = 32 / u->bits;
    *dt = CLLM_DT_I32;
    *d1 = -1;
    switch (part) {
    case P_QW:
        *d0 = u->K / per, *d1 = u->N;
        break;
    case P_QZ:
        *d0 = u->K / G, *d1 = u->N / per;
        break;
    case P_SC:
        *d0 = u->K / G, *d1 = u->N, *dt = bf16 ? CLLM_DT_BF16 : CLLM_DT_F16;
        break;
    default:
        *d0 = u->K;
        break;
    }
}

static const char *part_suffix[] = {"", "qweight", "qzeros", "scales", "g_idx"};

static cllm_status copy_aux(const char *in, const char *out, cllm_error *err) {
    DIR *d = opendir(in);
    if (!d) return cllm_err_set(err, CLLM_EIO, "%s: %s", in, strerror(errno));
    struct dirent *e;
    cllm_status st = CLLM_OK;
    while (st == CLLM_OK && (e = readdir(d))) {
        const char *n = e->d_name;
        size_t l = strlen(n);
        if (n[0] == '.' || !strcmp(n, "config.json") ||
            (l > 12 && !strcmp(n + l - 12, ".safetensors")) ||
            !strcmp(n, "model.safetensors.index.json"))
            continue;
        char a[4096], b[4096];
        snprintf(a, sizeof(a), "%s/%s", in, n);
        snprintf(b, sizeof(b), "%s/%s", out, n);
        struct stat sb;
        if (stat(a, &sb) || !S_ISREG(sb.st_mode)) continue;
        FILE *fi = fopen(a, "rb"), *fo = fi ? fopen(b, "wb") : NULL;
        char buf[65536];
        size_t k;
        bool ok = fi && fo;
        while (ok && (k = fread(buf, 1, sizeof(buf), fi)) > 0) ok = fwrite(buf, 1, k, fo) == k;
        if (fi) fclose(fi);
        if (fo && fclose(fo)) ok = false;
        if (!ok) st = cllm_err_set(err, CLLM_EIO, "cannot copy %s to %s", a, b);
    }
    closedir(d);
    return st;
}

static cllm_status write_config(const cllm_quant_opts *o, const char *tmp, int wbits, int abits,
                                globs *gl, cllm_error *err) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/config.json", o->in_dir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return cllm_err_set(err, CLLM_EFORMAT, "%s: %s", path, je.text);
    cllm_qformat_config_spec qs = {
        wbits, o->group,  o->asym,   o->scale_bf16, o->lm_head_bits, (const char *const *)gl->g,
        gl->n, o->scheme, o->method, abits};
    cllm_status st = cllm_qformat_config_set(root, &qs, err);
    if (st) {
        json_decref(root);
        return st;
    }
    snprintf(path, sizeof(path), "%s/config.json", tmp);
    int rc = json_dump_file(root, path, JSON_INDENT(2));
    json_decref(root);
    return rc ? cllm_err_set(err, CLLM_EIO, "%s: cannot write", path) : CLLM_OK;
}

/* Decoder layer of a tensor name ("...layers.N..."), -1 for anything else (MTP included). */
static int layer_of(const char *name) {
    if (!strncmp(name, "mtp.", 4)) return -1;
    const char *p = strstr(name, "layers.");
    return p ? atoi(p + 7) : -1;
}

/* GPTQ memory plan: units are in name order, so each layer's units are consecutive; consecutive
 * layers go into one calibration group while their Hessians fit in the budget. A layer whose
 * Hessians alone exceed the budget (256 experts of a wide model) is split across groups at unit
 * boundaries (an expert's gate/up stay together: the up's Hessian is the gate's). Each group is
 * one calibration pass, in output order, so a group's units are consecutive. */
typedef struct gplan {
    cllm_gptq *gq;
    const unit *uv;
    int *ug;                                           /* [n] group of each unit, -1 = none */
    uint64_t budget, gbytes, total, maxg;              /* gbytes: Hessians of the open group */
    int n_groups, run, layers_in, max_layers, n_split; /* run: cllm_gptq_need's counting tag */
} gplan;

static void gplan_add(gplan *p, uint64_t bytes) {
    p->gbytes += bytes;
    p->total += bytes;
    if (p->gbytes > p->maxg) p->maxg = p->gbytes;
}

/* Units [a, b) of one layer whose Hessians exceed the budget: groups of their own, filled unit by
 * unit. */
static cllm_status split_layer(gplan *p, size_t a, size_t b, cllm_error *err) {
    const unit *uv = p->uv;
    p->n_split++;
    p->run++;                  /* the layer's scan tagged every root with the previous tag */
    p->gbytes = p->budget + 1; /* forces a new group at the first unit with a Hessian */
    for (size_t i = a; i < b; i++) {
        uint64_t ub = cllm_gptq_need(p->gq, uv[i].src->name, uv[i].off, uv[i].K, p->run);
        if (ub && p->gbytes + ub > p->budget) { /* new group: count the root under a new tag */
            p->n_groups++;
            p->gbytes = 0;
            ub = cllm_gptq_need(p->gq, uv[i].src->name, uv[i].off, uv[i].K, ++p->run);
        }
        if (ub > p->budget) {
            char x[32], y[32];
            cllm_fmt_bytes(x, sizeof(x), ub);
            cllm_fmt_bytes(y, sizeof(y), p->budget);
            return cllm_err_set(err, CLLM_ENOMEM,
                                "--gptq-mem %s: %s alone needs %s of Hessians (raise "
                                "--gptq-mem or --min-expert-tokens, or use --method rtn)",
                                y, uv[i].base, x);
        }
        if (ub) gplan_add(p, ub);
        p->ug[i] = p->n_groups - 1;
    }
    if (p->max_layers < 1) p->max_layers = 1;
    p->gbytes = p->budget + 1; /* the next layer starts a new group */
    return CLLM_OK;
}

/* Units [a, b) of one layer needing lb bytes of Hessians (<= budget): into the open group, or a
 * new one when they do not fit. */
static void add_layer(gplan *p, size_t a, size_t b, uint64_t lb) {
    if (lb && (p->n_groups == 0 || p->gbytes + lb > p->budget)) {
        p->n_groups++;
        p->gbytes = 0;
        p->layers_in = 0;
    }
    if (lb) {
        gplan_add(p, lb);
        p->layers_in++;
        if (p->layers_in > p->max_layers) p->max_layers = p->layers_in;
    }
    for (size_t i = a; i < b; i++) p->ug[i] = lb ? p->n_groups - 1 : -1;
}

static void print_groups(const gplan *p, FILE *out) {
    char t[32], m[32], bb[32], sp[64] = "";
    cllm_fmt_bytes(t, sizeof(t), p->total);
    cllm_fmt_bytes(m, sizeof(m), p->maxg);
    cllm_fmt_bytes(bb, sizeof(bb), p->budget);
    if (p->n_split)
        snprintf(sp, sizeof(sp), ", %d layer%s split across passes", p->n_split,
                 p->n_split == 1 ? "" : "s");
    fprintf(out,
            "gptq: Hessians %s in all, budget %s (--gptq-mem): %d calibration pass%s (up to %d "
            "layer%s, %s at once%s), each group calibrated on the 16-bit model's activations\n",
            t, bb, p->n_groups, p->n_groups == 1 ? "" : "es", p->max_layers,
            p->max_layers == 1 ? "" : "s", m, sp);
    fflush(out);
}

static cllm_status plan_groups(const cllm_quant_opts *o, cllm_gptq *gq, const unit *uv, size_t n,
                               int **ugrp_out, FILE *out, cllm_error *err) {
    uint64_t ram = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
    gplan p = {.gq = gq, .uv = uv, .budget = o->gptq_mem ? o->gptq_mem : ram / 4};
    p.ug = malloc((n ? n : 1) * sizeof(int));
    if (!p.ug) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    for (size_t a = 0, b; a < n; a = b) {
        int lay = layer_of(uv[a].src->name);
        uint64_t lb = 0;
        p.run++;
        for (b = a; b < n && layer_of(uv[b].src->name) == lay; b++)
            lb += cllm_gptq_need(gq, uv[b].src->name, uv[b].off, uv[b].K, p.run);
        cllm_status st = CLLM_OK;
        if (lb <= p.budget)
            add_layer(&p, a, b, lb);
        else
            st = split_layer(&p, a, b, err);
        if (st) {
            free(p.ug);
            return st;
        }
    }
    print_groups(&p, out);
    *ugrp_out = p.ug;
    return CLLM_OK;
}

/* One run of `cllm quantize`: what the phases below share. */
typedef struct qrun {
    const cllm_quant_opts *o;
    FILE *out;
    int wbits, abits;
    bool gptq;
    bool fp8;         /* input is a block-FP8 checkpoint (quant_method "fp8") */
    int fp8_block[2]; /* its weight_block_size {bn, bk} */
    cllm_config cfg;
    cllm_ckpt *ck;
    vec tens, units, outs; /* input tensors (natural name order), Linears to quantize, outputs */
    globs gl;
    cllm_gptq *gq;
    int *ugrp;           /* GPTQ: calibration group of each unit, -1 = none */
    cllm_st_entry *ents; /* outs as the safetensors writer sees them */
    int n_shards;
    uint64_t total_in, total_out, done_b;
    int n_gptq, n_rtn, loaded; /* counts, calibration group held */
    cllm_progress prog;        /* writing the shards */
    char tmp[4096];            /* OUT.tmp-PID while writing, "" otherwise */
} qrun;

/* Options: scheme, group, lm_head, method, OUT must not exist. */
static cllm_status check_opts(qrun *r, cllm_error *err) {
    const cllm_quant_opts *o = r->o;
    int wbits, abits;
    if (!strcmp(o->scheme, "w4a16"))
        wbits = 4, abits = 16;
    else if (!strcmp(o->scheme, "w8a16"))
        wbits = 8, abits = 16;
    else if (!strcmp(o->scheme, "w4a8"))
        wbits = 4, abits = 8;
    else if (!strcmp(o->scheme, "w4a4"))
        wbits = 4, abits = 4;
    else
        return cllm_err_set(err, CLLM_EINVAL, "unsupported scheme '%s' (w4a16|w8a16|w4a8|w4a4)",
                            o->scheme);
    if (o->group <= 0 || o->group % 8)
        return cllm_err_set(err, CLLM_EINVAL,
                            "group size %d: must be a positive multiple of 8 (32, 64, 128)",
                            o->group);
    if (o->lm_head_bits != 4 && o->lm_head_bits != 8 && o->lm_head_bits != 16)
        return cllm_err_set(err, CLLM_EINVAL, "--lm-head: int8, int4 or bf16");
    bool gptq = !strcmp(o->method, "gptq");
    r->wbits = wbits, r->abits = abits, r->gptq = gptq;
    if (!gptq && strcmp(o->method, "rtn"))
        return cllm_err_set(err, CLLM_EINVAL, "unsupported method '%s' (rtn|gptq)", o->method);
    if (gptq && !o->calib)
        return cllm_err_set(err, CLLM_EINVAL, "--method gptq needs --calib FILE");
    struct stat sb;
    if (!stat(o->out_dir, &sb))
        return cllm_err_set(err, CLLM_EINVAL, "%s already exists", o->out_dir);
    return CLLM_OK;
}

/* Shapes the GPTQ layout cannot pack are an error before any write. */
static cllm_status check_units(qrun *r, cllm_error *err) {
    const cllm_quant_opts *o = r->o;
    cllm_status st;
    unit *uv = r->units.v;
    for (size_t i = 0; i < r->units.n; i++) {
        cllm_qbuf q;
        char what[224];
        snprintf(what, sizeof(what), "%s.weight", uv[i].base);
        if ((st = cllm_qbuf_alloc(&q, uv[i].bits, o->group, 8 * o->group, 8, what, err))) return st;
        cllm_qbuf_free(&q);
        if (uv[i].K % o->group) {
            st = cllm_err_set(err, CLLM_EINVAL,
                              "%s: group size %d does not divide in_features %d "
                              "(choose a --group-size dividing it, or --keep it)",
                              what, o->group, uv[i].K);
            return st;
        }
        if (uv[i].N % 8) {
            st = cllm_err_set(err, CLLM_EINVAL,
                              "%s: out_features %d is not a multiple of 8 (--keep it)", what,
                              uv[i].N);
            return st;
        }
    }
    return CLLM_OK;
}

/* The four outputs of each Linear, after the copies, in unit order. */
static cllm_status add_unit_outputs(qrun *r, cllm_error *err) {
    const cllm_quant_opts *o = r->o;
    unit *uv;
    for (size_t i = 0; i < r->units.n; i++)
        for (int p = P_QW; p <= P_GI; p++) {
            outt *x = vpush(&r->outs);
            if (!x) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
            uv = r->units.v;
            snprintf(x->name, sizeof(x->name), "%s.%s", uv[i].base, part_suffix[p]);
            int64_t d0, d1;
            qsizes(&uv[i], o->group, o->scale_bf16, p, &d0, &d1, &x->dt);
            x->n_dims = d1 < 0 ? 1 : 2;
            x->shape[0] = d0;
            x->shape[1] = d1;
            x->nbytes = (uint64_t)d0 * (d1 < 0 ? 1 : (uint64_t)d1) * cllm_dtype_size(x->dt);
            x->part = p;
            x->unit = (int)i;
        }
    return CLLM_OK;
}

/* Refuses an input whose config.json already has a quantization_config, except block FP8, which
 * is read exactly (r->fp8); GPTQ calibration would need a forward pass of it, which cllm does not
 * serve. */
static cllm_status check_input_format(qrun *r, cllm_error *err) {
    const char *in_dir = r->o->in_dir;
    cllm_status st = cllm_qformat_fp8_config(in_dir, r->fp8_block, err);
    if (st == CLLM_OK) {
        r->fp8 = true;
        if (r->gptq)
            return cllm_err_set(err, CLLM_EINVAL,
                                "%s: --method gptq on an FP8 checkpoint (quant_method fp8) is not "
                                "supported: calibration runs the input model, and cllm does not "
                                "serve FP8; use --method rtn, or GPTQ from the BF16 checkpoint",
                                in_dir);
        return CLLM_OK;
    }
    if (st != CLLM_ENOTFOUND) return st;
    char cp[4096];
    snprintf(cp, sizeof(cp), "%s/config.json", in_dir);
    json_t *cj = json_load_file(cp, 0, NULL);
    bool already = cj && json_object_get(cj, "quantization_config");
    json_decref(cj);
    if (already)
        return cllm_err_set(err, CLLM_EINVAL,
                            "%s is already quantized (config.json has quantization_config)",
                            in_dir);
    return CLLM_OK;
}

static bool ends_with(const char *s, size_t l, const char *suffix) {
    size_t n = strlen(suffix);
    return l > n && !strcmp(s + l - n, suffix);
}

/* The Linears of a tensor to quantize: a fused experts tensor gives one unit per expert (gate and
 * up halves of gate_up_proj separately), a 2-D *.weight one unit. 1 = done, 0 = not a Linear (the
 * tensor is copied), -1 = out of memory. */
static int add_units_of(qrun *r, const cllm_tensor *t, int bits) {
    size_t l = strlen(t->name);
    char base[200];
    if (t->n_dims == 3 && ends_with(t->name, l, "mlp.experts.gate_up_proj")) {
        int E = (int)t->shape[0], I2 = (int)t->shape[1], H = (int)t->shape[2];
        for (int e = 0; e < E; e++)
            for (int h = 0; h < 2; h++) {
                snprintf(base, sizeof(base), "%.*s%d.%s", (int)(l - 12), t->name, e,
                         h ? "up_proj" : "gate_proj");
                uint64_t off = ((uint64_t)e * I2 + (uint64_t)h * I2 / 2) * H;
                if (!add_unit(&r->units, &r->outs, t, off, I2 / 2, H, bits, base)) return -1;
            }
        return 1;
    }
    if (t->n_dims == 3 && ends_with(t->name, l, "mlp.experts.down_proj")) {
        int E = (int)t->shape[0], H = (int)t->shape[1], I = (int)t->shape[2];
        for (int e = 0; e < E; e++) {
            snprintf(base, sizeof(base), "%.*s%d.down_proj", (int)(l - 9), t->name, e);
            if (!add_unit(&r->units, &r->outs, t, (uint64_t)e * H * I, H, I, bits, base)) return -1;
        }
        return 1;
    }
    if (t->n_dims == 2 && ends_with(t->name, l, ".weight")) {
        snprintf(base, sizeof(base), "%.*s", (int)(l - 7), t->name);
        return add_unit(&r->units, &r->outs, t, 0, (int)t->shape[0], (int)t->shape[1], bits, base)
                   ? 1
                   : -1;
    }
    return 0;
}

/* An FP8 tensor kept unquantized: written BF16 (the f32 dequantization rounded once more). */
static bool add_deq(qrun *r, const cllm_tensor *t, const cllm_tensor *sinv) {
    outt *x = vpush(&r->outs);
    if (!x) return false;
    *x = (outt){.dt = CLLM_DT_BF16, .n_dims = 2, .part = P_DEQ, .src = t, .sinv = sinv, .unit = -1};
    snprintf(x->name, sizeof(x->name), "%s", t->name);
    x->shape[0] = t->shape[0], x->shape[1] = t->shape[1];
    x->nbytes = (uint64_t)t->shape[0] * t->shape[1] * 2;
    return true;
}

/* FP8 input: the weight_scale_inv of F8_E4M3 tensor t, checked (2-D P.weight, F32 [ceil(N/bn)]
 * [ceil(K/bk)]). */
static cllm_status fp8_scale_of(const qrun *r, const cllm_tensor *t, const cllm_tensor **sinv,
                                cllm_error *err) {
    size_t l = strlen(t->name);
    char name[256], got[96];
    if (!r->fp8)
        return cllm_err_set(err, CLLM_EFORMAT,
                            "tensor %s: F8_E4M3 but config.json has no quantization_config with "
                            "quant_method fp8 (its weight_block_size gives the scales' blocks)",
                            t->name);
    if (t->n_dims != 2 || !ends_with(t->name, l, ".weight"))
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "tensor %s: F8_E4M3 tensors must be 2-D Linear weights (P.weight "
                            "[out][in]; fused 3-D FP8 experts are not supported)",
                            t->name);
    snprintf(name, sizeof(name), "%.*s_scale_inv", (int)l, t->name);
    const cllm_tensor *s = cllm_ckpt_get(r->ck, name);
    int64_t nb = (t->shape[0] + r->fp8_block[0] - 1) / r->fp8_block[0],
            kb = (t->shape[1] + r->fp8_block[1] - 1) / r->fp8_block[1];
    if (!s)
        return cllm_err_set(err, CLLM_EFORMAT, "tensor %s: F8_E4M3 weight without %s", t->name,
                            name);
    if (s->dtype != CLLM_DT_F32 || s->n_dims != 2 || s->shape[0] != nb || s->shape[1] != kb) {
        cllm_shape_str(s->shape, s->n_dims, got, sizeof(got));
        return cllm_err_set(err, CLLM_EFORMAT,
                            "tensor %s: %s %s, expected F32 [%lld, %lld] (weight_block_size [%d, "
                            "%d] over %s [%lld, %lld])",
                            name, cllm_dtype_name(s->dtype), got, (long long)nb, (long long)kb,
                            r->fp8_block[0], r->fp8_block[1], t->name, (long long)t->shape[0],
                            (long long)t->shape[1]);
    }
    *sinv = s;
    return CLLM_OK;
}

/* FP8 input: t is consumed with its weight (P.weight_scale_inv, or the static-activation
 * P.input_scale, which W4A16 does not use) when P.weight is F8_E4M3. */
static bool fp8_aux(const qrun *r, const cllm_tensor *t) {
    static const char *const suf[] = {".weight_scale_inv", ".input_scale"};
    size_t l = strlen(t->name);
    for (int i = 0; r->fp8 && i < 2; i++)
        if (ends_with(t->name, l, suf[i])) {
            char name[256];
            snprintf(name, sizeof(name), "%.*s.weight", (int)(l - strlen(suf[i])), t->name);
            const cllm_tensor *w = cllm_ckpt_get(r->ck, name);
            return w && w->dtype == CLLM_DT_F8_E4M3;
        }
    return false;
}

/* An output copied from the input as it is. */
static bool add_copy(qrun *r, const cllm_tensor *t) {
    outt *x = vpush(&r->outs);
    if (!x) return false;
    snprintf(x->name, sizeof(x->name), "%s", t->name);
    x->dt = t->dtype;
    x->n_dims = t->n_dims;
    for (int d = 0; d < t->n_dims && d < CLLM_ST_MAX_DIMS; d++) x->shape[d] = t->shape[d];
    x->nbytes = t->nbytes;
    x->part = P_COPY;
    x->src = t;
    x->unit = -1;
    return true;
}

/* 1. Decides every tensor, in natural name order: copied as is (the keep globs, non-float
 * tensors, bits 16), or Linears (a fused expert tensor gives one per expert) to quantize into four
 * GPTQ outputs each; shapes the layout cannot pack are refused before any write. */
static cllm_status plan_tensors(qrun *r, cllm_error *err) {
    const cllm_quant_opts *o = r->o;
    cllm_status st;
    if ((st = check_input_format(r, err))) return st;
    if ((st = cllm_ckpt_open(o->in_dir, false, &r->ck, err))) return st;
    if (add_globs(&r->gl, "*embed_tokens*", false) ||
        (!o->no_default_keep && add_globs(&r->gl, cllm_qformat_default_keep, false)) ||
        add_globs(&r->gl, o->preset_keep, false) || add_globs(&r->gl, o->keep, true))
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    cllm_ckpt_foreach(r->ck, collect_t, &r->tens);
    qsort(r->tens.v, r->tens.n, sizeof(const cllm_tensor *), cmp_tensor);
    const cllm_tensor **tv = r->tens.v;
    for (size_t i = 0; i < r->tens.n; i++) {
        const cllm_tensor *t = tv[i], *sinv = NULL;
        if (fp8_aux(r, t)) continue;
        if (t->dtype == CLLM_DT_F8_E4M3 && (st = fp8_scale_of(r, t, &sinv, err))) return st;
        bool is_float =
            t->dtype == CLLM_DT_F32 || t->dtype == CLLM_DT_F16 || t->dtype == CLLM_DT_BF16 || sinv;
        bool keep = kept(&r->gl, t->name) || !is_float;
        int bits = !strcmp(t->name, "lm_head.weight") ? o->lm_head_bits : r->wbits;
        int u = keep || bits >= 16 ? 0 : add_units_of(r, t, bits);
        if (u > 0 && sinv) { /* one 2-D unit: its rows are read through the block scales */
            unit *un = (unit *)r->units.v + r->units.n - 1;
            un->sinv = sinv, un->bn = r->fp8_block[0], un->bk = r->fp8_block[1];
        }
        if (u < 0 || (u == 0 && !(sinv ? add_deq(r, t, sinv) : add_copy(r, t))))
            return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    for (int i = 0; i < r->gl.n; i++)
        if (r->gl.user[i] && !r->gl.hits[i])
            fprintf(stderr, "warning: --keep glob '%s' matches no tensor\n", r->gl.g[i]);
    if ((st = check_units(r, err))) return st;
    return add_unit_outputs(r, err);
}

/* 2. Shard layout (a Linear's four parts stay in one shard) and the byte totals. */
static cllm_status layout_shards(qrun *r, cllm_error *err) {
    const cllm_quant_opts *o = r->o;
    cllm_status st = CLLM_OK;
    outt *ov = r->outs.v;
    const cllm_tensor **tv = r->tens.v;
    r->ents = calloc(r->outs.n ? r->outs.n : 1, sizeof(*r->ents));
    if (!r->ents) {
        st = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        return st;
    }
    for (size_t i = 0; i < r->outs.n; i++) { /* a Linear's four parts stay in one shard */
        r->ents[i] = (cllm_st_entry){.name = ov[i].name,
                                     .dtype = ov[i].dt,
                                     .n_dims = ov[i].n_dims,
                                     .nbytes = ov[i].nbytes,
                                     .with_next = ov[i].part >= P_QW && ov[i].part < P_GI};
        for (int d = 0; d < ov[i].n_dims; d++) r->ents[i].shape[d] = ov[i].shape[d];
        r->total_out += ov[i].nbytes;
    }
    r->n_shards = cllm_st_layout(r->ents, r->outs.n, o->shard_bytes);
    for (size_t i = 0; i < r->outs.n; i++) ov[i].shard = r->ents[i].shard;
    for (size_t i = 0; i < r->tens.n; i++) r->total_in += tv[i]->nbytes;
    return st;
}

/* The plan: bytes before and after by tensor group, precisions, shards. */
static void print_plan(qrun *r) {
    const cllm_quant_opts *o = r->o;
    const cllm_tensor **tv = r->tens.v;
    outt *ov = r->outs.v;
    unit *uv = r->units.v;
    const char *gn[16];
    uint64_t gb[16] = {0}, ga[16] = {0};
    int gq4[16] = {0}, gq8[16] = {0}, gk[16] = {0}, ng = 0;
    for (size_t i = 0; i < r->tens.n; i++) { /* bytes before */
        const char *g = group_of(tv[i]->name);
        int k = 0;
        while (k < ng && strcmp(gn[k], g)) k++;
        if (k == ng && ng < 16) gn[ng++] = g;
        if (k < 16) gb[k] += tv[i]->nbytes;
    }
    for (size_t i = 0; i < r->outs.n; i++) {
        const char *g = group_of(ov[i].name);
        int k = 0;
        while (k < ng && strcmp(gn[k], g)) k++;
        if (k == ng) continue;
        ga[k] += ov[i].nbytes;
        if (ov[i].part == P_QW) {
            if (uv[ov[i].unit].bits == 4)
                gq4[k]++;
            else
                gq8[k]++;
        }
        if (ov[i].part == P_COPY || ov[i].part == P_DEQ) gk[k]++;
    }
    fprintf(r->out,
            "quantize %s -> %s: scheme %s (weights int%d, activations %s), group %d, "
            "%s, %s scales, method %s, lm_head %s\n",
            o->in_dir, o->out_dir, o->scheme, r->wbits,
            r->abits == 16  ? "float"
            : r->abits == 8 ? "int8 (emulated)"
                            : "int4 (emulated)",
            o->group, o->asym ? "asymmetric" : "symmetric", o->scale_bf16 ? "bf16" : "fp16",
            o->method,
            o->lm_head_bits == 16  ? "kept 16-bit"
            : o->lm_head_bits == 8 ? "int8"
                                   : "int4");
    fprintf(r->out, "%-14s %-26s %12s %12s\n", "group", "precision", "before", "after");
    for (int k = 0; k < ng; k++) {
        char p[64], a[32], b[32];
        int n = 0;
        p[0] = 0;
        if (gq4[k]) n += snprintf(p + n, sizeof(p) - n, "%d int4 ", gq4[k]);
        if (gq8[k]) n += snprintf(p + n, sizeof(p) - n, "%d int8 ", gq8[k]);
        if (gk[k]) snprintf(p + n, sizeof(p) - n, "%d kept", gk[k]);
        cllm_fmt_bytes(b, sizeof(b), gb[k]);
        cllm_fmt_bytes(a, sizeof(a), ga[k]);
        fprintf(r->out, "%-14s %-26s %12s %12s\n", gn[k], p, b, a);
    }
    char a[32], b[32];
    cllm_fmt_bytes(b, sizeof(b), r->total_in);
    cllm_fmt_bytes(a, sizeof(a), r->total_out);
    fprintf(r->out, "%-14s %-26s %12s %12s  (%.2fx smaller), %d shard%s\n", "total", "", b, a,
            (double)r->total_in / (double)(r->total_out ? r->total_out : 1), r->n_shards,
            r->n_shards > 1 ? "s" : "");
    fflush(r->out);
}

/* Removes OUT.tmp-PID folders that runs killed before their rename left beside OUT (their
 * space counts in check_disk); a folder whose writer still runs is kept. */
static void sweep_stale(const cllm_quant_opts *o) {
    char pd[4096], bd[4096];
    snprintf(pd, sizeof(pd), "%s", o->out_dir);
    size_t n = strlen(pd);
    while (n > 1 && pd[n - 1] == '/') pd[--n] = 0;
    snprintf(bd, sizeof(bd), "%s", pd);
    cllm_tmp_sweep_spec sp = {
        .dir = dirname(pd), .stem = basename(bd), .folders = true, .who = "quantize"};
    cllm_tmp_sweep(&sp, NULL);
}

/* 3. Refuses to start when the file system lacks the output's size (+1% and 16 MiB). */
static cllm_status check_disk(qrun *r, cllm_error *err) {
    const cllm_quant_opts *o = r->o;
    cllm_status st = CLLM_OK;
    char pd[4096];
    snprintf(pd, sizeof(pd), "%s", o->out_dir);
    const char *parent = dirname(pd);
    struct statvfs vf;
    if (!statvfs(parent, &vf)) {
        uint64_t avail = (uint64_t)vf.f_bavail * vf.f_frsize;
        uint64_t need = r->total_out + r->total_out / 100 + (16u << 20);
        if (o->fake_avail) avail = o->fake_avail;
        if (avail < need) {
            char a[32], b[32];
            cllm_fmt_bytes(a, sizeof(a), avail);
            cllm_fmt_bytes(b, sizeof(b), need);
            st = cllm_err_set(err, CLLM_EIO, "not enough disk space in %s: %s free, %s needed",
                              parent, a, b);
            return st;
        }
    }
    return st;
}

/* GPTQ: one calibration run counting the tokens each Linear sees, then the calibration groups
 * that fit the Hessian budget. */
static cllm_status calibrate(qrun *r, cllm_error *err) {
    const cllm_quant_opts *o = r->o;
    unit *uv = r->units.v;
    cllm_status st = CLLM_OK;
    if (r->gptq) {
        cllm_gptq_opts go = {.calib = o->calib,
                             .samples = o->calib_samples,
                             .seq_len = o->calib_seq_len,
                             .min_tokens = o->min_expert_tokens,
                             .damp = o->damp,
                             .threads = o->threads,
                             .progress = o->progress ? stderr : NULL, /* -q: no calibration lines */
                             .tty = o->tty,
                             .fwd = o->fwd};
        if ((st = cllm_gptq_calibrate(o->in_dir, &go, &r->gq, err))) return st;
        if ((st = plan_groups(o, r->gq, uv, r->units.n, &r->ugrp, r->out, err))) return st;
    }
    return st;
}

/* GPTQ or RTN codes of unit ui into q; with GPTQ, the first Linear of a calibration group runs
 * that group's pass (Hessians of all its Linears at once). */
static cllm_status quantize_unit(qrun *r, int ui, cllm_qbuf *q, cllm_error *err) {
    const cllm_quant_opts *o = r->o;
    unit *uv = r->units.v, *u = &uv[ui];
    cllm_status st;
    if ((st = cllm_qbuf_alloc(q, u->bits, o->group, u->K, u->N, u->base, err))) return st;
    q->asym = o->asym;
    q->scale_bf16 = o->scale_bf16;
    const float *H = NULL;
    int ntok = 0, ug = r->ugrp ? r->ugrp[ui] : -1;
    if (ug >= 0 && ug != r->loaded) { /* next group: one calibration pass */
        cllm_gptq_release(r->gq);
        for (size_t j = 0; j < r->units.n; j++)
            if (r->ugrp[j] == ug) cllm_gptq_mark(r->gq, uv[j].src->name, uv[j].off, uv[j].K);
        cllm_progress_break(&r->prog); /* the pass draws its own progress */
        if ((st = cllm_gptq_pass(r->gq, err))) return st;
        r->loaded = ug;
    }
    if (r->gq) H = cllm_gptq_hessian(r->gq, u->src->name, u->off, u->K, &ntok);
    if (H) {
        float *W = malloc((size_t)u->N * u->K * sizeof(float));
        if (!W) {
            st = cllm_err_set(err, CLLM_ENOMEM, "out of memory for %s", u->base);
            return st;
        }
        st = src_rows(u, 0, u->N, W, err);
        if (!st) st = cllm_gptq_quantize_with(r->gq, W, H, o->damp, q, err);
        free(W);
        if (st) return st;
        r->n_gptq++;
    } else {
        float *W = malloc((size_t)64 * u->K * sizeof(float));
        if (!W) {
            st = cllm_err_set(err, CLLM_ENOMEM, "out of memory for %s", u->base);
            return st;
        }
        for (int n0 = 0; n0 < u->N; n0 += 64) {
            int n1 = n0 + 64 < u->N ? n0 + 64 : u->N;
            if ((st = src_rows(u, n0, n1, W, err))) break;
            cllm_quant_rtn_rows(W, (size_t)u->K, n0, n1, q);
        }
        free(W);
        if (st) return st;
        r->n_rtn++;
    }
    r->done_b += (uint64_t)u->N * u->K * cllm_dtype_size(u->src->dtype);
    return CLLM_OK;
}

/* A P_DEQ output: the FP8 tensor dequantized, 64 rows at a time, as BF16. */
static cllm_status write_deq(qrun *r, const outt *x, FILE *f, cllm_error *err) {
    const cllm_tensor *t = x->src;
    int N = (int)t->shape[0], K = (int)t->shape[1];
    float *row = malloc((size_t)64 * K * sizeof(float));
    uint16_t *h = malloc((size_t)64 * K * sizeof(uint16_t));
    cllm_status st = row && h ? CLLM_OK : cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    for (int n0 = 0; !st && n0 < N; n0 += 64) {
        int n1 = n0 + 64 < N ? n0 + 64 : N;
        size_t m = (size_t)(n1 - n0) * K;
        int64_t bad = fp8_rows(t, x->sinv, r->fp8_block[0], r->fp8_block[1], K, n0, n1, row);
        if (bad >= 0) {
            st = fp8_nan(t, bad, K, err);
            break;
        }
        cllm_f32_to_bf16_row(row, h, m);
        if (fwrite(h, 2, m, f) != m) st = cllm_err_set(err, CLLM_EIO, "write failed (disk full?)");
    }
    free(row);
    free(h);
    r->done_b += t->nbytes + x->sinv->nbytes;
    return st;
}

/* Shard s: header, then each output in order (copies from the input's mmap, quantized parts
 * from q, which holds one Linear at a time), with the progress bar. */
static cllm_status write_shard(qrun *r, int s, cllm_qbuf *q, cllm_error *err) {
    outt *ov = r->outs.v;
    cllm_status st;
    char name[64], path[4200];
    cllm_st_shard_name(s, r->n_shards, false, name, sizeof(name));
    snprintf(path, sizeof(path), "%s/%s", r->tmp, name);
    FILE *f = fopen(path, "wb");
    if (!f) return cllm_err_set(err, CLLM_EIO, "cannot write %s", path);
    static const char *const meta[] = {"quantized_by", "cllm", NULL};
    bool ok = (st = cllm_st_write_header(f, r->ents, r->outs.n, s, meta, path, err)) == CLLM_OK;
    for (size_t i = 0; ok && i < r->outs.n; i++) {
        if (ov[i].shard != s) continue;
        if (ov[i].part == P_COPY) {
            ok = fwrite(ov[i].src->data, 1, ov[i].nbytes, f) == ov[i].nbytes;
            r->done_b += ov[i].nbytes;
        } else if (ov[i].part == P_DEQ) {
            if ((st = write_deq(r, &ov[i], f, err))) break;
        } else {
            if (ov[i].part == P_QW && (st = quantize_unit(r, ov[i].unit, q, err))) break;
            const void *p = ov[i].part == P_QW   ? (const void *)q->qweight
                            : ov[i].part == P_QZ ? (const void *)q->qzeros
                            : ov[i].part == P_SC ? (const void *)q->scales
                                                 : (const void *)q->g_idx;
            ok = fwrite(p, 1, ov[i].nbytes, f) == ov[i].nbytes;
            if (ov[i].part == P_GI) cllm_qbuf_free(q);
        }
        char d[32], t[32], line[80];
        cllm_fmt_bytes(d, sizeof(d), r->done_b);
        cllm_fmt_bytes(t, sizeof(t), r->total_in);
        snprintf(line, sizeof(line), "%s of %s", d, t);
        cllm_progress_update(&r->prog, (double)r->done_b, (double)r->total_in, line);
    }
    if (fclose(f)) ok = false;
    if (st == CLLM_OK && !ok)
        st = cllm_err_set(err, CLLM_EIO, "%s: write failed (disk full?)", path);
    return st;
}

/* 4. Writes the shards into r->tmp, then the index, config.json and the other files, and renames
 * r->tmp to OUT. */
static cllm_status write_output(qrun *r, cllm_error *err) {
    const cllm_quant_opts *o = r->o;
    cllm_status st = CLLM_OK;
    cllm_progress_init(&r->prog, o->progress ? stderr : NULL, o->tty, 10, 30, "quantize");
    r->loaded = -1;
    if (!cllm_tmp_path(r->tmp, sizeof(r->tmp), o->out_dir)) {
        r->tmp[0] = 0;
        return cllm_err_set(err, CLLM_EINVAL, "%s: path too long", o->out_dir);
    }
    if (mkdir(r->tmp, 0755)) {
        st = cllm_err_set(err, CLLM_EIO, "cannot create %s: %s", r->tmp, strerror(errno));
        r->tmp[0] = 0;
        return st;
    }
    time_t t0 = time(NULL);
    cllm_qbuf q = {0};
    for (int s = 0; s < r->n_shards && st == CLLM_OK; s++) st = write_shard(r, s, &q, err);
    cllm_qbuf_free(&q);
    cllm_progress_break(&r->prog);
    if (st) return st;
    if ((st = cllm_st_write_index(r->tmp, r->ents, r->outs.n, r->n_shards, false, err))) return st;
    if ((st = write_config(o, r->tmp, r->wbits, r->abits, &r->gl, err))) return st;
    if ((st = copy_aux(o->in_dir, r->tmp, err))) return st;
    if (rename(r->tmp, o->out_dir)) {
        st =
            cllm_err_set(err, CLLM_EIO, "rename %s -> %s: %s", r->tmp, o->out_dir, strerror(errno));
        return st;
    }
    r->tmp[0] = 0;
    char a[32], b[32];
    cllm_fmt_bytes(b, sizeof(b), r->total_in);
    cllm_fmt_bytes(a, sizeof(a), r->total_out);
    fprintf(r->out, "done: %zu linears quantized (%d gptq, %d rtn%s), %s -> %s in %lds: %s\n",
            r->units.n, r->n_gptq, r->n_rtn, r->gq ? cllm_gptq_summary(r->gq) : "", b, a,
            (long)(time(NULL) - t0), o->out_dir);
    return CLLM_OK;
}

static void qrun_free(qrun *r) {
    if (r->tmp[0]) (void)cllm_remove_folder(r->tmp);
    cllm_gptq_free(r->gq);
    free(r->ugrp);
    free(r->ents);
    for (int i = 0; i < r->gl.n; i++) free(r->gl.g[i]);
    free(r->gl.g), free(r->gl.hits), free(r->gl.user);
    free(r->tens.v), free(r->units.v), free(r->outs.v);
    cllm_ckpt_close(r->ck);
    cllm_config_free(&r->cfg);
}

/* The driver: options, plan, layout, the printed plan, disk space, GPTQ calibration, write. */
cllm_status cllm_quantize(const cllm_quant_opts *o, cllm_error *err) {
    qrun r = {.o = o,
              .out = o->out ? o->out : stdout,
              .tens = {.es = sizeof(const cllm_tensor *)},
              .units = {.es = sizeof(unit)},
              .outs = {.es = sizeof(outt)}};
    cllm_status st = check_opts(&r, err);
    if (st) return st;
    if ((st = cllm_config_load(o->in_dir, &r.cfg, err))) return st;
    if (!(st = plan_tensors(&r, err)) && !(st = layout_shards(&r, err))) {
        print_plan(&r);
        if (!o->dry_run) sweep_stale(o);
        if (!o->dry_run && !(st = check_disk(&r, err)) && !(st = calibrate(&r, err)))
            st = write_output(&r, err);
    }
    qrun_free(&r);
    return st;
}
