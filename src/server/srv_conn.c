/* Connection guard: the limits against hostile clients that libmicrohttpd 0.9.75 (Debian 12)
 * does not enforce, built around it. Called by server.c (MHD callbacks, access handler) and by
 * its housekeeping thread.
 *
 * MHD's only clock is an inactivity timeout that every byte resets, so a client that dribbles a
 * header byte a second holds a connection slot forever. Each connection here (MHD's socket
 * context, MHD_OPTION_NOTIFY_CONNECTION) records the phase of its current request and when it
 * began; every 0.25 s the housekeeping thread shuts down the socket of a connection past its
 * deadline (without a response, as nginx does for these), MHD sees the socket fail and closes
 * it, and cllm_http_deadline_closes_total{reason} counts it:
 *   header  the request head not complete --client-header-timeout after the connection opened
 *           or the previous response ended
 *   body    the body not complete --client-body-timeout after the head
 *   send    a stream whose socket accepted no byte for --send-timeout while its engine request
 *           kept generating (the client stopped reading): cancelled as a disconnect
 * Shutting down an fd MHD owns is safe: MHD calls the CLOSED notification, which takes
 * s->conn_mu, before it closes the socket; a stream's fd is only touched under r->mu while
 * !r->conn_gone (on_completed sets it before MHD closes anything).
 *
 * Also here: the request-head checks MHD does not make (duplicate Content-Length, a
 * Transfer-Encoding other than chunked, HTTP/1.1 without Host), and the raw 413 for a chunked
 * body that passes --max-body-size while it is read (MHD refuses to queue a response then), and
 * the lingering close after such early answers (srv_conn_linger). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "server/srv_int.h"

void srv_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code) {
    cllm_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        srv_conn *k = calloc(1, sizeof(*k));
        if (!k) return; /* unguarded: only MHD's inactivity timeout applies to it */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        k->fd = ci ? ci->connect_fd : -1;
        k->phase = SRV_CONN_HEAD;
        k->t_phase = srv_now();
        pthread_mutex_lock(&s->conn_mu);
        k->next = s->conns;
        if (s->conns) s->conns->prev = k;
        s->conns = k;
        pthread_mutex_unlock(&s->conn_mu);
        *socket_context = k;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        srv_conn *k = *socket_context;
        pthread_mutex_lock(&s->conn_mu);
        /* MHD takes the socket out of its epoll set and closes it after this call: a dup keeps
         * the socket open (no reset for the unread body), MHD's close only drops its fd */
        if (k->linger && !k->cut && k->fd >= 0 && s->n_lingers < SRV_LINGER_MAX) {
            int d = fcntl(k->fd, F_DUPFD_CLOEXEC, 0);
            if (d >= 0) {
                shutdown(d, SHUT_WR); /* the answer is out: FIN after it */
                s->lingers[s->n_lingers++] = (srv_linger){d, srv_now()};
            }
        }
        if (k->prev)
            k->prev->next = k->next;
        else
            s->conns = k->next;
        if (k->next) k->next->prev = k->prev;
        pthread_mutex_unlock(&s->conn_mu);
        free(k);
        *socket_context = NULL;
    }
}

/* The guard of MHD connection c; NULL where srv_conn_notify could not make one. */
static srv_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

bool srv_conn_enter(cllm_server *s, struct MHD_Connection *c, srv_conn_phase p) {
    srv_conn *k = conn_of(c);
    if (!k) return true;
    pthread_mutex_lock(&s->conn_mu);
    bool ok = !k->cut;
    if (ok && k->phase != p) {
        k->phase = p;
        k->t_phase = srv_now();
    }
    pthread_mutex_unlock(&s->conn_mu);
    return ok;
}

void srv_conn_linger(cllm_server *s, struct MHD_Connection *c) {
    srv_conn *k = conn_of(c);
    if (!k) return;
    pthread_mutex_lock(&s->conn_mu);
    k->linger = true;
    pthread_mutex_unlock(&s->conn_mu);
}

/* Reads and drops what lingering sockets received (at most SRV_LINGER_READ a socket a tick: the
 * client's sends wait for the next tick beyond that), and closes those the client closed or
 * reset, and those past SRV_LINGER_S, as Apache's lingering close does (2 s there too). */
#define SRV_LINGER_S    2.0
#define SRV_LINGER_READ (8u << 20)
static void drain_lingers(cllm_server *s, double now) {
    /* read without conn_mu (a stall here must not hold up MHD's connection notifications):
     * only this thread removes entries, others only append, so the first n stay in place */
    srv_linger l[SRV_LINGER_MAX];
    pthread_mutex_lock(&s->conn_mu);
    int n = s->n_lingers;
    memcpy(l, s->lingers, (size_t)n * sizeof(*l));
    pthread_mutex_unlock(&s->conn_mu);
    bool done[SRV_LINGER_MAX];
    char sink[16384]; /* what the client still sends: dropped unread */
    for (int i = 0; i < n; i++) {
        done[i] = now - l[i].t0 > SRV_LINGER_S;
        for (size_t got = 0; !done[i] && got < SRV_LINGER_READ;) {
            ssize_t r = recv(l[i].fd, sink, sizeof(sink), MSG_DONTWAIT);
            if (r > 0) {
                got += (size_t)r;
                continue;
            }
            if (r < 0 && errno == EINTR) continue;
            /* 0: the client closed; an error other than "nothing now": it reset */
            done[i] = r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
            break;
        }
    }
    pthread_mutex_lock(&s->conn_mu);
    for (int i = n - 1; i >= 0; i--) /* from the end: a moved entry was looked at already */
        if (done[i]) {
            close(s->lingers[i].fd);
            s->lingers[i] = s->lingers[--s->n_lingers];
        }
    pthread_mutex_unlock(&s->conn_mu);
}

void srv_conn_linger_free(cllm_server *s) {
    pthread_mutex_lock(&s->conn_mu);
    for (int i = 0; i < s->n_lingers; i++) close(s->lingers[i].fd);
    s->n_lingers = 0;
    pthread_mutex_unlock(&s->conn_mu);
}

static void count_closes(cllm_server *s, int reason, int n, int cancelled) {
    if (!n) return;
    pthread_mutex_lock(&s->m.mu);
    s->m.deadline_closes[reason] += (uint64_t)n;
    s->m.requests_cancelled_disconnect += (uint64_t)cancelled;
    pthread_mutex_unlock(&s->m.mu);
}

/* Streams the client stopped reading: the engine's events pile up in r->head while MHD, its
 * socket full, has not asked the stream reader for bytes (r->t_drain) for --send-timeout. */
static void watch_stalls(cllm_server *s, double now) {
    uint64_t ids[64];
    int n = 0, stalled = 0;
    pthread_mutex_lock(&s->mu);
    for (srv_req *r = s->reg_head; r && n < 64; r = r->reg_next) {
        pthread_mutex_lock(&r->mu);
        if (r->gen.stream && r->submitted && !r->suspended && !r->conn_gone &&
            !r->watch_cancelled && r->head && now - r->t_drain > s->o.send_timeout_s) {
            const union MHD_ConnectionInfo *ci =
                MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
            if (ci) shutdown(ci->connect_fd, SHUT_RDWR);
            r->watch_cancelled = true;
            stalled++;
            for (int k = 0; k < r->n_subs && n < 64; k++)
                if (r->subs[k].submitted) ids[n++] = r->subs[k].id;
        }
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++) {
        s->ops.cancel(s->ops.ctx, ids[i]);
        LOG_INFO("engine request %llu cancelled: its client accepted no byte for %.0f s "
                 "(--send-timeout)",
                 (unsigned long long)ids[i], s->o.send_timeout_s);
    }
    count_closes(s, SRV_DL_SEND, stalled, stalled);
}

void srv_conn_watch(cllm_server *s) {
    double now = srv_now();
    int cut[2] = {0, 0};
    pthread_mutex_lock(&s->conn_mu);
    for (srv_conn *k = s->conns; k; k = k->next) {
        if (k->cut || k->fd < 0 || k->phase == SRV_CONN_BUSY) continue;
        int which = k->phase == SRV_CONN_HEAD ? 0 : 1;
        double lim = which == 0 ? s->o.header_timeout_s : s->o.body_timeout_s;
        if (lim <= 0 || now - k->t_phase <= lim) continue;
        shutdown(k->fd, SHUT_RDWR);
        k->cut = true;
        cut[which]++;
    }
    pthread_mutex_unlock(&s->conn_mu);
    if (cut[0] || cut[1])
        LOG_INFO("closed %d connection(s) past --client-header-timeout %.0f s, %d past "
                 "--client-body-timeout %.0f s",
                 cut[0], s->o.header_timeout_s, cut[1], s->o.body_timeout_s);
    count_closes(s, SRV_DL_HEADER, cut[0], 0);
    count_closes(s, SRV_DL_BODY, cut[1], 0);
    if (s->o.send_timeout_s > 0) watch_stalls(s, now);
    drain_lingers(s, now);
}

/* ---- request-head checks ---- */

typedef struct head_count {
    int n_len, n_te, n_host;
    const char *te;
} head_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
    (void)kind;
    head_count *h = cls;
    if (!strcasecmp(key, "Content-Length")) {
        h->n_len++;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        h->n_te++;
        h->te = value;
    } else if (!strcasecmp(key, "Host")) {
        h->n_host++;
    }
    return MHD_YES;
}

/* value is exactly the token `chunked` (any case), optional whitespace around it */
static bool is_chunked(const char *v) {
    while (*v == ' ' || *v == '\t') v++;
    if (strncasecmp(v, "chunked", 7)) return false;
    for (v += 7; *v == ' ' || *v == '\t'; v++) {
    }
    return !*v;
}

unsigned srv_conn_check_head(struct MHD_Connection *c, const char *version, char *msg, size_t cap) {
    head_count h = {0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &h);
    /* framing first: two readings of where the body ends is request smuggling behind a proxy
     * that picks the other one (RFC 9112 6.3), so refuse rather than choose */
    if (h.n_len > 1) {
        snprintf(msg, cap, "more than one Content-Length header");
        return 400;
    }
    if (h.n_te && h.n_len) {
        snprintf(msg, cap, "both Transfer-Encoding and Content-Length");
        return 400;
    }
    if (h.n_te > 1 || (h.n_te && !is_chunked(h.te))) {
        snprintf(msg, cap, "Transfer-Encoding '%.60s' is not supported (only 'chunked')",
                 h.n_te > 1 ? "(several headers)" : h.te);
        return 501;
    }
    if (h.n_host > 1 || (!h.n_host && version && !strcmp(version, "HTTP/1.1"))) {
        snprintf(msg, cap, "%s",
                 h.n_host ? "more than one Host header"
                          : "an HTTP/1.1 request needs a Host header");
        return 400;
    }
    return 0;
}

void srv_conn_write_raw(struct MHD_Connection *c, unsigned status, const char *json) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci || !json) return;
    srv_buf b = {0};
    srv_buf_printf(&b,
                   "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                   "Connection: close\r\n\r\n%s",
                   status, status == 413 ? "Content Too Large" : "Bad Request", strlen(json), json);
    /* the socket is non-blocking and has written nothing of this request: a few hundred bytes
     * go out whole; what does not is lost with the connection MHD closes next */
    if (!b.oom) (void)send(ci->connect_fd, b.p, b.len, MSG_NOSIGNAL);
    srv_buf_free(&b);
}
