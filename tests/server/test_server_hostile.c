/* The HTTP layer against hostile clients (issue 32, items 1-6), over raw sockets against the
 * scripted fake engine (tests/lib/test_server_fake.h), with small limits so it runs in seconds:
 *  - a slowloris from one address holding more connections than --max-connections-per-ip does
 *    not lock out a normal request from another address;
 *  - --client-header-timeout cuts connections that dribble a header byte at a time, after which
 *    a normal request is served; --client-body-timeout the same for a dribbled body; an idle
 *    kept-alive connection closes after --timeout-keep-alive;
 *  - framing: two Content-Length headers, an unknown Transfer-Encoding, Transfer-Encoding with
 *    Content-Length, HTTP/1.1 without Host get 400 / 501 with the JSON error body, and the
 *    connection closes; a chunked body past --max-body-size gets 413 at once (not drained);
 *  - the response libmicrohttpd makes itself for a chunk line longer than its buffer is counted
 *    in cllm_http_responses_total;
 *  - CORS: the wildcard origin goes without Allow-Credentials, a named origin with it;
 *  - a stream whose client stopped reading is cancelled after --send-timeout, counted.
 * Clients bind to different loopback addresses (127.0.0.N) to be different clients. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "test.h"
#include "test_server_fake.h"

/* ---- raw client ---- */

static int dial(int port, int src_last_octet, int rcvbuf) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr = htonl(0x7f000000u | (unsigned)src_last_octet);
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd, (struct sockaddr *)&src, sizeof(src)) ||
        connect(fd, (struct sockaddr *)&dst, sizeof(dst))) {
        close(fd);
        return -1;
    }
    return fd;
}

static void put(int fd, const void *p, size_t n) {
    const char *s = p;
    while (n) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static void puts_(int fd, const char *s) {
    put(fd, s, strlen(s));
}

/* Reads until the peer closes or timeout_s passes. Returns the bytes (malloc'd, NUL-ended);
 * *closed says whether the peer closed (EOF or reset) within the time. */
static char *slurp_until_close(int fd, double timeout_s, bool *closed) {
    size_t len = 0, cap = 4096;
    char *b = malloc(cap);
    double end = fake_now() + timeout_s;
    *closed = false;
    for (;;) {
        int left = (int)((end - fake_now()) * 1000);
        if (left <= 0) break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left) <= 0) break;
        if (len + 2048 > cap) b = realloc(b, cap *= 2);
        ssize_t n = recv(fd, b + len, cap - len - 1, 0);
        if (n <= 0) {
            *closed = true;
            break;
        }
        len += (size_t)n;
    }
    b[len] = 0;
    return b;
}

/* Whether the server has closed fd (EOF or reset) without blocking. */
static bool peer_closed(int fd) {
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static long status_of(const char *resp) {
    return !strncmp(resp, "HTTP/1.", 7) ? atol(resp + 9) : 0;
}

/* A whole request from address 127.0.0.src; returns the status (0: no answer). */
static long request(int port, int src, const char *raw, char **out) {
    int fd = dial(port, src, 0);
    if (fd < 0) return 0;
    puts_(fd, raw);
    bool closed;
    char *r = slurp_until_close(fd, 3, &closed);
    close(fd);
    long st = status_of(r);
    if (out)
        *out = r;
    else
        free(r);
    return st;
}

static const char GOOD[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                           "application/json\r\nContent-Length: 30\r\nConnection: close\r\n\r\n"
                           "{\"prompt\":\"hi\",\"max_tokens\":2}";

/* The value of the first sample whose line contains needle in Prometheus text t; 0 when none. */
static double metric_in(const char *t, const char *needle) {
    const char *p = t ? strstr(t, needle) : NULL;
    return p ? atof(p + strlen(needle)) : 0;
}

static double metric(cllm_server *s, const char *needle) {
    char *t = cllm_server_metrics_text(s);
    double v = metric_in(t, needle);
    free(t);
    return v;
}

static cllm_server *start(fake_engine *f, cllm_server_opts *o) {
    cllm_server_engine ops = fake_ops(f);
    o->port = 0;
    o->served_model_name = "tiny";
    o->access_log = getenv("CLLM_TEST_ACCESS_LOG") != NULL;
    o->stats_interval_s = 0;
    o->n_threads = 1; /* MHD splits --max-connections between its threads: exact limits here */
    cllm_server *s = NULL;
    cllm_error err = {0};
    CHECK_MSG(cllm_server_start(o, &ops, &s, &err) == CLLM_OK, "%s", err.msg);
    if (s) cllm_server_set_ready(s, true);
    return s;
}

/* ---- item 1: limits and deadlines ---- */

/* 10 dribbling connections from 127.0.0.1 against --max-connections 8, per address 4: 6 are
 * refused, and a normal request from 127.0.0.2 is served while the 4 are held. */
static void test_per_ip(fake_engine *f) {
    cllm_server_opts o;
    cllm_server_opts_defaults(&o);
    o.connection_limit = 8;
    o.per_ip_connection_limit = 4;
    cllm_server *s = start(f, &o);
    if (!s) return;
    int port = cllm_server_port(s);
    int fds[10];
    for (int i = 0; i < 10; i++) {
        fds[i] = dial(port, 1, 0);
        if (fds[i] >= 0) puts_(fds[i], "POST /v1/completions HTTP/1.1\r\nHo");
    }
    usleep(300 * 1000);
    int refused = 0;
    for (int i = 0; i < 10; i++) refused += fds[i] < 0 || peer_closed(fds[i]);
    CHECK_MSG(refused == 6, "connections refused over the per-address cap: %d of 10, want 6",
              refused);
    double t0 = fake_now();
    char *resp = NULL;
    long st = request(port, 2, GOOD, &resp);
    CHECK_MSG(st == 200 && fake_now() - t0 < 2,
              "normal request beside the slowloris: %ld in %.2f s", st, fake_now() - t0);
    free(resp);
    for (int i = 0; i < 10; i++)
        if (fds[i] >= 0) close(fds[i]);
    cllm_server_stop(s);
}

/* Every connection slot held by header dribblers (one byte per 0.2 s, so an inactivity timeout
 * never fires): --client-header-timeout 1 cuts them all, then a normal request is served. A
 * dribbled body is cut by --client-body-timeout, an idle kept-alive connection by
 * --timeout-keep-alive. */
static void test_deadlines(fake_engine *f) {
    cllm_server_opts o;
    cllm_server_opts_defaults(&o);
    o.connection_limit = 6;
    o.per_ip_connection_limit = 6;
    o.header_timeout_s = 1;
    o.body_timeout_s = 1;
    o.keepalive_timeout_s = 1;
    cllm_server *s = start(f, &o);
    if (!s) return;
    int port = cllm_server_port(s);
    static const char head[] = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nUser-Agent: slow";
    int fds[6];
    for (int i = 0; i < 6; i++) fds[i] = dial(port, 3, 0);
    double t0 = fake_now(), t_cut[6] = {0};
    int cut = 0;
    for (size_t k = 0; fake_now() - t0 < 4 && cut < 6; k++) {
        for (int i = 0; i < 6; i++) {
            if (fds[i] < 0 || t_cut[i] > 0) continue;
            if (peer_closed(fds[i])) {
                t_cut[i] = fake_now() - t0;
                cut++;
            } else {
                put(fds[i], head + k % (sizeof(head) - 1), 1);
            }
        }
        usleep(200 * 1000);
    }
    CHECK_MSG(cut == 6, "header dribblers cut: %d of 6 within 4 s", cut);
    for (int i = 0; i < 6; i++)
        CHECK_MSG(t_cut[i] == 0 || (t_cut[i] > 0.8 && t_cut[i] < 2.5),
                  "dribbler %d cut after %.2f s (deadline 1 s)", i, t_cut[i]);
    CHECK(request(port, 4, GOOD, NULL) == 200);
    CHECK_MSG(metric(s, "reason=\"header_timeout\"} ") >= 6, "header_timeout count %.0f",
              metric(s, "reason=\"header_timeout\"} "));
    for (int i = 0; i < 6; i++)
        if (fds[i] >= 0) close(fds[i]);

    /* body: the head at once, then one body byte per 0.2 s */
    int fd = dial(port, 5, 0);
    puts_(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{");
    t0 = fake_now();
    while (fake_now() - t0 < 4 && !peer_closed(fd)) {
        put(fd, " ", 1);
        usleep(200 * 1000);
    }
    double dt = fake_now() - t0;
    CHECK_MSG(dt > 0.8 && dt < 2.5, "body dribbler cut after %.2f s (deadline 1 s)", dt);
    CHECK_MSG(metric(s, "reason=\"body_timeout\"} ") >= 1, "body_timeout count %.0f",
              metric(s, "reason=\"body_timeout\"} "));
    close(fd);

    /* keep-alive: one request answered, then silence */
    fd = dial(port, 5, 0);
    puts_(fd, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    bool closed;
    t0 = fake_now();
    char *r = slurp_until_close(fd, 4, &closed);
    dt = fake_now() - t0;
    CHECK_MSG(status_of(r) == 200 && closed && dt > 0.8 && dt < 3,
              "kept-alive idle connection: status %ld, closed %d after %.2f s (timeout 1 s)",
              status_of(r), closed, dt);
    free(r);
    close(fd);
    cllm_server_stop(s);
}

/* ---- items 2-5: framing, the body cap, MHD's own answers, Host, CORS ---- */

static void expect_refusal(int port, const char *what, const char *raw, long want,
                           const char *msg_part) {
    int fd = dial(port, 6, 0);
    puts_(fd, raw);
    bool closed;
    char *r = slurp_until_close(fd, 3, &closed);
    const char *body = strstr(r, "\r\n\r\n");
    CHECK_MSG(status_of(r) == want, "%s: status %ld, want %ld:\n%s", what, status_of(r), want, r);
    CHECK_MSG(body && !strncmp(body + 4, "{\"error\":{\"message\":", 20) && strstr(body, msg_part),
              "%s: body is not the JSON error naming '%s':\n%s", what, msg_part, r);
    CHECK_MSG(closed, "%s: connection left open after the refusal", what);
    free(r);
    close(fd);
}

static void test_framing(fake_engine *f) {
    cllm_server_opts o;
    cllm_server_opts_defaults(&o);
    o.max_body_size = 64 << 10;
    o.allowed_origins = "*";
    o.keepalive_timeout_s = 1;
    cllm_server *s = start(f, &o);
    if (!s) return;
    int port = cllm_server_port(s);
    expect_refusal(port, "two Content-Length",
                   "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n"
                   "Content-Length: 5\r\n\r\n{\"prompt\":\"hi\",\"max_tokens\":2}",
                   400, "Content-Length");
    expect_refusal(port, "Transfer-Encoding xchunked",
                   "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n"
                   "5\r\nhello\r\n0\r\n\r\n",
                   501, "xchunked");
    expect_refusal(port, "Transfer-Encoding gzip, chunked",
                   "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked"
                   "\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                   501, "gzip");
    expect_refusal(port, "Transfer-Encoding with Content-Length",
                   "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                   "Content-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                   400, "Content-Length");
    expect_refusal(port, "HTTP/1.1 without Host", "GET /v1/models HTTP/1.1\r\n\r\n", 400, "Host");
    /* HTTP/1.0 needs no Host */
    CHECK(request(port, 6, "GET /health HTTP/1.0\r\n\r\n", NULL) == 200);
    /* a well-formed chunked request still works */
    CHECK(
        request(port, 6,
                "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                "Connection: close\r\n\r\n1e\r\n{\"prompt\":\"hi\",\"max_tokens\":2}\r\n0\r\n\r\n",
                NULL) == 200);

    /* chunked past the 64 KiB cap: 413 as soon as the cap passes, the connection closed;
     * the client sends until it sees the answer */
    int fd = dial(port, 6, 0);
    puts_(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    static char chunk[16384 + 16];
    int hl = snprintf(chunk, sizeof(chunk), "%x\r\n", 16384);
    memset(chunk + hl, 'a', 16384);
    memcpy(chunk + hl + 16384, "\r\n", 2);
    size_t sent = 0;
    double t0 = fake_now();
    while (sent < (64u << 20) && fake_now() - t0 < 10) {
        struct pollfd p = {.fd = fd, .events = POLLIN | POLLOUT};
        if (poll(&p, 1, 1000) <= 0) continue;
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) break;
        ssize_t w = send(fd, chunk, (size_t)hl + 16386, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN) break;
        if (w > 0) sent += (size_t)w;
    }
    bool closed;
    char *r = slurp_until_close(fd, 3, &closed);
    CHECK_MSG(status_of(r) == 413 && strstr(r, "--max-body-size") && closed,
              "chunked over the cap: %.300s", r);
    CHECK_MSG(sent < (8u << 20), "chunked over a 64 KiB cap: %zu bytes read before the 413", sent);
    free(r);
    close(fd);

    /* a chunk line longer than MHD's connection buffer: MHD answers it itself (0.9.75 cannot be
     * told otherwise); the answer is counted like the server's own */
    char *m0 = cllm_server_metrics_text(s);
    fd = dial(port, 6, 0);
    puts_(fd, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;");
    static char ext[200 << 10];
    memset(ext, 'e', sizeof(ext));
    put(fd, ext, sizeof(ext));
    r = slurp_until_close(fd, 3, &closed);
    long st = status_of(r);
    CHECK_MSG(st >= 400 && closed, "200 KB chunk extension: %.200s", r);
    char needle[32];
    snprintf(needle, sizeof(needle), "code=\"%ld\"} ", st);
    double after = metric(s, needle), before = metric_in(m0, needle);
    free(m0);
    CHECK_MSG(after == before + 1, "the %ld for the chunk extension is not counted (%.0f -> %.0f)",
              st, before, after);
    free(r);
    close(fd);

    /* junk on the request line holds no slot: closed at once or by the keep-alive timeout */
    fd = dial(port, 6, 0);
    put(fd, "\0\1\2 junk here\r\n\r\n", 18);
    t0 = fake_now();
    r = slurp_until_close(fd, 4, &closed);
    CHECK_MSG(closed && fake_now() - t0 < 3, "junk request line: closed %d after %.1f s", closed,
              fake_now() - t0);
    free(r);
    close(fd);

    /* CORS with the wildcard: no credentials */
    request(port, 6,
            "GET /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: http://a.example\r\nConnection: "
            "close\r\n\r\n",
            &r);
    CHECK_MSG(strcasestr(r, "Access-Control-Allow-Origin: *") &&
                  !strcasestr(r, "Access-Control-Allow-Credentials"),
              "wildcard CORS:\n%.400s", r);
    free(r);
    cllm_server_stop(s);

    o.allowed_origins = "https://app.example";
    s = start(f, &o);
    if (!s) return;
    request(cllm_server_port(s), 6,
            "GET /v1/models HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example\r\nConnection: "
            "close\r\n\r\n",
            &r);
    CHECK_MSG(strcasestr(r, "Access-Control-Allow-Origin: https://app.example") &&
                  strcasestr(r, "Access-Control-Allow-Credentials: true"),
              "named-origin CORS:\n%.400s", r);
    free(r);
    cllm_server_stop(s);
}

/* ---- item 6: a stream nobody reads ---- */

/* The client asks for a long stream (8 samples with logprobs: ~1 MB of SSE over 4 s), with a
 * small receive buffer, and never reads. With --send-timeout 1 the engine request is cancelled
 * once the socket has taken no byte for 1 s, long before the script ends; a reading client
 * beside it finishes normally. */
static void test_send_timeout(fake_engine *f) {
    cllm_server_opts o;
    cllm_server_opts_defaults(&o);
    o.send_timeout_s = 1;
    cllm_server *s = start(f, &o);
    if (!s) return;
    int port = cllm_server_port(s);
    pthread_mutex_lock(&f->mu);
    uint64_t c0 = f->cancels;
    pthread_mutex_unlock(&f->mu);
    static const char body[] = "{\"prompt\":\"SCRIPT=long\",\"stream\":true,\"n\":8,\"logprobs\":5,"
                               "\"max_tokens\":300}";
    char req[512];
    snprintf(req, sizeof(req),
             "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             strlen(body), body);
    int fd = dial(port, 7, 2048);
    puts_(fd, req);
    double t0 = fake_now();
    while (cllm_server_in_flight(s) == 0 && fake_now() - t0 < 2) usleep(5000);
    while (cllm_server_in_flight(s) > 0 && fake_now() - t0 < 8) usleep(20 * 1000);
    double dt = fake_now() - t0;
    fprintf(stderr, "  never-read stream: cancelled after %.2f s\n", dt);
    pthread_mutex_lock(&f->mu);
    uint64_t c1 = f->cancels;
    pthread_mutex_unlock(&f->mu);
    CHECK_MSG(c1 == c0 + 1 && dt < 3.5,
              "non-reading stream: %llu cancel(s), in flight until %.2f s (the script runs 4.2 s)",
              (unsigned long long)(c1 - c0), dt);
    CHECK_MSG(metric(s, "reason=\"send_timeout\"} ") == 1, "send_timeout count %.0f",
              metric(s, "reason=\"send_timeout\"} "));
    CHECK_MSG(metric(s, "cllm_requests_cancelled_on_disconnect_total{model_name=\"tiny\","
                        "engine=\"0\"} ") == 1,
              "not counted as a disconnect");
    bool closed;
    char *rest = slurp_until_close(fd, 2, &closed);
    CHECK_MSG(closed && !strstr(rest, "[DONE]"),
              "the stalled stream's connection: closed %d, %zu bytes buffered", closed,
              strlen(rest));
    free(rest);
    close(fd);
    cllm_server_stop(s);
}

int main(void) {
    char tokdir[512];
    snprintf(tokdir, sizeof(tokdir), "%s/models/tiny", test_src());
    fake_engine f;
    if (fake_start(&f, tokdir)) return 1;
    test_per_ip(&f);
    test_deadlines(&f);
    test_framing(&f);
    test_send_timeout(&f);
    fake_stop(&f);
    return test_report("test_server_hostile");
}
