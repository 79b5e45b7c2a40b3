/* A llama.cpp GGUF file of the qwen35moe architecture seen as a cllm checkpoint: tensors under
 * their Hugging Face names with the converter's changes undone, and the config.json it implies.
 * docs/model.md §9 lists the name map and the undone transforms (V-head order, norm + 1,
 * A = -exp(A_log), stacked experts) with where each fact comes from.
 *
 * Weights keep their exact values: Q4_0 / Q5_0 / Q8_0 / IQ4_NL become GPTQ int4 / int8 groups of
 * 32 with the block's fp16 scale (P.qweight, P.qzeros, P.scales: no rounding anywhere); Q4_K
 * and Q6_K (and Q5_K / IQ4_XS matrices whose columns move by V head) are repacked into
 * matmul_kq's panel form (kernels.h, cllm_kq_panel_pack: the same codes and scales, rows in HF
 * order; kq_type has CLLM_KQ_PANEL), Q4_1 / Q5_1 / Q5_K / IQ4_XS stay in their blocks (rows copied
 * only when the V-head order moves them), both P.weight, dtype U8, run by
 * cllm_kern_ops.matmul_kq; F32 / F16 / BF16
 * stay as they are (views into the map when no reordering is needed). What cannot stay in blocks
 * (a matrix whose columns the V-head order moves: the GDN out_proj when there are more V than K
 * heads, unless its blocks are whole heads; a tied embedding; rows not a multiple of 8 for the
 * GPTQ forms) is held as ggml's F32 values, logged once per type. Norm weights come out as F64
 * w = v - 1 and A_log as F64 log(-A), so the loader's (1 + w) and -exp(A_log) give back the
 * file's float values. */
#ifndef CLLM_MODEL_GGUF_CKPT_H
#define CLLM_MODEL_GGUF_CKPT_H

#include <jansson.h>

#include "base/status.h"
#include "model/checkpoint.h"
#include "model/gguf.h"

/* Fills the empty checkpoint c (dir already set) from the GGUF at path: one pseudo-shard named
 * after the file; c owns the converted data (c->owner). Errors name the tensor or key. */
cllm_status cllm_gguf_ckpt_fill(cllm_ckpt *c, const char *path, cllm_error *err);

/* The HF config.json (Qwen3_5MoeForConditionalGeneration layout, text_config inside) implied by
 * the GGUF's qwen35moe.* keys; CLLM_EUNSUPPORTED naming general.architecture for another arch. */
cllm_status cllm_gguf_config(const cllm_gguf *g, json_t **out, cllm_error *err);

/* Writes into the existing folder dir what makes it a model folder for the GGUF at path:
 * config.json (cllm_gguf_config) and a link to each of its files (the weights are read through
 * them by cllm_ckpt_open). `cllm serve FILE.gguf` and the other commands run on such a folder. */
cllm_status cllm_gguf_model_dir(const char *path, const char *dir, cllm_error *err);

#endif
