/* Weight quantization in the GPTQ v1 layout (what the official Qwen/Qwen3.5-35B-A3B-GPTQ-Int4
 * release uses, docs/model.md §6), shared by `cllm quantize`, the weight binder and `cllm verify`.
 *
 * A Linear `P.weight` [N out][K in] becomes, for bits b in {4, 8} and group size G:
 *   P.qweight  I32 [K*b/32][N]   32/b values of consecutive k per word, low bits first
 *   P.qzeros   I32 [K/G][N*b/32] per (group, output) stored zero z, packed along N the same way
 *   P.scales   F16 [K/G][N]
 *   P.g_idx    I32 [K]           k / G (desc_act false; other orders are rejected)
 * and w[n][k] = scales[k/G][n] * (q - (z + 1)). Symmetric quantization stores z = 2^(b-1) - 1
 * (0x77777777 for int4), so w = scale * (q - 8) (int4) or scale * (q - 128) (int8).
 * Asymmetric (--asym, "sym": false) picks per (group, output) scale = (max - min) / (2^b - 1) over
 * the group's range widened to include 0, and zero = round(-min / scale) kept in [1, 2^b - 1]
 * (stored z = zero - 1 never wraps, the v1 format's known pitfall; a group needing zero 0 gets
 * zero 1 and scale = max / (2^b - 2)). Scales may be BF16 instead of F16 (--scale-dtype bf16);
 * readers take the dtype from the scales tensor.
 * config.json carries "quantization_config": {"quant_method": "gptq", "bits", "group_size",
 * "sym", "desc_act": false, "checkpoint_format": "gptq", "dynamic": {...}} plus cllm's own keys
 * "cllm_scheme" and "cllm_act_bits" (16, or 8/4 for W4A8/W4A4: activations fake-quantized).
 * This is AutoGPTQ's QuantLinear.pack / GPTQModel's v1 format ("zeros -= 1" before packing,
 * "+ 1" when unpacking) and vLLM's gptq kernels with use_v2_format false. GPTQModel's "gptq_v2"
 * format stores z itself; cllm_qformat_bind_any converts it (CLLM_QFORMAT_GPTQ_V2). */
#ifndef CLLM_MODEL_QFORMAT_H
#define CLLM_MODEL_QFORMAT_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "base/status.h"
#include "kernels/kernels.h"
#include "model/checkpoint.h"

/* Byte sizes of the four tensors together for a [N][K] matrix. */
uint64_t cllm_qformat_bytes(int bits, int group, int K, int N);

/* True when `name` is one of a quantized Linear's tensors: GPTQ P.qweight, P.qzeros, P.scales,
 * P.g_idx, or compressed-tensors P.weight_packed, P.weight_scale, P.weight_zero_point (not the
 * optional P.weight_shape and P.weight_g_idx). The prefault (model/weights.c) passes over them
 * once every matrix is repacked. */
bool cllm_qformat_is_qtensor(const char *name);

/* Scale of (group g, output n) as float, whatever its stored dtype. */
float cllm_qweight_scale(const cllm_qweight *w, int g, int n);
/* Effective zero (stored + 1) of (group g, output n). */
int cllm_qweight_zero(const cllm_qweight *w, int g, int n);
/* Dequantized row n of a quantized matrix into dst [K]. */
void cllm_qformat_dequant_row(const cllm_qweight *w, int n, float *dst);

/* Binds the GPTQ tensors of `base` ("...q_proj", no suffix) for a logical [N][K] matrix.
 * Returns CLLM_ENOTFOUND (no message set) when base.qweight is absent; other errors name the
 * tensor (wrong dtype, shape, group size, g_idx order). act_bits is set to 16. */
cllm_status cllm_qformat_bind(const cllm_ckpt *ck, const char *base, int N, int K,
                              cllm_qweight *out, cllm_error *err);

/* compressed-tensors "pack-quantized" W4A16/W8A16 Linear (quant_method "compressed-tensors"), as
 * compressed_tensors' PackedQuantizationCompressor writes it:
 *   P.weight_packed     I32 [N][K*b/32]   packed along K, 32/b values per word, low bits first,
 *                                         each stored unsigned u = q + 2^(b-1) (q signed)
 *   P.weight_scale      F16|BF16 [N][K/G] strategy "group"; [N][1] strategy "channel" (G = K)
 *   P.weight_zero_point I32 [N*b/32][K/G] (asymmetric only) packed along N, same offset
 *   P.weight_shape      I64 [2] = {N, K}  (optional here; checked when present)
 *   P.weight_g_idx      I32 [K]           (optional; must equal k / G: act-order is refused)
 * w[n][k] = scale * (u - uz), uz = 2^(b-1) when symmetric. Rows are N (transposed relative to
 * GPTQ), so it is converted at load time into the GPTQ layout: words transposed (both pack K the
 * same way), scales transposed, zeros repacked as uz - 1. uz == 0 (signed zero point -2^(b-1),
 * e.g. a group with no negative weight) has no GPTQ v1 zero; that (group, output) block is stored
 * exactly as codes maxq - u, scale -scale, zero maxq. Memory comes from alloc(actx, bytes); alloc
 * NULL only validates (out then has NULL data). Errors name the tensor (shape, dtype, F32 scales,
 * group not a multiple of 8, K not a multiple of 8 (padded packing), act-order g_idx).
 * Returns CLLM_ENOTFOUND (no message) when P.weight_packed is absent. */
cllm_status cllm_qformat_bind_ct(const cllm_ckpt *ck, const char *base, int N, int K,
                                 void *(*alloc)(void *actx, size_t bytes), void *actx,
                                 cllm_qweight *out, cllm_error *err);

/* AutoAWQ "gemm" 4-bit Linear (quant_method "awq", version "gemm"), as awq's WQLinear_GEMM packs:
 *   P.qweight I32 [K][N/8]    packed along N: nibble i of word c is output 8c + order[i],
 *                             order = {0, 2, 4, 6, 1, 3, 5, 7} (AutoAWQ's AWQ_ORDER)
 *   P.qzeros  I32 [K/G][N/8]  the zero z, same packing
 *   P.scales  F16 [K/G][N]    (BF16 accepted)
 * w[n][k] = scales[k/G][n] * (q - z) (awq/utils/packing_utils.py dequantize_gemm). Converted at
 * load into the GPTQ v1 layout: codes repacked along K, zeros stored z - 1, a zero of 0 handled as
 * in cllm_qformat_bind_ct. alloc NULL only validates. Errors name the tensor (dtype, shape, group
 * not a multiple of 8). CLLM_ENOTFOUND (no message) when P.qweight is absent. */
cllm_status cllm_qformat_bind_awq(const cllm_ckpt *ck, const char *base, int N, int K,
                                  void *(*alloc)(void *actx, size_t bytes), void *actx,
                                  cllm_qweight *out, cllm_error *err);

/* cllm_qformat_check_config flags. GPTQ_V2: GPTQModel "format"/"checkpoint_format" "gptq_v2",
 * whose qzeros hold the zero z itself (w = scale * (q - z)) instead of v1's z - 1. */
#define CLLM_QFORMAT_GPTQ_V2  1u
#define CLLM_QFORMAT_GPTQ_SYM 2u /* gptq with "sym": true */
#define CLLM_QFORMAT_AWQ      4u /* awq gemm: P.qweight etc. are AutoAWQ's (bind_awq) */

/* The effective zero (stored + 1) shared by every group and output of q, or 0 when they differ:
 * cllm_qweight.zero_const, which lets the kernels skip qzeros (symmetric GPTQ, GGUF Q4_0/Q8_0). */
int cllm_qformat_uniform_zero(const cllm_qweight *q);

/* For a bound GPTQ matrix of a "sym": true file: every stored zero must be the symmetric one
 * (2^(b-1) - 1 in v1, 2^(b-1) with CLLM_QFORMAT_GPTQ_V2). vLLM's gptq_marlin ignores qzeros when
 * sym is true (scalar type uint4b8/uint8b128); cllm reads them, so a file where they disagree
 * would run differently: CLLM_EFORMAT naming the tensor and the first odd zero (`cllm verify`). */
cllm_status cllm_qformat_check_sym_zeros(const cllm_qweight *q, unsigned flags, const char *base,
                                         cllm_error *err);

/* With CLLM_QFORMAT_AWQ in flags cllm_qformat_bind_awq; otherwise
 * GPTQ tensors (cllm_qformat_bind, in place) or else compressed-tensors (cllm_qformat_bind_ct).
 * With CLLM_QFORMAT_GPTQ_V2 in flags and an allocator, GPTQ zeros are rewritten into owned v1
 * qzeros (a zero of 0 is handled as in cllm_qformat_bind_ct, copying qweight/scales). */
cllm_status cllm_qformat_bind_any(const cllm_ckpt *ck, const char *base, int N, int K,
                                  unsigned flags, void *(*alloc)(void *actx, size_t bytes),
                                  void *actx, cllm_qweight *out, cllm_error *err);

/* CLLM_EUNSUPPORTED naming the tensor when `experts` ("...mlp.experts") holds fused 3-D quantized
 * experts (experts.gate_up_proj.weight_packed / .qweight / _packed, experts.down_proj.*): no
 * released tool or checkpoint writes them for Qwen3.5-MoE (llm-compressor saves per expert). */
cllm_status cllm_qformat_check_fused_experts(const cllm_ckpt *ck, const char *experts,
                                             cllm_error *err);

/* dir/config.json's quantization_config is one cllm loads: none; quant_method "gptq" with format
 * (or checkpoint_format) absent, "gptq" or "gptq_v2" (*flags |= CLLM_QFORMAT_GPTQ_V2; "sym": true
 * adds CLLM_QFORMAT_GPTQ_SYM); "awq" version "gemm", 4 bits, zero_point (CLLM_QFORMAT_AWQ); or
 * "compressed-tensors", format "pack-quantized", every config group int weight-only with 4 or 8
 * bits, static, strategy "group" (group_size a multiple of 8, actorder none or "weight") or
 * "channel", no transform_config, no sparsity other than dense. Anything else (awq gemv, fp8
 * (pointing to `cllm quantize`), int-quantized, float types, activation quantization, strategies
 * tensor/block/token/ tensor_group, actorder group) is a clear CLLM_EUNSUPPORTED naming the key.
 * flags may be NULL. */
cllm_status cllm_qformat_check_config(const char *dir, unsigned *flags, cllm_error *err);

/* The official block-FP8 checkpoint (quant_method "fp8", Qwen/Qwen3.5-35B-A3B-FP8, DeepSeek-V3
 * style, as HF transformers' finegrained_fp8 and vLLM's fp8 loader read it): P.weight F8_E4M3
 * [N][K] and P.weight_scale_inv F32 [ceil(N/bn)][ceil(K/bk)], w[n][k] = fp8 * scale_inv[n/bn][k/bk]
 * ("inv": the reciprocal of the quantizer's scale, so it multiplies); modules_to_not_convert stay
 * BF16. It is read only by `cllm quantize`: serving it is refused by cllm_qformat_check_config,
 * since a 128x128 block with one F32 scale is not an int8 group (e4m3 values are not an
 * arithmetic grid: 448 and 0.001953125 share a block), so no exact W8 conversion exists, and a
 * BF16 copy is the BF16 checkpoint's size. Returns CLLM_OK with block = weight_block_size {bn,
 * bk} for an fp8 config, CLLM_ENOTFOUND (no message) for any other, CLLM_EUNSUPPORTED naming the
 * key for fmt other than e4m3 or a missing/invalid weight_block_size. */
cllm_status cllm_qformat_fp8_config(const char *dir, int block[2], cllm_error *err);

/* quantization_config.cllm_act_bits of dir/config.json (16 when absent or not a cllm file). */
int cllm_qformat_act_bits(const char *dir);

/* The tensors a cllm quantized file keeps 16-bit by default (comma-separated fnmatch globs; the
 * embeddings are always kept besides): embeddings, norms, router, gates, conv1d, A_log/dt_bias,
 * in_proj_a/b and the vision tower. `cllm quantize` and `cllm synth --scheme` use it. */
extern const char *const cllm_qformat_default_keep;

/* True when name matches one of the comma-separated globs of list. */
bool cllm_qformat_glob_match(const char *list, const char *name);

/* What a GPTQ-layout file written by cllm declares in config.json's quantization_config. */
typedef struct cllm_qformat_config_spec {
    int bits, group;
    bool asym, scale_bf16;
    int lm_head_bits;        /* 8, 4, or 16 (kept) */
    const char *const *keep; /* globs kept 16-bit, as "-:regex" entries of "dynamic" */
    int n_keep;
    const char *scheme, *method; /* "w4a16"..., "rtn" | "gptq" | "synth" */
    int act_bits;
} cllm_qformat_config_spec;

/* Sets root["quantization_config"] (root: the parsed config.json) as cllm_qformat_check_config
 * accepts it: quant_method "gptq", bits, group_size, sym, desc_act false, checkpoint_format
 * "gptq", lm_head, dynamic (kept globs, lm_head bits), and cllm's own keys. */
cllm_status cllm_qformat_config_set(json_t *root, const cllm_qformat_config_spec *s,
                                    cllm_error *err);

#endif
