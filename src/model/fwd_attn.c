/* Full (gated) attention layer over the paged KV pool (docs/model.md §2.3; Qwen3 without the gate).
 *
 * q/k/v projections for all T tokens in one matmul pass; per token: optional biases, q/k
 * RMSNorm per head, NeoX RoPE on the first rotary_dim dims, K/V written to the token's block;
 * then one work item per (token, KV head) runs online-softmax attention over positions 0..pos of
 * its sequence for that KV head's query heads. Positions are visited in tiles of ATT_TILE aligned
 * to absolute position 0 (one rescale per tile), so the result depends neither on the batch nor
 * on the KV block size. */
#include <math.h>
#include <string.h>

#include "base/half.h"
#include "model/fwd_int.h"

#define ATT_TILE 32

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
    const fwd_layer *L;
    int ldp; /* floats per token in c->proj */
} attn_job;

static void qk_rope_kv_worker(void *vj, size_t b, size_t e, int tid) {
    attn_job *j = vj;
    cllm_fwd_ctx *c = j->c;
    const cllm_model *m = c->m;
    const cllm_config *f = &m->cfg;
    const fwd_layer *L = j->L;
    int hd = f->head_dim, qs = f->attn_output_gate ? 2 * hd : hd, half = f->rotary_dim / 2;
    float eps = (float)f->rms_norm_eps;
    cllm_kv_pool *kv = c->kv;
    for (size_t t = b; t < e; t++) {
        float *Q = c->proj + t * j->ldp, *K = Q + m->q_rows, *V = K + m->kv_dim;
        if (L->q_bias) {
            for (int i = 0; i < m->q_rows; i++) Q[i] += L->q_bias[i];
            for (int i = 0; i < m->kv_dim; i++) K[i] += L->k_bias[i], V[i] += L->v_bias[i];
        }
        const float *cs = c->rope_cs + t * f->rotary_dim;
        for (int h = 0; h < f->n_heads; h++) {
            float *qh = Q + (size_t)h * qs;
            fwd_rmsnorm(qh, qh, L->q_norm, hd, eps);
            rope(qh, cs, half);
        }
        for (int h = 0; h < f->n_kv_heads; h++) {
            float *kh = K + (size_t)h * hd;
            fwd_rmsnorm(kh, kh, L->k_norm, hd, eps);
            rope(kh, cs, half);
        }
        const cllm_seq_batch *sq = &c->batch->seqs[c->tok_seq[t]];
        int pos = c->tok_pos[t], blk = sq->block_table[pos / kv->block_size],
            row = pos % kv->block_size;
        void *kd = kv_at(kv, blk, L->sub, 0, row), *vdst = kv_at(kv, blk, L->sub, 1, row);
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
    return 2 * (size_t)ATT_TILE * hd + group * (ATT_TILE + hd + 3); /* see attn_worker */
}

/* One item per (token, KV head): the query heads sharing that KV head (8 on Qwen3.5) take each
 * tile of ATT_TILE positions together: scores [group x tile] through matmul_f32 (the K rows as the
 * weight rows, the group's queries as its tokens) straight from the pool's K rows (fp32 pools;
 * bf16 rows are converted once into a tile), then after the per-head online-softmax update acc
 * [group x hd] = acc * corr + P V through gemm_f32 over the tile's V rows copied contiguous. Each
 * K/V row is read once for all of the group's heads, where a dot / axpy call per head and position
 * read it 8 times. Scratch: kt, vt [ATT_TILE][hd], sc [group][ATT_TILE], acc [group][hd], mx, l,
 * corr [group]. The tiles are
 * aligned to absolute position 0, the scores are split only along positions (their per-element
 * sequence depends on hd alone) and the V GEMM runs over the whole tile, so a result depends
 * neither on the batch, the chunking of the prompt nor the KV block size. */
static void attn_worker(void *vj, size_t b, size_t e, int tid) {
    attn_job *j = vj;
    cllm_fwd_ctx *c = j->c;
    const cllm_model *m = c->m;
    const cllm_config *f = &m->cfg;
    const cllm_kern_ops *k = c->k;
    const cllm_kv_pool *kv = c->kv;
    int hd = f->head_dim, nkv = f->n_kv_heads, qs = f->attn_output_gate ? 2 * hd : hd;
    int group = f->n_heads / nkv, bs = kv->block_size, L = j->L->sub;
    bool f32 = kv->dtype == CLLM_KV_F32;
    float scale = (float)(1.0 / sqrt((double)hd));
    float *kt = c->thr + (size_t)tid * c->thr_stride, *vt = kt + (size_t)ATT_TILE * hd;
    float *sc = vt + (size_t)ATT_TILE * hd, *acc = sc + (size_t)group * ATT_TILE;
    float *mx = acc + (size_t)group * hd, *l = mx + group, *corr = l + group;
    for (size_t it = b; it < e; it++) {
        size_t t = it / (size_t)nkv;
        int g = (int)(it % (size_t)nkv);
        const float *q0 = c->proj + t * j->ldp + (size_t)g * group * qs;
        const cllm_seq_batch *sq = &c->batch->seqs[c->tok_seq[t]];
        int pos = c->tok_pos[t];
        for (int h = 0; h < group; h++) mx[h] = -INFINITY, l[h] = 0.0f;
        for (size_t i = 0; i < (size_t)group * hd; i++) acc[i] = 0.0f;
        for (int p0 = 0; p0 <= pos; p0 += ATT_TILE) {
            int n = pos + 1 - p0 < ATT_TILE ? pos + 1 - p0 : ATT_TILE;
            if (f32) { /* K rows in place: one GEMM per run of the tile inside one KV block */
                for (int i = 0; i < n;) {
                    int p = p0 + i, seg = bs - p % bs < n - i ? bs - p % bs : n - i;
                    const float *kr =
                        (const float *)kv_at(kv, sq->block_table[p / bs], L, 0, p % bs) + g * hd;
                    k->matmul_f32(kr, (size_t)kv->kv_dim, seg, q0, (size_t)qs, group, hd, sc + i,
                                  ATT_TILE);
                    i += seg;
                }
            } else {
                for (int i = 0; i < n; i++)
                    kv_row(kv, sq, L, 0, p0 + i, g * hd, hd, kt + (size_t)i * hd);
                k->matmul_f32(kt, (size_t)hd, n, q0, (size_t)qs, group, hd, sc, ATT_TILE);
            }
            for (int i = 0; i < n; i++) {
                float *vd = vt + (size_t)i * hd;
                const float *vr = kv_row(kv, sq, L, 1, p0 + i, g * hd, hd, vd);
                if (vr != vd) memcpy(vd, vr, (size_t)hd * sizeof(float));
            }
            for (int h = 0; h < group; h++) {
                float *sh = sc + h * ATT_TILE, tmx = -INFINITY;
                for (int i = 0; i < n; i++) {
                    sh[i] *= scale;
                    if (sh[i] > tmx) tmx = sh[i];
                }
                float nmx = tmx > mx[h] ? tmx : mx[h];
                corr[h] = expf(mx[h] - nmx); /* 0 on the first tile (mx = -inf) */
                l[h] *= corr[h];
                for (int i = 0; i < n; i++) { /* the score becomes its weight */
                    sh[i] = expf(sh[i] - nmx);
                    l[h] += sh[i];
                }
                mx[h] = nmx;
                float *ah = acc + (size_t)h * hd;
                for (int d = 0; d < hd; d++) ah[d] *= corr[h];
            }
            k->gemm_f32(group, hd, n, sc, ATT_TILE, vt, (size_t)hd, acc, (size_t)hd, CLLM_GEMM_ADD);
        }
        for (int h = 0; h < group; h++) {
            const float *q = q0 + (size_t)h * qs, *ah = acc + (size_t)h * hd;
            float *o = c->o + t * (size_t)(f->n_heads * hd) + (size_t)(g * group + h) * hd;
            float inv = 1.0f / l[h];
            if (f->attn_output_gate) {
                const float *gate = q + hd;
                for (int i = 0; i < hd; i++) o[i] = ah[i] * inv * fwd_sigmoid(gate[i]);
            } else {
                for (int i = 0; i < hd; i++) o[i] = ah[i] * inv;
            }
        }
    }
}

cllm_status fwd_attention(cllm_fwd_ctx *c, const fwd_layer *L, int T) {
    const cllm_model *m = c->m;
    const cllm_config *f = &m->cfg;
    int H = f->hidden_size;
    attn_job j = {c, L, m->q_rows + 2 * m->kv_dim};
    if (fwd_mm_add(c, &L->q, c->xn, H, T, c->proj, j.ldp) ||
        fwd_mm_add(c, &L->k, c->xn, H, T, c->proj + m->q_rows, j.ldp) ||
        fwd_mm_add(c, &L->v, c->xn, H, T, c->proj + m->q_rows + m->kv_dim, j.ldp) || fwd_mm_run(c))
        return CLLM_ENOMEM;
    cllm_pool_for(c->pool, (size_t)T, qk_rope_kv_worker, &j);
    /* handed out one at a time: a later position's item has more tiles (a static split gave the
     * second thread the prompt's expensive half) */
    cllm_pool_for_dyn(c->pool, (size_t)T * f->n_kv_heads, attn_worker, &j);
    if (fwd_mm_add(c, &L->o, c->o, (size_t)f->n_heads * f->head_dim, T, c->tmp, H) || fwd_mm_run(c))
        return CLLM_ENOMEM;
    size_t n = (size_t)T * H;
    for (size_t i = 0; i < n; i++) c->x[i] += c->tmp[i];
    return CLLM_OK;
}
