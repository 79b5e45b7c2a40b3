/* Full (gated) attention layer over the paged KV pool (docs/model.md §2.3; Qwen3 without the gate,
 * Qwen2 without the gate and the q/k norms).
 *
 * q/k/v projections for all T tokens in one matmul pass; per token: optional biases, q/k
 * RMSNorm per head (when the layer has them), NeoX RoPE on the first rotary_dim dims, K/V written
 * to the token's block; then one work item per (block of consecutive query tokens, KV head) runs
 * online-softmax attention over positions 0..pos of each token's sequence for that KV head's query
 * heads. Positions are visited in tiles of ATT_TILE aligned to absolute position 0 (one rescale per
 * tile), so the result depends neither on the batch nor on the KV block size. */
#include <math.h>
#include <string.h>

#include "base/half.h"
#include "model/fwd_int.h"

#define ATT_TILE 32
#define ATT_QB   16 /* query tokens per work item */

static inline void *kv_at(const cllm_kv_pool *p, int block, int layer, int which, int row) {
    size_t idx =
        (((size_t)block * p->n_layers + (size_t)layer) * 2 + (size_t)which) * p->block_size +
        (size_t)row;
    return (char *)p->data + idx * (size_t)p->kv_dim * p->elem_size;
}

static void rope(float *x, const float *cs, int half) {
    for (int i = 0; i < half; i++) {
        float a = x[i], b = x[i + half], co = cs[i], si = cs[half + i];
        x[i] = a * co - b * si;
        x[i + half] = b * co + a * si;
    }
}

typedef struct attn_job {
    cllm_fwd_ctx *c;
    const fwd_attn_w *w;
    int sub;      /* KV pool layer */
    int ldp;      /* floats per token in c->proj */
    bool kv_only; /* fwd_attention_kv: no queries (c->proj's q part is not written) */
} attn_job;

static void qk_rope_kv_worker(void *vj, size_t b, size_t e, int tid) {
    attn_job *j = vj;
    cllm_fwd_ctx *c = j->c;
    const cllm_model *m = c->m;
    const cllm_config *f = &m->cfg;
    const fwd_attn_w *w = j->w;
    int hd = f->head_dim, qs = f->attn_output_gate ? 2 * hd : hd, half = f->rotary_dim / 2;
    float eps = (float)f->rms_norm_eps;
    cllm_kv_pool *kv = c->kv;
    for (size_t t = b; t < e; t++) {
        float *Q = c->proj + t * j->ldp, *K = Q + m->q_rows, *V = K + m->kv_dim;
        if (w->q_bias) {
            for (int i = 0; i < m->q_rows && !j->kv_only; i++) Q[i] += w->q_bias[i];
            for (int i = 0; i < m->kv_dim; i++) K[i] += w->k_bias[i], V[i] += w->v_bias[i];
        }
        const float *cs = c->rope_cs + t * f->rotary_dim;
        for (int h = 0; h < f->n_heads && !j->kv_only; h++) {
            float *qh = Q + (size_t)h * qs;
            if (w->q_norm) fwd_rmsnorm(qh, qh, w->q_norm, hd, eps);
            rope(qh, cs, half);
        }
        for (int h = 0; h < f->n_kv_heads; h++) {
            float *kh = K + (size_t)h * hd;
            if (w->k_norm) fwd_rmsnorm(kh, kh, w->k_norm, hd, eps);
            rope(kh, cs, half);
        }
        const cllm_seq_batch *sq = &c->batch->seqs[c->tok_seq[t]];
        int pos = c->tok_pos[t], blk = sq->block_table[pos / kv->block_size],
            row = pos % kv->block_size;
        void *kd = kv_at(kv, blk, j->sub, 0, row), *vdst = kv_at(kv, blk, j->sub, 1, row);
        if (kv->dtype == CLLM_KV_F32) {
            memcpy(kd, K, (size_t)m->kv_dim * 4);
            memcpy(vdst, V, (size_t)m->kv_dim * 4);
        } else {
            cllm_f32_to_bf16_row(K, kd, (size_t)m->kv_dim);
            cllm_f32_to_bf16_row(V, vdst, (size_t)m->kv_dim);
        }
    }
}

/* K or V head slice of position p as fp32 (points into the pool, or converted into buf). */
static const float *kv_row(const cllm_kv_pool *kv, const cllm_seq_batch *sq, int layer, int which,
                           int p, int off, int hd, float *buf) {
    const void *r =
        kv_at(kv, sq->block_table[p / kv->block_size], layer, which, p % kv->block_size);
    if (kv->dtype == CLLM_KV_F32) return (const float *)r + off;
    cllm_bf16_to_f32_row((const uint16_t *)r + off, buf, (size_t)hd);
    return buf;
}

size_t fwd_attn_scratch(const cllm_config *f) {
    if (f->n_kv_heads <= 0) return 0;
    size_t group = (size_t)(f->n_heads / f->n_kv_heads), hd = (size_t)f->head_dim;
    return 2 * (size_t)ATT_TILE * hd + ATT_QB * group * (ATT_TILE + 2 * hd + 3); /* attn_worker */
}

/* Rows [0, rows) of one tile (a row = one query head of one token) that all see its first n
 * positions, scores in sc: the online-softmax update (the running max, the correction of l and
 * acc), the scores turned into weights, then acc += P V in one GEMM (its per-element sequence
 * depends on n only, not on rows). */
static void tile_update(const cllm_kern_ops *k, float *sc, float *acc, float *mx, float *l,
                        float *corr, int rows, int n, int hd, float scale, const float *vt) {
    for (int r = 0; r < rows; r++) {
        float *sh = sc + (size_t)r * ATT_TILE, tmx = -INFINITY;
        for (int i = 0; i < n; i++) {
            sh[i] *= scale;
            if (sh[i] > tmx) tmx = sh[i];
        }
        float nmx = tmx > mx[r] ? tmx : mx[r];
        corr[r] = expf(mx[r] - nmx); /* 0 on the first tile (mx = -inf) */
        l[r] *= corr[r];
        for (int i = 0; i < n; i++) { /* the score becomes its weight */
            sh[i] = expf(sh[i] - nmx);
            l[r] += sh[i];
        }
        mx[r] = nmx;
        float *ah = acc + (size_t)r * hd;
        for (int d = 0; d < hd; d++) ah[d] *= corr[r];
    }
    k->gemm_f32(rows, hd, n, sc, ATT_TILE, vt, (size_t)hd, acc, (size_t)hd, CLLM_GEMM_ADD);
}

/* One item per (query block, KV head): a block is up to ATT_QB consecutive positions of one
 * sequence in this batch (fwd_attention), each with the query heads sharing that KV head (8 on
 * Qwen3.5). Positions are visited in tiles of ATT_TILE aligned to absolute position 0. Each
 * tile's K rows are converted (bf16 pools) and its V rows copied contiguous once for the whole
 * block, where one item per token did both per token: at 2048 positions that was ~2 GB of V
 * copies per KV head and layer. Per query the operations are those of a query alone: its scores
 * [group x n] through matmul_f32 straight from the pool's K rows (fp32; split at KV blocks, which
 * matmul_f32 allows) or the converted tile, its own n positions of each tile (the diagonal tiles:
 * fewer than ATT_TILE), and the softmax update + P V of tile_update, where the queries that see a
 * whole tile share one GEMM. So a result depends neither on the batch, the block a query falls
 * in, the chunking of the prompt nor the KV block size. Scratch: kt, vt [ATT_TILE][hd], then per
 * row (ATT_QB x group) sc [ATT_TILE], acc [hd], mx, l, corr, and the block's query rows copied
 * contiguous [hd] (one matmul_f32 call takes the whole-tile queries' scores). */
static void attn_worker(void *vj, size_t b, size_t e, int tid) {
    attn_job *j = vj;
    cllm_fwd_ctx *c = j->c;
    const cllm_model *m = c->m;
    const cllm_config *f = &m->cfg;
    const cllm_kern_ops *k = c->k;
    const cllm_kv_pool *kv = c->kv;
    int hd = f->head_dim, nkv = f->n_kv_heads, qs = f->attn_output_gate ? 2 * hd : hd;
    int group = f->n_heads / nkv, bs = kv->block_size, L = j->sub;
    bool f32 = kv->dtype == CLLM_KV_F32;
    float scale = (float)(1.0 / sqrt((double)hd));
    size_t RM = (size_t)ATT_QB * group;
    float *kt = c->thr + (size_t)tid * c->thr_stride, *vt = kt + (size_t)ATT_TILE * hd;
    float *sc = vt + (size_t)ATT_TILE * hd, *acc = sc + RM * ATT_TILE;
    float *mx = acc + RM * hd, *l = mx + RM, *corr = l + RM, *qb = corr + RM;
    for (size_t it = b; it < e; it++) {
        int blk = (int)(it / (size_t)nkv), g = (int)(it % (size_t)nkv);
        int t0 = c->att_blk[blk], nq = c->att_blk[blk + 1] - t0;
        const cllm_seq_batch *sq = &c->batch->seqs[c->tok_seq[t0]];
        int pos0 = c->tok_pos[t0], last = pos0 + nq - 1, R = nq * group;
        for (int r = 0; r < R; r++) mx[r] = -INFINITY, l[r] = 0.0f;
        for (size_t i = 0; i < (size_t)R * hd; i++) acc[i] = 0.0f;
        for (int r = 0; r < R; r++) /* the block's query rows contiguous: one scores call */
            memcpy(qb + (size_t)r * hd,
                   c->proj + (size_t)(t0 + r / group) * j->ldp +
                       (size_t)(g * group + r % group) * qs,
                   (size_t)hd * sizeof(float));
        for (int p0 = 0; p0 <= last; p0 += ATT_TILE) {
            int nt = last + 1 - p0 < ATT_TILE ? last + 1 - p0 : ATT_TILE; /* rows any query sees */
            if (!f32)
                for (int i = 0; i < nt; i++)
                    kv_row(kv, sq, L, 0, p0 + i, g * hd, hd, kt + (size_t)i * hd);
            for (int i = 0; i < nt; i++) {
                float *vd = vt + (size_t)i * hd;
                const float *vr = kv_row(kv, sq, L, 1, p0 + i, g * hd, hd, vd);
                if (vr != vd) memcpy(vd, vr, (size_t)hd * sizeof(float));
            }
            int qa = nq; /* queries [qa, nq) see the whole tile */
            for (int q = 0; q < nq && qa == nq; q++)
                if (pos0 + q + 1 - p0 >= ATT_TILE) qa = q;
            /* scores: each diagonal query alone over its n rows, the rest in one call */
            for (int q = 0; q <= qa && q < nq; q++) {
                int n = q < qa ? pos0 + q + 1 - p0 : ATT_TILE;
                int rows = q < qa ? group : (nq - qa) * group;
                if (n <= 0) continue;
                const float *q0 = qb + (size_t)q * group * hd;
                float *sq0 = sc + (size_t)q * group * ATT_TILE;
                if (f32) { /* K rows in place: one call per run of the tile inside one KV block */
                    for (int i = 0; i < n;) {
                        int p = p0 + i, seg = bs - p % bs < n - i ? bs - p % bs : n - i;
                        const float *kr =
                            (const float *)kv_at(kv, sq->block_table[p / bs], L, 0, p % bs) +
                            g * hd;
                        k->matmul_f32(kr, (size_t)kv->kv_dim, seg, q0, (size_t)hd, rows, hd,
                                      sq0 + i, ATT_TILE);
                        i += seg;
                    }
                } else {
                    k->matmul_f32(kt, (size_t)hd, n, q0, (size_t)hd, rows, hd, sq0, ATT_TILE);
                }
            }
            for (int q = 0; q < qa; q++) { /* the diagonal: each query its own n */
                int n = pos0 + q + 1 - p0;
                if (n <= 0) continue;
                size_t r0 = (size_t)q * group;
                tile_update(k, sc + r0 * ATT_TILE, acc + r0 * hd, mx + r0, l + r0, corr + r0, group,
                            n, hd, scale, vt);
            }
            if (qa < nq) {
                size_t r0 = (size_t)qa * group;
                tile_update(k, sc + r0 * ATT_TILE, acc + r0 * hd, mx + r0, l + r0, corr + r0,
                            (nq - qa) * group, ATT_TILE, hd, scale, vt);
            }
        }
        for (int q = 0; q < nq; q++)
            for (int h = 0; h < group; h++) {
                size_t r = (size_t)q * group + h;
                const float *qv =
                    c->proj + (size_t)(t0 + q) * j->ldp + (size_t)(g * group + h) * qs;
                const float *ah = acc + r * hd;
                float *o = c->o + (size_t)(t0 + q) * (size_t)(f->n_heads * hd) +
                           (size_t)(g * group + h) * hd;
                float inv = 1.0f / l[r];
                if (f->attn_output_gate) {
                    const float *gate = qv + hd;
                    for (int i = 0; i < hd; i++) o[i] = ah[i] * inv * fwd_sigmoid(gate[i]);
                } else {
                    for (int i = 0; i < hd; i++) o[i] = ah[i] * inv;
                }
            }
    }
}

cllm_status fwd_attention(cllm_fwd_ctx *c, const fwd_attn_w *w, int sub, int T) {
    const cllm_model *m = c->m;
    const cllm_config *f = &m->cfg;
    int H = f->hidden_size;
    attn_job j = {c, w, sub, m->q_rows + 2 * m->kv_dim, false};
    if (fwd_mm_add(c, &w->q, c->xn, H, T, c->proj, j.ldp) ||
        fwd_mm_add(c, &w->k, c->xn, H, T, c->proj + m->q_rows, j.ldp) ||
        fwd_mm_add(c, &w->v, c->xn, H, T, c->proj + m->q_rows + m->kv_dim, j.ldp) || fwd_mm_run(c))
        return CLLM_ENOMEM;
    cllm_pool_for(c->pool, (size_t)T, qk_rope_kv_worker, &j);
    /* query blocks: runs of consecutive positions of one sequence, at most ATT_QB tokens */
    int nb = 0;
    for (int t = 0; t < T; t++)
        if (!t || c->tok_seq[t] != c->tok_seq[t - 1] || c->tok_pos[t] != c->tok_pos[t - 1] + 1 ||
            t - c->att_blk[nb - 1] == ATT_QB)
            c->att_blk[nb++] = t;
    c->att_blk[nb] = T;
    /* handed out one at a time: a later position's item has more tiles (a static split gave the
     * second thread the prompt's expensive half) */
    cllm_pool_for_dyn(c->pool, (size_t)nb * f->n_kv_heads, attn_worker, &j);
    if (fwd_mm_add(c, &w->o, c->o, (size_t)f->n_heads * f->head_dim, T, c->tmp, H) || fwd_mm_run(c))
        return CLLM_ENOMEM;
    size_t n = (size_t)T * H;
    for (size_t i = 0; i < n; i++) c->x[i] += c->tmp[i];
    return CLLM_OK;
}

cllm_status fwd_attention_kv(cllm_fwd_ctx *c, const fwd_attn_w *w, int sub, int T) {
    const cllm_model *m = c->m;
    int H = m->cfg.hidden_size;
    /* the same matmuls, norms and rotation of each row as fwd_attention's (batch-invariant
     * kernels): the K/V written are its bits */
    attn_job j = {c, w, sub, m->q_rows + 2 * m->kv_dim, true};
    if (fwd_mm_add(c, &w->k, c->xn, H, T, c->proj + m->q_rows, j.ldp) ||
        fwd_mm_add(c, &w->v, c->xn, H, T, c->proj + m->q_rows + m->kv_dim, j.ldp) || fwd_mm_run(c))
        return CLLM_ENOMEM;
    cllm_pool_for(c->pool, (size_t)T, qk_rope_kv_worker, &j);
    return CLLM_OK;
}
