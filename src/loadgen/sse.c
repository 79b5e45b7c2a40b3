/* Incremental SSE reader; see sse.h. */
#include "loadgen/sse.h"

#include <stdlib.h>
#include <string.h>

void lg_sse_init(lg_sse *p, size_t max_line, lg_sse_event_fn fn, void *ctx) {
    memset(p, 0, sizeof(*p));
    p->max_line = max_line ? max_line : (1u << 20);
    p->on_event = fn;
    p->ctx = ctx;
}

void lg_sse_free(lg_sse *p) {
    free(p->line);
    free(p->data);
    p->line = p->data = NULL;
}

static bool grow(char **buf, size_t *cap, size_t need, size_t max) {
    if (need > max + 1) return false;
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    char *q = realloc(*buf, c);
    if (!q) return false;
    *buf = q;
    *cap = c;
    return true;
}

static bool dispatch(lg_sse *p) {
    if (!p->has_data) return true;
    p->has_data = false;
    size_t n = p->data_len;
    p->data_len = 0;
    p->data[n] = 0;
    return p->on_event(p->ctx, p->data, n);
}

static bool process_line(lg_sse *p, char *s, size_t n) {
    if (n && s[n - 1] == '\r') n--;
    if (n == 0) return dispatch(p);
    if (s[0] == ':') return true;
    if (n < 5 || memcmp(s, "data:", 5) != 0) return true; /* event:, id:, retry: ignored */
    s += 5, n -= 5;
    if (n && s[0] == ' ') s++, n--;
    size_t need = p->data_len + (p->has_data ? 1 : 0) + n + 1;
    if (!grow(&p->data, &p->data_cap, need, p->max_line)) {
        p->overflow = true;
        return false;
    }
    if (p->has_data) p->data[p->data_len++] = '\n';
    memcpy(p->data + p->data_len, s, n);
    p->data_len += n;
    p->data[p->data_len] = 0;
    p->has_data = true;
    return true;
}

bool lg_sse_feed(lg_sse *p, const char *buf, size_t n) {
    while (n) {
        const char *nl = memchr(buf, '\n', n);
        size_t take = nl ? (size_t)(nl - buf) : n;
        if (!grow(&p->line, &p->line_cap, p->line_len + take + 1, p->max_line)) {
            p->overflow = true;
            return false;
        }
        memcpy(p->line + p->line_len, buf, take);
        p->line_len += take;
        buf += take, n -= take;
        if (!nl) break;
        buf++, n--;
        size_t ln = p->line_len;
        p->line_len = 0;
        if (!process_line(p, p->line, ln)) return false;
    }
    return true;
}

bool lg_sse_finish(lg_sse *p) {
    if (p->line_len) {
        size_t ln = p->line_len;
        p->line_len = 0;
        if (!process_line(p, p->line, ln)) return false;
    }
    return dispatch(p);
}
