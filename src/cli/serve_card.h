/* The model card `cllm serve` hands the web console (/console/info): what the checkpoint is and
 * how this process runs it. Called by cmd_serve.c once the engine is loaded. */
#ifndef CLLM_CLI_SERVE_CARD_H
#define CLLM_CLI_SERVE_CARD_H

#include "engine/engine.h"
#include "server/server.h"

/* Reads MODEL_DIR/config.json and the checkpoint's tensor headers; never fails the serve (a
 * field it cannot read is left out). */
void cli_serve_card_set(cllm_server *srv, const char *model_dir, const char *name,
                        const cllm_engine_opts *eo);

#endif
