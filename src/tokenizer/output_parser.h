/* Output parser: splits generated text into reasoning, content and tool calls, incrementally.
 *
 * Request path: the engine samples ids -> cllm_tok_stream_* gives text chunks -> cllm_outp_feed
 * turns each chunk into deltas for the SSE stream (reasoning_content / content / tool_calls),
 * and cllm_outp_result gives the final message for non-streaming responses.
 *
 * Understood: <think>...</think> (also when the prompt already opened <think>, Qwen3.5's
 * default: set starts_in_reasoning; and with thinking disabled: leave it false), tool calls in
 * <tool_call>...</tool_call> with either Qwen3.5 XML (<function=NAME><parameter=P>V</parameter>
 * </function>, values typed by the tool's JSON schema) or Qwen3 hermes JSON
 * ({"name": ..., "arguments": {...}}), including calls inside reasoning. Newlines right after a
 * tag or at the start, and right before a tag or the end, are dropped. A tool call that does not
 * parse is returned as content, verbatim (with its closing tag only if the model wrote one).
 *
 * Streaming-safe: the concatenated deltas and the final result do not depend on how the text was
 * split into chunks (a suffix that could begin a tag is held back until it is decided). One
 * parser per request; not thread-safe. */
#ifndef CLLM_TOKENIZER_OUTPUT_PARSER_H
#define CLLM_TOKENIZER_OUTPUT_PARSER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/status.h"

typedef struct cllm_outp cllm_outp;

typedef struct cllm_outp_opts {
    bool reasoning;           /* recognise <think> / </think> */
    bool starts_in_reasoning; /* the prompt ended inside <think> */
    bool tool_calls;          /* recognise <tool_call> */
    json_t *tools;            /* OpenAI tools array (borrowed; must outlive the parser) or NULL */
} cllm_outp_opts;

/* What one feed produced. Strings are owned by the parser and valid until the next call;
 * tool_calls is a new reference to an array of {"name": str, "arguments": str (JSON)} objects
 * completed by this feed (empty array if none); the caller json_decrefs it. */
typedef struct cllm_outp_delta {
    const char *reasoning;
    size_t reasoning_len;
    const char *content;
    size_t content_len;
    json_t *tool_calls;
} cllm_outp_delta;

/* Returns NULL on allocation failure. */
cllm_outp *cllm_outp_new(const cllm_outp_opts *opts);
void cllm_outp_free(cllm_outp *p);

/* Feeds the next chunk of generated text. */
cllm_status cllm_outp_feed(cllm_outp *p, const char *text, size_t len, cllm_outp_delta *d);

/* Ends the stream: flushes held-back text and an unterminated tool call (parsed when it can be:
 * the model may stop right after </function>). */
cllm_status cllm_outp_finish(cllm_outp *p, cllm_outp_delta *d);

/* Ends a stream that was cut off (max_tokens): as cllm_outp_finish, but an unterminated tool
 * call is unfinished, so it is given back as text exactly as generated, never parsed. */
cllm_status cllm_outp_finish_cut(cllm_outp *p, cllm_outp_delta *d);

/* Everything so far: reasoning (NULL if none), content, tool calls (borrowed array). */
const char *cllm_outp_reasoning(const cllm_outp *p);
const char *cllm_outp_content(const cllm_outp *p);
json_t *cllm_outp_tool_calls(const cllm_outp *p);

#endif
