/* ggml block-format matmul (cllm_kern_ops.matmul_kq) on random blocks of every type it runs:
 * its row decoder (cllm_kq_dequant_row, the one the GGUF loader's cllm_gguf_row_f32 routes these
 * types to, checked bitwise against numpy by tests/model/gguf_decode.sh) reached through both;
 * the scalar tier against a double dot product of those weights with the int16-coded
 * activations (the only rounding left is float accumulation); every available tier bitwise
 * equal to ref; a token alone == inside a batch; odd row ranges. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "kernels/kern_int.h"
#include "kernels/kernels.h"
#include "model/gguf.h"
#include "model/gguf_quant.h"
#include "test.h"

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static uint32_t urand(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rs >> 32);
}
static float frand(void) {
    return (float)(urand() >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

static const struct {
    int kq, ggml;
    const char *name;
} types[] = {{CLLM_KQ_Q4_1, CLLM_GGML_Q4_1, "Q4_1"}, {CLLM_KQ_Q5_1, CLLM_GGML_Q5_1, "Q5_1"},
             {CLLM_KQ_Q4_K, CLLM_GGML_Q4_K, "Q4_K"}, {CLLM_KQ_Q5_K, CLLM_GGML_Q5_K, "Q5_K"},
             {CLLM_KQ_Q6_K, CLLM_GGML_Q6_K, "Q6_K"}, {CLLM_KQ_IQ4_XS, CLLM_GGML_IQ4_XS, "IQ4_XS"}};

static void put_f16(uint8_t *p, float v) {
    uint16_t h = cllm_f32_to_f16(v);
    memcpy(p, &h, 2);
}

/* Random block bytes with sane fp16 scales (random bytes there could be NaN or huge). */
static void fill_blocks(int ggml, uint8_t *b, size_t n_blocks, int bytes) {
    for (size_t i = 0; i < n_blocks * (size_t)bytes; i++) b[i] = (uint8_t)urand();
    for (size_t i = 0; i < n_blocks; i++, b += bytes) {
        float d = 0.001f + 0.01f * (float)(urand() % 1000) / 1000.0f;
        switch (ggml) {
        case CLLM_GGML_Q4_1:
        case CLLM_GGML_Q5_1:
            put_f16(b, d), put_f16(b + 2, -8.0f * d * frand());
            break;
        case CLLM_GGML_Q4_K:
        case CLLM_GGML_Q5_K:
            put_f16(b, d / 8), put_f16(b + 2, d / 16);
            break;
        case CLLM_GGML_Q6_K:
            put_f16(b + 208, d / 64);
            break;
        case CLLM_GGML_IQ4_XS:
            put_f16(b, d / 64);
            break;
        default:
            break;
        }
    }
}

int main(void) {
    const cllm_kern_ops *ref = cllm_kern_ref();
    const cllm_kern_ops *tiers[CLLM_KERN_TIERS_MAX];
    const int nt = cllm_kern_tiers(tiers, CLLM_KERN_TIERS_MAX);
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) {
        int bytes, blk = cllm_ggml_block(types[ti].ggml, &bytes);
        const int Ks[] = {blk, 2 * blk, blk == 32 ? 96 : 768};
        for (size_t ki = 0; ki < 3; ki++) {
            const int K = Ks[ki], N = 37, T = 9;
            const size_t rb = (size_t)(K / blk) * (size_t)bytes;
            uint8_t *W = malloc(rb * N);
            fill_blocks(types[ti].ggml, W, (size_t)N * (size_t)(K / blk), bytes);
            cllm_kqweight w = {W, rb, types[ti].kq, K, N};
            float *X = malloc(sizeof(float) * (size_t)T * K), *row = malloc(sizeof(float) * K),
                  *row2 = malloc(sizeof(float) * K);
            for (int i = 0; i < T * K; i++) X[i] = frand() * (i % 7 == 0 ? 30.0f : 1.0f);
            memset(X + K, 0, sizeof(float) * K); /* token 1: all zero (scale 0) */
            float *Yr = calloc((size_t)T * N, 4), *Ya = calloc((size_t)T * N, 4);
            ref->matmul_kq(&w, 0, N, X, (size_t)K, NULL, T, Yr, (size_t)N, false);
            /* the loader's entry gives the kernel decoder's bits; the ref output is the double
             * dot of those weights and codes */
            int16_t *a = malloc(2 * (size_t)K);
            float s[64];
            int32_t sum[64];
            for (int n = 0; n < N; n++) {
                cllm_kq_dequant_row(&w, n, row);
                CHECK(cllm_gguf_row_f32(types[ti].ggml, W + (size_t)n * rb, row2, K));
                CHECK_MSG(!memcmp(row, row2, sizeof(float) * (size_t)K),
                          "%s K %d row %d: cllm_gguf_row_f32 != cllm_kq_dequant_row",
                          types[ti].name, K, n);
                for (int t = 0; t < T; t++) {
                    kern_quant_act16(X + (size_t)t * K, K, 32, a, s, sum);
                    double y = 0, mag = 0;
                    for (int k = 0; k < K; k++) {
                        y += (double)row2[k] * (double)a[k] * (double)s[k / 32];
                        mag += fabs((double)row2[k] * (double)a[k] * (double)s[k / 32]);
                    }
                    double got = Yr[(size_t)t * N + n];
                    CHECK_MSG(fabs(got - y) <= 1e-5 * mag + 1e-30,
                              "%s K %d row %d tok %d: ref %.9g, double %.9g (sum |terms| %g)",
                              types[ti].name, K, n, t, got, y, mag);
                }
            }
            for (int t = 0; t < N; t++) CHECK(Yr[(size_t)1 * N + t] == 0.0f);
            /* tiers bitwise; odd ranges; activations prepared once by the caller (A) == by the
             * kernel; one token alone == in the batch */
            void *A = malloc(cllm_kq_act_bytes(K, T));
            cllm_kq_prep(K, X, (size_t)K, T, A);
            for (int i = 0; i < nt; i++) {
                memset(Ya, 0, sizeof(float) * (size_t)T * N);
                tiers[i]->matmul_kq(&w, 0, 5, X, (size_t)K, NULL, T, Ya, (size_t)N, false);
                tiers[i]->matmul_kq(&w, 5, N, NULL, 0, A, T, Ya, (size_t)N, false);
                CHECK_MSG(!memcmp(Ya, Yr, sizeof(float) * (size_t)T * N), "%s: %s K %d differs",
                          tiers[i]->name, types[ti].name, K);
                float y1[37];
                tiers[i]->matmul_kq(&w, 0, N, X + 3 * (size_t)K, (size_t)K, NULL, 1, y1, (size_t)N,
                                    false);
                CHECK(!memcmp(y1, Yr + 3 * (size_t)N, sizeof(y1)));
            }
            /* the panel form (Q4_K / Q5_K / Q6_K / IQ4_XS): rows decode to the block rows' bits,
             * every tier (ref included) gives the block form's results, in ranges that cut
             * panels, alone and in a batch */
            const size_t pb = cllm_kq_panel_bytes(types[ti].kq, K, N);
            CHECK(!pb == (types[ti].kq == CLLM_KQ_Q4_1 || types[ti].kq == CLLM_KQ_Q5_1));
            if (pb) {
                const size_t p1 = cllm_kq_panel_bytes(types[ti].kq, K, 16);
                uint8_t *Pw = malloc(pb);
                for (int p = 0; p * 16 < N; p++) {
                    const uint8_t *rows[16];
                    int nr = N - 16 * p < 16 ? N - 16 * p : 16;
                    for (int r = 0; r < nr; r++) rows[r] = W + (size_t)(16 * p + r) * rb;
                    cllm_kq_panel_pack(types[ti].kq, K, rows, nr, NULL, Pw + (size_t)p * p1);
                }
                cllm_kqweight pw = {Pw, 0, types[ti].kq | CLLM_KQ_PANEL, K, N};
                for (int n = 0; n < N; n++) {
                    cllm_kq_dequant_row(&w, n, row);
                    cllm_kq_dequant_row(&pw, n, row2);
                    CHECK_MSG(!memcmp(row, row2, sizeof(float) * (size_t)K),
                              "%s K %d row %d: panel row != block row", types[ti].name, K, n);
                }
                const cllm_kern_ops *all[CLLM_KERN_TIERS_MAX + 1] = {ref};
                for (int i = 0; i < nt; i++) all[i + 1] = tiers[i];
                for (int i = 0; i <= nt; i++) {
                    for (int T1 = 1; T1 <= T;
                         T1++) { /* every token tile shape (AVX-512: up to 8) */
                        memset(Ya, 0, sizeof(float) * (size_t)T * N);
                        all[i]->matmul_kq(&pw, 0, 5, X, (size_t)K, NULL, T1, Ya, (size_t)N, false);
                        all[i]->matmul_kq(&pw, 5, 21, NULL, 0, A, T1, Ya, (size_t)N, false);
                        all[i]->matmul_kq(&pw, 21, N, NULL, 0, A, T1, Ya, (size_t)N, false);
                        CHECK_MSG(!memcmp(Ya, Yr, sizeof(float) * (size_t)T1 * N),
                                  "%s: panel %s K %d, %d tokens differs", all[i]->name,
                                  types[ti].name, K, T1);
                    }
                    float y1[37];
                    all[i]->matmul_kq(&pw, 0, N, X + 3 * (size_t)K, (size_t)K, NULL, 1, y1,
                                      (size_t)N, false);
                    CHECK(!memcmp(y1, Yr + 3 * (size_t)N, sizeof(y1)));
                }
                free(Pw);
                /* 128-column chunks moved (CLLM_KQ_D128, the loader's V-head order on columns):
                 * rows decode to the block rows' chunks in that order, tiers == ref */
                const int pt = types[ti].kq | CLLM_KQ_PANEL | CLLM_KQ_D128, NC = K / 128;
                int chunk[8];
                for (int i = 0; i < NC; i++) chunk[i] = (i * 5 + 1) % NC; /* 5 coprime to 2,4,6 */
                const size_t q1 = cllm_kq_panel_bytes(pt, K, 16);
                uint8_t *Qw = malloc(cllm_kq_panel_bytes(pt, K, N));
                for (int p = 0; p * 16 < N; p++) {
                    const uint8_t *rows[16];
                    int nr = N - 16 * p < 16 ? N - 16 * p : 16;
                    for (int r = 0; r < nr; r++) rows[r] = W + (size_t)(16 * p + r) * rb;
                    cllm_kq_panel_pack(pt, K, rows, nr, chunk, Qw + (size_t)p * q1);
                }
                cllm_kqweight qw = {Qw, 0, pt, K, N};
                for (int n = 0; n < N; n++) {
                    cllm_kq_dequant_row(&w, n, row);
                    cllm_kq_dequant_row(&qw, n, row2);
                    for (int i = 0; i < NC; i++)
                        CHECK_MSG(!memcmp(row + 128 * chunk[i], row2 + 128 * i, 512),
                                  "%s K %d row %d chunk %d: moved panel row differs",
                                  types[ti].name, K, n, i);
                }
                float *Yq = calloc((size_t)T * N, 4);
                ref->matmul_kq(&qw, 0, N, X, (size_t)K, NULL, T, Yq, (size_t)N, false);
                for (int i = 0; i < nt; i++) {
                    memset(Ya, 0, sizeof(float) * (size_t)T * N);
                    tiers[i]->matmul_kq(&qw, 0, 5, NULL, 0, A, T, Ya, (size_t)N, false);
                    tiers[i]->matmul_kq(&qw, 5, N, X, (size_t)K, NULL, T, Ya, (size_t)N, false);
                    CHECK_MSG(!memcmp(Ya, Yq, sizeof(float) * (size_t)T * N),
                              "%s: moved panel %s K %d differs", tiers[i]->name, types[ti].name, K);
                }
                free(Yq), free(Qw);
            }
            free(a), free(A), free(W), free(X), free(row), free(row2), free(Yr), free(Ya);
        }
    }
    fprintf(stderr, "matmul_kq: ref");
    for (int i = 0; i < nt; i++) fprintf(stderr, " + %s", tiers[i]->name);
    fprintf(stderr, " tiers checked\n");
    return test_report("test_kq_kern");
}
