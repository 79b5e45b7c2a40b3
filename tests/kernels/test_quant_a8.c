/* W4A8/W4A4 kernels (cllm_kern_ops qact_prep + matmul_q4_qact, and matmul_q2_qact's 2-bit codes
 * at the end: q2_case): int8 activation codes
 * (act_bits 8, or the 4-bit grid -7..7) x int4 GPTQ codes with exact int32 group sums. Every
 * available tier (avx2, avx512 with and without VNNI, neon) vs ref bitwise, whether tokens are
 * prepared together or one by one; a token alone == inside any batch (every tier, column
 * sub-range); ref vs the float emulation (cllm_kern_fake_quant_act, then matmul_q) and vs a
 * double oracle on the dequantized
 * weights and fake-quantized activations within 1e-5 of sum |w x|; the code grids (scalar and
 * each tier's prep) are kern_fake_quant_act's bit for bit. Odd shapes: K a multiple of groups
 * 32/64/128, N any multiple of 8 (the kernel's requirement, as for matmul_q), T 1..7, zero and
 * outlier groups, unaligned activation rows. */
#include <math.h>
#include <string.h>

#include "base/half.h"
#include "kernels/kern_int.h"
#include "kernels/kernels.h"
#include "model/qformat.h"
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

/* Y = tier's prepared-activation path: qact_prep of all T tokens (or one at a time when
 * `single`), then matmul_q4_qact over columns [n0, n1). */
static void run_qact(const cllm_kern_ops *k, const cllm_qweight *w, int n0, int n1, const float *X,
                     size_t ldx, int T, float *Y, size_t ldy, int abits, int single) {
    size_t per = cllm_qact_bytes(w->K, w->group, 1);
    char *A = malloc(per * (size_t)T);
    if (single)
        for (int t = 0; t < T; t++)
            k->qact_prep(X + (size_t)t * ldx, ldx, 1, w->K, w->group, abits, A + per * t);
    else
        k->qact_prep(X, ldx, T, w->K, w->group, abits, A);
    k->matmul_q4_qact(w, n0, n1, A, T, Y, ldy);
    free(A);
}

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
    /* the 4-bit grid (W4A4): codes -7..7, q * s == kern_fake_quant_act(bits 4) */
    kern_fake_quant_act(x, fq, K, G, 4);
    kern_quant_act(x, K, G, 4, q, s, sum);
    int n7 = 0;
    for (int g = 0; g < K / G; g++) {
        int32_t a = 0;
        for (int k = g * G; k < (g + 1) * G; k++) {
            CHECK_MSG((float)q[k] * s[g] == fq[k], "grid4 k %d: %d * %g != %g", k, q[k], s[g],
                      fq[k]);
            CHECK(q[k] >= -7 && q[k] <= 7);
            n7 += q[k] == 7 || q[k] == -7;
            a += q[k];
        }
        CHECK(a == sum[g]);
    }
    CHECK(n7 >= K / G - 1); /* every nonzero group reaches its absmax code */
    /* each tier's prep: same scales and sums, and (decoded from its layout) the same codes; the
     * ref layout is codes in k order, the x86 and neon one even-k/odd-k words per 8 inputs */
    const cllm_kern_ops *tiers[1 + CLLM_KERN_TIERS_MAX] = {cllm_kern_ref()};
    int nt = 1 + cllm_kern_tiers(tiers + 1, CLLM_KERN_TIERS_MAX);
    int NG = K / G;
    for (int bits = 4; bits <= 8; bits += 4) {
        kern_quant_act(x, K, G, bits, q, s, sum);
        for (int i = 0; i < nt; i++) {
            if (!tiers[i]->qact_prep) continue;
            char *A = malloc(cllm_qact_bytes(K, G, 1));
            tiers[i]->qact_prep(x, (size_t)K, 1, K, G, bits, A);
            CHECK(!memcmp(A + K, s, (size_t)NG * 4) &&
                  !memcmp(A + K + 4 * NG, sum, (size_t)NG * 4));
            for (int k = 0; k < K; k++) {
                int pos = i == 0 ? k : (k / 8) * 8 + (k % 2) * 4 + (k % 8) / 2;
                CHECK_MSG(((int8_t *)A)[pos] == q[k], "%s prep bits %d k %d", tiers[i]->name, bits,
                          k);
            }
            free(A);
        }
    }
    free(x), free(fq), free(s), free(q), free(sum);
}

static void one_case(int G, int K, int N, int T, int flags, int abits) {
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
    w.act_bits = abits;
    const cllm_kern_ops *ref = cllm_kern_ref();
    const cllm_kern_ops *tiers[1 + CLLM_KERN_TIERS_MAX] = {ref};
    const int nt = 1 + cllm_kern_tiers(tiers + 1, CLLM_KERN_TIERS_MAX);
    run_qact(ref, &w, 0, N, X, ldx, T, Yr, ldy, abits, 0);
    { /* the emulation: fake-quantized activations, then the float kernel */
        float *xq = malloc((size_t)T * K * 4);
        for (int t = 0; t < T; t++)
            cllm_kern_fake_quant_act(X + t * ldx, xq + (size_t)t * K, K, G, abits);
        ref->matmul_q(&w, 0, N, xq, (size_t)K, T, Ye, ldy);
        free(xq);
    }
    for (int n = 0; n < N; n++) cllm_qformat_dequant_row(&w, n, Wd + (size_t)n * K);
    double worst_o = 0, worst_e = 0;
    for (int t = 0; t < T; t++) {
        kern_fake_quant_act(X + t * ldx, xa, K, G, abits);
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
    CHECK_MSG(worst_o < TOL, "G %d K %d N %d T %d f%d: a%d vs oracle rel err %g", G, K, N, T, flags,
              abits, worst_o);
    CHECK_MSG(worst_e < TOL, "G %d K %d N %d T %d f%d: a%d vs emulation rel err %g", G, K, N, T,
              flags, abits, worst_e);
    for (int i = 0; i < nt; i++) {
        if (!tiers[i]->qact_prep) continue;
        for (int single = 0; single < 2; single++) { /* prepared once == per call, all tiers */
            memset(Ya, 0, T * ldy * 4);
            run_qact(tiers[i], &w, 0, N, X, ldx, T, Ya, ldy, abits, single);
            CHECK_MSG(!memcmp(Yr, Ya, T * ldy * 4),
                      "%s qact != ref bitwise (G %d K %d N %d T %d f%d a%d single %d)",
                      tiers[i]->name, G, K, N, T, flags, abits, single);
        }
        /* columns [0, N - 8): the last 8-column block untouched */
        memset(Ya, 0, T * ldy * 4);
        run_qact(tiers[i], &w, 0, N - 8, X, ldx, T, Ya, ldy, abits, 0);
        for (int t = 0; t < T; t++) {
            CHECK(!memcmp(Ya + t * ldy, Yr + t * ldy, (size_t)(N - 8) * 4));
            CHECK(Ya[t * ldy + N - 8] == 0.0f && Ya[t * ldy + N - 1] == 0.0f);
        }
    }
    for (int i = 0; i < nt; i++) {
        for (int t = 0; t < T; t++) { /* token t alone, columns [8, N) */
            memset(Y1, 0, ldy * 4);
            if (tiers[i]->qact_prep)
                run_qact(tiers[i], &w, 8, N, X + t * ldx, ldx, 1, Y1, ldy, abits, 0);
            else
                continue;
            CHECK_MSG(!memcmp(Y1 + 8, Yr + t * ldy + 8, (size_t)(N - 8) * 4),
                      "%s: token %d alone != in batch of %d", tiers[i]->name, t, T);
            CHECK(Y1[0] == 0.0f);
        }
    }
    cllm_qbuf_free(&q);
    free(W), free(X), free(Wd), free(Yr), free(Ya), free(Ye), free(Y1), free(xa);
}

/* matmul_q2_qact (2-bit codes, kernels.h): codes c[n][k] packed by the layout's definition,
 * random 4-bit zeros and scales; ref vs a double sum over the codes and the activation codes
 * (kern_quant_act) within TOL, every tier == ref bitwise (batch and single preparation, a token
 * alone, a column sub-range). */
static void q2_case(int G, int K, int N, int T, int bf16, int ext) {
    const int NG = K / G;
    size_t ldx = (size_t)K + 3, ldy = (size_t)N + 5, per = cllm_qact_bytes(K, G, 1);
    uint8_t *c = malloc((size_t)N * K);
    int32_t *qw = calloc((size_t)K / 16 * N, 4), *qz = malloc((size_t)NG * N / 8 * 4);
    uint16_t *sc = malloc((size_t)NG * N * 2);
    float *X = malloc(T * ldx * 4), *Yr = calloc(T * ldy, 4), *Ya = calloc(T * ldy, 4);
    int8_t *qa = malloc((size_t)K);
    float *as = malloc((size_t)NG * 4);
    int32_t *asum = malloc((size_t)NG * 4);
    char *A = malloc(per * T);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            c[(size_t)n * K + k] = ext ? 3 : (uint8_t)(urand() & 3);
            int h = (k % 16) / 8, j = (k % 8) / 2, o = k % 2;
            qw[(size_t)(k / 16) * N + n] |=
                (int32_t)((uint32_t)c[(size_t)n * K + k] << (8 * j + 2 * (2 * h + o)));
        }
    for (int i = 0; i < NG * N / 8; i++) qz[i] = (int32_t)urand();
    for (int i = 0; i < NG * N; i++)
        sc[i] = bf16 ? cllm_f32_to_bf16(0.01f + 0.02f * fabsf(frand()))
                     : cllm_f32_to_f16(0.01f + 0.02f * fabsf(frand()));
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++)
            X[t * ldx + k] = ext                 ? (t % 2 ? -1.0f : 1.0f) /* every code +-127 */
                             : (t == 1 && k < G) ? 0.0f
                                                 : frand() * (k % 29 == 3 ? 20.0f : 1.0f);
    cllm_qweight w = {qw, qz, sc, 2, G, K, N, 8, bf16, 0};
    const cllm_kern_ops *ref = cllm_kern_ref();
    const cllm_kern_ops *tiers[CLLM_KERN_TIERS_MAX];
    const int nt = cllm_kern_tiers(tiers, CLLM_KERN_TIERS_MAX);
    ref->qact_prep(X, ldx, T, K, G, 8, A);
    ref->matmul_q2_qact(&w, 0, N, A, T, Yr, ldy);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        kern_quant_act(X + t * ldx, K, G, 8, qa, as, asum);
        for (int n = 0; n < N; n++) {
            double acc = 0, mag = 0;
            for (int g = 0; g < NG; g++) {
                int z = (int)(((uint32_t)qz[g * (N / 8) + n / 8] >> (4 * (n % 8))) & 15u) + 1;
                double ws = bf16 ? cllm_bf16_to_f32(sc[g * N + n]) : cllm_f16_to_f32(sc[g * N + n]);
                for (int k = g * G; k < (g + 1) * G; k++) {
                    double v = ws * as[g] * (c[(size_t)n * K + k] - z) * qa[k];
                    acc += v;
                    mag += fabs(v);
                }
            }
            double e = fabs(acc - Yr[t * ldy + n]) / (mag + 1e-6);
            worst = e > worst ? e : worst;
        }
    }
    CHECK_MSG(worst < TOL, "q2 G %d K %d N %d T %d: ref vs oracle rel err %g", G, K, N, T, worst);
    for (int i = 0; i < nt; i++) {
        for (int single = 0; single < 2; single++) {
            memset(Ya, 0, T * ldy * 4);
            if (single)
                for (int t = 0; t < T; t++)
                    tiers[i]->qact_prep(X + t * ldx, ldx, 1, K, G, 8, A + per * t);
            else
                tiers[i]->qact_prep(X, ldx, T, K, G, 8, A);
            tiers[i]->matmul_q2_qact(&w, 0, N, A, T, Ya, ldy);
            CHECK_MSG(!memcmp(Yr, Ya, T * ldy * 4), "%s q2 != ref (G %d K %d N %d T %d single %d)",
                      tiers[i]->name, G, K, N, T, single);
        }
        for (int t = 0; t < T; t++) { /* token t alone, columns [8, N) */
            memset(Ya, 0, ldy * 4);
            tiers[i]->matmul_q2_qact(&w, 8, N, A + per * t, 1, Ya, ldy);
            CHECK_MSG(!memcmp(Ya + 8, Yr + t * ldy + 8, (size_t)(N - 8) * 4),
                      "%s q2: token %d alone != in a batch of %d", tiers[i]->name, t, T);
            CHECK(Ya[0] == 0.0f);
        }
    }
    free(c), free(qw), free(qz), free(sc), free(X), free(Yr), free(Ya), free(qa), free(as);
    free(asum), free(A);
}

int main(void) {
    grid_case(256, 32);
    grid_case(384, 128);
    /* N: every mix of the 64/32/16/8-column tiles (120 = 64 + 32 + 16 + 8, 200 = 3*64 + 8) */
    int shapes[][3] = {{32, 96, 24}, {32, 32, 8},    {64, 192, 40}, {128, 256, 56},
                       {64, 128, 8}, {32, 1024, 72}, {32, 64, 120}, {64, 128, 200}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        /* every tile height; 9..17: the AVX-512 tier's balanced passes of up to 8 (9 = 5 + 4,
         * 16 = 8 + 8) and its prefill blocks of 4 past 16 */
        for (int T = 1; T <= 17; T += T < 10 ? 1 : 3)
            for (int f = 0; f < 8; f++)
                for (int abits = 4; abits <= 8; abits += 4)
                    one_case(shapes[s][0], shapes[s][1], shapes[s][2], T, f, abits);
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (int T = 1; T <= 17; T += T < 10 ? 1 : 3)
            q2_case(shapes[s][0], shapes[s][1], shapes[s][2], T, T % 2, 0);
    /* groups of 10 rows (the most whose int16 pair sums an AVX2 tile adds before widening) at
     * the extremes, codes 3 x activations +-127, and of 16 rows (widened every row) */
    for (int T = 1; T <= 9; T += 4) {
        q2_case(160, 480, 40, T, 0, 1);
        q2_case(256, 512, 24, T, 1, 0);
        q2_case(256, 512, 24, T, 1, 1);
    }
    const cllm_kern_ops *more[CLLM_KERN_TIERS_MAX];
    int nmore = cllm_kern_tiers(more, CLLM_KERN_TIERS_MAX);
    fprintf(stderr, "w4a8/w4a4 kernels: ref");
    for (int i = 0; i < nmore; i++) fprintf(stderr, " + %s", more[i]->name);
    fprintf(stderr, " tiers checked\n");
    return test_report("test_quant_a8");
}
