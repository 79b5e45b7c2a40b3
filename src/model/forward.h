/* The model forward pass: one call runs a ragged batch of sequences over a paged KV cache and
 * Gated DeltaNet state slots, and returns logits. This is the interface the engine calls.
 *
 * Request path: engine scheduler -> cllm_forward() -> (kernels/) -> logits -> sampler.
 * Architectures: qwen3_5_moe (hybrid Gated DeltaNet + gated attention + MoE with shared expert),
 * qwen3_moe, qwen3, qwen2 (docs/model.md §2).
 *
 * Memory the engine owns and hands in:
 *  - cllm_kv_pool: attention K/V in fixed-size blocks. Block b holds, for every full-attention
 *    layer, K then V for block_size consecutive positions of one sequence:
 *      data[n_blocks][n_attn_layers][2][block_size][n_kv_heads * head_dim]   (fp32 or bf16)
 *    (n_attn_layers + n_mtp_layers for a pool that also holds the MTP head's KV).
 *    K is stored after k_norm and RoPE. A sequence's block table maps position p to block
 *    table[p / block_size], row p % block_size. The engine allocates, shares and frees blocks.
 *  - cllm_state_pool: per-sequence recurrent state for the Gated DeltaNet layers, one slot per
 *    live sequence: conv[n_slots][n_gdn_layers][kernel-1][conv_channels] (the last kernel-1 raw
 *    pre-conv inputs, a ring of rows: the input at position p is row p % (kernel-1)) and
 *    rec[n_slots][n_gdn_layers][n_v_heads][dk][dv], both fp32.
 *    A call whose start_pos is 0 zeroes the slot first; otherwise the slot must hold the state
 *    after position start_pos-1 (the engine copies slots for snapshots / prefix reuse).
 *
 * Determinism: a sequence's logits are bitwise identical whatever else is in the batch, whatever
 * the thread count, and however its prompt is split into calls (GDN runs the token-by-token
 * recurrence; every reduction has a fixed order per output element; attention walks positions in
 * fixed 32-position tiles independent of block size). They do depend on the kernel tier
 * (CLLM_ISA) and on the KV dtype. */
#ifndef CLLM_MODEL_FORWARD_H
#define CLLM_MODEL_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "base/threadpool.h"
#include "model/checkpoint.h"
#include "model/config.h"

typedef struct cllm_model cllm_model; /* bound weights + config; read-only after load */

/* How the model runs, chosen by whoever opens it (the CLI fills it from flags and the environment
 * once, through the option table of cli/options.c; docs/env.md). The model library reads no
 * environment. A zeroed struct (or NULL where a pointer is taken) is the default behaviour. */
typedef enum cllm_act16 {
    CLLM_ACT16_INT = 0, /* int16 activation codes (default) */
    CLLM_ACT16_FLOAT,   /* the float kernels (A/B checks) */
    CLLM_ACT16_INT8,    /* int8 codes on the int4 matrices (W4A8's kernels) */
} cllm_act16;
typedef enum cllm_fwd_profile {
    CLLM_PROFILE_OFF = 0,
    CLLM_PROFILE_DECODE,  /* wall time per op family of the decode steps, logged at ctx free */
    CLLM_PROFILE_PREFILL, /* the same for the prefill steps */
    CLLM_PROFILE_MTP,     /* the same for the MTP head's passes (cllm_forward_mtp calls) */
} cllm_fwd_profile;
#define CLLM_LM_SCREEN_AUTO 0  /* screen an int8 lm_head of >= 65536 rows (weights.c: how many) */
#define CLLM_LM_SCREEN_OFF  -1 /* the plain int8 lm_head */
#define CLLM_LM_SCREEN_MAX  4096
typedef struct cllm_fwd_opts {
    /* act_bits 16 GPTQ matmuls: how they take their activations (CLLM_ACT16, --act16) */
    cllm_act16 act16;
    /* int8 lm_head screening (CLLM_LM_SCREEN): AUTO, OFF, or 1..CLLM_LM_SCREEN_MAX candidates
     * forced at any vocabulary size */
    int lm_screen;
    /* the screened lm_head's estimate plane (CLLM_LM_EST): 2 (default when 0) or 4 bits */
    int lm_est_bits;
    bool no_panels;           /* CLLM_PANEL=0: no weight panel repack at load */
    bool no_lm_panel;         /* CLLM_LM_PANEL=0: no panels (so no screening) for lm_head */
    bool panel_evict;         /* CLLM_PANEL_EVICT=1: copied checkpoint pages leave the page cache */
    cllm_fwd_profile profile; /* CLLM_PROFILE */
    bool no_tp_topk;          /* CLLM_TP_TOPK=0: tensor parallel sends whole logits slices */
    /* the MTP head will draft (the engine sets it for method mtp): its matrices are repacked
     * into panels too, else they stay on the checkpoint's pages, untouched */
    bool mtp_panels;
} cllm_fwd_opts;

/* Opens dir (config.json + safetensors), checks every tensor of the plan (name, shape, dtype
 * F32/F16/BF16) and binds it in place in the mmap. Fused and per-expert expert layouts load;
 * MTP tensors are bound if present (cllm_forward_mtp runs them), so is the vision tower
 * (model/vision.h, cllm_vision_encode runs it; out_hidden_size must be the text hidden_size).
 * Errors name the tensor and the expected and actual shape. opts: NULL = defaults. */
cllm_status cllm_model_load(const char *dir, const cllm_fwd_opts *opts, cllm_model **out,
                            cllm_error *err);
void cllm_model_free(cllm_model *m);
/* Tensor parallel: binds rank `rank` of `size` (model/tp_shard.h: its heads, intermediate rows and
 * lm_head rows only) and its forward calls all-reduce over dist/. cllm_model_load uses the
 * process's own rank and size (dist/dist.h: 0 of 1 unless started under MPI) and refuses a run
 * whose ranks disagree on the config and shard plan. A shape that does not divide is refused
 * naming the tensor and N. opts: NULL = defaults; copied (the model's forward contexts use it).
 * EINVAL for an opts field out of range. */
cllm_status cllm_model_load_tp(const char *dir, const cllm_fwd_opts *opts, int rank, int size,
                               cllm_model **out, cllm_error *err);
int cllm_model_tp_size(const cllm_model *m);
const cllm_config *cllm_model_config(const cllm_model *m);
/* Bytes of weights read per decoded token with one sequence (embedding row, every non-expert
 * matrix, top-k experts + shared expert per MoE layer, lm_head; a screened lm_head as greedy decode
 * reads it, model/fwd_lmhead.c): the roofline numerator. */
uint64_t cllm_model_decode_bytes(const cllm_model *m);
/* Touches every weight page once (maps the page-cache pages into this process, reading them
 * from disk if needed) so the first forward calls do not pay page faults; returns bytes touched.
 * Optional: a server calls it at start-up, benchmarks before timing. */
uint64_t cllm_model_prefault(const cllm_model *m);
/* Number of full-attention / Gated DeltaNet layers (the pools' layer dimension). */
int cllm_model_n_attn_layers(const cllm_model *m);
int cllm_model_n_gdn_layers(const cllm_model *m);

typedef enum cllm_kv_dtype { CLLM_KV_F32 = 0, CLLM_KV_BF16 = 1 } cllm_kv_dtype;

typedef struct cllm_kv_pool {
    int n_blocks, block_size;
    /* full-attention layers of the model, plus its MTP layers for a pool made by
     * cllm_kv_pool_init_mtp (those come last: layer n_attn + j is MTP layer j) */
    int n_layers;
    int kv_dim; /* n_kv_heads * head_dim */
    cllm_kv_dtype dtype;
    size_t elem_size; /* 4 or 2 */
    void *data;       /* [n_blocks][n_layers][2][block_size][kv_dim] */
} cllm_kv_pool;

cllm_status cllm_kv_pool_init(cllm_kv_pool *p, const cllm_model *m, int n_blocks, int block_size,
                              cllm_kv_dtype dtype, cllm_error *err);
/* The same pool with room for the MTP head's layers after the attention layers
 * (n_layers = n_attn + n_mtp): a block then holds, for its block_size positions, the main
 * model's K/V and the MTP layer's (cllm_forward_mtp), under the sequence's one block table.
 * cllm_forward accepts both kinds and uses layers [0, n_attn) only. EINVAL when the model has
 * no MTP head. */
cllm_status cllm_kv_pool_init_mtp(cllm_kv_pool *p, const cllm_model *m, int n_blocks,
                                  int block_size, cllm_kv_dtype dtype, cllm_error *err);
void cllm_kv_pool_free(cllm_kv_pool *p);
/* Bytes per block (all layers, K and V; MTP layers included). */
size_t cllm_kv_pool_block_bytes(const cllm_kv_pool *p);

typedef struct cllm_state_pool {
    int n_slots, n_layers; /* n_layers = Gated DeltaNet layers of the model */
    int conv_ch, conv_k1;  /* conv channels (2*Hk*dk + Hv*dv), kernel - 1 */
    int n_v_heads, dk, dv;
    float *conv; /* [n_slots][n_layers][conv_k1][conv_ch], a ring: position p in row p % k1 */
    /* [n_slots][n_layers][n_v_heads][dk][dv]: rec when the recurrent state is float32 (the
     * checkpoint's mamba_ssm_dtype), rec16 when bf16 (--mamba-ssm-cache-dtype bfloat16: half
     * the state memory and its traffic per decode step); the other is NULL */
    float *rec;
    uint16_t *rec16;
} cllm_state_pool;

/* For a model without GDN layers the pool is valid and empty (slot indices are ignored).
 * rec_dtype: the recurrent state's element type (the conv ring is float32 either way). */
cllm_status cllm_state_pool_init(cllm_state_pool *p, const cllm_model *m, int n_slots,
                                 cllm_kv_dtype rec_dtype, cllm_error *err);
void cllm_state_pool_free(cllm_state_pool *p);
void cllm_state_slot_clear(cllm_state_pool *p, int slot);
void cllm_state_slot_copy(cllm_state_pool *p, int dst, int src);

typedef enum cllm_logits_mode {
    CLLM_LOGITS_LAST = 0, /* one row: the sequence's last token (default) */
    CLLM_LOGITS_ALL,      /* n_tokens rows (evaluation) */
    CLLM_LOGITS_NONE,     /* no rows (a prefill chunk that is not the last) */
    /* one row holding the last token's hidden state after the final norm (hidden_size floats
     * at the row's start, the rest of the row undefined; needs hidden_size <= vocab_size):
     * what an embedding's last-token pooling reads */
    CLLM_LOGITS_HIDDEN,
} cllm_logits_mode;

typedef struct cllm_seq_batch {
    const int32_t *tokens;      /* [n_tokens] ids to add */
    int n_tokens;               /* >= 1 */
    int start_pos;              /* position of tokens[0] (= tokens already in the cache) */
    const int32_t *block_table; /* [n_table] block ids; must cover start_pos + n_tokens */
    int n_table;
    int state_slot; /* slot in the state pool (distinct within a batch) */
    cllm_logits_mode logits;
    /* With mode LAST and logits_topk in 1..CLLM_LOGITS_TOPK_MAX the caller needs only the
     * logits_topk best entries of the row in the sampler's order (logit * logits_scale
     * descending, then lowest id; see engine/sampler.h smp_reduce_k). Those come back exact,
     * every other entry may be -inf: under tensor parallel each rank then sends its slice's best
     * few instead of its whole slice (model/forward_tp.c); one process with a screened int8
     * lm_head estimates the row from half its bytes and computes the best candidates exactly
     * (model/fwd_lmhead.c). 0 = the exact row. */
    int logits_topk;
    float logits_scale; /* > 0 when logits_topk > 0 */
    /* With mode LAST: the last max(1, logits_n) positions' rows, ascending, each treated as the
     * last row is (logits_topk). A speculative verify asks for its k + 1 draft positions only,
     * the tokens replayed before them need none. 0 or 1 = the last row. */
    int logits_n;
    /* NULL, or [n_tokens][hidden_size] floats: the final-normed hidden state of every token of
     * the call (positions ascending), whatever the logits mode: the MTP head's input
     * (cllm_forward_mtp). Logits are the same bits with or without it. Not written by a
     * calibration call that stops early (cllm_fwd_hooks.stop_layer). */
    float *hidden_out;
    /* Image input: NULL, or [n_tokens] pointers; a non-NULL entry is a row of hidden_size floats
     * the token enters with instead of its embedding (the vision tower's output at an image-pad
     * token, model/vision.h). Read during the call only. Not under tensor parallel. */
    const float *const *embeds;
    /* M-RoPE rotary positions (config mrope_section): NULL, or [n_tokens][3] (temporal, height,
     * width). When NULL every component is the cache position plus rope_delta: text after an
     * image continues from the image's largest position + 1, so its rotary position differs
     * from its cache position (delta < 0 in practice). The cache position (start_pos + i) still
     * places the K/V and the causal mask. 0 and NULL: plain RoPE at the cache position. */
    const int32_t *mrope_pos;
    int rope_delta;
    /* Fork: with state_fork the Gated DeltaNet state before the call is read from slot
     * state_src (left unchanged) instead of state_slot, whose old contents are ignored and which
     * receives the state after the call. Bitwise what copying src to state_slot first would give,
     * without the copy's separate pass over the slot (a speculative verify whose state may be
     * dropped runs this way). No other sequence of the batch may write state_src. Ignored at
     * start_pos 0 (the state starts empty). A calibration call that stops early (stop_layer)
     * leaves the later layers' state in state_slot unwritten. */
    bool state_fork;
    int state_src;
    /* Keep this row's Gated DeltaNet inputs until the next cllm_forward on the context, so that
     * cllm_forward_state_commit can move a slot past a prefix of its tokens (a verify whose later
     * drafts were rejected). Rows at start_pos 0, and rows of 64 tokens or more under the chunked
     * prefill form, are not kept. */
    bool state_save;
} cllm_seq_batch;
#define CLLM_LOGITS_TOPK_MAX 256

typedef struct cllm_batch {
    const cllm_seq_batch *seqs;
    int n_seqs;
} cllm_batch;

/* Scratch space and thread pool for forward calls; one per engine thread (not thread-safe). */
typedef struct cllm_fwd_ctx cllm_fwd_ctx;
/* pool may be NULL (single-threaded); it is borrowed. The context runs under the model's
 * cllm_fwd_opts (act16, profile, TP top-k) as given to cllm_model_load. */
cllm_status cllm_fwd_ctx_create(const cllm_model *m, cllm_pool *pool, cllm_fwd_ctx **out,
                                cllm_error *err);
void cllm_fwd_ctx_free(cllm_fwd_ctx *c);

/* How Gated DeltaNet layers run prefill (docs/model.md §2.4): the token-by-token recurrence
 * (default; logits do not depend on how a prompt is split into calls) or the chunked WY form for
 * the 64-aligned runs of 64 positions inside one call (splits at multiples of 64 stay bitwise
 * identical, others differ by rounding). Per forward context; may change between calls. */
typedef enum cllm_gdn_prefill { CLLM_GDN_RECURRENT, CLLM_GDN_CHUNKED } cllm_gdn_prefill;
void cllm_fwd_ctx_set_gdn_prefill(cllm_fwd_ctx *c, cllm_gdn_prefill mode);
/* "recurrent" or "chunked"; -1 for anything else. */
int cllm_gdn_prefill_parse(const char *s);

/* Calibration hooks (the GPTQ quantizer, src/quant/gptq.c): observe the input of every matmul
 * and run a slice of the layer stack. Off by default; a serving forward never sets them. */
typedef struct cllm_fwd_matmul {
    int layer;          /* decoder layer running the matmul; -1 = the lm_head */
    const char *tensor; /* checkpoint tensor the matrix is read from; NULL = none (GPTQ weights) */
    uint64_t offset;    /* element offset of the matrix in it (an expert of a fused tensor) */
    int rows, cols;     /* Y[t][r] = W[r] . X[t]: cols = K, the input width */
    bool quantized;     /* the matrix is GPTQ-quantized */
    const float *X;     /* n_tok input rows of cols floats, ldx apart (valid during the call) */
    size_t ldx;
    int n_tok;
    /* the same X (pointer, stride, tokens, width) as the previous matmul, queued in the same
     * parallel run: Linears that share one input (q/k/v, GDN qkv/z/b/a, an expert's gate/up) */
    bool shares_input;
} cllm_fwd_matmul;

typedef struct cllm_fwd_hooks {
    void (*on_matmul)(void *user, const cllm_fwd_matmul *mm); /* NULL = none */
    void *user;
    /* > 0: run only the layers before this one and return without logits; 0 = all layers */
    int stop_layer;
    /* the residual stream [T][hidden] of the call's tokens, NULL = none: with resid_in > 0 the
     * layer loop starts at layer resid_in reading the stream from resid (saved by an earlier
     * call on the same tokens; a layer reads only its own KV and state, so the bytes equal a
     * run from layer 0), and the stream at the start of layer resid_out is written to it */
    float *resid;
    int resid_in, resid_out;
} cllm_fwd_hooks;
/* Copies *h into the context (NULL = all off); applies to the following calls. */
void cllm_fwd_ctx_set_hooks(cllm_fwd_ctx *c, const cllm_fwd_hooks *h);

/* Rows a LAST-mode sequence asks for: max(1, logits_n). */
int cllm_seq_last_rows(const cllm_seq_batch *q);
/* Rows of logits the batch asks for (sum over sequences: cllm_seq_last_rows, n_tokens or 0). */
size_t cllm_batch_logit_rows(const cllm_batch *b);

/* Runs the batch. logits receives cllm_batch_logit_rows(b) rows of vocab_size floats, sequences
 * in batch order, positions ascending. Writes the new tokens' K/V into their blocks and advances
 * each sequence's state slot. Bad input (token id out of range, empty sequence, position beyond
 * max_position_embeddings, short block table, block or slot out of range, a slot used twice) is
 * an error before anything is written. After validation only ENOMEM (scratch growth) can fail;
 * then the batch's new KV rows and state slots are undefined and those sequences must restart.
 * Threads: uses the ctx's pool; one call at a time per ctx; pools may be shared by several ctxs
 * only if their calls never touch the same blocks or slots concurrently. */
cllm_status cllm_forward(cllm_fwd_ctx *c, const cllm_batch *b, cllm_kv_pool *kv,
                         cllm_state_pool *st, float *logits, cllm_error *err);

/* Moves state slot `slot` forward by the first n tokens of sequence seq (its index in the batch)
 * of the last cllm_forward call on c, which must have had state_save on that row: the slot must
 * hold that row's state before the call (its state_src when forked, else a copy taken before).
 * Runs only the conv ring and the recurrence over the saved inputs; the slot ends bitwise where a
 * call of those n tokens alone would have left it. EINVAL when nothing was saved for the row or
 * n exceeds its tokens. For models without GDN layers it does nothing. */
cllm_status cllm_forward_state_commit(cllm_fwd_ctx *c, cllm_state_pool *st, int seq, int n,
                                      int slot, cllm_error *err);

/* The MTP head (docs/model.md §2.7): true when the checkpoint's mtp.* tensors are bound. */
bool cllm_model_has_mtp(const cllm_model *m);

/* One sequence of an MTP call. Row i (position start_pos + i) reads the target model's
 * final-normed hidden state at that position (cllm_seq_batch.hidden_out) -- or, for a chained
 * draft, the MTP's own output of the row before (cllm_mtp_seq.hidden_out) -- and the token at
 * the next position, t_{p+1}; its logits predict t_{p+2}. */
typedef struct cllm_mtp_seq {
    const float *hidden;        /* [n_tokens][hidden_size] */
    const int32_t *tokens;      /* [n_tokens]: t_{p+1} for the rows p = start_pos .. */
    int n_tokens;               /* >= 1 */
    int start_pos;              /* position of row 0; the MTP KV of positions < start_pos is read */
    const int32_t *block_table; /* the sequence's main block table; covers start_pos + n_tokens */
    int n_table;
    cllm_logits_mode logits; /* as cllm_seq_batch: LAST (the last max(1, logits_n)), ALL, NONE */
    int logits_n;
    int logits_topk; /* as cllm_seq_batch: the screened lm_head's rows */
    float logits_scale;
    float *hidden_out; /* NULL, or [n_tokens][hidden_size]: the MTP's normed output (mtp.norm),
                        * the hidden input of the next chained draft; may be `hidden` itself
                        * (all rows' inputs are read before any output is written) */
    /* > 0: logits for token ids < vocab_rows only, every other entry -inf (a draft vocabulary:
     * byte-level BPE ids follow merge order, so the first ids are the most frequent pieces; the
     * lm_head pass reads vocab_rows rows instead of all; a screened int8 lm_head gives its
     * hi-plane estimate there: argmax-grade, not exact logits); the same in every sequence of a
     * call. 0 = the whole vocabulary */
    int vocab_rows;
    /* Rotary positions as cllm_seq_batch's (M-RoPE after an image): NULL / 0 = the cache
     * positions. The head's row p takes the target model's position of p. */
    const int32_t *mrope_pos;
    int rope_delta;
    /* > 0: the first kv_rows rows only write the head's K/V (bitwise what a whole pass writes)
     * and give no output: their hidden_out rows are left as they are and none of them may be
     * asked for logits (LAST with logits_n <= n_tokens - kv_rows; not ALL). A catch-up over rows
     * the head has not read needs only the last row's output: this skips the layer's attention,
     * MoE and lm_head for the others. */
    int kv_rows;
} cllm_mtp_seq;

/* Runs the MTP head over n_seqs sequences: fc(concat(pre_fc_norm_embedding(embed(token)),
 * pre_fc_norm_hidden(hidden))), the MTP decoder layer at each row's position (its K/V written
 * into the pool's MTP layer slot of the sequence's blocks, its attention over the MTP K/V of
 * positions 0..p), mtp.norm, the shared lm_head. logits as cllm_forward: the rows each sequence
 * asks for, sequences in order, positions ascending. kv must come from cllm_kv_pool_init_mtp.
 * Errors (before anything is written): EINVAL naming what is wrong (no MTP head, a pool without
 * the MTP layer, bad tokens / positions / block tables / logits modes, NULL hidden);
 * EUNSUPPORTED under tensor parallel and for mtp_num_hidden_layers > 1. Same threading and
 * determinism contract as cllm_forward (a row's results do not depend on the batch or on how
 * rows are split into calls). */
cllm_status cllm_forward_mtp(cllm_fwd_ctx *c, const cllm_mtp_seq *seqs, int n_seqs,
                             cllm_kv_pool *kv, float *logits, cllm_error *err);
/* Rows of logits an MTP call asks for. */
size_t cllm_mtp_logit_rows(const cllm_mtp_seq *seqs, int n_seqs);

#endif
