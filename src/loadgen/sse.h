/* Incremental Server-Sent Events reader for bench-serve (client side of `data: {...}\n\n`).
 *
 * The transport hands over bytes as they arrive (any split); each complete event's joined
 * `data:` payload goes to the callback. Comment lines (`:ping`) and other fields are skipped.
 * A line longer than max_line bytes is an error (the cap keeps a broken server from growing the
 * buffer without bound). */
#ifndef CLLM_LOADGEN_SSE_H
#define CLLM_LOADGEN_SSE_H

#include <stdbool.h>
#include <stddef.h>

/* Returns false to stop parsing (lg_sse_feed then returns false too). */
typedef bool (*lg_sse_event_fn)(void *ctx, const char *data, size_t len);

typedef struct lg_sse {
    char *line; /* partial line being assembled */
    size_t line_len, line_cap;
    char *data; /* data of the current event, lines joined by '\n' */
    size_t data_len, data_cap;
    bool has_data;
    size_t max_line;
    lg_sse_event_fn on_event;
    void *ctx;
    bool overflow; /* a line or event went past max_line */
} lg_sse;

void lg_sse_init(lg_sse *p, size_t max_line, lg_sse_event_fn fn, void *ctx);
/* Feeds n bytes. False on overflow, allocation failure or when the callback said stop. */
bool lg_sse_feed(lg_sse *p, const char *buf, size_t n);
/* Dispatches an event left without its closing blank line (stream ended early). */
bool lg_sse_finish(lg_sse *p);
void lg_sse_free(lg_sse *p);

#endif
