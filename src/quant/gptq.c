/* GPTQ; see gptq.h. */
#include "quant/gptq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

cllm_status cllm_gptq_quantize(float *W, const float *H, double damp, cllm_qbuf *q,
                               cllm_error *err) {
    int K = q->K, N = q->N, G = q->group;
    double *A = malloc((size_t)K * K * sizeof(double)), *Li = calloc((size_t)K * K, sizeof(double));
    float *scale = malloc((size_t)N * sizeof(float)), *e = malloc((size_t)N * sizeof(float));
    cllm_status st = CLLM_OK;
    if (!A || !Li || !scale || !e) {
        st = cllm_err_set(err, CLLM_ENOMEM, "gptq: out of memory (K = %d)", K);
        goto done;
    }
    double mean = 0;
    for (int i = 0; i < K; i++) mean += H[(size_t)i * K + i];
    mean /= K;
    if (!(mean > 0)) mean = 1;
    for (size_t i = 0; i < (size_t)K * K; i++) A[i] = H[i];
    for (int i = 0; i < K; i++) {
        if (A[(size_t)i * K + i] == 0) { /* dead input: never active in calibration */
            A[(size_t)i * K + i] = 1;
            for (int n = 0; n < N; n++) W[(size_t)n * K + i] = 0;
        }
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
    if (chol(A, K)) {
        st = cllm_err_set(err, CLLM_ERANGE, "gptq: inverse Hessian not positive definite");
        goto done;
    }
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
        for (int j = i + 1; j < K; j++) {
            float u = (float)A[(size_t)j * K + i];
            for (int n = 0; n < N; n++) W[(size_t)n * K + j] -= e[n] * u;
        }
    }
done:
    free(A), free(Li), free(scale), free(e);
    return st;
}

/* Calibration: the 16-bit model runs over the calibration tokens; every matmul input is added
 * into H = sum_t x_t x_t^T of the Linear it feeds, found by locating the weight pointer inside
 * the checkpoint's tensors (key "<tensor name>@<element offset>"). */
typedef struct hent {
    char key[224];
    int K;
    long n_tok;
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
    bool oom;
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

static hent *find(cllm_gptq *g, const char *key, int K, bool create) {
    for (size_t i = 0; i < g->n; i++)
        if (!strcmp(g->h[i].key, key)) return &g->h[i];
    if (!create) return NULL;
    if (g->n == g->cap) {
        size_t nc = g->cap ? 2 * g->cap : 64;
        hent *nh = realloc(g->h, nc * sizeof(*nh));
        if (!nh) return NULL;
        g->h = nh;
        g->cap = nc;
    }
    hent *e = &g->h[g->n];
    memset(e, 0, sizeof(*e));
    snprintf(e->key, sizeof(e->key), "%s", key);
    e->K = K;
    e->H = calloc((size_t)K * K, sizeof(float));
    if (!e->H) return NULL;
    g->n++;
    return e;
}

static void capture(void *ctx, const fwd_wt *w, const float *X, size_t ldx, int n_tok) {
    cllm_gptq *g = ctx;
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
    hent *e = find(g, key, K, true);
    if (!e) {
        g->oom = true;
        return;
    }
    for (int s = 0; s < n_tok; s++) {
        const float *x = X + (size_t)s * ldx;
        for (int i = 0; i < K; i++) {
            float xi = x[i];
            float *row = e->H + (size_t)i * K;
            for (int j = 0; j < K; j++) row[j] += xi * x[j];
        }
    }
    e->n_tok += n_tok;
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
    fwd_seq_runner r;
    int L = o->seq_len < n ? o->seq_len : n;
    cllm_status st = g ? fwd_runner_open(&r, model_dir, o->threads, L, 16, CLLM_KV_F32, err)
                       : cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    if (st) {
        free(g);
        free(tok);
        return st;
    }
    g->min_tokens = o->min_tokens;
    cllm_ckpt_foreach(r.m->ckpt, add_span, g);
    qsort(g->spans, g->n_spans, sizeof(span), cmp_span);
    r.ctx->capture = capture;
    r.ctx->capture_ctx = g;
    int used = 0;
    for (int s = 0; s < o->samples && st == CLLM_OK; s++) {
        int off = (int)(((long)s * L) % (n - L + 1));
        r.pos = 0;
        st = fwd_runner_step(&r, tok + off, L, CLLM_LOGITS_NONE, NULL, err);
        used += L;
        if (o->out && (s + 1 == o->samples || (s & 7) == 7))
            fprintf(o->out, "\rcalibration: %d/%d sequences of %d tokens", s + 1, o->samples, L),
                fflush(o->out);
    }
    if (o->out) fprintf(o->out, "\n");
    r.ctx->capture = NULL;
    fwd_runner_close(&r);
    free(tok);
    if (st == CLLM_OK && g->oom)
        st = cllm_err_set(err, CLLM_ENOMEM, "calibration: out of memory for Hessians");
    if (st) {
        cllm_gptq_free(g);
        return st;
    }
    if (o->out) fprintf(o->out, "calibration: %d tokens, %zu Hessians\n", used, g->n);
    *out = g;
    return CLLM_OK;
}

const float *cllm_gptq_hessian(cllm_gptq *g, const char *src_name, uint64_t off, int K,
                               int *n_tok) {
    char key[224];
    snprintf(key, sizeof(key), "%s@%llu", src_name, (unsigned long long)off);
    hent *e = find(g, key, K, false);
    *n_tok = e ? (int)e->n_tok : 0;
    if (e && e->K == K && e->n_tok >= g->min_tokens && e->n_tok > 0) {
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
    snprintf(g->summary, sizeof(g->summary),
             "; %ld experts and %ld other linears saw fewer than %d "
             "calibration tokens and fell back to RTN",
             g->fallback_experts, g->fallback_other, g->min_tokens);
    return g->summary;
}

void cllm_gptq_free(cllm_gptq *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n; i++) free(g->h[i].H);
    free(g->h);
    free(g->spans);
    free(g);
}
