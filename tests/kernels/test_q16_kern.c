/* act_bits 16 integer kernels (cllm_kern_ops qact16_prep + matmul_q_qact16): int16 activation
 * codes x GPTQ int4/int8 codes with exact int32 group sums. The scalar ref against an independent
 * double computation (codes within half a step of x, sums, outputs vs the dequantized weights x
 * the code values, and vs the float activations within the quantization error); every available
 * tier (avx2, avx512, neon) vs ref bitwise for bits 4 and 8, groups 32/64/128/K (K above the
 * int32 limit: split activation groups, for int8 and int4 at one and at many tokens), n_tok 1..17
 * and the GEMM's chunk/token-block edges, column ranges not multiples of any tile, zero / huge /
 * tiny / NaN activations, the int32 extremes (codes at +-32767 against q - z = -256..254); a
 * token alone == inside any batch and tokens prepared one at a time == all at once. */
#include <math.h>
#include <string.h>

#include "base/half.h"
#include "kernels/kern_int.h"
#include "kernels/kernels.h"
#include "model/qformat.h"
#include "quant/quant.h"
#include "test.h"

static uint64_t rs = 0x243F6A8885A308D3ull;
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
/* activation patterns */
enum { X_RAND, X_ZERO_TOK, X_ZERO_GROUP, X_HUGE, X_TINY, X_OUTLIER, X_NAN };

static const cllm_kern_ops *tiers[CLLM_KERN_TIERS_MAX]; /* all but ref (cllm_kern_tiers) */
static int n_shared_zero; /* cases run again with cllm_qweight.zero_const set */
static int n_tiers;

static void run(const cllm_kern_ops *k, const cllm_qweight *w, int n0, int n1, const float *X,
                size_t ldx, int T, float *Y, size_t ldy, int single) {
    int ag = cllm_qact16_group(w->bits, w->group);
    size_t per = cllm_qact16_bytes(w->K, ag, 1);
    char *A = malloc(per * (size_t)T + 8);
    if (single)
        for (int t = 0; t < T; t++)
            k->qact16_prep(X + (size_t)t * ldx, ldx, 1, w->K, ag, w->bits, A + per * t);
    else
        k->qact16_prep(X, ldx, T, w->K, ag, w->bits, A);
    k->matmul_q_qact16(w, n0, n1, A, T, Y, ldy);
    free(A);
}

static void fill_x(float *x, int K, int ag, int pat) {
    for (int k = 0; k < K; k++) x[k] = frand();
    switch (pat) {
    case X_ZERO_TOK:
        memset(x, 0, (size_t)K * 4);
        break;
    case X_ZERO_GROUP:
        memset(x + (K / ag / 2) * ag, 0, (size_t)ag * 4);
        break;
    case X_HUGE:
        for (int k = 0; k < K; k++) x[k] *= 3e37f;
        break;
    case X_TINY: /* subnormal range: the scale itself is subnormal or 0 */
        for (int k = 0; k < K; k++) x[k] *= (k / ag) % 2 ? 1e-39f : 1e-44f;
        break;
    case X_OUTLIER:
        x[K / 3] = 900.0f;
        x[K - 1] = -1e-7f;
        break;
    case X_NAN: /* lanes 0 and 5 of an 8-input block: both halves of a 2 x 4-lane prep */
        x[K / 2] = NAN;
        x[K / 2 + 5] = -NAN;
        x[1] = INFINITY;
        break;
    default:
        break;
    }
}

static void make_w(cllm_qbuf *q, int bits, int G, int K, int N, int flags) {
    float *W = malloc((size_t)N * K * 4);
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = frand() * 0.1f;
    cllm_error err;
    CHECK(cllm_qbuf_alloc(q, bits, G, K, N, "t", &err) == CLLM_OK);
    q->asym = flags & F_ASYM;
    q->scale_bf16 = flags & F_BF16;
    cllm_quant_rtn_rows(W, (size_t)K, 0, N, q);
    if (flags & F_RANDZ) { /* any code and stored zero, including 2^b - 1 (effective 2^b) */
        for (size_t i = 0; i < (size_t)K / G * N / (32 / bits); i++)
            q->qzeros[i] = (int32_t)urand();
        for (size_t i = 0; i < (size_t)K / (32 / bits) * N; i++) q->qweight[i] = (int32_t)urand();
    }
    free(W);
}

/* The effective zero every group of w shares (stored + 1), or 0: what the loader puts in
 * cllm_qweight.zero_const (model/qformat.c), computed here on its own. */
static int shared_zero(const cllm_qweight *w) {
    int per = 32 / w->bits;
    uint32_t m = (1u << w->bits) - 1, z = (uint32_t)w->qzeros[0] & m;
    for (size_t i = 0; i < (size_t)w->K / w->group * (w->N / per); i++)
        for (int j = 0; j < per; j++)
            if ((((uint32_t)w->qzeros[i] >> (j * w->bits)) & m) != z) return 0;
    return (int)z + 1;
}

/* Independent check of the ref on one case: codes, scales, sums from the ref prep; outputs vs
 * a double sum over the dequantized weights. */
static void ref_oracle(const cllm_qweight *w, const float *X, size_t ldx, int T, const float *Yr,
                       size_t ldy, int pat) {
    int K = w->K, N = w->N, AG = cllm_qact16_group(w->bits, w->group), NH = K / AG;
    size_t per = cllm_qact16_bytes(K, AG, 1);
    char *A = malloc(per * (size_t)T);
    cllm_kern_ref()->qact16_prep(X, ldx, T, K, AG, w->bits, A);
    float *wd = malloc((size_t)K * 4);
    double worst_q = 0, worst_x = 0;
    for (int t = 0; t < T; t++) {
        const float *x = X + (size_t)t * ldx;
        const char *p = A + per * t;
        const int16_t *qa = (const int16_t *)(const void *)p;
        const float *s = (const float *)(const void *)(p + 2 * (size_t)K);
        const int32_t *sum = (const int32_t *)(const void *)(p + 2 * (size_t)K + 4 * (size_t)NH);
        for (int h = 0; h < NH; h++) {
            double amax = 0;
            int64_t ss = 0;
            for (int k = h * AG; k < (h + 1) * AG; k++) {
                if (fabs(x[k]) > amax) amax = fabs(x[k]);
                ss += qa[k];
                CHECK(qa[k] >= -32767 && qa[k] <= 32767);
                if (pat != X_TINY && s[h] > 0) /* within half a step (+ the float division) */
                    CHECK_MSG(fabs(x[k] - (double)qa[k] * s[h]) <= s[h] * (0.5 + 1e-3),
                              "code %d of x %g, step %g", qa[k], x[k], s[h]);
            }
            CHECK(ss == sum[h]);
            CHECK(s[h] == (float)amax / 32767.0f);
            if (amax == 0)
                for (int k = h * AG; k < (h + 1) * AG; k++) CHECK(qa[k] == 0);
        }
        for (int n = 0; n < N; n++) {
            cllm_qformat_dequant_row(w, n, wd);
            double yq = 0, yx = 0, mag = 0, step = 0;
            for (int k = 0; k < K; k++) {
                double a = (double)qa[k] * s[k / AG];
                yq += (double)wd[k] * a, yx += (double)wd[k] * x[k], mag += fabs((double)wd[k] * a);
                step += fabs((double)wd[k]) * s[k / AG];
            }
            double y = Yr[(size_t)t * ldy + n];
            /* vs the float activations: the code rounding (half a step per input) on top */
            double eq = fabs(y - yq) / (mag + 1e-30);
            double ex = fabs(y - yx) / (0.5005 * step + 2e-6 * mag + 1e-30);
            if (pat == X_RAND) /* no outlier: the whole error is tiny next to the output */
                CHECK_MSG(fabs(y - yx) <= 4e-5 * mag + 1e-30, "rel err %g", fabs(y - yx) / mag);
            if (eq > worst_q) worst_q = eq;
            if (ex > worst_x) worst_x = ex;
        }
    }
    /* vs the codes: a few float roundings (d converted, ws * s, the fma chain); vs the float
     * activations: plus the code rounding, <= 1 / 65534 of |x| per input */
    CHECK_MSG(worst_q < 2e-6, "ref vs exact on the codes: rel err %g (bits %d G %d K %d)", worst_q,
              w->bits, w->group, K);
    CHECK_MSG(worst_x <= 1.0, "ref vs float activations: %g of the bound (bits %d G %d K %d)",
              worst_x, w->bits, w->group, K);
    free(A), free(wd);
}

static void stale(float *Y, int T, int N, size_t ldy) {
    for (size_t i = 0; i < (size_t)T * ldy; i++) Y[i] = i % ldy < (size_t)N ? 1e30f : 0.0f;
}

static void one_case(int bits, int G, int K, int N, int T, int flags, int pat) {
    size_t ldx = (size_t)K + 3, ldy = (size_t)N + 5;
    float *X = malloc(T * ldx * 4);
    float *Yr = calloc(T * ldy, 4), *Ya = calloc(T * ldy, 4), *Y1 = calloc(ldy, 4);
    int ag = cllm_qact16_group(bits, G);
    for (int t = 0; t < T; t++) fill_x(X + t * ldx, K, ag, t % 2 ? X_RAND : pat);
    cllm_qbuf q;
    make_w(&q, bits, G, K, N, flags);
    cllm_qweight w = cllm_qbuf_view(&q);
    w.act_bits = 16;
    const cllm_kern_ops *ref = cllm_kern_ref();
    stale(Yr, T, N, ldy);
    run(ref, &w, 0, N, X, ldx, T, Yr, ldy, 0);
    if (pat != X_NAN && pat != X_HUGE) ref_oracle(&w, X, ldx, T, Yr, ldy, pat);
    for (int i = 0; i < n_tiers; i++) {
        const cllm_kern_ops *kt = tiers[i];
        /* the scales and sums sections have one layout in every tier: the same bytes */
        size_t per = cllm_qact16_bytes(K, ag, 1);
        char *A1 = malloc(per), *A2 = malloc(per);
        ref->qact16_prep(X, ldx, 1, K, ag, bits, A1);
        kt->qact16_prep(X, ldx, 1, K, ag, bits, A2);
        CHECK_MSG(!memcmp(A1 + 2 * (size_t)K, A2 + 2 * (size_t)K, per - 2 * (size_t)K),
                  "%s prep scales/sums differ (bits %d G %d K %d pat %d)", kt->name, bits, G, K,
                  pat);
        free(A1), free(A2);
        stale(Ya, T, N, ldy);
        run(kt, &w, 0, N, X, ldx, T, Ya, ldy, i == 1);
        CHECK_MSG(!memcmp(Yr, Ya, T * ldy * 4),
                  "%s != ref bitwise (bits %d G %d K %d N %d T %d flags %d pat %d)", kt->name, bits,
                  G, K, N, T, flags, pat);
        for (int t = 0; t < T; t++) { /* token alone, columns [8, N) */
            memset(Y1, 0, ldy * 4);
            run(kt, &w, 8, N, X + t * ldx, ldx, 1, Y1, ldy, 0);
            CHECK_MSG(!memcmp(Y1 + 8, Ya + t * ldy + 8, (size_t)(N - 8) * 4),
                      "%s: token %d alone differs (bits %d G %d K %d N %d T %d)", kt->name, t, bits,
                      G, K, N, T);
            CHECK(Y1[0] == 0.0f);
        }
        cllm_qweight wz = w; /* one zero for all groups: the kernels may skip qzeros */
        if ((wz.zero_const = shared_zero(&w)) > 0) {
            n_shared_zero++;
            stale(Ya, T, N, ldy);
            run(kt, &wz, 0, N, X, ldx, T, Ya, ldy, 0);
            CHECK_MSG(!memcmp(Yr, Ya, T * ldy * 4),
                      "%s with zero_const %d != ref bitwise (bits %d G %d K %d N %d T %d)",
                      kt->name, wz.zero_const, bits, G, K, N, T);
        }
        memset(Ya, 0, T * ldy * 4); /* columns [8, N - 8) of the batch: ragged both ends */
        if (N > 16) {
            run(kt, &w, 8, N - 8, X, ldx, T, Ya, ldy, 0);
            for (int t = 0; t < T; t++) {
                CHECK(!memcmp(Ya + t * ldy + 8, Yr + t * ldy + 8, (size_t)(N - 16) * 4));
                CHECK(Ya[t * ldy + 7] == 0.0f && Ya[t * ldy + N - 8] == 0.0f);
            }
        }
    }
    cllm_qbuf_free(&q);
    free(X), free(Yr), free(Ya), free(Y1);
}

/* The int32 extremes: every code at one end (q = 0 with effective zero 2^b, or q = 2^b - 1 with
 * zero 1) against activations all at +-32767 codes: |d| at its bound, exact in every tier. */
static void extreme_case(int bits, int G, int K, int lo) {
    int N = 16, AG = cllm_qact16_group(bits, G);
    cllm_qbuf q;
    make_w(&q, bits, G, K, N, 0);
    uint32_t all = lo ? 0xffffffffu : 0u, codes = lo ? 0u : 0xffffffffu;
    for (size_t i = 0; i < (size_t)K / G * N / (32 / bits); i++) q.qzeros[i] = (int32_t)all;
    for (size_t i = 0; i < (size_t)K / (32 / bits) * N; i++) q.qweight[i] = (int32_t)codes;
    cllm_qweight w = cllm_qbuf_view(&q);
    float *X = malloc((size_t)K * 4), *Yr = calloc(N, 4), *Ya = calloc(N, 4);
    for (int k = 0; k < K; k++) X[k] = -1.5f;
    run(cllm_kern_ref(), &w, 0, N, X, (size_t)K, 1, Yr, (size_t)N, 0);
    int64_t qz = lo ? -(1 << bits) : (1 << bits) - 2; /* q - z */
    int64_t d = qz * -32767 * AG;
    CHECK(llabs(d) < 2147483648ll);
    float sa = 1.5f / 32767.0f;
    for (int n = 0; n < N; n++) {
        float acc = 0.0f;
        for (int h = 0; h < K / AG; h++)
            acc = fmaf(cllm_qweight_scale(&w, h * AG / G, n) * sa, (float)d, acc);
        CHECK_MSG(Yr[n] == acc, "bits %d G %d: extreme %g != %g", bits, G, Yr[n], acc);
    }
    for (int i = 0; i < n_tiers; i++) {
        run(tiers[i], &w, 0, N, X, (size_t)K, 1, Ya, (size_t)N, 0);
        CHECK_MSG(!memcmp(Ya, Yr, (size_t)N * 4), "%s: extreme case bits %d G %d", tiers[i]->name,
                  bits, G);
        cllm_qweight wz = w; /* every zero alike: the qzeros-free group end, same bits */
        wz.zero_const = shared_zero(&w);
        CHECK(wz.zero_const == (lo ? 1 << bits : 1));
        memset(Ya, 0, (size_t)N * 4);
        run(tiers[i], &wz, 0, N, X, (size_t)K, 1, Ya, (size_t)N, 0);
        CHECK_MSG(!memcmp(Ya, Yr, (size_t)N * 4), "%s: extreme case, zero_const, bits %d G %d",
                  tiers[i]->name, bits, G);
    }
    cllm_qbuf_free(&q);
    free(X), free(Yr), free(Ya);
}

int main(void) {
    n_tiers = cllm_kern_tiers(tiers, CLLM_KERN_TIERS_MAX);
    CHECK(cllm_qact16_group(4, 128) == 128 && cllm_qact16_group(4, 8192) == 4096);
    CHECK(cllm_qact16_group(8, 256) == 256 && cllm_qact16_group(8, 2048) == 256);
    CHECK(cllm_qact16_group(8, 1536) == 256 && cllm_qact16_group(8, 1000) == 200);
    CHECK(cllm_qact16_group(8, 8 * 37) == 8);
    /* groups 32/64/128/K, N mixing every column tile (8, 16, 32, several 512 blocks) */
    int shapes[][3] = {{32, 96, 24},  {64, 192, 40},  {128, 256, 56},  {8, 40, 16},
                       {32, 64, 120}, {128, 128, 88}, {192, 192, 200}, {512, 512, 32}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (int T = 1; T <= 9; T++)
            for (int bits = 4; bits <= 8; bits += 4)
                one_case(bits, shapes[s][0], shapes[s][1], shapes[s][2], T, (int)(T + s) % 8,
                         X_RAND);
    /* one token over several 512-column blocks with ragged tails (the decode sweep) */
    one_case(4, 128, 256, 1096, 1, F_RANDZ, X_RAND);
    one_case(8, 64, 128, 1064, 1, F_ASYM | F_BF16, X_OUTLIER);
    one_case(8, 1024, 1024, 40, 2, F_RANDZ, X_RAND); /* G = K > 256: groups of 256 */
    one_case(4, 8192, 8192, 16, 1, F_RANDZ, X_RAND); /* G = K > 4096: groups of 4096 */
    /* a few tokens (the batched-decode sweep) over several 512-column blocks */
    one_case(4, 64, 128, 1096, 8, F_ASYM, X_RAND);
    one_case(8, 128, 256, 1064, 5, F_RANDZ, X_OUTLIER);
    one_case(8, 512, 512, 536, 3, F_BF16, X_RAND);
    /* 10..17 tokens: one full 8-token register tile plus every remainder tile width, int4 and
     * int8, K not a multiple of 256, ragged N over more than one 64-column chunk */
    for (int T = 10; T <= 17; T++) {
        one_case(4, 32, 160, 72, T, T % 2 ? F_ASYM : F_BF16, T % 3 ? X_RAND : X_OUTLIER);
        one_case(8, 64, 192, 136, T, T % 2 ? F_RANDZ : F_ASYM | F_BF16, X_RAND);
    }
    /* many tokens with weight groups split into activation groups (int8 G 512 -> 256, int4
     * G 8192 -> 4096) */
    one_case(8, 512, 512, 24, 11, F_RANDZ, X_RAND);
    one_case(4, 8192, 8192, 8, 9, F_RANDZ | F_ASYM, X_OUTLIER);
    /* many tokens: token blocks / chunks of the multi-token kernels, ragged tails */
    one_case(4, 128, 1024, 88, 70, 0, X_RAND);
    one_case(4, 96, 576, 40, 13, F_ASYM, X_OUTLIER);
    one_case(8, 64, 640, 24, 9, F_BF16 | F_RANDZ, X_RAND);
    one_case(8, 128, 512, 72, 67, F_RANDZ, X_ZERO_GROUP);
    for (int pat = X_ZERO_TOK; pat <= X_NAN; pat++)
        for (int bits = 4; bits <= 8; bits += 4) {
            one_case(bits, 32, 128, 40, 3, F_RANDZ, pat);
            one_case(bits, 64, 256, 24, 1, F_ASYM, pat);
            one_case(bits, 128, 512, 48, 7, F_BF16, pat);
        }
    for (int lo = 0; lo < 2; lo++) {
        extreme_case(8, 256, 512, lo);
        extreme_case(8, 1024, 1024, lo);
        extreme_case(4, 128, 256, lo);
        extreme_case(4, 8192, 8192, lo);
    }
    CHECK_MSG(n_shared_zero >= 50, "only %d cases had one zero for all groups", n_shared_zero);
    fprintf(stderr, "q16 kernels: ref");
    for (int i = 0; i < n_tiers; i++) fprintf(stderr, " + %s", tiers[i]->name);
    fprintf(stderr, " tiers checked (%d cases also with zero_const)\n", n_shared_zero);
    return test_report("test_q16_kern");
}
