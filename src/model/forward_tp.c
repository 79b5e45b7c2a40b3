/* Tensor-parallel hooks of the forward pass (model/weights_tp.c made the rank's model narrower).
 *
 * Every rank runs the whole layer loop on the same tokens; a block (attention / GDN / MoE /
 * dense MLP) of a rank produces a partial sum of the block's output over its heads or
 * intermediate rows. The layer files add their output into c->x; around each block the loop
 * points c->x at a zeroed accumulator instead (fwd_tp_begin), so the block writes exactly its
 * partial output there (0 + y = y), then fwd_tp_end all-reduces it (rank order, dist.h) and adds
 * it to the residual stream. The layer files need no change and a one-process run takes none of
 * this. lm_head rows are split by vocabulary: each rank computes its rows, and every rank gets
 * the whole row or, when the sampler needs only the best few, the ranks' best few (below), so
 * every rank's sampler sees the same row and makes the same choice. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "dist/dist.h"
#include "model/fwd_int.h"

static cllm_status grow_f(float **p, size_t *cap, size_t n) {
    if (n <= *cap) return CLLM_OK;
    cllm_free_aligned(*p);
    *p = cllm_alloc_aligned(n * sizeof(float));
    *cap = *p ? n : 0;
    return *p ? CLLM_OK : CLLM_ENOMEM;
}

cllm_status fwd_tp_begin(cllm_fwd_ctx *c, int T, float **x_res) {
    size_t n = (size_t)T * (size_t)c->m->cfg.hidden_size;
    if (grow_f(&c->tp_acc, &c->tp_acc_cap, n)) return CLLM_ENOMEM;
    memset(c->tp_acc, 0, n * sizeof(float));
    *x_res = c->x;
    c->x = c->tp_acc;
    return CLLM_OK;
}

cllm_status fwd_tp_end(cllm_fwd_ctx *c, int T, float *x_res) {
    size_t n = (size_t)T * (size_t)c->m->cfg.hidden_size;
    c->x = x_res;
    if (cllm_dist_allreduce_sum(c->tp_acc, n) != CLLM_OK) return CLLM_EIO;
    for (size_t i = 0; i < n; i++) x_res[i] += c->tp_acc[i];
    return CLLM_OK;
}

/* ---- lm_head ----
 * Each rank computes its own vocabulary rows (tp_vsplit), then the ranks exchange what the
 * sampler needs, in one all-gather of the same size on every rank: a row asked for exactly
 * sends the rank's whole slice (vmax floats, padded); a row whose sequence asked for only its
 * best k (cllm_seq_batch.logits_topk: greedy is k = 1, top-k sampling k = top_k) sends the
 * slice's best k as (logit, global id) pairs, about 1 MB -> 16 bytes per rank and token for
 * greedy at a 248k vocabulary. Every rank then holds, for such a row, -inf everywhere except
 * the N * k candidates. The union of the ranks' best k (same order as the sampler's: key =
 * logit * logits_scale descending, then lowest id) holds the row's best k, and every other
 * entry is below them, so the sampler (greedy argmax, or temperature -> top-k -> top-p / min-p
 * -> draw) picks bitwise the same token as from the whole row. A slice holding a NaN is sent
 * again whole (a second all-gather every rank agrees on from the flags), since NaN has no place
 * in that order. cllm_fwd_opts.no_tp_topk (CLLM_TP_TOPK=0) turns the reduction off (A/B checks). */

typedef fwd_tp_pair tp_pair;

/* k of a row's sequence when its reduction pays (the pairs are smaller than the slice). */
static int row_k(const cllm_seq_batch *q, int vmax, bool topk_on) {
    if (q->logits != CLLM_LOGITS_LAST || q->logits_topk <= 0 || !topk_on) return 0;
    return (size_t)q->logits_topk * sizeof(tp_pair) < (size_t)vmax * sizeof(float) ? q->logits_topk
                                                                                   : 0;
}

/* The batch's logits rows in order, as each side of the exchange walks them (what a rank sends,
 * what it takes from every rank's block, which rows go again whole): a row's sequence, its k
 * (row_k; 0: the whole slice) and its place in a rank's block of the all-gather. */
typedef struct tp_rows {
    const cllm_batch *b;
    int vmax;
    bool topk_on;             /* cllm_fwd_opts.no_tp_topk unset */
    int q, left;              /* sequence q, its rows still to come */
    const cllm_seq_batch *sq; /* the row's sequence */
    int row, k;               /* the row's index among the batch's logits rows, its k */
    size_t off, bytes;        /* its byte offset in a rank's block, its bytes there */
} tp_rows;

static tp_rows rows_begin(const cllm_fwd_ctx *c, const cllm_batch *b, int vmax) {
    return (tp_rows){.b = b, .vmax = vmax, .topk_on = !c->m->opts.no_tp_topk, .q = -1, .row = -1};
}

/* Steps to the next row; false past the last, leaving row = the number of rows and off = the
 * bytes of a rank's block. */
static bool rows_next(tp_rows *w) {
    w->off += w->bytes;
    w->bytes = 0;
    w->row++;
    while (w->left <= 0) {
        if (++w->q >= w->b->n_seqs) return false;
        w->sq = &w->b->seqs[w->q];
        w->left = w->sq->logits == CLLM_LOGITS_ALL      ? w->sq->n_tokens
                  : w->sq->logits == CLLM_LOGITS_LAST   ? cllm_seq_last_rows(w->sq)
                  : w->sq->logits == CLLM_LOGITS_HIDDEN ? 1
                                                        : 0;
        w->k = row_k(w->sq, w->vmax, w->topk_on);
    }
    w->left--;
    w->bytes = w->k ? (size_t)w->k * sizeof(tp_pair) : (size_t)w->vmax * sizeof(float);
    return true;
}

void fwd_tp_best_k(const float *row, int n, int v0, float scale, int k, tp_pair *out) {
    float key[CLLM_LOGITS_TOPK_MAX];
    int m = 0;
    bool nan = false;
    for (int j = 0; j < n; j++) {
        float kx = row[j] * scale;
        if (kx != kx) {
            nan = true;
            continue;
        }
        /* ids ascend: an equal key loses to the ones already kept */
        if (m == k && !(kx > key[k - 1])) continue;
        int i = m < k ? m++ : k - 1;
        while (i > 0 && key[i - 1] < kx) {
            key[i] = key[i - 1];
            out[i] = out[i - 1];
            i--;
        }
        key[i] = kx;
        out[i] = (tp_pair){row[j], v0 + j};
    }
    for (int i = m; i < k; i++) out[i] = (tp_pair){-INFINITY, -1};
    if (nan) out[0].id = -2;
}

/* The reduced rows some rank flagged with a NaN (every rank sees the same flags in all):
 * gathered again whole, as if asked for exactly. Rare; plain malloc. */
static cllm_status nan_rows(cllm_fwd_ctx *c, int n_nan, const float *loc, int vmax, const void *all,
                            size_t send, float *logits) {
    const cllm_model *m = c->m;
    const cllm_batch *b = c->batch;
    int V = m->cfg.vocab_size, N = m->tp_size;
    int *rows = malloc((size_t)n_nan * sizeof(int));
    float *buf = malloc((size_t)n_nan * (size_t)vmax * (size_t)(N + 1) * sizeof(float));
    cllm_status st = rows && buf ? CLLM_OK : CLLM_ENOMEM;
    int n = 0;
    for (tp_rows w = rows_begin(c, b, vmax); st == CLLM_OK && rows_next(&w);) {
        const unsigned char *src = (const unsigned char *)all + w.off; /* rank r's: + r * send */
        bool nan = false;
        for (int r = 0; w.k && r < N; r++)
            nan |= ((const tp_pair *)(src + (size_t)r * send))->id == -2;
        if (nan && n < n_nan) {
            memcpy(buf + (size_t)n * vmax, loc + (size_t)w.row * vmax,
                   (size_t)vmax * sizeof(float));
            rows[n++] = w.row;
        }
    }
    size_t mine = (size_t)n * (size_t)vmax;
    if (st == CLLM_OK && cllm_dist_allgather(buf, mine * sizeof(float), buf + mine) != CLLM_OK)
        st = CLLM_EIO;
    for (int i = 0; st == CLLM_OK && i < n; i++)
        for (int r = 0; r < N; r++)
            memcpy(logits + (size_t)rows[i] * V + m->tp_vsplit[2 * r],
                   buf + mine + (size_t)r * mine + (size_t)i * vmax,
                   (size_t)m->tp_vsplit[2 * r + 1] * sizeof(float));
    free(rows);
    free(buf);
    return st;
}

bool fwd_tp_put_k(float *row, int V, const fwd_tp_pair *p, int k) {
    for (int j = 0; j < k; j++)
        if (p[j].id >= 0 && p[j].id < V) row[p[j].id] = p[j].x;
    return p[0].id == -2;
}

cllm_status fwd_tp_lm_head(cllm_fwd_ctx *c, int R, float *logits) {
    const cllm_model *m = c->m;
    const cllm_batch *b = c->batch;
    int V = m->cfg.vocab_size, N = m->tp_size, H = m->cfg.hidden_size, vmax = 0;
    int v0 = m->tp_vsplit[2 * m->tp_rank], nv = m->tp_vsplit[2 * m->tp_rank + 1];
    for (int r = 0; r < N; r++)
        vmax = m->tp_vsplit[2 * r + 1] > vmax ? m->tp_vsplit[2 * r + 1] : vmax;
    /* bytes each rank sends: per row a whole slice or k pairs */
    tp_rows w = rows_begin(c, b, vmax);
    while (rows_next(&w)) continue;
    if (w.row != R) return CLLM_EINVAL;
    size_t mine = (size_t)R * (size_t)vmax, send = w.off;
    size_t sendf = (send + sizeof(float) - 1) / sizeof(float);
    if (grow_f(&c->tp_lg, &c->tp_lg_cap, mine + sendf * (size_t)(N + 1))) return CLLM_ENOMEM;
    float *loc = c->tp_lg, *out = loc + mine, *all = out + sendf;
    if (fwd_mm_add(c, &m->lm_head, c->xn, (size_t)H, R, loc, (size_t)vmax) != CLLM_OK ||
        fwd_mm_run(c) != CLLM_OK)
        return CLLM_ENOMEM;
    for (w = rows_begin(c, b, vmax); rows_next(&w);) {
        const float *lr = loc + (size_t)w.row * vmax;
        unsigned char *dst = (unsigned char *)out + w.off;
        if (w.k)
            fwd_tp_best_k(lr, nv, v0, w.sq->logits_scale, w.k, (tp_pair *)dst);
        else
            memcpy(dst, lr, (size_t)vmax * sizeof(float));
    }
    if (cllm_dist_allgather(out, send, all) != CLLM_OK) return CLLM_EIO;
    int n_nan = 0;
    for (w = rows_begin(c, b, vmax); rows_next(&w);) {
        float *dst = logits + (size_t)w.row * V;
        const unsigned char *src = (const unsigned char *)all + w.off; /* rank r's: + r * send */
        if (!w.k) {
            for (int r = 0; r < N; r++)
                memcpy(dst + m->tp_vsplit[2 * r], src + (size_t)r * send,
                       (size_t)m->tp_vsplit[2 * r + 1] * sizeof(float));
            continue;
        }
        bool nan = false;
        for (size_t j = 0; j < (size_t)V; j++) dst[j] = -INFINITY;
        for (int r = 0; r < N; r++)
            nan |= fwd_tp_put_k(dst, V, (const tp_pair *)(src + (size_t)r * send), w.k);
        n_nan += nan;
    }
    return n_nan ? nan_rows(c, n_nan, loc, vmax, all, send, logits) : CLLM_OK;
}

void fwd_tp_free(cllm_fwd_ctx *c) {
    cllm_free_aligned(c->tp_acc);
    cllm_free_aligned(c->tp_lg);
    c->tp_acc = c->tp_lg = NULL;
    c->tp_acc_cap = c->tp_lg_cap = 0;
}

/* Every rank must run the same batch (the all-reduces add up the same tokens): a hash of the
 * batch is compared once per call, so ranks whose drivers diverged (a time-based scheduling
 * decision, a request seen by one rank only) stop with an error instead of mixing tokens. */
cllm_status fwd_tp_check_batch(const cllm_batch *b, cllm_error *err) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int s = 0; s < b->n_seqs; s++) {
        const cllm_seq_batch *q = &b->seqs[s];
        if (q->logits_topk < 0 || q->logits_topk > CLLM_LOGITS_TOPK_MAX ||
            (q->logits_topk > 0 && !(q->logits_scale > 0 && isfinite(q->logits_scale))))
            return cllm_err_set(err, CLLM_EINVAL, "sequence %d: bad logits_topk %d / scale %g", s,
                                q->logits_topk, (double)q->logits_scale);
        if (q->embeds)
            return cllm_err_set(err, CLLM_EUNSUPPORTED,
                                "sequence %d: image input under tensor parallel", s);
        int32_t hdr[7] = {q->n_tokens, q->start_pos, (int32_t)q->logits, q->logits_topk,
                          0,           q->logits_n,  q->rope_delta};
        if (q->logits_topk > 0) memcpy(&hdr[4], &q->logits_scale, sizeof(float));
        const unsigned char *p = (const unsigned char *)hdr;
        for (size_t i = 0; i < sizeof(hdr); i++) h = (h ^ p[i]) * 0x100000001b3ull;
        p = (const unsigned char *)q->tokens;
        for (size_t i = 0; i < (size_t)q->n_tokens * sizeof(int32_t); i++)
            h = (h ^ p[i]) * 0x100000001b3ull;
        p = (const unsigned char *)q->mrope_pos;
        for (size_t i = 0; p && i < (size_t)q->n_tokens * 3 * sizeof(int32_t); i++)
            h = (h ^ p[i]) * 0x100000001b3ull;
    }
    return cllm_dist_check_same(h, "forward batch (token ids, positions)", err);
}
