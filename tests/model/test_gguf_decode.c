/* cllm_gguf_row_f32 (src/model/gguf_quant.c) bitwise against tools/ref/gguf_np.py dequantize.
 *
 * Run alone (ctest): hand-computed blocks of Q8_0, Q4_0, Q4_1, Q5_0, IQ4_NL and Q6_K with known
 * values, and the types without a decoder (Q2_K, Q3_K) answer false.
 * Driven by tests/model/gguf_decode.sh: CLLM_GGUF_DECODE=FILE.gguf and CLLM_GGUF_EXPECT=FILE.f32
 * (python's dequantize of every tensor, float32, in the file's tensor order): every row of every
 * tensor is decoded here and compared bit for bit (a NaN only has to be a NaN on both sides);
 * per tensor the number of differing values is printed, the first one with both bit patterns. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "model/gguf.h"
#include "model/gguf_quant.h"
#include "test.h"

static void put16(uint8_t *p, float v) {
    uint16_t h = cllm_f32_to_f16(v);
    memcpy(p, &h, 2);
}

static void hand_blocks(void) {
    uint8_t b[256];
    float y[256];
    /* Q8_0: d = 0.5, codes j - 16 */
    put16(b, 0.5f);
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)(j - 16);
    CHECK(cllm_gguf_row_f32(CLLM_GGML_Q8_0, b, y, 32));
    for (int j = 0; j < 32; j++) CHECK_MSG(y[j] == 0.5f * (float)(j - 16), "q8_0 %d: %g", j, y[j]);
    /* Q4_0: d = 2, byte i = low nibble i & 15, high nibble 15 - (i & 15); value (q - 8) * d */
    put16(b, 2.0f);
    for (int i = 0; i < 16; i++) b[2 + i] = (uint8_t)(i | (15 - i) << 4);
    CHECK(cllm_gguf_row_f32(CLLM_GGML_Q4_0, b, y, 32));
    for (int i = 0; i < 16; i++) {
        CHECK_MSG(y[i] == 2.0f * (float)(i - 8), "q4_0 lo %d: %g", i, y[i]);
        CHECK_MSG(y[i + 16] == 2.0f * (float)(7 - i), "q4_0 hi %d: %g", i, y[i + 16]);
    }
    /* Q4_1: d = 0.25, m = -1: q * d + m, same nibbles */
    put16(b, 0.25f);
    put16(b + 2, -1.0f);
    for (int i = 0; i < 16; i++) b[4 + i] = (uint8_t)(i | (15 - i) << 4);
    CHECK(cllm_gguf_row_f32(CLLM_GGML_Q4_1, b, y, 32));
    for (int i = 0; i < 16; i++) {
        CHECK_MSG(y[i] == 0.25f * (float)i - 1.0f, "q4_1 lo %d: %g", i, y[i]);
        CHECK_MSG(y[i + 16] == 0.25f * (float)(15 - i) - 1.0f, "q4_1 hi %d: %g", i, y[i + 16]);
    }
    /* Q5_0: d = 1, qh bit j set for odd j: value (q | 16 * bit) - 16 */
    put16(b, 1.0f);
    uint32_t qh = 0xAAAAAAAAu;
    memcpy(b + 2, &qh, 4);
    for (int i = 0; i < 16; i++) b[6 + i] = (uint8_t)(i | i << 4);
    CHECK(cllm_gguf_row_f32(CLLM_GGML_Q5_0, b, y, 32));
    for (int j = 0; j < 32; j++) {
        int q = (j & 15) | (j & 1) << 4;
        CHECK_MSG(y[j] == (float)(q - 16), "q5_0 %d: %g", j, y[j]);
    }
    /* IQ4_NL: d = 1, nibble i -> codebook entry i */
    static const int kv[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                               1,    13,   25,  38,  53,  69,  89,  113};
    put16(b, 1.0f);
    for (int i = 0; i < 16; i++) b[2 + i] = (uint8_t)(i | (15 - i) << 4);
    CHECK(cllm_gguf_row_f32(CLLM_GGML_IQ4_NL, b, y, 32));
    for (int i = 0; i < 16; i++) {
        CHECK_MSG(y[i] == (float)kv[i], "iq4_nl lo %d: %g", i, y[i]);
        CHECK_MSG(y[i + 16] == (float)kv[15 - i], "iq4_nl hi %d: %g", i, y[i + 16]);
    }
    /* Q6_K: ql all 0x21 (lo 1, hi 2), qh 0, scales 1..16, d = 1: value sc * (q - 32). Weight
     * l + 32 * s + 128 * h (l < 32) uses scale 8 h + 2 s + l / 16 and the low nibble for s < 2, the
     * high one else. */
    memset(b, 0, 210);
    memset(b, 0x21, 128);
    for (int i = 0; i < 16; i++) b[192 + i] = (uint8_t)(i + 1);
    put16(b + 208, 1.0f);
    CHECK(cllm_gguf_row_f32(CLLM_GGML_Q6_K, b, y, 256));
    for (int k = 0; k < 256; k++) {
        int h = k / 128, s = (k % 128) / 32, l = k % 32, q = (s < 2 ? 1 : 2) - 32;
        float want = (float)(8 * h + 2 * s + l / 16 + 1) * (float)q;
        CHECK_MSG(y[k] == want, "q6_k %d: %g want %g", k, y[k], want);
    }
    CHECK(!cllm_gguf_row_f32(CLLM_GGML_Q2_K, b, y, 256));
    CHECK(!cllm_gguf_row_f32(CLLM_GGML_Q3_K, b, y, 256));
}

static void against_file(const char *gpath, const char *epath) {
    cllm_gguf *g = NULL;
    cllm_error err = {0};
    if (cllm_gguf_open(gpath, &g, &err)) {
        CHECK_MSG(0, "open %s: %s", gpath, err.msg);
        return;
    }
    FILE *f = fopen(epath, "rb");
    CHECK_MSG(f != NULL, "open %s", epath);
    if (!f) {
        cllm_gguf_close(g);
        return;
    }
    size_t total = 0;
    for (size_t i = 0; i < g->n_tensors; i++) {
        const cllm_gguf_tensor *t = &g->tensors[i];
        int bytes, blk = cllm_ggml_block(t->type, &bytes);
        const int64_t K = t->ne[0], rows = (int64_t)t->n_elems / K;
        const size_t rb = (size_t)(K / blk) * (size_t)bytes;
        float *got = malloc((size_t)K * 4), *want = malloc((size_t)K * 4);
        uint64_t diff = 0;
        for (int64_t r = 0; r < rows; r++) {
            bool okd =
                cllm_gguf_row_f32(t->type, (const uint8_t *)t->data + (size_t)r * rb, got, K);
            CHECK_MSG(okd, "%s: no decoder for %s", t->name, cllm_ggml_type_name(t->type));
            CHECK_MSG(fread(want, 4, (size_t)K, f) == (size_t)K, "%s: expected file too short",
                      t->name);
            for (int64_t k = 0; k < K; k++) {
                uint32_t a, b;
                memcpy(&a, &got[k], 4);
                memcpy(&b, &want[k], 4);
                if (a == b || (isnan(got[k]) && isnan(want[k]))) continue;
                if (!diff++)
                    fprintf(stderr, "  %s row %lld col %lld: cllm %a (0x%08x) python %a (0x%08x)\n",
                            t->name, (long long)r, (long long)k, got[k], a, want[k], b);
            }
        }
        total += (size_t)t->n_elems;
        fprintf(stderr, "  %-28s %-6s %lld x %lld: %llu of %llu values differ\n", t->name,
                cllm_ggml_type_name(t->type), (long long)rows, (long long)K,
                (unsigned long long)diff, (unsigned long long)t->n_elems);
        CHECK_MSG(diff == 0, "%s (%s) differs bitwise from gguf_np.dequantize", t->name,
                  cllm_ggml_type_name(t->type));
        free(got);
        free(want);
    }
    float extra;
    CHECK_MSG(fread(&extra, 4, 1, f) == 0, "expected file longer than the tensors");
    CHECK_MSG(g->n_tensors > 0 && total > 0, "no tensors in %s", gpath);
    fprintf(stderr, "  %zu tensors, %zu values compared\n", g->n_tensors, total);
    fclose(f);
    cllm_gguf_close(g);
}

int main(void) {
    hand_blocks();
    const char *gp = getenv("CLLM_GGUF_DECODE"), *ep = getenv("CLLM_GGUF_EXPECT");
    if (gp && ep) against_file(gp, ep);
    return test_report("test_gguf_decode");
}
