/* `cllm synth`: random-weight checkpoints in exact HF layout for any config (16/32-bit, or
 * GPTQ-layout quantized with a scheme), written tensor by tensor in chunks (memory use is a few MB
 * whatever the model size), deterministic for a seed and independent of sharding (each tensor's
 * values depend only on seed and tensor name). */
#ifndef CLLM_MODEL_SYNTH_H
#define CLLM_MODEL_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "base/dtype.h"
#include "model/tensor_plan.h"

/* How a synth's quantized Linears are stored (model/qformat.h for each). */
typedef enum cllm_synth_qlayout {
    CLLM_SYNTH_GPTQ, /* GPTQ v1, with a scheme */
    CLLM_SYNTH_AWQ,  /* AutoAWQ gemm (scheme w4a16 only; lm_head kept) */
    CLLM_SYNTH_FP8,  /* block FP8 e4m3 + weight_scale_inv, no scheme; `group` is the block side */
} cllm_synth_qlayout;

typedef struct cllm_synth_opts {
    const char *config_path; /* config.json to copy and follow */
    const char *out_dir;     /* created if missing */
    uint64_t seed;
    cllm_dtype dtype; /* BF16, F16 or F32 for the bulk; A_log always F32 */
    cllm_expert_layout layout;
    uint64_t shard_bytes;      /* 0 = one file */
    bool qwen_shard_names;     /* model.safetensors-000NN-of-000MM.safetensors like Qwen ships */
    bool include_mtp;          /* write mtp.* when the config has MTP layers */
    bool include_vision;       /* write model.visual.* when the config has a vision_config */
    const char *tokenizer_dir; /* copy tokenizer.json / tokenizer_config.json from here, or NULL */
    bool progress;             /* progress on stderr (false = silent) */
    bool tty;                  /* stderr is a terminal: a \r bar; else a line per 10% */
    /* Quantized output (NULL: float weights of `dtype`): "w4a16", "w8a16", "w4a8" or "w4a4"
     * writes the GPTQ v1 layout directly (random codes, no float intermediate) with the tensors
     * `cllm quantize` keeps 16-bit by default left in `dtype`; needs CLLM_EXPERTS_PER_EXPERT. */
    const char *scheme;
    int group;        /* quantization group along K (0 = 128) */
    int lm_head_bits; /* 8, 4 or 16 (kept) with a scheme */
    cllm_synth_qlayout qlayout;
} cllm_synth_opts;

cllm_status cllm_synth(const cllm_synth_opts *o, cllm_error *err);

#endif
