/* Weight binding for the forward pass: opens a model directory, validates every tensor the
 * config implies (model/tensor_plan.c is the list of names and shapes) and binds each one in
 * place in the safetensors mmap, walking the same tables (model/tensor_table.c: per block type,
 * each row's destination a field of its block's struct in fwd_layer, or of cllm_model). Small
 * vectors (norms, conv taps, A_log, dt_bias, biases) are converted to fp32 copies owned by the
 * model; matrices stay in their stored dtype.
 *
 * Called by cllm_model_load() users (cli/cmd_generate.c, cmd_eval.c, the engine). Experts are
 * bound one by one through fwd_mlp views (fused [E][2I][H] tensors are sliced per expert), so a
 * later multi-process build can bind a subset of experts by leaving the others NULL. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/half.h"
#include "base/log.h"
#include "base/threadpool.h"
#include "base/mem.h"
#include "dist/dist.h"
#include "model/qformat.h"
#include "model/tensor_plan.h"
#include "model/tensor_table_int.h"
#include "model/vision_int.h"
#include "model/weights_int.h"

typedef struct check_ctx {
    const cllm_ckpt *ck;
    cllm_error *err;
    cllm_status st;
    size_t n_optional_found;
    size_t n_vision_found; /* of n_optional_found: the vision tower's */
    unsigned qfmt;         /* cllm_qformat_check_config flags (AWQ: P.qweight is AutoAWQ's) */
} check_ctx;

static void check_one(void *vc, const cllm_tensor_spec *s) {
    check_ctx *c = vc;
    if (c->st != CLLM_OK) return;
    const cllm_tensor *t = cllm_ckpt_get(c->ck, s->name);
    size_t nl = strlen(s->name);
    if (!t && s->n_dims == 2 && nl > 7 && !strcmp(s->name + nl - 7, ".weight")) {
        /* a quantized Linear: GPTQ P.qweight/qzeros/scales[/g_idx] or compressed-tensors
         * P.weight_packed/weight_scale[/weight_zero_point] instead of P.weight */
        char base[160];
        snprintf(base, sizeof(base), "%.*s", (int)(nl - 7), s->name);
        cllm_qweight q;
        cllm_status qs = cllm_qformat_bind_any(c->ck, base, (int)s->shape[0], (int)s->shape[1],
                                               c->qfmt, NULL, NULL, &q, c->err);
        if (qs == CLLM_OK && s->optional) c->n_optional_found++;
        if (qs == CLLM_OK && s->group == CLLM_TG_VISION) c->n_vision_found++;
        if (qs != CLLM_ENOTFOUND) {
            c->st = qs;
            return;
        }
    }
    if (!t) {
        if (!s->optional)
            c->st = cllm_err_set(c->err, CLLM_ENOTFOUND, "missing tensor %s", s->name);
        return;
    }
    if (s->optional) c->n_optional_found++;
    if (s->group == CLLM_TG_VISION) c->n_vision_found++;
    bool same = t->n_dims == s->n_dims;
    for (int i = 0; same && i < s->n_dims; i++) same = t->shape[i] == s->shape[i];
    if (!same) {
        char want[96], got[96];
        cllm_shape_str(s->shape, s->n_dims, want, sizeof(want));
        cllm_shape_str(t->shape, t->n_dims, got, sizeof(got));
        c->st = cllm_err_set(c->err, CLLM_EFORMAT, "tensor %s: expected shape %s, got %s", s->name,
                             want, got);
        return;
    }
    /* F64: a GGUF's norms and A_log, vectors read element by element (model/gguf_ckpt.h) */
    bool f64_vec = t->dtype == CLLM_DT_F64 && t->n_dims == 1;
    if (t->dtype != CLLM_DT_F32 && t->dtype != CLLM_DT_F16 && t->dtype != CLLM_DT_BF16 &&
        !f64_vec && !t->kq_type)
        c->st = cllm_err_set(c->err, CLLM_EUNSUPPORTED,
                             "tensor %s: dtype %s not supported "
                             "(F32, F16, BF16)",
                             s->name, cllm_dtype_name(t->dtype));
}

/* Zeroed memory the model owns until cllm_model_free: ordinary (vectors, sliced copies) or, for
 * the weight panels, on huge pages (cllm_alloc_huge); every block is a base/mem.c one, so one
 * list and one free serve both. */
static void *own_with(cllm_model *m, size_t bytes, void *(*alloc)(size_t)) {
    if (m->n_allocs == m->cap_allocs) {
        size_t nc = m->cap_allocs ? 2 * m->cap_allocs : 64;
        void **na = realloc(m->allocs, nc * sizeof(*na));
        if (!na) return NULL;
        m->allocs = na;
        m->cap_allocs = nc;
    }
    void *p = alloc(bytes);
    if (p) m->allocs[m->n_allocs++] = p;
    return p;
}
static void *own(cllm_model *m, size_t bytes) {
    return own_with(m, bytes, cllm_alloc_zeroed);
}
static void *own_huge(cllm_model *m, size_t bytes) {
    return own_with(m, bytes, cllm_alloc_huge);
}

void *fwd_model_own(cllm_model *m, size_t bytes) {
    return own(m, bytes);
}

static void *own_cb(void *m, size_t bytes) {
    return own(m, bytes);
}

/* Binding helpers; names were validated by the plan pass, the element count is rechecked. */
typedef struct binder {
    cllm_model *m;
    cllm_error *err;
    cllm_status st;
    int act_bits;  /* quantization_config.cllm_act_bits (16 = float activations) */
    unsigned qfmt; /* CLLM_QUANT_* flags from cllm_qformat_check_config */
} binder;

static const cllm_tensor *get(binder *b, uint64_t n_elems, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static const cllm_tensor *get(binder *b, uint64_t n_elems, const char *fmt, ...) {
    if (b->st != CLLM_OK) return NULL;
    char name[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    const cllm_tensor *t = cllm_ckpt_get(b->m->ckpt, name);
    if (!t) {
        b->st = cllm_err_set(b->err, CLLM_ENOTFOUND, "missing tensor %s", name);
        return NULL;
    }
    if (t->n_elems != n_elems) {
        b->st = cllm_err_set(b->err, CLLM_EFORMAT, "tensor %s: expected %llu elements, got %llu",
                             name, (unsigned long long)n_elems, (unsigned long long)t->n_elems);
        return NULL;
    }
    return t;
}

static fwd_wt wt_of(const cllm_tensor *t, int rows, int cols) {
    fwd_wt w = {0};
    if (t) {
        w.data = t->data;
        w.dt = t->dtype;
        w.rows = rows;
        w.cols = cols;
        w.src = t->name;
    }
    return w;
}

/* fp32 copy of a vector, plus `add` (1 for (1 + w) norms). */
static float *vec_of(binder *b, const cllm_tensor *t, size_t n, float add) {
    if (!t) return NULL;
    float *v = own(b->m, n * sizeof(float));
    if (!v) {
        b->st = cllm_err_set(b->err, CLLM_ENOMEM, "out of memory binding %s", t->name);
        return NULL;
    }
    /* the sum in double, rounded once: a GGUF's norm comes as F64 v - 1 (gguf_ckpt.h) and must
     * give back v; for 16-bit w the result is (float)w + add's */
    for (size_t i = 0; i < n; i++) v[i] = (float)(cllm_tensor_elem(t, i) + add);
    return v;
}

/* A matrix: P.weight, or its GPTQ tensors (P.qweight, ...) when the checkpoint is quantized. */
static fwd_wt mat(binder *b, int rows, int cols, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static fwd_wt mat(binder *b, int rows, int cols, const char *fmt, ...) {
    fwd_wt w = {0};
    if (b->st != CLLM_OK) return w;
    char name[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    size_t nl = strlen(name);
    if (!cllm_ckpt_get(b->m->ckpt, name) && nl > 7 && !strcmp(name + nl - 7, ".weight")) {
        name[nl - 7] = 0;
        cllm_status qs = cllm_qformat_bind_any(b->m->ckpt, name, rows, cols, b->qfmt, own_cb, b->m,
                                               &w.q, b->err);
        if (qs == CLLM_OK) {
            w.q.act_bits = b->act_bits;
            w.q.zero_const = cllm_qformat_uniform_zero(&w.q);
            w.data = w.q.qweight;
            w.dt = CLLM_DT_I32;
            w.rows = rows;
            w.cols = cols;
            return w;
        }
        if (qs != CLLM_ENOTFOUND) {
            b->st = qs;
            return w;
        }
        name[nl - 7] = '.';
    }
    const cllm_tensor *t = get(b, (uint64_t)rows * (uint64_t)cols, "%s", name);
    if (t && t->kq_type) { /* ggml blocks in place (model/gguf_ckpt.c checked the shape) */
        w.data = t->data;
        w.dt = CLLM_DT_U8;
        w.rows = rows;
        w.cols = cols;
        w.src = t->name;
        w.kq =
            (cllm_kqweight){t->data, (size_t)(t->nbytes / (uint64_t)rows), t->kq_type, cols, rows};
        return w;
    }
    w = wt_of(t, rows, cols);
    if (t && (uintptr_t)t->data % cllm_dtype_size(t->dtype)) {
        /* the kernels load F32/F16/BF16 elements in place: a tensor misaligned in the file (an
         * unpadded header or an odd-sized tensor before it) gets an aligned copy */
        void *copy = own(b->m, t->nbytes);
        if (!copy) {
            b->st = cllm_err_set(b->err, CLLM_ENOMEM, "out of memory copying %s", name);
            return (fwd_wt){0};
        }
        memcpy(copy, t->data, t->nbytes);
        w.data = copy;
        LOG_WARN("tensor %s: data not aligned to its %zu-byte elements in %s; using a copy", name,
                 cllm_dtype_size(t->dtype), t->file);
    }
    return w;
}

#define MAT(rows, cols, ...) mat(&B, rows, cols, __VA_ARGS__)

fwd_wt fwd_bind_mat(binder *b, int rows, int cols, const char *name) {
    return mat(b, rows, cols, "%s", name);
}
float *fwd_bind_vec(binder *b, size_t n, const char *name) {
    return vec_of(b, get(b, (uint64_t)n, "%s", name), n, 0.0f);
}
cllm_status fwd_bind_status(const binder *b) {
    return b->st;
}

static void bind_mlp(binder *b, fwd_mlp *o, const char *lp, const char *what, int H, int I) {
    binder B = *b;
    o->gate = MAT(I, H, "%s%s.gate_proj.weight", lp, what);
    o->up = MAT(I, H, "%s%s.up_proj.weight", lp, what);
    o->down = MAT(H, I, "%s%s.down_proj.weight", lp, what);
    *b = B;
}

/* The routed experts (a TT_EXPERTS row named base): one fwd_mlp view each, slices of the fused
 * [E][2I][H] and [E][H][I] tensors or the per-expert ones. */
static void bind_experts(binder *bp, fwd_mlp **out, const char *lp, const char *base, bool fused) {
    binder B = *bp;
    const cllm_config *c = &B.m->cfg;
    int E = c->n_experts, I = c->moe_intermediate_size, H = c->hidden_size;
    fwd_mlp *ex = *out = own(B.m, (size_t)E * sizeof(fwd_mlp));
    if (!ex && B.st == CLLM_OK) B.st = cllm_err_set(B.err, CLLM_ENOMEM, "out of memory");
    if (B.st == CLLM_OK && fused) {
        fwd_wt gu = MAT(E, 2 * I * H, "%s%s.gate_up_proj", lp, base);
        fwd_wt dn = MAT(E, H * I, "%s%s.down_proj", lp, base);
        if (B.st == CLLM_OK) {
            size_t es = cllm_dtype_size(gu.dt), ds = cllm_dtype_size(dn.dt);
            for (int e = 0; e < E; e++) {
                fwd_mlp *x = &ex[e];
                const char *g = (const char *)gu.data + (size_t)e * 2 * I * H * es;
                x->gate = (fwd_wt){g, gu.dt, I, H};
                x->up = (fwd_wt){g + (size_t)I * H * es, gu.dt, I, H};
                x->down = (fwd_wt){(const char *)dn.data + (size_t)e * H * I * ds, dn.dt, H, I};
                x->gate.src = x->up.src = gu.src, x->down.src = dn.src;
                x->gate.src_off = (uint64_t)e * 2 * I * H;
                x->up.src_off = x->gate.src_off + (uint64_t)I * H;
                x->down.src_off = (uint64_t)e * H * I;
            }
        }
    } else if (B.st == CLLM_OK) {
        for (int e = 0; e < E && B.st == CLLM_OK; e++) {
            char what[64];
            snprintf(what, sizeof(what), "%s.%d", base, e);
            bind_mlp(&B, &ex[e], lp, what, H, I);
        }
    }
    *bp = B;
}

/* Binds the present rows of block blk (model/tensor_table.c) into dst + each row's offset: a
 * matrix in place, a vector as an fp32 copy ((1 + w) for the norms that store w), the routed
 * experts by bind_experts. lp: the layer's prefix (or the model's weight_prefix). */
static void bind_block(binder *b, const tt_block *blk, void *dst, const char *lp, bool fused) {
    const cllm_config *c = &b->m->cfg;
    for (size_t i = 0; i < blk->n && b->st == CLLM_OK; i++) {
        const tt_row *r = &blk->rows[i];
        if (!tt_present(c, r)) continue;
        char name[200];
        snprintf(name, sizeof(name), "%s%s", r->top ? "" : lp, r->name);
        void *at = (char *)dst + r->off;
        if (r->kind == TT_EXPERTS) {
            bind_experts(b, at, lp, r->name, fused);
            continue;
        }
        if (r->kind == TT_MAT) {
            *(fwd_wt *)at =
                mat(b, (int)tt_dim(c, r->dims[0]), (int)tt_dim(c, r->dims[1]), "%s", name);
            continue;
        }
        size_t n = 1;
        for (int d = 0; d < r->nd; d++) n *= (size_t)tt_dim(c, r->dims[d]);
        float add = r->kind == TT_NORM_1P || (r->kind == TT_NORM && c->norm_one_plus) ? 1.0f : 0.0f;
        float *v = vec_of(b, get(b, (uint64_t)n, "%s", name), n, add);
        if (v && r->neg_exp)
            for (size_t h = 0; h < n; h++) v[h] = (float)-exp((double)v[h]);
        *(float **)at = v;
    }
}

/* Binds one decoder layer: the blocks its architecture's builder lists (model/tensor_table.c).
 * count = false for MTP layers (not part of the KV/state pools). */
static void bind_layer(binder *b, fwd_layer *L, const char *lp, cllm_layer_type type, bool moe,
                       bool fused, bool count) {
    cllm_model *m = b->m;
    const tt_block *bl[TT_MAX_BLOCKS];
    int n = tt_layer_blocks(&m->cfg, type, moe, bl);
    L->type = CLLM_LAYER_FULL_ATTN;
    for (int i = 0; i < n; i++) {
        if (bl[i]->role == TB_GDN) L->type = CLLM_LAYER_LINEAR_ATTN;
        if (bl[i]->role == TB_MOE) L->is_moe = true;
        if (bl[i]->role == TB_SHARED) L->moe.has_shared = true;
    }
    if (L->type == CLLM_LAYER_FULL_ATTN)
        L->sub = count ? m->n_attn++ : -1;
    else
        L->sub = count ? m->n_gdn++ : -1;
    for (int i = 0; i < n; i++) bind_block(b, bl[i], L, lp, fused);
}

void fwd_layer_mats(const fwd_layer *L, int n_experts, fwd_mat_fn fn, void *ctx) {
    for (size_t b = 0; b < tt_n_layer_blocks; b++)
        for (size_t i = 0; i < tt_layer_block_list[b]->n; i++) {
            const tt_row *r = &tt_layer_block_list[b]->rows[i];
            const fwd_wt *w = (const fwd_wt *)(const void *)((const char *)L + r->off);
            if (r->kind == TT_MAT && w->data) fn(ctx, w, -1);
        }
    for (int e = 0; L->is_moe && L->moe.experts && e < n_experts; e++) {
        const fwd_mlp *x = &L->moe.experts[e];
        if (x->gate.data) fn(ctx, &x->gate, e);
        if (x->up.data) fn(ctx, &x->up, e);
        if (x->down.data) fn(ctx, &x->down, e);
    }
}

cllm_status cllm_model_load(const char *dir, const cllm_fwd_opts *opts, cllm_model **out,
                            cllm_error *err) {
    cllm_status st = cllm_model_load_tp(dir, opts, cllm_dist_rank(), cllm_dist_size(), out, err);
    if (st != CLLM_OK || cllm_dist_size() < 2) return st;
    /* every rank must run the same config and plan (same binary, same model files) */
    if ((st = cllm_dist_check_same_startup((*out)->tp_hash, "config + shard plan hash", err)) !=
        CLLM_OK) {
        cllm_model_free(*out);
        *out = NULL;
    }
    return st;
}

int cllm_model_tp_size(const cllm_model *m) {
    return m->tp_size > 1 ? m->tp_size : 1;
}

/* True when [p, p + n) lies in one of the checkpoint's file mappings. */
static bool ckpt_maps(const cllm_ckpt *ck, const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p, e = a + n;
    for (size_t i = 0; i < ck->n_files; i++) {
        const cllm_st_file *f = ck->files[i];
        if (!f || !f->map) continue;
        uintptr_t m0 = (uintptr_t)f->map, m1 = m0 + f->map_size;
        if (a >= m0 && e <= m1) return true;
    }
    return false;
}

bool fwd_ckpt_drop(const cllm_ckpt *ck, const void *p, size_t n) {
    if (!ckpt_maps(ck, p, n)) return false;
    cllm_drop_pages(p, n);
    return true;
}

/* GPTQ matrices repacked into column panels (fwd_wt.panel). In the checkpoint's layout the rows
 * of qweight are N * 4 bytes apart (~1 MB for the lm_head's 248k vocabulary, 2-32 KB for the
 * layers), so a decode item reads a short run from each of K * bits / 32 rows, each run on its
 * own page: TLB and prefetcher bound. A panel holds its P columns' qweight rows, then zeros and
 * scales, contiguously, so the one-token kernel's 32-column tile over all K (P = 32) is a single
 * sequential stream: 1-thread microbench (int4, K 2048, 128k columns, load 1): 11.2-12.8 GB/s in
 * 256-column panels -> 15.2-17.8 GB/s in 32-column ones, next to a plain read sweep's 17-19.
 * The integer sums and per-group float ops are unchanged, so results are bitwise those of the
 * checkpoint's layout (tests/model/panels.sh). Each copy replaces its file pages in RSS
 * (fwd_ckpt_drop; the prefault then skips the GPTQ tensors), so the RSS budget does not grow.
 * CLLM_PANEL=0 keeps the checkpoint's layout everywhere, CLLM_LM_PANEL=0 for the lm_head only
 * (A/B, tests). Under tensor parallel each rank repacks its own slices. */
#define PANEL_W 32

static size_t al64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

/* Bytes of w's panels (qweight, zeros, scales, each 64-byte aligned); 0: not a GPTQ matrix the
 * kernels take in panels (left in the checkpoint's layout). */
static size_t panel_bytes(const fwd_wt *w) {
    if (!w->q.bits || w->panel || !w->q.qweight) return 0;
    const int per = 32 / w->q.bits, K = w->q.K, G = w->q.group, N = w->q.N, P = PANEL_W;
    if (K % G || G % per || N % 8 || P % per) return 0;
    const size_t kw = (size_t)K / per, ng = (size_t)K / G, np = ((size_t)N + P - 1) / P;
    return al64(np * kw * P * 4) + al64(np * ng * (P / per) * 4) + al64(np * ng * P * 2);
}

/* The copied-from bytes are never read again: file pages leave RSS (MADV_DONTNEED); a private
 * copy (a tensor-parallel slice, a format conversion: owned by the model until it is freed) has
 * its whole pages returned to the kernel, so a rank does not hold its slices twice. */
static void drop_source(const cllm_ckpt *ck, bool evict, const void *p, size_t n) {
    /* CLLM_PANEL_EVICT=1: out of the page cache too, before the mapping lets go of the pages
     * (the eviction walks this process's page tables): the panels still to be copied then fault
     * into free memory, which is what huge pages need when the checkpoint nearly fills RAM */
    if (evict && ckpt_maps(ck, p, n)) cllm_evict_pages(p, n);
    cllm_drop_pages(p, n); /* file pages and a private copy's alike */
}

/* The screened lm_head (model/fwd_lmhead.c): an int8 panel's codes q = 16 hi + lo stored as two
 * int4 planes, hi of every panel first ([np][K/8][P]) then lo, in the bytes the int8 codes
 * took; each plane read as an int4 GPTQ panel array with zeros of its own (lm_zeros). The
 * screen's estimate reads the hi plane alone (half the bytes); an exact logit is 16 x (hi plane
 * at zero zh) + (lo plane at zero zl) with 16 zh + zl = the int8 zero, the same integers as the
 * int8 codes'. Word r of a panel's int8 rows holds k = 4r..4r+3 in its bytes, word r8 of a
 * plane k = 8r8..8r8+7 in its nibbles. */
static uint32_t nib_pack(uint32_t b) { /* low nibbles of 4 bytes -> 16 bits */
    b &= 0x0F0F0F0Fu;
    return (b & 0xF) | (b >> 4 & 0xF0) | (b >> 8 & 0xF00) | (b >> 12 & 0xF000);
}

/* int8 rows q8 (row stride ld words) of a panel wd columns wide -> its kw8 rows of each plane. */
static void lm_split_panel(const int32_t *q8, size_t ld, size_t kw8, size_t wd, int32_t *hi,
                           int32_t *lo) {
    for (size_t r8 = 0; r8 < kw8; r8++)
        for (size_t c = 0; c < wd; c++) {
            uint32_t w0 = (uint32_t)q8[(2 * r8) * ld + c], w1 = (uint32_t)q8[(2 * r8 + 1) * ld + c];
            hi[r8 * wd + c] = (int32_t)(nib_pack(w0 >> 4) | nib_pack(w1 >> 4) << 16);
            lo[r8 * wd + c] = (int32_t)(nib_pack(w0) | nib_pack(w1) << 16);
        }
}

/* Words from the hi planes' start to the lo planes' (every panel's hi plane comes first). */
static size_t lm_lo_offset(const cllm_qweight *q) {
    return ((size_t)q->N + PANEL_W - 1) / PANEL_W * ((size_t)q->K / 8) * PANEL_W;
}

/* The planes' int4 zeros for int8 effective zero z8 (est 0 when they cannot hold it): est, in
 * halves of a unit (the hi-plane estimate computes isum_hi - est * (asum / 2) ~ isum_hi -
 * ((z8 - 7.5) / 16) asum, the int8 code's expected value given its hi nibble, lo uniform in
 * 0..15); zh and zl with 16 zh + zl = z8, each an effective int4 zero (1..16). The 2-bit plane's
 * zero is 3 halves everywhere (LM_Q2_ZERO). */
typedef struct lm_zeros {
    int est, zh, zl;
} lm_zeros;

static lm_zeros lm_zeros_of(int z8) {
    lm_zeros z = {(2 * z8 - 7) / 16, (z8 - 1) / 16, 0}; /* est = round((z8 - 7.5) / 8) */
    z.zl = z8 - 16 * z.zh;
    if (z8 < 17 || z.est < 1 || z.est > 16 || z.zh < 1 || z.zl < 1 || z.zl > 16) z.est = 0;
    return z;
}

/* The 2-bit plane's zero, in halves (levels (code - 1.5) x step; the sums halved as for the hi
 * plane). */
#define LM_Q2_ZERO 3

typedef struct lm_split {
    int32_t *z[4];   /* the est, hi, lo and 2-bit views' zeros (zeroed) */
    int32_t *q2;     /* the 2-bit plane (kernels.h matmul_q2_qact), panel by panel; NULL: none */
    uint16_t *q2_sc; /* its scales, the int8 scales' layout */
} lm_split;

/* The 2-bit estimate of panel columns [0, wd) (column c0 + c of the int8 matrix src): each
 * column and group is quantized on its own to the uniform 4 levels (-1.5, -0.5, 0.5, 1.5) x step
 * of its int8 values (codes minus zero), step = 0.996 x their RMS (the mean-square optimum of a
 * uniform 4-level grid for a Gaussian: about 0.12 of the variance left, where the int8 codes'
 * top two bits, on an absmax grid, leave most of the weights in its two middle levels and about
 * a third). Scale: step x the int8 scale, so the estimate is in logit units. Codes in the 2-bit
 * layout (kernels.h, matmul_q2_qact): rows of 16 inputs, stride wd. */
static void lm_q2_panel(const cllm_qweight *src, size_t c0, size_t wd, int32_t *q2, uint16_t *sc) {
    const size_t K = (size_t)src->K, G = (size_t)src->group, N = (size_t)src->N;
    int v[4096]; /* a group's int8 values; lm_screen_plan: group <= 4096 */
    for (size_t c = 0; c < wd; c++)
        for (size_t g = 0; g < K / G; g++) {
            const int z8 = cllm_qweight_zero(src, (int)g, (int)(c0 + c));
            double ss = 0;
            for (size_t k = 0; k < G; k++) {
                size_t kk = g * G + k;
                v[k] = (int)(((uint32_t)src->qweight[(kk / 4) * N + c0 + c] >> (8 * (kk % 4))) &
                             0xffu) -
                       z8;
                ss += (double)v[k] * v[k];
            }
            const double step = 0.996 * sqrt(ss / (double)G);
            for (size_t k = 0; k < G; k++) {
                int code = step > 0 ? (int)floor(v[k] / step) + 2 : 2;
                code = code < 0 ? 0 : code > 3 ? 3 : code;
                size_t kk = g * G + k, i = kk % 16;
                size_t h = i / 8, j = (i % 8) / 2, o = i % 2;
                q2[(kk / 16) * wd + c] |= (int32_t)((uint32_t)code << (8 * j + 2 * (2 * h + o)));
            }
            uint16_t s8 = src->scales[g * N + c0 + c];
            float f = (float)step * (src->scale_bf16 ? cllm_bf16_to_f32(s8) : cllm_f16_to_f32(s8));
            sc[g * wd + c] = src->scale_bf16 ? cllm_f32_to_bf16(f) : cllm_f32_to_f16(f);
        }
}

static void panel_fill(const cllm_ckpt *ck, bool evict, fwd_wt *w, char *dst, const lm_split *ls) {
    const int per = 32 / w->q.bits, K = w->q.K, G = w->q.group, N = w->q.N, P = PANEL_W;
    const size_t kw = (size_t)K / per, ng = (size_t)K / G, np = ((size_t)N + P - 1) / P;
    int32_t *qw = (int32_t *)(void *)dst;
    int32_t *qz = (int32_t *)(void *)(dst + al64(np * kw * P * 4));
    uint16_t *sc = (uint16_t *)(void *)((char *)qz + al64(np * ng * (P / per) * 4));
    const cllm_qweight src = w->q,
                       dq = {qw, qz, sc, src.bits, G, K, N, src.act_bits, src.scale_bf16};
    /* read ahead: the copy walks the source panel by panel, not in file order */
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)src.qweight / pg * pg;
    madvise((void *)a, (uintptr_t)(src.qweight + kw * (size_t)N) - a, MADV_WILLNEED);
    for (size_t p = 0; p < np; p++) { /* written where fwd_panel (the matmul's view) reads */
        const cllm_qweight d = fwd_panel(&dq, P, (int)p);
        const size_t c0 = p * P, wd = (size_t)d.N;
        int32_t *dw = qw + (d.qweight - qw), *dz = qz + (d.qzeros - qz);
        uint16_t *ds = sc + (d.scales - sc);
        if (ls) { /* the screened lm_head (lm_screen_plan): int8 codes into two int4 planes */
            int32_t *hi = qw + p * (kw / 2) * P;
            lm_split_panel(src.qweight + c0, (size_t)N, kw / 2, wd, hi, hi + lm_lo_offset(&src));
            if (ls->q2)
                lm_q2_panel(&src, c0, wd, ls->q2 + p * (K / 16) * P, ls->q2_sc + p * ng * P);
            for (size_t g = 0; g < ng; g++)
                for (size_t c = 0; c < wd; c++) {
                    lm_zeros z = lm_zeros_of(cllm_qweight_zero(&src, (int)g, (int)(c0 + c)));
                    const int zv[4] = {z.est, z.zh, z.zl, LM_Q2_ZERO};
                    for (int i = 0; i < 4; i++)
                        ls->z[i][p * ng * (P / 8) + g * (wd / 8) + c / 8] |=
                            (int32_t)(((uint32_t)(zv[i] - 1) & 0xF) << (4 * (c % 8)));
                }
        } else {
            for (size_t r = 0; r < kw; r++) memcpy(dw + r * wd, src.qweight + r * N + c0, wd * 4);
        }
        for (size_t g = 0; g < ng; g++) {
            memcpy(dz + g * (wd / per), src.qzeros + g * (N / per) + c0 / per, wd / per * 4);
            memcpy(ds + g * wd, src.scales + g * N + c0, wd * 2);
        }
    }
    drop_source(ck, evict, src.qweight, kw * (size_t)N * 4);
    drop_source(ck, evict, src.qzeros, ng * ((size_t)N / per) * 4);
    drop_source(ck, evict, src.scales, ng * (size_t)N * 2);
    w->q.qweight = qw;
    w->q.qzeros = qz;
    w->q.scales = sc;
    w->data = qw;
    w->panel = P;
}

typedef struct panel_job {
    fwd_wt *w;
    char *dst;
    const lm_split *ls; /* the screened lm_head's; NULL for every other matrix */
} panel_job;

typedef struct panel_plan {
    cllm_model *m;
    panel_job *jobs;
    size_t n_jobs, cap_jobs;
    size_t left; /* GPTQ matrices that stay in the checkpoint's layout */
} panel_plan;

/* Plans ws[0..n) into one allocation (a layer's matrices: a few mappings, not one per expert). */
static cllm_status panel_set(panel_plan *pl, fwd_wt **ws, size_t n, cllm_error *err) {
    size_t total = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t b = panel_bytes(ws[i]);
        total += b;
        k += b > 0;
        if (!b && ws[i]->q.bits && !ws[i]->panel) pl->left++;
    }
    if (!total) return CLLM_OK;
    if (pl->n_jobs + k > pl->cap_jobs) {
        size_t nc = 2 * (pl->n_jobs + k);
        panel_job *nj = realloc(pl->jobs, nc * sizeof(*nj));
        if (!nj) return cllm_err_set(err, CLLM_ENOMEM, "weight panels: out of memory");
        pl->jobs = nj;
        pl->cap_jobs = nc;
    }
    /* huge pages: the panels are read end to end every step (about 5% more weight bandwidth
     * than on 4 KiB pages in a two-thread stream of the one-token kernel, Zen 4) */
    char *p = own_huge(pl->m, total); /* 64-byte aligned, as each panel's start must be */
    if (!p) return cllm_err_set(err, CLLM_ENOMEM, "weight panels: out of memory");
    for (size_t i = 0; i < n; i++) {
        size_t b = panel_bytes(ws[i]);
        if (!b) continue;
        pl->jobs[pl->n_jobs++] = (panel_job){ws[i], p, NULL};
        p += b;
    }
    pl->m->panel_bytes += total;
    return CLLM_OK;
}

static void panel_worker(void *vp, size_t b, size_t e, int tid) {
    (void)tid;
    panel_plan *pl = vp;
    for (size_t i = b; i < e; i++)
        panel_fill(pl->m->ckpt, pl->m->opts.panel_evict, pl->jobs[i].w, pl->jobs[i].dst,
                   pl->jobs[i].ls);
}

typedef struct mat_list {
    fwd_wt **ws;
    size_t n, cap;
} mat_list;

static void list_mat(void *vl, const fwd_wt *w, int expert) {
    (void)expert;
    mat_list *l = vl;
    /* the model is model_panels' own, writable: fwd_layer_mats only hands out its pointers */
    if (l->n < l->cap) l->ws[l->n++] = (fwd_wt *)w;
}

/* cllm_fwd_opts.lm_screen (CLLM_LM_SCREEN, docs/env.md): AUTO (default) screens an int8 lm_head
 * of at least LM_SCREEN_MIN_VOCAB rows with LM_SCREEN_AUTO candidates (LM_SCREEN_AUTO4 on the hi
 * plane's estimate, CLLM_LM_EST=4), N forces N candidates at any size, OFF keeps the plain int8
 * lm_head. Sets m->lm_screen and the split's buffers when it applies. The 2-bit estimate's
 * default is 4x the hi plane's: on models/tiny (trained, W4A16 + int8 lm_head, 1400 positions of
 * its model card) the true argmax ranked up to 20th among its 2-bit estimates (3rd on the hi
 * plane) and 16 candidates missed it 3 times before fwd_lmhead.c's settle margin (0 after);
 * 128 costs 0.35 ms a quarter-shape step more than 32 (16-entry rescores). */
#define LM_SCREEN_AUTO      128
#define LM_SCREEN_AUTO4     32
#define LM_SCREEN_MIN_VOCAB 65536

static cllm_status lm_screen_plan(cllm_model *m, lm_split *ls, cllm_error *err) {
    const int want = m->opts.lm_screen;
    const bool forced = want > 0;
    const bool est2 =
        m->opts.lm_est_bits != 4 && m->lm_head.q.group % 16 == 0 && m->lm_head.q.group <= 4096;
    const long n = want == CLLM_LM_SCREEN_AUTO ? (est2 ? LM_SCREEN_AUTO : LM_SCREEN_AUTO4)
                   : forced                    ? want
                                               : 0;
    const fwd_wt *h = &m->lm_head;
    const cllm_qweight *q = &h->q;
    if (!n || (!forced && q->N < LM_SCREEN_MIN_VOCAB)) return CLLM_OK;
    const char *why = NULL;
    if (q->bits != 8 || q->act_bits < 16 || !q->qweight || h->panel)
        why = "the lm_head is not an int8 W*A16 GPTQ matrix";
    else if (m->tp_size > 1)
        why = "tensor parallel (each rank's slice is plain int8)";
    else if (m->opts.act16 == CLLM_ACT16_FLOAT)
        why = "CLLM_ACT16=float";
    else if (!panel_bytes(h) || q->K % 8 || q->group % 8)
        why = "its shape takes no panels";
    const size_t ng = q->group ? (size_t)q->K / q->group : 0;
    for (size_t g = 0; !why && g < ng; g++)
        for (size_t col = 0; !why && col < (size_t)q->N; col++)
            if (!lm_zeros_of(cllm_qweight_zero(q, (int)g, (int)col)).est)
                why = "a zero point far from the middle of the int8 range";
    if (why) {
        if (forced) LOG_INFO("CLLM_LM_SCREEN=%d: lm_head not screened: %s", want, why);
        return CLLM_OK;
    }
    const size_t np = ((size_t)q->N + PANEL_W - 1) / PANEL_W;
    for (int i = 0; i < 4; i++)
        if (!(ls->z[i] = own(m, np * ng * (PANEL_W / 8) * 4)))
            return cllm_err_set(err, CLLM_ENOMEM, "lm_head screen: out of memory");
    /* the 2-bit estimate plane (a quarter of the int8 bytes) unless CLLM_LM_EST=4 or the group
     * does not hold whole 16-input rows */
    if (est2) {
        size_t b = np * ((size_t)q->K / 16) * PANEL_W * 4, bs = np * ng * PANEL_W * 2;
        if (!(ls->q2 = own_huge(m, b)) || !(ls->q2_sc = own(m, bs)))
            return cllm_err_set(err, CLLM_ENOMEM, "lm_head screen: out of memory");
        m->panel_bytes += b;
    }
    m->lm_screen = (int)n;
    return CLLM_OK;
}

static cllm_status model_panels(cllm_model *m, cllm_error *err) {
    if (m->opts.no_panels) return CLLM_OK;
    const cllm_config *c = &m->cfg;
    double t0 = cllm_time_s();
    panel_plan pl = {m, NULL, 0, 0, 0};
    /* a layer's matrices besides its experts' are at most the tables' matrix rows */
    mat_list ml = {NULL, 0,
                   tt_layer_mat_rows() + 3 * (size_t)(c->n_experts > 0 ? c->n_experts : 0)};
    if (!(ml.ws = malloc(ml.cap * sizeof(*ml.ws))))
        return cllm_err_set(err, CLLM_ENOMEM, "weight panels: out of memory");
    cllm_status st = CLLM_OK;
    for (int l = 0; l < c->n_layers && st == CLLM_OK; l++) {
        ml.n = 0;
        fwd_layer_mats(&m->layers[l], c->n_experts, list_mat, &ml);
        st = panel_set(&pl, ml.ws, ml.n, err);
    }
    /* the MTP head's layer and input projection when it will draft (opts.mtp_panels): on the
     * GPTQ layout a draft pass took 5.0 ms, 4.0-4.5 paneled (quarter shape, Zen 3, three
     * alternated pairs; a draft's logits move by rounding, test_mtp). Not under tensor
     * parallel, which never runs the head */
    const bool mtp = m->opts.mtp_panels && m->tp_size <= 1;
    for (int l = 0; mtp && l < m->n_mtp && st == CLLM_OK; l++) {
        ml.n = 0;
        fwd_layer_mats(&m->mtp_layers[l], c->n_experts, list_mat, &ml);
        st = panel_set(&pl, ml.ws, ml.n, err);
    }
    if (st == CLLM_OK && mtp && m->has_mtp) {
        fwd_wt *fc = &m->mtp_fc;
        st = panel_set(&pl, &fc, 1, err);
    }
    fwd_wt *head = &m->lm_head;
    lm_split ls = {{NULL, NULL, NULL, NULL}, NULL, NULL};
    if (st == CLLM_OK && !m->opts.no_lm_panel && (st = lm_screen_plan(m, &ls, err)) == CLLM_OK) {
        size_t j0 = pl.n_jobs;
        st = panel_set(&pl, &head, 1, err);
        if (st == CLLM_OK && m->lm_screen && pl.n_jobs > j0) pl.jobs[j0].ls = &ls;
    } else if (head->q.bits && !head->panel)
        pl.left++;
    free(ml.ws);
    if (st == CLLM_OK && pl.n_jobs) {
        /* the copy is page-fault bound (one per 4 KB written): the threads share it */
        long np = sysconf(_SC_NPROCESSORS_ONLN);
        cllm_pool *pool = cllm_pool_create(np < 1 ? 1 : np > 8 ? 8 : (int)np);
        if (pool) {
            cllm_pool_for_dyn(pool, pl.n_jobs, panel_worker, &pl);
            cllm_pool_free(pool);
        } else {
            panel_worker(&pl, 0, pl.n_jobs, 0);
        }
        LOG_DEBUG("repacked %zu GPTQ matrices (%.2f GB) into %d-column panels in %.2f s", pl.n_jobs,
                  (double)m->panel_bytes / 1e9, PANEL_W, cllm_time_s() - t0);
    }
    free(pl.jobs);
    if (st == CLLM_OK && m->lm_screen) { /* the views fwd_lm_screen reads */
        fwd_wt *views[3] = {&m->lm_hi, &m->lm_hx, &m->lm_lx};
        for (int v = 0; v < 3; v++) {
            *views[v] = *head;
            views[v]->q.bits = 4;
            views[v]->q.qzeros = ls.z[v];
            views[v]->q.zero_const = 0; /* the planes' own zeros (lm_zeros) */
        }
        m->lm_lx.q.qweight += lm_lo_offset(&head->q);
        m->lm_lx.data = m->lm_lx.q.qweight;
        if (ls.q2) { /* its panels are [K/16][width] words, zeros as the int4 views' */
            m->lm_q2 = *head;
            m->lm_q2.q.bits = 2;
            m->lm_q2.q.qweight = ls.q2;
            m->lm_q2.q.qzeros = ls.z[3];
            m->lm_q2.q.scales = ls.q2_sc;
            m->lm_q2.q.zero_const = LM_Q2_ZERO;
            m->lm_q2.data = ls.q2;
        }
        LOG_DEBUG("lm_head: int8 codes in two int4 planes, screened with %d candidates on a %d-bit "
                  "estimate",
                  m->lm_screen, ls.q2 ? 2 : 4);
    } else {
        m->lm_screen = 0;
    }
    m->panel_all = st == CLLM_OK && !pl.left && m->panel_bytes > 0;
    return st;
}

/* The GDN conv taps, [conv_ch][kernel] in the checkpoint (and after the shard), become
 * [kernel][conv_ch]: the conv (fwd_deltanet.c) then reads each tap as one contiguous row across
 * channels, as it reads the state's ring rows, with no transpose per call. */
static cllm_status conv_tap_major(cllm_model *m, cllm_error *err) {
    int K = m->cfg.lin_conv_kernel, ch = m->conv_ch;
    float *tmp = NULL;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        float *w = m->layers[l].gdn.conv_w;
        if (!w) continue;
        if (!tmp && !(tmp = malloc((size_t)ch * K * sizeof(float))))
            return cllm_err_set(err, CLLM_ENOMEM, "out of memory (conv taps)");
        for (int i = 0; i < ch; i++)
            for (int r = 0; r < K; r++) tmp[(size_t)r * ch + i] = w[(size_t)i * K + r];
        memcpy(w, tmp, (size_t)ch * K * sizeof(float));
    }
    free(tmp);
    return CLLM_OK;
}

cllm_status cllm_model_load_tp(const char *dir, const cllm_fwd_opts *opts, int rank, int size,
                               cllm_model **out, cllm_error *err) {
    *out = NULL;
    if (opts &&
        (opts->lm_screen < CLLM_LM_SCREEN_OFF || opts->lm_screen > CLLM_LM_SCREEN_MAX ||
         (unsigned)opts->act16 > CLLM_ACT16_INT8 || (unsigned)opts->profile > CLLM_PROFILE_MTP))
        return cllm_err_set(err, CLLM_EINVAL, "cllm_fwd_opts: a field out of range");
    cllm_model *m = calloc(1, sizeof(*m));
    if (!m) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    if (opts) m->opts = *opts;
    cllm_status st = cllm_config_load(dir, &m->cfg, err);
    if (st != CLLM_OK) {
        free(m);
        return st;
    }
    st = cllm_ckpt_open(dir, false, &m->ckpt, err);
    if (st != CLLM_OK) goto fail;
    const cllm_config *c = &m->cfg;
    m->q_rows = c->n_heads * c->head_dim * (c->attn_output_gate ? 2 : 1);
    m->kv_dim = c->n_kv_heads * c->head_dim;
    m->conv_ch = 2 * c->lin_n_k_heads * c->lin_k_dim + c->lin_n_v_heads * c->lin_v_dim;

    /* Quantization format first: an unsupported scheme is named before any tensor check. */
    unsigned qfmt = 0;
    if ((st = cllm_qformat_check_config(dir, &qfmt, err)) != CLLM_OK) goto fail;
    /* Expert layout: fused if the first MoE layer has the 3-D tensor. */
    bool fused = true;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_is_moe[l]) {
            char n[200];
            snprintf(n, sizeof(n), "%slayers.%d.mlp.experts", c->weight_prefix, l);
            if ((st = cllm_qformat_check_fused_experts(m->ckpt, n, err)) != CLLM_OK) goto fail;
            snprintf(n, sizeof(n), "%slayers.%d.mlp.experts.gate_up_proj", c->weight_prefix, l);
            fused = cllm_ckpt_get(m->ckpt, n) != NULL;
            break;
        }
    check_ctx cc = {m->ckpt, err, CLLM_OK, 0, 0, qfmt};
    cllm_tensor_plan(c, fused ? CLLM_EXPERTS_FUSED : CLLM_EXPERTS_PER_EXPERT, true, true, check_one,
                     &cc);
    if ((st = cc.st) != CLLM_OK) goto fail;
    size_t n_mtp = cc.n_optional_found - cc.n_vision_found;
    m->has_mtp = c->mtp_num_hidden_layers > 0 && n_mtp > 0;
    if (m->has_mtp) LOG_INFO("%s: MTP head present (%zu tensors bound)", dir, n_mtp);
    /* a text-only export of a multimodal config has none of the tower: it loads without it; a
     * partial tower fails in the binding below, naming the first missing tensor */
    if (c->vision.present && !cc.n_vision_found)
        LOG_INFO("%s: vision_config without model.visual.* tensors: text only", dir);

    m->layers = calloc((size_t)c->n_layers, sizeof(fwd_layer));
    if (!m->layers) {
        st = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        goto fail;
    }
    binder B = {m, err, CLLM_OK, cllm_qformat_act_bits(dir), qfmt};
    bind_block(&B, &tt_embed, m, c->weight_prefix, fused);
    bind_block(&B, &tt_head, m, c->weight_prefix, fused);
    if (c->tie_word_embeddings) m->lm_head = m->embed;
    /* quantized rows are read in the checkpoint's layout (fwd_embed_row); tied to the lm_head
     * they would be repacked into panels and their source pages dropped under the lookup */
    if (B.st == CLLM_OK && m->embed.q.bits && c->tie_word_embeddings)
        B.st = cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "quantized embed_tokens tied to the lm_head are not supported "
                            "(keep them 16-bit)");
    for (int l = 0; l < c->n_layers && B.st == CLLM_OK; l++) {
        char lp[96];
        snprintf(lp, sizeof(lp), "%slayers.%d.", c->weight_prefix, l);
        bind_layer(&B, &m->layers[l], lp, (cllm_layer_type)c->layer_types[l], c->layer_is_moe[l],
                   fused, true);
    }
    if (m->has_mtp && B.st == CLLM_OK) {
        /* MTP head (docs/model.md §2.7): run by cllm_forward_mtp (fwd_mtp.c), never by
         * cllm_forward. Its experts are per-expert tensors in official checkpoints even when the
         * main layers are fused (the plan pass above already checked which layout is present). */
        m->n_mtp = c->mtp_num_hidden_layers;
        m->mtp_layers = own(m, (size_t)m->n_mtp * sizeof(fwd_layer));
        if (!m->mtp_layers) B.st = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        bind_block(&B, &tt_mtp, m, "", fused);
        for (int l = 0; l < m->n_mtp && B.st == CLLM_OK; l++) {
            char lp[64], n[96];
            snprintf(lp, sizeof(lp), "mtp.layers.%d.", l);
            snprintf(n, sizeof(n), "%smlp.experts.gate_up_proj", lp);
            bind_layer(&B, &m->mtp_layers[l], lp, CLLM_LAYER_FULL_ATTN, true,
                       cllm_ckpt_get(m->ckpt, n) != NULL, false);
            /* its KV slot in a pool from cllm_kv_pool_init_mtp: after the attention layers */
            m->mtp_layers[l].sub = m->n_attn + l;
        }
    }
    if (cc.n_vision_found && B.st == CLLM_OK) { /* the tower (model/vision_bind.c) */
        if ((st = fwd_vision_bind(m, &B, err)) != CLLM_OK) goto fail;
        LOG_INFO("%s: vision tower bound (%zu tensors)", dir, cc.n_vision_found);
    }
    if ((st = B.st) != CLLM_OK) goto fail;
    if (size > 1 && m->ckpt->owner) { /* the shard plan slices safetensors/GPTQ layouts only */
        st = cllm_err_set(err, CLLM_EUNSUPPORTED,
                          "%s: a GGUF model runs in one process (tensor parallel takes the "
                          "safetensors checkpoint)",
                          dir);
        goto fail;
    }
    if (size > 1 && (st = fwd_tp_shard(m, rank, size, err)) != CLLM_OK) goto fail;
    if ((st = model_panels(m, err)) != CLLM_OK) goto fail; /* after the shard: its slices */
    if ((st = conv_tap_major(m, err)) != CLLM_OK) goto fail;
    *out = m;
    return CLLM_OK;
fail:
    cllm_model_free(m);
    return st;
}

void cllm_model_free(cllm_model *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n_allocs; i++) cllm_free_aligned(m->allocs[i]);
    free(m->allocs);
    free(m->layers);
    if (m->ckpt) cllm_ckpt_close(m->ckpt);
    cllm_config_free(&m->cfg);
    free(m);
}

const cllm_config *cllm_model_config(const cllm_model *m) {
    return &m->cfg;
}
int cllm_model_n_attn_layers(const cllm_model *m) {
    return m->n_attn;
}
int cllm_model_n_gdn_layers(const cllm_model *m) {
    return m->n_gdn;
}
bool cllm_model_has_mtp(const cllm_model *m) {
    return m->has_mtp;
}

static uint64_t wbytes(const fwd_wt *w) {
    if (w->q.bits)
        return cllm_qformat_bytes(w->q.bits, w->q.group, w->cols, w->rows) - 4ull * w->cols;
    if (w->kq.type) return (uint64_t)w->rows * w->kq.row_bytes;
    return w->data ? (uint64_t)w->rows * (uint64_t)w->cols * cllm_dtype_size(w->dt) : 0;
}
typedef struct decode_sum {
    uint64_t b;
    int k; /* experts a token runs */
} decode_sum;

/* A token reads every matrix of a layer but the routed experts, of which it reads k: expert 0
 * stands for each (they all have its shapes; under expert parallel a rank without expert 0
 * counts none of them, as before the count went through fwd_layer_mats). */
static void add_decode(void *vs, const fwd_wt *w, int expert) {
    decode_sum *s = vs;
    if (expert < 0) s->b += wbytes(w);
    if (expert == 0) s->b += (uint64_t)s->k * wbytes(w);
}

uint64_t cllm_model_decode_bytes(const cllm_model *m) {
    const cllm_config *c = &m->cfg;
    /* a screened lm_head (fwd_lmhead.c) reads its estimate plane (2-bit: half the hi plane's
     * bytes), then at most lm_screen int8 blocks of 16 rows (greedy decode, the case this
     * figure is for) */
    uint64_t lm = wbytes(&m->lm_head);
    if (m->lm_screen)
        lm = (m->lm_q2.data ? wbytes(&m->lm_hi) / 2 : wbytes(&m->lm_hi)) +
             (uint64_t)m->lm_screen *
                 (cllm_qformat_bytes(8, m->lm_head.q.group, m->lm_head.cols, 16) -
                  4ull * m->lm_head.cols);
    decode_sum s = {(uint64_t)c->hidden_size * cllm_dtype_size(m->embed.dt) + lm,
                    c->n_experts_per_tok};
    for (int l = 0; l < c->n_layers; l++)
        fwd_layer_mats(&m->layers[l], c->n_experts, add_decode, &s);
    return s.b;
}

typedef struct prefault_ctx {
    volatile uint8_t sink;
    uint64_t bytes;
    bool skip_gptq; /* every GPTQ matrix was repacked into panels: the file's copy is never read */
    const cllm_ckpt *ckpt;
} prefault_ctx;

/* True when every page of [p, p + n) is in the page cache. mincore may answer only for pages
 * this process maps (files it could not write); a no, or a failure, just means "touch it". */
static bool pages_cached(const void *p, size_t n) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p / pg * pg;
    size_t np = ((uintptr_t)p + n - a + pg - 1) / pg;
    unsigned char v[4096];
    for (size_t i = 0; i < np; i += sizeof v) {
        size_t k = np - i < sizeof v ? np - i : sizeof v;
        if (mincore((void *)(a + i * pg), k * pg, v) != 0) return false;
        for (size_t j = 0; j < k; j++)
            if (!(v[j] & 1)) return false;
    }
    return true;
}

static void prefault_one(void *vc, const cllm_tensor *t) {
    prefault_ctx *c = vc;
    /* vision and MTP tensors are read only by an image (cllm_vision_encode) or a draft
     * (cllm_forward_mtp), not by every step: touching them would only add to RSS (the MTP head
     * is 0.44 GB of the full model's W4A16 file, the tower 0.9 GB of bf16); their pages come in
     * on first use */
    if (!t->data || !strncmp(t->name, "model.visual.", 13) || !strncmp(t->name, "mtp.", 4)) return;
    if (c->skip_gptq && cllm_qformat_is_qtensor(t->name)) return;
    /* The embedding table: one row per token is read. It goes into the page cache now (a cold row
     * costs 5-7 ms of disk: a first 512-token prompt waited 2.9 s for its rows behind an
     * asynchronous MADV_WILLNEED), but leaves RSS again chunk by chunk (file pages dropped from
     * the mapping stay cached), so RSS grows only by the rows used (1 GB of bf16 on the 248k
     * vocabulary). A chunk already in the page cache is skipped: touching and dropping 1 GB of
     * cached pages cost 2.7 s of start-up for nothing. Every other tensor stays mapped: one
     * chunk. */
    const bool embed = strstr(t->name, "embed_tokens.") != NULL;
    const uint64_t chunk = embed ? 64u << 20 : t->nbytes;
    const uint8_t *p = t->data;
    uint8_t s = 0;
    for (uint64_t o = 0; o < t->nbytes; o += chunk) {
        uint64_t n = t->nbytes - o < chunk ? t->nbytes - o : chunk;
        if (embed && pages_cached(p + o, n)) continue;
        for (uint64_t i = 0; i < n; i += 4096) s ^= p[o + i];
        if (embed) fwd_ckpt_drop(c->ckpt, p + o, n);
    }
    c->sink ^= s;
    c->bytes += t->nbytes;
}

uint64_t cllm_model_prefault(const cllm_model *m) {
    if (m->tp_size > 1) return fwd_tp_prefault(m); /* this rank's slices only */
    prefault_ctx c = {0, 0, m->panel_all, m->ckpt};
    cllm_ckpt_foreach(m->ckpt, prefault_one, &c);
    /* the panels themselves are touched by the repack; a partial repack's file pages are
     * prefaulted above as well (the dropped ones come back: RSS only) */
    c.bytes += m->panel_bytes;
    return c.bytes;
}
