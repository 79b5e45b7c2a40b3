/* The tokenizer of a GGUF file, rebuilt as the HF tokenizer.json / tokenizer_config.json text that
 * cllm_tok_load_mem (tokenizer/tokenizer.h) already reads, so a GGUF model tokenizes through the
 * same code, and to the same ids, as the HF checkpoint it was converted from.
 *
 * For whoever opens a .gguf model to hand the texts to cllm_tok_load_mem (today the tests; the
 * model loader's GGUF path is still to come, issue 33). model/ does not depend on tokenizer/: the
 * two meet only in this JSON text. How each GGUF key maps: docs/model.md §4, "From a GGUF file". */
#ifndef CLLM_MODEL_GGUF_TOK_H
#define CLLM_MODEL_GGUF_TOK_H

#include "base/status.h"
#include "model/gguf.h"

/* Builds both JSON texts from g's tokenizer.* metadata. On success *tokenizer_json and
 * *tokenizer_config_json are malloc'd NUL-terminated strings the caller frees. Supported:
 * tokenizer.ggml.model "gpt2" (byte-level BPE) with the Qwen pre-tokenizers ("qwen2", "qwen35");
 * another model or pre gives CLLM_EUNSUPPORTED naming the key and value, missing or inconsistent
 * keys CLLM_ENOTFOUND / CLLM_EFORMAT naming the key (and index). Reads g only; thread-safe for
 * distinct outputs. */
cllm_status cllm_gguf_tokenizer_json(const cllm_gguf *g, char **tokenizer_json,
                                     char **tokenizer_config_json, cllm_error *err);

#endif
