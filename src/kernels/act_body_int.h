/* Private: the vector SiLU-and-multiply (cllm_kern_ops.silu_mul), written once over
 * kernels/simd8_int.h and compiled into each SIMD tier by a file that defines ACT_SILU_MUL_FN and
 * includes this (kernels/x86/act_avx2.c, kernels/arm/act_neon.c): the tiers do the same lane
 * operations. A prefill token passes ~150k inputs through SiLU on the Qwen3.5 shapes (the GDN conv,
 * the gated norms, every expert); libm's scalar expf took ~5 ns each, 0.3 s of a 512-token
 * prefill on the quarter shape.
 *
 * exp(x) for x clamped to [-87, 88]: x = n ln2 + r with n = round(x log2 e) and r from a
 * two-constant ln2 (Cody-Waite), e^r by the Cephes expf polynomial (1 + r + r^2 P(r), degree 5),
 * times 2^n through the exponent bits. silu(g) = g / (1 + e^-g), a true division: within 4 ulp of
 * libm's and of the exact value (tests/kernels/test_act.c). A tail of n % 8 inputs goes through
 * the same lane code on a padded copy, so an input's result never depends on its position. */
#ifndef ACT_SILU_MUL_FN
#error "define ACT_SILU_MUL_FN before including kernels/act_body_int.h"
#endif
#include <string.h>

#include "kernels/kern_int.h"
#include "kernels/simd8_int.h"

S8 f32x8 exp8(f32x8 x) {
    x = clamp8(x, -87.0f, 88.0f);
    f32x8 n = round8(mul8(x, set8(1.44269504088896341f)));
    f32x8 r = fnmadd8(n, set8(0.693359375f), x); /* ln2 high part: 9 significant bits */
    r = fnmadd8(n, set8(-2.12194440e-4f), r);    /* ln2 - 0.693359375 */
    f32x8 p = set8(1.9875691500e-4f);
    p = fmadd8(p, r, set8(1.3981999507e-3f));
    p = fmadd8(p, r, set8(8.3334519073e-3f));
    p = fmadd8(p, r, set8(4.1665795894e-2f));
    p = fmadd8(p, r, set8(1.6666665459e-1f));
    p = fmadd8(p, r, set8(5.0000001201e-1f));
    p = fmadd8(p, mul8(r, r), add8(r, set8(1.0f)));
    return mul8(p, pow2i8(n));
}

S8 f32x8 silu_mul8(f32x8 g, const float *u) {
    f32x8 e = exp8(mul8(g, set8(-1.0f)));
    f32x8 y = div8(g, add8(set8(1.0f), e));
    return u ? mul8(y, ld8(u)) : y;
}

void ACT_SILU_MUL_FN(float *y, const float *g, const float *u, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) st8(y + i, silu_mul8(ld8(g + i), u ? u + i : NULL));
    if (i < n) {
        float gb[8] = {0}, ub[8] = {0}, yb[8];
        memcpy(gb, g + i, (size_t)(n - i) * sizeof(float));
        if (u) memcpy(ub, u + i, (size_t)(n - i) * sizeof(float));
        st8(yb, silu_mul8(ld8(gb), u ? ub : NULL));
        memcpy(y + i, yb, (size_t)(n - i) * sizeof(float));
    }
}
