/* Private: dot_rows (cllm_kern_ops, kernels.h) written once over kernels/simd8.h and compiled into
 * each SIMD tier by a file that defines DOT_ROWS_FN and includes this (kernels/x86/act_avx2.c,
 * kernels/arm/act_neon.c). Register tile of 2 rows x 4 queries: 8 accumulators, per 8 inputs 2 row
 * loads and 4 query loads for 8 FMAs. Per output the sequence is fixed by d alone: lane j sums
 * inputs k = j mod 8 in order (fma), then hsum8, then the d % 8 tail in order; so any tile or call
 * split gives the same bits. */
#ifndef DOT_ROWS_FN
#error "define DOT_ROWS_FN before including kernels/dot_rows_body.h"
#endif
#include "kernels/kern_int.h"
#include "kernels/simd8.h"

S8 float dr_tail(float s, const float *a, const float *b, int d8, int d) {
    for (int k = d8; k < d; k++) s += a[k] * b[k];
    return s;
}

S8 void dr_tile(const float *K, size_t ldk, const float *Q, size_t ldq, int d, float *S, size_t lds,
                const int R, const int H) {
    f32x8 acc[2][4];
    for (int r = 0; r < R; r++)
        for (int h = 0; h < H; h++) acc[r][h] = zero8();
    const int d8 = d / 8 * 8;
    for (int k = 0; k < d8; k += 8) {
        f32x8 kv[2];
        for (int r = 0; r < R; r++) kv[r] = ld8(K + (size_t)r * ldk + k);
        for (int h = 0; h < H; h++) {
            f32x8 q = ld8(Q + (size_t)h * ldq + k);
            for (int r = 0; r < R; r++) acc[r][h] = fmadd8(q, kv[r], acc[r][h]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int h = 0; h < H; h++)
            S[(size_t)r * lds + h] =
                dr_tail(hsum8(acc[r][h]), K + (size_t)r * ldk, Q + (size_t)h * ldq, d8, d);
}

/* Rows [i, i + R) against all nq queries, 4 at a time. */
S8 void dr_rows(const float *K, size_t ldk, const float *Q, size_t ldq, int nq, int d, float *S,
                size_t lds, const int R) {
    int h = 0;
    for (; h + 4 <= nq; h += 4) dr_tile(K, ldk, Q + (size_t)h * ldq, ldq, d, S + h, lds, R, 4);
    for (; h < nq; h++) dr_tile(K, ldk, Q + (size_t)h * ldq, ldq, d, S + h, lds, R, 1);
}

void DOT_ROWS_FN(const float *K, size_t ldk, int n, const float *Q, size_t ldq, int nq, int d,
                 float *S, size_t lds) {
    int i = 0;
    for (; i + 2 <= n; i += 2)
        dr_rows(K + (size_t)i * ldk, ldk, Q, ldq, nq, d, S + (size_t)i * lds, lds, 2);
    if (i < n) dr_rows(K + (size_t)i * ldk, ldk, Q, ldq, nq, d, S + (size_t)i * lds, lds, 1);
}
