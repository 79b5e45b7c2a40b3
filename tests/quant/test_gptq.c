/* GPTQ math (src/quant/gptq.c): the blocked fp32 factor against a float64 reference of the
 * textbook construction (Cholesky of H, explicit L^-1, H^-1 = L^-T L^-1, Cholesky of H^-1),
 * the blocked apply (lazy batch updates) against the column-by-column algorithm on the same
 * factor, GPTQ against RTN on correlated inputs, and bytes independent of the thread count.
 * CLLM_GPTQ_BENCH=1 also times factor and apply at the quarter model's expert shapes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/threadpool.h"
#include "quant/gptq.h"
#include "model/qformat.h"
#include "quant/quant.h"
#include "test.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (1.0 / 8388608.0) - 1.0);
}

/* Correlated activations X [T][K] (a few smooth directions plus noise, some inputs scaled up);
 * inputs in `dead` (every 17th when set) are never active. H = X^T X, full square. */
static void make_h(int K, int T, bool dead, float *X, float *H) {
    for (int t = 0; t < T; t++) {
        float a = frand(), b = frand(), c = frand();
        for (int k = 0; k < K; k++) {
            float v =
                a * sinf(0.1f * k) + b * cosf(0.37f * k) + c * sinf(0.05f * k + 1) + 0.2f * frand();
            if (k % 5 == 0) v *= 4;
            X[(size_t)t * K + k] = dead && k % 17 == 3 ? 0 : v;
        }
    }
    for (int i = 0; i < K; i++)
        for (int j = 0; j < K; j++) {
            double s = 0;
            for (int t = 0; t < T; t++) s += (double)X[(size_t)t * K + i] * X[(size_t)t * K + j];
            H[(size_t)i * K + j] = (float)s;
        }
}

static int chol_d(double *A, int n) {
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

/* The previous implementation's construction in float64: R (lower) with Hinv = R R^T. */
static int ref_factor(const float *H, int K, double damp, double *R) {
    double *Li = calloc((size_t)K * K, sizeof(double)), mean = 0;
    for (int i = 0; i < K; i++) mean += H[(size_t)i * K + i];
    mean /= K;
    if (!(mean > 0)) mean = 1;
    for (size_t i = 0; i < (size_t)K * K; i++) R[i] = H[i];
    for (int i = 0; i < K; i++) {
        if (R[(size_t)i * K + i] == 0) R[(size_t)i * K + i] = 1;
        R[(size_t)i * K + i] += damp * mean;
    }
    int bad = chol_d(R, K);
    for (int j = 0; !bad && j < K; j++) {
        Li[(size_t)j * K + j] = 1.0 / R[(size_t)j * K + j];
        for (int i = j + 1; i < K; i++) {
            double s = 0;
            for (int k = j; k < i; k++) s -= R[(size_t)i * K + k] * Li[(size_t)k * K + j];
            Li[(size_t)i * K + j] = s / R[(size_t)i * K + i];
        }
    }
    for (int i = 0; !bad && i < K; i++)
        for (int j = 0; j <= i; j++) {
            double s = 0;
            for (int k = i; k < K; k++) s += Li[(size_t)k * K + i] * Li[(size_t)k * K + j];
            R[(size_t)i * K + j] = s;
            R[(size_t)j * K + i] = s;
        }
    if (!bad) bad = chol_d(R, K);
    free(Li);
    return bad;
}

static void check_factor(int K, int T, bool dead, cllm_pool *pool) {
    float *X = malloc((size_t)T * K * 4), *H = malloc((size_t)K * K * 4),
          *U = malloc((size_t)K * K * 4);
    double *R = malloc((size_t)K * K * 8);
    cllm_error err;
    make_h(K, T, dead, X, H);
    CHECK(ref_factor(H, K, 0.01, R) == 0);
    CHECK(cllm_gptq_factor(H, K, 0.01, U, pool, &err) == CLLM_OK);
    double num = 0, den = 0, upper = 0;
    for (int i = 0; i < K; i++)
        for (int j = 0; j < K; j++) {
            double d = U[(size_t)j * K + i] - R[(size_t)i * K + j]; /* U = R^T */
            num += d * d, den += R[(size_t)i * K + j] * R[(size_t)i * K + j];
            if (j > i) upper = fmax(upper, fabs(U[(size_t)j * K + i]));
        }
    double rel = sqrt(num / den);
    CHECK_MSG(rel < 2e-4, "K %d dead %d: factor relative error %g", K, dead, rel);
    CHECK_MSG(upper == 0, "K %d: factor not upper triangular (%g)", K, upper);
    fprintf(stderr, "factor K %4d T %4d dead %d: relative error vs float64 %.2e\n", K, T, dead,
            rel);
    free(X), free(H), free(U), free(R);
}

/* The column-by-column algorithm (the previous gptq_apply) on the factor U, in float. */
static void ref_apply(float *W, const float *H, const float *U, cllm_qbuf *q) {
    int K = q->K, N = q->N, G = q->group;
    float *scale = malloc((size_t)N * 4);
    for (int i = 0; i < K; i++)
        if (H[(size_t)i * K + i] == 0)
            for (int n = 0; n < N; n++) W[(size_t)n * K + i] = 0;
    for (int i = 0; i < K; i++) {
        if (i % G == 0)
            for (int n = 0; n < N; n++) {
                float lo = 0, hi = 0;
                for (int k = i; k < i + G; k++)
                    lo = fminf(lo, W[(size_t)n * K + k]), hi = fmaxf(hi, W[(size_t)n * K + k]);
                scale[n] = cllm_quant_set_group_mm(q, i / G, n, lo, hi);
            }
        float d = U[(size_t)i * K + i];
        for (int n = 0; n < N; n++) {
            float *w = W + (size_t)n * K;
            float dq = cllm_quant_set_code(q, n, i, w[i], scale[n]);
            float e = (w[i] - dq) / d;
            for (int j = i + 1; j < K; j++) w[j] -= e * U[(size_t)i * K + j];
        }
    }
    free(scale);
}

/* Sum over tokens and outputs of ((W - Wq) x)^2. */
static double out_err(const float *W, const cllm_qbuf *q, const float *X, int T) {
    int K = q->K, N = q->N;
    cllm_qweight v = cllm_qbuf_view(q);
    float *row = malloc((size_t)K * 4);
    double e = 0;
    for (int n = 0; n < N; n++) {
        cllm_qformat_dequant_row(&v, n, row);
        for (int t = 0; t < T; t++) {
            double y = 0;
            for (int k = 0; k < K; k++)
                y += ((double)W[(size_t)n * K + k] - row[k]) * X[(size_t)t * K + k];
            e += y * y;
        }
    }
    free(row);
    return e;
}

static bool same_q(const cllm_qbuf *a, const cllm_qbuf *b) {
    size_t nw = (size_t)a->K * a->bits / 32 * a->N, ng = (size_t)a->K / a->group;
    return !memcmp(a->qweight, b->qweight, nw * 4) &&
           !memcmp(a->qzeros, b->qzeros, ng * ((size_t)a->N * a->bits / 32) * 4) &&
           !memcmp(a->scales, b->scales, ng * a->N * 2);
}

static void check_apply(int bits, int G, int K, int N, int T, bool dead, bool asym,
                        cllm_pool **pools, int n_pools) {
    float *X = malloc((size_t)T * K * 4), *H = malloc((size_t)K * K * 4),
          *U = malloc((size_t)K * K * 4), *W = malloc((size_t)N * K * 4),
          *Wc = malloc((size_t)N * K * 4);
    cllm_error err;
    make_h(K, T, dead, X, H);
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = 0.05f * frand();
    CHECK(cllm_gptq_factor(H, K, 0.01, U, NULL, &err) == CLLM_OK);
    cllm_qbuf qr, qc, qb, qt;
    CHECK(cllm_qbuf_alloc(&qr, bits, G, K, N, "r", &err) == CLLM_OK);
    CHECK(cllm_qbuf_alloc(&qc, bits, G, K, N, "c", &err) == CLLM_OK);
    CHECK(cllm_qbuf_alloc(&qb, bits, G, K, N, "b", &err) == CLLM_OK);
    CHECK(cllm_qbuf_alloc(&qt, bits, G, K, N, "t", &err) == CLLM_OK);
    qr.asym = qc.asym = qb.asym = qt.asym = asym;
    cllm_quant_rtn_rows(W, (size_t)K, 0, N, &qr);
    memcpy(Wc, W, (size_t)N * K * 4);
    ref_apply(Wc, H, U, &qc);
    memcpy(Wc, W, (size_t)N * K * 4);
    CHECK(cllm_gptq_apply(Wc, H, U, &qb, NULL, &err) == CLLM_OK);
    /* codes: equal but for rounding-boundary cases */
    cllm_qweight vc = cllm_qbuf_view(&qc), vb = cllm_qbuf_view(&qb);
    float *rc = malloc((size_t)K * 4), *rb = malloc((size_t)K * 4);
    long diff = 0;
    for (int n = 0; n < N; n++) {
        cllm_qformat_dequant_row(&vc, n, rc);
        cllm_qformat_dequant_row(&vb, n, rb);
        for (int k = 0; k < K; k++) diff += rc[k] != rb[k];
    }
    double frac = (double)diff / ((double)N * K);
    double er = out_err(W, &qr, X, T), ec = out_err(W, &qc, X, T), eb = out_err(W, &qb, X, T);
    CHECK_MSG(frac < 0.01, "bits %d G %d K %d: %.3f%% of weights differ blocked vs columns", bits,
              G, K, 100 * frac);
    CHECK_MSG(fabs(eb - ec) < 0.01 * ec, "bits %d G %d K %d: output error blocked %g columns %g",
              bits, G, K, eb, ec);
    CHECK_MSG(eb < 0.8 * er, "bits %d G %d K %d: gptq output error %g not below rtn %g", bits, G, K,
              eb, er);
    fprintf(stderr,
            "apply bits %d G %3d K %3d N %3d%s%s: output error blocked %.4g columns %.4g rtn "
            "%.4g, %.3f%% weights differ\n",
            bits, G, K, N, dead ? " dead" : "", asym ? " asym" : "", eb, ec, er, 100 * frac);
    /* the whole quantize on 1..n threads: the same bytes */
    for (int p = 0; p < n_pools; p++) {
        memcpy(Wc, W, (size_t)N * K * 4);
        cllm_qbuf *dst = p == 0 ? &qb : &qt;
        CHECK(cllm_gptq_quantize_pool(Wc, H, 0.01, dst, pools[p], &err) == CLLM_OK);
        if (p)
            CHECK_MSG(same_q(&qb, &qt), "bits %d G %d K %d: bytes differ on pool %d", bits, G, K,
                      p);
    }
    cllm_qbuf_free(&qr), cllm_qbuf_free(&qc), cllm_qbuf_free(&qb), cllm_qbuf_free(&qt);
    free(X), free(H), free(U), free(W), free(Wc), free(rc), free(rb);
}

static void check_factor_threads(int K, cllm_pool **pools, int n_pools) {
    float *X = malloc((size_t)64 * K * 4), *H = malloc((size_t)K * K * 4),
          *U0 = malloc((size_t)K * K * 4), *U1 = malloc((size_t)K * K * 4);
    cllm_error err;
    make_h(K, 64, true, X, H);
    CHECK(cllm_gptq_factor(H, K, 0.01, U0, NULL, &err) == CLLM_OK);
    for (int p = 0; p < n_pools; p++) {
        CHECK(cllm_gptq_factor(H, K, 0.01, U1, pools[p], &err) == CLLM_OK);
        CHECK_MSG(!memcmp(U0, U1, (size_t)K * K * 4), "K %d: factor bytes differ on pool %d", K, p);
    }
    free(X), free(H), free(U0), free(U1);
}

static void bench(cllm_pool *pool) {
    int shapes[][2] = {{2048, 512}, {512, 2048}}; /* quarter expert gate/up, down: K, N */
    cllm_error err;
    for (int s = 0; s < 2; s++) {
        int K = shapes[s][0], N = shapes[s][1];
        float *H = calloc((size_t)K * K, 4), *U = malloc((size_t)K * K * 4),
              *W = malloc((size_t)N * K * 4), *X = malloc((size_t)256 * K * 4);
        for (size_t i = 0; i < (size_t)256 * K; i++) X[i] = frand();
        for (int i = 0; i < K; i++)
            for (int j = 0; j <= i; j++) {
                float v = 0;
                for (int t = 0; t < 256; t += 8) v += X[(size_t)t * K + i] * X[(size_t)t * K + j];
                H[(size_t)i * K + j] = H[(size_t)j * K + i] = v;
            }
        for (size_t i = 0; i < (size_t)N * K; i++) W[i] = frand();
        cllm_qbuf q;
        CHECK(cllm_qbuf_alloc(&q, 4, 128, K, N, "b", &err) == CLLM_OK);
        double t0 = cllm_time_s();
        CHECK(cllm_gptq_factor(H, K, 0.01, U, pool, &err) == CLLM_OK);
        double t1 = cllm_time_s();
        CHECK(cllm_gptq_apply(W, H, U, &q, pool, &err) == CLLM_OK);
        double t2 = cllm_time_s();
        fprintf(stderr,
                "bench K %d N %d, %d threads: factor %.3fs (%.1f GFLOP/s), apply %.3fs (%.1f "
                "GFLOP/s)\n",
                K, N, cllm_pool_size(pool), t1 - t0, 2.0 / 3 * K * (double)K * K / (t1 - t0) / 1e9,
                t2 - t1, (double)N * K * K / (t2 - t1) / 1e9);
        cllm_qbuf_free(&q);
        free(H), free(U), free(W), free(X);
    }
}

int main(void) {
    cllm_pool *pools[3] = {NULL, cllm_pool_create(2), cllm_pool_create(3)};
    CHECK(pools[1] && pools[2]);
    const char *bench_env = getenv("CLLM_GPTQ_BENCH"); /* "only": skip the checks */
    if (bench_env && !strcmp(bench_env, "only")) {
        bench(pools[1]), bench(NULL);
        cllm_pool_free(pools[1]), cllm_pool_free(pools[2]);
        return 0;
    }
    int ks[] = {1, 8, 100, 128, 200, 300, 520};
    for (size_t i = 0; i < sizeof(ks) / sizeof(ks[0]); i++) {
        check_factor(ks[i], 2 * ks[i] + 8, false, pools[1]);
        check_factor(ks[i], ks[i] / 2 + 3, true, NULL); /* rank-deficient: damping carries it */
    }
    check_factor_threads(300, pools, 3);
    check_factor_threads(130, pools, 3);
    check_apply(4, 32, 256, 48, 300, false, false, pools, 3);
    check_apply(4, 32, 320, 40, 400, true, false, pools, 3); /* ragged last block */
    check_apply(4, 64, 192, 24, 300, true, true, pools, 3);
    check_apply(4, 128, 384, 56, 500, false, false, pools, 3);
    check_apply(4, 256, 512, 16, 600, true, false, pools, 3); /* group wider than a block */
    check_apply(8, 96, 288, 32, 400, false, false, pools, 3); /* block 96 (not a divisor of 128) */
    check_apply(8, 64, 128, 8, 200, false, true, pools, 3);
    if (bench_env) bench(pools[1]), bench(NULL);
    cllm_pool_free(pools[1]), cllm_pool_free(pools[2]);
    return test_report("test_gptq");
}
