/* A tiny OpenAI-compatible stub server for the bench-serve and doctor tests: one thread, poll(),
 * Connection: close. Streams `max_tokens` chunks, the first ttft_ms after the request arrived
 * and the rest itl_ms apart, then a usage chunk (when stream_options.include_usage) and
 * `data: [DONE]`. Prompt tokens = words in the prompt / all message contents.
 * Also serves GET /health, /v1/models and /metrics (text from a callback). Test code only. */
#ifndef CLLM_TEST_BENCH_SERVE_STUB_H
#define CLLM_TEST_BENCH_SERVE_STUB_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct stub_cfg {
    double ttft_ms, itl_ms;
    bool early_role;   /* chat: a role chunk (content "") as soon as the request is in, before the
                          first token, as servers that send it before prefill do */
    int fail_every;    /* every Nth generation request gets HTTP 500 (0: never) */
    int health_status; /* 0 -> 200 */
    const char *model; /* NULL -> "stub-model" */
    /* /metrics body; n = how many times /metrics was asked before. NULL -> 404. Returns malloc'd.
     */
    char *(*metrics)(void *ud, long n);
    void *metrics_ud;
} stub_cfg;

typedef struct stub_conn {
    int fd;
    char *in;
    size_t in_len, in_cap;
    char *out;
    size_t out_len, out_off, out_cap;
    int state; /* 0 reading, 1 streaming, 2 closing after flush */
    double t0;
    int n_tok, sent, prompt_tokens;
    bool chat, usage;
} stub_conn;

typedef struct stub {
    stub_cfg cfg;
    int lfd, port;
    pthread_t th;
    atomic_int stop;
    stub_conn *conns;
    int n_conns, cap_conns;
    atomic_long n_gen, n_metrics, max_open;
} stub;

static double stub_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void stub_out(stub_conn *c, const char *s, size_t n) {
    if (c->out_len + n > c->out_cap) {
        size_t cap = c->out_cap ? c->out_cap : 4096;
        while (cap < c->out_len + n) cap *= 2;
        c->out = realloc(c->out, cap);
        c->out_cap = cap;
    }
    memcpy(c->out + c->out_len, s, n);
    c->out_len += n;
}

static void stub_outf(stub_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void stub_outf(stub_conn *c, const char *fmt, ...) {
    char buf[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    stub_out(c, buf, (size_t)n);
}

static void stub_reply(stub_conn *c, int status, const char *ctype, const char *body) {
    size_t n = strlen(body);
    stub_outf(
        c, "HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
        status, ctype, n);
    stub_out(c, body, n);
    c->state = 2;
}

static int count_words(const char *s) {
    int n = 0;
    bool in = false;
    for (; s && *s; s++) {
        bool sp = *s == ' ' || *s == '\n' || *s == '\t';
        if (!sp && !in) n++;
        in = !sp;
    }
    return n;
}

static void stub_handle(stub *s, stub_conn *c, const char *method, const char *path,
                        const char *body) {
    if (!strcmp(method, "GET") && !strcmp(path, "/health")) {
        stub_reply(c, s->cfg.health_status ? s->cfg.health_status : 200, "text/plain", "");
    } else if (!strcmp(method, "GET") && !strcmp(path, "/v1/models")) {
        char b[512];
        snprintf(b, sizeof(b),
                 "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\"}]}",
                 s->cfg.model ? s->cfg.model : "stub-model");
        stub_reply(c, 200, "application/json", b);
    } else if (!strcmp(method, "GET") && !strcmp(path, "/metrics")) {
        long n = atomic_fetch_add(&s->n_metrics, 1);
        if (!s->cfg.metrics) {
            stub_reply(c, 404, "text/plain", "no metrics");
            return;
        }
        char *m = s->cfg.metrics(s->cfg.metrics_ud, n);
        stub_reply(c, 200, "text/plain; version=0.0.4", m);
        free(m);
    } else if (!strcmp(method, "POST") &&
               (!strcmp(path, "/v1/completions") || !strcmp(path, "/v1/chat/completions"))) {
        long k = atomic_fetch_add(&s->n_gen, 1) + 1;
        if (s->cfg.fail_every && k % s->cfg.fail_every == 0) {
            stub_reply(c, 500, "application/json", "{\"error\":{\"message\":\"injected\"}}");
            return;
        }
        json_t *j = json_loads(body, 0, NULL);
        if (!j) {
            stub_reply(c, 400, "application/json", "{\"error\":{\"message\":\"bad json\"}}");
            return;
        }
        c->chat = strstr(path, "chat") != NULL;
        c->n_tok = (int)json_integer_value(json_object_get(j, "max_tokens"));
        if (c->n_tok <= 0) c->n_tok = 16;
        c->usage =
            json_is_true(json_object_get(json_object_get(j, "stream_options"), "include_usage"));
        c->prompt_tokens = 0;
        if (c->chat) {
            size_t i;
            json_t *m;
            json_array_foreach(json_object_get(j, "messages"), i, m) c->prompt_tokens +=
                count_words(json_string_value(json_object_get(m, "content")));
        } else {
            c->prompt_tokens = count_words(json_string_value(json_object_get(j, "prompt")));
        }
        json_decref(j);
        stub_outf(
            c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
        if (c->chat && s->cfg.early_role)
            stub_outf(c, "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{"
                         "\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
                         "\"finish_reason\":null}]}\n\n");
        c->state = 1;
        c->t0 = stub_now();
        c->sent = 0;
    } else {
        stub_reply(c, 404, "text/plain", "not found");
    }
}

static void stub_try_request(stub *s, stub_conn *c) {
    char *end = c->in ? strstr(c->in, "\r\n\r\n") : NULL;
    if (!end) return;
    size_t hdr = (size_t)(end - c->in) + 4, clen = 0;
    const char *cl = strcasestr(c->in, "Content-Length:");
    if (cl && cl < end) clen = strtoul(cl + 15, NULL, 10);
    if (c->in_len < hdr + clen) return;
    char method[16] = "", path[256] = "";
    sscanf(c->in, "%15s %255s", method, path);
    char *body = strndup(c->in + hdr, clen);
    stub_handle(s, c, method, path, body);
    free(body);
}

static void *stub_main(void *arg) {
    stub *s = arg;
    struct pollfd *pf = NULL;
    int pf_cap = 0;
    while (!atomic_load(&s->stop)) {
        double now = stub_now(), wait = 0.05;
        /* emit due tokens */
        for (int i = 0; i < s->n_conns; i++) {
            stub_conn *c = &s->conns[i];
            while (c->state == 1) {
                double due = c->t0 + (s->cfg.ttft_ms + s->cfg.itl_ms * c->sent) / 1000.0;
                if (due > now) {
                    if (due - now < wait) wait = due - now;
                    break;
                }
                bool last = c->sent + 1 == c->n_tok;
                if (c->chat)
                    stub_outf(c,
                              "data: "
                              "{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{"
                              "\"index\":0,"
                              "\"delta\":{\"content\":\" w%d\"},\"finish_reason\":%s}]}\n\n",
                              c->sent, last ? "\"length\"" : "null");
                else
                    stub_outf(
                        c,
                        "data: "
                        "{\"id\":\"c\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,"
                        "\"text\":\" w%d\",\"finish_reason\":%s}]}\n\n",
                        c->sent, last ? "\"length\"" : "null");
                c->sent++;
                if (last) {
                    if (c->usage)
                        stub_outf(
                            c,
                            "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,"
                            "\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n",
                            c->prompt_tokens, c->n_tok, c->prompt_tokens + c->n_tok);
                    stub_outf(c, "data: [DONE]\n\n");
                    c->state = 2;
                }
            }
        }
        /* flush and close */
        for (int i = 0; i < s->n_conns; i++) {
            stub_conn *c = &s->conns[i];
            while (c->out_off < c->out_len) {
                ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
                if (w <= 0) break;
                c->out_off += (size_t)w;
            }
            if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
            if (c->state == 2 && c->out_len == 0) {
                close(c->fd);
                free(c->in), free(c->out);
                s->conns[i--] = s->conns[--s->n_conns];
            }
        }
        if (pf_cap < s->n_conns + 1) {
            pf_cap = (s->n_conns + 1) * 2;
            pf = realloc(pf, (size_t)pf_cap * sizeof(*pf));
        }
        pf[0] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        for (int i = 0; i < s->n_conns; i++)
            pf[i + 1] =
                (struct pollfd){.fd = s->conns[i].fd,
                                .events = (short)(POLLIN | (s->conns[i].out_len ? POLLOUT : 0))};
        int n = s->n_conns;
        poll(pf, (nfds_t)n + 1, (int)(wait * 1000) + (wait > 0 ? 1 : 0));
        for (int i = 0; i < n; i++) {
            if (!(pf[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            stub_conn *c = &s->conns[i];
            char buf[65536];
            ssize_t r = recv(c->fd, buf, sizeof(buf), 0);
            if (r <= 0) {
                if (r == 0 || (errno != EAGAIN && errno != EINTR))
                    c->state = 2, c->out_len = c->out_off = 0;
                continue;
            }
            if (c->state != 0) continue;
            if (c->in_len + (size_t)r + 1 > c->in_cap) {
                c->in_cap = (c->in_len + (size_t)r + 1) * 2;
                c->in = realloc(c->in, c->in_cap);
            }
            memcpy(c->in + c->in_len, buf, (size_t)r);
            c->in_len += (size_t)r;
            c->in[c->in_len] = 0;
            stub_try_request(s, c);
        }
        if (pf[0].revents & POLLIN) {
            for (;;) {
                int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK);
                if (fd < 0) break;
                if (s->n_conns == s->cap_conns) {
                    s->cap_conns = s->cap_conns ? s->cap_conns * 2 : 64;
                    s->conns = realloc(s->conns, (size_t)s->cap_conns * sizeof(stub_conn));
                }
                s->conns[s->n_conns++] = (stub_conn){.fd = fd};
                if (s->n_conns > atomic_load(&s->max_open)) atomic_store(&s->max_open, s->n_conns);
            }
        }
    }
    for (int i = 0; i < s->n_conns; i++) {
        close(s->conns[i].fd);
        free(s->conns[i].in), free(s->conns[i].out);
    }
    free(s->conns);
    free(pf);
    return NULL;
}

/* Starts the stub on 127.0.0.1 at an ephemeral port (s->port). 0 ok. */
static int stub_start(stub *s, const stub_cfg *cfg) {
    memset(s, 0, sizeof(*s));
    s->cfg = *cfg;
    s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    int one = 1;
    setsockopt(s->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    if (bind(s->lfd, (struct sockaddr *)&a, sizeof(a)) || listen(s->lfd, 1024) ||
        getsockname(s->lfd, (struct sockaddr *)&a, &al))
        return -1;
    s->port = ntohs(a.sin_port);
    return pthread_create(&s->th, NULL, stub_main, s);
}

static void stub_stop(stub *s) {
    atomic_store(&s->stop, 1);
    pthread_join(s->th, NULL);
    close(s->lfd);
}

/* A port with nothing listening (bound, then closed). */
static int stub_dead_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    bind(fd, (struct sockaddr *)&a, sizeof(a));
    getsockname(fd, (struct sockaddr *)&a, &al);
    close(fd);
    return ntohs(a.sin_port);
}

#endif
