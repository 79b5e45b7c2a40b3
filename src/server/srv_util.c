/* Small helpers for server/: a capped growable buffer, the monotonic clock, error records. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv_int.h"

/* Any single response body above this is a bug or an attack; the buffer reports oom instead. */
#define SRV_BUF_MAX ((size_t)1 << 30)

void srv_buf_add(srv_buf *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = cap > SRV_BUF_MAX ? NULL : realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void srv_buf_adds(srv_buf *b, const char *s) {
    srv_buf_add(b, s, strlen(s));
}

void srv_buf_printf(srv_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof(tmp)) {
        srv_buf_add(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    srv_buf_add(b, big, (size_t)n);
    free(big);
}

void srv_buf_free(srv_buf *b) {
    free(b->p);
    memset(b, 0, sizeof(*b));
}

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void srv_err_set(srv_err *e, unsigned status, const char *type, const char *param, const char *fmt,
                 ...) {
    e->status = status;
    snprintf(e->type, sizeof(e->type), "%s", type);
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    e->code[0] = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
}

bool srv_bad(srv_err *e, const char *param, const char *fmt, ...) {
    e->status = 400;
    snprintf(e->type, sizeof(e->type), "%s", "invalid_request_error");
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    e->code[0] = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
    va_end(ap);
    return false;
}

char *srv_fmt_error_json(const srv_err *e) {
    /* the message may embed user text cut at any byte: make it valid UTF-8 */
    char *msg = cllm_tok_utf8_sanitize(e->msg, strlen(e->msg), NULL);
    json_t *o =
        json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", msg ? msg : "error", "type",
                  e->type, "param", e->param[0] ? json_string(e->param) : json_null(), "code",
                  e->code[0] ? json_string(e->code) : json_integer(e->status));
    free(msg);
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

bool srv_path_listed(const char *list, const char *path) {
    size_t n = strlen(path);
    for (const char *p = list; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        if (l == n && !strncmp(p, path, n)) return true;
        if (!comma) break;
        p = comma + 1;
    }
    return false;
}

const char *srv_chat_template_src(const cllm_server *s) {
    return s->o.chat_template ? s->o.chat_template : s->tok ? cllm_tok_chat_template(s->tok) : NULL;
}

bool srv_model_known(const cllm_server *s, const char *name) {
    if (!strcmp(name, s->model_name)) return true;
    for (int i = 0; i < s->o.n_model_aliases; i++)
        if (s->o.model_aliases[i] && !strcmp(name, s->o.model_aliases[i])) return true;
    if (!s->o.model_dir) return false;
    /* the path as given, or with a trailing '/' added or removed */
    size_t a = strlen(name), b = strlen(s->o.model_dir);
    while (a > 1 && name[a - 1] == '/') a--;
    while (b > 1 && s->o.model_dir[b - 1] == '/') b--;
    return a == b && !strncmp(name, s->o.model_dir, a);
}
