/* fp16/bf16 <-> fp32: all 65,536 inputs of each format, round-to-nearest-even on midpoints,
 * NaN/Inf/subnormals, and the vector row converters bit-identical to the scalar ones. */
#include <stdint.h>
#include <string.h>

#include "base/half.h"
#include "test.h"

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Reference fp16 decode by arithmetic, independent of the bit-twiddling implementation. */
static double f16_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

int main(void) {
    /* Exhaustive fp16 -> fp32 against the arithmetic reference; round trip back. */
    int f16_bad = 0, f16_rt_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cllm_f16_to_f32((uint16_t)h);
        int e = (h >> 10) & 31, m = h & 1023;
        if (e == 31) {
            if (m ? !isnan(f) : !(isinf(f) && (signbit(f) != 0) == (h >> 15))) f16_bad++;
            uint16_t back = cllm_f32_to_f16(f);
            if (m ? ((back & 0x7c00) != 0x7c00 || !(back & 0x3ff)) : back != h) f16_rt_bad++;
            continue;
        }
        if ((double)f != f16_value((uint16_t)h) || (signbit(f) != 0) != (int)(h >> 15)) f16_bad++;
        if (cllm_f32_to_f16(f) != h) f16_rt_bad++;
    }
    CHECK_MSG(f16_bad == 0, "%d fp16 decodes wrong", f16_bad);
    CHECK_MSG(f16_rt_bad == 0, "%d fp16 round trips wrong", f16_rt_bad);

    /* Rounding: for each pair of adjacent finite positive fp16 values, the midpoint rounds to the
     * even one, and values just above/below the midpoint round to the nearer one. */
    int rne_bad = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double lo = f16_value((uint16_t)h), hi = f16_value((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2); /* exact in fp32: fp16 has 11 significant bits */
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        if (cllm_f32_to_f16(mid) != even) rne_bad++;
        if (cllm_f32_to_f16(nextafterf(mid, 1e9f)) != h + 1) rne_bad++;
        if (cllm_f32_to_f16(nextafterf(mid, -1e9f)) != h) rne_bad++;
        if (cllm_f32_to_f16(-mid) != (even | 0x8000)) rne_bad++;
    }
    CHECK_MSG(rne_bad == 0, "%d fp16 rounding cases wrong", rne_bad);
    /* Overflow: the midpoint between 65504 and 65536 and above rounds to Inf. */
    CHECK(cllm_f32_to_f16(65504.0f) == 0x7bff);
    CHECK(cllm_f32_to_f16(65519.99f) == 0x7bff);
    CHECK(cllm_f32_to_f16(65520.0f) == 0x7c00);
    CHECK(cllm_f32_to_f16(1e10f) == 0x7c00);
    CHECK(cllm_f32_to_f16(-INFINITY) == 0xfc00);
    CHECK(cllm_f32_to_f16(ldexpf(1, -25)) == 0);     /* exactly half the smallest subnormal: even */
    CHECK(cllm_f32_to_f16(ldexpf(1.01f, -25)) == 1); /* just above: rounds up */
    CHECK((cllm_f32_to_f16(NAN) & 0x7e00) == 0x7e00); /* quiet NaN */

    /* bf16: exhaustive decode and round trip. */
    int bf_bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = cllm_bf16_to_f32((uint16_t)h);
        if (bits(f) != h << 16) bf_bad++;
        uint16_t back = cllm_f32_to_bf16(f);
        if (isnan(f) ? (back & 0x7fc0) != 0x7fc0 : back != h) bf_bad++;
    }
    CHECK_MSG(bf_bad == 0, "%d bf16 cases wrong", bf_bad);
    /* bf16 RNE on midpoints: low 16 bits exactly 0x8000. */
    for (uint32_t h = 0; h < 0x7f7f; h += 97) {
        uint32_t mid = (h << 16) | 0x8000;
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        CHECK(cllm_f32_to_bf16(from_bits(mid)) == even);
        CHECK(cllm_f32_to_bf16(from_bits(mid + 1)) == h + 1);
        CHECK(cllm_f32_to_bf16(from_bits(mid - 1)) == h);
    }
    CHECK(cllm_f32_to_bf16(from_bits(0x7f7fffff)) == 0x7f80); /* max float rounds to Inf */
    CHECK((cllm_f32_to_bf16(from_bits(0x7f800001)) & 0x7fc0) == 0x7fc0); /* sNaN stays NaN */

    /* Row converters (vectorised when available) equal scalar, odd lengths, unaligned. */
    enum { N = 1037 };
    static float src[N + 1], dst[N + 1];
    static uint16_t h16[N + 1], hv[N + 1];
    uint64_t s = 12345;
    for (int i = 0; i < N + 1; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t u = (uint32_t)(s >> 32);
        src[i] = (i % 7 == 0) ? from_bits(u)
                              : from_bits((u & 0x807fffff) | (((u >> 23) % 40 + 100) << 23));
    }
    int row_bad = 0;
    cllm_f32_to_bf16_row(src + 1, hv + 1, N);
    for (int i = 1; i <= N; i++) row_bad += hv[i] != cllm_f32_to_bf16(src[i]);
    cllm_f32_to_f16_row(src + 1, hv + 1, N);
    for (int i = 1; i <= N; i++) row_bad += hv[i] != cllm_f32_to_f16(src[i]);
    for (int i = 0; i <= N; i++) h16[i] = (uint16_t)(i * 63);
    cllm_f16_to_f32_row(h16 + 1, dst + 1, N);
    for (int i = 1; i <= N; i++) {
        float r = cllm_f16_to_f32(h16[i]);
        row_bad += !(bits(dst[i]) == bits(r) || (isnan(dst[i]) && isnan(r)));
    }
    cllm_bf16_to_f32_row(h16 + 1, dst + 1, N);
    for (int i = 1; i <= N; i++) row_bad += bits(dst[i]) != bits(cllm_bf16_to_f32(h16[i]));
    CHECK_MSG(row_bad == 0, "%d row-converter mismatches", row_bad);

    /* FP8 E4M3 spot values. */
    CHECK(cllm_f8e4m3_to_f32(0x38) == 1.0f);
    CHECK(cllm_f8e4m3_to_f32(0x7e) == 448.0f);
    CHECK(cllm_f8e4m3_to_f32(0x01) == ldexpf(1, -9));
    CHECK(isnan(cllm_f8e4m3_to_f32(0x7f)));
    CHECK(cllm_f8e4m3_to_f32(0xb8) == -1.0f);
    return test_report("test_half");
}
