/* W4A8 kernels (cllm_kern_ops.matmul_q4a8): int8 activations x int4 GPTQ codes with exact int32
 * group sums. Ref vs AVX2 bitwise; a token alone == inside any batch (both tiers, column
 * sub-range); ref vs the float emulation (matmul_q with act_bits 8) and vs a double oracle on the
 * dequantized weights and fake-quantized activations within 1e-5 of sum |w x|; the int8 grid is
 * kern_fake_quant_act's bit for bit. Odd shapes: K a multiple of groups 32/64/128, N any multiple
 * of 8 (the kernel's requirement, as for matmul_q), T 1..7, zero and outlier groups. */
#include <math.h>
#include <string.h>

#include "base/half.h"
#include "kernels/kern_int.h"
#include "kernels/kernels.h"
#include "quant/quant.h"
#include "test.h"

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float frand(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((rs >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}
static uint32_t urand(void) {
    rs = rs * 6364136223846793005ull + 1;
    return (uint32_t)(rs >> 32);
}

enum { F_ASYM = 1, F_BF16 = 2, F_RANDZ = 4 };

/* Tolerance of the new kernel vs the float emulation and vs the double oracle, relative to
 * sum_k |w[n][k] x_q[k]|: both are a few float roundings away from the exact value. */
#define TOL 1e-5

static void grid_case(int K, int G) {
    float *x = malloc((size_t)K * 4), *fq = malloc((size_t)K * 4), *s = malloc((size_t)K / G * 4);
    int8_t *q = malloc((size_t)K);
    int32_t *sum = malloc((size_t)K / G * 4);
    for (int k = 0; k < K; k++) x[k] = frand() * (k % 37 == 0 ? 50.0f : 1.0f);
    for (int k = 0; k < G; k++) x[k] = 0.0f; /* an all-zero group: scale 0, codes 0 */
    kern_fake_quant_act(x, fq, K, G, 8);
    kern_quant_act8(x, K, G, q, s, sum);
    for (int g = 0; g < K / G; g++) {
        int32_t a = 0;
        for (int k = g * G; k < (g + 1) * G; k++) {
            CHECK_MSG((float)q[k] * s[g] == fq[k], "grid k %d: %d * %g != %g", k, q[k], s[g],
                      fq[k]);
            CHECK(q[k] >= -127 && q[k] <= 127);
            a += q[k];
        }
        CHECK(a == sum[g]);
    }
    CHECK(s[0] == 0.0f && sum[0] == 0);
    free(x), free(fq), free(s), free(q), free(sum);
}

static void one_case(int G, int K, int N, int T, int flags) {
    size_t ldx = (size_t)K + 5, ldy = (size_t)N + 3;
    float *W = malloc((size_t)N * K * 4), *X = malloc(T * ldx * 4), *Wd = malloc((size_t)N * K * 4);
    float *Yr = calloc(T * ldy, 4), *Ya = calloc(T * ldy, 4), *Ye = calloc(T * ldy, 4),
          *Y1 = calloc(ldy, 4), *xa = malloc((size_t)K * 4);
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = frand() * 0.1f;
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) /* outlier channels, and token 1's first group all zero */
            X[t * ldx + k] = (t == 1 && k < G) ? 0.0f : frand() * (k % 29 == 3 ? 20.0f : 1.0f);
    cllm_qbuf q;
    cllm_error err;
    CHECK(cllm_qbuf_alloc(&q, 4, G, K, N, "t", &err) == CLLM_OK);
    q.asym = flags & F_ASYM;
    q.scale_bf16 = flags & F_BF16;
    cllm_quant_rtn_rows(W, (size_t)K, 0, N, &q);
    if (flags & F_RANDZ) { /* any stored zero (effective 1..16) and code */
        for (size_t i = 0; i < (size_t)K / G * N / 8; i++) q.qzeros[i] = (int32_t)urand();
        for (size_t i = 0; i < (size_t)K / 8 * N; i++) q.qweight[i] = (int32_t)urand();
    }
    cllm_qweight w = cllm_qbuf_view(&q);
    w.act_bits = 8;
    const cllm_kern_ops *ref = cllm_kern_ref(), *avx = cllm_kern_avx2();
    ref->matmul_q4a8(&w, 0, N, X, ldx, T, Yr, ldy);
    ref->matmul_q(&w, 0, N, X, ldx, T, Ye, ldy); /* the emulation */
    for (int n = 0; n < N; n++) cllm_quant_dequant_row(&w, n, Wd + (size_t)n * K);
    double worst_o = 0, worst_e = 0;
    for (int t = 0; t < T; t++) {
        kern_fake_quant_act(X + t * ldx, xa, K, G, 8);
        for (int n = 0; n < N; n++) {
            double acc = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                acc += (double)Wd[(size_t)n * K + k] * xa[k];
                mag += fabs((double)Wd[(size_t)n * K + k] * xa[k]);
            }
            double eo = fabs(acc - Yr[t * ldy + n]) / (mag + 1e-6);
            double ee = fabs((double)Ye[t * ldy + n] - Yr[t * ldy + n]) / (mag + 1e-6);
            if (eo > worst_o) worst_o = eo;
            if (ee > worst_e) worst_e = ee;
        }
    }
    CHECK_MSG(worst_o < TOL, "G %d K %d N %d T %d f%d: a8 vs oracle rel err %g", G, K, N, T, flags,
              worst_o);
    CHECK_MSG(worst_e < TOL, "G %d K %d N %d T %d f%d: a8 vs emulation rel err %g", G, K, N, T,
              flags, worst_e);
    const cllm_kern_ops *tiers[2] = {ref, avx};
    if (avx) {
        avx->matmul_q4a8(&w, 0, N, X, ldx, T, Ya, ldy);
        CHECK_MSG(!memcmp(Yr, Ya, T * ldy * 4), "avx2 != ref bitwise (G %d K %d N %d T %d f%d)", G,
                  K, N, T, flags);
    }
    for (int i = 0; i < 2; i++) {
        if (!tiers[i]) continue;
        for (int t = 0; t < T; t++) { /* token t alone, columns [8, N) */
            memset(Y1, 0, ldy * 4);
            tiers[i]->matmul_q4a8(&w, 8, N, X + t * ldx, ldx, 1, Y1, ldy);
            CHECK_MSG(!memcmp(Y1 + 8, Yr + t * ldy + 8, (size_t)(N - 8) * 4),
                      "%s: token %d alone != in batch of %d", tiers[i]->name, t, T);
            CHECK(Y1[0] == 0.0f);
        }
    }
    cllm_qbuf_free(&q);
    free(W), free(X), free(Wd), free(Yr), free(Ya), free(Ye), free(Y1), free(xa);
}

int main(void) {
    grid_case(256, 32);
    grid_case(384, 128);
    int shapes[][3] = {{32, 96, 24},   {32, 32, 8},  {64, 192, 40},
                       {128, 256, 56}, {64, 128, 8}, {32, 1024, 72}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (int T = 1; T <= 7; T++)
            for (int f = 0; f < 8; f++) one_case(shapes[s][0], shapes[s][1], shapes[s][2], T, f);
    fprintf(stderr, "w4a8 kernels: %s tier checked\n", cllm_kern_avx2() ? "ref + avx2" : "ref");
    return test_report("test_quant_a8");
}
