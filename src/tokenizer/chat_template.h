/* Chat templates: the chat request's variables rendered through a model's Jinja template.
 *
 * Request path: server/ turns an OpenAI chat request into a messages JSON array (plus tools and
 * options) and calls cllm_chat_render; the prompt text then goes to cllm_tok_encode. The
 * template language itself is src/jinja/ (jinja/jinja.h: compile, render, limits). */
#ifndef CLLM_TOKENIZER_CHAT_TEMPLATE_H
#define CLLM_TOKENIZER_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/status.h"
#include "jinja/jinja.h"

/* Convenience for the chat path: builds the context {messages, tools (if non-NULL and
 * non-empty), add_generation_prompt, enable_thinking (only when thinking == 0 or 1; -1 leaves it
 * undefined so the template's default applies), bos_token, eos_token} and renders. */
typedef struct cllm_chat_opts {
    json_t *tools;              /* JSON array or NULL */
    bool add_generation_prompt; /* usually true */
    int enable_thinking;        /* -1 template default, 0 off, 1 on */
    const char *bos_token, *eos_token;
    json_t *extra; /* extra template kwargs (object) or NULL; merged last */
} cllm_chat_opts;

cllm_status cllm_chat_render(const cllm_jinja *t, json_t *messages, const cllm_chat_opts *opts,
                             char **out, size_t *out_len, cllm_error *err);

#endif
