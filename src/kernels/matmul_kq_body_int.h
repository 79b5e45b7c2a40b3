/* Private: matmul_kq (kernels.h) on the panel form (kernels/matmul_kq_panel.c), written once over
 * a small vector shim and compiled into each x86 tier by a file that defines the shim, then
 * includes this (kernels/x86/matmul_kq_avx2.c: 8 lanes, vpmaddwd + vpaddd; matmul_kq_avx512.c:
 * 16 lanes, vpdpwssd with VNNI).
 *
 * Output rows are vector lanes: one load of a panel's code word holds a code pair of each of its
 * 16 rows, against the broadcast int32 word of the matching activation pair, so a unit's exact
 * int32 sum isum lands in its row's lane with no horizontal reduction. The contract's eight float
 * lanes L[u % 8] (kernels.h) are walked one class at a time (the panel stores each class's units
 * together), each row's L[j] updated by fma(ws_u * s, (float)isum, L[j]) then, with a min,
 * fma(-(wm_u * s), (float)asum, L[j]) in unit order, and Y = the contract's tree of the eight: the
 * ref's operations on the ref's values, so every tier is bitwise the ref. Codes are |c| <= 127 and
 * activations |a| <= 32767: no pair product saturates vpmaddwd.
 *
 * Shim: KV_W lanes; kv_i, kv_f; kv_izero, kv_dot(acc, u, w32) (acc + pair products of u with the
 * broadcast word), kv_iadd, kv_isub, kv_iset, kv_or, kv_load4(p, v) (32-bit lanes v KV_W.. of
 * the 64-byte word p), kv_pairs4(x, j) ((x >> 4j) & 0x000F000F), kv_hi2(x, j) (bits 2j.. of each
 * half moved to bits 4..5: (x >> 2j << 4) & 0x00300030), kv_codes8(p, v) (bytes 2 KV_W v.. of p
 * sign-extended to int16), kv_scale(p, v) ((float) of int8 p[v KV_W + i]), kv_fzero, kv_fload,
 * kv_fstore, kv_fset, kv_cvt, kv_mul, kv_add, kv_fmadd(a, b, c) (a b + c fused), kv_fnmadd (c - a b
 * fused), KV_TT (most tokens per tile). */
#if !defined(KV_W) || !defined(KV_TT)
#error "define the kq shim (KV_W, kv_*, KV_TT) before including this (kernels/x86/)"
#endif
#include <math.h>
#include <stdint.h>

#include "kernels/kern_int.h"

#define KQ_AI __attribute__((always_inline)) static inline
#define KV_NV (16 / KV_W)
#ifndef KQ_PF
#define KQ_PF 2048 /* prefetch distance in code bytes (one token) */
#endif

typedef struct {
    const int32_t *aw; /* code pairs [K / 2] */
    const float *su;   /* unit scales [U] */
    const int32_t *au; /* unit code sums [U] */
} kq_tok;

/* Tokens A[0..TT) against panel P: out[(t * 8 + j) * 16 + r] = row r's L[j]. */
KQ_AI void kq_tile(const kern_kq_geo_t *g, const uint8_t *P, const kq_tok *A, float *out,
                   const int CW, const int MIN, const int TT, const int VNNI) {
    const int U = g->U, G = g->G;
    const int8_t *sc = (const int8_t *)(P + g->sc), *mn = (const int8_t *)(P + g->mn);
    const float *d = (const float *)(const void *)(P + g->d),
                *dm = (const float *)(const void *)(P + g->dm);
    const uint8_t *cp = P;
    if (TT == 1) /* the scales, read from the first class on, sit behind the codes */
        for (size_t o = g->sc; o < g->bytes; o += 64) kv_prefetch(P + o);
    for (int j = 0; j < 8; j++) {
        kv_f L[KV_TT][KV_NV];
        for (int t = 0; t < TT; t++)
            for (int v = 0; v < KV_NV; v++) L[t][v] = kv_fzero();
        for (int u = j; u < U; u += 8, cp += g->unit_bytes) {
            kv_i acc[KV_TT][KV_NV], acc1[KV_NV];
            for (int t = 0; t < TT; t++)
                for (int v = 0; v < KV_NV; v++) acc[t][v] = kv_izero();
            for (int v = 0; v < KV_NV; v++) acc1[v] = kv_izero();
            if (TT == 1) /* decode streams the panel once: ahead of the hardware prefetcher */
                for (size_t o = 0; o < g->unit_bytes; o += 64) kv_prefetch(cp + KQ_PF + o);
            for (int p = 0; p < 8; p++) {
                kv_i wv[KV_NV];
                for (int v = 0; v < KV_NV; v++)
                    wv[v] = CW == 8   ? kv_codes8(cp + 32 * p, v)
                            : CW == 4 ? kv_pairs4(kv_load4(cp + 64 * (p / 4), v), p % 4)
                                      : kv_or(kv_pairs4(kv_load4(cp + 64 * (p / 4), v), p % 4),
                                              kv_hi2(kv_load4(cp + 128, v), p));
                for (int t = 0; t < TT; t++) {
                    const int32_t a = A[t].aw[8 * u + p];
                    for (int v = 0; v < KV_NV; v++) {
                        if (TT == 1 && (p & 1)) /* one token: two chains, exact sums */
                            acc1[v] = kv_dot(acc1[v], wv[v], a, VNNI);
                        else
                            acc[t][v] = kv_dot(acc[t][v], wv[v], a, VNNI);
                    }
                }
            }
            kv_f ws[KV_NV], wm[KV_NV];
            for (int v = 0; v < KV_NV; v++) {
                ws[v] = kv_mul(kv_scale(sc + (u / G) * 16, v),
                               kv_fload(d + (u >> g->dsh) * 16 + v * KV_W));
                if (MIN)
                    wm[v] = kv_mul(kv_scale(mn + (u / G) * 16, v),
                                   kv_fload(dm + (u >> g->dsh) * 16 + v * KV_W));
            }
            for (int t = 0; t < TT; t++) {
                const kv_f s = kv_fset(A[t].su[u]);
                for (int v = 0; v < KV_NV; v++) {
                    kv_i is = TT == 1 ? kv_iadd(acc[t][v], acc1[v]) : acc[t][v];
                    if (CW == 6) is = kv_isub(is, kv_iset(32 * A[t].au[u])); /* codes q - 32 */
                    L[t][v] = kv_fmadd(kv_mul(ws[v], s), kv_cvt(is), L[t][v]);
                    if (MIN)
                        L[t][v] = kv_fnmadd(kv_mul(wm[v], s), kv_fset((float)A[t].au[u]), L[t][v]);
                }
            }
        }
        for (int t = 0; t < TT; t++)
            for (int v = 0; v < KV_NV; v++) kv_fstore(out + (t * 8 + j) * 16 + v * KV_W, L[t][v]);
    }
}

/* Rows [n0, n1) of panel-form w for n_tok prepared tokens. */
KQ_AI void kq_panel_core(const cllm_kqweight *w, int n0, int n1, const char *toks, size_t tb,
                         int n_tok, float *Y, size_t ldy, const int CW, const int MIN,
                         const int VNNI) {
    kern_kq_geo_t g;
    kern_kq_geo(w->type, w->K, &g);
    const int K = w->K, U = g.U;
    float out[KV_TT * 8 * 16], y[16];
    for (int pn = n0 / 16; pn * 16 < n1; pn++) {
        const uint8_t *P = w->data + (size_t)pn * g.bytes;
        const int r0 = n0 > pn * 16 ? n0 - pn * 16 : 0, r1 = n1 < pn * 16 + 16 ? n1 - pn * 16 : 16;
        for (int t0 = 0; t0 < n_tok; t0 += KV_TT) {
            const int TT = n_tok - t0 < KV_TT ? n_tok - t0 : KV_TT;
            kq_tok A[KV_TT];
            for (int t = 0; t < TT; t++) {
                const char *p = toks + (size_t)(t0 + t) * tb;
                A[t].aw = (const int32_t *)(const void *)p;
                A[t].su = (const float *)(const void *)(p + 2 * (size_t)K);
                A[t].au = (const int32_t *)(const void *)(A[t].su + U);
            }
            switch (TT) {
#if KV_TT >= 8
            case 8:
                kq_tile(&g, P, A, out, CW, MIN, 8, VNNI);
                break;
            case 7:
                kq_tile(&g, P, A, out, CW, MIN, 7, VNNI);
                break;
            case 6:
                kq_tile(&g, P, A, out, CW, MIN, 6, VNNI);
                break;
            case 5:
                kq_tile(&g, P, A, out, CW, MIN, 5, VNNI);
                break;
#endif
#if KV_TT >= 4
            case 4:
                kq_tile(&g, P, A, out, CW, MIN, 4, VNNI);
                break;
            case 3:
                kq_tile(&g, P, A, out, CW, MIN, 3, VNNI);
                break;
#endif
            case 2:
                kq_tile(&g, P, A, out, CW, MIN, 2, VNNI);
                break;
            default:
                kq_tile(&g, P, A, out, CW, MIN, 1, VNNI);
                break;
            }
            for (int t = 0; t < TT; t++) {
                const float *o = out + t * 8 * 16;
                for (int v = 0; v < KV_NV; v++) {
#define KQ_L(j) kv_fload(o + (j)*16 + v * KV_W)
                    kv_f s = kv_add(kv_add(kv_add(KQ_L(0), KQ_L(1)), kv_add(KQ_L(2), KQ_L(3))),
                                    kv_add(kv_add(KQ_L(4), KQ_L(5)), kv_add(KQ_L(6), KQ_L(7))));
#undef KQ_L
                    kv_fstore(y + v * KV_W, s);
                }
                float *yt = Y + (size_t)(t0 + t) * ldy + (size_t)pn * 16;
                for (int r = r0; r < r1; r++) yt[r] = y[r];
            }
        }
    }
}

/* The tier's entry for panel-form weights: activations as kern_kq_tokens gives them. */
KQ_AI void kq_panel_run(const cllm_kqweight *w, int n0, int n1, const float *X, size_t ldx,
                        const void *A, int n_tok, float *Y, size_t ldy, const int VNNI) {
    kern_kq_work k;
    if (kern_kq_scratch(w, A ? 0 : n_tok, &k)) {
        for (int t = 0; t < n_tok; t++)
            for (int n = n0; n < n1; n++) Y[(size_t)t * ldy + n] = NAN;
        return;
    }
    const char *toks = kern_kq_tokens(w, X, ldx, A, n_tok, &k);
    const size_t tb = cllm_kq_act_bytes(w->K, 1);
    const int base = w->type & ~(CLLM_KQ_PANEL | CLLM_KQ_D128);
    if (base == CLLM_KQ_Q4_K)
        kq_panel_core(w, n0, n1, toks, tb, n_tok, Y, ldy, 4, 1, VNNI);
    else if (base == CLLM_KQ_Q5_K)
        kq_panel_core(w, n0, n1, toks, tb, n_tok, Y, ldy, 8, 1, VNNI);
    else if (base == CLLM_KQ_Q6_K)
        kq_panel_core(w, n0, n1, toks, tb, n_tok, Y, ldy, 6, 0, VNNI);
    else
        kq_panel_core(w, n0, n1, toks, tb, n_tok, Y, ldy, 8, 0, VNNI);
}
