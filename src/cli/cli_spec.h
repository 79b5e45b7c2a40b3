/* --speculative-config: vLLM's JSON spelling of the speculative decoding setup, parsed into the
 * engine's cllm_spec_opts (engine/engine.h). Shared by serve and bench. */
#ifndef CLLM_CLI_CLI_SPEC_H
#define CLLM_CLI_CLI_SPEC_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/engine.h"

/* Parses json into *o (method NONE when json is NULL). bench: the benchmark-only key
 * synthetic_acceptance is allowed; serve refuses it by name. Returns 0, or -1 with
 * a one-line message in msg naming the key or value at fault. */
int cli_spec_parse(const char *json, bool bench, cllm_spec_opts *o, char *msg, size_t cap);

#endif
