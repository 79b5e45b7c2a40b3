/* cllm_forward(): the layer loop over one ragged batch, its validation, scratch buffers and the
 * batched matmul runner shared by the layer files (fwd_attn.c, fwd_deltanet.c, fwd_moe.c).
 *
 * Tokens of all sequences are laid out back to back ([T][...] buffers, T = total new tokens);
 * tok_seq/tok_pos say which sequence and absolute position each row belongs to. Every matmul
 * processes all T rows at once (weights streamed once per call); per-token math (norms, RoPE,
 * routing) is independent per row; sequence-coupled math (attention over the KV blocks, the GDN
 * conv and recurrence) runs per sequence in position order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/threadpool.h"
#include "model/fwd_int.h"
#include "model/qformat.h"

/* Rows per matmul work item: 16 rows of a 2048-wide bf16 matrix = 64 KiB, an L2-resident slice
 * that every token of the call passes over (see kernels/x86/matmul_avx2.c). */
#define MM_ROWS  16
#define MM_QROWS 64 /* quantized (GPTQ) weights */
/* Up to 8 tokens (decode, batched decode): each item reads 1 KiB runs of every qweight row (256
 * int32 columns), so the group-major kernels stream rows instead of hopping between them
 * (matmul_q_dec_avx2.c, matmul_q16_avx2.c). */
#define MM_QROWS_DEC 256
/* Tokens per item: a 512-token prefill's items of 64 GPTQ columns took ~1.2 ms each, and the
 * region's last one kept the other thread waiting (0.4 s of a 5 s prefill); token blocks make
 * the tail shorter. Every output element is still computed inside one item. */
#define MM_TOK 128

void fwd_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float r = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

cllm_status fwd_mm_add(cllm_fwd_ctx *c, const fwd_wt *w, const float *X, size_t ldx, int n_tok,
                       float *Y, size_t ldy) {
    if (n_tok <= 0 || !w->data) return CLLM_OK;
    if (c->hooks.on_matmul) fwd_hook_matmul(c, w, X, ldx, n_tok);
    if (c->n_jobs == c->cap_jobs) {
        size_t nc = c->cap_jobs ? 2 * c->cap_jobs : 64;
        fwd_mm *nj = realloc(c->jobs, nc * sizeof(*nj));
        if (!nj) return CLLM_ENOMEM;
        c->jobs = nj;
        c->cap_jobs = nc;
    }
    c->jobs[c->n_jobs++] = (fwd_mm){w, X, ldx, n_tok, Y, ldy, FWD_QA_NONE, false, 0};
    return CLLM_OK;
}

/* How a GPTQ job's activations are quantized. W4A8/W4A4 (int4 weights, act_bits 8 or 4) run on
 * integer activations prepared once (codes on the 8- or 4-bit grid in int8, one integer kernel;
 * every tier has the two-step entries). Int8 weights with act_bits < 16 (the int8 lm_head of a
 * w4a8/w4a4 model) are the float emulation, fake-quantized once per run instead of once per
 * slice inside matmul_q: the same bits (kernels.h). */
static int qact_kind(const cllm_fwd_ctx *c, const fwd_wt *w) {
    if (w->kq.type) return c->act16 == CLLM_ACT16_FLOAT ? FWD_QA_NONE : FWD_QA_KQ;
    if (!w->q.bits) return FWD_QA_NONE;
    /* 16-bit activations: int16 codes per group (kernels.h, cllm_qact16_group), quantized once
     * per distinct input like W4A8's, unless CLLM_ACT16=float asks for the float kernels */
    if (w->q.act_bits >= 16) {
        if (c->act16 == CLLM_ACT16_FLOAT) return FWD_QA_NONE;
        return c->act16 == CLLM_ACT16_INT8 && w->q.bits == 4 ? FWD_QA_INT : FWD_QA_INT16;
    }
    if (w->q.bits == 4 && (w->q.act_bits == 8 || w->q.act_bits == 4)) return FWD_QA_INT;
    return FWD_QA_FLOAT;
}

/* The activation bits a FWD_QA_INT job's codes are quantized to: the model's, or 8 for a
 * 16-bit-activation int4 matrix under CLLM_ACT16=int8. */
static int qact_bits(const cllm_qweight *q) {
    return q->act_bits >= 16 ? 8 : q->act_bits;
}

/* Bytes of n_tok tokens of job m's prepared activations. */
static size_t qact_size(const fwd_mm *m, int n_tok) {
    const cllm_qweight *q = &m->w->q;
    if (m->qa == FWD_QA_KQ) return cllm_kq_act_bytes(m->w->kq.K, n_tok);
    if (m->qa == FWD_QA_INT) return cllm_qact_bytes(q->K, q->group, n_tok);
    if (m->qa == FWD_QA_INT16)
        return cllm_qact16_bytes(q->K, cllm_qact16_group(q->bits, q->group), n_tok);
    return (size_t)n_tok * (size_t)q->K * sizeof(float); /* a multiple of 8: K % 8 == 0 */
}

/* Tokens per activation-prep work item (a 1024-wide token takes well under a microsecond). */
#define PREP_TOK 16
/* Inputs (tokens x K) below which the caller prepares them alone. */
#define PREP_SERIAL (64 * 1024)

static void prep_worker(void *vc, size_t b, size_t e, int tid) {
    cllm_fwd_ctx *c = vc;
    for (size_t i = b; i < e; i++) {
        const struct fwd_item *it = &c->items[i];
        const fwd_mm *j = &c->jobs[it->job];
        const cllm_qweight *q = &j->w->q;
        if (j->qa == FWD_QA_KQ) {
            const int K = j->w->kq.K;
            cllm_kq_prep(K, j->X + (size_t)it->r0 * j->ldx, j->ldx, it->r1 - it->r0,
                         c->qact + j->qa_off + cllm_kq_act_bytes(K, it->r0));
            continue;
        }
        if (j->qa == FWD_QA_INT) {
            c->k->qact_prep(j->X + (size_t)it->r0 * j->ldx, j->ldx, it->r1 - it->r0, q->K, q->group,
                            qact_bits(q),
                            c->qact + j->qa_off + cllm_qact_bytes(q->K, q->group, it->r0));
            continue;
        }
        if (j->qa == FWD_QA_INT16) {
            int ag = cllm_qact16_group(q->bits, q->group);
            c->k->qact16_prep(j->X + (size_t)it->r0 * j->ldx, j->ldx, it->r1 - it->r0, q->K, ag,
                              q->bits, c->qact + j->qa_off + cllm_qact16_bytes(q->K, ag, it->r0));
            continue;
        }
        float *dst = (float *)(void *)(c->qact + j->qa_off);
        for (int t = it->r0; t < it->r1; t++)
            cllm_kern_fake_quant_act(j->X + (size_t)t * j->ldx, dst + (size_t)t * q->K, q->K,
                                     q->group, q->act_bits);
    }
}

/* Plans and runs the activation quantization of the queued GPTQ jobs with act_bits < 16: one
 * prepared copy per distinct input (q/k/v or gate/up reading the same X share it), split over
 * the pool by token blocks. Each token's codes depend on that token only, so the results are the
 * same bytes as quantizing per call (kernels' determinism contract). */
static cllm_status prep_qact(cllm_fwd_ctx *c) {
    size_t need = 0, n_items = 0, elems = 0;
    for (size_t j = 0; j < c->n_jobs; j++) {
        fwd_mm *m = &c->jobs[j];
        m->qa = qact_kind(c, m->w);
        m->qa_prep = false;
        if (!m->qa) continue;
        const cllm_qweight *q = &m->w->q;
        size_t i = 0;
        for (; i < j; i++) {
            const fwd_mm *o = &c->jobs[i];
            if (o->qa_prep && o->qa == m->qa && o->X == m->X && o->ldx == m->ldx &&
                o->n_tok == m->n_tok && o->w->q.K == q->K && o->w->q.group == q->group &&
                o->w->kq.K == m->w->kq.K && o->w->q.act_bits == q->act_bits &&
                (m->qa != FWD_QA_INT16 || o->w->q.bits == q->bits)) /* int16 layout per bits */
                break;
        }
        if (i < j) {
            m->qa_off = c->jobs[i].qa_off;
            continue;
        }
        m->qa_prep = true;
        m->qa_off = need;
        need += qact_size(m, m->n_tok);
        n_items += ((size_t)m->n_tok + PREP_TOK - 1) / PREP_TOK;
        elems += (size_t)m->n_tok * (size_t)(q->K ? q->K : m->w->kq.K);
    }
    if (!n_items) return CLLM_OK;
    if (need > c->cap_qact) {
        char *nb = realloc(c->qact, need);
        if (!nb) return CLLM_ENOMEM;
        c->qact = nb;
        c->cap_qact = need;
    }
    if (n_items > c->cap_items) {
        struct fwd_item *ni = realloc(c->items, n_items * sizeof(*ni));
        if (!ni) return CLLM_ENOMEM;
        c->items = ni;
        c->cap_items = n_items;
    }
    size_t k = 0;
    for (size_t j = 0; j < c->n_jobs; j++)
        for (int t = 0; c->jobs[j].qa_prep && t < c->jobs[j].n_tok; t += PREP_TOK) {
            int t1 = t + PREP_TOK < c->jobs[j].n_tok ? t + PREP_TOK : c->jobs[j].n_tok;
            c->items[k++] = (struct fwd_item){(int)j, t, t1, 0, 0};
        }
    /* decode (a few inputs: one per expert, ~1 us each) is cheaper here than a parallel region */
    if (k > 1 && elems > PREP_SERIAL)
        cllm_pool_for(c->pool, k, prep_worker, c);
    else
        prep_worker(c, 0, k, 0);
    return CLLM_OK;
}

/* Columns [n0, n1) of GPTQ matrix q into Y (column 0 of q at Y[0]). */
static void mm_q(cllm_fwd_ctx *c, const fwd_mm *j, const cllm_qweight *q, int n0, int n1,
                 float *Y) {
    if (j->qa == FWD_QA_INT) {
        c->k->matmul_q4_qact(q, n0, n1, c->qact + j->qa_off, j->n_tok, Y, j->ldy);
    } else if (j->qa == FWD_QA_INT16) {
        c->k->matmul_q_qact16(q, n0, n1, c->qact + j->qa_off, j->n_tok, Y, j->ldy);
    } else if (j->qa == FWD_QA_FLOAT) { /* already fake-quantized: the float kernel as is */
        cllm_qweight qf = *q;
        qf.act_bits = 16;
        c->k->matmul_q(&qf, n0, n1, (const float *)(const void *)(c->qact + j->qa_off),
                       (size_t)qf.K, j->n_tok, Y, j->ldy);
    } else {
        c->k->matmul_q(q, n0, n1, j->X, j->ldx, j->n_tok, Y, j->ldy);
    }
}

/* Columns [n0, n1) of a paneled matrix (fwd_wt.panel): each panel is a GPTQ matrix of its own. */
static void mm_q_panels(cllm_fwd_ctx *c, const fwd_mm *j, const fwd_wt *w, int n0, int n1) {
    const int P = w->panel;
    for (int p = n0 / P; p * P < n1; p++) {
        cllm_qweight q = fwd_panel(&w->q, P, p);
        int c0 = p * P, a = n0 > c0 ? n0 - c0 : 0, b = n1 < c0 + q.N ? n1 - c0 : q.N;
        mm_q(c, j, &q, a, b, j->Y + c0);
    }
}

/* Job j restricted to its tokens [t0, t1): inputs, outputs and prepared activations shifted. */
static fwd_mm mm_tokens(const fwd_mm *j, int t0, int t1) {
    fwd_mm v = *j;
    v.n_tok = t1 - t0;
    v.X += (size_t)t0 * j->ldx;
    v.Y += (size_t)t0 * j->ldy;
    if (j->qa) v.qa_off += qact_size(j, t0); /* past the tokens before t0 */
    return v;
}

static void mm_worker(void *vc, size_t b, size_t e, int tid) {
    cllm_fwd_ctx *c = vc;
    for (size_t i = b; i < e; i++) {
        const struct fwd_item *it = &c->items[i];
        const fwd_mm jt = mm_tokens(&c->jobs[it->job], it->t0, it->t1), *j = &jt;
        const fwd_wt *w = j->w;
        if (w->kq.type) {
            c->k->matmul_kq(&w->kq, it->r0, it->r1, j->X, j->ldx,
                            j->qa == FWD_QA_KQ ? c->qact + j->qa_off : NULL, j->n_tok, j->Y, j->ldy,
                            c->act16 == CLLM_ACT16_FLOAT);
            continue;
        }
        if (w->q.bits) { /* GPTQ int4/int8 (MM_ROWS keeps r0 a multiple of 8) */
            if (w->panel)
                mm_q_panels(c, j, w, it->r0, it->r1);
            else
                mm_q(c, j, &w->q, it->r0, it->r1, j->Y);
            continue;
        }
        cllm_matmul_fn fn = cllm_kern_matmul(c->k, w->dt);
        size_t es = cllm_dtype_size(w->dt);
        fn((const char *)w->data + (size_t)it->r0 * w->cols * es, (size_t)w->cols, it->r1 - it->r0,
           j->X, j->ldx, j->n_tok, w->cols, j->Y + it->r0, j->ldy);
    }
}

/* Items are handed out one at a time to whichever thread is free (cllm_pool_for_dyn): a
 * layer's experts share one region and their token counts differ a lot, and a worker that wakes
 * late or is preempted by another process no longer holds the step up (decode on the quarter
 * shape: the caller's wait for workers 7-10 ms -> 0.5-1.2 ms per step). Every output element is
 * computed inside one item, so the schedule never changes results (batch and thread invariance
 * stay). */
static void mm_split_run(cllm_fwd_ctx *c, size_t n) {
    cllm_pool_for_dyn(c->pool, n, mm_worker, c);
}

static cllm_status mm_run(cllm_fwd_ctx *c);

cllm_status fwd_mm_run(cllm_fwd_ctx *c) {
    if (!c->prof_on) return mm_run(c);
    double t0 = cllm_time_s(), w0 = 0.0, w1 = 0.0;
    cllm_pool_profile(c->pool, 1, NULL, &w0);
    cllm_status s = mm_run(c);
    cllm_pool_profile(c->pool, 1, NULL, &w1);
    c->prof[c->prof_tag] += cllm_time_s() - t0;
    c->prof_wait[c->prof_tag] += w1 - w0;
    if (c->prof_tag == FWD_P_MOE_RS || c->prof_tag == FWD_P_MOE_GU) c->prof_tag++;
    return s;
}

static cllm_status mm_run(cllm_fwd_ctx *c) {
    if (prep_qact(c)) return CLLM_ENOMEM;
    size_t n = 0;
    for (size_t j = 0; j < c->n_jobs; j++)
        n += ((size_t)c->jobs[j].w->rows + MM_ROWS - 1) / MM_ROWS *
             (((size_t)c->jobs[j].n_tok + MM_TOK - 1) / MM_TOK);
    /* GPTQ weights (packed along K, N contiguous): wider items so each qweight row read is
     * several cache lines (kernels/matmul_q4_body_int.h); a multiple of MM_ROWS, so n is enough */
    if (n > c->cap_items) {
        struct fwd_item *ni = realloc(c->items, n * sizeof(*ni));
        if (!ni) return CLLM_ENOMEM;
        c->items = ni;
        c->cap_items = n;
    }
    size_t k = 0;
    for (size_t j = 0; j < c->n_jobs; j++)
        for (int r = 0, step = !c->jobs[j].w->q.bits   ? MM_ROWS
                               : c->jobs[j].n_tok <= 8 ? MM_QROWS_DEC
                                                       : MM_QROWS;
             r < c->jobs[j].w->rows; r += step) {
            int r1 = r + step < c->jobs[j].w->rows ? r + step : c->jobs[j].w->rows;
            for (int t = 0, nt = c->jobs[j].n_tok; t < nt; t += MM_TOK)
                c->items[k++] =
                    (struct fwd_item){(int)j, r, r1, t, t + MM_TOK < nt ? t + MM_TOK : nt};
        }
    mm_split_run(c, k);
    c->n_jobs = 0;
    return CLLM_OK;
}

static int imax(int a, int b) {
    return a > b ? a : b;
}

cllm_status cllm_fwd_ctx_create(const cllm_model *m, cllm_pool *pool, cllm_fwd_ctx **out,
                                cllm_error *err) {
    cllm_fwd_ctx *c = calloc(1, sizeof(*c));
    if (!c) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    c->m = m;
    c->pool = pool;
    c->n_threads = pool ? cllm_pool_size(pool) : 1;
    c->k = cllm_kern();
    const cllm_config *cf = &m->cfg;
    c->thr_stride = (size_t)(64 + 4 * cf->head_dim + 2 * cf->lin_v_dim + 64);
    c->thr_stride += fwd_gdn_scratch(cf);
    if (fwd_attn_scratch(cf) > c->thr_stride) c->thr_stride = fwd_attn_scratch(cf);
    c->thr = cllm_alloc_aligned((size_t)c->n_threads * c->thr_stride * sizeof(float));
    c->prof_env = m->opts.profile != CLLM_PROFILE_OFF;
    c->prof_prefill = m->opts.profile == CLLM_PROFILE_PREFILL;
    c->prof_mtp = m->opts.profile == CLLM_PROFILE_MTP;
    c->act16 = m->opts.act16;
    if (!c->thr) {
        free(c);
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    *out = c;
    return CLLM_OK;
}

static void free_bufs(cllm_fwd_ctx *c) {
    free(c->tok_seq);
    free(c->tok_pos);
    free(c->att_blk);
    cllm_free_aligned(c->x);
    cllm_free_aligned(c->xn);
    cllm_free_aligned(c->proj);
    cllm_free_aligned(c->proj2);
    cllm_free_aligned(c->o);
    cllm_free_aligned(c->tmp);
    cllm_free_aligned(c->rope_cs);
    free(c->top_id);
    free(c->top_w);
    free(c->pos_of);
    free(c->slot_at);
    cllm_free_aligned(c->xg);
    cllm_free_aligned(c->gu);
    cllm_free_aligned(c->dn);
    c->tok_seq = c->tok_pos = c->att_blk = c->top_id = c->pos_of = c->slot_at = NULL;
    c->x = c->xn = c->proj = c->proj2 = c->o = c->tmp = c->rope_cs = c->top_w = NULL;
    c->xg = c->gu = c->dn = NULL;
    c->cap = 0;
}

static const char *const prof_names[FWD_P_N] = {"embed",
                                                "norms",
                                                "attn proj (q/k/v/o)",
                                                "attn core (rope, scores, kv)",
                                                "gdn proj (qkv/z/a/b/out)",
                                                "gdn conv + prep",
                                                "gdn recurrence + gated norm",
                                                "moe router + shared gate/up",
                                                "moe experts gate/up",
                                                "moe experts + shared down",
                                                "moe routing/sort/gather/act/combine",
                                                "lm_head",
                                                "mtp fc (the MTP head's input)"};

static void prof_report(cllm_fwd_ctx *c) {
    if (!c->prof_env || c->prof_steps == 0) return;
    unsigned long long calls = 0;
    double wait = 0.0, sum = 0.0;
    cllm_pool_profile(c->pool, 0, &calls, &wait);
    double n = (double)c->prof_steps;
    LOG_INFO("profile: %ld %s steps of %.2f tokens on average, %.3f ms per step (%d threads); "
             "per step:",
             c->prof_steps,
             c->prof_mtp       ? "MTP head"
             : c->prof_prefill ? "prefill"
                               : "decode",
             (double)c->prof_tokens / n, 1e3 * c->prof_total / n, c->n_threads);
    for (int i = 0; i < FWD_P_N; i++) {
        sum += c->prof[i];
        char waits[48] = ""; /* matmul families only: the others run no matmul region */
        if (c->prof_wait[i] > 0.0)
            snprintf(waits, sizeof(waits), "  (matmul waits %.3f ms)", 1e3 * c->prof_wait[i] / n);
        LOG_INFO("profile: %-38s %8.3f ms %5.1f%%%s", prof_names[i], 1e3 * c->prof[i] / n,
                 100.0 * c->prof[i] / c->prof_total, waits);
    }
    if (c->prof_lm[0] > 0.0) /* the screened lm_head's passes (steps with a screened row) */
        LOG_INFO("profile:   of lm_head, screened: estimate pass %.3f, pick %.3f, rescore %.3f, "
                 "settle %.3f ms",
                 1e3 * c->prof_lm[0] / n, 1e3 * c->prof_lm[1] / n, 1e3 * c->prof_lm[2] / n,
                 1e3 * c->prof_lm[3] / n);
    LOG_INFO("profile: %-38s %8.3f ms %5.1f%%", "unaccounted (residual adds, loop)",
             1e3 * (c->prof_total - sum) / n, 100.0 * (c->prof_total - sum) / c->prof_total);
    LOG_INFO("profile: parallel regions %.1f per step; caller waiting for workers %.3f ms per step "
             "(all steps, prefill included)",
             calls / n, 1e3 * wait / n);
}

void cllm_fwd_ctx_free(cllm_fwd_ctx *c) {
    if (!c) return;
    prof_report(c);
    free_bufs(c);
    free(c->exp_off);
    free(c->exp_cnt);
    free(c->seq_tok0);
    free(c->jobs);
    free(c->items);
    free(c->qact);
    cllm_free_aligned(c->lm_buf);
    free(c->lm_rowk);
    cllm_free_aligned(c->mtp_in);
    free(c->mtp_sb);
    free(c->mtp_split);
    cllm_free_aligned(c->gsave);
    free(c->gsave_at);
    cllm_free_aligned(c->thr);
    fwd_tp_free(c);
    free(c);
}

/* Sizes every per-token buffer for T tokens. */
static cllm_status grow(cllm_fwd_ctx *c, int T) {
    if (T <= c->cap) return CLLM_OK;
    free_bufs(c);
    const cllm_model *m = c->m;
    const cllm_config *f = &m->cfg;
    int H = f->hidden_size, vd = f->lin_n_v_heads * f->lin_v_dim;
    int proj = m->q_rows + 2 * m->kv_dim;
    proj = imax(proj, m->conv_ch + vd + 2 * f->lin_n_v_heads);
    proj = imax(proj, 2 * f->intermediate_size);
    proj = imax(proj, f->n_experts);
    int proj2 = 2 * f->shared_expert_intermediate_size + 1;
    int o = imax(imax(f->n_heads * f->head_dim, vd), H);
    int k = f->n_experts_per_tok > 0 ? f->n_experts_per_tok : 1;
    int I2 = 2 * imax(f->moe_intermediate_size, 1);
    size_t t = (size_t)T, tk = t * (size_t)k;
    c->tok_seq = malloc(t * sizeof(int));
    c->tok_pos = malloc(t * sizeof(int));
    c->att_blk = malloc((t + 1) * sizeof(int));
    c->x = cllm_alloc_aligned(t * H * sizeof(float));
    c->xn = cllm_alloc_aligned(t * H * sizeof(float));
    c->proj = cllm_alloc_aligned(t * proj * sizeof(float));
    c->proj2 = cllm_alloc_aligned(t * proj2 * sizeof(float));
    c->o = cllm_alloc_aligned(t * o * sizeof(float));
    c->tmp = cllm_alloc_aligned(t * H * sizeof(float));
    c->rope_cs = cllm_alloc_aligned(t * (size_t)imax(f->rotary_dim, 2) * sizeof(float));
    c->top_id = malloc(tk * sizeof(int));
    c->top_w = malloc(tk * sizeof(float));
    c->pos_of = malloc(tk * sizeof(int));
    c->slot_at = malloc(tk * sizeof(int));
    c->xg = cllm_alloc_aligned(tk * H * sizeof(float));
    c->gu = cllm_alloc_aligned(tk * I2 * sizeof(float));
    c->dn = cllm_alloc_aligned(tk * H * sizeof(float));
    if (!c->tok_seq || !c->tok_pos || !c->att_blk || !c->x || !c->xn || !c->proj || !c->proj2 ||
        !c->o || !c->tmp || !c->rope_cs || !c->top_id || !c->top_w || !c->pos_of || !c->slot_at ||
        !c->xg || !c->gu || !c->dn) {
        free_bufs(c);
        return CLLM_ENOMEM;
    }
    /* Both or neither: a half-made pair (one calloc failed) is freed, so the next grow retries
     * both instead of skipping the block and leaving fwd_moe.c a NULL to memset. */
    if (!c->exp_off || !c->exp_cnt) {
        free(c->exp_off);
        free(c->exp_cnt);
        c->exp_off = calloc((size_t)imax(f->n_experts, 1) + 1, sizeof(int));
        c->exp_cnt = calloc((size_t)imax(f->n_experts, 1), sizeof(int));
        if (!c->exp_off || !c->exp_cnt) {
            free(c->exp_off);
            free(c->exp_cnt);
            c->exp_off = c->exp_cnt = NULL;
            free_bufs(c);
            return CLLM_ENOMEM;
        }
    }
    c->cap = T;
    return CLLM_OK;
}

int cllm_seq_last_rows(const cllm_seq_batch *q) {
    return q->logits_n > 1 ? q->logits_n : 1;
}

size_t cllm_batch_logit_rows(const cllm_batch *b) {
    size_t n = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const cllm_seq_batch *q = &b->seqs[s];
        n += q->logits == CLLM_LOGITS_ALL      ? (size_t)(q->n_tokens > 0 ? q->n_tokens : 0)
             : q->logits == CLLM_LOGITS_LAST   ? (size_t)cllm_seq_last_rows(q)
             : q->logits == CLLM_LOGITS_HIDDEN ? 1
                                               : 0;
    }
    return n;
}

cllm_status fwd_validate(const cllm_model *m, const cllm_batch *b, const cllm_kv_pool *kv,
                         const cllm_state_pool *st, bool with_state, int *T_out, cllm_error *err) {
    const cllm_config *f = &m->cfg;
    if (!b || b->n_seqs < 1 || !b->seqs) return cllm_err_set(err, CLLM_EINVAL, "empty batch");
    /* a pool made by cllm_kv_pool_init_mtp has the MTP layers after the attention layers */
    if (m->n_attn > 0 &&
        (!kv ||
         (kv->n_layers != m->n_attn && !(m->has_mtp && kv->n_layers == m->n_attn + m->n_mtp)) ||
         kv->kv_dim != m->kv_dim || !kv->data))
        return cllm_err_set(err, CLLM_EINVAL, "kv pool does not match the model");
    if (!with_state) st = NULL;
    if (with_state && m->n_gdn > 0 &&
        (!st || st->n_layers != m->n_gdn || st->conv_ch != m->conv_ch || (!st->rec && !st->rec16)))
        return cllm_err_set(err, CLLM_EINVAL, "state pool does not match the model");
    long T = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const cllm_seq_batch *q = &b->seqs[s];
        if (q->n_tokens < 1 || !q->tokens)
            return cllm_err_set(err, CLLM_EINVAL, "sequence %d: empty prompt (no tokens)", s);
        if (q->logits != CLLM_LOGITS_LAST && q->logits != CLLM_LOGITS_ALL &&
            q->logits != CLLM_LOGITS_NONE && q->logits != CLLM_LOGITS_HIDDEN)
            return cllm_err_set(err, CLLM_EINVAL, "sequence %d: bad logits mode", s);
        if (q->logits_n < 0 || q->logits_n > q->n_tokens)
            return cllm_err_set(err, CLLM_EINVAL, "sequence %d: logits_n %d outside 0..%d", s,
                                q->logits_n, q->n_tokens);
        if (q->logits == CLLM_LOGITS_HIDDEN && f->hidden_size > f->vocab_size)
            return cllm_err_set(err, CLLM_EINVAL,
                                "sequence %d: a hidden-state row needs hidden_size <= vocab_size",
                                s);
        if (q->start_pos < 0)
            return cllm_err_set(err, CLLM_EINVAL, "sequence %d: negative start position", s);
        long end = (long)q->start_pos + q->n_tokens;
        if (end > f->max_position_embeddings)
            return cllm_err_set(err, CLLM_ERANGE,
                                "sequence %d: position %ld beyond "
                                "max_position_embeddings %d",
                                s, end - 1, f->max_position_embeddings);
        if ((q->mrope_pos || q->rope_delta) && !f->mrope_section[0] && !f->mrope_section[1] &&
            !f->mrope_section[2])
            return cllm_err_set(err, CLLM_EINVAL,
                                "sequence %d: M-RoPE positions for a model without "
                                "mrope_section",
                                s);
        if (q->rope_delta < -q->start_pos)
            return cllm_err_set(err, CLLM_EINVAL, "sequence %d: rope_delta %d below -%d", s,
                                q->rope_delta, q->start_pos);
        for (int i = 0; q->mrope_pos && i < 3 * q->n_tokens; i++)
            if (q->mrope_pos[i] < 0 || q->mrope_pos[i] >= f->max_position_embeddings)
                return cllm_err_set(err, CLLM_ERANGE,
                                    "sequence %d: M-RoPE position %d outside [0, %d)", s,
                                    q->mrope_pos[i], f->max_position_embeddings);
        for (int i = 0; i < q->n_tokens; i++)
            if (q->tokens[i] < 0 || q->tokens[i] >= f->vocab_size)
                return cllm_err_set(err, CLLM_EINVAL,
                                    "sequence %d: token id %d out of range "
                                    "[0, %d)",
                                    s, q->tokens[i], f->vocab_size);
        if (m->n_attn > 0) {
            long need = (end + kv->block_size - 1) / kv->block_size;
            if (!q->block_table || q->n_table < need)
                return cllm_err_set(err, CLLM_EINVAL,
                                    "sequence %d: block table has %d entries, "
                                    "positions up to %ld need %ld",
                                    s, q->n_table, end - 1, need);
            for (long i = 0; i < need; i++)
                if (q->block_table[i] < 0 || q->block_table[i] >= kv->n_blocks)
                    return cllm_err_set(err, CLLM_EINVAL,
                                        "sequence %d: block %d out of range "
                                        "[0, %d)",
                                        s, q->block_table[i], kv->n_blocks);
        }
        if (with_state && m->n_gdn > 0) {
            if (q->state_slot < 0 || q->state_slot >= st->n_slots)
                return cllm_err_set(err, CLLM_EINVAL,
                                    "sequence %d: state slot %d out of range "
                                    "[0, %d)",
                                    s, q->state_slot, st->n_slots);
            for (int s2 = 0; s2 < s; s2++)
                if (b->seqs[s2].state_slot == q->state_slot)
                    return cllm_err_set(err, CLLM_EINVAL, "sequences %d and %d share state slot %d",
                                        s2, s, q->state_slot);
            if (q->state_fork) {
                if (q->state_src < 0 || q->state_src >= st->n_slots)
                    return cllm_err_set(err, CLLM_EINVAL,
                                        "sequence %d: state source slot %d out of range [0, %d)", s,
                                        q->state_src, st->n_slots);
                for (int s2 = 0; s2 < b->n_seqs; s2++)
                    if (b->seqs[s2].state_slot == q->state_src)
                        return cllm_err_set(err, CLLM_EINVAL,
                                            "sequence %d reads state slot %d that sequence %d "
                                            "writes",
                                            s, q->state_src, s2);
            }
        }
        T += q->n_tokens;
        if (T > (1L << 24))
            return cllm_err_set(err, CLLM_ENOMEM, "batch too large (%ld tokens)", T);
    }
    *T_out = (int)T;
    return CLLM_OK;
}

void fwd_embed_row(const fwd_wt *e, int id, float *dst) {
    if (e->q.bits) { /* a GGUF's Q4_0/Q8_0 token_embd (model/gguf_ckpt.h): exact d * (q - z) */
        cllm_qformat_dequant_row(&e->q, id, dst);
        return;
    }
    if (e->kq.type) { /* a GGUF's K-quant token_embd */
        cllm_kq_dequant_row(&e->kq, id, dst);
        return;
    }
    size_t es = cllm_dtype_size(e->dt);
    const void *row = (const char *)e->data + (size_t)id * e->cols * es;
    if (e->dt == CLLM_DT_F32)
        memcpy(dst, row, (size_t)e->cols * 4);
    else if (e->dt == CLLM_DT_BF16)
        cllm_bf16_to_f32_row(row, dst, (size_t)e->cols);
    else
        cllm_f16_to_f32_row(row, dst, (size_t)e->cols);
}

typedef struct norm_job {
    cllm_fwd_ctx *c;
    const float *w;
    const float *src;
    float *dst;
    const int *rows; /* NULL: identity */
} norm_job;

static void norm_worker(void *vj, size_t b, size_t e, int tid) {
    norm_job *j = vj;
    int H = j->c->m->cfg.hidden_size;
    float eps = (float)j->c->m->cfg.rms_norm_eps;
    for (size_t i = b; i < e; i++) {
        size_t r = j->rows ? (size_t)j->rows[i] : i;
        fwd_rmsnorm(j->dst + i * H, j->src + r * H, j->w, H, eps);
    }
}

/* dst row i = rmsnorm(src row rows[i] (i when rows is NULL), w), n rows over the pool. */
static void fwd_rmsnorm_rows(cllm_fwd_ctx *c, const float *w, const float *src, float *dst,
                             const int *rows, int n) {
    norm_job j = {c, w, src, dst, rows};
    cllm_pool_for(c->pool, (size_t)n, norm_worker, &j);
}

/* The position component (0 temporal, 1 height, 2 width) rotary frequency slot i turns by
 * (config.h: mrope_section). */
static int mrope_component(const cllm_config *f, int i) {
    const int *s = f->mrope_section;
    if (f->mrope_interleaved) {
        int k = i % 3;
        return k && i < 3 * s[k] ? k : 0;
    }
    return i < s[0] ? 0 : i < s[0] + s[1] ? 1 : 2;
}

void fwd_rope_tables(cllm_fwd_ctx *c, int T) {
    const cllm_config *f = &c->m->cfg;
    const cllm_batch *b = c->batch;
    int half = f->rotary_dim / 2;
    for (int t = 0; t < T; t++) {
        float *cs = c->rope_cs + (size_t)t * f->rotary_dim;
        const cllm_seq_batch *sq = b ? &b->seqs[c->tok_seq[t]] : NULL;
        const int32_t *mp = NULL;
        int pos = c->tok_pos[t];
        if (sq && sq->mrope_pos) mp = sq->mrope_pos + 3 * (size_t)(pos - sq->start_pos);
        if (sq) pos += sq->rope_delta;
        for (int i = 0; i < half; i++) {
            double inv = pow(f->rope_theta, -2.0 * i / f->rotary_dim);
            double ang = (double)(mp ? mp[mrope_component(f, i)] : pos) * inv;
            cs[i] = (float)cos(ang);
            cs[half + i] = (float)sin(ang);
        }
    }
}

static cllm_status fwd_logit_rows(cllm_fwd_ctx *c, const cllm_batch *b, int R, int n_ids,
                                  float *logits);

cllm_status fwd_prepare(cllm_fwd_ctx *c, const cllm_batch *b, int T, cllm_error *err) {
    if (grow(c, T) != CLLM_OK || b->n_seqs > c->cap_seqs) {
        free(c->seq_tok0);
        c->seq_tok0 = malloc((size_t)b->n_seqs * sizeof(int));
        c->cap_seqs = c->seq_tok0 ? b->n_seqs : 0;
        if (c->cap < T || !c->seq_tok0)
            return cllm_err_set(err, CLLM_ENOMEM, "forward: out of memory for %d tokens", T);
    }
    c->batch = b;
    c->n_jobs = 0; /* nothing left over from a call that failed half-way */
    return CLLM_OK;
}

cllm_status fwd_run_layer(cllm_fwd_ctx *c, const fwd_layer *L, int l, int T, cllm_error *err) {
    const cllm_model *m = c->m;
    double tpr = 0.0;
    cllm_status s;
    c->layer = l;
    /* tensor parallel: each block adds its partial output into a zeroed accumulator that
     * is all-reduced into the residual (forward_tp.c); blocks must not read c->x */
    float *xr = NULL;
    bool tp = m->tp_size > 1;
    if (c->prof_on) tpr = cllm_time_s();
    fwd_rmsnorm_rows(c, L->norm.in, c->x, c->xn, NULL, T);
    if (c->prof_on) c->prof[FWD_P_NORM] += cllm_time_s() - tpr;
    if (tp && (s = fwd_tp_begin(c, T, &xr)) != CLLM_OK)
        return cllm_err_set(err, s, "forward: out of memory");
    c->prof_tag = L->type == CLLM_LAYER_FULL_ATTN ? FWD_P_ATTN_PROJ : FWD_P_GDN_PROJ;
    double before = c->prof[c->prof_tag];
    if (c->prof_on) tpr = cllm_time_s();
    s = L->type == CLLM_LAYER_FULL_ATTN ? fwd_attention(c, &L->attn, L->sub, T)
                                        : fwd_deltanet(c, &L->gdn, L->sub, T);
    if (c->prof_on && L->type == CLLM_LAYER_FULL_ATTN)
        c->prof[FWD_P_ATTN_CORE] += cllm_time_s() - tpr - (c->prof[FWD_P_ATTN_PROJ] - before);
    if (tp && s == CLLM_OK) s = fwd_tp_end(c, T, xr);
    if (s != CLLM_OK) return cllm_err_set(err, s, "forward: layer %d: %s", l, cllm_status_name(s));
    if (c->prof_on) tpr = cllm_time_s();
    fwd_rmsnorm_rows(c, L->norm.post, c->x, c->xn, NULL, T);
    if (c->prof_on) c->prof[FWD_P_NORM] += cllm_time_s() - tpr;
    if (tp && (s = fwd_tp_begin(c, T, &xr)) != CLLM_OK)
        return cllm_err_set(err, s, "forward: out of memory");
    c->prof_tag = FWD_P_MOE_RS;
    before = c->prof[FWD_P_MOE_RS] + c->prof[FWD_P_MOE_GU] + c->prof[FWD_P_MOE_DOWN];
    if (c->prof_on) tpr = cllm_time_s();
    s = L->is_moe ? fwd_moe(c, &L->moe, T) : fwd_mlp_dense(c, &L->mlp, T);
    if (c->prof_on)
        c->prof[FWD_P_MOE_REST] +=
            cllm_time_s() - tpr -
            (c->prof[FWD_P_MOE_RS] + c->prof[FWD_P_MOE_GU] + c->prof[FWD_P_MOE_DOWN] - before);
    if (tp && s == CLLM_OK) s = fwd_tp_end(c, T, xr);
    if (s != CLLM_OK) return cllm_err_set(err, s, "forward: layer %d: %s", l, cllm_status_name(s));
    return CLLM_OK;
}

cllm_status fwd_layer_kv(cllm_fwd_ctx *c, const fwd_layer *L, int l, int T) {
    c->layer = l;
    fwd_rmsnorm_rows(c, L->norm.in, c->x, c->xn, NULL, T);
    c->prof_tag = FWD_P_ATTN_PROJ; /* else the last tag set: the lm_head's */
    return fwd_attention_kv(c, &L->attn, L->sub, T);
}

cllm_status fwd_head(cllm_fwd_ctx *c, const float *norm_w, int T, double tp0, int n_ids,
                     float *logits, cllm_error *err) {
    const cllm_model *m = c->m;
    const cllm_config *f = &m->cfg;
    const cllm_batch *b = c->batch;
    int H = f->hidden_size;
    cllm_status s;
    double tpr = 0.0;
    if (c->prof_on) tpr = cllm_time_s();
    c->prof_tag = FWD_P_LM_HEAD;
    c->layer = -1;
    /* every token's normed hidden state for the sequences that ask (the MTP head's input):
     * the same fwd_rmsnorm of the same rows as the logits' below, so those keep their bits */
    for (int q = 0; q < b->n_seqs; q++)
        if (b->seqs[q].hidden_out)
            fwd_rmsnorm_rows(c, norm_w, c->x + (size_t)c->seq_tok0[q] * H, b->seqs[q].hidden_out,
                             NULL, b->seqs[q].n_tokens);
    /* Final norm and lm_head on the requested rows only (row list reuses pos_of: T*k >= T). */
    int *rows = c->pos_of, R = 0;
    if (m->lm_screen && c->cap_rowk < c->cap) {
        int *nk = realloc(c->lm_rowk, (size_t)c->cap * sizeof(int));
        if (!nk) return cllm_err_set(err, CLLM_ENOMEM, "forward: out of memory");
        c->lm_rowk = nk;
        c->cap_rowk = c->cap;
    }
    for (int q = 0; q < b->n_seqs; q++) {
        const cllm_seq_batch *sq = &b->seqs[q];
        if (sq->logits == CLLM_LOGITS_ALL)
            for (int i = 0; i < sq->n_tokens; i++) {
                if (m->lm_screen) c->lm_rowk[R] = 0;
                rows[R++] = c->seq_tok0[q] + i;
            }
        else if (sq->logits == CLLM_LOGITS_HIDDEN) {
            if (m->lm_screen) c->lm_rowk[R] = 0;
            rows[R++] = c->seq_tok0[q] + sq->n_tokens - 1;
        } else if (sq->logits == CLLM_LOGITS_LAST) {
            /* the screened lm_head serves a row whose caller needs only its k best */
            int nl = cllm_seq_last_rows(sq);
            for (int i = sq->n_tokens - nl; i < sq->n_tokens; i++) {
                if (m->lm_screen)
                    c->lm_rowk[R] = sq->logits_topk > 0 && sq->logits_topk <= CLLM_LOGITS_TOPK_MAX
                                        ? sq->logits_topk
                                        : 0;
                rows[R++] = c->seq_tok0[q] + i;
            }
        }
    }
    if (R == 0) return CLLM_OK;
    fwd_rmsnorm_rows(c, norm_w, c->x, c->xn, rows, R);
    if (c->prof_on) c->prof[FWD_P_NORM] += cllm_time_s() - tpr;
    s = fwd_logit_rows(c, b, R, n_ids, logits);
    if (s != CLLM_OK) return cllm_err_set(err, s, "forward: lm_head: %s", cllm_status_name(s));
    /* hidden-state rows: the normed row itself over the lm_head's output (the lm_head ran on it
     * only when the batch has logits rows too) */
    for (int q = 0, r = 0; q < b->n_seqs; q++) {
        const cllm_seq_batch *sq = &b->seqs[q];
        if (sq->logits == CLLM_LOGITS_HIDDEN)
            memcpy(logits + (size_t)r * f->vocab_size, c->xn + (size_t)r * H,
                   (size_t)H * sizeof(float));
        r += sq->logits == CLLM_LOGITS_ALL    ? sq->n_tokens
             : sq->logits == CLLM_LOGITS_LAST ? cllm_seq_last_rows(sq)
             : sq->logits == CLLM_LOGITS_NONE ? 0
                                              : 1;
    }
    if (c->prof_on) {
        c->prof_steps++;
        c->prof_tokens += T;
        c->prof_total += cllm_time_s() - tp0;
    }
    return CLLM_OK;
}

/* The lm_head over the R normed rows in c->xn (the screened or plain kernels, or the tensor-
 * parallel split), unless every row is a hidden-state row. */
/* The first n_ids rows of the lm_head over the R normed rows in c->xn, every later entry -inf:
 * contiguous rows of a 16-bit matrix, the first columns of a GPTQ one (paneled or not: the
 * kernels take a column range). A screened int8 lm_head screens the prefix instead
 * (fwd_lm_screen's n_ids: a draft's argmax at the estimate plane's cost). */
static cllm_status lm_head_prefix(cllm_fwd_ctx *c, int R, int n_ids, float *logits) {
    const cllm_model *m = c->m;
    int V = m->cfg.vocab_size;
    fwd_wt v = m->lm_head;
    v.rows = n_ids;
    if (fwd_mm_add(c, &v, c->xn, (size_t)m->cfg.hidden_size, R, logits, (size_t)V) != CLLM_OK ||
        fwd_mm_run(c) != CLLM_OK)
        return CLLM_ENOMEM;
    for (int r = 0; r < R; r++)
        for (int i = n_ids; i < V; i++) logits[(size_t)r * V + i] = -INFINITY;
    return CLLM_OK;
}

static cllm_status fwd_logit_rows(cllm_fwd_ctx *c, const cllm_batch *b, int R, int n_ids,
                                  float *logits) {
    const cllm_model *m = c->m;
    const cllm_config *f = &m->cfg;
    int H = f->hidden_size;
    bool any = false;
    for (int q = 0; q < b->n_seqs; q++)
        any |= b->seqs[q].logits == CLLM_LOGITS_ALL || b->seqs[q].logits == CLLM_LOGITS_LAST;
    if (!any) return CLLM_OK;
    if (n_ids > 0 && n_ids < f->vocab_size && !m->lm_screen)
        return lm_head_prefix(c, R, n_ids, logits);
    if (m->tp_size > 1) return fwd_tp_lm_head(c, R, logits);
    if (m->lm_screen) {
        double t0 = c->prof_on ? cllm_time_s() : 0.0;
        if (fwd_lm_screen(c, R, c->lm_rowk, n_ids, logits) != CLLM_OK) return CLLM_ENOMEM;
        if (c->prof_on) c->prof[FWD_P_LM_HEAD] += cllm_time_s() - t0;
        return CLLM_OK;
    }
    if (fwd_mm_add(c, &m->lm_head, c->xn, (size_t)H, R, logits, (size_t)f->vocab_size) != CLLM_OK ||
        fwd_mm_run(c) != CLLM_OK)
        return CLLM_ENOMEM;
    return CLLM_OK;
}

cllm_status cllm_forward(cllm_fwd_ctx *c, const cllm_batch *b, cllm_kv_pool *kv,
                         cllm_state_pool *st, float *logits, cllm_error *err) {
    const cllm_model *m = c->m;
    const cllm_config *f = &m->cfg;
    int T = 0;
    cllm_status s = fwd_validate(m, b, kv, st, true, &T, err);
    if (s == CLLM_OK && m->tp_size > 1) s = fwd_tp_check_batch(b, err);
    /* the chunked WY form works on a float32 state in place */
    if (s == CLLM_OK && m->n_gdn > 0 && st->rec16 && c->gdn_prefill == CLLM_GDN_CHUNKED)
        s = cllm_err_set(err, CLLM_EINVAL,
                         "--gdn-prefill chunked needs a float32 recurrent state (this one is "
                         "bfloat16: --mamba-ssm-cache-dtype, --ssm-dtype)");
    if (s == CLLM_OK) s = fwd_prepare(c, b, T, err);
    if (s == CLLM_OK && fwd_gdn_save_begin(c, b) != CLLM_OK)
        s = cllm_err_set(err, CLLM_ENOMEM, "out of memory (saved Gated DeltaNet inputs)");
    if (s != CLLM_OK) return s;
    /* decode: one token per sequence; CLLM_PROFILE=prefill: the other steps */
    c->prof_on = c->prof_env && !c->prof_mtp && (T == b->n_seqs) != c->prof_prefill;
    if (c->prof_env) cllm_pool_profile(c->pool, 1, NULL, NULL);
    double tp0 = c->prof_on ? cllm_time_s() : 0.0;
    c->kv = kv;
    c->st = st;
    int H = f->hidden_size;
    int t = 0;
    for (int q = 0; q < b->n_seqs; q++) {
        const cllm_seq_batch *sq = &b->seqs[q];
        c->seq_tok0[q] = t;
        if (m->n_gdn > 0 && sq->start_pos == 0) cllm_state_slot_clear(st, sq->state_slot);
        for (int i = 0; i < sq->n_tokens; i++, t++) {
            c->tok_seq[t] = q;
            c->tok_pos[t] = sq->start_pos + i;
            if (sq->embeds && sq->embeds[i])
                memcpy(c->x + (size_t)t * H, sq->embeds[i], (size_t)H * sizeof(float));
            else
                fwd_embed_row(&m->embed, sq->tokens[i], c->x + (size_t)t * H);
        }
    }
    if (m->n_attn > 0) fwd_rope_tables(c, T);
    if (c->prof_on) c->prof[FWD_P_EMBED] += cllm_time_s() - tp0;
    const cllm_fwd_hooks *hk = &c->hooks; /* calibration (model/forward.h); off when serving */
    int n_run = hk->stop_layer > 0 && hk->stop_layer < f->n_layers ? hk->stop_layer : f->n_layers;
    int l0 = 0;
    if (hk->resid && hk->resid_in > 0 && hk->resid_in < n_run) {
        l0 = hk->resid_in;
        memcpy(c->x, hk->resid, (size_t)T * H * sizeof(float));
    }
    for (int l = l0; l < n_run; l++) {
        if (hk->resid && l == hk->resid_out) memcpy(hk->resid, c->x, (size_t)T * H * sizeof(float));
        if ((s = fwd_run_layer(c, &m->layers[l], l, T, err)) != CLLM_OK) return s;
    }
    if (n_run < f->n_layers) return CLLM_OK; /* calibration stopped early: no logits */
    return fwd_head(c, m->final_norm, T, tp0, 0, logits, err);
}
