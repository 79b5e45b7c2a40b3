/* gemm_f32 (kernels.h) in every tier vs a float64 reference on ragged shapes (M, N, K of 1, 7,
 * 17, 100, 129, ...), strides wider than the rows and unaligned pointers, for the three ops
 * (=, +=, -=); the tiers agree bitwise (one fma sequence per element) and a call's rows do not
 * depend on how the rows are split across calls (what keeps GPTQ bytes independent of threads).
 * CLLM_GEMM_BENCH=1 also prints GFLOP/s of each tier at 2048 x 2048 x 128 beside matmul_f32 on
 * the same product (B transposed), the kernel GPTQ used before. */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "test.h"

static const int dims[] = {1, 2, 7, 16, 17, 31, 33, 100, 129};
#define ND ((int)(sizeof(dims) / sizeof(dims[0])))

/* one shape in every tier: returns 0 when all checks passed */
static void check_shape(const cllm_kern_ops **tiers, int nt, int M, int N, int K, int op) {
    size_t lda = (size_t)K + (size_t)test_irand(4), ldb = (size_t)N + (size_t)test_irand(5),
           ldc = (size_t)N + (size_t)test_irand(3);
    /* +1 / +3 element offsets: unaligned pointers */
    float *abuf = malloc(((size_t)M * lda + 1) * 4), *bbuf = malloc(((size_t)K * ldb + 3) * 4);
    float *A = abuf + 1, *B = bbuf + 3;
    size_t nc = (size_t)M * ldc + 2;
    float *c0 = malloc(nc * 4), *cref = NULL;
    for (size_t i = 0; i < (size_t)M * lda; i++) A[i] = test_frand();
    for (size_t i = 0; i < (size_t)K * ldb; i++) B[i] = test_frand();
    for (size_t i = 0; i < nc; i++) c0[i] = test_frand();
    for (int t = 0; t < nt; t++) {
        float *cb = malloc(nc * 4), *C = cb + 1;
        memcpy(cb, c0, nc * 4);
        tiers[t]->gemm_f32(M, N, K, A, lda, B, ldb, C, ldc, op);
        int bad = 0;
        for (int m = 0; m < M && !bad; m++)
            for (int n = 0; n < N; n++) {
                double s = 0, mag = 0;
                for (int k = 0; k < K; k++) {
                    double p = (double)A[(size_t)m * lda + k] * B[(size_t)k * ldb + n];
                    s += p, mag += fabs(p);
                }
                double c = c0[1 + (size_t)m * ldc + n];
                double want = op == CLLM_GEMM_SET ? s : op == CLLM_GEMM_ADD ? c + s : c - s;
                double tol = 1.5 * (K + 2) * 0x1p-24 * (mag + fabs(c)) + 1e-30;
                if (!(fabs(C[(size_t)m * ldc + n] - want) <= tol)) {
                    CHECK_MSG(0, "%s M=%d N=%d K=%d op=%d (%d,%d): %g vs %g", tiers[t]->name, M, N,
                              K, op, m, n, C[(size_t)m * ldc + n], want);
                    bad = 1;
                    break;
                }
            }
        /* padding between rows and around C untouched */
        for (int m = 0; m < M && !bad; m++)
            for (size_t j = (size_t)N; j < ldc; j++)
                if (C[(size_t)m * ldc + j] != c0[1 + (size_t)m * ldc + j]) bad = 1;
        CHECK_MSG(!bad && cb[0] == c0[0] && cb[nc - 1] == c0[nc - 1],
                  "%s M=%d N=%d K=%d: wrote outside C", tiers[t]->name, M, N, K);
        if (t == 0)
            cref = cb;
        else {
            CHECK_MSG(!memcmp(cb, cref, nc * 4), "%s != %s bitwise (M=%d N=%d K=%d op=%d)",
                      tiers[t]->name, tiers[0]->name, M, N, K, op);
            /* rows split at a random point (two calls) give the same bytes */
            int ms = M > 1 ? 1 + test_irand(M - 1) : 0;
            memcpy(cb, c0, nc * 4);
            tiers[t]->gemm_f32(ms, N, K, A, lda, B, ldb, C, ldc, op);
            tiers[t]->gemm_f32(M - ms, N, K, A + (size_t)ms * lda, lda, B, ldb,
                               C + (size_t)ms * ldc, ldc, op);
            CHECK_MSG(!memcmp(cb, cref, nc * 4), "%s rows split at %d differ (M=%d N=%d K=%d)",
                      tiers[t]->name, ms, M, N, K);
            /* and columns split too (N contiguous sub-blocks, what a caller may do) */
            int ns = N > 1 ? 1 + test_irand(N - 1) : 0;
            memcpy(cb, c0, nc * 4);
            tiers[t]->gemm_f32(M, ns, K, A, lda, B, ldb, C, ldc, op);
            tiers[t]->gemm_f32(M, N - ns, K, A, lda, B + ns, ldb, C + ns, ldc, op);
            CHECK_MSG(!memcmp(cb, cref, nc * 4), "%s columns split at %d differ (M=%d N=%d K=%d)",
                      tiers[t]->name, ns, M, N, K);
            free(cb);
        }
    }
    free(cref), free(c0), free(abuf), free(bbuf);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* GFLOP/s at M x N x K, single thread, best of 3 */
static void bench(const cllm_kern_ops **tiers, int nt) {
    int M = 2048, N = 2048, K = 128;
    float *A = malloc((size_t)M * K * 4), *B = malloc((size_t)K * N * 4),
          *BT = malloc((size_t)K * N * 4), *C = malloc((size_t)M * N * 4);
    for (size_t i = 0; i < (size_t)M * K; i++) A[i] = test_frand();
    for (size_t i = 0; i < (size_t)K * N; i++) B[i] = test_frand();
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) BT[(size_t)n * K + k] = B[(size_t)k * N + n];
    double fl = 2.0 * M * N * K;
    for (int t = 0; t <= nt; t++) {
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now();
            if (t < nt) /* in 64-row calls, as gptq.c does */
                for (int m0 = 0; m0 < M; m0 += 64)
                    tiers[t]->gemm_f32(64, N, K, A + (size_t)m0 * K, K, B, N, C + (size_t)m0 * N, N,
                                       CLLM_GEMM_SET);
            else
                for (int m0 = 0; m0 < M; m0 += 64)
                    cllm_kern()->matmul_f32(BT, K, N, A + (size_t)m0 * K, K, 64, K,
                                            C + (size_t)m0 * N, N);
            double dt = now() - t0;
            if (dt < best) best = dt;
        }
        fprintf(stderr, "bench %dx%dx%d: %-16s %6.1f GFLOP/s\n", M, N, K,
                t < nt ? tiers[t]->name : "matmul_f32(old)", fl / best * 1e-9);
    }
    free(A), free(B), free(BT), free(C);
}

int main(void) {
    const cllm_kern_ops *tiers[1 + CLLM_KERN_TIERS_MAX] = {cllm_kern_ref()};
    int nt = 1 + cllm_kern_tiers(tiers + 1, CLLM_KERN_TIERS_MAX);
    for (int op = 0; op < 3; op++)
        for (int iter = 0; iter < 40; iter++)
            check_shape(tiers, nt, dims[test_irand(ND)], dims[test_irand(ND)], dims[test_irand(ND)],
                        op);
    /* every dim in every position at least once, incl. K = 0 (C = 0, C, C) */
    for (int i = 0; i < ND; i++) {
        check_shape(tiers, nt, dims[i], 1 + test_irand(40), 1 + test_irand(40), i % 3);
        check_shape(tiers, nt, 1 + test_irand(40), dims[i], 1 + test_irand(40), i % 3);
        check_shape(tiers, nt, 1 + test_irand(40), 1 + test_irand(40), dims[i], i % 3);
    }
    for (int op = 0; op < 3; op++) check_shape(tiers, nt, 9, 35, 0, op);
    for (int t = 0; t < nt; t++) fprintf(stderr, "tier %s checked\n", tiers[t]->name);
    const char *b = getenv("CLLM_GEMM_BENCH");
    if (b && *b && strcmp(b, "0")) bench(tiers, nt);
    return test_report("test_gemm");
}
