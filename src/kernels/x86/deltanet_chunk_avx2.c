/* AVX2/FMA chunked (WY) Gated DeltaNet form (docs/model.md §2.4), same algorithm as
 * kernels/deltanet_chunk_ref.c. The three dk x dv products per chunk (W S, (q e^gamma) S and the
 * state update) run through one register-blocked GEMM tile (6 rows x 16 columns, 12 accumulators)
 * with column strips of the right-hand matrix kept in L1; the kk^T / qk^T dots, the forward
 * substitution and A Vn are vectorised along the row. Fixed operation order: the result depends
 * only on the inputs (not on the batch or the thread). */
#include <immintrin.h>
#include <math.h>

#include "kernels/kern_int.h"

#define AI __attribute__((always_inline)) static inline

/* Rows [0, R) x columns [0, 8*NV) of C = (init ? C*cs : 0) +/- sum_kk A(r, kk) B[kk][.],
 * A(r, kk) = A[r*ars + kk*acs]. */
AI void tile(const int R, const int NV, int K, const float *A, size_t ars, size_t acs,
             const float *B, size_t ldb, float *Cm, size_t ldc, const int init, float cs,
             const int neg) {
    __m256 acc[6][2];
    __m256 vcs = _mm256_set1_ps(cs);
    for (int r = 0; r < R; r++)
        for (int i = 0; i < NV; i++)
            acc[r][i] = init ? _mm256_mul_ps(_mm256_loadu_ps(Cm + (size_t)r * ldc + 8 * i), vcs)
                             : _mm256_setzero_ps();
    for (int kk = 0; kk < K; kk++) {
        const float *b = B + (size_t)kk * ldb;
        __m256 b0 = _mm256_loadu_ps(b), b1 = NV > 1 ? _mm256_loadu_ps(b + 8) : b0;
        const float *a = A + (size_t)kk * acs;
        for (int r = 0; r < R; r++) {
            __m256 av = _mm256_broadcast_ss(a + (size_t)r * ars);
            if (neg) {
                acc[r][0] = _mm256_fnmadd_ps(av, b0, acc[r][0]);
                if (NV > 1) acc[r][1] = _mm256_fnmadd_ps(av, b1, acc[r][1]);
            } else {
                acc[r][0] = _mm256_fmadd_ps(av, b0, acc[r][0]);
                if (NV > 1) acc[r][1] = _mm256_fmadd_ps(av, b1, acc[r][1]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int i = 0; i < NV; i++) _mm256_storeu_ps(Cm + (size_t)r * ldc + 8 * i, acc[r][i]);
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

AI float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* dst[c] = a*x[c] - sum_{j<nj} l[j] * Y[j][c]  for c < n (Y rows ldy apart) */
static void subst_row(float *dst, float a, const float *x, const float *l, const float *Y,
                      size_t ldy, int nj, int n) {
    int c = 0;
    __m256 va = _mm256_set1_ps(a);
    for (; c + 16 <= n; c += 16) {
        __m256 r0 = _mm256_mul_ps(va, _mm256_loadu_ps(x + c)),
               r1 = _mm256_mul_ps(va, _mm256_loadu_ps(x + c + 8));
        for (int j = 0; j < nj; j++) {
            __m256 lj = _mm256_broadcast_ss(l + j);
            const float *y = Y + (size_t)j * ldy + c;
            r0 = _mm256_fnmadd_ps(lj, _mm256_loadu_ps(y), r0);
            r1 = _mm256_fnmadd_ps(lj, _mm256_loadu_ps(y + 8), r1);
        }
        _mm256_storeu_ps(dst + c, r0);
        _mm256_storeu_ps(dst + c + 8, r1);
    }
    for (; c + 8 <= n; c += 8) {
        __m256 r0 = _mm256_mul_ps(va, _mm256_loadu_ps(x + c));
        for (int j = 0; j < nj; j++)
            r0 = _mm256_fnmadd_ps(_mm256_broadcast_ss(l + j),
                                  _mm256_loadu_ps(Y + (size_t)j * ldy + c), r0);
        _mm256_storeu_ps(dst + c, r0);
    }
    for (; c < n; c++) {
        float r = a * x[c];
        for (int j = 0; j < nj; j++) r = fmaf(-l[j], Y[(size_t)j * ldy + c], r);
        dst[c] = r;
    }
}

void kern_gdn_chunk_avx2(float *S, const float *q, const float *k, size_t ldqk, const float *v,
                         size_t ldv, const float *g, const float *beta, float *o, size_t ldo, int T,
                         int dk, int dv, float *work) {
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
                __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
                int m = 0;
                for (; m + 8 <= dk; m += 8) {
                    __m256 kv = _mm256_loadu_ps(kj + m);
                    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(ki + m), kv, a0);
                    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qi + m), kv, a1);
                }
                float kk = hsum(a0), qk = hsum(a1);
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
