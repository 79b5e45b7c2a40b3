/* The real engine (engine/engine.h) behind the server's function table. cmd_serve.c starts the
 * server before the model is loaded (so /health can say 503 while loading): ctx is a holder
 * whose engine pointer is set once loading is done; until then calls see no engine. */
#include <string.h>

#include "server/server.h"

/* The holder is set by cmd_serve.c's atomic release store after cllm_engine_create returns; the
 * acquire load makes the engine's initialisation visible to the server threads that see it
 * (TSan reported the stats thread reading the engine mutex before it, with a plain load). */
static cllm_engine *engine_of(void *ctx) {
    return __atomic_load_n((cllm_engine **)ctx, __ATOMIC_ACQUIRE);
}

static cllm_status op_submit(void *ctx, const cllm_request *r, uint64_t *id, cllm_error *err) {
    cllm_engine *e = engine_of(ctx);
    if (!e) return cllm_err_set(err, CLLM_EBUSY, "the model is still loading");
    return cllm_engine_submit(e, r, id, err);
}

static void op_cancel(void *ctx, uint64_t id) {
    cllm_engine *e = engine_of(ctx);
    if (e) cllm_engine_cancel(e, id);
}

static void op_drain(void *ctx) {
    cllm_engine *e = engine_of(ctx);
    if (e) cllm_engine_drain(e);
}

static void op_stats(void *ctx, cllm_engine_stats *s) {
    cllm_engine *e = engine_of(ctx);
    if (e)
        cllm_engine_stats_get(e, s);
    else
        memset(s, 0, sizeof(*s));
}

static void op_defaults(void *ctx, cllm_sampling *s) {
    cllm_engine *e = engine_of(ctx);
    if (e) cllm_sampling_defaults(e, s);
}

static const struct cllm_tok *op_tokenizer(void *ctx) {
    cllm_engine *e = engine_of(ctx);
    return e ? cllm_engine_tokenizer(e) : NULL;
}

static void op_vision(void *ctx, cllm_vision_info *vi) {
    cllm_engine *e = *(cllm_engine **)ctx;
    if (e)
        cllm_engine_vision(e, vi);
    else
        memset(vi, 0, sizeof(*vi));
}

void cllm_server_engine_real(cllm_server_engine *ops, cllm_engine **holder) {
    ops->ctx = holder;
    ops->submit = op_submit;
    ops->cancel = op_cancel;
    ops->drain = op_drain;
    ops->stats = op_stats;
    ops->sampling_defaults = op_defaults;
    ops->tokenizer = op_tokenizer;
    ops->vision = op_vision;
}
