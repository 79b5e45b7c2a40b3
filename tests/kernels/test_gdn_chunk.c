/* Chunked (WY) Gated DeltaNet kernel (kernels gdn_chunk, chunk 64) vs the token-by-token
 * recurrence (ref gdn_step), and the --gdn-prefill chunked forward option end to end.
 *
 * Kernel: random l2-normalised q (scaled dk^-0.5) / k, v in [-1,1], g in [-1.5, 0], beta in
 * (0,1), zero and random initial state, T in {1,63,64,65,128,200}, (dk,dv) in {16x16 (tiny),
 * 32x16, 20x12 (ragged: SIMD tails), 128x128}, strided q/k/v/o. Threshold, outputs and final
 * state alike: max |chunk - step| <= 1e-4 * max(1, max |step|) (observed ~1e-6 relative).
 * Also: T=128 in one call == two calls of 64 (bitwise), avx2 and neon tiers vs ref tier within
 * the same threshold.
 * End to end (needs CLLM_BIN): synth tiny f32, a 200-token prompt: `eval --dump-logits` with
 * --gdn-prefill chunked vs default, max |diff| <= 1e-4 * max(1, max |logit|); chunked with
 * --prefill-chunk 64 and 128 == chunked in one call (bitwise); --prefill-chunk 100 (chunks [0,64)
 * and [128,192) chunked, the rest by step) within the threshold. */
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "test.h"

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
}
static void l2n(float *x, int n, float scale) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss + 1e-6)) * scale;
    for (int i = 0; i < n; i++) x[i] *= r;
}
static double maxabs(const float *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

static double worst_o, worst_s;

static void one_case(const cllm_kern_ops *k, const char *tier, int dk, int dv, int T, int rand_s) {
    const cllm_kern_ops *ref = cllm_kern_ref();
    size_t ldp = 2 * (size_t)dk + dv + 3, ldo = dv + 5;
    float *P = malloc(T * ldp * sizeof(float)), *g = malloc(T * sizeof(float)),
          *be = malloc(T * sizeof(float));
    float *o = calloc(T * ldo, sizeof(float)), *orf = calloc(T * ldo, sizeof(float)),
          *o2 = calloc(T * ldo, sizeof(float));
    size_t ns = (size_t)dk * dv;
    float *S = malloc(ns * 4), *Sr = malloc(ns * 4), *S2 = malloc(ns * 4), *tmp = malloc(dv * 4);
    float *work = malloc(cllm_gdn_chunk_work(dk, dv) * sizeof(float));
    for (int t = 0; t < T; t++) {
        float *p = P + t * ldp;
        for (size_t i = 0; i < ldp; i++) p[i] = frand();
        l2n(p, dk, (float)(1.0 / sqrt(dk)));
        l2n(p + dk, dk, 1.0f);
        g[t] = (frand() + 1.0f) * -0.75f;
        if (t % 7 == 3) g[t] *= 0.01f; /* near-1 decays too */
        be[t] = (frand() + 1.0f) * 0.5f;
    }
    for (size_t i = 0; i < ns; i++) S[i] = rand_s ? frand() : 0.0f;
    memcpy(Sr, S, ns * 4);
    memcpy(S2, S, ns * 4);
    for (int t = 0; t < T; t++) {
        float *p = P + t * ldp;
        float dec = expf(g[t]);
        ref->gdn_step(Sr, p, p + dk, p + 2 * dk, &dec, &be[t], 0, orf + t * ldo, 0, 1, tmp, dk, dv);
    }
    k->gdn_chunk(S, P, P + dk, ldp, P + 2 * dk, ldp, g, be, o, ldo, T, dk, dv, work);
    double eo = 0, es = 0;
    for (int t = 0; t < T; t++)
        for (int n = 0; n < dv; n++) {
            double e = fabs((double)o[t * ldo + n] - orf[t * ldo + n]);
            eo = e > eo ? e : eo;
        }
    for (size_t i = 0; i < ns; i++) {
        double e = fabs((double)S[i] - Sr[i]);
        es = e > es ? e : es;
    }
    double so = 1, ss = 1;
    for (int t = 0; t < T; t++) {
        double m = maxabs(orf + t * ldo, dv);
        so = m > so ? m : so;
    }
    double m = maxabs(Sr, ns);
    ss = m > ss ? m : ss;
    eo /= so, es /= ss;
    worst_o = eo > worst_o ? eo : worst_o;
    worst_s = es > worst_s ? es : worst_s;
    CHECK_MSG(eo <= 1e-4 && es <= 1e-4, "%s dk=%d dv=%d T=%d randS=%d: rel err o %.3g S %.3g", tier,
              dk, dv, T, rand_s, eo, es);
    if (T > 64) { /* split at 64: bitwise the same as one call */
        k->gdn_chunk(S2, P, P + dk, ldp, P + 2 * dk, ldp, g, be, o2, ldo, 64, dk, dv, work);
        k->gdn_chunk(S2, P + 64 * ldp, P + 64 * ldp + dk, ldp, P + 64 * ldp + 2 * dk, ldp, g + 64,
                     be + 64, o2 + 64 * ldo, ldo, T - 64, dk, dv, work);
        int same = memcmp(S2, S, ns * 4) == 0;
        for (int t = 0; t < T; t++) same &= memcmp(o2 + t * ldo, o + t * ldo, dv * 4) == 0;
        CHECK_MSG(same, "%s dk=%d dv=%d T=%d: split at 64 not bitwise", tier, dk, dv, T);
    }
    free(P), free(g), free(be), free(o), free(orf), free(o2), free(S), free(Sr), free(S2),
        free(tmp), free(work);
}

static void test_kernel(const cllm_kern_ops *k, const char *tier) {
    int shapes[4][2] = {{16, 16}, {32, 16}, {20, 12}, {128, 128}};
    int Ts[6] = {1, 63, 64, 65, 128, 200};
    worst_o = worst_s = 0;
    for (int s = 0; s < 4; s++)
        for (int ti = 0; ti < 6; ti++)
            for (int r = 0; r < 2; r++) one_case(k, tier, shapes[s][0], shapes[s][1], Ts[ti], r);
    fprintf(stderr, "%s gdn_chunk vs ref step: worst rel err o %.3g, S %.3g (threshold 1e-4)\n",
            tier, worst_o, worst_s);
}

static float *readf(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *b = malloc(sz > 0 ? (size_t)sz : 1);
    *n = fread(b, 1, (size_t)sz, f) / sizeof(float);
    fclose(f);
    return b;
}

static int run(const char *cmd) {
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "command failed (%d): %s", rc, cmd);
    return rc;
}

static void test_e2e(void) {
    const char *bin = getenv("CLLM_BIN"), *src = getenv("CLLM_SRC");
    const char *tmp = test_tmp();
    if (!bin || !src) {
        fprintf(stderr, "SKIP e2e: CLLM_BIN / CLLM_SRC unset\n");
        return;
    }
    char d[512], cmd[4096], toks[2048];
    snprintf(d, sizeof d, "%s/gdn_chunk", tmp);
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && mkdir -p '%s' && '%s' synth --config '%s/configs/tiny.json' '%s/m' "
             "--seed 5 --dtype f32 -q",
             d, d, bin, src, d);
    if (run(cmd)) return;
    int len = 0;
    for (int i = 0; i < 200; i++)
        len += snprintf(toks + len, sizeof toks - (size_t)len, "%s%d", i ? "," : "",
                        (i * 53 + 11) % 500);
    const char *runs[5][3] = {{"", "", "rec"},
                              {"--gdn-prefill chunked", "", "ch"},
                              {"--gdn-prefill chunked", "--prefill-chunk 64", "ch64"},
                              {"--gdn-prefill chunked", "--prefill-chunk 128", "ch128"},
                              {"--gdn-prefill chunked", "--prefill-chunk 100", "ch100"}};
    for (int r = 0; r < 5; r++) {
        snprintf(cmd, sizeof cmd,
                 "'%s' eval '%s/m' --tokens %s %s %s --dump-logits '%s/%s.f32' 2>/dev/null", bin, d,
                 toks, runs[r][0], runs[r][1], d, runs[r][2]);
        if (run(cmd)) return;
    }
    size_t n[5];
    float *L[5];
    char p[600];
    for (int r = 0; r < 5; r++) {
        snprintf(p, sizeof p, "%s/%s.f32", d, runs[r][2]);
        L[r] = readf(p, &n[r]);
        CHECK_MSG(L[r] && n[r] == n[0] && n[0] > 0, "logits %s", p);
        if (!L[r]) return;
    }
    double sc = 1;
    sc = maxabs(L[0], n[0]) > sc ? maxabs(L[0], n[0]) : sc;
    for (int r = 1; r < 5; r++) {
        if (n[r] != n[0]) continue;
        double e = 0;
        for (size_t i = 0; i < n[0]; i++) {
            double x = fabs((double)L[r][i] - L[0][i]);
            e = x > e ? x : e;
        }
        fprintf(stderr, "e2e %s vs recurrent: max abs logit diff %.3g (scale %.3g, tol %.3g)\n",
                runs[r][2], e, sc, 1e-4 * sc);
        CHECK_MSG(e <= 1e-4 * sc, "%s vs recurrent: %g", runs[r][2], e);
        if (r == 1 || r == 4) CHECK_MSG(e > 0, "%s: chunked option had no effect", runs[r][2]);
        if (r == 2 || r == 3)
            CHECK_MSG(memcmp(L[r], L[1], n[0] * sizeof(float)) == 0,
                      "%s not bitwise equal to one chunked call", runs[r][2]);
    }
    for (int r = 0; r < 5; r++) free(L[r]);
}

int main(void) {
    test_kernel(cllm_kern_ref(), "ref");
    const cllm_kern_ops *tiers[CLLM_KERN_TIERS_MAX];
    int nt = cllm_kern_tiers(tiers, CLLM_KERN_TIERS_MAX);
    for (int i = 0; i < nt; i++) test_kernel(tiers[i], tiers[i]->name);
    test_e2e();
    return test_report("test_gdn_chunk");
}
