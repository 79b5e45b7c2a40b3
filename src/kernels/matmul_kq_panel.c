/* The panel form of ggml K-quant matrices (kernels.h, cllm_kq_panel_pack): the lossless repack a
 * GGUF loader does once so that matmul_kq's SIMD tiers stream codes with no per-call decoding, and
 * the row decoder every tier's oracle reads it through (kern_kq_decode_row).
 *
 * A panel holds 16 rows (the last one padded with zero rows). Its parts (kern_kq_geo):
 *   codes: U = K / 16 units of 16 inputs x 16 rows, in visit order: the units of lane class j = u %
 * 8 (the contract's L[u % 8], kernels.h) together, j = 0..7, u ascending within a class, so the
 *     kernel walks one class at a time through one contiguous stream. Per unit, pair p of inputs
 *     (2p, 2p + 1):
 *       4-bit codes (Q4_K): 64-byte word p / 4, row r's 32-bit lane holding c_2p' in bits 4p'..
 *         and c_2p'+1 in bits 16 + 4p'.. for p' = p % 4: (v >> 4p') & 0x000F000F is the pair;
 *       6-bit codes (Q6_K): q = c + 32 (0..63), its low nibble as the 4-bit codes in the unit's
 *         first 128 bytes, its top two bits in a 64-byte word after them, row r's lane holding
 *         those of c_2p in bits 2p.. and of c_2p+1 in bits 16 + 2p.. (the kernel subtracts
 *         32 * asum: the same integer as the signed codes' sum);
 *       8-bit codes (Q5_K, IQ4_XS's codebook values): 32 bytes per pair, row r's two codes at
 *         bytes 2r, 2r + 1 (sign-extended to int16 pairs);
 *   sc: int8 scale codes [U / G][16] (G units per scale: 2 for 32-weight sub-blocks, 1 for Q6_K);
 *   mn: int8 min codes [U / G][16] (Q4_K / Q5_K);
 *   d, dm: float block scales [K / 256][16] (the fp16 d and dmin, exactly); with CLLM_KQ_D128
 *     one per 128 columns [K / 128][16], so that the loader can move 128-column chunks of a
 *     block (a V-head order on the columns: the GDN out_proj) and each keeps its own block's.
 *     (kern_kq_geo's dsh: d entry of unit u = u >> dsh.)
 * Each unit's scale is d * (float)sc and min dm * (float)mn: ggml's products, so decoding a panel
 * row gives the block decoder's bits. */
#include <string.h>

#include "base/half.h"
#include "kernels/kern_int.h"

bool kern_kq_geo(int type, int K, kern_kq_geo_t *g) {
    memset(g, 0, sizeof(*g));
    if (K <= 0 || K % 256) return false;
    switch (type & ~(CLLM_KQ_PANEL | CLLM_KQ_D128)) {
    case CLLM_KQ_Q4_K:
        g->cw = 4, g->G = 2, g->min = true;
        break;
    case CLLM_KQ_Q5_K:
        g->cw = 8, g->G = 2, g->min = true;
        break;
    case CLLM_KQ_Q6_K:
        g->cw = 6, g->G = 1;
        break;
    case CLLM_KQ_IQ4_XS:
        g->cw = 8, g->G = 2;
        break;
    default:
        return false;
    }
    g->dsh = type & CLLM_KQ_D128 ? 3 : 4;
    const size_t U = (size_t)K / 16, NG = U / (size_t)g->G, NB = U >> g->dsh;
    g->U = (int)U;
    g->unit_bytes = (size_t)g->cw * 32; /* 16 rows x 16 codes x cw bits */
    g->sc = U * g->unit_bytes;
    g->mn = g->sc + 16 * NG;
    g->d = g->mn + (g->min ? 16 * NG : 0);
    g->dm = g->d + 64 * NB;
    g->bytes = g->dm + (g->min ? 64 * NB : 0);
    return true;
}

size_t cllm_kq_panel_bytes(int type, int K, int N) {
    kern_kq_geo_t g;
    if (!kern_kq_geo(type, K, &g) || N <= 0) return 0;
    return (size_t)((N + 15) / 16) * g.bytes;
}

/* Row r's 16 codes c of unit u written into panel p (the layout above). */
static void put_unit(const kern_kq_geo_t *g, uint8_t *p, int u, int r, const int8_t *c) {
    uint8_t *cu = p + (size_t)kern_kq_visit(g->U, u) * g->unit_bytes;
    int8_t lo[16];
    if (g->cw == 6) { /* c + 32 as a low nibble (the 4-bit layout) and a 2-bit high plane */
        uint32_t h = 0;
        for (int i = 0; i < 16; i++) {
            lo[i] = (int8_t)((c[i] + 32) & 0xF);
            h |= (uint32_t)((c[i] + 32) >> 4 & 3) << (2 * (i / 2) + 16 * (i % 2));
        }
        memcpy(cu + 128 + 4 * r, &h, 4);
        c = lo;
    }
    if (g->cw == 8) {
        for (int pr = 0; pr < 8; pr++) {
            cu[32 * pr + 2 * r] = (uint8_t)c[2 * pr];
            cu[32 * pr + 2 * r + 1] = (uint8_t)c[2 * pr + 1];
        }
        return;
    }
    for (int half = 0; half < 2; half++) {
        uint32_t v = 0;
        for (int q = 0; q < 4; q++) {
            const int pr = 4 * half + q;
            v |= (uint32_t)(c[2 * pr] & 0xF) << (4 * q) | (uint32_t)(c[2 * pr + 1] & 0xF)
                                                              << (16 + 4 * q);
        }
        memcpy(cu + 64 * half + 4 * r, &v, 4);
    }
}

static int get_code(const kern_kq_geo_t *g, const uint8_t *p, int u, int r, int i) {
    const uint8_t *cu = p + (size_t)kern_kq_visit(g->U, u) * g->unit_bytes;
    const int pr = i / 2, hi = i % 2;
    if (g->cw == 8) return (int8_t)cu[32 * pr + 2 * r + hi];
    const int bit = 4 * (pr % 4) + 16 * hi, hb = 2 * pr + 16 * hi;
    const int lo = (cu[64 * (pr / 4) + 4 * r + bit / 8] >> (bit % 8)) & 0xF;
    if (g->cw == 4) return lo;
    return (lo | ((cu[128 + 4 * r + hb / 8] >> (hb % 8)) & 3) << 4) - 32;
}

/* The integer scale / min codes and fp16 block scales of one block-form 256-block (ggml's
 * layouts, as kern_kq_decode_row reads them). */
static void block_codes(int type, const uint8_t *b, int8_t *c, int *sc, int *mn, float *d,
                        float *dm) {
    uint16_t h;
    float ws[16], wm[16];
    switch (type) {
    case CLLM_KQ_Q4_K:
    case CLLM_KQ_Q5_K: {
        const uint8_t *q = b + 4;
        for (int j = 0; j < 8; j++) {
            sc[j] = j < 4 ? q[j] & 63 : (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
            mn[j] = j < 4 ? q[j + 4] & 63 : (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
        }
        memcpy(&h, b, 2), *d = cllm_f16_to_f32(h);
        memcpy(&h, b + 2, 2), *dm = cllm_f16_to_f32(h);
        break;
    }
    case CLLM_KQ_Q6_K:
        for (int u = 0; u < 16; u++) sc[u] = ((const int8_t *)(b + 192))[u];
        memcpy(&h, b + 208, 2), *d = cllm_f16_to_f32(h);
        break;
    case CLLM_KQ_IQ4_XS: {
        uint16_t sh;
        memcpy(&sh, b + 2, 2);
        for (int ib = 0; ib < 8; ib++)
            sc[ib] = (((b[4 + ib / 2] >> 4 * (ib % 2)) & 0xF) | ((sh >> 2 * ib) & 3) << 4) - 32;
        memcpy(&h, b, 2), *d = cllm_f16_to_f32(h);
        break;
    }
    default:
        break;
    }
    /* the codes through the block decoder: one unpacking of each layout */
    cllm_kqweight one = {b, 0, type, 256, 1};
    one.row_bytes = kern_kq_block_bytes(type);
    kern_kq_decode_row(&one, 0, c, ws, wm);
}

void cllm_kq_panel_pack(int type, int K, const uint8_t *const *rows, int n_rows,
                        const int *chunk_src, uint8_t *dst) {
    kern_kq_geo_t g;
    if (!kern_kq_geo(type, K, &g) || (chunk_src && !(type & CLLM_KQ_D128))) return;
    memset(dst, 0, g.bytes);
    type &= ~(CLLM_KQ_PANEL | CLLM_KQ_D128);
    int8_t *sc = (int8_t *)(dst + g.sc), *mn = (int8_t *)(dst + g.mn);
    float *d = (float *)(void *)(dst + g.d), *dm = (float *)(void *)(dst + g.dm);
    const size_t bb = kern_kq_block_bytes(type);
    const int du = 1 << g.dsh; /* units per d entry: 16, or 8 (D128) */
    for (int r = 0; r < n_rows && r < 16; r++) {
        int8_t c[256];
        int s[16] = {0}, m[16] = {0};
        float db = 0, dmb = 0;
        int last = -1;
        for (int ch = 0; ch < K / 128; ch++) { /* destination 128-column chunks, 8 units */
            const int src = chunk_src ? chunk_src[ch] : ch, b = src / 2, h = src % 2;
            if (b != last) block_codes(type, rows[r] + (size_t)b * bb, c, s, m, &db, &dmb);
            last = b;
            for (int i = 0; i < 8; i++) { /* unit 8 ch + i <- source unit 16 b + 8 h + i */
                const int u = 8 * ch + i, us = 8 * h + i;
                put_unit(&g, dst, u, r, c + 16 * us);
                if (i % g.G == 0) {
                    sc[(u / g.G) * 16 + r] = (int8_t)s[us / g.G];
                    if (g.min) mn[(u / g.G) * 16 + r] = (int8_t)m[us / g.G];
                }
            }
            d[(8 * ch / du) * 16 + r] = db;
            if (g.min) dm[(8 * ch / du) * 16 + r] = dmb;
        }
    }
}

void kern_kq_panel_row(const cllm_kqweight *w, int n, int8_t *c, float *ws, float *wm) {
    kern_kq_geo_t g;
    kern_kq_geo(w->type, w->K, &g);
    const uint8_t *p = w->data + (size_t)(n / 16) * g.bytes;
    const int r = n % 16;
    const int8_t *sc = (const int8_t *)(p + g.sc), *mn = (const int8_t *)(p + g.mn);
    const float *d = (const float *)(const void *)(p + g.d),
                *dm = (const float *)(const void *)(p + g.dm);
    for (int u = 0; u < g.U; u++) {
        const int gi = (u / g.G) * 16 + r, bi = (u >> g.dsh) * 16 + r;
        ws[u] = d[bi] * (float)sc[gi];
        wm[u] = g.min ? dm[bi] * (float)mn[gi] : 0.0f;
        for (int i = 0; i < 16; i++) c[16 * u + i] = (int8_t)get_code(&g, p, u, r, i);
    }
}
