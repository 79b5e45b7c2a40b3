/* Private: the body of the chunked (WY) Gated DeltaNet kernel (docs/model.md §2.4; same
 * algorithm as kernels/deltanet_chunk_ref.c), written once over kernels/simd8_int.h and compiled
 * into each SIMD tier by a file that defines GDN_CHUNK_FN (the entry's name) and includes this:
 * kernels/x86/deltanet_chunk_avx2.c, kernels/arm/deltanet_chunk_neon.c. So the tiers do the same
 * lane operations in the same order (only expf, from each platform's libm, may differ).
 *
 * The three dk x dv products per chunk (W S, (q e^gamma) S and the state update) run through one
 * register-blocked GEMM tile (6 rows x 16 columns, 12 eight-lane accumulators) with column strips
 * of the right-hand matrix kept in L1; the kk^T / qk^T dots, the forward substitution and A Vn are
 * vectorised along the row. Fixed operation order: the result depends only on the inputs (not on
 * the batch or the thread). */
#ifndef GDN_CHUNK_FN
#error "define GDN_CHUNK_FN before including kernels/deltanet_chunk_body_int.h"
#endif
#include <math.h>

#include "kernels/kern_int.h"
#include "kernels/simd8_int.h"

#define AI __attribute__((always_inline)) static inline

/* Rows [0, R) x columns [0, 8*NV) of C = (init ? C*cs : 0) +/- sum_kk A(r, kk) B[kk][.],
 * A(r, kk) = A[r*ars + kk*acs]. */
AI void tile(const int R, const int NV, int K, const float *A, size_t ars, size_t acs,
             const float *B, size_t ldb, float *Cm, size_t ldc, const int init, float cs,
             const int neg) {
    f32x8 acc[6][2];
    f32x8 vcs = set8(cs);
    for (int r = 0; r < R; r++)
        for (int i = 0; i < NV; i++)
            acc[r][i] = init ? mul8(ld8(Cm + (size_t)r * ldc + 8 * i), vcs) : zero8();
    for (int kk = 0; kk < K; kk++) {
        const float *b = B + (size_t)kk * ldb;
        f32x8 b0 = ld8(b), b1 = NV > 1 ? ld8(b + 8) : b0;
        const float *a = A + (size_t)kk * acs;
        for (int r = 0; r < R; r++) {
            f32x8 av = bcast8(a + (size_t)r * ars);
            if (neg) {
                acc[r][0] = fnmadd8(av, b0, acc[r][0]);
                if (NV > 1) acc[r][1] = fnmadd8(av, b1, acc[r][1]);
            } else {
                acc[r][0] = fmadd8(av, b0, acc[r][0]);
                if (NV > 1) acc[r][1] = fmadd8(av, b1, acc[r][1]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < NV; i++) st8(Cm + (size_t)r * ldc + 8 * i, acc[r][i]);
}

#define TILE_R(NV)                                                                                 \
    switch (R) {                                                                                   \
    case 6:                                                                                        \
        tile(6, NV, Ki, Ai, ars, acs, Bc, ldb, Cc, ldc, init, cs, neg);                            \
        break;                                                                                     \
    case 5:                                                                                        \
        tile(5, NV, Ki, Ai, ars, acs, Bc, ldb, Cc, ldc, init, cs, neg);                            \
        break;                                                                                     \
    case 4:                                                                                        \
        tile(4, NV, Ki, Ai, ars, acs, Bc, ldb, Cc, ldc, init, cs, neg);                            \
        break;                                                                                     \
    case 3:                                                                                        \
        tile(3, NV, Ki, Ai, ars, acs, Bc, ldb, Cc, ldc, init, cs, neg);                            \
        break;                                                                                     \
    case 2:                                                                                        \
        tile(2, NV, Ki, Ai, ars, acs, Bc, ldb, Cc, ldc, init, cs, neg);                            \
        break;                                                                                     \
    default:                                                                                       \
        tile(1, NV, Ki, Ai, ars, acs, Bc, ldb, Cc, ldc, init, cs, neg);                            \
        break;                                                                                     \
    }

/* C [M][N] (ldc) = (init ? C*cs : 0) +/- A [M][K] B [K][N]; tri: row i only uses kk <= i (A is
 * lower triangular, entries above the diagonal are not read). */
AI void gemm(int M, int N, int K, const float *A, size_t ars, size_t acs, const float *B,
             size_t ldb, float *Cm, size_t ldc, const int init, float cs, const int neg,
             const int tri) {
    int c0 = 0;
    for (; c0 + 16 <= N; c0 += 16)
        for (int i0 = 0; i0 < M; i0 += 6) {
            int R = M - i0 < 6 ? M - i0 : 6, Ki = tri ? (K < i0 + R ? K : i0 + R) : K;
            const float *Ai = A + (size_t)i0 * ars, *Bc = B + c0;
            float *Cc = Cm + (size_t)i0 * ldc + c0;
            if (tri) { /* rows past their diagonal read zeros: use a row-exact K below */
                for (int r = 0; r < R; r++) {
                    int Kr = K < i0 + r + 1 ? K : i0 + r + 1;
                    tile(1, 2, Kr, Ai + (size_t)r * ars, ars, acs, Bc, ldb, Cc + (size_t)r * ldc,
                         ldc, init, cs, neg);
                }
                continue;
            }
            TILE_R(2)
            (void)Ki;
        }
    for (; c0 + 8 <= N; c0 += 8)
        for (int i0 = 0; i0 < M; i0 += 6) {
            int R = M - i0 < 6 ? M - i0 : 6, Ki = K;
            const float *Ai = A + (size_t)i0 * ars, *Bc = B + c0;
            float *Cc = Cm + (size_t)i0 * ldc + c0;
            if (tri) {
                for (int r = 0; r < R; r++) {
                    int Kr = K < i0 + r + 1 ? K : i0 + r + 1;
                    tile(1, 1, Kr, Ai + (size_t)r * ars, ars, acs, Bc, ldb, Cc + (size_t)r * ldc,
                         ldc, init, cs, neg);
                }
                continue;
            }
            TILE_R(1)
        }
    for (int c = c0; c < N; c++) /* scalar tail columns, same per-element order */
        for (int i = 0; i < M; i++) {
            int Ki = tri ? (K < i + 1 ? K : i + 1) : K;
            float acc = init ? Cm[(size_t)i * ldc + c] * cs : 0.0f;
            for (int kk = 0; kk < Ki; kk++) {
                float p = A[(size_t)i * ars + (size_t)kk * acs];
                acc = neg ? fmaf(-p, B[(size_t)kk * ldb + c], acc)
                          : fmaf(p, B[(size_t)kk * ldb + c], acc);
            }
            Cm[(size_t)i * ldc + c] = acc;
        }
}

/* dst[c] = a*x[c] - sum_{j<nj} l[j] * Y[j][c]  for c < n (Y rows ldy apart) */
static void subst_row(float *dst, float a, const float *x, const float *l, const float *Y,
                      size_t ldy, int nj, int n) {
    int c = 0;
    f32x8 va = set8(a);
    for (; c + 16 <= n; c += 16) {
        f32x8 r0 = mul8(va, ld8(x + c)), r1 = mul8(va, ld8(x + c + 8));
        for (int j = 0; j < nj; j++) {
            f32x8 lj = bcast8(l + j);
            const float *y = Y + (size_t)j * ldy + c;
            r0 = fnmadd8(lj, ld8(y), r0);
            r1 = fnmadd8(lj, ld8(y + 8), r1);
        }
        st8(dst + c, r0);
        st8(dst + c + 8, r1);
    }
    for (; c + 8 <= n; c += 8) {
        f32x8 r0 = mul8(va, ld8(x + c));
        for (int j = 0; j < nj; j++) r0 = fnmadd8(bcast8(l + j), ld8(Y + (size_t)j * ldy + c), r0);
        st8(dst + c, r0);
    }
    for (; c < n; c++) {
        float r = a * x[c];
        for (int j = 0; j < nj; j++) r = fmaf(-l[j], Y[(size_t)j * ldy + c], r);
        dst[c] = r;
    }
}

void GDN_CHUNK_FN(float *S, const float *q, const float *k, size_t ldqk, const float *v, size_t ldv,
                  const float *g, const float *beta, float *o, size_t ldo, int T, int dk, int dv,
                  float *work) {
    const int C = CLLM_GDN_CHUNK;
    float *gam = work, *eg = gam + C, *Lm = eg + C, *Am = Lm + (size_t)C * C;
    float *U = Am + (size_t)C * C, *W = U + (size_t)C * dv, *X = W + (size_t)C * dk;
    for (int t0 = 0; t0 < T; t0 += C) {
        int n = T - t0 < C ? T - t0 : C;
        const float *qc = q + (size_t)t0 * ldqk, *kc = k + (size_t)t0 * ldqk,
                    *vc = v + (size_t)t0 * ldv;
        const float *gc = g + t0, *bc = beta + t0;
        float *oc = o + (size_t)t0 * ldo;
        float acc = 0.0f;
        for (int i = 0; i < n; i++) {
            acc += gc[i];
            gam[i] = acc;
            eg[i] = expf(acc);
        }
        /* L (strict lower) and A (lower incl. diagonal) */
        for (int i = 0; i < n; i++) {
            const float *qi = qc + (size_t)i * ldqk, *ki = kc + (size_t)i * ldqk;
            for (int j = 0; j <= i; j++) {
                const float *kj = kc + (size_t)j * ldqk;
                f32x8 a0 = zero8(), a1 = zero8();
                int m = 0;
                for (; m + 8 <= dk; m += 8) {
                    f32x8 kv = ld8(kj + m);
                    a0 = fmadd8(ld8(ki + m), kv, a0);
                    a1 = fmadd8(ld8(qi + m), kv, a1);
                }
                float kk = hsum8(a0), qk = hsum8(a1);
                for (; m < dk; m++) kk = fmaf(ki[m], kj[m], kk), qk = fmaf(qi[m], kj[m], qk);
                float d = expf(gam[i] - gam[j]);
                Lm[(size_t)i * C + j] = j < i ? bc[i] * kk * d : 0.0f;
                Am[(size_t)i * C + j] = qk * d;
            }
        }
        /* forward substitution: U = (I+L)^-1 v beta, W = (I+L)^-1 k beta e^gamma */
        for (int i = 0; i < n; i++) {
            const float *li = Lm + (size_t)i * C;
            subst_row(U + (size_t)i * dv, bc[i], vc + (size_t)i * ldv, li, U, (size_t)dv, i, dv);
            subst_row(W + (size_t)i * dk, bc[i] * eg[i], kc + (size_t)i * ldqk, li, W, (size_t)dk,
                      i, dk);
        }
        /* Vn = U - W S (into U) */
        gemm(n, dv, dk, W, (size_t)dk, 1, S, (size_t)dv, U, (size_t)dv, 1, 1.0f, 1, 0);
        /* O = (q e^gamma) S + A Vn */
        for (int i = 0; i < n; i++) {
            const float *qi = qc + (size_t)i * ldqk;
            float *xi = X + (size_t)i * dk;
            for (int m = 0; m < dk; m++) xi[m] = qi[m] * eg[i];
        }
        gemm(n, dv, dk, X, (size_t)dk, 1, S, (size_t)dv, oc, ldo, 0, 1.0f, 0, 0);
        gemm(n, dv, n, Am, (size_t)C, 1, U, (size_t)dv, oc, ldo, 1, 1.0f, 0, 1);
        /* S = e^gamma_last S + (k e^(gamma_last - gamma))^T Vn */
        float gl = gam[n - 1], el = eg[n - 1];
        for (int j = 0; j < n; j++) {
            const float *kj = kc + (size_t)j * ldqk;
            float e = expf(gl - gam[j]);
            float *xj = X + (size_t)j * dk;
            for (int m = 0; m < dk; m++) xj[m] = kj[m] * e;
        }
        gemm(dk, dv, n, X, 1, (size_t)dk, U, (size_t)dv, S, (size_t)dv, 1, el, 0, 0);
    }
}
