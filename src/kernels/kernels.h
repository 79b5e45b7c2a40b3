/* Compute kernels used by the forward pass (model/forward.c and friends), one dispatch table.
 *
 * Tiers: kernels/<family>_ref.c is plain scalar C and the test oracle; kernels/x86/<family>_avx2.c
 * holds whole AVX2+FMA+F16C functions, kernels/x86/<family>_avx512.c AVX-512 F/BW/VL/DQ ones (the
 * avx512 table: the int kernels and gemm_f32, AVX2 for the rest), kernels/arm/<family>_neon.c
 * baseline ARMv8 Advanced SIMD ones (*_dot_neon.c: + dot product; the neon table). cllm_kern()
 * returns the table for cllm_cpu_tier(), filled once at first use (CLLM_ISA=ref|avx2|avx512|neon
 * forces a tier).
 *
 * Determinism contract (what batch invariance rests on): in every tier, output element (t, r) of
 * a matmul is computed by the same sequence of floating-point operations whatever n_tok, n_rows,
 * the position of t inside the batch and the tile the element falls in. So a token's result never
 * depends on which other tokens share the call. The tiers differ from each other by rounding only.
 * The integer-activation kernels (matmul_q4_qact, matmul_q_qact16) meet it a second way: each
 * group's dot product is an exact int32 (so any tile, loop order or token count gives the same
 * integer) and the few float ops per group are fixed; those agree bitwise across tiers too.
 *
 * All functions are thread-safe (no shared state); callers split work across threads. */
#ifndef CLLM_KERNELS_KERNELS_H
#define CLLM_KERNELS_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/dtype.h"

/* Y[t*ldy + r] = sum_k W[r*ldw + k] * X[t*ldx + k]   for r < n_rows, t < n_tok, k < K.
 * W is F32, F16 or BF16 (the matching entry of cllm_kern_ops.matmul), X and Y fp32, fp32
 * accumulation. Any alignment. Weights are streamed once: each tile of rows is applied to every
 * token before moving on (callers pass ~16-row slices so the slice stays in L1/L2). */
typedef void (*cllm_matmul_fn)(const void *W, size_t ldw, int n_rows, const float *X, size_t ldx,
                               int n_tok, int K, float *Y, size_t ldy);

/* A GPTQ v1 quantized matrix (the official Qwen GPTQ-Int4 layout, see src/quant/quant.h): logical
 * W [N out][K in], stored transposed and packed along K: qweight int32 [K*bits/32][N] (32/bits
 * values per word, value j of word (k8, n) is k = k8*32/bits + j, bits j*bits..), qzeros int32
 * [K/group][N*bits/32] packed along N the same way (stored zero z, effective z + 1, any value per
 * group and output: symmetric files store 2^(bits-1) - 1), scales fp16 (bf16 when scale_bf16)
 * [K/group][N]. w[n][k] = scale[k/G][n] * (q - (z + 1)). bits 4 or 8; N % 8 == 0, K % group == 0,
 * group % 8 == 0. act_bits: the activation precision the model was quantized for (16: float;
 * 8 or 4: W4A8/W4A4, whose activations the caller quantizes first, see qact_prep and
 * cllm_kern_fake_quant_act). matmul_q itself ignores it: it always reads float activations. */
typedef struct cllm_qweight {
    const int32_t *qweight, *qzeros;
    const uint16_t *scales;
    int bits, group, K, N, act_bits;
    int scale_bf16; /* 0: scales are F16; 1: BF16 */
    /* > 0: every group's effective zero (stored + 1) is this value (symmetric GPTQ, GGUF Q4_0
     * and Q8_0 converted), so a kernel may skip qzeros; 0: read them. Only a hint: qzeros stay
     * valid and the results are the same bits either way. */
    int zero_const;
} cllm_qweight;

/* Y[t*ldy + n] = sum_k w[n][k] * X[t*ldx + k]  for n in [n0, n1) (multiples of 8), t < n_tok.
 * Per element the op sequence is fixed: for each group g in order, gacc = 0, for k in the group
 * in order gacc = fma((float)(q - z), x[k], gacc); then acc = fma(scale, gacc, acc). Both tiers
 * use exactly that sequence (fused multiply-add), so ref and AVX2 agree bitwise. */
typedef void (*cllm_matmul_q_fn)(const cllm_qweight *w, int n0, int n1, const float *X, size_t ldx,
                                 int n_tok, float *Y, size_t ldy);

/* T Gated DeltaNet recurrence steps for one value head (docs/model.md §2.4), in token order, state
 * S [dk][dv] fp32 in place; per token t: S *= decay; u = S^T k; d = (v - u) * beta; S += k d^T;
 * o = S^T q, with q + t*ld, k + t*ld [dk] (already l2-normalised, q scaled), v + t*ld [dv],
 * decay[t*ld], beta[t*ld] (one stride: they are rows of one projection matrix) and o + t*ldo
 * [dv]; tmp [dv] scratch. Bitwise the same as T calls of one token each (columns of S evolve
 * independently, so a tier may run all T tokens over one block of columns before the next). */
typedef void (*cllm_gdn_step_fn)(float *S, const float *q, const float *k, const float *v,
                                 const float *decay, const float *beta, size_t ld, float *o,
                                 size_t ldo, int T, float *tmp, int dk, int dv);
/* gdn_step with the state S stored as bf16 (--mamba-ssm-cache-dtype bfloat16): per token the same
 * fp32 arithmetic on the widened state, u and the update from bf16(S) x decay (the decayed state
 * is not stored), o from the updated state before rounding, then the updated state rounded to
 * nearest even into S. Rounded every token, so T tokens in one call are bitwise T calls of one;
 * every tier (ref included) is bitwise the same. */
typedef void (*cllm_gdn_step_bf16_fn)(uint16_t *S, const float *q, const float *k, const float *v,
                                      const float *decay, const float *beta, size_t ld, float *o,
                                      size_t ldo, int T, float *tmp, int dk, int dv);

/* Gated DeltaNet chunked WY form (docs/model.md §2.4) for one value head over T tokens, in chunks
 * of CLLM_GDN_CHUNK from token 0 (the last chunk may be shorter): per chunk, gamma = cumsum g, L/A
 * from k k^T, q k^T and exp(gamma_i - gamma_j), U = (I+L)^-1 v*beta, W = (I+L)^-1 (k*beta*e^gamma)
 * by forward substitution, then Vn = U - W S, O = (q*e^gamma) S + A Vn, S = e^gamma_last S +
 * (k*e^(gamma_last-gamma))^T Vn. Mathematically equal to T gdn_step calls with decay = exp(g);
 * differs from them by rounding only. Token t: q + t*ldqk, k + t*ldqk [dk] (l2-normalised, q
 * scaled), v + t*ldv [dv], g[t] (log-decay, finite, <= 0), beta[t]; output o + t*ldo [dv]. S
 * [dk][dv] fp32 in place. work: cllm_gdn_chunk_work(dk, dv) floats scratch (any alignment). */
#define CLLM_GDN_CHUNK 64
typedef void (*cllm_gdn_chunk_fn)(float *S, const float *q, const float *k, size_t ldqk,
                                  const float *v, size_t ldv, const float *g, const float *beta,
                                  float *o, size_t ldo, int T, int dk, int dv, float *work);
static inline size_t cllm_gdn_chunk_work(int dk, int dv) {
    size_t C = CLLM_GDN_CHUNK;
    return 2 * C + 2 * C * C + C * (size_t)dv + 2 * C * (size_t)dk + 16;
}

/* Prepared activations for matmul_q4_qact: n_tok tokens of K inputs, each group of `group`
 * quantized on kern_fake_quant_act's grid for act_bits (8: absmax / 127; 4: absmax / 7, codes
 * -7..7; round to nearest even), stored as int8 codes + fp32 scale + int32 code sum per group.
 * The code order inside a token is the tier's own: only the tier that prepared a buffer may read
 * it. In every tier a token is [K] codes, then [K/group] scales, then [K/group] sums (the screened
 * lm_head, model/fwd_lmhead.c, halves the sums in place). Token t starts at byte t *
 * cllm_qact_bytes(K, group, 1); the caller owns A (any alignment of 8 bytes). K % group == 0, group
 * % 8 == 0. */
static inline size_t cllm_qact_bytes(int K, int group, int n_tok) {
    return (size_t)n_tok * ((size_t)K + 8 * (size_t)(K / group));
}
typedef void (*cllm_qact_prep_fn)(const float *X, size_t ldx, int n_tok, int K, int group,
                                  int act_bits, void *A);
/* Y[t*ldy + n] for n in [n0, n1) (multiples of 8), t < n_tok: int4 weights w (bits 4, K and
 * group as in A) x activations prepared by the same tier; per element the sequence below
 * (exact int32 group sums, acc = fma(w_scale * a_scale, (float)(isum - z * asum), acc)). */
typedef void (*cllm_matmul_qact_fn)(const cllm_qweight *w, int n0, int n1, const void *A, int n_tok,
                                    float *Y, size_t ldy);

/* Integer activations for 16-bit-activation models (act_bits 16: W4A16, W8A16, GPTQ checkpoints),
 * the default path of model/forward.c (CLLM_ACT16=float selects matmul_q instead). Per token and
 * activation group h of cllm_qact16_group(bits, group) inputs (the weight group, split when its
 * int32 sums could overflow): s[h] = absmax / 32767, a[k] = round-half-even(x[k] / s[h]) clamped
 * to +-32767 (0 when s[h] == 0), sum[h] = sum of the group's a. The quantization error
 * (<= absmax / 65534 per input) is far below the bf16 precision of the model's activations.
 * Then, for output n and each activation group h in order, with g = h * AG / group the weight
 * group, z its effective zero and ws its scale: d = sum_k q[k] a[k] - z * sum[h], exact in int32
 * (|d| <= 16 * 32767 * AG for int4, 256 * 32767 * AG for int8: the AG bound keeps it below
 * 2^31), and acc = fma(ws * s[h], (float)d, acc), acc starting at +0. Every tier, tile shape
 * and token count gives the same bits (the test oracle is kernels/matmul_q16_ref.c). It differs
 * from matmul_q on the float activations by the activation rounding only. */
static inline int cllm_qact16_group(int bits, int group) {
    int lim = bits == 8 ? 256 : 4096;
    if (group <= lim) return group;
    for (int ag = lim; ag > 8; ag -= 8)
        if (group % ag == 0) return ag;
    return 8;
}
/* Bytes of n_tok prepared tokens ([K] int16 codes, then [K/ag] fp32 scales, then [K/ag] int32
 * sums, in every tier); token t starts at
 * t * cllm_qact16_bytes(K, ag, 1). The code order inside a token is the tier's own and depends
 * on the weight bits it was prepared for: only matmuls of that tier and bits may read it. */
static inline size_t cllm_qact16_bytes(int K, int ag, int n_tok) {
    return (size_t)n_tok * (2 * (size_t)K + 8 * (size_t)(K / ag));
}
/* ag = cllm_qact16_group(bits, group) of the weights that will read A; K % ag == 0. */
typedef void (*cllm_qact16_prep_fn)(const float *X, size_t ldx, int n_tok, int K, int ag, int bits,
                                    void *A);
/* Y[t*ldy + n] for n in [n0, n1) (multiples of 8), t < n_tok: int4 or int8 weights w (act_bits
 * not read) x activations prepared by the same tier for w's bits and K. */
typedef void (*cllm_matmul_qact16_fn)(const cllm_qweight *w, int n0, int n1, const void *A,
                                      int n_tok, float *Y, size_t ldy);

/* C[m*ldc + n] = / += / -= (op: CLLM_GEMM_SET / _ADD / _SUB) sum_k A[m*lda + k] * B[k*ldb + n]
 * for m < M, n < N, k < K; fp32, any alignment, A/B not overlapping C. B is row-major (N
 * contiguous): the kernels broadcast A[m][k] and FMA rows of B into register tiles. Per element
 * the op sequence is fixed for a given K: s = 0; s = fma(A[m][k], B[k][n], s) for k in order;
 * then C = s, C + s or C - s. So results do not depend on M, N, the tile or how a caller splits
 * rows, and every tier agrees bitwise. Used by GPTQ's dense linear algebra (quant/gptq.c). */
enum { CLLM_GEMM_SET, CLLM_GEMM_ADD, CLLM_GEMM_SUB };
typedef void (*cllm_gemm_fn)(int M, int N, int K, const float *A, size_t lda, const float *B,
                             size_t ldb, float *C, size_t ldc, int op);

/* ggml block formats kept as they are in a GGUF file (model/gguf_ckpt.h): N rows of
 * row_bytes, each row K / 256 (K / 32 for Q4_1 / Q5_1) blocks as ggml's block structs lay them
 * out. Every weight is w = ws_u * c - wm_u for an integer code c and the float scale ws_u and
 * min wm_u of its unit u of 16 consecutive inputs, as ggml computes them (Q4_K: d * sc, dmin *
 * m of the 32-sub-block; Q6_K: d * sc of the 16; IQ4_XS: d * (ls - 32), c the codebook value;
 * Q4_1 / Q5_1: d and -m). */
enum { CLLM_KQ_Q4_1 = 1, CLLM_KQ_Q5_1, CLLM_KQ_Q4_K, CLLM_KQ_Q5_K, CLLM_KQ_Q6_K, CLLM_KQ_IQ4_XS };
/* type | CLLM_KQ_PANEL: the same weights repacked by cllm_kq_panel_pack (data = the panels,
 * row_bytes unused by the kernels); every tier runs both forms with the same results. */
#define CLLM_KQ_PANEL 0x100
/* with CLLM_KQ_PANEL: block scales kept per 128 columns (cllm_kq_panel_pack's chunk_src) */
#define CLLM_KQ_D128 0x200
/* ggml's non-linear 4-bit codebook (kvalues_iq4nl) of IQ4_NL and IQ4_XS. */
extern const int8_t cllm_kq_iq4_values[16];
typedef struct cllm_kqweight {
    const uint8_t *data;
    size_t row_bytes;
    int type, K, N;
} cllm_kqweight;
/* Y[t*ldy + n] = sum_k w[n][k] X[t*ldx + k] for n in [n0, n1), t < n_tok. Activations as the
 * qact16 path takes them (int16 codes a, per group h of 32 inputs s_h = absmax / 32767, round
 * half even, kern_quant_act16). Per output: eight float lanes L[0..7] = +0; for each unit u in k
 * order, with isum, asum the exact int32 sums of c * a and a over its 16 inputs:
 * L[u % 8] = fma(ws_u * s_h, (float)isum, L[u % 8]), then, for types with a min,
 * L[u % 8] = fma(-(wm_u * s_h), (float)asum, L[u % 8]); Y = ((L0 + L1) + (L2 + L3)) +
 * ((L4 + L5) + (L6 + L7)). Every tier follows it: bitwise the same results.
 * act_f32 (CLLM_ACT16=float: the accuracy check against the float64 reference) takes X as it is:
 * per unit f = fma(c_i, x_i, f) over its 16 inputs in order from +0 and xs = their float sum in
 * order, L[u % 8] = fma(ws_u, f, L[u % 8]), then fma(-wm_u, xs, L[u % 8]) for types with a min;
 * scalar in every tier (the same bits). */
/* Row n of w as floats: ws_u * c - wm_u (two roundings at most; ggml's own dequantization may
 * fuse them, 1 ulp apart). */
void cllm_kq_dequant_row(const cllm_kqweight *w, int n, float *dst);
/* Panel form (kernels/matmul_kq_panel.c has the layout): 16 rows per panel, codes in the order the
 * SIMD tiers read them, unit scales as int8 codes times float block scales, so the kernels stream
 * the weights with no per-call decoding. Lossless: a panel row decodes to the block row's bits.
 * Q4_K, Q5_K, Q6_K and IQ4_XS with K % 256 == 0; cllm_kq_panel_bytes is 0 for anything else
 * (Q4_1 / Q5_1 stay in blocks). pack writes one panel (cllm_kq_panel_bytes(type, K, 16) bytes)
 * from n_rows <= 16 block-form rows; missing rows are zero. chunk_src (NULL: identity; needs
 * type | CLLM_KQ_D128): column chunk i (128 columns) of the panel is source chunk chunk_src[i]
 * (a permutation of whole 128-column chunks, ggml's blocks split in halves). */
size_t cllm_kq_panel_bytes(int type, int K, int N);
void cllm_kq_panel_pack(int type, int K, const uint8_t *const *rows, int n_rows,
                        const int *chunk_src, uint8_t *dst);
/* matmul_kq's prepared activations, the same layout in every tier: per token, int16 codes [K],
 * the unit scales s_{u/2} [K/16] (float) and the unit code sums [K/16] (int32). A caller that
 * runs several row slices of one input prepares it once (model/forward.c); K % 32 == 0. */
static inline size_t cllm_kq_act_bytes(int K, int n_tok) {
    return (size_t)n_tok * (2 * (size_t)K + 8 * (size_t)(K / 16));
}
void cllm_kq_prep(int K, const float *X, size_t ldx, int n_tok, void *A);
/* A: n_tok tokens prepared by cllm_kq_prep, or NULL (the kernel prepares X itself); X is read
 * only when A is NULL or act_f32. */
typedef void (*cllm_matmul_kq_fn)(const cllm_kqweight *w, int n0, int n1, const float *X,
                                  size_t ldx, const void *A, int n_tok, float *Y, size_t ldy,
                                  bool act_f32);

typedef struct cllm_kern_ops {
    const char *name; /* "ref" | "avx2" | "avx512" | ... */
    cllm_matmul_fn matmul_f32, matmul_f16, matmul_bf16;
    cllm_gdn_step_fn gdn_step;
    cllm_gdn_step_bf16_fn gdn_step_bf16;
    cllm_gdn_chunk_fn gdn_chunk; /* prefill option (--gdn-prefill chunked) */
    /* GPTQ int4/int8 weights x fp32 activations (unpacking fused into the dot product). */
    cllm_matmul_q_fn matmul_q;
    /* W4A8/W4A4 (bits 4, act_bits 8 or 4) with real integer activations, in two steps so that
     * activations shared by several matmuls and column slices are quantized once (model/forward.c
     * uses these; every tier has them). Per token, each group is quantized on
     * kern_fake_quant_act's grid (symmetric, absmax / qmax, round to nearest even) with fp32
     * scale a_s; the group's dot product with the codes is exact in int32, then acc =
     * fma(w_scale * a_s, (float)(sum q*a - z*sum a), acc) per group in order (z the effective
     * zero). All tiers agree bitwise; the result differs from matmul_q on fake-quantized
     * activations by float rounding only. */
    cllm_qact_prep_fn qact_prep;
    cllm_matmul_qact_fn matmul_q4_qact;
    /* The same on 2-bit codes (bits 2; the screened lm_head's estimate plane, model/weights.c):
     * qweight row r holds inputs [16 r, 16 r + 16) of each column in one word, input 16 r + 8 h +
     * 2 j + o at bits 8 j + 2 (2 h + o) (so a shift by 2 s and a mask of 3 per byte meet the
     * tiers' even/odd activation words); qzeros and scales as the int4 layout (4-bit zeros,
     * effective zero stored + 1, one per column and group). group % 16 == 0. */
    cllm_matmul_qact_fn matmul_q2_qact;
    /* act_bits 16 on int16 activation codes (see cllm_qact16_group), int4 and int8 weights. */
    cllm_qact16_prep_fn qact16_prep;
    cllm_matmul_qact16_fn matmul_q_qact16;
    /* fp32 GEMM with B row-major (see cllm_gemm_fn). */
    cllm_gemm_fn gemm_f32;
    /* ggml block-format weights (cllm_kqweight) x int16 activation codes */
    cllm_matmul_kq_fn matmul_kq;
    /* y[i] = silu(g[i]) * u[i] (silu(g[i]) when u is NULL), silu(g) = g / (1 + e^-g); y may be g
     * or u. Per input a fixed op sequence (no dependence on n or i): ref uses libm's expf, the
     * SIMD tiers one vector exp (kernels/act_body_int.h); within 4 ulp of each other. */
    void (*silu_mul)(float *y, const float *g, const float *u, int n);
} cllm_kern_ops;

/* The table for the current tier (thread-safe; first call fills it). */
const cllm_kern_ops *cllm_kern(void);
/* Specific tiers (for tests; thread-safe). cllm_kern_avx2() returns NULL when the CPU or build
 * lacks AVX2. */
const cllm_kern_ops *cllm_kern_ref(void);
const cllm_kern_ops *cllm_kern_avx2(void);
/* The avx512 table; NULL when the CPU (AVX-512 F/BW/VL/DQ) or build lacks it. Its W4A8 kernels
 * use VNNI (vpdpbusd) when the CPU has it, AVX-512BW otherwise; same results bitwise. */
const cllm_kern_ops *cllm_kern_avx512(void);
/* The avx512 table without VNNI ("avx512bw": vpmaddubsw / vpmaddwd), the one CPUs without VNNI
 * get, whether or not this one has it; NULL as cllm_kern_avx512. */
const cllm_kern_ops *cllm_kern_avx512_bw(void);
/* The NEON table ("neon", or "neon-dot" when the CPU has the dot-product extension, which its
 * W4A8 kernels then use); NULL off AArch64. Its float matmuls and GDN kernels do the
 * AVX2 tier's arithmetic per element (gdn_chunk: but for libm's expf). */
const cllm_kern_ops *cllm_kern_neon(void);
/* Every table this CPU and build can run but ref, for tests to loop over: avx2, avx512bw,
 * avx512 (VNNI), neon, neon-dot, each where present, in that order (a dot-product CPU gets both
 * NEON tables, a VNNI one both AVX-512 tables). Stores at most max tables in out and returns how
 * many it stored; CLLM_KERN_TIERS_MAX is enough for any CPU. CLLM_ISA does not change it. */
#define CLLM_KERN_TIERS_MAX 4
int cllm_kern_tiers(const cllm_kern_ops **out, int max);
/* Activation fake-quantization, the float emulation of act_bits < 16 (W4A8/W4A4/W8A8 without
 * the integer kernels, e.g. the int8 lm_head of a w4a8 model): dst[k] = x[k] after symmetric
 * per-group (`group` inputs, absmax / (2^(bits-1) - 1), round to nearest even) quantization to
 * `bits`; then matmul_q on dst. Per token, so callers do it once per run (model/forward.c). */
void cllm_kern_fake_quant_act(const float *x, float *dst, int K, int group, int bits);
/* The matmul entry for a weight dtype; NULL for dtypes without a kernel. */
cllm_matmul_fn cllm_kern_matmul(const cllm_kern_ops *k, cllm_dtype dt);

#endif
