/* Private: the Gated DeltaNet recurrence step (gdn_step, kernels.h: one value head, T tokens,
 * state updated in place), written once over a lane-wise vector shim and compiled into each SIMD
 * tier by a file that defines GDN_STEP_FN and includes this (kernels/x86/deltanet_avx2.c,
 * kernels/arm/deltanet_neon.c over kernels/simd8_int.h; kernels/x86/deltanet_avx512.c maps the
 * gv_* names to 16-lane AVX-512 first), so every ISA does the same lane operations (kern_xisa
 * checks the bits, test_kern avx512 == avx2).
 *
 * Every column n of S evolves independently (u[n], d[n], o[n] only involve column n), so the
 * steps run per block of 4 vectors of columns (then single vectors, then on AVX-512 a masked
 * 8-column one, then a scalar tail), all tokens over one block before the next: decay + S^T k
 * over the block's rows, d, then the rank-1 update + S^T q (fused with the next token's decay +
 * S^T k), with u/d/o held in registers and the block of S (dk x 32 fp32 = 16 KiB at dk = 128 and
 * 8 lanes) staying in L1 across all tokens. Sums over the k dimension run in index order, per
 * column: the result depends only on the inputs, never on the batch, the thread or the width. */
#if !defined(GDN_STEP_FN) || !defined(GDN_STEP_BF16_FN)
#error "define GDN_STEP_FN and GDN_STEP_BF16_FN before including kernels/deltanet_step_body_int.h"
#endif
#include "kernels/kern_int.h"

#ifndef GDN_VL /* the 8-lane shim: a vector is 8 columns, so the HALF (8-column) block never runs  \
                */
#include "kernels/simd8_int.h"
#define GDN_VL   8
#define GDN_PAIR 1 /* the bf16 state's even/odd pair loads (ld16_bf16_eo ...) */
#define GV       S8
typedef f32x8 gv_t;
GV gv_t gv_zero(void) {
    return zero8();
}
GV gv_t gv_set(float x) {
    return set8(x);
}
GV gv_t gv_ld(const float *p, const int half) {
    (void)half;
    return ld8(p);
}
GV void gv_st(float *p, gv_t v, const int half) {
    (void)half;
    st8(p, v);
}
GV gv_t gv_mul(gv_t a, gv_t b) {
    return mul8(a, b);
}
GV gv_t gv_sub(gv_t a, gv_t b) {
    return sub8(a, b);
}
GV gv_t gv_fmadd(gv_t a, gv_t b, gv_t c) {
    return fmadd8(a, b, c);
}
GV gv_t gv_ldb(const uint16_t *p, const int half) {
    (void)half;
    return ld8_bf16(p);
}
GV gv_t gv_rnd(gv_t v) {
    return rnd8_bf16(v);
}
GV void gv_stb(uint16_t *p, gv_t v, const int half) {
    (void)half;
    st8_bf16(p, v);
}
#endif

#ifndef GDN_PAIR
#define GDN_PAIR 0
#endif

/* One prefetch per 64-byte line: every vector on 16 lanes, every other one on 8. The state that
 * follows S in memory is the next head's (heads are contiguous per layer and slot, and callers
 * walk them in order), so the next call finds its state in L2 instead of streaming 64 KiB at a
 * single core's miss rate (decode spent 11-18 GB/s on state traffic next to 25 for weights). */
#define GDN_PF_STEP (GDN_VL >= 16 ? 1 : 2)

/* Columns [n0, n0 + GDN_VL*NV) of S (HALF: NV 1, 8 columns) for T >= 1 tokens, software-pipelined:
 * token t's update + S^T q and token t+1's decay + S^T k share one pass over the block's rows (the
 * updated row is decayed by the next token's factor straight away, the value the next pass would
 * load and scale), so each row is loaded and stored once per token and the two tokens' sums are
 * independent chains. Per element the same operations as one token at a time (decay, S^T k, d,
 * update, S^T q). */
GV void gdn_block_run(float *S, const float *q, const float *k, const float *v, const float *decay,
                      const float *beta, size_t ld, float *o, size_t ldo, int T, int dk, int dv,
                      int n0, const int NV, const int HALF) {
    const int W = GDN_VL;
    gv_t u[4], d[4], acc[4];
    for (int i = 0; i < NV; i++) u[i] = gv_zero();
    {
        const gv_t vd = gv_set(decay[0]);
        for (int m = 0; m < dk; m++) {
            float *s = S + (size_t)m * (size_t)dv + n0;
            const gv_t km = gv_set(k[m]);
            /* the same lines of the state that follows (the caller's next head, or the next
             * layer's first): read from memory while this one computes (see GDN_PF_STEP) */
            for (int i = 0; i < NV; i += GDN_PF_STEP)
                __builtin_prefetch(s + (size_t)dk * dv + W * i, 1, 2);
            for (int i = 0; i < NV; i++) {
                gv_t sv = gv_mul(gv_ld(s + W * i, HALF), vd);
                gv_st(s + W * i, sv, HALF);
                u[i] = gv_fmadd(sv, km, u[i]);
            }
        }
    }
    for (int t = 0; t < T; t++) {
        const float *qt = q + (size_t)t * ld, *kt = k + (size_t)t * ld;
        const gv_t vb = gv_set(beta[(size_t)t * ld]);
        for (int i = 0; i < NV; i++) {
            d[i] = gv_mul(gv_sub(gv_ld(v + (size_t)t * ld + n0 + W * i, HALF), u[i]), vb);
            acc[i] = gv_zero();
            u[i] = gv_zero();
        }
        if (t + 1 < T) {
            const float *kn = kt + ld;
            const gv_t vd = gv_set(decay[(size_t)(t + 1) * ld]);
            for (int m = 0; m < dk; m++) {
                float *s = S + (size_t)m * (size_t)dv + n0;
                const gv_t km = gv_set(kt[m]), qm = gv_set(qt[m]), kmn = gv_set(kn[m]);
                for (int i = 0; i < NV; i++) {
                    gv_t sv = gv_fmadd(km, d[i], gv_ld(s + W * i, HALF));
                    acc[i] = gv_fmadd(sv, qm, acc[i]);
                    sv = gv_mul(sv, vd);
                    gv_st(s + W * i, sv, HALF);
                    u[i] = gv_fmadd(sv, kmn, u[i]);
                }
            }
        } else {
            for (int m = 0; m < dk; m++) {
                float *s = S + (size_t)m * (size_t)dv + n0;
                const gv_t km = gv_set(kt[m]), qm = gv_set(qt[m]);
                for (int i = 0; i < NV; i++) {
                    gv_t sv = gv_fmadd(km, d[i], gv_ld(s + W * i, HALF));
                    gv_st(s + W * i, sv, HALF);
                    acc[i] = gv_fmadd(sv, qm, acc[i]);
                }
            }
        }
        for (int i = 0; i < NV; i++) gv_st(o + (size_t)t * ldo + n0 + W * i, acc[i], HALF);
    }
}

/* Columns [n, dv) (fewer than 8) in scalars, the vector lanes' operation order. */
static void gdn_tail(float *S, const float *q, const float *k, const float *v, float decay,
                     float beta, float *o, float *u, int dk, int dv, int n) {
    for (int j = n; j < dv; j++) u[j] = 0.0f, o[j] = 0.0f;
    for (int m = 0; m < dk; m++) {
        float *s = S + (size_t)m * dv;
        for (int j = n; j < dv; j++) {
            s[j] *= decay;
            u[j] += s[j] * k[m];
        }
    }
    for (int j = n; j < dv; j++) u[j] = (v[j] - u[j]) * beta;
    for (int m = 0; m < dk; m++) {
        float *s = S + (size_t)m * dv;
        for (int j = n; j < dv; j++) {
            s[j] += k[m] * u[j];
            o[j] += s[j] * q[m];
        }
    }
}

/* Every token over one block of columns, then the next block: the block (16 KiB at dk = 128)
 * stays in L1 for all T tokens instead of the whole state (64 KiB) passing through per token. */
void GDN_STEP_FN(float *S, const float *q, const float *k, const float *v, const float *decay,
                 const float *beta, size_t ld, float *o, size_t ldo, int T, float *tmp, int dk,
                 int dv) {
    int n = 0;
    for (; n + 4 * GDN_VL <= dv; n += 4 * GDN_VL)
        gdn_block_run(S, q, k, v, decay, beta, ld, o, ldo, T, dk, dv, n, 4, 0);
    for (; n + GDN_VL <= dv; n += GDN_VL)
        gdn_block_run(S, q, k, v, decay, beta, ld, o, ldo, T, dk, dv, n, 1, 0);
    if (GDN_VL > 8 && n + 8 <= dv) {
        gdn_block_run(S, q, k, v, decay, beta, ld, o, ldo, T, dk, dv, n, 1, 1);
        n += 8;
    }
    if (n < dv)
        for (int t = 0; t < T; t++) {
            size_t r = (size_t)t * ld;
            gdn_tail(S, q + r, k + r, v + r, decay[r], beta[r], o + (size_t)t * ldo, tmp, dk, dv,
                     n);
        }
}

/* ---- bf16 state (gdn_step_bf16, kernels.h) ----
 * The same lane operations with the state stored as bf16: a token's decayed state is never
 * stored (the rounding would then fall between decay and update), so each pass recomputes
 * bf16(S) x decay, and the updated state is rounded once per token (gv_rnd, to nearest even)
 * before it is stored and before the next token's decay reads it. Rounding per token is what
 * keeps T tokens in one call bitwise equal to T calls of one. */
#define GDN_PF_STEP_B16 (GDN_VL >= 16 ? 2 : 4)

/* The update of one state vector x (bf16-exact) for the token: acc += x' q, returns x' =
 * bf16(k d + x decay), every bf16 runner's lane operations. */
GV gv_t b16_upd(gv_t x, gv_t km, gv_t d, gv_t vd, gv_t qm, gv_t *acc) {
    gv_t sv = gv_fmadd(km, d, gv_mul(x, vd));
    *acc = gv_fmadd(sv, qm, *acc);
    return gv_rnd(sv);
}

/* NV state vectors of a row of S (n0 on): on the 8-lane tiers with PAIR, NV / 2 pairs of 16
 * columns, each one 32-byte row of bf16 (ld16_bf16_eo: vector 2i holds the pair's even columns,
 * 2i + 1 its odd ones), which halves the conversion work; else one vector per 8 or 16 columns.
 * b16_ldv / b16_sto split v and merge o the same way, so each column gets the same lane
 * operations whichever way it is loaded, and the bits do not depend on it. */
GV void b16_ld(const uint16_t *s, gv_t *x, const int G, const int HALF) {
#if GDN_PAIR
    if (G == 2) {
        ld16_bf16_eo(s, &x[0], &x[1]);
        return;
    }
#endif
    x[0] = gv_ldb(s, HALF);
}
GV void b16_st(uint16_t *s, const gv_t *x, const int G, const int HALF) {
#if GDN_PAIR
    if (G == 2) {
        st16_bf16_eo(s, x[0], x[1]);
        return;
    }
#endif
    gv_stb(s, x[0], HALF);
}
GV void b16_ldv(const float *p, gv_t *x, const int G, const int HALF) {
#if GDN_PAIR
    if (G == 2) {
        ld16_eo(p, &x[0], &x[1]);
        return;
    }
#endif
    x[0] = gv_ld(p, HALF);
}
GV void b16_sto(float *p, const gv_t *x, const int G, const int HALF) {
#if GDN_PAIR
    if (G == 2) {
        st16_eo(p, x[0], x[1]);
        return;
    }
#endif
    gv_st(p, x[0], HALF);
}

/* Columns [n0, n0 + GDN_VL*NV) of S (HALF: NV 1, 8 columns) for T >= 1 tokens in groups of G
 * vectors (G 2: the pairs above, NV even), the fp32 runner's pipelining with bf16 rows. */
GV void gdn_block_run_b16(uint16_t *S, const float *q, const float *k, const float *v,
                          const float *decay, const float *beta, size_t ld, float *o, size_t ldo,
                          int T, int dk, int dv, int n0, const int NV, const int G,
                          const int HALF) {
    const int W = GDN_VL;
    gv_t u[4], d[4], acc[4], x[4];
    for (int i = 0; i < NV; i++) u[i] = gv_zero();
    {
        const gv_t vd = gv_set(decay[0]);
        for (int m = 0; m < dk; m++) {
            uint16_t *s = S + (size_t)m * (size_t)dv + n0;
            const gv_t km = gv_set(k[m]);
            for (int i = 0; i < NV; i += GDN_PF_STEP_B16)
                __builtin_prefetch(s + (size_t)dk * dv + W * i, 1, 2);
            for (int i = 0; i < NV; i += G) {
                b16_ld(s + W * i, &x[i], G, HALF);
                for (int g = i; g < i + G; g++) u[g] = gv_fmadd(gv_mul(x[g], vd), km, u[g]);
            }
        }
    }
    for (int t = 0; t < T; t++) {
        const float *qt = q + (size_t)t * ld, *kt = k + (size_t)t * ld;
        const gv_t vb = gv_set(beta[(size_t)t * ld]), vd = gv_set(decay[(size_t)t * ld]);
        for (int i = 0; i < NV; i += G) {
            b16_ldv(v + (size_t)t * ld + n0 + W * i, &x[i], G, HALF);
            for (int g = i; g < i + G; g++) {
                d[g] = gv_mul(gv_sub(x[g], u[g]), vb);
                acc[g] = gv_zero();
                u[g] = gv_zero();
            }
        }
        if (t + 1 < T) { /* the next token's decayed state and u in the same pass */
            const float *kn = kt + ld;
            const gv_t vdn = gv_set(decay[(size_t)(t + 1) * ld]);
            for (int m = 0; m < dk; m++) {
                uint16_t *s = S + (size_t)m * (size_t)dv + n0;
                const gv_t km = gv_set(kt[m]), qm = gv_set(qt[m]), kmn = gv_set(kn[m]);
                for (int i = 0; i < NV; i += G) {
                    b16_ld(s + W * i, &x[i], G, HALF);
                    for (int g = i; g < i + G; g++) x[g] = b16_upd(x[g], km, d[g], vd, qm, &acc[g]);
                    b16_st(s + W * i, &x[i], G, HALF);
                    for (int g = i; g < i + G; g++) u[g] = gv_fmadd(gv_mul(x[g], vdn), kmn, u[g]);
                }
            }
        } else {
            for (int m = 0; m < dk; m++) {
                uint16_t *s = S + (size_t)m * (size_t)dv + n0;
                const gv_t km = gv_set(kt[m]), qm = gv_set(qt[m]);
                for (int i = 0; i < NV; i += G) {
                    b16_ld(s + W * i, &x[i], G, HALF);
                    for (int g = i; g < i + G; g++) x[g] = b16_upd(x[g], km, d[g], vd, qm, &acc[g]);
                    b16_st(s + W * i, &x[i], G, HALF);
                }
            }
        }
        for (int i = 0; i < NV; i += G) b16_sto(o + (size_t)t * ldo + n0 + W * i, &acc[i], G, HALF);
    }
}

void GDN_STEP_BF16_FN(uint16_t *S, const float *q, const float *k, const float *v,
                      const float *decay, const float *beta, size_t ld, float *o, size_t ldo, int T,
                      float *tmp, int dk, int dv) {
    int n = 0;
    for (; n + 4 * GDN_VL <= dv; n += 4 * GDN_VL)
        gdn_block_run_b16(S, q, k, v, decay, beta, ld, o, ldo, T, dk, dv, n, 4, GDN_PAIR ? 2 : 1,
                          0);
    for (; GDN_PAIR && n + 2 * GDN_VL <= dv; n += 2 * GDN_VL)
        gdn_block_run_b16(S, q, k, v, decay, beta, ld, o, ldo, T, dk, dv, n, 2, 2, 0);
    for (; n + GDN_VL <= dv; n += GDN_VL)
        gdn_block_run_b16(S, q, k, v, decay, beta, ld, o, ldo, T, dk, dv, n, 1, 1, 0);
    if (GDN_VL > 8 && n + 8 <= dv) {
        gdn_block_run_b16(S, q, k, v, decay, beta, ld, o, ldo, T, dk, dv, n, 1, 1, 1);
        n += 8;
    }
    if (n < dv) /* fewer than 8 columns: the ref's scalar step */
        for (int t = 0; t < T; t++) {
            size_t r = (size_t)t * ld;
            kern_gdn_cols_bf16(S, q + r, k + r, v + r, decay[r], beta[r], o + (size_t)t * ldo, tmp,
                               dk, dv, n);
        }
}
