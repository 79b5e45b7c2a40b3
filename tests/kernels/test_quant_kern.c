/* INT4/INT8 (GPTQ layout) kernels vs dequantize-then-fp32 on odd shapes; every available tier
 * (avx2, avx512, neon) vs ref bitwise; batch invariance (a token's outputs alone == inside any
 * batch, column sub-ranges); RTN round trip bounds. */
#include <math.h>
#include <string.h>

#include "base/half.h"
#include "kernels/kern_int.h"
#include "kernels/kernels.h"
#include "quant/gptq.h"
#include "model/qformat.h"
#include "quant/quant.h"
#include "test.h"

static uint64_t rs = 88172645463325252ull;
static float frand(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((rs >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

enum { F_ASYM = 1, F_BF16 = 2, F_RANDZ = 4 };

/* Output rows [T][N] filled with stale values (a kernel must not read what it writes before
 * writing it), the ldy padding with 0 as in the reference's buffer. */
static void stale(float *Y, int T, int N, size_t ldy) {
    for (size_t i = 0; i < (size_t)T * ldy; i++) Y[i] = i % ldy < (size_t)N ? 1e30f : 0.0f;
}

/* flags: F_ASYM asymmetric RTN, F_BF16 bf16 scales, F_RANDZ random zero points and codes (any
 * stored zero, including 2^b - 1, i.e. effective zero 2^b) instead of RTN's. */
static void one_case_f(int bits, int G, int K, int N, int T, int act_bits, int flags) {
    size_t ldx = (size_t)K + 3, ldy = (size_t)N + 5;
    float *W = malloc((size_t)N * K * 4), *X = malloc(T * ldx * 4), *Wd = malloc((size_t)N * K * 4);
    float *Yr = calloc(T * ldy, 4), *Ya = calloc(T * ldy, 4), *Y1 = calloc(ldy, 4);
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = frand() * 0.1f;
    for (size_t i = 0; i < T * ldx; i++) X[i] = frand();
    if (act_bits < 16) /* matmul_q reads float activations: the emulation quantizes them first */
        for (int t = 0; t < T; t++)
            cllm_kern_fake_quant_act(X + t * ldx, X + t * ldx, K, G, act_bits);
    cllm_qbuf q;
    cllm_error err;
    CHECK(cllm_qbuf_alloc(&q, bits, G, K, N, "t", &err) == CLLM_OK);
    q.asym = flags & F_ASYM;
    q.scale_bf16 = flags & F_BF16;
    cllm_quant_rtn_rows(W, (size_t)K, 0, N, &q);
    cllm_qweight w = cllm_qbuf_view(&q);
    w.act_bits = act_bits;
    CHECK(w.scale_bf16 == !!(flags & F_BF16));
    int maxq = (1 << bits) - 1, nzdist = 0;
    if (flags & F_RANDZ) {
        for (size_t i = 0; i < (size_t)K / G * N / (32 / bits); i++)
            q.qzeros[i] = (int32_t)(uint32_t)(rs = rs * 6364136223846793005ull + 1, rs >> 32);
        for (size_t i = 0; i < (size_t)K / (32 / bits) * N; i++)
            q.qweight[i] = (int32_t)(uint32_t)(rs = rs * 6364136223846793005ull + 1, rs >> 32);
    }
    if (flags & (F_ASYM | F_RANDZ)) { /* the zeros really vary per group and output */
        int z0 = q.qzeros[0] & maxq;
        for (int g = 0; g < K / G; g++)
            for (int n = 0; n < N; n++) {
                uint32_t zw = (uint32_t)q.qzeros[(size_t)g * (N / (32 / bits)) + n / (32 / bits)];
                nzdist += (int)((zw >> ((n % (32 / bits)) * bits)) & (uint32_t)maxq) != z0;
            }
        CHECK_MSG(nzdist > 0, "zeros constant (flags %d)", flags);
    }
    /* RTN error bound: |w - dq| <= scale / 2 (+ clamp at the negative edge is exact). */
    double maxerr = 0;
    for (int n = 0; n < N; n++) {
        cllm_qformat_dequant_row(&w, n, Wd + (size_t)n * K);
        for (int k = 0; k < K; k++) {
            float s = cllm_qweight_scale(&w, k / G, n);
            double e = fabs(Wd[(size_t)n * K + k] - W[(size_t)n * K + k]) / s;
            if (e > maxerr) maxerr = e;
        }
    }
    /* half a step, plus the fp16 (bf16) rounding of the scale at the clamped edge */
    double slack = (maxq + 1) * (flags & F_BF16 ? 1.0 / 256 : 1.0 / 2048);
    if (!(flags & F_RANDZ))
        CHECK_MSG(maxerr <= 0.5 + slack, "bits %d flags %d rtn err %.4f scales", bits, flags,
                  maxerr);
    const cllm_kern_ops *ref = cllm_kern_ref();
    const cllm_kern_ops *tiers[CLLM_KERN_TIERS_MAX];
    int nt = cllm_kern_tiers(tiers, CLLM_KERN_TIERS_MAX);
    ref->matmul_q(&w, 0, N, X, ldx, T, Yr, ldy);
    /* oracle: dequantize, (fake-quantized) activations, double accumulation */
    float *xa = malloc((size_t)K * 4);
    double worst = 0;
    for (int t = 0; t < T; t++) {
        memcpy(xa, X + t * ldx, (size_t)K * 4);
        for (int n = 0; n < N; n++) {
            double acc = 0, mag = 0;
            for (int k = 0; k < K; k++) {
                acc += (double)Wd[(size_t)n * K + k] * xa[k];
                mag += fabs((double)Wd[(size_t)n * K + k] * xa[k]);
            }
            double e = fabs(acc - Yr[t * ldy + n]) / (mag + 1e-6);
            if (e > worst) worst = e;
        }
    }
    CHECK_MSG(worst < 1e-5, "bits %d G %d K %d N %d T %d a%d: ref vs dequant rel err %g", bits, G,
              K, N, T, act_bits, worst);
    for (int i = 0; i < nt; i++) {
        const cllm_kern_ops *kt = tiers[i];
        stale(Ya, T, N, ldy);
        kt->matmul_q(&w, 0, N, X, ldx, T, Ya, ldy);
        CHECK_MSG(!memcmp(Yr, Ya, T * ldy * 4),
                  "%s != ref bitwise (bits %d G %d K %d N %d T %d a%d flags %d)", kt->name, bits, G,
                  K, N, T, act_bits, flags);
        /* batch invariance + column sub-range: token t alone, columns [8, N) */
        for (int t = 0; t < T; t++) {
            memset(Y1, 0, ldy * 4);
            kt->matmul_q(&w, 8, N, X + t * ldx, ldx, 1, Y1, ldy);
            CHECK(!memcmp(Y1 + 8, Ya + t * ldy + 8, (size_t)(N - 8) * 4));
            CHECK(Y1[0] == 0.0f);
        }
        /* act_bits is not read by matmul_q (kernels.h): the same bytes with act_bits 16 */
        if (act_bits < 16) {
            cllm_qweight w16 = w;
            w16.act_bits = 16;
            stale(Ya, T, N, ldy);
            kt->matmul_q(&w16, 0, N, X, ldx, T, Ya, ldy);
            CHECK_MSG(!memcmp(Yr, Ya, T * ldy * 4), "%s: act_bits %d changed matmul_q", kt->name,
                      act_bits);
        }
        /* columns [0, N - 8) of the batch: the last 8-column block left untouched */
        memset(Ya, 0, T * ldy * 4);
        kt->matmul_q(&w, 0, N - 8, X, ldx, T, Ya, ldy);
        for (int t = 0; t < T; t++) {
            CHECK(!memcmp(Ya + t * ldy, Yr + t * ldy, (size_t)(N - 8) * 4));
            CHECK(Ya[t * ldy + N - 8] == 0.0f && Ya[t * ldy + N - 1] == 0.0f);
        }
    }
    for (int t = 0; t < T; t++) {
        memset(Y1, 0, ldy * 4);
        ref->matmul_q(&w, 0, N, X + t * ldx, ldx, 1, Y1, ldy);
        CHECK(!memcmp(Y1, Yr + t * ldy, (size_t)N * 4));
    }
    cllm_qbuf_free(&q);
    free(W), free(X), free(Wd), free(Yr), free(Ya), free(Y1), free(xa);
}
static void one_case(int bits, int G, int K, int N, int T, int act_bits) {
    one_case_f(bits, G, K, N, T, act_bits, 0);
}

/* Asymmetric RTN beats symmetric on one-sided groups (its point), and keeps every stored zero
 * in [0, 2^b - 2] (no v1 wrap). */
static void asym_case(int bits) {
    int G = 32, K = 128, N = 16, maxq = (1 << bits) - 1;
    float *W = malloc((size_t)N * K * 4), *row = malloc((size_t)K * 4);
    for (size_t i = 0; i < (size_t)N * K; i++) /* shifted: rows 0..7 positive, 8..15 negative */
        W[i] = (i / K < 8 ? 0.05f : -0.05f) + 0.04f * frand();
    cllm_qbuf qs, qa;
    cllm_error err;
    CHECK(cllm_qbuf_alloc(&qs, bits, G, K, N, "s", &err) == CLLM_OK);
    CHECK(cllm_qbuf_alloc(&qa, bits, G, K, N, "a", &err) == CLLM_OK);
    qa.asym = true;
    cllm_quant_rtn_rows(W, (size_t)K, 0, N, &qs);
    cllm_quant_rtn_rows(W, (size_t)K, 0, N, &qa);
    cllm_qweight vs = cllm_qbuf_view(&qs), va = cllm_qbuf_view(&qa);
    double es = 0, ea = 0;
    for (int n = 0; n < N; n++) {
        cllm_qformat_dequant_row(&vs, n, row);
        for (int k = 0; k < K; k++) es += pow(row[k] - W[(size_t)n * K + k], 2);
        cllm_qformat_dequant_row(&va, n, row);
        for (int k = 0; k < K; k++) ea += pow(row[k] - W[(size_t)n * K + k], 2);
    }
    CHECK_MSG(ea < 0.6 * es, "bits %d: asym err %g not below sym %g", bits, ea, es);
    for (size_t i = 0; i < (size_t)K / G * N / (32 / bits); i++)
        for (int j = 0; j < 32 / bits; j++)
            CHECK(((uint32_t)qa.qzeros[i] >> (j * bits) & (uint32_t)maxq) <= (uint32_t)maxq - 1);
    cllm_qbuf_free(&qs), cllm_qbuf_free(&qa);
    free(W), free(row);
}

/* GPTQ must beat RTN on the output error ||W X - Wq X|| for correlated inputs (its objective),
 * and produce valid codes (dequant within the group's range). */
static void gptq_case(int bits, int G, int K, int N, int T, bool asym) {
    float *W = malloc((size_t)N * K * 4), *W2 = malloc((size_t)N * K * 4),
          *X = malloc((size_t)T * K * 4);
    float *H = calloc((size_t)K * K, 4), *row = malloc((size_t)K * 4);
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = frand() * 0.1f;
    for (int t = 0; t < T; t++) { /* low-rank-ish correlated activations */
        float a = frand(), b = frand();
        for (int k = 0; k < K; k++)
            X[(size_t)t * K + k] = a * sinf(0.1f * k) + b * cosf(0.37f * k) + 0.1f * frand();
    }
    for (int t = 0; t < T; t++)
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++)
                H[(size_t)i * K + j] += X[(size_t)t * K + i] * X[(size_t)t * K + j];
    cllm_qbuf qr, qg;
    cllm_error err;
    CHECK(cllm_qbuf_alloc(&qr, bits, G, K, N, "r", &err) == CLLM_OK);
    CHECK(cllm_qbuf_alloc(&qg, bits, G, K, N, "g", &err) == CLLM_OK);
    qr.asym = qg.asym = asym;
    cllm_quant_rtn_rows(W, (size_t)K, 0, N, &qr);
    memcpy(W2, W, (size_t)N * K * 4);
    CHECK(cllm_gptq_quantize(W2, H, 0.01, &qg, &err) == CLLM_OK);
    double er = 0, eg = 0;
    cllm_qweight vr = cllm_qbuf_view(&qr), vg = cllm_qbuf_view(&qg);
    for (int n = 0; n < N; n++) {
        float *wr = malloc((size_t)K * 4);
        cllm_qformat_dequant_row(&vr, n, wr);
        cllm_qformat_dequant_row(&vg, n, row);
        for (int t = 0; t < T; t++) {
            double y = 0, yr = 0, yg = 0;
            for (int k = 0; k < K; k++) {
                double x = X[(size_t)t * K + k];
                y += W[(size_t)n * K + k] * x, yr += wr[k] * x, yg += row[k] * x;
            }
            er += (y - yr) * (y - yr), eg += (y - yg) * (y - yg);
        }
        free(wr);
    }
    CHECK_MSG(eg < 0.8 * er, "gptq output error %g not below rtn %g", eg, er);
    fprintf(stderr, "gptq bits %d%s: output error %.3g vs rtn %.3g\n", bits, asym ? " asym" : "",
            eg, er);
    cllm_qbuf_free(&qr), cllm_qbuf_free(&qg);
    free(W), free(W2), free(X), free(H), free(row);
}

int main(void) {
    gptq_case(4, 32, 128, 48, 256, false);
    gptq_case(8, 64, 128, 16, 256, false);
    gptq_case(4, 32, 128, 48, 256, true);
    /* N: every mix of 64/32/16/8-column tiles (120 = 64 + 32 + 16 + 8, 200 = 3*64 + 8) */
    int shapes[][3] = {{32, 96, 24}, {32, 32, 8},   {64, 192, 40}, {128, 256, 56},
                       {8, 40, 16},  {32, 64, 120}, {16, 48, 200}, {64, 128, 88}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (int T = 1; T <= 7; T++) { /* every tile height of every tier */
            one_case(4, shapes[s][0], shapes[s][1], shapes[s][2], T, 16);
            one_case(8, shapes[s][0], shapes[s][1], shapes[s][2], T, 16);
        }
    for (int T = 8; T <= 17; T += 3) /* more than one full tile of tokens (AVX-512: 8) */
        for (int f = 0; f < 8; f += 3) {
            one_case_f(4, 32, 64, 120, T, 16, f);
            one_case_f(8, 16, 48, 200, T, 16, f);
        }
    /* prefill GEMM tiles (AVX2 from 4 tokens): several input chunks, a group that does not
     * divide the chunk, more than one block of tokens, ragged column slices */
    one_case_f(4, 128, 1024, 88, 70, 16, 0);
    one_case_f(4, 96, 576, 40, 13, 16, F_ASYM);
    one_case_f(8, 64, 640, 24, 9, 16, F_BF16 | F_RANDZ);
    /* groups over KERN_Q_GEMM_MAXG: AVX2 runs its register tiles for any token count (blocks of
     * 3, then 1 token with 4-vector tiles), AVX-512 its masked 8-column tail */
    one_case_f(4, 512, 1024, 40, 7, 16, F_RANDZ);
    one_case_f(8, 512, 1024, 24, 5, 16, F_ASYM | F_BF16);
    /* one token (AVX2 decode sweep): several 512-column blocks and a ragged last block */
    one_case_f(4, 128, 256, 1096, 1, 16, F_RANDZ);
    one_case_f(8, 32, 128, 1064, 1, 16, F_ASYM | F_BF16);
    for (int f = 1; f < 8; f++) { /* asym / bf16 scales / random zeros, all combinations */
        one_case_f(4, 32, 96, 24, 5, 16, f);
        one_case_f(8, 64, 192, 40, 3, 16, f);
        one_case_f(4, 8, 40, 16, 1, 16, f);
        one_case_f(4, 32, 64, 120, 6, 16, f);
        one_case_f(8, 16, 48, 200, 7, 16, f);
    }
    asym_case(4);
    asym_case(8);
    one_case(4, 32, 96, 24, 5, 8);
    one_case(4, 32, 96, 24, 5, 4);
    one_case(4, 32, 64, 120, 7, 4);
    one_case(8, 16, 48, 200, 3, 8);
    one_case(8, 32, 96, 40, 6, 4);
    one_case(8, 64, 128, 88, 2, 8);
    /* bad shapes are refused with a message naming the tensor */
    cllm_qbuf q;
    cllm_error err;
    CHECK(cllm_qbuf_alloc(&q, 4, 128, 64, 16, "model.x.weight", &err) == CLLM_EINVAL);
    CHECK(strstr(err.msg, "model.x.weight") && strstr(err.msg, "does not divide"));
    CHECK(cllm_qbuf_alloc(&q, 3, 32, 64, 16, "w", &err) == CLLM_EINVAL);
    CHECK(cllm_qbuf_alloc(&q, 4, 32, 64, 12, "w", &err) == CLLM_EINVAL);
    CHECK(cllm_qformat_bytes(4, 128, 2048, 512) ==
          2048u / 8 * 512 * 4 + 16u * 64 * 4 + 16u * 512 * 2 + 2048u * 4);
    const cllm_kern_ops *more[CLLM_KERN_TIERS_MAX];
    int nmore = cllm_kern_tiers(more, CLLM_KERN_TIERS_MAX);
    fprintf(stderr, "quant kernels: ref");
    for (int i = 0; i < nmore; i++) fprintf(stderr, " + %s", more[i]->name);
    fprintf(stderr, " tiers checked\n");
    return test_report("test_quant_kern");
}
