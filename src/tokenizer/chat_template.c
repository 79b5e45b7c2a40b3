/* The chat entry point of the template engine: builds the variables HF transformers passes to
 * apply_chat_template (messages, tools, add_generation_prompt, enable_thinking, bos/eos tokens,
 * extra kwargs) and renders. Called by the server for each chat request and by the CLI. */
#include <string.h>

#include "tokenizer/chat_template.h"

cllm_status cllm_chat_render(const cllm_jinja *t, json_t *messages, const cllm_chat_opts *o,
                             char **out, size_t *out_len, cllm_error *err) {
    *out = NULL;
    if (!json_is_array(messages))
        return cllm_err_set(err, CLLM_EINVAL, "messages must be an array");
    json_t *ctx = json_object();
    if (!ctx) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    json_object_set(ctx, "messages", messages);
    if (o && json_is_array(o->tools) && json_array_size(o->tools))
        json_object_set(ctx, "tools", o->tools);
    json_object_set_new(ctx, "add_generation_prompt",
                        json_boolean(o ? o->add_generation_prompt : true));
    if (o && (o->enable_thinking == 0 || o->enable_thinking == 1))
        json_object_set_new(ctx, "enable_thinking", json_boolean(o->enable_thinking));
    if (o && o->bos_token) json_object_set_new(ctx, "bos_token", json_string(o->bos_token));
    if (o && o->eos_token) json_object_set_new(ctx, "eos_token", json_string(o->eos_token));
    if (o && json_is_object(o->extra)) json_object_update(ctx, o->extra);
    cllm_status st = cllm_jinja_render(t, ctx, NULL, out, out_len, err);
    json_decref(ctx);
    return st;
}
