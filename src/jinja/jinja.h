/* The Jinja interpreter's public interface: a sandboxed interpreter for the Jinja subset that HF
 * chat templates use. Its only user is the chat-template code (tokenizer/chat_template.h), which
 * builds the variables of a chat request; the interpreter knows nothing of tokens or models.
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
 * template is read-only; each render uses its own state. The interpreter's structures are private
 * to src/jinja/ (jinja_int.h). */
#ifndef CLLM_JINJA_JINJA_H
#define CLLM_JINJA_JINJA_H

#include <stddef.h>

#include <jansson.h>

#include "base/status.h"

typedef struct cllm_jinja cllm_jinja;

/* Parses template source (len bytes). On success *out owns a copy of everything it needs; free
 * with cllm_jinja_free. Syntax errors are CLLM_EFORMAT with "line N: ..." in err. */
cllm_status cllm_jinja_compile(const char *src, size_t len, cllm_jinja **out, cllm_error *err);

void cllm_jinja_free(cllm_jinja *t);

/* Limits applied during rendering; zero fields take the defaults shown. */
typedef struct cllm_jinja_limits {
    size_t max_output; /* bytes of rendered text, default 64 MiB */
    size_t max_memory; /* bytes of intermediate values, default 256 MiB */
    long max_steps;    /* loop iterations + calls, default 10 million */
    int max_depth;     /* macro recursion / expression nesting, default 64 */
} cllm_jinja_limits;

/* Renders with the variables of ctx (a JSON object: messages, tools, add_generation_prompt,
 * enable_thinking, bos_token, ... — whatever the template reads). Returns a malloc'd
 * NUL-terminated string in *out (caller frees) or an error: CLLM_EINVAL for raise_exception or a
 * type error (message names the line), CLLM_ENOMEM when a limit is hit. limits may be NULL. */
cllm_status cllm_jinja_render(const cllm_jinja *t, json_t *ctx, const cllm_jinja_limits *limits,
                              char **out, size_t *out_len, cllm_error *err);

#endif
