/* The screened int8 lm_head (m->lm_screen > 0; weights.c lm_screen_plan splits its codes).
 *
 * Decode reads the lm_head more than anything else: the default W4A16 file's int8 lm_head is 0.52
 * of the 0.85 GB a quarter-shape token streams. A row whose caller needs only its k best logits
 * (cllm_seq_batch.logits_topk: greedy k = 1, top-k sampling k = top_k) reads about a quarter:
 *  1. every vocabulary entry is estimated by the W4A8 walk on int8 activation codes from the
 *     2-bit plane (lm_q2: each column and group quantized to 4 uniform levels of its int8 values,
 *     weights.c lm_q2_panel; about 4x the error of the hi plane below, a quarter of the int8
 *     bytes), or with CLLM_LM_EST=4 from the hi nibbles of the int8 codes (lm_hi, an int4 GPTQ
 *     panel array whose zero sits at the int8 code's expected value given its hi nibble: about
 *     an int4 RTN lm_head's error, half the bytes);
 *  2. the max(lm_screen, 2k) largest estimates (ties to the lower id) name candidate blocks of
 *     16 entries (LM_BLK, a half panel), whose logits are then computed exactly (below);
 *  3. while the k-th best exact logit is not above every estimate left by a margin (LM_MARGIN_Z
 *     x the RMS error the row's rescored estimates showed), the best estimate left has its
 *     block rescored (bounded by the slots): the screen widens itself where the model's
 *     estimates err more than the gaps between its logits;
 *  4. every entry outside the rescored blocks becomes -inf (forward.h allows it for such rows).
 * The k best are then the plain int8 lm_head's unless an estimate was off by more than the gap
 * between the true k-th best and the candidates' tail, several times the estimate's error.
 * Every other row (logits_topk 0: logprobs, penalties, plain sampling, eval) is exact. An exact
 * logit is 16 x (the hi plane at zero zh, lm_hx) + (the lo plane at zero zl, lm_lx), two int4
 * kernel calls whose integer group sums are the int8 codes' (16 zh + zl = the int8 zero), then
 * one fused multiply-add: it differs from the unsplit int8 kernel by float rounding only (the
 * per-group float ops run per plane), and is the same op sequence for candidates and exact rows.
 * Each row's result depends on its own values only: batch and thread invariance hold. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "model/fwd_int.h"

/* panels per work item (1024 columns; 512 KB of the 2-bit plane at K 2048): the estimate pass
 * 4.1-4.4 ms at 8 panels, 3.8 at 32, 3.9-4.2 at 64 and 128 (quarter shape, Zen 3, 2 threads) */
#define LM_ITEM_PANS 32
#define PICK_BLOCK   64 /* entries per block of pick's maxima */
#define LM_BLK       16 /* entries a candidate rescores: a 16-column block of its panel */
#define LM_MARGIN_Z  4  /* settle's margin: this many RMS errors of the row's rescored estimates */

typedef struct lm_job {
    cllm_fwd_ctx *c;
    const cllm_model *m;
    int R, V, K, P, np; /* P: panel width (fwd_wt.panel) */
    int Vl;             /* live entries: the first Vl ids (a draft vocabulary), np their panels */
    int nb;             /* their blocks of LM_BLK entries (candidates, rescores, marks) */
    float em;           /* an estimate's unit in logits: 16 (hi plane) or 1 (2-bit plane) */
    const int *row_k;   /* [R] logits_topk of the row; 0 = exact row */
    int S;              /* candidate slots per row */
    size_t b4, b8;      /* bytes per token: int16 codes (int4 layout), the estimate's int8 codes */
    char *a4, *a8;      /* exact logits' codes; the estimate's (sums halved: its half-unit zero) */
    float *logits;
    int *cand;  /* [R][S] candidate blocks (ascending after pick, then appended) */
    int *ncand; /* [R] */
    float *thr; /* [R] the smallest estimate kept by pick, x em (logit units) */
    int *items; /* rescore items: (row, block) pairs, block-major */
    float *scr; /* [n_threads][scr_stride] the hi plane's part of exact logits */
    size_t scr_stride;
    uint8_t *mark; /* [n_threads][nb] settle's rescored-block maps */
    float *vals;   /* [n_threads][S * LM_BLK] settle's exact values */
    float *ie2;    /* [items] sum of (exact - estimate)^2 over the item's block */
    int n_it;      /* rescore items */
    float *hv;     /* [n_threads][S] settle's heap of estimates left (and hid their ids) */
    int *hid;
    int nbm;    /* pick's blocks of PICK_BLOCK entries per row (the last may be narrower) */
    float *bmx; /* [n_threads][nbm] their maxima (a row's pick scratch) */
} lm_job;

/* One past the last live vocabulary entry of block b (the last may be narrower). */
static int block_end(const lm_job *j, int b) {
    return (b + 1) * LM_BLK < j->Vl ? (b + 1) * LM_BLK : j->Vl;
}

/* Panel p of the 2-bit plane: fwd_panel's view (rows of 16 inputs, scales), but its zeros keep
 * the int4 layout where fwd_panel would step over 2-bit ones. */
static cllm_qweight q2_panel(const cllm_qweight *q, int P, int p) {
    cllm_qweight r = fwd_panel(q, P, p);
    r.qzeros = q->qzeros + (size_t)p * ((size_t)q->K / q->group) * (P / 8);
    return r;
}

/* Exact logits of columns [n0, n1) of panel p (n1 -1: its end) for rows [t0, t0 + nt): 16 x hi
 * + lo (see the top). A column's value does not depend on the range it was computed in
 * (kernels.h: tile shapes give the same bits). */
static void exact_cols(lm_job *j, int p, int n0, int n1, int t0, int nt, int tid) {
    const cllm_kern_ops *k = j->c->k;
    float *Y = j->logits + (size_t)t0 * j->V + (size_t)p * j->P;
    float *h = j->scr + (size_t)tid * j->scr_stride;
    const char *A = j->a4 + (size_t)t0 * j->b4;
    cllm_qweight hx = fwd_panel(&j->m->lm_hx.q, j->P, p), lx = fwd_panel(&j->m->lm_lx.q, j->P, p);
    if (n1 < 0 || n1 > hx.N) n1 = hx.N;
    k->matmul_q_qact16(&hx, n0, n1, A, nt, h, j->P);
    k->matmul_q_qact16(&lx, n0, n1, A, nt, Y, (size_t)j->V);
    for (int t = 0; t < nt; t++)
        for (int n = n0; n < n1; n++)
            Y[(size_t)t * j->V + n] = fmaf(16.0f, h[t * j->P + n], Y[(size_t)t * j->V + n]);
}

/* Exact logits of block b for row t (a candidate): 16 columns of its panel, not 32. */
static void exact_block(lm_job *j, int b, int t, int tid) {
    const int p = b * LM_BLK / j->P, n0 = b * LM_BLK - p * j->P;
    exact_cols(j, p, n0, n0 + LM_BLK, t, 1, tid);
}

/* Work item i: panels [LM_ITEM_PANS i, LM_ITEM_PANS (i + 1)): estimates of the screened rows, exact
 * logits of the others, each over runs of consecutive rows of the same kind (the kernels take
 * contiguous tokens). */
static void pass_worker(void *vj, size_t b, size_t e, int tid) {
    lm_job *j = vj;
    const cllm_kern_ops *k = j->c->k;
    for (size_t i = b; i < e; i++) {
        int p1 = (int)(i + 1) * LM_ITEM_PANS < j->np ? (int)(i + 1) * LM_ITEM_PANS : j->np;
        for (int p = (int)i * LM_ITEM_PANS; p < p1; p++)
            for (int t0 = 0, t1; t0 < j->R; t0 = t1) {
                const bool est = j->row_k[t0] > 0;
                for (t1 = t0 + 1; t1 < j->R && (j->row_k[t1] > 0) == est; t1++) {
                }
                float *Y = j->logits + (size_t)t0 * j->V + (size_t)p * j->P;
                if (est && j->m->lm_q2.data) {
                    /* in logits (its scales hold the step); pick and settle scale the hi
                     * plane's by em = 16, exactly, where they compare with exact logits */
                    cllm_qweight q = q2_panel(&j->m->lm_q2.q, j->P, p);
                    k->matmul_q2_qact(&q, 0, q.N, j->a8 + (size_t)t0 * j->b8, t1 - t0, Y,
                                      (size_t)j->V);
                } else if (est) { /* hi-plane units: 1/16 of a logit's (codes are 16 hi + lo) */
                    cllm_qweight q = fwd_panel(&j->m->lm_hi.q, j->P, p);
                    k->matmul_q4_qact(&q, 0, q.N, j->a8 + (size_t)t0 * j->b8, t1 - t0, Y,
                                      (size_t)j->V);
                } else {
                    exact_cols(j, p, 0, -1, t0, t1 - t0, tid);
                }
            }
    }
}

/* A draft vocabulary's rows (an MTP draft: only its argmax is used, and a miss costs acceptance,
 * never output) take at most LM_DRAFT_CAND candidates: 0.5 ms less a quarter-shape draft pass
 * than the 128 of the auto screen. */
#define LM_DRAFT_CAND 32

/* The screen's order of estimates: the larger value first, then the lower id; a NaN after every
 * number. A strict total order, so "the C best" is one set, whichever entries a pick skips on
 * the way (fwd_lm_best reads only the blocks that can hold them). */
static bool est_before(float x, int i, float y, int k) {
    if (x > y) return true;
    if (x < y) return false;
    if ((x != x) != (y != y)) return y != y; /* one NaN: the number first */
    return i < k;                            /* equal, or both NaN */
}

/* Keeps the C best values offered in the order above (a heap of *n entries whose root hv[0]
 * is the last of them). A scan in ascending ids may test only x > hv[0] first: an equal later
 * value, or a NaN, never displaces a kept one. */
static void heap_offer(float *hv, int *hid, int *n, int C, float x, int id) {
    if (*n == C && !est_before(x, id, hv[0], hid[0])) return;
    int s;
    if (*n < C) { /* insert: sift up past every parent that comes before it */
        for (s = (*n)++; s > 0 && est_before(hv[(s - 1) / 2], hid[(s - 1) / 2], x, id);
             s = (s - 1) / 2) {
            hv[s] = hv[(s - 1) / 2];
            hid[s] = hid[(s - 1) / 2];
        }
    } else { /* replace the root: sift down past every child that comes after it */
        for (s = 0;;) {
            int c = 2 * s + 1;
            if (c >= *n) break;
            if (c + 1 < *n && est_before(hv[c], hid[c], hv[c + 1], hid[c + 1])) c++;
            if (!est_before(x, id, hv[c], hid[c])) break;
            hv[s] = hv[c];
            hid[s] = hid[c];
            s = c;
        }
    }
    hv[s] = x;
    hid[s] = id;
}

static int heap_size(const lm_job *j, int t) {
    int C = j->m->lm_screen;
    if (j->Vl < j->V && C > LM_DRAFT_CAND) C = LM_DRAFT_CAND;
    C = C > 2 * j->row_k[t] ? C : 2 * j->row_k[t];
    return C < j->Vl ? C : j->Vl;
}

/* Candidate blocks row t may hold, rescores included. From the row's own k only: a bound shared
 * by the batch (its largest k) let a greedy row beside a top-k row rescore more panels than
 * alone, so where the estimate had missed its best entry the row's argmax depended on its batch
 * (found by tests/engine/test_engine_spec.c at CLLM_LM_SCREEN=8). */
static int row_slots(const lm_job *j, int t) {
    return 2 * heap_size(j, t) < j->nb ? 2 * heap_size(j, t) : j->nb;
}

/* fwd_lm_best (fwd_int.h). The C-th largest of the block maxima is a floor (low) for the C best:
 * C blocks each hold an entry at or above it. So one vector-friendly pass takes every block's
 * maximum, a heap of C maxima gives the floor, and only the blocks reaching it are read entry by
 * entry (about C of them). A heap over every entry, skipping blocks below its root, read 1000
 * blocks entry by entry while its root rose (0.3-0.5 ms a 248k row on Zen 3; chunks on two threads
 * did not help: each chunk's root rises as slowly). */
int fwd_lm_best(const float *y, int n_y, int C, float *bm, float *hv, int *hid) {
    const int nbm = (n_y + PICK_BLOCK - 1) / PICK_BLOCK;
    float low = -INFINITY;
    bool use_low = nbm >= C;
    if (use_low) {
        for (int k = 0; k < nbm; k++) {
            const int v0 = k * PICK_BLOCK, v1 = v0 + PICK_BLOCK < n_y ? v0 + PICK_BLOCK : n_y;
            float m8[8]; /* eight chains: a max's latency per entry otherwise; NaN skipped */
            for (int l = 0; l < 8; l++) m8[l] = -INFINITY;
            int v = v0;
            for (; v + 8 <= v1; v += 8)
                for (int l = 0; l < 8; l++) m8[l] = y[v + l] > m8[l] ? y[v + l] : m8[l];
            for (; v < v1; v++) m8[0] = y[v] > m8[0] ? y[v] : m8[0];
            float mx = m8[0];
            for (int l = 1; l < 8; l++) mx = m8[l] > mx ? m8[l] : mx;
            bm[k] = mx;
        }
        int n = 0; /* the C largest maxima (ids: their blocks), root the C-th */
        for (int k = 0; k < nbm; k++)
            if (n < C || bm[k] > hv[0]) heap_offer(hv, hid, &n, C, bm[k], k);
        low = hv[0];
        use_low = low > -INFINITY; /* else fewer than C numbers above -inf: read every entry */
    }
    int n = 0;
    for (int k = 0; k < nbm; k++) {
        if (use_low && !(bm[k] >= low)) continue;
        const int v0 = k * PICK_BLOCK, v1 = v0 + PICK_BLOCK < n_y ? v0 + PICK_BLOCK : n_y;
        for (int v = v0; v < v1; v++)
            if (!use_low || y[v] >= low) heap_offer(hv, hid, &n, C, y[v], v);
    }
    return n;
}

/* Screened row t's C best estimates (fwd_lm_best) -> its candidate blocks, ascending, and
 * threshold. */
static void pick_worker(void *vj, size_t b, size_t e, int tid) {
    lm_job *j = vj;
    float hv[2 * CLLM_LOGITS_TOPK_MAX > 4096 ? 2 * CLLM_LOGITS_TOPK_MAX : 4096];
    int hid[sizeof(hv) / sizeof(*hv)];
    for (size_t t = b; t < e; t++) {
        if (j->row_k[t] <= 0) continue;
        const int n = fwd_lm_best(j->logits + t * (size_t)j->V, j->Vl, heap_size(j, (int)t),
                                  j->bmx + (size_t)tid * j->nbm, hv, hid);
        j->thr[t] = n ? j->em * hv[0] : NAN;
        /* the blocks sort in the heap's own array: n may exceed the row's S slots (n > nb where
         * the vocabulary is small), only the unique blocks (<= min(n, nb) <= S) go to cand, which
         * a sort there overran into the next row's slots (a race with its pick at 2 threads)
         * and past the last row's into the counts and thresholds */
        for (int i = 0; i < n; i++) hid[i] /= LM_BLK;
        for (int i = 1; i < n; i++) /* ascending (insertion sort: n is small), then unique */
            for (int q = i; q > 0 && hid[q - 1] > hid[q]; q--) {
                int x = hid[q];
                hid[q] = hid[q - 1];
                hid[q - 1] = x;
            }
        int *cd = j->cand + t * (size_t)j->S, u = 0;
        for (int i = 0; i < n; i++)
            if (!u || cd[u - 1] != hid[i]) cd[u++] = hid[i];
        j->ncand[t] = u;
    }
}

/* Rescores item i's block, and records how far its estimates were from the exact values. */
static void rescore_worker(void *vj, size_t b, size_t e, int tid) {
    lm_job *j = vj;
    for (size_t i = b; i < e; i++) {
        const int t = j->items[2 * i], bk = j->items[2 * i + 1], v0 = bk * LM_BLK;
        const int n = block_end(j, bk) - v0;
        float *y = j->logits + (size_t)t * j->V + v0, est[LM_BLK];
        memcpy(est, y, (size_t)n * sizeof(float));
        exact_block(j, bk, t, tid);
        float e2 = 0.0f;
        for (int v = 0; v < n; v++) {
            float d = y[v] - j->em * est[v];
            e2 += d * d;
        }
        j->ie2[i] = e2;
    }
}

static int desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* The k-th best exact value of row t (its rescored blocks). */
static float kth_exact(lm_job *j, int t, float *vals) {
    const float *y = j->logits + (size_t)t * j->V;
    const int *cd = j->cand + (size_t)t * j->S, k = j->row_k[t];
    int n = 0;
    float best = -INFINITY;
    for (int i = 0; i < j->ncand[t]; i++) {
        for (int v = cd[i] * LM_BLK, v1 = block_end(j, cd[i]); v < v1; v++) {
            best = y[v] > best ? y[v] : best;
            vals[n++] = y[v];
        }
    }
    if (k == 1) return best;
    qsort(vals, (size_t)n, sizeof(float), desc);
    return k <= n ? vals[k - 1] : -INFINITY;
}

/* Row t's margin: LM_MARGIN_Z x the RMS error of the estimates its rescored blocks replaced. The
 * estimate's error is the model's own (a real lm_head's, not a synthetic one's): where it is
 * large against the row's gaps, step 3 rescores more. */
static float row_margin(const lm_job *j, int t) {
    double e2 = 0.0;
    int n = 0;
    for (int i = 0; i < j->n_it; i++)
        if (j->items[2 * i] == t) {
            e2 += j->ie2[i];
            n += block_end(j, j->items[2 * i + 1]) - j->items[2 * i + 1] * LM_BLK;
        }
    return n ? LM_MARGIN_Z * (float)sqrt(e2 / n) : 0.0f;
}

/* Steps 3 and 4 for the screened rows. Step 3: every estimate left that could still beat the
 * k-th best exact value (within the row's margin of it) has its block rescored, best first,
 * until none can or the row's slots are spent; one pass over the row gathers the best of them
 * (as many as slots are left: a block of several gathered entries rescores once, so a row can
 * stop with slots unspent). */
static void settle_worker(void *vj, size_t b, size_t e, int tid) {
    lm_job *j = vj;
    uint8_t *mark = j->mark + (size_t)tid * j->nb;
    float *vals = j->vals + (size_t)tid * j->S * LM_BLK;
    float *hv = j->hv + (size_t)tid * j->S;
    int *hid = j->hid + (size_t)tid * j->S;
    for (size_t tt = b; tt < e; tt++) {
        const int t = (int)tt;
        if (j->row_k[t] <= 0) continue;
        float *y = j->logits + (size_t)t * j->V;
        int *cd = j->cand + (size_t)t * j->S;
        memset(mark, 0, (size_t)j->nb);
        for (int i = 0; i < j->ncand[t]; i++) mark[cd[i]] = 1;
        float kth = kth_exact(j, t, vals);
        const float margin = row_margin(j, t);
        const int C = row_slots(j, t) - j->ncand[t];
        if (!(kth > j->thr[t] + margin) && C > 0) {
            /* the C best estimates left at or above kth - margin: a min-heap (root hv[0]) */
            int n = 0;
            for (int v = 0; v < j->Vl; v++) {
                float x = j->em * y[v];
                if (!mark[v / LM_BLK] && x + margin >= kth) heap_offer(hv, hid, &n, C, x, v);
            }
            for (int i = 1; i < n; i++) /* descending value, then ascending id */
                for (int q = i;
                     q > 0 && (hv[q] > hv[q - 1] || (hv[q] == hv[q - 1] && hid[q] < hid[q - 1]));
                     q--) {
                    float xv = hv[q];
                    int xi = hid[q];
                    hv[q] = hv[q - 1], hid[q] = hid[q - 1];
                    hv[q - 1] = xv, hid[q - 1] = xi;
                }
            for (int i = 0; i < n && j->ncand[t] < row_slots(j, t); i++) {
                const int bk = hid[i] / LM_BLK;
                if (mark[bk]) continue;
                if (hv[i] + margin < kth) break;
                mark[bk] = 1;
                cd[j->ncand[t]++] = bk;
                exact_block(j, bk, t, tid);
                kth = kth_exact(j, t, vals);
            }
        }
        for (int bk = 0; bk < j->nb; bk++)
            if (!mark[bk])
                for (int v = bk * LM_BLK, v1 = block_end(j, bk); v < v1; v++) y[v] = -INFINITY;
    }
}

/* Past a draft vocabulary: -inf in every row (its last panel computed a few entries more). */
static void tail_worker(void *vj, size_t b, size_t e, int tid) {
    (void)tid;
    lm_job *j = vj;
    for (size_t t = b; t < e; t++)
        for (int v = j->Vl; v < j->V; v++) j->logits[t * (size_t)j->V + (size_t)v] = -INFINITY;
}

static int item_cmp(const void *a, const void *b) { /* block-major, then row */
    const int *x = a, *y = b;
    return x[1] != y[1] ? (x[1] > y[1]) - (x[1] < y[1]) : (x[0] > y[0]) - (x[0] < y[0]);
}

cllm_status fwd_lm_screen(cllm_fwd_ctx *c, int R, const int *row_k, int n_ids, float *logits) {
    const cllm_model *m = c->m;
    const cllm_qweight *q = &m->lm_head.q;
    lm_job j = {.c = c, .m = m, .R = R, .V = q->N, .K = q->K, .P = m->lm_head.panel};
    j.Vl = n_ids > 0 && n_ids < j.V ? n_ids : j.V;
    j.em = m->lm_q2.data ? 1.0f : 16.0f;
    j.row_k = row_k;
    j.logits = logits;
    j.np = (j.Vl + j.P - 1) / j.P;
    j.nb = (j.Vl + LM_BLK - 1) / LM_BLK;
    int n_scr = 0, cmax = 0;
    for (int t = 0; t < R; t++)
        if (row_k[t] > 0) {
            n_scr++;
            cmax = heap_size(&j, t) > cmax ? heap_size(&j, t) : cmax;
        }
    j.S = 2 * cmax < j.nb ? 2 * cmax : j.nb;
    j.nbm = (j.Vl + PICK_BLOCK - 1) / PICK_BLOCK;
    const int ag4 = cllm_qact16_group(4, q->group);
    j.b4 = cllm_qact16_bytes(j.K, ag4, 1);
    j.b8 = cllm_qact_bytes(j.K, q->group, 1);
    j.scr_stride = (size_t)R * j.P;
    const size_t sizes[] = {(size_t)c->n_threads * j.scr_stride * sizeof(float),
                            (size_t)R * j.b4,
                            (size_t)R * j.b8,
                            (size_t)R * j.S * sizeof(int),
                            (size_t)R * j.S * 2 * sizeof(int),
                            (size_t)R * sizeof(int),
                            (size_t)R * sizeof(float),
                            (size_t)c->n_threads * j.nb,
                            (size_t)c->n_threads * j.S * LM_BLK * sizeof(float),
                            (size_t)R * j.S * sizeof(float),
                            (size_t)c->n_threads * j.S * sizeof(float),
                            (size_t)c->n_threads * j.S * sizeof(int),
                            (size_t)c->n_threads * j.nbm * sizeof(float)};
    enum { N_BUF = sizeof(sizes) / sizeof(*sizes) };
    size_t need = 0;
    for (int i = 0; i < N_BUF; i++) need += (sizes[i] + 63) & ~(size_t)63;
    if (need > c->cap_lm) {
        cllm_free_aligned(c->lm_buf);
        c->cap_lm = 0;
        if (!(c->lm_buf = cllm_alloc_aligned(need))) return CLLM_ENOMEM;
        c->cap_lm = need;
    }
    char *at[N_BUF], *p = c->lm_buf;
    for (int i = 0; i < N_BUF; i++) {
        at[i] = p;
        p += (sizes[i] + 63) & ~(size_t)63;
    }
    j.scr = (float *)(void *)at[0];
    j.a4 = at[1];
    j.a8 = at[2];
    j.cand = (int *)(void *)at[3];
    j.items = (int *)(void *)at[4];
    j.ncand = (int *)(void *)at[5];
    j.thr = (float *)(void *)at[6];
    j.mark = (uint8_t *)at[7];
    j.vals = (float *)(void *)at[8];
    j.ie2 = (float *)(void *)at[9];
    j.hv = (float *)(void *)at[10];
    j.hid = (int *)(void *)at[11];
    j.bmx = (float *)(void *)at[12];
    const int H = m->cfg.hidden_size;
    c->k->qact16_prep(c->xn, (size_t)H, R, j.K, ag4, 4, j.a4);
    if (n_scr) {
        /* int8 codes (W4A8's, kernels.h): far finer than the estimate's weights, and they run
         * twice the int16 codes' multiply-adds per instruction where a batch of rows makes it
         * compute bound. Either plane's zero is in halves (weights.c lm_zeros, LM_Q2_ZERO):
         * halve the code sums, which every tier stores after the codes and scales (kernels.h,
         * qact_prep) */
        c->k->qact_prep(c->xn, (size_t)H, R, j.K, q->group, 8, j.a8);
        const int ng = j.K / q->group;
        for (int t = 0; t < R; t++) {
            char *tok = j.a8 + (size_t)t * j.b8;
            int32_t *sum = (int32_t *)(void *)(tok + (size_t)j.K + 4 * (size_t)ng);
            for (int g = 0; g < ng; g++) sum[g] /= 2;
        }
    }
    double tp[5] = {c->prof_on ? cllm_time_s() : 0.0};
    cllm_pool_for_dyn(c->pool, (size_t)((j.np + LM_ITEM_PANS - 1) / LM_ITEM_PANS), pass_worker, &j);
    if (!n_scr) {
        if (j.Vl < j.V) cllm_pool_for(R > 1 ? c->pool : NULL, (size_t)R, tail_worker, &j);
        return CLLM_OK;
    }
    if (c->prof_on) tp[1] = cllm_time_s();
    cllm_pool_for(n_scr > 1 ? c->pool : NULL, (size_t)R, pick_worker, &j);
    if (c->prof_on) tp[2] = cllm_time_s();
    size_t n_it = 0;
    for (int t = 0; t < R; t++)
        for (int i = 0; row_k[t] > 0 && i < j.ncand[t]; i++) {
            j.items[2 * n_it] = t;
            j.items[2 * n_it + 1] = j.cand[(size_t)t * j.S + i];
            n_it++;
        }
    if (n_scr > 1) qsort(j.items, n_it, 2 * sizeof(int), item_cmp); /* a block's rows together */
    j.n_it = (int)n_it;
    cllm_pool_for(c->pool, n_it, rescore_worker, &j);
    if (c->prof_on) tp[3] = cllm_time_s();
    cllm_pool_for(n_scr > 1 ? c->pool : NULL, (size_t)R, settle_worker, &j);
    if (j.Vl < j.V) cllm_pool_for(R > 1 ? c->pool : NULL, (size_t)R, tail_worker, &j);
    if (c->prof_on) {
        tp[4] = cllm_time_s();
        for (int i = 0; i < 4; i++) c->prof_lm[i] += tp[i + 1] - tp[i];
    }
    return CLLM_OK;
}
