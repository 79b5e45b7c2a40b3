/* Gated DeltaNet layer (docs/model.md §2.4) over per-sequence state slots.
 *
 * Projections for all T tokens in one matmul pass; then per sequence, in position order: the
 * causal depthwise conv (state = last kernel-1 raw inputs, updated in place in the slot) + SiLU,
 * l2norm of q/k, beta/decay, and the delta-rule recurrence token by token, for prefill and
 * decode alike (kernels gdn_step). Choosing the recurrence over the chunked WY form keeps the
 * result bitwise independent of how a prompt is split into calls (docs/model.md §7.10) and is also
 * the cheaper form on AVX2 without matrix units.
 *
 * Option cllm_fwd_ctx_set_gdn_prefill(CLLM_GDN_CHUNKED) (CLI --gdn-prefill chunked; default
 * recurrent): runs of 64 tokens
 * covering absolute positions [64j, 64j+64) entirely inside one call go through the chunked WY
 * kernel (kernels gdn_chunk); the unaligned head/tail of a call and decode keep the step. So
 * splitting a prompt at multiples of 64 stays bitwise identical, other splits differ by rounding.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "model/fwd_int.h"

size_t fwd_gdn_scratch(const cllm_config *f) {
    return 2 * CLLM_GDN_CHUNK + cllm_gdn_chunk_work(f->lin_k_dim, f->lin_v_dim);
}

void cllm_fwd_ctx_set_gdn_prefill(cllm_fwd_ctx *c, cllm_gdn_prefill mode) {
    c->gdn_prefill = mode;
}

int cllm_gdn_prefill_parse(const char *s) {
    return !s                        ? -1
           : !strcmp(s, "recurrent") ? CLLM_GDN_RECURRENT
           : !strcmp(s, "chunked")   ? CLLM_GDN_CHUNKED
                                     : -1;
}

/* A forked sequence reads its state from state_src (forward.h); the copy is made per channel
 * block and per head inside the passes that read the state anyway, so the slot is not walked
 * twice. */
static bool gdn_forks(const cllm_seq_batch *sq) {
    return sq->state_fork && sq->start_pos > 0 && sq->state_src != sq->state_slot;
}
typedef struct gdn_job {
    cllm_fwd_ctx *c;
    const fwd_gdn_w *w;
    int sub; /* state layer */
    int ldp, kd, vd;
} gdn_job;

/* Conv over channels [b, e) for every sequence, in blocks of CONV_CB channels (the block's
 * state rows stay in L1 over a prompt's tokens): per token the block's outputs are computed
 * across channels (loops innermost over channels, so they vectorise; per channel the same ops in
 * the same order as one channel alone: y = 0, + w[r] s[r] for r in order oldest first, + w[k1]
 * x), then SiLU on the block. Taps and state are tap-major rows (forward.h): the state is a ring
 * whose row p % k1 holds the input at position p, so the newest input overwrites the oldest in
 * place and nothing is copied or shifted per token. */
#define CONV_CB 256
/* acc[i] += w[i] * s[i]: a separate multiply and add (C11, no contraction), vectorised. Not
 * inlined: inlined, gcc 12 jams the tap loop into it and emits scalar code. */
__attribute__((noinline)) static void conv_tap(float *restrict acc, const float *restrict w,
                                               const float *restrict s, int n) {
    for (int i = 0; i < n; i++) acc[i] += w[i] * s[i];
}
static void conv_worker(void *vj, size_t b, size_t e, int tid) {
    gdn_job *j = vj;
    cllm_fwd_ctx *c = j->c;
    const cllm_batch *bt = c->batch;
    cllm_state_pool *st = c->st;
    int k1 = st->conv_k1, ch = st->conv_ch;
    const float *w = j->w->conv_w; /* [k1 + 1][ch] */
    float acc[CONV_CB];
    for (size_t c0 = b; c0 < e; c0 += CONV_CB) {
        int nc = e - c0 < CONV_CB ? (int)(e - c0) : CONV_CB;
        for (int q = 0; q < bt->n_seqs; q++) {
            const cllm_seq_batch *sq = &bt->seqs[q];
            float *ring = fwd_gdn_ring(st, sq->state_slot, j->sub) + c0;
            if (gdn_forks(sq)) {
                const float *src = fwd_gdn_ring(st, sq->state_src, j->sub) + c0;
                for (int r = 0; r < k1; r++)
                    memcpy(ring + (size_t)r * ch, src + (size_t)r * ch, (size_t)nc * sizeof(float));
            }
            int head = k1 > 0 ? sq->start_pos % k1 : 0; /* ring row of the oldest input */
            for (int t = 0; t < sq->n_tokens; t++) {
                float *xp = c->proj + (size_t)(c->seq_tok0[q] + t) * j->ldp + c0;
                for (int i = 0; i < nc; i++) acc[i] = 0.0f;
                for (int r = 0, row = head; r < k1; r++, row = row + 1 == k1 ? 0 : row + 1)
                    conv_tap(acc, w + (size_t)r * ch + c0, ring + (size_t)row * ch, nc);
                conv_tap(acc, w + (size_t)k1 * ch + c0, xp, nc);
                if (k1 > 0) {
                    memcpy(ring + (size_t)head * ch, xp, (size_t)nc * sizeof(float));
                    head = head + 1 == k1 ? 0 : head + 1;
                }
                c->k->silu_mul(xp, acc, NULL, nc);
            }
        }
    }
}

static void l2norm(float *x, int n, float scale) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss + 1e-6)) * scale;
    for (int i = 0; i < n; i++) x[i] *= r;
}

/* Per token: l2norm q (times dk^-0.5) and k per key head; b -> beta, a -> decay in place. */
static void tokprep_worker(void *vj, size_t b, size_t e, int tid) {
    gdn_job *j = vj;
    cllm_fwd_ctx *c = j->c;
    const cllm_config *f = &c->m->cfg;
    int dk = f->lin_k_dim, Hk = f->lin_n_k_heads, Hv = f->lin_n_v_heads;
    float qscale = (float)(1.0 / sqrt((double)dk));
    for (size_t t = b; t < e; t++) {
        float *P = c->proj + t * j->ldp;
        for (int h = 0; h < Hk; h++) {
            l2norm(P + (size_t)h * dk, dk, qscale);
            l2norm(P + j->kd + (size_t)h * dk, dk, 1.0f);
        }
        float *bb = P + j->kd * 2 + j->vd + j->vd, *aa = bb + Hv;
        for (int h = 0; h < Hv; h++) {
            double x = (double)aa[h] + j->w->dt_bias[h];
            double sp = x > 20.0 ? x : log1p(exp(x));
            aa[h] = (float)exp((double)j->w->A[h] * sp);
            bb[h] = fwd_sigmoid(bb[h]);
        }
    }
}

/* Tokens [t0, t0 + n) (n a multiple of 64) of value head h through the chunked kernel, then the
 * gated norm. tmp: the thread's scratch (fwd_gdn_scratch floats past the step's [dv]). */
static void chunk_run(gdn_job *j, int h, int kh, float *S, size_t t0, int n, float *tmp) {
    cllm_fwd_ctx *c = j->c;
    const cllm_config *f = &c->m->cfg;
    int dk = f->lin_k_dim, dv = f->lin_v_dim, Hv = f->lin_n_v_heads, C = CLLM_GDN_CHUNK;
    float eps = (float)f->rms_norm_eps;
    float *gb = tmp + ((size_t)dv + 7) / 8 * 8, *bb = gb + C, *work = bb + C;
    for (int c0 = 0; c0 < n; c0 += C) {
        size_t t = t0 + (size_t)c0;
        for (int i = 0; i < C; i++) {
            const float *ab =
                c->proj + (t + (size_t)i) * j->ldp + 2 * (size_t)j->kd + 2 * (size_t)j->vd;
            float d = ab[Hv + h];
            /* log-decay of the decay the step would use; clamp keeps gamma finite (e^-80 ~ 0) */
            gb[i] = d > 1.8e-35f ? logf(d) : -80.0f;
            bb[i] = ab[h];
        }
        const float *P = c->proj + t * j->ldp;
        c->k->gdn_chunk(S, P + (size_t)kh * dk, P + j->kd + (size_t)kh * dk, (size_t)j->ldp,
                        P + 2 * (size_t)j->kd + (size_t)h * dv, (size_t)j->ldp, gb, bb,
                        c->o + t * j->vd + (size_t)h * dv, (size_t)j->vd, C, dk, dv, work);
        for (int i = 0; i < C; i++) {
            const float *z =
                c->proj + (t + (size_t)i) * j->ldp + 2 * (size_t)j->kd + j->vd + (size_t)h * dv;
            float *o = c->o + (t + (size_t)i) * j->vd + (size_t)h * dv;
            fwd_rmsnorm(o, o, j->w->gnorm, dv, eps);
            c->k->silu_mul(o, z, o, dv);
        }
    }
}

/* Tokens [t0, t0 + n) of value head h through the recurrence (one kernel call: all tokens per
 * block of state columns), then the gated norm of each. */
static void rec_run(gdn_job *j, int h, int kh, void *S, size_t t0, int n, float *tmp) {
    cllm_fwd_ctx *c = j->c;
    const cllm_config *f = &c->m->cfg;
    int dk = f->lin_k_dim, dv = f->lin_v_dim, Hv = f->lin_n_v_heads;
    float eps = (float)f->rms_norm_eps;
    const float *P = c->proj + t0 * j->ldp;
    const float *bb = P + 2 * (size_t)j->kd + 2 * (size_t)j->vd;
    float *o0 = c->o + t0 * j->vd + (size_t)h * dv;
    const float *q = P + (size_t)kh * dk, *k = P + j->kd + (size_t)kh * dk;
    const float *v = P + 2 * (size_t)j->kd + (size_t)h * dv;
    fwd_gdn_step(c, c->st, S, q, k, v, bb + Hv + h, bb + h, (size_t)j->ldp, o0, (size_t)j->vd, n,
                 tmp);
    for (int i = 0; i < n; i++) {
        const float *z = P + (size_t)i * j->ldp + 2 * (size_t)j->kd + j->vd + (size_t)h * dv;
        float *o = o0 + (size_t)i * j->vd;
        fwd_rmsnorm(o, o, j->w->gnorm, dv, eps);
        c->k->silu_mul(o, z, o, dv);
    }
}

/* One item per (sequence, value head): the recurrence over the sequence's tokens + gated norm. */
static void rec_worker(void *vj, size_t b, size_t e, int tid) {
    gdn_job *j = vj;
    cllm_fwd_ctx *c = j->c;
    const cllm_config *f = &c->m->cfg;
    cllm_state_pool *st = c->st;
    int Hv = f->lin_n_v_heads, rep = Hv / f->lin_n_k_heads;
    float *tmp = c->thr + (size_t)tid * c->thr_stride;
    for (size_t it = b; it < e; it++) {
        int q = (int)(it / (size_t)Hv), h = (int)(it % (size_t)Hv), kh = h / rep;
        const cllm_seq_batch *sq = &c->batch->seqs[q];
        void *S = fwd_gdn_state(st, sq->state_slot, j->sub, h);
        if (gdn_forks(sq))
            memcpy(S, fwd_gdn_state(st, sq->state_src, j->sub, h), fwd_gdn_state_bytes(st));
        size_t t0 = (size_t)c->seq_tok0[q];
        int ca = sq->n_tokens, cb = sq->n_tokens; /* [ca, cb) run chunked: 64-aligned chunks */
        if (c->gdn_prefill == CLLM_GDN_CHUNKED) {
            const int C = CLLM_GDN_CHUNK;
            ca = (C - sq->start_pos % C) % C;
            cb = ca < sq->n_tokens ? ca + (sq->n_tokens - ca) / C * C : ca;
            if (cb <= ca) ca = cb = sq->n_tokens;
        }
        if (ca > 0) rec_run(j, h, kh, S, t0, ca, tmp);
        /* a float32 state: cllm_forward refuses the chunked form on a bf16 one */
        if (cb > ca) chunk_run(j, h, kh, S, t0 + (size_t)ca, cb - ca, tmp);
        if (sq->n_tokens > cb) rec_run(j, h, kh, S, t0 + (size_t)cb, sq->n_tokens - cb, tmp);
    }
}

cllm_status fwd_deltanet(cllm_fwd_ctx *c, const fwd_gdn_w *w, int sub, int T) {
    const cllm_model *m = c->m;
    const cllm_config *f = &m->cfg;
    int H = f->hidden_size, Hv = f->lin_n_v_heads;
    gdn_job j = {c, w, sub, 0, f->lin_n_k_heads * f->lin_k_dim, Hv * f->lin_v_dim};
    j.ldp = m->conv_ch + j.vd + 2 * Hv;
    float *P = c->proj;
    if (fwd_mm_add(c, &w->qkv, c->xn, H, T, P, j.ldp) ||
        fwd_mm_add(c, &w->z, c->xn, H, T, P + m->conv_ch, j.ldp) ||
        fwd_mm_add(c, &w->b, c->xn, H, T, P + m->conv_ch + j.vd, j.ldp) ||
        fwd_mm_add(c, &w->a, c->xn, H, T, P + m->conv_ch + j.vd + Hv, j.ldp) || fwd_mm_run(c))
        return CLLM_ENOMEM;
    double t0 = c->prof_on ? cllm_time_s() : 0.0;
    fwd_gdn_save_raw(c, sub, (size_t)j.ldp);
    /* one token: conv_ch x kernel taps, a few microseconds, less than a region's hand-off */
    cllm_pool_for(T == 1 ? NULL : c->pool, (size_t)m->conv_ch, conv_worker, &j);
    cllm_pool_for(c->pool, (size_t)T, tokprep_worker, &j);
    fwd_gdn_save_prep(c, sub, (size_t)j.ldp, (size_t)m->conv_ch + (size_t)j.vd);
    double t1 = c->prof_on ? cllm_time_s() : 0.0;
    cllm_pool_for(c->pool, (size_t)c->batch->n_seqs * Hv, rec_worker, &j);
    if (c->prof_on) {
        c->prof[FWD_P_GDN_CONV] += t1 - t0;
        c->prof[FWD_P_GDN_REC] += cllm_time_s() - t1;
    }
    if (fwd_mm_add(c, &w->out, c->o, (size_t)j.vd, T, c->tmp, H) || fwd_mm_run(c))
        return CLLM_ENOMEM;
    size_t n = (size_t)T * H;
    for (size_t i = 0; i < n; i++) c->x[i] += c->tmp[i];
    return CLLM_OK;
}
