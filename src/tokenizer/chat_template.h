/* Chat templates: a sandboxed interpreter for the Jinja subset that HF chat templates use.
 *
 * Request path: server/ turns an OpenAI chat request into a messages JSON array (plus tools and
 * options) and calls cllm_tmpl_render; the prompt text then goes to cllm_tok_encode.
 *
 * Semantics follow Python Jinja2 as configured by HF transformers (trim_blocks, lstrip_blocks,
 * tojson with ensure_ascii=False, raise_exception, namespace, loop controls), since that is what
 * the model was trained with. Supported: {% if/elif/else %}, {% for %} with loop.* / else /
 * inline filter, {% set %} (incl. blocks, tuple unpacking, namespace attributes), {% macro %},
 * {% break/continue %}, {% generation %}, comments, whitespace control; expressions with
 * arithmetic, comparisons, in / not in, and/or/not, ternaries, slicing, list/dict/tuple literals,
 * the common filters, tests and str/dict methods (see jinja_builtins.c).
 *
 * Sandbox: no file, environment or attribute access beyond plain data; loops, recursion depth,
 * output size and memory are capped; errors name the template line. Thread-safe: a compiled
 * template is read-only; each render uses its own state. */
#ifndef CLLM_TOKENIZER_CHAT_TEMPLATE_H
#define CLLM_TOKENIZER_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/status.h"

typedef struct cllm_tmpl cllm_tmpl;

/* Parses template source (len bytes). On success *out owns a copy of everything it needs; free
 * with cllm_tmpl_free. Syntax errors are CLLM_EFORMAT with "line N: ..." in err. */
cllm_status cllm_tmpl_compile(const char *src, size_t len, cllm_tmpl **out, cllm_error *err);

void cllm_tmpl_free(cllm_tmpl *t);

/* Limits applied during rendering; zero fields take the defaults shown. */
typedef struct cllm_tmpl_limits {
    size_t max_output; /* bytes of rendered text, default 64 MiB */
    size_t max_memory; /* bytes of intermediate values, default 256 MiB */
    long max_steps;    /* loop iterations + calls, default 10 million */
    int max_depth;     /* macro recursion / expression nesting, default 64 */
} cllm_tmpl_limits;

/* Renders with the variables of ctx (a JSON object: messages, tools, add_generation_prompt,
 * enable_thinking, bos_token, ... — whatever the template reads). Returns a malloc'd
 * NUL-terminated string in *out (caller frees) or an error: CLLM_EINVAL for raise_exception or a
 * type error (message names the line), CLLM_ENOMEM when a limit is hit. limits may be NULL. */
cllm_status cllm_tmpl_render(const cllm_tmpl *t, json_t *ctx, const cllm_tmpl_limits *limits,
                             char **out, size_t *out_len, cllm_error *err);

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

cllm_status cllm_tmpl_render_chat(const cllm_tmpl *t, json_t *messages, const cllm_chat_opts *opts,
                                  char **out, size_t *out_len, cllm_error *err);

#endif
