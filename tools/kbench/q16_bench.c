/* cllm-kbench-q16 [K N P REPS KIND]: an integer-activation matmul of the selected tier (CLLM_ISA
 * as for cllm) at 1..8 tokens, group 128, called per P-column panel as forward.c's paneled
 * matrices are (P 0: one call over all N columns). KIND: q16 (matmul_q_qact16, int4 x int16
 * codes, the default), q4a8 (matmul_q4_qact, int4 x int8) or q2a8 (matmul_q2_qact, 2-bit x int8,
 * the screened lm_head's estimate). Prints ns per call and
 * GMAC/s per token count; N large (e.g. 65536) streams the weights from memory, small (512) keeps
 * them in cache. One thread. A measurement for kernel work, not a test. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint32_t urand(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rs >> 32);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
    const int K = argc > 1 ? atoi(argv[1]) : 2048, N = argc > 2 ? atoi(argv[2]) : 512;
    const int P = argc > 3 ? atoi(argv[3]) : 32, G = 128, TMAX = 8;
    long reps = argc > 4 ? atol(argv[4]) : 0;
    const char *kind = argc > 5 ? argv[5] : "q16";
    const int q2 = !strcmp(kind, "q2a8"), a8 = q2 || !strcmp(kind, "q4a8");
    if (!a8 && strcmp(kind, "q16")) {
        fprintf(stderr, "cllm-kbench-q16: KIND is q16, q4a8 or q2a8, not %s\n", kind);
        return 2;
    }
    if (K < G || K % G || N < 8 || N % 8 || P < 0 || (P && (P % 8 || N % P))) {
        fprintf(stderr, "usage: cllm-kbench-q16 [K N P REPS]: K a multiple of 128, N of 8 and P\n");
        return 2;
    }
    const cllm_kern_ops *k = cllm_kern();
    const int np = P ? N / P : 1, W = P ? P : N;
    /* each panel a GPTQ matrix of its own, stored one after another (weights.c's panels) */
    size_t qw_n = (size_t)K / (q2 ? 16 : 8) * N, qz_n = (size_t)K / G * N / 8,
           sc_n = (size_t)K / G * N;
    int32_t *qw = malloc(qw_n * 4), *qz = malloc(qz_n * 4);
    uint16_t *sc = malloc(sc_n * 2);
    for (size_t i = 0; i < qw_n; i++) qw[i] = (int32_t)urand();
    for (size_t i = 0; i < qz_n; i++) qz[i] = 0x77777777;
    for (size_t i = 0; i < sc_n; i++) sc[i] = 0x2000 + (urand() & 0x3ff); /* small f16 */
    const int ag = cllm_qact16_group(4, G);
    size_t per = a8 ? cllm_qact_bytes(K, G, 1) : cllm_qact16_bytes(K, ag, 1);
    float *X = malloc((size_t)TMAX * K * 4), *Y = malloc((size_t)TMAX * N * 4);
    char *A = malloc(per * TMAX);
    for (int i = 0; i < TMAX * K; i++) X[i] = (float)((int)(urand() % 2001) - 1000) / 1000.0f;
    if (a8)
        k->qact_prep(X, (size_t)K, TMAX, K, G, 8, A);
    else
        k->qact16_prep(X, (size_t)K, TMAX, K, ag, 4, A);
    if (!reps) reps = (long)(4e9 / ((double)K * N)) + 1; /* about 4 G weights per token count */
    printf("%s, tier %s, K %d, N %d, panel %d, %ld reps\n", kind, k->name, K, N, P, reps);
    printf("%6s %12s %10s\n", "tokens", "ns/call", "GMAC/s");
    for (int T = 1; T <= TMAX; T++) {
        double best = 1e30;
        for (int round = 0; round < 7; round++) {
            double t0 = now();
            for (long r = 0; r < reps; r++)
                for (int p = 0; p < np; p++) {
                    cllm_qweight w = {qw + (size_t)p * K / (q2 ? 16 : 8) * W,
                                      qz + (size_t)p * K / G * W / 8,
                                      sc + (size_t)p * K / G * W,
                                      q2 ? 2 : 4,
                                      G,
                                      K,
                                      W,
                                      a8 ? 8 : 16,
                                      0,
                                      0};
                    if (a8)
                        (q2 ? k->matmul_q2_qact : k->matmul_q4_qact)(&w, 0, W, A, T,
                                                                     Y + (size_t)p * W, (size_t)N);
                    else
                        k->matmul_q_qact16(&w, 0, W, A, T, Y + (size_t)p * W, (size_t)N);
                }
            double dt = now() - t0;
            if (dt < best) best = dt;
        }
        printf("%6d %12.1f %10.2f\n", T, best * 1e9 / ((double)reps * np),
               (double)K * N * T * reps / best * 1e-9);
    }
    free(qw), free(qz), free(sc), free(X), free(Y), free(A);
    return 0;
}
