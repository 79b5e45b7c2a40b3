/* Private to the forward pass (model/weights.c, forward.c, fwd_*.c): bound weights, scratch,
 * and the helpers the layer files share. */
#ifndef CLLM_MODEL_FWD_INT_H
#define CLLM_MODEL_FWD_INT_H

#include <math.h>

#include "kernels/kernels.h"
#include "model/forward.h"

/* A matrix [rows][cols] row-major in the mmap, stored dtype. NULL data = not bound.
 * q.bits != 0: a GPTQ-quantized matrix (quant/quant.h); data = q.qweight, dt = I32. */
typedef struct fwd_wt {
    const void *data;
    cllm_dtype dt;
    int rows, cols;
    cllm_qweight q;
    /* where it was bound from (the calibration hook names it): checkpoint tensor name and the
     * element offset inside it; NULL for GPTQ weights. A tensor-parallel slice (weights_tp.c)
     * keeps the whole matrix's values (calibration runs one process) */
    const char *src;
    uint64_t src_off;
    /* GPTQ only: 0 = the checkpoint's layout; P = qweight, qzeros and scales repacked into
     * column panels of P (the last N % P), each stored whole as a GPTQ matrix of that width
     * (weights.c model_panels): a decode tile then streams one contiguous block */
    int panel;
    /* ggml block-format weights (a GGUF's K-quants, model/gguf_ckpt.h): kq.type != 0, data ==
     * kq.data, dt U8; run by cllm_kern_ops.matmul_kq */
    cllm_kqweight kq;
} fwd_wt;

/* Panel p of a matrix repacked into panels of P columns (weights.c model_panels): a GPTQ matrix
 * of its own, N = P (the last N % P). The one place that says where a panel lives: the loader
 * writes through it and the matmul reads through it. */
static inline cllm_qweight fwd_panel(const cllm_qweight *q, int P, int p) {
    const size_t per = 32 / (size_t)q->bits, kw = (size_t)q->K / per, ng = (size_t)q->K / q->group;
    cllm_qweight r = *q;
    r.qweight += (size_t)p * kw * P;
    r.qzeros += (size_t)p * ng * (P / per);
    r.scales += (size_t)p * ng * P;
    r.N = q->N - p * P < P ? q->N - p * P : P;
    return r;
}

typedef struct fwd_mlp {
    fwd_wt gate, up, down; /* gate/up [I][H], down [H][I] */
} fwd_mlp;

/* A decoder layer's weights, one struct per block type of the tensor tables
 * (model/tensor_table.c: each row's offsetof names a field below). A block the layer's builder
 * does not list stays zeroed (NULL data); each layer body reads its own block's struct. */
typedef struct fwd_norms_w {
    float *in, *post; /* [H], effective weight ((1 + w) already applied if needed) */
} fwd_norms_w;

/* full attention (fwd_attn.c) */
typedef struct fwd_attn_w {
    fwd_wt q, k, v, o;
    float *q_bias, *k_bias, *v_bias; /* NULL unless attention_bias */
    float *q_norm, *k_norm;          /* [head_dim], effective; NULL: the architecture has none */
} fwd_attn_w;

/* Gated DeltaNet (fwd_deltanet.c) */
typedef struct fwd_gdn_w {
    fwd_wt qkv, z, b, a, out;
    float *conv_w;  /* [kernel][conv_ch]: tap-major (weights.c conv_tap_major) */
    float *A;       /* [Hv] = -exp(A_log) */
    float *dt_bias; /* [Hv] */
    float *gnorm;   /* [dv], plain w */
} fwd_gdn_w;

/* MoE router, routed experts and the optional shared expert (fwd_moe.c) */
typedef struct fwd_moe_w {
    fwd_wt router;    /* [E][H] */
    fwd_mlp *experts; /* [E]; an expert with NULL gate.data is not bound (not this shard) */
    bool has_shared;
    fwd_mlp shared;
    fwd_wt shared_gate; /* [1][H] */
} fwd_moe_w;

typedef struct fwd_layer {
    cllm_layer_type type; /* CLLM_LAYER_FULL_ATTN: attn is bound, else gdn */
    bool is_moe;          /* moe is bound, else mlp */
    int sub;              /* index among attention layers (KV pool) or GDN layers (state) */
    fwd_norms_w norm;
    fwd_attn_w attn;
    fwd_gdn_w gdn;
    fwd_moe_w moe;
    fwd_mlp mlp; /* dense SwiGLU MLP */
} fwd_layer;

struct cllm_model {
    cllm_config cfg;
    cllm_ckpt *ckpt;
    fwd_layer *layers; /* [n_layers] */
    fwd_wt embed, lm_head;
    float *final_norm;
    int n_attn, n_gdn;
    int conv_ch, q_rows, kv_dim;
    bool has_mtp;
    /* MTP head, bound when present, run by cllm_forward_mtp (fwd_mtp.c) */
    int n_mtp;
    fwd_layer *mtp_layers; /* [n_mtp], sub = n_attn + j: KV layer of an MTP pool */
    fwd_wt mtp_fc;         /* [H][2H] */
    float *mtp_norm, *mtp_pre_emb, *mtp_pre_hidden;
    /* GPTQ matrices repacked into panels at load (weights.c model_panels): their bytes, and
     * whether every GPTQ matrix was (the prefault then skips the checkpoint's GPTQ tensors) */
    size_t panel_bytes;
    bool panel_all;
    /* The screened int8 lm_head (weights.c lm_screen_plan, fwd_lmhead.c): lm_screen candidates
     * per row (0 = plain). Its panels hold two int4 planes, which three int4 panel arrays read
     * (the int8 scales, zeros of their own): lm_hi the hi plane for the estimate, lm_hx the hi
     * and lm_lx the lo plane for exact logits (16 lm_hx + lm_lx); lm_head keeps the int8 zeros */
    int lm_screen;
    fwd_wt lm_hi, lm_hx, lm_lx;
    /* the 2-bit estimate plane (bits 2, kernels.h matmul_q2_qact: each column and group of the
     * int8 codes quantized on its own, scales of its own, zero LM_Q2_ZERO halves; weights.c
     * lm_q2_panel), which the estimate reads instead of lm_hi; data NULL when the screen
     * estimates from lm_hi (CLLM_LM_EST=4) */
    fwd_wt lm_q2;
    void **allocs; /* owned blocks (vectors, slices, panel arenas), cllm_free_aligned */
    size_t n_allocs, cap_allocs;
    /* tensor parallel (model/weights_tp.c): cfg holds this rank's dims; 1 = not sharded */
    int tp_rank, tp_size;
    int *tp_vsplit; /* [tp_size][2]: first lm_head row and row count of each rank */
    uint64_t tp_hash;
    cllm_fwd_opts opts; /* as given to cllm_model_load (zeroed: defaults) */
    /* the vision tower (model/vision_int.h), NULL when the checkpoint has none; model-owned */
    struct fwd_vision *vision;
};

/* FWD_QA_INT16: act_bits 16 on int16 codes (qact16_prep + matmul_q_qact16), the default for
 * 16-bit-activation GPTQ weights unless cllm_fwd_opts.act16 says float or int8. */
/* FWD_QA_KQ: a ggml block-format matrix's int16 codes (cllm_kq_prep, matmul_kq). */
enum { FWD_QA_NONE, FWD_QA_INT, FWD_QA_FLOAT, FWD_QA_INT16, FWD_QA_KQ };

/* cllm_fwd_opts.act16 (CLLM_ACT16): int (default) = int16 codes; float = the float kernels, for
 * A/B checks; int8 = int4 matrices of a 16-bit-activation model run W4A8's int8 codes and
 * kernels (FWD_QA_INT with act_bits 8), an opt-in quality trade for speed (int8 matrices such as
 * the default lm_head keep int16 codes). */

/* CLLM_PROFILE=1: wall time per op family of the decode steps (calls with one token per
 * sequence: batched decode too), summed
 * over the context's life and logged when it is freed. fwd_mm_run adds its time to
 * prof[prof_tag]; the MoE block's three matmul passes advance the tag MOE_RS -> MOE_GU ->
 * MOE_DOWN themselves (fwd_moe.c needs no timers). */
enum {
    FWD_P_EMBED,
    FWD_P_NORM,
    FWD_P_ATTN_PROJ,
    FWD_P_ATTN_CORE,
    FWD_P_GDN_PROJ,
    FWD_P_GDN_CONV,
    FWD_P_GDN_REC,
    FWD_P_MOE_RS,   /* router + shared expert gate/up + shared gate */
    FWD_P_MOE_GU,   /* routed experts gate/up */
    FWD_P_MOE_DOWN, /* routed experts down + shared expert down */
    FWD_P_MOE_REST, /* softmax/top-k, sort, gather, SiLU, combine */
    FWD_P_LM_HEAD,
    FWD_P_MTP_FC, /* the MTP head's input projection (CLLM_PROFILE=mtp) */
    FWD_P_N
};

/* One matmul over a token block: Y[t][r] = W[r] . X[t] (r < w->rows). */
typedef struct fwd_mm {
    const fwd_wt *w;
    const float *X;
    size_t ldx;
    int n_tok;
    float *Y;
    size_t ldy;
    /* set by fwd_mm_run: GPTQ jobs with act_bits < 16 read activations quantized once per run
     * at c->qact + qa_off, int codes (FWD_QA_INT, qact_prep) or fake-quantized floats
     * (FWD_QA_FLOAT, [n_tok][K]); qa_prep marks the job that prepares them (others share its X) */
    int qa;
    bool qa_prep;
    size_t qa_off;
} fwd_mm;

struct cllm_fwd_ctx {
    const cllm_model *m;
    cllm_gdn_prefill gdn_prefill;
    cllm_pool *pool;
    int n_threads;
    const cllm_kern_ops *k;
    int cap; /* token capacity of the buffers below */
    int cap_assign;
    /* per token */
    int *tok_seq, *tok_pos;
    int *att_blk; /* [T + 1]: first token of each attention query block (fwd_attn.c) */
    float *x, *xn, *proj, *proj2, *o, *tmp, *rope_cs;
    /* MoE, per (token, slot) */
    int *top_id;            /* [T][k] */
    float *top_w;           /* [T][k] */
    int *pos_of;            /* [T*k] sorted position of assignment (t, j) */
    int *slot_at;           /* [T*k] assignment at sorted position */
    int *exp_off, *exp_cnt; /* [E] */
    float *xg, *gu, *dn;    /* [T*k][H], [T*k][2I], [T*k][H] */
    /* per thread scratch */
    float *thr; /* [n_threads][thr_stride] */
    size_t thr_stride;
    /* matmul work list */
    fwd_mm *jobs;
    size_t n_jobs, cap_jobs;
    struct fwd_item {
        int job, r0, r1; /* matmul: columns [r0, r1); prep: tokens [r0, r1) */
        int t0, t1;      /* matmul: tokens [t0, t1) */
    } * items;
    size_t cap_items;
    char *qact; /* prepared activations of the queued jobs (fwd_mm.qa) */
    size_t cap_qact;
    /* the batch being run */
    const cllm_batch *batch;
    int *seq_tok0; /* [n_seqs] first token index */
    int cap_seqs;
    cllm_kv_pool *kv;
    cllm_state_pool *st;
    /* calibration hooks (cllm_fwd_ctx_set_hooks; all off when serving) and the layer running */
    cllm_fwd_hooks hooks;
    int layer;
    /* tensor parallel scratch (forward_tp.c) */
    float *tp_acc, *tp_lg;
    size_t tp_acc_cap, tp_lg_cap;
    /* the screened lm_head's buffers (fwd_lmhead.c) and each logits row's k (0 = exact) */
    char *lm_buf;
    size_t cap_lm;
    int *lm_rowk;
    int cap_rowk;
    /* cllm_forward_mtp (fwd_mtp.c): the fc's input [T][2H] and the call's sequences as a batch */
    float *mtp_in;
    size_t cap_mtp_in;
    cllm_seq_batch *mtp_sb;
    int cap_mtp_sb;
    cllm_batch mtp_b;        /* {mtp_sb, n}: c->batch during a call */
    cllm_mtp_seq *mtp_split; /* [2][cap_mtp_split]: a call's K/V-only rows and the rest */
    int cap_mtp_split;
    /* Gated DeltaNet inputs of the last cllm_forward's state_save rows (fwd_gdn_save.c):
     * [n_gdn][gsave_n tokens][row]; gsave_at [gsave_seqs] each sequence's first saved token (-1:
     * none), followed by its start_pos [gsave_seqs] and n_tokens [gsave_seqs] */
    float *gsave;
    size_t cap_gsave;
    int *gsave_at;
    int cap_gsave_at, gsave_n, gsave_seqs;
    /* cllm_fwd_opts.act16: how act_bits 16 GPTQ matmuls take their activations */
    cllm_act16 act16;
    /* cllm_fwd_opts.profile (see FWD_P_*): prof_on for the step being run */
    bool prof_env, prof_on, prof_prefill, prof_mtp;
    int prof_tag;
    double prof[FWD_P_N];
    double prof_wait[FWD_P_N]; /* of prof: the caller waiting for workers in matmul regions */
    double prof_lm[4]; /* of prof[FWD_P_LM_HEAD], the screened lm_head's passes (fwd_lmhead.c) */
    long prof_steps, prof_tokens;
    double prof_total;
};

/* The pieces of cllm_forward that cllm_forward_mtp (fwd_mtp.c) runs too (forward.c).
 * fwd_validate: the batch checks of cllm_forward (with_state = false: no state pool, slots not
 * checked); a kv pool with or without the MTP layers passes. fwd_prepare: scratch for T tokens
 * and c->batch = b. fwd_run_layer: one decoder layer over c->x (input norm, mixer, post norm,
 * MLP/MoE) as layer index l (the hooks' and error messages' number). fwd_head: for every
 * sequence with hidden_out its tokens' rows of c->x normed by norm_w, then the logits rows the
 * batch asks for (normed by norm_w, lm_head plain, screened or TP); tp0 = the call's start for
 * CLLM_PROFILE; n_ids in 1..vocab-1: those rows hold token ids < n_ids only, the rest -inf (the
 * MTP head's draft vocabulary: the lm_head's first rows, plain kernels), 0 = all. */
cllm_status fwd_validate(const cllm_model *m, const cllm_batch *b, const cllm_kv_pool *kv,
                         const cllm_state_pool *st, bool with_state, int *T_out, cllm_error *err);
cllm_status fwd_prepare(cllm_fwd_ctx *c, const cllm_batch *b, int T, cllm_error *err);
cllm_status fwd_run_layer(cllm_fwd_ctx *c, const fwd_layer *L, int l, int T, cllm_error *err);
/* A full-attention layer up to its K/V: the input norm, then fwd_attention_kv (the bits
 * fwd_run_layer would write into the pool; nothing else of the layer runs). */
cllm_status fwd_layer_kv(cllm_fwd_ctx *c, const fwd_layer *L, int l, int T);
cllm_status fwd_head(cllm_fwd_ctx *c, const float *norm_w, int T, double tp0, int n_ids,
                     float *logits, cllm_error *err);
/* The embedding row of token id as fp32 [H]. */
void fwd_embed_row(const fwd_wt *e, int id, float *dst);
/* RoPE cos/sin rows of the T tokens at c->tok_pos. */
void fwd_rope_tables(cllm_fwd_ctx *c, int T);

/* Queue a matmul job; fwd_mm_run runs all queued jobs in one parallel region and clears them. */
cllm_status fwd_mm_add(cllm_fwd_ctx *c, const fwd_wt *w, const float *X, size_t ldx, int n_tok,
                       float *Y, size_t ldy);
cllm_status fwd_mm_run(cllm_fwd_ctx *c);
/* Calls hooks.on_matmul for a job about to be queued (fwd_hooks.c). */
void fwd_hook_matmul(cllm_fwd_ctx *c, const fwd_wt *w, const float *X, size_t ldx, int n_tok);

/* y = x * rsqrt(mean(x^2) + eps) * w, over n (sum of squares in double, index order). */
void fwd_rmsnorm(float *y, const float *x, const float *w, int n, float eps);
/* A state slot's conv ring of GDN layer sub ([conv_k1][conv_ch]) and its recurrent state of value
 * head h ([dk][dv]): the pool's layout (forward.h), read by fwd_deltanet.c and fwd_gdn_save.c. */
static inline float *fwd_gdn_ring(cllm_state_pool *st, int slot, int sub) {
    return st->conv + ((size_t)slot * st->n_layers + (size_t)sub) * st->conv_ch * st->conv_k1;
}
static inline size_t fwd_gdn_rec_at(const cllm_state_pool *st, int slot, int sub, int h) {
    return (((size_t)slot * st->n_layers + (size_t)sub) * st->n_v_heads + h) * (size_t)st->dk *
           st->dv;
}
/* in the pool's element type: float (rec) or bf16 (rec16), fwd_gdn_state_bytes long */
static inline void *fwd_gdn_state(cllm_state_pool *st, int slot, int sub, int h) {
    size_t at = fwd_gdn_rec_at(st, slot, sub, h);
    return st->rec16 ? (void *)(st->rec16 + at) : (void *)(st->rec + at);
}
static inline size_t fwd_gdn_state_bytes(const cllm_state_pool *st) {
    return (size_t)st->dk * st->dv * (st->rec16 ? sizeof(uint16_t) : sizeof(float));
}
/* n tokens of the recurrence on a head's state S of st's type (kernels.h gdn_step, or
 * gdn_step_bf16 for a bf16 pool); the other arguments as theirs. */
static inline void fwd_gdn_step(const cllm_fwd_ctx *c, const cllm_state_pool *st, void *S,
                                const float *q, const float *k, const float *v, const float *decay,
                                const float *beta, size_t ld, float *o, size_t ldo, int n,
                                float *tmp) {
    if (st->rec16)
        c->k->gdn_step_bf16(S, q, k, v, decay, beta, ld, o, ldo, n, tmp, st->dk, st->dv);
    else
        c->k->gdn_step(S, q, k, v, decay, beta, ld, o, ldo, n, tmp, st->dk, st->dv);
}

static inline float fwd_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* Layer bodies: read c->xn [T][H], add the block's output into c->x. */
/* sub: the layer's index among attention layers (its KV pool layer) or GDN layers (its state). */
cllm_status fwd_attention(cllm_fwd_ctx *c, const fwd_attn_w *w, int sub, int T);
/* Only the K/V of the T rows of c->xn into the pool's layer sub (fwd_attention's bits, no
 * queries, no attention, no output): rows whose output nobody reads (cllm_mtp_seq.kv_rows). */
cllm_status fwd_attention_kv(cllm_fwd_ctx *c, const fwd_attn_w *w, int sub, int T);
cllm_status fwd_deltanet(cllm_fwd_ctx *c, const fwd_gdn_w *w, int sub, int T);
/* Extra per-thread scratch floats the GDN layer needs for the chunked prefill (allocated whatever
 * the mode, so the mode can change between calls). */
size_t fwd_gdn_scratch(const cllm_config *f);
/* cllm_forward_state_commit's inputs (fwd_gdn_save.c): sized for the batch's state_save rows at
 * the start of a call (ENOMEM), then each GDN layer saves its raw conv inputs (proj rows of
 * stride ldp, before the conv) and the recurrence's prepared inputs (after the per-token prep;
 * beta and decay at ba_off). */
cllm_status fwd_gdn_save_begin(cllm_fwd_ctx *c, const cllm_batch *b);
void fwd_gdn_save_raw(cllm_fwd_ctx *c, int sub, size_t ldp);
void fwd_gdn_save_prep(cllm_fwd_ctx *c, int sub, size_t ldp, size_t ba_off);
/* Floats of per-thread scratch the attention needs (fwd_attn.c). */
size_t fwd_attn_scratch(const cllm_config *f);
/* The MoE block on c->xn, added into c->x (fwd_moe.c). Returns the status of the first matmul
 * queue or run that failed (fwd_mm_add / fwd_mm_run), or CLLM_EUNSUPPORTED when a routed expert
 * has no weights outside expert parallel; the caller names the layer. */
cllm_status fwd_moe(cllm_fwd_ctx *c, const fwd_moe_w *w, int T);
/* The screened int8 lm_head (m->lm_screen > 0): logits [R][vocab] of the R normed rows in c->xn;
 * row t exact when row_k[t] is 0, else its row_k[t] best exact and the rest -inf (fwd_lmhead.c).
 * n_ids in 1..vocab - 1: only the first n_ids ids live (a draft vocabulary), every later entry
 * -inf; 0: all. */
cllm_status fwd_lm_screen(cllm_fwd_ctx *c, int R, const int *row_k, int n_ids, float *logits);
/* The screen's pick (fwd_lmhead.c): the C best of y[0, n_y) in its order (the larger value, then
 * the lower id; a NaN after every number) into hv/hid as a heap whose root hv[0] is the last of
 * them; returns how many, min(C, n_y). bm: scratch of (n_y + 63) / 64 floats. */
int fwd_lm_best(const float *y, int n_y, int C, float *bm, float *hv, int *hid);
/* The dense SwiGLU MLP on c->xn, added into c->x; the failing matmul's status as fwd_moe. */
cllm_status fwd_mlp_dense(cllm_fwd_ctx *c, const fwd_mlp *mlp, int T);

/* Tensor parallel (forward_tp.c, weights_tp.c): begin points c->x at a zeroed accumulator the
 * next block adds its partial output to; end all-reduces it into *x_res and restores c->x. */
cllm_status fwd_tp_begin(cllm_fwd_ctx *c, int T, float **x_res);
cllm_status fwd_tp_end(cllm_fwd_ctx *c, int T, float *x_res);
/* lm_head on this rank's vocabulary rows for R normed rows in c->xn; every rank gets whole
 * rows, or for a sequence with logits_topk the ranks' best k only (forward_tp.c). */
cllm_status fwd_tp_lm_head(cllm_fwd_ctx *c, int R, float *logits);
typedef struct fwd_tp_pair {
    float x;    /* the raw logit */
    int32_t id; /* global vocabulary id; -1 = padding; -2 in pair 0: the slice has a NaN */
} fwd_tp_pair;
/* The best k (<= CLLM_LOGITS_TOPK_MAX) of row[0..n) (global ids v0..) by row * scale descending,
 * then id ascending (the sampler's order), padded with id -1. */
void fwd_tp_best_k(const float *row, int n, int v0, float scale, int k, fwd_tp_pair *out);
/* Writes a rank's k pairs into a row that is -inf elsewhere; true when that rank saw a NaN. */
bool fwd_tp_put_k(float *row, int V, const fwd_tp_pair *p, int k);
void fwd_tp_free(cllm_fwd_ctx *c);
/* Refuses a call whose batch differs between ranks (one small all-gather). */
cllm_status fwd_tp_check_batch(const cllm_batch *b, cllm_error *err);
/* Replaces the bound full views by rank's slices and cfg by its local dims. */
cllm_status fwd_tp_shard(cllm_model *m, int rank, int size, cllm_error *err);
/* A zeroed allocation freed with the model. */
void *fwd_model_own(cllm_model *m, size_t bytes);
/* Returns the pages of [p, p + n) to the page cache (MADV_DONTNEED on the whole pages inside it)
 * when the range lies in one of the checkpoint's file mappings, so a tensor that was copied out
 * (a tensor-parallel slice, a repacked layout) stops counting in RSS; anything else is left
 * alone (a tensor the loader copied because it was misaligned lives in malloc'd memory).
 * True when it was in a file mapping. */
bool fwd_ckpt_drop(const cllm_ckpt *ck, const void *p, size_t n);
/* cllm_model_prefault of a sharded model: touches the rank's slices only; returns bytes. */
uint64_t fwd_tp_prefault(const cllm_model *m);

#endif
