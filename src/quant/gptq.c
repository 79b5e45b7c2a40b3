/* GPTQ; see gptq.h. */
#include "quant/gptq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "model/fwd_int.h"
#include "tools/fwd_cli.h"

/* In-place Cholesky H = L L^T (lower). Returns -1 when not positive definite. */
static int chol(double *A, int n) {
    for (int j = 0; j < n; j++) {
        double d = A[(size_t)j * n + j];
        for (int k = 0; k < j; k++) d -= A[(size_t)j * n + k] * A[(size_t)j * n + k];
        if (!(d > 0)) return -1;
        d = sqrt(d);
        A[(size_t)j * n + j] = d;
        for (int i = j + 1; i < n; i++) {
            double s = A[(size_t)i * n + j];
            for (int k = 0; k < j; k++) s -= A[(size_t)i * n + k] * A[(size_t)j * n + k];
            A[(size_t)i * n + j] = s / d;
        }
        for (int i = 0; i < j; i++) A[(size_t)i * n + j] = 0;
    }
    return 0;
}

/* A (lower, [K][K]) = L2 with (H + damp * mean diag)^-1 = L2 L2^T; dead inputs (diag 0) get 1. */
static cllm_status gptq_factor(const float *H, int K, double damp, double *A, cllm_error *err) {
    double *Li = calloc((size_t)K * K, sizeof(double));
    if (!Li) return cllm_err_set(err, CLLM_ENOMEM, "gptq: out of memory (K = %d)", K);
    cllm_status st = CLLM_OK;
    double mean = 0;
    for (int i = 0; i < K; i++) mean += H[(size_t)i * K + i];
    mean /= K;
    if (!(mean > 0)) mean = 1;
    for (size_t i = 0; i < (size_t)K * K; i++) A[i] = H[i];
    for (int i = 0; i < K; i++) {
        if (A[(size_t)i * K + i] == 0) A[(size_t)i * K + i] = 1; /* dead input */
        A[(size_t)i * K + i] += damp * mean;
    }
    if (chol(A, K)) {
        st = cllm_err_set(err, CLLM_ERANGE, "gptq: Hessian not positive definite (raise damping)");
        goto done;
    }
    /* Li = L^-1 (lower), Hinv = Li^T Li; then U = chol(Hinv)^T (upper). */
    for (int j = 0; j < K; j++) {
        Li[(size_t)j * K + j] = 1.0 / A[(size_t)j * K + j];
        for (int i = j + 1; i < K; i++) {
            double s = 0;
            for (int k = j; k < i; k++) s -= A[(size_t)i * K + k] * Li[(size_t)k * K + j];
            Li[(size_t)i * K + j] = s / A[(size_t)i * K + i];
        }
    }
    for (int i = 0; i < K; i++)
        for (int j = 0; j <= i; j++) {
            double s = 0;
            for (int k = i; k < K; k++) s += Li[(size_t)k * K + i] * Li[(size_t)k * K + j];
            A[(size_t)i * K + j] = s;
            A[(size_t)j * K + i] = s;
        }
    if (chol(A, K))
        st = cllm_err_set(err, CLLM_ERANGE, "gptq: inverse Hessian not positive definite");
done:
    free(Li);
    return st;
}

/* Column-by-column quantization of W with the factor A of gptq_factor. */
static cllm_status gptq_apply(float *W, const float *H, const double *A, cllm_qbuf *q,
                              cllm_error *err) {
    int K = q->K, N = q->N, G = q->group;
    float *scale = malloc((size_t)N * sizeof(float)), *e = malloc((size_t)N * sizeof(float)),
          *u = malloc((size_t)K * sizeof(float));
    if (!scale || !e || !u) {
        free(scale), free(e), free(u);
        return cllm_err_set(err, CLLM_ENOMEM, "gptq: out of memory (N = %d)", N);
    }
    for (int i = 0; i < K; i++)
        if (H[(size_t)i * K + i] == 0) /* dead input: never active in calibration */
            for (int n = 0; n < N; n++) W[(size_t)n * K + i] = 0;
    /* A = L2 lower with Hinv = L2 L2^T; U[i][j] = L2[j][i]. */
    for (int i = 0; i < K; i++) {
        if (i % G == 0)
            for (int n = 0; n < N; n++) {
                float lo = 0, hi = 0;
                for (int k = i; k < i + G; k++)
                    lo = fminf(lo, W[(size_t)n * K + k]), hi = fmaxf(hi, W[(size_t)n * K + k]);
                scale[n] = cllm_quant_set_group_mm(q, i / G, n, lo, hi);
            }
        double d = A[(size_t)i * K + i];
        for (int n = 0; n < N; n++) {
            float w = W[(size_t)n * K + i];
            float dq = cllm_quant_set_code(q, n, i, w, scale[n]);
            e[n] = (float)((w - dq) / d);
        }
        /* column i of A made contiguous, rows of W walked in order (same arithmetic) */
        for (int j = i + 1; j < K; j++) u[j] = (float)A[(size_t)j * K + i];
        for (int n = 0; n < N; n++) {
            float en = e[n], *w = W + (size_t)n * K;
            for (int j = i + 1; j < K; j++) w[j] -= en * u[j];
        }
    }
    free(scale), free(e), free(u);
    return CLLM_OK;
}

cllm_status cllm_gptq_quantize(float *W, const float *H, double damp, cllm_qbuf *q,
                               cllm_error *err) {
    int K = q->K;
    double *A = malloc((size_t)K * K * sizeof(double));
    if (!A) return cllm_err_set(err, CLLM_ENOMEM, "gptq: out of memory (K = %d)", K);
    cllm_status st = gptq_factor(H, K, damp, A, err);
    if (st == CLLM_OK) st = gptq_apply(W, H, A, q, err);
    free(A);
    return st;
}

/* Calibration: the 16-bit model runs over the calibration tokens; every matmul input is added
 * into H = sum_t x_t x_t^T of the Linear it feeds, found by locating the weight pointer inside
 * the checkpoint's tensors (key "<tensor name>@<element offset>"). Linears queued back to back
 * on the same input (q/k/v, GDN qkv/z/b/a, an expert's gate/up) share one Hessian: the later
 * ones are aliases of the first ("root").
 *
 * Memory: a first pass only counts tokens per Linear (no Hessian). Then the caller runs one
 * pass per group of layers: it marks the Linears of the group (cllm_gptq_mark), and
 * cllm_gptq_pass runs the 16-bit model again over the same tokens, allocating a Hessian lazily
 * for each marked root that saw at least min_tokens tokens and ignoring every other matmul.
 * Every group is calibrated on the 16-bit model's activations, so the result does not depend on
 * the grouping. */
typedef struct hent {
    char key[224];
    int K;
    int root; /* index of the entry whose Hessian this one shares, -1 = itself */
    long n_tok;
    bool wanted;
    int tag;
    float *H;
} hent;

typedef struct span {
    const char *base;
    uint64_t nbytes;
    const cllm_tensor *t;
} span;

struct cllm_gptq {
    hent *h;
    size_t n, cap;
    span *spans;
    size_t n_spans, cap_spans;
    int min_tokens;
    long fallback_experts, fallback_other, used;
    char summary[160];
    bool oom, counting;
    /* the runner and tokens, kept across passes */
    fwd_seq_runner r;
    bool r_open;
    int32_t *tok;
    int n_calib, L, samples;
    FILE *out;
    int passes;
    uint64_t held, peak;
    /* the previous capture, to detect shared inputs */
    const fwd_wt *last_w;
    const float *last_X;
    size_t last_ldx, last_njobs;
    int last_ntok, last_K;
    long last_e;
    /* factor of the last Hessian quantized with (Linears sharing an input share it) */
    const float *fH;
    int fK;
    double fdamp, *fA;
};

static void add_span(void *ctx, const cllm_tensor *t) {
    cllm_gptq *g = ctx;
    if (g->n_spans == g->cap_spans) {
        size_t nc = g->cap_spans ? 2 * g->cap_spans : 256;
        span *ns = realloc(g->spans, nc * sizeof(*ns));
        if (!ns) {
            g->oom = true;
            return;
        }
        g->spans = ns;
        g->cap_spans = nc;
    }
    g->spans[g->n_spans++] = (span){t->data, t->nbytes, t};
}

static int cmp_span(const void *a, const void *b) {
    const char *x = ((const span *)a)->base, *y = ((const span *)b)->base;
    return x < y ? -1 : x > y;
}

static long find(cllm_gptq *g, const char *key, int K, bool create) {
    for (size_t i = 0; i < g->n; i++)
        if (!strcmp(g->h[i].key, key)) return (long)i;
    if (!create) return -1;
    if (g->n == g->cap) {
        size_t nc = g->cap ? 2 * g->cap : 64;
        hent *nh = realloc(g->h, nc * sizeof(*nh));
        if (!nh) return -1;
        g->h = nh;
        g->cap = nc;
    }
    hent *e = &g->h[g->n];
    memset(e, 0, sizeof(*e));
    snprintf(e->key, sizeof(e->key), "%s", key);
    e->K = K;
    e->root = -1;
    return (long)g->n++;
}

static hent *root_of(cllm_gptq *g, long i) {
    while (g->h[i].root >= 0) i = g->h[i].root;
    return &g->h[i];
}

static void capture(void *ctx, const fwd_wt *w, const float *X, size_t ldx, int n_tok) {
    cllm_gptq *g = ctx;
    const cllm_fwd_ctx *c = g->r.ctx;
    /* same input as the previous matmul of the same queue (no run in between)? */
    bool same = g->last_e >= 0 && c->n_jobs == g->last_njobs + 1 &&
                c->jobs[g->last_njobs].w == g->last_w && X == g->last_X && ldx == g->last_ldx &&
                n_tok == g->last_ntok && w->cols == g->last_K;
    long prev = g->last_e;
    g->last_w = w, g->last_X = X, g->last_ldx = ldx, g->last_ntok = n_tok, g->last_K = w->cols;
    g->last_njobs = c->n_jobs;
    g->last_e = -1;
    if (g->oom || w->q.bits) return;
    const char *p = w->data;
    size_t lo = 0, hi = g->n_spans; /* last span with base <= p */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (g->spans[mid].base <= p)
            lo = mid;
        else
            hi = mid;
    }
    if (!g->n_spans || p < g->spans[lo].base || p >= g->spans[lo].base + g->spans[lo].nbytes)
        return;
    const cllm_tensor *t = g->spans[lo].t;
    char key[224];
    snprintf(key, sizeof(key), "%s@%llu", t->name,
             (unsigned long long)((uint64_t)(p - g->spans[lo].base) / cllm_dtype_size(t->dtype)));
    int K = w->cols;
    long i = find(g, key, K, g->counting);
    if (i < 0) {
        if (g->counting) g->oom = true;
        return;
    }
    g->last_e = i;
    if (g->counting) {
        if (g->h[i].n_tok == 0 && g->h[i].root < 0 && same && prev != i) {
            hent *pr = root_of(g, prev);
            if (pr != &g->h[i]) g->h[i].root = (int)(pr - g->h);
        }
        if (g->h[i].root < 0) g->h[i].n_tok += n_tok;
        return;
    }
    hent *e = root_of(g, i);
    if (!e->wanted || e->n_tok < g->min_tokens || e->n_tok <= 0 || e->K != K) return;
    if (&g->h[i] != e) return; /* shares the root's input, added there */
    if (!e->H) {
        e->H = calloc((size_t)K * K, sizeof(float));
        if (!e->H) {
            g->oom = true;
            return;
        }
        g->held += (uint64_t)K * K * sizeof(float);
        if (g->held > g->peak) g->peak = g->held;
    }
    for (int s = 0; s < n_tok; s++) {
        const float *x = X + (size_t)s * ldx;
        for (int a = 0; a < K; a++) {
            float xi = x[a];
            float *row = e->H + (size_t)a * K;
            for (int b = 0; b < K; b++) row[b] += xi * x[b];
        }
    }
}

static cllm_status run_calib(cllm_gptq *g, const char *what, cllm_error *err) {
    cllm_status st = CLLM_OK;
    g->r.ctx->capture = capture;
    g->r.ctx->capture_ctx = g;
    g->last_e = -1;
    for (int s = 0; s < g->samples && st == CLLM_OK; s++) {
        int off = (int)(((long)s * g->L) % (g->n_calib - g->L + 1));
        g->r.pos = 0;
        st = fwd_runner_step(&g->r, g->tok + off, g->L, CLLM_LOGITS_NONE, NULL, err);
        if (g->out && (s + 1 == g->samples || (s & 7) == 7))
            fprintf(g->out, "\r%s: %d/%d sequences of %d tokens", what, s + 1, g->samples, g->L),
                fflush(g->out);
    }
    if (g->out) fprintf(g->out, "\n"), fflush(g->out);
    g->r.ctx->capture = NULL;
    if (st == CLLM_OK && g->oom)
        st = cllm_err_set(err, CLLM_ENOMEM, "calibration: out of memory for Hessians");
    return st;
}

cllm_status cllm_gptq_calibrate(const char *model_dir, const cllm_gptq_opts *o, cllm_gptq **out,
                                cllm_error *err) {
    *out = NULL;
    int32_t *tok = NULL;
    char arg[4200];
    snprintf(arg, sizeof(arg), "%s%s", o->calib[0] == '@' ? "" : "@", o->calib);
    int n = fwd_cli_parse_tokens(arg, &tok, err);
    if (n < 0) return CLLM_EINVAL;
    if (n < 2) {
        free(tok);
        return cllm_err_set(err, CLLM_EINVAL, "%s: need calibration token ids", o->calib);
    }
    cllm_gptq *g = calloc(1, sizeof(*g));
    int L = o->seq_len < n ? o->seq_len : n;
    cllm_status st = g ? fwd_runner_open(&g->r, model_dir, o->threads, L, 16, CLLM_KV_F32, err)
                       : cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    if (st) {
        free(g);
        free(tok);
        return st;
    }
    g->r_open = true;
    g->tok = tok;
    g->n_calib = n;
    g->L = L;
    g->samples = o->samples;
    g->out = o->out;
    g->min_tokens = o->min_tokens;
    cllm_ckpt_foreach(g->r.m->ckpt, add_span, g);
    qsort(g->spans, g->n_spans, sizeof(span), cmp_span);
    g->counting = true;
    st = run_calib(g, "calibration (counting tokens)", err);
    g->counting = false;
    if (st) {
        cllm_gptq_free(g);
        return st;
    }
    if (o->out) fprintf(o->out, "calibration: %d tokens, %zu linears\n", L * o->samples, g->n);
    *out = g;
    return CLLM_OK;
}

uint64_t cllm_gptq_need(cllm_gptq *g, const char *src_name, uint64_t off, int K, int tag) {
    char key[224];
    snprintf(key, sizeof(key), "%s@%llu", src_name, (unsigned long long)off);
    long i = find(g, key, K, false);
    if (i < 0) return 0;
    hent *e = root_of(g, i);
    if (e->K != K || e->n_tok < g->min_tokens || e->n_tok <= 0 || e->tag == tag) return 0;
    e->tag = tag;
    return (uint64_t)K * K * sizeof(float);
}

void cllm_gptq_mark(cllm_gptq *g, const char *src_name, uint64_t off, int K) {
    char key[224];
    snprintf(key, sizeof(key), "%s@%llu", src_name, (unsigned long long)off);
    long i = find(g, key, K, false);
    if (i >= 0) root_of(g, i)->wanted = true;
}

cllm_status cllm_gptq_pass(cllm_gptq *g, cllm_error *err) {
    char what[64];
    snprintf(what, sizeof(what), "calibration pass %d", ++g->passes);
    return run_calib(g, what, err);
}

void cllm_gptq_release(cllm_gptq *g) {
    for (size_t i = 0; i < g->n; i++) {
        free(g->h[i].H);
        g->h[i].H = NULL;
        g->h[i].wanted = false;
    }
    g->held = 0;
    g->fH = NULL; /* freed Hessians' addresses may come back */
}

const float *cllm_gptq_hessian(cllm_gptq *g, const char *src_name, uint64_t off, int K,
                               int *n_tok) {
    char key[224];
    snprintf(key, sizeof(key), "%s@%llu", src_name, (unsigned long long)off);
    long i = find(g, key, K, false);
    hent *e = i >= 0 ? root_of(g, i) : NULL;
    *n_tok = e ? (int)e->n_tok : 0;
    if (e && e->K == K && e->n_tok >= g->min_tokens && e->n_tok > 0 && e->H) {
        g->used++;
        return e->H;
    }
    if (strstr(src_name, "mlp.experts"))
        g->fallback_experts++;
    else
        g->fallback_other++;
    return NULL;
}

const char *cllm_gptq_summary(cllm_gptq *g) {
    char pk[32];
    cllm_fmt_bytes(pk, sizeof(pk), g->peak);
    snprintf(g->summary, sizeof(g->summary),
             "; %ld experts and %ld other linears saw fewer than %d "
             "calibration tokens and fell back to RTN; %d calibration passes, Hessians peak %s",
             g->fallback_experts, g->fallback_other, g->min_tokens, g->passes, pk);
    return g->summary;
}

void cllm_gptq_free(cllm_gptq *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n; i++) free(g->h[i].H);
    if (g->r_open) fwd_runner_close(&g->r);
    free(g->fA);
    free(g->tok);
    free(g->h);
    free(g->spans);
    free(g);
}

cllm_status cllm_gptq_quantize_with(cllm_gptq *g, float *W, const float *H, double damp,
                                    cllm_qbuf *q, cllm_error *err) {
    int K = q->K;
    if (g->fH != H || g->fK != K || g->fdamp != damp) {
        g->fH = NULL;
        if (g->fK != K || !g->fA) {
            free(g->fA);
            g->fK = 0;
            g->fA = malloc((size_t)K * K * sizeof(double));
            if (!g->fA) return cllm_err_set(err, CLLM_ENOMEM, "gptq: out of memory (K = %d)", K);
            g->fK = K;
        }
        cllm_status st = gptq_factor(H, K, damp, g->fA, err);
        if (st) return st;
        g->fH = H;
        g->fdamp = damp;
    }
    return gptq_apply(W, H, g->fA, q, err);
}
