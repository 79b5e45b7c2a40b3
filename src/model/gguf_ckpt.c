/* GGUF qwen35moe -> HF-named checkpoint tensors; see gguf_ckpt.h. */
#include "model/gguf_ckpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "base/mem.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "model/gguf_quant.h"
#include "model/gguf_tok.h"
#include "model/safetensors.h"

#define ARCH       "qwen35moe"
#define PREFIX     "model.language_model."
#define CHUNK_SIZE (64u << 20)

/* Converted tensors live in anonymous mappings: the weight binder returns their pages to the
 * kernel once it has repacked them (model/weights.c drop_source), as it does for file pages. */
typedef struct arena {
    void **maps;
    size_t *sizes;
    size_t n, cap;
    char *cur;
    size_t left;
} arena;

typedef struct gguf_owner {
    cllm_gguf *g;
    arena ar;
} gguf_owner;

static void *arena_map(arena *a, size_t n) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? 2 * a->cap : 64;
        void **m = realloc(a->maps, nc * sizeof(*m));
        size_t *s = m ? realloc(a->sizes, nc * sizeof(*s)) : NULL;
        if (m) a->maps = m;
        if (!s) return NULL;
        a->sizes = s;
        a->cap = nc;
    }
    void *p =
        mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return NULL;
    a->maps[a->n] = p;
    a->sizes[a->n++] = n;
    return p;
}

/* 64-byte aligned, zeroed; big tensors get a mapping of their own. */
static void *arena_alloc(arena *a, size_t n) {
    n = (n + 63) & ~(size_t)63;
    if (n >= CHUNK_SIZE / 4) return arena_map(a, n);
    if (n > a->left) {
        if (!(a->cur = arena_map(a, CHUNK_SIZE))) return NULL;
        a->left = CHUNK_SIZE;
    }
    void *p = a->cur;
    a->cur += n;
    a->left -= n;
    return p;
}

static void owner_free(void *vo) {
    gguf_owner *o = vo;
    if (!o) return;
    for (size_t i = 0; i < o->ar.n; i++) munmap(o->ar.maps[i], o->ar.sizes[i]);
    free(o->ar.maps);
    free(o->ar.sizes);
    cllm_gguf_close(o->g);
    free(o);
}

/* The model's shape as the converter wrote it. */
typedef struct shape {
    int64_t n_layer, n_mtp, H, heads, kv_heads, hd, Hk, Hv, dk, dv, conv_k, E, I, Is;
} shape;

typedef struct gctx {
    const cllm_gguf *g;
    cllm_st_file *f;
    size_t cap;
    arena *ar;
    shape s;
    cllm_error *err;
    unsigned f32_types; /* bit per type already logged as held in F32 */
    cllm_pool *pool;    /* the K-quant panel repack's threads (made at the first panel matrix) */
} gctx;

static cllm_status oom(gctx *x) {
    return cllm_err_set(x->err, CLLM_ENOMEM, "out of memory converting %s", x->f->path);
}

static cllm_status add3(gctx *x, const char *name, cllm_dtype dt, int64_t s0, int64_t s1,
                        int64_t s2, const void *data) {
    if (x->f->n_tensors == x->cap) {
        size_t nc = x->cap ? 2 * x->cap : 1024;
        cllm_tensor *t = realloc(x->f->tensors, nc * sizeof(*t));
        if (!t) return oom(x);
        x->f->tensors = t;
        x->cap = nc;
    }
    cllm_tensor *t = &x->f->tensors[x->f->n_tensors];
    memset(t, 0, sizeof(*t));
    if (!(t->name = strdup(name))) return oom(x);
    x->f->n_tensors++;
    t->dtype = dt;
    t->n_dims = s2 ? 3 : s1 ? 2 : 1;
    t->shape[0] = s0;
    t->shape[1] = s1;
    t->shape[2] = s2;
    t->n_elems = (uint64_t)s0 * (uint64_t)(s1 ? s1 : 1) * (uint64_t)(s2 ? s2 : 1);
    t->nbytes = t->n_elems * cllm_dtype_size(dt);
    t->data = data;
    t->file = x->f->path;
    return CLLM_OK;
}

static cllm_status add(gctx *x, const char *name, cllm_dtype dt, int64_t s0, int64_t s1,
                       const void *data) {
    return add3(x, name, dt, s0, s1, 0, data);
}

/* GGUF V head of HF V head h: the converter moved heads from grouped-by-K-head order to tiled
 * order (conversion/qwen.py _LinearAttentionVReorderBase) when there are more V than K heads. */
static int64_t vhead(const shape *s, int64_t h) {
    if (s->Hv == s->Hk) return h;
    int64_t r = s->Hv / s->Hk;
    return (h % r) * s->Hk + h / r;
}

typedef struct perm {
    int64_t rows_from,
        rows_unit;    /* rows at or past rows_from move by V head in units of rows_unit */
    int64_t col_unit; /* > 0: columns move by V head in units of col_unit */
} perm;

static int64_t src_row(const shape *s, const perm *p, int64_t r) {
    if (!p || !p->rows_unit || r < p->rows_from) return r;
    int64_t v = r - p->rows_from;
    return p->rows_from + vhead(s, v / p->rows_unit) * p->rows_unit + v % p->rows_unit;
}

/* GGUF column of HF column k when columns move by V head in units of cu (0: none). */
static int64_t src_col(const shape *s, int64_t cu, int64_t k) {
    return cu ? vhead(s, k / cu) * cu + k % cu : k;
}

static void f32_note(gctx *x, const cllm_gguf_tensor *t) {
    if (x->f32_types & (1u << (t->type % 32))) return;
    x->f32_types |= 1u << (t->type % 32);
    LOG_WARN("%s: %s tensors whose columns move with the V-head order or whose rows are not a "
             "multiple of 8 (first: %s) are held as F32 (exact values, %.1fx the file's bytes)",
             x->f->path, cllm_ggml_type_name(t->type), t->name,
             32.0 / (8.0 * (double)t->nbytes / (double)t->n_elems));
}

/* Matrix `name` [N][K] as ggml's float values, F32, rows and columns moved as p says: what
 * cannot stay in its file form (mat) and a tied embedding (one_tensor). */
static cllm_status mat_f32(gctx *x, const cllm_gguf_tensor *t, const char *name, const uint8_t *src,
                           int64_t N, int64_t K, const perm *p) {
    int bytes, blk = cllm_ggml_block(t->type, &bytes);
    const size_t rb = (size_t)(K / blk) * (size_t)bytes;
    const int64_t cu = p ? p->col_unit : 0;
    float *w = arena_alloc(x->ar, (size_t)N * (size_t)K * 4), *row = malloc((size_t)K * 4);
    if (!w || !row) {
        free(row);
        return oom(x);
    }
    if (blk > 1) f32_note(x, t);
    for (int64_t r = 0; r < N; r++) {
        if (!cllm_gguf_row_f32(t->type, src + (size_t)src_row(&x->s, p, r) * rb, row, K)) {
            free(row);
            return cllm_err_set(x->err, CLLM_EUNSUPPORTED, "%s: tensor %s: type %s is not read",
                                x->f->path, t->name, cllm_ggml_type_name(t->type));
        }
        for (int64_t k = 0; k < K; k++) w[r * K + k] = row[src_col(&x->s, cu, k)];
    }
    free(row);
    cllm_drop_pages(src, (size_t)N * rb); /* never read again */
    return add(x, name, CLLM_DT_F32, N, K, w);
}

/* Panels [b, e) of one K-quant matrix (cllm_kq_panel_pack), rows in HF order. */
typedef struct pack_job {
    gctx *x;
    const perm *p;
    const uint8_t *src;
    size_t rb;
    int64_t N, K;
    int pt;
    size_t p1;
    const int *chunks;
    uint8_t *d;
} pack_job;

static void pack_worker(void *vj, size_t b, size_t e, int tid) {
    (void)tid;
    pack_job *j = vj;
    for (size_t i = b; i < e; i++) {
        int64_t r0 = (int64_t)i * 16;
        const uint8_t *rows[16];
        const int nr = j->N - r0 < 16 ? (int)(j->N - r0) : 16;
        for (int r = 0; r < nr; r++)
            rows[r] = j->src + (size_t)src_row(&j->x->s, j->p, r0 + r) * j->rb;
        cllm_kq_panel_pack(j->pt, (int)j->K, rows, nr, j->chunks, j->d + i * j->p1);
    }
}
/* Rows [b, e) of a code-form matrix (Q4_0 / Q5_0 / Q8_0 / IQ4_NL) into the GPTQ v1 layout:
 * row r owns the words of column r, so rows run on any thread; codes/d16 per thread. */
typedef struct codes_job {
    gctx *x;
    const cllm_gguf_tensor *t;
    const perm *p;
    const uint8_t *src;
    size_t rb;
    int64_t N, K, cu;
    int bits;
    uint8_t *codes; /* [threads][K] */
    uint16_t *d16;  /* [threads][K / 32] */
    int32_t *qw;
    uint16_t *sc;
} codes_job;

static void codes_worker(void *vj, size_t b, size_t e, int tid) {
    codes_job *j = vj;
    const int per = 32 / j->bits;
    const int64_t N = j->N, K = j->K;
    uint8_t *codes = j->codes + (size_t)tid * (size_t)K;
    uint16_t *d16 = j->d16 + (size_t)tid * (size_t)(K / 32);
    for (int64_t r = (int64_t)b; r < (int64_t)e; r++) {
        cllm_gguf_row_codes(j->t->type, j->src + (size_t)src_row(&j->x->s, j->p, r) * j->rb, codes,
                            d16, K);
        for (int64_t k = 0; k < K; k++) {
            int64_t ks = src_col(&j->x->s, j->cu, k);
            uint32_t u = codes[ks];
            j->qw[(k / per) * N + r] |= (int32_t)(u << (j->bits * (k % per)));
            if (k % 32 == 0) j->sc[(k / 32) * N + r] = d16[ks / 32];
        }
    }
}

/* HF matrix `hf` (no ".weight") [N][K] from GGUF rows at src (row length K, type of t). */
static cllm_status mat(gctx *x, const cllm_gguf_tensor *t, const char *hf, const uint8_t *src,
                       int64_t N, int64_t K, const perm *p) {
    int bytes, blk = cllm_ggml_block(t->type, &bytes), bits = 0, zero = 0;
    const size_t rb = (size_t)(K / blk) * (size_t)bytes;
    const bool moved = p && (p->rows_unit || p->col_unit);
    char name[256];
    snprintf(name, sizeof(name), "%s.weight", hf);
    if (blk == 1 && !moved) {
        cllm_dtype dt = t->type == CLLM_GGML_F32   ? CLLM_DT_F32
                        : t->type == CLLM_GGML_F16 ? CLLM_DT_F16
                                                   : CLLM_DT_BF16;
        return add(x, name, dt, N, K, src);
    }
    const int64_t cu = p ? p->col_unit : 0;
    if (cllm_gguf_code_form(t->type, &bits, &zero) && N % 8 == 0 && (!cu || cu % 32 == 0)) {
        const int per = 32 / bits;
        int32_t *qw = arena_alloc(x->ar, (size_t)(K / per) * (size_t)N * 4);
        int32_t *qz = arena_alloc(x->ar, (size_t)(K / 32) * (size_t)(N / per) * 4);
        uint16_t *sc = arena_alloc(x->ar, (size_t)(K / 32) * (size_t)N * 2);
        if (!x->pool) x->pool = cllm_pool_create(0);
        const size_t nt = x->pool ? (size_t)cllm_pool_size(x->pool) : 1;
        uint8_t *codes = malloc(nt * (size_t)K);
        uint16_t *d16 = malloc(nt * (size_t)(K / 32) * 2);
        if (!qw || !qz || !sc || !codes || !d16) {
            free(codes);
            free(d16);
            return oom(x);
        }
        const uint32_t zw = bits == 4 ? 0x11111111u * (uint32_t)(zero - 1)
                                      : 0x01010101u * (uint32_t)(zero - 1); /* v1 stores z - 1 */
        for (size_t i = 0; i < (size_t)(K / 32) * (size_t)(N / per); i++) qz[i] = (int32_t)zw;
        codes_job j = {x, t, p, src, rb, N, K, cu, bits, codes, d16, qw, sc};
        cllm_pool_for(x->pool, (size_t)N, codes_worker, &j);
        free(codes);
        free(d16);
        cllm_drop_pages(src, (size_t)N * rb); /* never read again */
        char n2[256];
        cllm_status st = CLLM_OK;
        snprintf(n2, sizeof(n2), "%s.qweight", hf);
        if (!st) st = add(x, n2, CLLM_DT_I32, K / per, N, qw);
        snprintf(n2, sizeof(n2), "%s.qzeros", hf);
        if (!st) st = add(x, n2, CLLM_DT_I32, K / 32, N / per, qz);
        snprintf(n2, sizeof(n2), "%s.scales", hf);
        if (!st) st = add(x, n2, CLLM_DT_F16, K / 32, N, sc);
        return st;
    }
    const int kq = cllm_gguf_kq_type(t->type);
    /* columns moved by V head (the GDN out_proj): whole 128-column chunks, each keeping its
     * block's scales (CLLM_KQ_D128) */
    const int pt = kq ? kq | CLLM_KQ_PANEL | (cu ? CLLM_KQ_D128 : 0) : 0;
    /* Q4_K / Q6_K panels are the file's size (4.75 / 6.6 bits a weight, file 4.5 / 6.56); Q5_K's
     * and IQ4_XS's int8 codes would be 8.6 (file 5.5 / 4.25), so they stay in blocks unless the
     * alternative is F32 */
    const bool panel = kq == CLLM_KQ_Q4_K || kq == CLLM_KQ_Q6_K || (kq && cu);
    const size_t pb = panel && cu % 128 == 0 ? cllm_kq_panel_bytes(pt, (int)K, (int)N) : 0;
    if (pb) { /* repacked into panels of 16 rows, rows in HF order (model/gguf_ckpt.h) */
        const size_t p1 = cllm_kq_panel_bytes(pt, (int)K, 16);
        uint8_t *d = arena_alloc(x->ar, pb);
        int *chunks = cu ? malloc(sizeof(int) * (size_t)(K / 128)) : NULL;
        if (!d || (cu && !chunks)) {
            free(chunks);
            return oom(x);
        }
        for (int64_t i = 0; cu && i < K / 128; i++)
            chunks[i] = (int)(src_col(&x->s, cu, 128 * i) / 128);
        /* every panel is its own output: threads (about 1 ns a weight on one) */
        if (!x->pool) x->pool = cllm_pool_create(0);
        pack_job j = {x, p, src, rb, N, K, pt, p1, chunks, d};
        cllm_pool_for(x->pool, (size_t)(N + 15) / 16, pack_worker, &j);
        free(chunks);
        cllm_drop_pages(src, (size_t)N * rb); /* never read again */
        cllm_status st = add(x, name, CLLM_DT_U8, N, K, d);
        if (!st) {
            cllm_tensor *tt = &x->f->tensors[x->f->n_tensors - 1];
            tt->nbytes = pb;
            tt->kq_type = pt;
        }
        return st;
    }
    if (kq && !cu) { /* ggml blocks kept, rows in HF order (model/gguf_ckpt.h) */
        const uint8_t *d = src;
        if (p && p->rows_unit) {
            uint8_t *m = arena_alloc(x->ar, (size_t)N * rb);
            if (!m) return oom(x);
            for (int64_t r = 0; r < N; r++)
                memcpy(m + (size_t)r * rb, src + (size_t)src_row(&x->s, p, r) * rb, rb);
            d = m;
            cllm_drop_pages(src, (size_t)N * rb); /* never read again */
        }
        cllm_status st = add(x, name, CLLM_DT_U8, N, K, d);
        if (!st) {
            cllm_tensor *tt = &x->f->tensors[x->f->n_tensors - 1];
            tt->nbytes = (uint64_t)N * rb;
            tt->kq_type = kq;
        }
        return st;
    }
    return mat_f32(x, t, name, src, N, K, p);
}

/* A 1-D (or [n][m] small) tensor as float values, V-head moves by unit (0: none) applied. */
static float *vec_f32(gctx *x, const cllm_gguf_tensor *t, int64_t unit, int64_t from) {
    float *v = malloc((size_t)t->n_elems * 4), *o = malloc((size_t)t->n_elems * 4);
    if (!v || !o || !cllm_gguf_row_f32(t->type, t->data, v, (int64_t)t->n_elems)) {
        free(v);
        free(o);
        return NULL;
    }
    perm p = {from, unit, 0};
    for (int64_t i = 0; i < (int64_t)t->n_elems; i++) o[i] = v[src_row(&x->s, &p, i)];
    free(v);
    return o;
}

enum { V_PLAIN, V_NORM, V_ALOG };

/* A vector tensor: plain F32, a (1 + w) norm as F64 v - 1, or A_log as F64 log(-A). */
static cllm_status vec3(gctx *x, const cllm_gguf_tensor *t, const char *hf, int kind, int64_t unit,
                        int64_t from, int64_t s0, int64_t s1, int64_t s2) {
    const uint64_t want = (uint64_t)s0 * (uint64_t)(s1 ? s1 : 1) * (uint64_t)(s2 ? s2 : 1);
    if (t->n_elems != want)
        return cllm_err_set(x->err, CLLM_EFORMAT,
                            "%s: tensor %s has %llu values, the config implies %llu", x->f->path,
                            t->name, (unsigned long long)t->n_elems, (unsigned long long)want);
    float *v = vec_f32(x, t, unit, from);
    if (!v)
        return cllm_err_set(x->err, CLLM_EFORMAT, "%s: tensor %s: cannot read type %s as a vector",
                            x->f->path, t->name, cllm_ggml_type_name(t->type));
    size_t n = (size_t)t->n_elems;
    cllm_status st;
    if (kind == V_PLAIN) {
        float *d = arena_alloc(x->ar, n * 4);
        if (d) memcpy(d, v, n * 4);
        st = d ? add3(x, hf, CLLM_DT_F32, s0, s1, s2, d) : oom(x);
    } else {
        double *d = arena_alloc(x->ar, n * 8);
        for (size_t i = 0; d && i < n; i++) {
            if (kind == V_ALOG && !(v[i] < 0)) {
                st = cllm_err_set(x->err, CLLM_EFORMAT,
                                  "%s: tensor %s[%zu] = %g: ssm_a must be negative (-exp(A_log))",
                                  x->f->path, t->name, i, (double)v[i]);
                free(v);
                return st;
            }
            d[i] = kind == V_NORM ? (double)v[i] - 1.0 : log(-(double)v[i]);
        }
        st = d ? add3(x, hf, CLLM_DT_F64, s0, s1, s2, d) : oom(x);
    }
    free(v);
    return st;
}

static cllm_status vec(gctx *x, const cllm_gguf_tensor *t, const char *hf, int kind, int64_t unit,
                       int64_t from, int64_t s0, int64_t s1) {
    return vec3(x, t, hf, kind, unit, from, s0, s1, 0);
}

static cllm_status want_shape(gctx *x, const cllm_gguf_tensor *t, int64_t e0, int64_t e1,
                              int64_t e2) {
    if (t->ne[0] == e0 && t->ne[1] == e1 && t->ne[2] == e2 && t->ne[3] == 1) return CLLM_OK;
    return cllm_err_set(x->err, CLLM_EFORMAT,
                        "%s: tensor %s has ne [%lld, %lld, %lld, %lld], the config implies "
                        "[%lld, %lld, %lld]",
                        x->f->path, t->name, (long long)t->ne[0], (long long)t->ne[1],
                        (long long)t->ne[2], (long long)t->ne[3], (long long)e0, (long long)e1,
                        (long long)e2);
}

/* Experts: a 3-D [E][N][K] tensor into per-expert HF matrices (rows [r0, r0 + N) of each). */
static cllm_status experts(gctx *x, const cllm_gguf_tensor *t, const char *lp, const char *what,
                           int64_t N, int64_t K, int64_t r0, int64_t n_all) {
    cllm_status st = want_shape(x, t, K, n_all, x->s.E);
    int bytes, blk = cllm_ggml_block(t->type, &bytes);
    size_t rb = (size_t)(K / blk) * (size_t)bytes;
    for (int64_t e = 0; e < x->s.E && !st; e++) {
        char hf[200];
        snprintf(hf, sizeof(hf), "%smlp.experts.%lld.%s", lp, (long long)e, what);
        st = mat(x, t, hf, (const uint8_t *)t->data + ((size_t)e * (size_t)n_all + (size_t)r0) * rb,
                 N, K, NULL);
    }
    return st;
}

/* One tensor of decoder block `L` (suffix after "blk.L."): lp is its HF layer prefix. */
static cllm_status layer_tensor(gctx *x, const cllm_gguf_tensor *t, const char *sfx,
                                const char *lp) {
    const shape *s = &x->s;
    const int64_t H = s->H, qk = 2 * s->Hk * s->dk, vd = s->Hv * s->dv;
    char hf[200];
#define IS(n) (!strcmp(sfx, n))
#define HF(n) (snprintf(hf, sizeof(hf), "%s%s", lp, n), hf)
    const perm pv_rows = {qk, s->dv, 0}, pz = {0, s->dv, 0}, pab = {0, 1, 0}, pout = {0, 0, s->dv};
    if (IS("attn_norm.weight")) return vec(x, t, HF("input_layernorm.weight"), V_NORM, 0, 0, H, 0);
    if (IS("post_attention_norm.weight"))
        return vec(x, t, HF("post_attention_layernorm.weight"), V_NORM, 0, 0, H, 0);
    if (IS("attn_q_norm.weight"))
        return vec(x, t, HF("self_attn.q_norm.weight"), V_NORM, 0, 0, s->hd, 0);
    if (IS("attn_k_norm.weight"))
        return vec(x, t, HF("self_attn.k_norm.weight"), V_NORM, 0, 0, s->hd, 0);
    if (IS("attn_q.weight")) return mat(x, t, HF("self_attn.q_proj"), t->data, t->ne[1], H, NULL);
    if (IS("attn_k.weight")) return mat(x, t, HF("self_attn.k_proj"), t->data, t->ne[1], H, NULL);
    if (IS("attn_v.weight")) return mat(x, t, HF("self_attn.v_proj"), t->data, t->ne[1], H, NULL);
    if (IS("attn_output.weight"))
        return mat(x, t, HF("self_attn.o_proj"), t->data, H, t->ne[0], NULL);
    if (IS("attn_qkv.weight")) {
        cllm_status st = want_shape(x, t, H, qk + vd, 1);
        return st ? st : mat(x, t, HF("linear_attn.in_proj_qkv"), t->data, qk + vd, H, &pv_rows);
    }
    if (IS("attn_gate.weight")) {
        cllm_status st = want_shape(x, t, H, vd, 1);
        return st ? st : mat(x, t, HF("linear_attn.in_proj_z"), t->data, vd, H, &pz);
    }
    if (IS("ssm_beta.weight") || IS("ssm_alpha.weight")) {
        cllm_status st = want_shape(x, t, H, s->Hv, 1);
        return st ? st
                  : mat(x, t,
                        HF(IS("ssm_beta.weight") ? "linear_attn.in_proj_b"
                                                 : "linear_attn.in_proj_a"),
                        t->data, s->Hv, H, &pab);
    }
    if (IS("ssm_out.weight")) {
        cllm_status st = want_shape(x, t, vd, H, 1);
        return st ? st : mat(x, t, HF("linear_attn.out_proj"), t->data, H, vd, &pout);
    }
    if (IS("ssm_conv1d.weight")) {
        cllm_status st = want_shape(x, t, s->conv_k, qk + vd, 1);
        /* channel c's taps are one row of conv_k: V channels move by head like in_proj_qkv */
        return st ? st
                  : vec3(x, t, HF("linear_attn.conv1d.weight"), V_PLAIN, s->dv * s->conv_k,
                         qk * s->conv_k, qk + vd, 1, s->conv_k);
    }
    if (IS("ssm_dt.bias")) return vec(x, t, HF("linear_attn.dt_bias"), V_PLAIN, 1, 0, s->Hv, 0);
    if (IS("ssm_a")) return vec(x, t, HF("linear_attn.A_log"), V_ALOG, 1, 0, s->Hv, 0);
    if (IS("ssm_norm.weight"))
        return vec(x, t, HF("linear_attn.norm.weight"), V_PLAIN, 0, 0, s->dv, 0);
    if (IS("ffn_gate_inp.weight")) {
        cllm_status st = want_shape(x, t, H, s->E, 1);
        return st ? st : mat(x, t, HF("mlp.gate"), t->data, s->E, H, NULL);
    }
    if (IS("ffn_gate_inp_shexp.weight"))
        return vec(x, t, HF("mlp.shared_expert_gate.weight"), V_PLAIN, 0, 0, 1, H);
    if (IS("ffn_gate_shexp.weight"))
        return mat(x, t, HF("mlp.shared_expert.gate_proj"), t->data, s->Is, H, NULL);
    if (IS("ffn_up_shexp.weight"))
        return mat(x, t, HF("mlp.shared_expert.up_proj"), t->data, s->Is, H, NULL);
    if (IS("ffn_down_shexp.weight"))
        return mat(x, t, HF("mlp.shared_expert.down_proj"), t->data, H, s->Is, NULL);
    if (IS("ffn_gate_exps.weight")) return experts(x, t, lp, "gate_proj", s->I, H, 0, s->I);
    if (IS("ffn_up_exps.weight")) return experts(x, t, lp, "up_proj", s->I, H, 0, s->I);
    if (IS("ffn_down_exps.weight")) return experts(x, t, lp, "down_proj", H, s->I, 0, H);
    if (IS("ffn_gate_up_exps.weight")) { /* gate rows first, as in HF's gate_up_proj */
        cllm_status st = experts(x, t, lp, "gate_proj", s->I, H, 0, 2 * s->I);
        return st ? st : experts(x, t, lp, "up_proj", s->I, H, s->I, 2 * s->I);
    }
#undef IS
#undef HF
    return cllm_err_set(x->err, CLLM_EUNSUPPORTED,
                        "%s: tensor %s is not part of a qwen35moe model cllm knows", x->f->path,
                        t->name);
}

/* MTP (nextn) block tensors that are not ordinary layer tensors. */
static cllm_status nextn_tensor(gctx *x, const cllm_gguf_tensor *t, const char *sfx, bool *done) {
    *done = true;
    const int64_t H = x->s.H;
    if (!strcmp(sfx, "nextn.eh_proj.weight")) return mat(x, t, "mtp.fc", t->data, H, 2 * H, NULL);
    if (!strcmp(sfx, "nextn.enorm.weight"))
        return vec(x, t, "mtp.pre_fc_norm_embedding.weight", V_NORM, 0, 0, H, 0);
    if (!strcmp(sfx, "nextn.hnorm.weight"))
        return vec(x, t, "mtp.pre_fc_norm_hidden.weight", V_NORM, 0, 0, H, 0);
    if (!strcmp(sfx, "nextn.shared_head_norm.weight"))
        return vec(x, t, "mtp.norm.weight", V_NORM, 0, 0, H, 0);
    if (!strncmp(sfx, "nextn.", 6))
        return cllm_err_set(x->err, CLLM_EUNSUPPORTED,
                            "%s: tensor %s: a dedicated MTP embedding / head is not part of "
                            "Qwen3.5 (it shares the model's)",
                            x->f->path, t->name);
    *done = false;
    return CLLM_OK;
}

static cllm_status one_tensor(gctx *x, const cllm_gguf_tensor *t) {
    const int64_t H = x->s.H;
    if (!strcmp(t->name, "token_embd.weight")) {
        /* tied to the lm_head: F32 (weights.c refuses a GPTQ-form embedding that is also the
         * head: the head's panel repack would drop the rows the lookup reads) */
        if (!cllm_gguf_tensor_find(x->g, "output.weight"))
            return mat_f32(x, t, PREFIX "embed_tokens.weight", t->data, t->ne[1], H, NULL);
        return mat(x, t, PREFIX "embed_tokens", t->data, t->ne[1], H, NULL);
    }
    if (!strcmp(t->name, "output.weight")) return mat(x, t, "lm_head", t->data, t->ne[1], H, NULL);
    if (!strcmp(t->name, "output_norm.weight"))
        return vec(x, t, PREFIX "norm.weight", V_NORM, 0, 0, H, 0);
    long long L;
    int used = 0;
    if (sscanf(t->name, "blk.%lld.%n", &L, &used) != 1 || !used || L < 0 ||
        L >= x->s.n_layer + x->s.n_mtp)
        return cllm_err_set(x->err, CLLM_EUNSUPPORTED,
                            "%s: tensor %s is not part of a qwen35moe model cllm knows", x->f->path,
                            t->name);
    const char *sfx = t->name + used;
    char lp[96];
    if (L < x->s.n_layer) {
        snprintf(lp, sizeof(lp), PREFIX "layers.%lld.", L);
    } else {
        bool done;
        cllm_status st = nextn_tensor(x, t, sfx, &done);
        if (done) return st;
        snprintf(lp, sizeof(lp), "mtp.layers.%lld.", L - x->s.n_layer);
    }
    return layer_tensor(x, t, sfx, lp);
}

static bool kint(const cllm_gguf *g, const char *key, int64_t *v) {
    char k[128];
    snprintf(k, sizeof(k), ARCH ".%s", key);
    return cllm_gguf_get_int(g, k, v);
}

static cllm_status read_shape(const cllm_gguf *g, shape *s, const char *path, cllm_error *err) {
    char *arch = cllm_gguf_get_str(g, "general.architecture");
    bool ok = arch && !strcmp(arch, ARCH);
    if (!ok) {
        cllm_status st = cllm_err_set(err, CLLM_EUNSUPPORTED,
                                      "%s: general.architecture is '%s'; cllm reads '" ARCH
                                      "' GGUFs (Qwen3.5-MoE)",
                                      path, arch ? arch : "(missing)");
        free(arch);
        return st;
    }
    free(arch);
    int64_t blocks = 0, inner = 0;
    memset(s, 0, sizeof(*s));
    const struct {
        const char *key;
        int64_t *v;
    } req[] = {{"block_count", &blocks},
               {"embedding_length", &s->H},
               {"attention.head_count", &s->heads},
               {"attention.head_count_kv", &s->kv_heads},
               {"attention.key_length", &s->hd},
               {"ssm.conv_kernel", &s->conv_k},
               {"ssm.state_size", &s->dk},
               {"ssm.group_count", &s->Hk},
               {"ssm.time_step_rank", &s->Hv},
               {"ssm.inner_size", &inner},
               {"expert_count", &s->E},
               {"expert_feed_forward_length", &s->I}};
    for (size_t i = 0; i < sizeof(req) / sizeof(req[0]); i++)
        if (!kint(g, req[i].key, req[i].v) || *req[i].v <= 0 || *req[i].v > (1 << 24))
            return cllm_err_set(err, CLLM_EFORMAT, "%s: key " ARCH ".%s missing or out of range",
                                path, req[i].key);
    kint(g, "nextn_predict_layers", &s->n_mtp);
    kint(g, "expert_shared_feed_forward_length", &s->Is);
    if (s->n_mtp < 0 || s->n_mtp >= blocks || inner % s->Hv || s->Hv % s->Hk)
        return cllm_err_set(err, CLLM_EFORMAT,
                            "%s: nextn_predict_layers %lld / ssm.inner_size %lld / "
                            "time_step_rank %lld / group_count %lld are inconsistent",
                            path, (long long)s->n_mtp, (long long)inner, (long long)s->Hv,
                            (long long)s->Hk);
    s->n_layer = blocks - s->n_mtp;
    s->dv = inner / s->Hv;
    return CLLM_OK;
}

cllm_status cllm_gguf_config(const cllm_gguf *g, json_t **out, cllm_error *err) {
    *out = NULL;
    shape s;
    cllm_status st = read_shape(g, &s, g->paths[0], err);
    if (st) return st;
    int64_t v, ctx = 262144, interval = 4, used = 8, rope_dims = s.hd / 4, eos = -1;
    double eps = 1e-6, theta = 1e7;
    cllm_gguf_get_f64(g, ARCH ".attention.layer_norm_rms_epsilon", &eps);
    cllm_gguf_get_f64(g, ARCH ".rope.freq_base", &theta);
    kint(g, "context_length", &ctx);
    kint(g, "full_attention_interval", &interval);
    kint(g, "expert_used_count", &used);
    kint(g, "rope.dimension_count", &rope_dims);
    cllm_gguf_get_int(g, "tokenizer.ggml.eos_token_id", &eos);
    const cllm_gguf_tensor *emb = cllm_gguf_tensor_find(g, "token_embd.weight");
    if (!emb)
        return cllm_err_set(err, CLLM_EFORMAT, "%s: tensor token_embd.weight missing", g->paths[0]);
    json_t *sec = json_array();
    const cllm_gguf_kv *ds = cllm_gguf_kv_find(g, ARCH ".rope.dimension_sections");
    for (uint64_t i = 0; i < 3; i++) /* the fourth (unused by text) section is dropped */
        json_array_append_new(sec, json_integer(cllm_gguf_arr_int(ds, i, &v) ? v : 0));
    bool gate = false;
    for (int64_t L = 0; L < s.n_layer && !gate; L++) {
        char n[64];
        snprintf(n, sizeof(n), "blk.%lld.attn_q.weight", (long long)L);
        const cllm_gguf_tensor *q = cllm_gguf_tensor_find(g, n);
        if (q) gate = q->ne[1] == 2 * s.heads * s.hd;
    }
    json_t *tc = json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:b, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
        "s:I, s:I, s:I, s:f, s:{s:f, s:f, s:s, s:o, s:b}, s:f, s:I, s:b, s:I}",
        "model_type", "qwen3_5_moe_text", "vocab_size", (json_int_t)emb->ne[1], "hidden_size",
        (json_int_t)s.H, "num_hidden_layers", (json_int_t)s.n_layer, "num_attention_heads",
        (json_int_t)s.heads, "num_key_value_heads", (json_int_t)s.kv_heads, "head_dim",
        (json_int_t)s.hd, "attn_output_gate", gate, "attention_bias", 0, "linear_num_key_heads",
        (json_int_t)s.Hk, "linear_num_value_heads", (json_int_t)s.Hv, "linear_key_head_dim",
        (json_int_t)s.dk, "linear_value_head_dim", (json_int_t)s.dv, "linear_conv_kernel_dim",
        (json_int_t)s.conv_k, "num_experts", (json_int_t)s.E, "num_experts_per_tok",
        (json_int_t)used, "moe_intermediate_size", (json_int_t)s.I,
        "shared_expert_intermediate_size", (json_int_t)s.Is, "max_position_embeddings",
        (json_int_t)ctx, "full_attention_interval", (json_int_t)interval, "rms_norm_eps", eps,
        "rope_parameters", "rope_theta", theta, "partial_rotary_factor",
        (double)rope_dims / (double)s.hd, "rope_type", "default", "mrope_section", sec,
        "mrope_interleaved", 1, "partial_rotary_factor", (double)rope_dims / (double)s.hd,
        "mtp_num_hidden_layers", (json_int_t)s.n_mtp, "tie_word_embeddings",
        !cllm_gguf_tensor_find(g, "output.weight"), "eos_token_id", (json_int_t)eos);
    if (!tc) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    if (eos < 0) json_object_set_new(tc, "eos_token_id", json_null());
    json_t *root =
        json_pack("{s:[s], s:s, s:o, s:b}", "architectures", "Qwen3_5MoeForConditionalGeneration",
                  "model_type", "qwen3_5_moe", "text_config", tc, "tie_word_embeddings",
                  !cllm_gguf_tensor_find(g, "output.weight"));
    if (!root) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    *out = root;
    return CLLM_OK;
}

cllm_status cllm_gguf_ckpt_fill(cllm_ckpt *c, const char *path, cllm_error *err) {
    gguf_owner *o = calloc(1, sizeof(*o));
    cllm_st_file *f = calloc(1, sizeof(*f));
    c->files = calloc(1, sizeof(*c->files));
    c->file_names = calloc(1, sizeof(*c->file_names));
    const char *base = strrchr(path, '/');
    if (!o || !f || !c->files || !c->file_names || !(f->path = strdup(path)) ||
        !(c->file_names[0] = strdup(base ? base + 1 : path))) {
        free(o);
        if (f) free(f->path);
        free(f);
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    c->files[0] = f;
    c->n_files = 1;
    c->owner = o;
    c->owner_free = owner_free;
    /* the user's file, not the private folder's link to it, in every message */
    char *real = realpath(path, NULL);
    cllm_status st = cllm_gguf_open(real ? real : path, &o->g, err);
    if (real) {
        free(f->path);
        f->path = real;
    }
    if (st) return st;
    gctx x = {o->g, f, 0, &o->ar, {0}, err, 0, NULL};
    if ((st = read_shape(o->g, &x.s, path, err))) return st;
    for (size_t i = 0; i < o->g->n_tensors && !st; i++) st = one_tensor(&x, &o->g->tensors[i]);
    if (x.pool) cllm_pool_free(x.pool);
    return st;
}

static cllm_status write_json(const char *dir, const char *name, json_t *j, cllm_error *err) {
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    if (json_dump_file(j, p, JSON_INDENT(2)))
        return cllm_err_set(err, CLLM_EIO, "%s: cannot write", p);
    return CLLM_OK;
}

static cllm_status write_text(const char *dir, const char *name, const char *text,
                              cllm_error *err) {
    char p[4200];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    size_t n = strlen(text);
    bool ok = f && fwrite(text, 1, n, f) == n;
    if (f && fclose(f)) ok = false;
    return ok ? CLLM_OK : cllm_err_set(err, CLLM_EIO, "%s: cannot write", p);
}

cllm_status cllm_gguf_model_dir(const char *path, const char *dir, cllm_error *err) {
    char *abs = realpath(path, NULL);
    if (!abs) return cllm_err_set(err, CLLM_EIO, "%s: cannot open", path);
    cllm_gguf *g = NULL;
    cllm_status st = cllm_gguf_open(abs, &g, err);
    json_t *cfg = NULL;
    if (!st) st = cllm_gguf_config(g, &cfg, err);
    if (!st) st = write_json(dir, "config.json", cfg, err);
    json_decref(cfg);
    char *tj = NULL, *tc = NULL;
    cllm_error terr = {0};
    if (!st && cllm_gguf_kv_find(g, "tokenizer.ggml.tokens")) { /* else: --tokenizer DIR */
        if (cllm_gguf_tokenizer_json(g, &tj, &tc, &terr))
            LOG_WARN("%s: no tokenizer from its metadata (%s); pass --tokenizer DIR", path,
                     terr.msg);
        else {
            st = write_text(dir, "tokenizer.json", tj, err);
            if (!st && tc) st = write_text(dir, "tokenizer_config.json", tc, err);
        }
    }
    free(tj);
    free(tc);
    for (int i = 0; !st && i < g->n_files; i++) { /* each part under its own name (splits) */
        const char *b = strrchr(g->paths[i], '/');
        char link[4200];
        snprintf(link, sizeof(link), "%s/%s", dir, b ? b + 1 : g->paths[i]);
        if (symlink(g->paths[i], link))
            st = cllm_err_set(err, CLLM_EIO, "%s: cannot link to %s", link, g->paths[i]);
    }
    cllm_gguf_close(g);
    free(abs);
    return st;
}
