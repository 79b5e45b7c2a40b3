/* cllm_vision_encode: the vision tower's forward pass (docs/model.md "Vision tower") over one
 * image's patches, on a forward context's thread pool and matmul queue.
 *
 * Patches come in the processor's order (t, h/merge, w/merge, merge row, merge column), so the
 * merger's groups of merge^2 patches are consecutive rows and each frame's patches are one
 * contiguous run: attention (bidirectional, within a frame) and the merger need no gather. The
 * position-embedding interpolation and the rotary angles decode each patch's (row, column) from
 * that order.
 *
 * Every matmul goes through fwd_mm_add / fwd_mm_run (any weight format the text model takes);
 * the per-row steps (LayerNorm, bias, GELU, rotary) are split over rows by cllm_pool_for;
 * attention is one item per (frame, head, block of ATT_QB queries), whose scores use the
 * kernels' matmul_f32 and whose value sum uses gemm_f32. Every output element is computed inside
 * one item by a fixed sequence of operations, so the result does not depend on the thread count.
 *
 * Scratch is allocated per call and freed before returning: an image costs seconds of compute,
 * its buffers' allocation microseconds. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/threadpool.h"
#include "model/vision.h"
#include "model/vision_int.h"

/* Query rows per attention item: a 32 x Nf score block of a 1344^2 image (7056 patches) is
 * 0.9 MB, L2-sized; items stay long enough (tens of microseconds) to share out dynamically. */
#define ATT_QB 32

#define LN_EPS 1e-6 /* every LayerNorm of the tower (HF: nn.LayerNorm(..., eps=1e-6)) */

typedef struct venc {
    cllm_fwd_ctx *c;
    const fwd_vision *v;
    int N, h, w, Nf; /* patches; grid height and width; patches per frame */
    float *x;        /* [N][D] residual stream */
    float *xn;       /* [N][D] normed rows */
    float *qkv;      /* [N][3D] */
    float *o;        /* [N][D] attention output, then the projection's */
    float *big;      /* [N][max(F, D)]: fc1 output; merger fc1 output [N/m^2][m^2 D] */
    float *ang_cs;   /* [N][hd]: cos of the hd/2 rotary angles, then their sin */
    float *att;      /* [n_threads][ATT_QB][Nf] attention scores */
    /* the current row job */
    const float *jw, *jb;
    const float *jsrc;
    float *jdst;
    int jn;     /* row width */
    size_t jld; /* row stride of jsrc / jdst */
    int jact;   /* ACT_* */
} venc;

enum { ACT_NONE, ACT_GELU_TANH, ACT_GELU_ERF, ACT_RESID };

/* (row, column) in the patch grid of patch i of a frame, from the merge-block order. */
static void patch_rc(int i, int w, int m, int *row, int *col) {
    int bw = w / m;
    int in_col = i % m, in_row = (i / m) % m, bcol = (i / (m * m)) % bw, brow = i / (m * m * bw);
    *row = brow * m + in_row;
    *col = bcol * m + in_col;
}

/* One axis of the bilinear resampling of the side-long learned grid to n positions
 * (align_corners: index i maps to i * (side - 1) / (n - 1)): the two taps and their weights. */
static void interp_axis(int i, int n, int side, int *i0, int *i1, double *w0, double *w1) {
    double src = n > 1 ? (double)i * (side - 1) / (n - 1) : 0.0;
    int f = (int)floor(src);
    double d = src - f;
    *i0 = f;
    *i1 = f + 1 < side ? f + 1 : side - 1;
    *w0 = 1.0 - d;
    *w1 = d;
}

/* x[i] = (patch_w . pixels[i] + patch_b) + interpolated position embedding of i, and patch i's
 * rotary cos / sin. The projection itself ran before (into x). */
static void embed_worker(void *vc, size_t b, size_t e, int tid) {
    (void)tid;
    venc *E = vc;
    const fwd_vision *v = E->v;
    const int D = v->D, m = v->merge, side = v->side, q = v->hd / 4, half = v->hd / 2;
    for (size_t p = b; p < e; p++) {
        int i = (int)(p % (size_t)E->Nf), row, col;
        patch_rc(i, E->w, m, &row, &col);
        int h0, h1, w0, w1;
        double ah, bh, aw, bw;
        interp_axis(row, E->h, side, &h0, &h1, &ah, &bh);
        interp_axis(col, E->w, side, &w0, &w1, &aw, &bw);
        const float *r00 = v->pos + ((size_t)h0 * side + w0) * D;
        const float *r01 = v->pos + ((size_t)h0 * side + w1) * D;
        const float *r10 = v->pos + ((size_t)h1 * side + w0) * D;
        const float *r11 = v->pos + ((size_t)h1 * side + w1) * D;
        const double c00 = ah * aw, c01 = ah * bw, c10 = bh * aw, c11 = bh * bw;
        float *x = E->x + p * D;
        for (int d = 0; d < D; d++) {
            double pe = c00 * r00[d] + c01 * r01[d] + c10 * r10[d] + c11 * r11[d];
            x[d] = (x[d] + v->patch_b[d]) + (float)pe;
        }
        /* 2-D rotary: the first hd/4 angles are the row's, the next hd/4 the column's, each
         * pos * theta^(-4j / hd) (inv_freq over hd/2 dims, step 2); the hd/2 angles serve
         * both halves of the head (rotate_half) */
        float *cs = E->ang_cs + p * v->hd;
        for (int j = 0; j < q; j++) {
            double inv = pow(10000.0, -4.0 * j / v->hd);
            double ar = row * inv, ac = col * inv;
            cs[j] = (float)cos(ar);
            cs[half + j] = (float)sin(ar);
            cs[q + j] = (float)cos(ac);
            cs[half + q + j] = (float)sin(ac);
        }
    }
}

/* jdst row = LayerNorm(jsrc row) * jw + jb over jn values (mean and variance in double). */
static void ln_worker(void *vc, size_t b, size_t e, int tid) {
    (void)tid;
    venc *E = vc;
    const int n = E->jn;
    for (size_t r = b; r < e; r++) {
        const float *x = E->jsrc + r * E->jld;
        float *y = E->jdst + r * E->jld;
        double s = 0.0, ss = 0.0;
        for (int i = 0; i < n; i++) s += x[i];
        const double mean = s / n;
        for (int i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
        const double rstd = 1.0 / sqrt(ss / n + LN_EPS);
        for (int i = 0; i < n; i++) y[i] = (float)((x[i] - mean) * rstd) * E->jw[i] + E->jb[i];
    }
}

/* x/2 (1 + tanh(u)) = x sigmoid(2u): one expf instead of tanhf (perf on a 448^2 image: tanhf's
 * expm1f was 10% of the encode, expf is a third of that); exp overflow gives x / inf = 0. */
static inline float gelu_tanh(float x) {
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}
static inline float gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
}

/* jdst row (jn wide, stride jld) += jb, then the activation; ACT_RESID: E->x row += that. */
static void bias_worker(void *vc, size_t b, size_t e, int tid) {
    (void)tid;
    venc *E = vc;
    const int n = E->jn;
    for (size_t r = b; r < e; r++) {
        float *y = E->jdst + r * E->jld;
        switch (E->jact) {
        case ACT_NONE:
            for (int i = 0; i < n; i++) y[i] += E->jb[i];
            break;
        case ACT_GELU_TANH:
            for (int i = 0; i < n; i++) y[i] = gelu_tanh(y[i] + E->jb[i]);
            break;
        case ACT_GELU_ERF:
            for (int i = 0; i < n; i++) y[i] = gelu_erf(y[i] + E->jb[i]);
            break;
        case ACT_RESID: {
            float *x = E->x + r * n;
            for (int i = 0; i < n; i++) x[i] += y[i] + E->jb[i];
            break;
        }
        }
    }
}

/* q and k of every head of rows [b, e) of qkv rotated in place: out[i] = x[i] cos - x[i + hd/2]
 * sin, out[i + hd/2] = x[i + hd/2] cos + x[i] sin for i < hd/2. */
static void rope_worker(void *vc, size_t b, size_t e, int tid) {
    (void)tid;
    venc *E = vc;
    const fwd_vision *v = E->v;
    const int D = v->D, hd = v->hd, half = hd / 2;
    for (size_t r = b; r < e; r++) {
        const float *cs = E->ang_cs + r * hd, *sn = cs + half;
        for (int part = 0; part < 2; part++) /* q, then k */
            for (int hh = 0; hh < v->heads; hh++) {
                float *x = E->qkv + r * 3 * D + (size_t)part * D + (size_t)hh * hd;
                for (int i = 0; i < half; i++) {
                    float a = x[i], bb = x[half + i];
                    x[i] = a * cs[i] - bb * sn[i];
                    x[half + i] = bb * cs[i] + a * sn[i];
                }
            }
    }
}

/* Item (frame, head, query block): scores = q k^T (matmul_f32), softmax with the scale folded
 * into the exponent, o = p v (gemm_f32), divided by the row's sum. */
static void att_worker(void *vc, size_t b, size_t e, int tid) {
    venc *E = vc;
    const fwd_vision *v = E->v;
    const cllm_kern_ops *k = E->c->k;
    const int D = v->D, hd = v->hd, Nf = E->Nf, nqb = (Nf + ATT_QB - 1) / ATT_QB;
    const size_t ld = 3 * (size_t)D;
    const float scale = (float)(1.0 / sqrt((double)hd));
    float *S = E->att + (size_t)tid * ATT_QB * Nf;
    for (size_t it = b; it < e; it++) {
        int qb = (int)(it % nqb), hh = (int)(it / nqb % v->heads), f = (int)(it / nqb / v->heads);
        int q0 = qb * ATT_QB, nq = Nf - q0 < ATT_QB ? Nf - q0 : ATT_QB;
        const float *base = E->qkv + (size_t)f * Nf * ld + (size_t)hh * hd;
        k->matmul_f32(base + D, ld, Nf, base + (size_t)q0 * ld, ld, nq, hd, S, (size_t)Nf);
        float inv[ATT_QB];
        for (int t = 0; t < nq; t++) {
            float *s = S + (size_t)t * Nf, mx = s[0];
            for (int j = 1; j < Nf; j++) mx = s[j] > mx ? s[j] : mx;
            double sum = 0.0;
            for (int j = 0; j < Nf; j++) {
                s[j] = expf((s[j] - mx) * scale);
                sum += s[j];
            }
            inv[t] = (float)(1.0 / sum);
        }
        float *o = E->o + ((size_t)f * Nf + q0) * D + (size_t)hh * hd;
        k->gemm_f32(nq, hd, Nf, S, (size_t)Nf, base + 2 * D, ld, o, (size_t)D, CLLM_GEMM_SET);
        for (int t = 0; t < nq; t++)
            for (int i = 0; i < hd; i++) o[(size_t)t * D + i] *= inv[t];
    }
}

static void rows_run(venc *E, size_t n, cllm_pool_fn fn) {
    cllm_pool_for(E->c->pool, n, fn, E);
}

static void run_ln(venc *E, const float *w, const float *b, const float *src, float *dst, int n,
                   size_t ld, size_t rows) {
    E->jw = w, E->jb = b, E->jsrc = src, E->jdst = dst, E->jn = n, E->jld = ld;
    rows_run(E, rows, ln_worker);
}

static void run_bias(venc *E, const float *b, float *dst, int n, size_t ld, size_t rows, int act) {
    E->jb = b, E->jdst = dst, E->jn = n, E->jld = ld, E->jact = act;
    rows_run(E, rows, bias_worker);
}

/* Y = X W^T through the forward's matmul queue. */
static cllm_status mm(venc *E, const fwd_wt *w, const float *X, size_t ldx, int n, float *Y,
                      size_t ldy) {
    cllm_status s = fwd_mm_add(E->c, w, X, ldx, n, Y, ldy);
    return s != CLLM_OK ? s : fwd_mm_run(E->c);
}

static cllm_status run_block(venc *E, const fwd_vblock *B) {
    const fwd_vision *v = E->v;
    const int D = v->D, F = v->F, N = E->N;
    cllm_status s;
    run_ln(E, B->n1_w, B->n1_b, E->x, E->xn, D, D, N);
    if ((s = mm(E, &B->qkv, E->xn, D, N, E->qkv, 3 * (size_t)D)) != CLLM_OK) return s;
    run_bias(E, B->qkv_b, E->qkv, 3 * D, 3 * (size_t)D, N, ACT_NONE);
    rows_run(E, N, rope_worker);
    size_t n_items = (size_t)(N / E->Nf) * v->heads * ((E->Nf + ATT_QB - 1) / ATT_QB);
    cllm_pool_for_dyn(E->c->pool, n_items, att_worker, E);
    if ((s = mm(E, &B->proj, E->o, D, N, E->xn, D)) != CLLM_OK) return s;
    run_bias(E, B->proj_b, E->xn, D, D, N, ACT_RESID);
    run_ln(E, B->n2_w, B->n2_b, E->x, E->xn, D, D, N);
    if ((s = mm(E, &B->fc1, E->xn, D, N, E->big, F)) != CLLM_OK) return s;
    run_bias(E, B->fc1_b, E->big, F, F, N, ACT_GELU_TANH);
    if ((s = mm(E, &B->fc2, E->big, F, N, E->xn, D)) != CLLM_OK) return s;
    run_bias(E, B->fc2_b, E->xn, D, D, N, ACT_RESID);
    return CLLM_OK;
}

bool cllm_model_has_vision(const cllm_model *m) {
    return m && m->vision;
}

/* The grid's refusal, or NULL when it is one the tower takes. */
static const char *grid_error(const cllm_model *m, int t, int h, int w) {
    const fwd_vision *v = m->vision;
    if (!v) return "the model has no vision tower";
    if (t < 1 || h < 1 || w < 1) return "grid dimensions must be positive";
    if (h % v->merge || w % v->merge) return "grid height and width must divide by the merge size";
    if (h > CLLM_VISION_MAX_SIDE || w > CLLM_VISION_MAX_SIDE) return "grid side too large";
    if ((long long)t * h * w > CLLM_VISION_MAX_PATCHES) return "too many patches";
    if ((h > w ? h : w) / v->merge > m->cfg.max_position_embeddings)
        return "merged grid side beyond max_position_embeddings";
    return NULL;
}

int cllm_vision_n_tokens(const cllm_model *m, int grid_t, int grid_h, int grid_w) {
    if (!m || grid_error(m, grid_t, grid_h, grid_w)) return 0;
    return grid_t * grid_h * grid_w / (m->vision->merge * m->vision->merge);
}

static void venc_free(venc *E) {
    float **bufs[] = {&E->x, &E->xn, &E->qkv, &E->o, &E->big, &E->ang_cs, &E->att};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++) {
        cllm_free_aligned(*bufs[i]);
        *bufs[i] = NULL;
    }
}

/* Work unit u of an encode: 0 the patch embedding, 1..depth the blocks, depth + 1 the merger
 * (its output is the caller's). */
static cllm_status run_unit(venc *E, int u, const float *pixels, float *out) {
    const fwd_vision *v = E->v;
    const int D = v->D, N = E->N, mm2 = v->merge * v->merge, M = D * mm2;
    cllm_status s;
    if (u == 0) {
        if ((s = mm(E, &v->patch_w, pixels, (size_t)v->patch_dim, N, E->x, D)) != CLLM_OK) return s;
        rows_run(E, N, embed_worker);
        return CLLM_OK;
    }
    if (u <= v->depth) return run_block(E, &v->blocks[u - 1]);
    /* merger: LayerNorm per patch, then groups of merge^2 consecutive rows read as one row */
    run_ln(E, v->mn_w, v->mn_b, E->x, E->xn, D, D, N);
    if ((s = mm(E, &v->mfc1, E->xn, M, N / mm2, E->big, M)) != CLLM_OK) return s;
    run_bias(E, v->mfc1_b, E->big, M, M, N / mm2, ACT_GELU_ERF);
    if ((s = mm(E, &v->mfc2, E->big, M, N / mm2, out, v->out)) != CLLM_OK) return s;
    run_bias(E, v->mfc2_b, out, v->out, v->out, N / mm2, ACT_NONE);
    return CLLM_OK;
}

struct cllm_vision_job {
    venc E;
    const float *pixels;
    int grid[3];
    int next, units; /* next work unit; depth + 2 in all */
};

cllm_status cllm_vision_job_start(cllm_fwd_ctx *c, const float *pixels, int grid_t, int grid_h,
                                  int grid_w, cllm_vision_job **out, cllm_error *err) {
    *out = NULL;
    const char *why = grid_error(c->m, grid_t, grid_h, grid_w);
    if (why)
        return cllm_err_set(err, CLLM_EINVAL, "vision encode (grid %d x %d x %d): %s", grid_t,
                            grid_h, grid_w, why);
    const fwd_vision *v = c->m->vision;
    cllm_vision_job *j = calloc(1, sizeof(*j));
    if (!j) return cllm_err_set(err, CLLM_ENOMEM, "vision encode: out of memory");
    venc *E = &j->E;
    *E = (venc){.c = c, .v = v, .h = grid_h, .w = grid_w, .Nf = grid_h * grid_w};
    E->N = grid_t * E->Nf;
    const size_t N = (size_t)E->N, D = (size_t)v->D;
    const size_t wide = (size_t)v->F > D ? (size_t)v->F : D;
    E->x = cllm_alloc_aligned(N * D * sizeof(float));
    E->xn = cllm_alloc_aligned(N * D * sizeof(float));
    E->qkv = cllm_alloc_aligned(N * 3 * D * sizeof(float));
    E->o = cllm_alloc_aligned(N * D * sizeof(float));
    E->big = cllm_alloc_aligned(N * wide * sizeof(float));
    E->ang_cs = cllm_alloc_aligned(N * (size_t)v->hd * sizeof(float));
    E->att = cllm_alloc_aligned((size_t)c->n_threads * ATT_QB * E->Nf * sizeof(float));
    if (!E->x || !E->xn || !E->qkv || !E->o || !E->big || !E->ang_cs || !E->att) {
        cllm_vision_job_free(j);
        return cllm_err_set(err, CLLM_ENOMEM, "vision encode (grid %d x %d x %d): out of memory",
                            grid_t, grid_h, grid_w);
    }
    j->pixels = pixels;
    j->grid[0] = grid_t, j->grid[1] = grid_h, j->grid[2] = grid_w;
    j->units = v->depth + 2;
    *out = j;
    return CLLM_OK;
}

int cllm_vision_job_units(const cllm_vision_job *j) {
    return j->units - j->next;
}

cllm_status cllm_vision_job_run(cllm_fwd_ctx *c, cllm_vision_job *j, int n_units, float *out,
                                bool *done, cllm_error *err) {
    venc *E = &j->E;
    cllm_status s = CLLM_OK;
    E->c = c;
    /* the matmul runner's profile tag belongs to the text forward's steps */
    bool prof = c->prof_on;
    c->prof_on = false;
    for (int k = 0; k < n_units && j->next < j->units && s == CLLM_OK; k++)
        if ((s = run_unit(E, j->next, j->pixels, out)) == CLLM_OK) j->next++;
    c->prof_on = prof;
    c->n_jobs = 0; /* a failed queue leaves nothing behind for the next call */
    *done = j->next == j->units;
    if (s != CLLM_OK)
        return cllm_err_set(err, s, "vision encode (grid %d x %d x %d): out of memory", j->grid[0],
                            j->grid[1], j->grid[2]);
    return CLLM_OK;
}

void cllm_vision_job_free(cllm_vision_job *j) {
    if (!j) return;
    venc_free(&j->E);
    free(j);
}

cllm_status cllm_vision_encode(cllm_fwd_ctx *c, const float *pixels, int grid_t, int grid_h,
                               int grid_w, float *out, cllm_error *err) {
    cllm_vision_job *j;
    cllm_status s = cllm_vision_job_start(c, pixels, grid_t, grid_h, grid_w, &j, err);
    if (s != CLLM_OK) return s;
    bool done = false;
    s = cllm_vision_job_run(c, j, j->units, out, &done, err);
    cllm_vision_job_free(j);
    return s;
}
