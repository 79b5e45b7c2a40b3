/* GPTQ; see gptq.h. */
#include "quant/gptq.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/progress.h"
#include "base/threadpool.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/seq_runner.h"

/* ---- The math: float32, blocked, threaded over the repo pool --------------------------------
 *
 * Every product below goes through the fp32 GEMM kernel (gemm_f32, kernels.h: C (+/-)= A B with
 * B row-major), whose result for each output element is a fixed sequence of operations whatever
 * the tile or the row range of the call. Work is split so that each output element is computed
 * by one thread with that fixed sequence, so the bytes never depend on the thread count. The B
 * operands are kept in the layout the kernel wants: the panel's inverse and the panel itself
 * transposed (factor), the inverse's column block row-major (inverse), U row-major (apply), the
 * buffered tokens as rows (Hessian).
 *
 * float32, not float64: the reference implementation factors in float32 with the same 1%
 * damping, which bounds the condition number of H + damp*mean(diag) by about 100 K; fp32 halves
 * the memory traffic and doubles the SIMD width of the GEMM.
 * tests/quant/test_gptq.c checks the factor against a float64 reference (relative error ~1e-5 on
 * random SPD matrices with dead inputs). */

#define FB 128 /* panel / column-block width: inner dimension of every GEMM call */
#define RB 64  /* rows per GEMM call */

typedef struct mm_ctx {
    float *A;      /* [K][K] */
    float *X;      /* [K][K] M^-1, row-major */
    float *LiT;    /* [nb][nb] transpose of the inverse of the panel's diagonal block */
    float *PT;     /* [nb][K - k0 - nb] the solved panel below the diagonal block, transposed */
    float *tmp;    /* [nt][ts] */
    size_t ts;     /* RB * FB + FB * K: a GEMM result block, then the inverse's column block */
    int K, k0, nb; /* panel */
    int nt;
    cllm_gemm_fn gemm;
} mm_ctx;

static int n_threads(cllm_pool *p) {
    return p ? cllm_pool_size(p) : 1;
}

/* Rows i in [k0+nb, K): A[i][k0..k0+nb) <- A[i][k0..) L_kk^-T = A[i][k0..) Li^T (Li = L_kk^-1),
 * RB rows per GEMM call; the result also goes to PT transposed (column i - k0 - nb). */
static void trsm_worker(void *vc, size_t b, size_t e, int tid) {
    mm_ctx *c = vc;
    int K = c->K, k0 = c->k0, nb = c->nb;
    size_t ldp = (size_t)(K - k0 - nb);
    float *tmp = c->tmp + (size_t)tid * c->ts;
    for (size_t r0 = b; r0 < e; r0 += RB) {
        int nr = (int)(e - r0 < RB ? e - r0 : RB);
        float *a = c->A + ((size_t)k0 + nb + r0) * K + k0;
        c->gemm(nr, nb, nb, a, (size_t)K, c->LiT, (size_t)nb, tmp, (size_t)nb, CLLM_GEMM_SET);
        for (int r = 0; r < nr; r++)
            memcpy(a + (size_t)r * K, tmp + (size_t)r * nb, (size_t)nb * 4);
        for (int j = 0; j < nb; j++)
            for (int r = 0; r < nr; r++) c->PT[j * ldp + r0 + r] = tmp[(size_t)r * nb + j];
    }
}

/* Trailing update A[i][j] -= sum_p L[i][p] L[j][p] over the panel, k0+nb <= j <= i (lower
 * triangle only), row blocks of RB dealt to threads cyclically (triangle: balanced). */
static void syrk_worker(void *vc, size_t b, size_t e, int tid) {
    mm_ctx *c = vc;
    int K = c->K, s0 = c->k0 + c->nb;
    float *tmp = c->tmp + (size_t)tid * c->ts;
    size_t ldp = (size_t)(K - s0);
    for (size_t t = b; t < e; t++)
        for (int r0 = s0 + (int)t * RB; r0 < K; r0 += c->nt * RB) {
            int r1 = r0 + RB < K ? r0 + RB : K, nr = r1 - r0;
            const float *l = c->A + (size_t)r0 * K + c->k0;
            /* columns left of the diagonal block: subtracted in place; the diagonal block via
             * tmp, lower triangle only (same result per element: the sum, then one subtraction) */
            c->gemm(nr, r0 - s0, c->nb, l, (size_t)K, c->PT, ldp, c->A + (size_t)r0 * K + s0,
                    (size_t)K, CLLM_GEMM_SUB);
            c->gemm(nr, nr, c->nb, l, (size_t)K, c->PT + (r0 - s0), ldp, tmp, (size_t)nr,
                    CLLM_GEMM_SET);
            for (int i = r0; i < r1; i++) {
                float *a = c->A + (size_t)i * K + r0;
                const float *y = tmp + (size_t)(i - r0) * nr;
                for (int j = 0; j <= i - r0; j++) a[j] -= y[j];
            }
        }
}

/* Columns of X = M^-1 (M lower in A) for column blocks dealt cyclically, into c->X.
 * A column block's solve needs only M and itself: rows in blocks of RB, the part from earlier
 * rows as one GEMM (B = the block's rows solved so far, row-major in Xp), then forward
 * substitution inside the block, row by row over the block's columns (contiguous,
 * vectorizable). Entries above the diagonal come out exactly 0. */
static void inv_worker(void *vc, size_t b, size_t e, int tid) {
    mm_ctx *c = vc;
    int K = c->K;
    float *tmp = c->tmp + (size_t)tid * c->ts, *Xp = tmp + (size_t)RB * FB;
    for (size_t t = b; t < e; t++)
        for (int c0 = (int)t * FB; c0 < K; c0 += c->nt * FB) {
            int c1 = c0 + FB < K ? c0 + FB : K, nc = c1 - c0;
            for (int i = 0; i < c0; i++) memset(c->X + (size_t)i * K + c0, 0, (size_t)nc * 4);
            for (int i0 = c0; i0 < K; i0 += RB) {
                int i1 = i0 + RB < K ? i0 + RB : K;
                float *XB = Xp + (size_t)(i0 - c0) * nc; /* X[i0..i1)[c0..c1) */
                if (i0 > c0)
                    c->gemm(i1 - i0, nc, i0 - c0, c->A + (size_t)i0 * K + c0, (size_t)K, Xp,
                            (size_t)nc, tmp, (size_t)nc, CLLM_GEMM_SET);
                else
                    memset(tmp, 0, (size_t)(i1 - i0) * nc * 4);
                for (int i = i0; i < i1; i++) {
                    const float *m = c->A + (size_t)i * K;
                    float *x = XB + (size_t)(i - i0) * nc, *y = tmp + (size_t)(i - i0) * nc;
                    for (int j = 0; j < nc; j++) x[j] = (i == c0 + j ? 1.0f : 0.0f) - y[j];
                    for (int p = i0; p < i; p++) {
                        float mp = m[p];
                        const float *xp = XB + (size_t)(p - i0) * nc;
                        for (int j = 0; j < nc; j++) x[j] -= mp * xp[j];
                    }
                    float d = m[i];
                    for (int j = 0; j < nc; j++) x[j] /= d;
                }
                for (int i = i0; i < i1; i++)
                    memcpy(c->X + (size_t)i * K + c0, XB + (size_t)(i - i0) * nc, (size_t)nc * 4);
            }
        }
}

static size_t factor_work(int K, cllm_pool *pool) {
    return 2 * (size_t)K * K + FB * FB + (size_t)FB * K +
           (size_t)n_threads(pool) * ((size_t)RB * FB + (size_t)FB * K);
}

/* U (upper, [K][K]) with (H + damp * mean diag)^-1 = U^T U, the upper Cholesky factor GPTQ
 * walks (what cllm_gptq_factor returns); dead inputs (diag 0) get 1 before damping.
 * Reads the lower triangle of H only. One Cholesky of the index-reversed matrix, P H P = M M^T, and
 * one triangular inverse: U = P M^-1 P is upper with H^-1 = U^T U. work: factor_work() floats. */
static cllm_status gptq_factor(const float *H, int K, double damp, float *U, float *work,
                               cllm_pool *pool, cllm_error *err) {
    size_t KK = (size_t)K * K;
    mm_ctx c = {work,
                work + KK,
                work + 2 * KK,
                work + 2 * KK + FB * FB,
                work + 2 * KK + FB * FB + (size_t)FB * K,
                (size_t)RB * FB + (size_t)FB * K,
                K,
                0,
                0,
                n_threads(pool),
                cllm_kern()->gemm_f32};
    double mean = 0;
    for (int i = 0; i < K; i++) mean += H[(size_t)i * K + i];
    mean /= K;
    if (!(mean > 0)) mean = 1;
    float *A = c.A;
    /* A[i][j] = H[K-1-j][K-1-i] for j <= i (lower triangle of H, transposed and reversed), in
     * 32 x 32 tiles so that neither side is walked with a stride of K */
    for (int i0 = 0; i0 < K; i0 += 32)
        for (int j0 = 0; j0 <= i0; j0 += 32)
            for (int j = j0; j < j0 + 32 && j < K; j++) {
                const float *h = H + (size_t)(K - 1 - j) * K + (K - 1);
                for (int i = i0 > j ? i0 : j; i < i0 + 32 && i < K; i++)
                    A[(size_t)i * K + j] = h[-i];
            }
    for (int i = 0; i < K; i++) {
        float *a = A + (size_t)i * K;
        memset(a + i + 1, 0, (size_t)(K - 1 - i) * sizeof(float));
        if (a[i] == 0) a[i] = 1; /* dead input */
        a[i] = (float)(a[i] + damp * mean);
    }
    for (int k0 = 0; k0 < K; k0 += FB) {
        int nb = k0 + FB < K ? FB : K - k0;
        for (int j = k0; j < k0 + nb; j++) { /* diagonal block, accumulated in double */
            float *lj = A + (size_t)j * K;
            double d = lj[j];
            for (int p = k0; p < j; p++) d -= (double)lj[p] * lj[p];
            if (!(d > 0))
                return cllm_err_set(err, CLLM_ERANGE,
                                    "gptq: Hessian not positive definite (raise damping)");
            lj[j] = (float)sqrt(d);
            for (int i = j + 1; i < k0 + nb; i++) {
                float *li = A + (size_t)i * K;
                double s = li[j];
                for (int p = k0; p < j; p++) s -= (double)li[p] * lj[p];
                li[j] = (float)(s / lj[j]);
            }
        }
        if (k0 + nb == K) break;
        for (int j = 0; j < nb; j++) { /* Li = L_kk^-1, row by row (double), stored transposed */
            const float *l = A + (size_t)(k0 + j) * K + k0;
            for (int col = 0; col < nb; col++) {
                double s = col == j ? 1.0 : 0.0;
                for (int p = col; p < j; p++) s -= (double)l[p] * c.LiT[(size_t)col * nb + p];
                c.LiT[(size_t)col * nb + j] = col <= j ? (float)(s / l[j]) : 0.0f;
            }
        }
        c.k0 = k0, c.nb = nb;
        cllm_pool_for_grain(pool, (size_t)(K - k0 - nb), RB, trsm_worker, &c);
        cllm_pool_for(pool, (size_t)c.nt, syrk_worker, &c);
    }
    cllm_pool_for(pool, (size_t)c.nt, inv_worker, &c);
    /* U[i][j] = X[K-1-i][K-1-j] */
    for (size_t a = 0; a < KK; a++) U[a] = c.X[KK - 1 - a];
    for (int i = 0; i < K; i++)
        if (!(U[(size_t)i * K + i] > 0) || !isfinite(U[(size_t)i * K + i]))
            return cllm_err_set(err, CLLM_ERANGE, "gptq: inverse Hessian not positive definite");
    return CLLM_OK;
}

/* Quantization with lazy batch updates (Frantar et al. §3, step 2): columns in blocks of B,
 * error feedback inside the block column by column, then W[:, b1:] -= E U[b0:b1, b1:] as one
 * GEMM. Rows of W are independent (U is shared), so each thread takes whole rows (multiples of
 * 8: the packed qzeros words along N) and walks every block for them. B is a multiple of the
 * group size, so a group's scale is computed from weights that already carry the error of every
 * earlier column, exactly as in the column-by-column algorithm. */
typedef struct ap_ctx {
    float *W;
    const float *H, *U; /* U [K][K], upper (gptq_factor) */
    cllm_qbuf *q;
    int B;
    float *work; /* per thread: RB*B E, RB scales */
    size_t wstride;
    cllm_gemm_fn gemm;
} ap_ctx;

static void apply_worker(void *vc, size_t nb, size_t ne, int tid) {
    ap_ctx *c = vc;
    cllm_qbuf *q = c->q;
    int K = q->K, G = q->group, B = c->B;
    float *E = c->work + (size_t)tid * c->wstride, *scale = E + (size_t)RB * B;
    for (size_t r0 = nb; r0 < ne; r0 += RB) {
        int nr = (int)(ne - r0 < RB ? ne - r0 : RB);
        for (int r = 0; r < nr; r++) {
            float *w = c->W + (r0 + r) * K;
            for (int i = 0; i < K; i++)
                if (c->H[(size_t)i * K + i] == 0) w[i] = 0; /* dead input */
        }
        for (int b0 = 0; b0 < K; b0 += B) {
            int b1 = b0 + B < K ? b0 + B : K, bw = b1 - b0;
            for (int r = 0; r < nr; r++) {
                int n = (int)r0 + r;
                float *w = c->W + (size_t)n * K, *er = E + (size_t)r * bw;
                for (int i = b0; i < b1; i++) {
                    if (i % G == 0) {
                        float lo = 0, hi = 0;
                        for (int k = i; k < i + G; k++) lo = fminf(lo, w[k]), hi = fmaxf(hi, w[k]);
                        scale[r] = cllm_quant_set_group_mm(q, i / G, n, lo, hi);
                    }
                    const float *u = c->U + (size_t)i * K;
                    float wi = w[i], dq = cllm_quant_set_code(q, n, i, wi, scale[r]);
                    float en = (wi - dq) / u[i];
                    er[i - b0] = en;
                    for (int j = i + 1; j < b1; j++) w[j] -= en * u[j];
                }
            }
            if (b1 == K) break;
            c->gemm(nr, K - b1, bw, E, (size_t)bw, c->U + (size_t)b0 * K + b1, (size_t)K,
                    c->W + r0 * K + b1, (size_t)K, CLLM_GEMM_SUB);
        }
    }
}

static cllm_status gptq_apply(float *W, const float *H, const float *U, cllm_qbuf *q,
                              cllm_pool *pool, cllm_error *err) {
    int K = q->K, G = q->group;
    int B = G >= 128 ? G : G * (128 / G);
    if (B > K) B = K;
    ap_ctx c = {W, H, U, q, B, NULL, 0, cllm_kern()->gemm_f32};
    c.wstride = (size_t)RB * B + RB;
    c.wstride = (c.wstride + 15) & ~(size_t)15;
    c.work = malloc(c.wstride * n_threads(pool) * sizeof(float));
    if (!c.work) return cllm_err_set(err, CLLM_ENOMEM, "gptq: out of memory (K = %d)", K);
    cllm_pool_for_grain(pool, (size_t)q->N, 8, apply_worker, &c);
    free(c.work);
    return CLLM_OK;
}

cllm_status cllm_gptq_quantize(float *W, const float *H, double damp, cllm_qbuf *q,
                               cllm_error *err) {
    return cllm_gptq_quantize_pool(W, H, damp, q, NULL, err);
}

cllm_status cllm_gptq_quantize_pool(float *W, const float *H, double damp, cllm_qbuf *q,
                                    cllm_pool *pool, cllm_error *err) {
    int K = q->K;
    float *U = malloc((size_t)K * K * sizeof(float)),
          *work = malloc(factor_work(K, pool) * sizeof(float));
    cllm_status st =
        U && work ? CLLM_OK : cllm_err_set(err, CLLM_ENOMEM, "gptq: out of memory (K = %d)", K);
    if (st == CLLM_OK) st = gptq_factor(H, K, damp, U, work, pool, err);
    if (st == CLLM_OK) st = gptq_apply(W, H, U, q, pool, err);
    free(U), free(work);
    return st;
}

cllm_status cllm_gptq_factor(const float *H, int K, double damp, float *U, cllm_pool *pool,
                             cllm_error *err) {
    float *work = malloc(factor_work(K, pool) * sizeof(float));
    if (!work) return cllm_err_set(err, CLLM_ENOMEM, "gptq: out of memory (K = %d)", K);
    cllm_status st = gptq_factor(H, K, damp, U, work, pool, err);
    free(work);
    return st;
}

cllm_status cllm_gptq_apply(float *W, const float *H, const float *U, cllm_qbuf *q, cllm_pool *pool,
                            cllm_error *err) {
    return gptq_apply(W, H, U, q, pool, err);
}

/* Calibration: the 16-bit model runs over the calibration tokens; every matmul input is added
 * into H = sum_t x_t x_t^T of the Linear it feeds, named by the forward's calibration hook
 * (model/forward.h: cllm_fwd_hooks; key "<tensor name>@<element offset>"). Linears queued back
 * to back on the same input (q/k/v, GDN qkv/z/b/a, an expert's gate/up) share one Hessian: the
 * later ones are aliases of the first ("root").
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
    float *H;  /* [K][K], lower triangle accumulated */
    float *xb; /* [buf_rows(K)][K] pending tokens, one row each */
    int nxb;   /* tokens pending in xb */
} hent;

/* Tokens buffered per Hessian before one rank-C update (a GEMM of inner dimension C): routed
 * experts get a few tokens per capture, and a GEMM over 2 tokens would be bound by the K x K
 * read-modify-write. 1/16 of the Hessian's bytes for K >= 256. */
static int buf_rows(int K) {
    int c = K / 16;
    return c < 16 ? 16 : c > 128 ? 128 : c;
}

struct cllm_gptq {
    hent *h;
    size_t n, cap;
    int min_tokens;
    long fallback_experts, fallback_other, used;
    char summary[320];
    bool oom, counting;
    /* the runner and tokens, kept across passes */
    cllm_seq_runner r;
    bool r_open;
    int32_t *tok;
    int n_calib, L, samples;
    FILE *out; /* progress, NULL = silent */
    bool tty;
    int passes;
    int last_layer;  /* highest layer of the marked Linears, -1 = some need the whole model */
    int first_layer; /* lowest layer of the marked Linears */
    bool any_marked;
    /* residual stream of every calibration sequence at the start of layer cache_layer
     * ([samples][L][H]), saved by the previous pass: a pass resumes there instead of rerunning
     * the layers before its group (0 = none saved) */
    float *xc;
    int cache_layer;
    bool use_cache;
    cllm_fwd_hooks hooks; /* stop layer and residual layers of the pass being run */
    uint64_t held, peak;
    double t_count, t_pass, t_hess, t_factor, t_apply; /* seconds per phase (summary) */
    float *ctmp; /* [nt][RB * RB] + [ctmp_K][buf_rows(ctmp_K)] scratch of the Hessian updates */
    int ctmp_K;
    long last_e; /* entry of the previous matmul (-1 = none), to alias shared inputs */
    /* factor of the last Hessian quantized with (Linears sharing an input share it) */
    const float *fH;
    int fK;
    double fdamp;
    float *fA, *fwork; /* [K][K] U of gptq_factor, factor_work(K) floats */
};

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

static uint64_t hess_bytes(int K) {
    return ((uint64_t)K * K + (uint64_t)K * buf_rows(K)) * sizeof(float);
}

typedef struct acc_ctx {
    hent *e;
    float *tmp; /* [nt][RB * RB] */
    float *xt;  /* [K][C] the pending tokens transposed */
    int nt;
    cllm_gemm_fn gemm;
} acc_ctx;

/* H[a][b] += sum_c x_c[a] x_c[b] for b <= a, row blocks of RB dealt cyclically: the columns left
 * of the diagonal block added in place, the diagonal block via tmp (lower triangle). */
static void acc_worker(void *vc, size_t b, size_t e, int tid) {
    acc_ctx *c = vc;
    int K = c->e->K, C = buf_rows(K), n = c->e->nxb;
    float *tmp = c->tmp + (size_t)tid * RB * RB;
    for (size_t t = b; t < e; t++)
        for (int r0 = (int)t * RB; r0 < K; r0 += c->nt * RB) {
            int r1 = r0 + RB < K ? r0 + RB : K, nr = r1 - r0;
            const float *xa = c->xt + (size_t)r0 * C;
            c->gemm(nr, r0, n, xa, (size_t)C, c->e->xb, (size_t)K, c->e->H + (size_t)r0 * K,
                    (size_t)K, CLLM_GEMM_ADD);
            c->gemm(nr, nr, n, xa, (size_t)C, c->e->xb + r0, (size_t)K, tmp, (size_t)nr,
                    CLLM_GEMM_SET);
            for (int i = r0; i < r1; i++) {
                float *h = c->e->H + (size_t)i * K + r0;
                const float *y = tmp + (size_t)(i - r0) * nr;
                for (int j = 0; j <= i - r0; j++) h[j] += y[j];
            }
        }
}

/* Adds the buffered tokens of e into its Hessian. */
static void flush(cllm_gptq *g, hent *e) {
    if (!e->nxb || g->oom) return;
    int K = e->K;
    cllm_pool *pool = g->r.pool;
    int nt = n_threads(pool);
    int C = buf_rows(K);
    if (g->ctmp_K < K) {
        free(g->ctmp);
        g->ctmp = malloc(((size_t)nt * RB * RB + (size_t)K * C) * sizeof(float));
        g->ctmp_K = g->ctmp ? K : 0;
        if (!g->ctmp) {
            g->oom = true;
            return;
        }
    }
    double t0 = cllm_time_s();
    acc_ctx c = {e, g->ctmp, g->ctmp + (size_t)nt * RB * RB, nt, cllm_kern()->gemm_f32};
    for (int a0 = 0; a0 < K; a0 += 32) /* xt[a][s] = xb[s][a], 32 inputs at a time */
        for (int s = 0; s < e->nxb; s++)
            for (int a = a0; a < a0 + 32 && a < K; a++)
                c.xt[(size_t)a * C + s] = e->xb[(size_t)s * K + a];
    cllm_pool_for(pool, (size_t)nt, acc_worker, &c);
    e->nxb = 0;
    g->t_hess += cllm_time_s() - t0;
}

static void capture(void *ctx, const cllm_fwd_matmul *mm) {
    cllm_gptq *g = ctx;
    bool same = g->last_e >= 0 && mm->shares_input;
    long prev = g->last_e;
    g->last_e = -1;
    if (g->oom || mm->quantized || !mm->tensor) return;
    char key[224];
    snprintf(key, sizeof(key), "%s@%llu", mm->tensor, (unsigned long long)mm->offset);
    int K = mm->cols, n_tok = mm->n_tok;
    const float *X = mm->X;
    size_t ldx = mm->ldx;
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
        e->xb = malloc((size_t)K * buf_rows(K) * sizeof(float));
        e->nxb = 0;
        if (!e->H || !e->xb) {
            g->oom = true;
            return;
        }
        g->held += hess_bytes(K);
        if (g->held > g->peak) g->peak = g->held;
    }
    int C = buf_rows(K);
    for (int s = 0; s < n_tok; s++) {
        memcpy(e->xb + (size_t)e->nxb * K, X + (size_t)s * ldx, (size_t)K * sizeof(float));
        if (++e->nxb == C) flush(g, e);
    }
}

static cllm_status run_calib(cllm_gptq *g, const char *what, cllm_error *err) {
    cllm_status st = CLLM_OK;
    double t0 = cllm_time_s();
    /* a log gets one line per pass (and one per 10 s of a long pass); a terminal a bar */
    cllm_progress prog;
    cllm_progress_init(&prog, g->out, g->tty, 0, 10, what);
    char line[64];
    cllm_fwd_hooks hk = g->hooks;
    hk.on_matmul = capture;
    hk.user = g;
    g->last_e = -1;
    for (int s = 0; s < g->samples && st == CLLM_OK; s++) {
        int off = (int)(((long)s * g->L) % (g->n_calib - g->L + 1));
        g->r.pos = 0;
        hk.resid =
            g->use_cache ? g->xc + (size_t)s * g->L * cllm_model_config(g->r.m)->hidden_size : NULL;
        cllm_fwd_ctx_set_hooks(g->r.ctx, &hk);
        st = cllm_seq_runner_step(&g->r, g->tok + off, g->L, CLLM_LOGITS_NONE, NULL, err);
        snprintf(line, sizeof(line), "%d/%d sequences of %d tokens", s + 1, g->samples, g->L);
        cllm_progress_update(&prog, s + 1, g->samples, line);
    }
    cllm_progress_break(&prog);
    cllm_fwd_ctx_set_hooks(g->r.ctx, NULL);
    for (size_t i = 0; i < g->n; i++) {
        flush(g, &g->h[i]);
        free(g->h[i].xb);
        g->h[i].xb = NULL;
    }
    *(g->counting ? &g->t_count : &g->t_pass) += cllm_time_s() - t0;
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
    int n = cllm_parse_token_list(arg, &tok, err);
    if (n < 0) return CLLM_EINVAL;
    if (n < 2) {
        free(tok);
        return cllm_err_set(err, CLLM_EINVAL, "%s: need calibration token ids", o->calib);
    }
    cllm_gptq *g = calloc(1, sizeof(*g));
    int L = o->seq_len < n ? o->seq_len : n;
    cllm_status st =
        g ? cllm_seq_runner_open(&g->r, model_dir, &o->fwd, o->threads, L, 16, CLLM_KV_F32, err)
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
    g->out = o->progress;
    g->tty = o->tty;
    g->min_tokens = o->min_tokens;
    g->counting = true;
    st = run_calib(g, "calibration (counting tokens)", err);
    g->counting = false;
    if (st) {
        cllm_gptq_free(g);
        return st;
    }
    if (g->out) fprintf(g->out, "calibration: %d tokens, %zu linears\n", L * o->samples, g->n);
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
    return hess_bytes(K);
}

void cllm_gptq_mark(cllm_gptq *g, const char *src_name, uint64_t off, int K) {
    char key[224];
    snprintf(key, sizeof(key), "%s@%llu", src_name, (unsigned long long)off);
    long i = find(g, key, K, false);
    if (i < 0) return;
    root_of(g, i)->wanted = true;
    const char *p = strstr(src_name, "layers.");
    int lay = p && !strstr(src_name, "mtp") ? atoi(p + 7) : -1;
    if (!g->any_marked || lay < 0 || g->last_layer < 0)
        g->last_layer = !g->any_marked || lay < 0 ? lay : g->last_layer;
    if (lay > g->last_layer && g->last_layer >= 0) g->last_layer = lay;
    if (!g->any_marked || (lay >= 0 && lay < g->first_layer)) g->first_layer = lay;
    g->any_marked = true;
}

cllm_status cllm_gptq_pass(cllm_gptq *g, cllm_error *err) {
    char what[64];
    snprintf(what, sizeof(what), "calibration pass %d", ++g->passes);
    /* layers after the last one collected cannot change its inputs: stop there; start at the
     * saved residual stream when it is not past the group's first layer, and save the stream at
     * the start of the group's last layer (the next group starts there or later) */
    bool part = g->any_marked && g->last_layer >= 0 && g->first_layer >= 0;
    if (part && !g->xc) {
        g->xc = malloc((size_t)g->samples * g->L * cllm_model_config(g->r.m)->hidden_size *
                       sizeof(float));
        g->cache_layer = 0;
    }
    g->hooks = (cllm_fwd_hooks){
        .stop_layer = part ? g->last_layer + 1 : 0,
        .resid_in = part && g->xc && g->cache_layer <= g->first_layer ? g->cache_layer : 0,
        .resid_out = g->last_layer,
    };
    g->use_cache = part && g->xc;
    cllm_status st = run_calib(g, what, err);
    g->use_cache = false;
    g->cache_layer = part && g->xc && st == CLLM_OK ? g->last_layer : 0;
    g->hooks = (cllm_fwd_hooks){0};
    return st;
}

void cllm_gptq_release(cllm_gptq *g) {
    for (size_t i = 0; i < g->n; i++) {
        free(g->h[i].H), free(g->h[i].xb);
        g->h[i].H = NULL, g->h[i].xb = NULL;
        g->h[i].wanted = false;
    }
    g->held = 0;
    g->any_marked = false;
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
             "calibration tokens and fell back to RTN; %d calibration passes, Hessians peak %s; "
             "time: counting %.1fs, passes %.1fs (Hessian updates %.1fs), factor %.1fs, apply "
             "%.1fs",
             g->fallback_experts, g->fallback_other, g->min_tokens, g->passes, pk, g->t_count,
             g->t_pass, g->t_hess, g->t_factor, g->t_apply);
    return g->summary;
}

void cllm_gptq_free(cllm_gptq *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n; i++) free(g->h[i].H), free(g->h[i].xb);
    free(g->ctmp);
    if (g->r_open) cllm_seq_runner_close(&g->r);
    free(g->fA);
    free(g->fwork);
    free(g->xc);
    free(g->tok);
    free(g->h);
    free(g);
}

cllm_status cllm_gptq_quantize_with(cllm_gptq *g, float *W, const float *H, double damp,
                                    cllm_qbuf *q, cllm_error *err) {
    int K = q->K;
    cllm_pool *pool = g->r.pool;
    if (g->fH != H || g->fK != K || g->fdamp != damp) {
        g->fH = NULL;
        if (g->fK != K || !g->fA) {
            free(g->fA), free(g->fwork);
            g->fK = 0;
            g->fA = malloc((size_t)K * K * sizeof(float));
            g->fwork = malloc(factor_work(K, pool) * sizeof(float));
            if (!g->fA || !g->fwork)
                return cllm_err_set(err, CLLM_ENOMEM, "gptq: out of memory (K = %d)", K);
            g->fK = K;
        }
        double t0 = cllm_time_s();
        cllm_status st = gptq_factor(H, K, damp, g->fA, g->fwork, pool, err);
        g->t_factor += cllm_time_s() - t0;
        if (st) return st;
        g->fH = H;
        g->fdamp = damp;
    }
    double t0 = cllm_time_s();
    cllm_status st = gptq_apply(W, H, g->fA, q, pool, err);
    g->t_apply += cllm_time_s() - t0;
    return st;
}
