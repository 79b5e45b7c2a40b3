/* Cross-ISA determinism probe for tests/kernels/arm_kernels.sh (not a ctest of its own): runs fixed
 * pseudo-random cases through one tier's kernels and prints one hash of the output bits per
 * kernel. Built for x86 it uses the avx2 table, built for AArch64 the neon table; the script
 * runs both (the AArch64 one under qemu) and requires identical lines, i.e. the same bits on
 * both ISAs for the float matmuls, gdn_step (same per-element arithmetic by
 * construction) and
 * the GPTQ int kernels incl. the act_bits 16 path (both equal to ref). Usage: kern_xisa (prints "no
 * tier" when the CPU lacks the tier). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "kernels/kernels.h"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t urand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 32);
}
static float frand(void) {
    return (float)(urand() >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

static uint64_t hash(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

int main(void) {
#if defined(__x86_64__)
    const cllm_kern_ops *k = cllm_kern_avx2();
#elif defined(__aarch64__)
    const cllm_kern_ops *k = cllm_kern_neon();
#else
    const cllm_kern_ops *k = NULL;
#endif
    if (!k) {
        printf("no tier\n");
        return 0;
    }
    const cllm_kern_ops *tiers[2] = {cllm_kern_ref(), k};
    const char *tname[2] = {"ref", "simd"}; /* names differ by ISA; the bits must not */
    cllm_dtype dts[3] = {CLLM_DT_F32, CLLM_DT_F16, CLLM_DT_BF16};
    int shapes[][3] = {{1, 7, 1}, {5, 64, 3}, {17, 129, 4}, {33, 300, 7}, {3, 8, 9}};
    for (int ti = 0; ti < 2; ti++) {
        uint64_t hm[3] = {0xcbf29ce484222325ull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull};
        uint64_t hq = hm[0], h8 = hm[0], hg = hm[0], h16 = hm[0];
        rng = 0x2545F4914F6CDD1Dull;
        for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
            int rows = shapes[s][0], K = shapes[s][1], nt = shapes[s][2];
            float *Wf = malloc((size_t)rows * K * 4), *X = malloc((size_t)nt * K * 4);
            uint16_t *Wh = malloc((size_t)rows * K * 2), *Wb = malloc((size_t)rows * K * 2);
            float *Y = calloc((size_t)nt * rows, 4);
            for (size_t i = 0; i < (size_t)rows * K; i++) {
                Wf[i] = frand();
                Wh[i] = cllm_f32_to_f16(Wf[i]);
                Wb[i] = cllm_f32_to_bf16(Wf[i]);
            }
            for (size_t i = 0; i < (size_t)nt * K; i++) X[i] = frand();
            const void *Ws[3] = {Wf, Wh, Wb};
            for (int d = 0; d < 3; d++) {
                cllm_kern_matmul(tiers[ti], dts[d])(Ws[d], (size_t)K, rows, X, (size_t)K, nt, K, Y,
                                                    (size_t)rows);
                hm[d] = hash(hm[d], Y, (size_t)nt * rows * 4);
            }
            free(Wf), free(X), free(Wh), free(Wb), free(Y);
        }
        /* gdn_step: dk 20, dv 44 (a 32-column block, an 8-column one, a 4-column scalar tail) */
        {
            int dk = 20, dv = 44;
            float *S = malloc((size_t)dk * dv * 4), *q = malloc(dk * 4), *kk = malloc(dk * 4);
            float *v = malloc(dv * 4), *o = malloc(dv * 4), *tmp = malloc(dv * 4);
            for (int i = 0; i < dk * dv; i++) S[i] = frand();
            for (int step = 0; step < 3; step++) {
                for (int i = 0; i < dk; i++) q[i] = 0.3f * frand(), kk[i] = 0.3f * frand();
                for (int i = 0; i < dv; i++) v[i] = frand();
                float dec = 0.9f, beta = 0.6f;
                tiers[ti]->gdn_step(S, q, kk, v, &dec, &beta, 0, o, 0, 1, tmp, dk, dv);
                hg = hash(hg, o, (size_t)dv * 4);
            }
            /* then 4 tokens in one call, rows [q k v decay beta] of stride 2 dk + dv + 2 */
            size_t ld = 2 * (size_t)dk + dv + 2;
            float *P = malloc(4 * ld * 4), *o4 = malloc(4 * (size_t)dv * 4);
            for (size_t i = 0; i < 4 * ld; i++) P[i] = 0.3f * frand();
            for (int t = 0; t < 4; t++) P[t * ld + 2 * dk + dv] = 0.85f + 0.1f * frand();
            tiers[ti]->gdn_step(S, P, P + dk, P + 2 * dk, P + 2 * dk + dv, P + 2 * dk + dv + 1, ld,
                                o4, (size_t)dv, 4, tmp, dk, dv);
            hg = hash(hg, o4, 4 * (size_t)dv * 4);
            hg = hash(hg, S, (size_t)dk * dv * 4);
            free(S), free(q), free(kk), free(v), free(o), free(tmp), free(P), free(o4);
        }
        /* GPTQ int4, random codes / zeros / f16 scales, group 32, K 96, N 24, 5 tokens */
        int G = 32, K = 96, N = 24, T = 5;
        int32_t *qw = malloc((size_t)K / 8 * N * 4), *qz = malloc((size_t)K / G * N / 8 * 4);
        uint16_t *sc = malloc((size_t)K / G * N * 2);
        float *X = malloc((size_t)T * K * 4), *Y = calloc((size_t)T * N, 4);
        for (int i = 0; i < K / 8 * N; i++) qw[i] = (int32_t)urand();
        for (int i = 0; i < K / G * N / 8; i++) qz[i] = (int32_t)urand();
        for (int i = 0; i < K / G * N; i++) sc[i] = cllm_f32_to_f16(0.01f + 0.02f * frand());
        for (int i = 0; i < T * K; i++) X[i] = frand() * (i % 13 == 0 ? 30.0f : 1.0f);
        cllm_qweight w = {qw, qz, sc, 4, G, K, N, 16, 0};
        tiers[ti]->matmul_q(&w, 0, N, X, (size_t)K, T, Y, (size_t)N);
        hq = hash(hq, Y, (size_t)T * N * 4);
        w.act_bits = 8;
        char *A = malloc(cllm_qact_bytes(K, G, T));
        tiers[ti]->qact_prep(X, (size_t)K, T, K, G, 8, A);
        tiers[ti]->matmul_q4_qact(&w, 0, N, A, T, Y, (size_t)N);
        free(A);
        h8 = hash(h8, Y, (size_t)T * N * 4);
        /* act_bits 16 integer path: these int4 weights, then int8 ones (random codes / zeros,
         * same scales), 1, 5 and 11 tokens (the one-token, few-token and multi-token walks) */
        int32_t *qw8 = malloc((size_t)K / 4 * N * 4), *qz8 = malloc((size_t)K / G * N / 4 * 4);
        for (int i = 0; i < K / 4 * N; i++) qw8[i] = (int32_t)urand();
        for (int i = 0; i < K / G * N / 4; i++) qz8[i] = (int32_t)urand();
        const int T16 = 11;
        float *X16 = malloc((size_t)T16 * K * 4), *Y16 = calloc((size_t)T16 * N, 4);
        for (int i = 0; i < T16 * K; i++) X16[i] = frand() * (i % 7 == 0 ? 50.0f : 1.0f);
        for (int bits = 4; bits <= 8; bits += 4) {
            cllm_qweight wq = {
                bits == 4 ? qw : qw8, bits == 4 ? qz : qz8, sc, bits, G, K, N, 16, 0};
            int ag = cllm_qact16_group(bits, G);
            char *A16 = malloc(cllm_qact16_bytes(K, ag, T16));
            tiers[ti]->qact16_prep(X16, (size_t)K, T16, K, ag, bits, A16);
            for (int nt = 1; nt <= T16; nt += nt == 1 ? 4 : 6) {
                tiers[ti]->matmul_q_qact16(&wq, 0, N, A16, nt, Y16, (size_t)N);
                h16 = hash(h16, Y16, (size_t)nt * N * 4);
            }
            free(A16);
        }
        free(qw8), free(qz8), free(X16), free(Y16);
        free(qw), free(qz), free(sc), free(X), free(Y);
        printf("%s gdn_step %016llx\n", tname[ti], (unsigned long long)hg);
        printf("%s matmul_f32 %016llx\n%s matmul_f16 %016llx\n%s matmul_bf16 %016llx\n", tname[ti],
               (unsigned long long)hm[0], tname[ti], (unsigned long long)hm[1], tname[ti],
               (unsigned long long)hm[2]);
        printf("%s matmul_q %016llx\n%s qact8 %016llx\n", tname[ti], (unsigned long long)hq,
               tname[ti], (unsigned long long)h8);
        printf("%s qact16 %016llx\n", tname[ti], (unsigned long long)h16);
    }
    return 0;
}
