/* /console/stats: one small JSON object the dashboard polls every 2 s. It reads the same sources
 * as /metrics (the engine's stats snapshot and the server's metrics counters), adds latency
 * percentiles of the requests that finished in the last SRV_CON_WINDOW_S seconds (from the
 * console's request ring) and process/host CPU and memory from /proc.
 *
 * Counters are cumulative; the page turns them into rates from two samples, so the endpoint
 * keeps no per-client state and any number of dashboards can poll it. Cost is a few mutex
 * sections, three small /proc reads and a sort of the window's latencies (measured in
 * tests/server/console_browser.sh's notes: well under 1 ms at 64 concurrent streams). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/console_int.h"

/* Reads a small /proc file into buf (NUL-terminated). Returns bytes read, 0 on failure. */
static size_t read_small(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return n;
}

typedef struct host_probe {
    double proc_cpu_s; /* user + system CPU seconds of this process */
    double proc_rss;   /* bytes */
    int proc_threads;
    unsigned long long cpu_busy, cpu_total; /* /proc/stat jiffies, all CPUs */
    double mem_total, mem_avail;            /* bytes */
    long ncpu;
} host_probe;

static void probe_host(host_probe *h) {
    memset(h, 0, sizeof(*h));
    char buf[4096];
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    h->ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (read_small("/proc/self/stat", buf, sizeof(buf))) {
        /* fields after the ")" that closes comm (which may hold spaces): state is field 3 */
        const char *p = strrchr(buf, ')');
        unsigned long long ut = 0, st = 0;
        long nthr = 0;
        if (p &&
            sscanf(p + 2,
                   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %ld", &ut,
                   &st, &nthr) == 3 &&
            tck > 0) {
            h->proc_cpu_s = (double)(ut + st) / (double)tck;
            h->proc_threads = (int)nthr;
        }
    }
    if (read_small("/proc/self/statm", buf, sizeof(buf))) {
        unsigned long long size = 0, res = 0;
        if (sscanf(buf, "%llu %llu", &size, &res) == 2) h->proc_rss = (double)res * (double)page;
    }
    if (read_small("/proc/stat", buf, sizeof(buf))) {
        unsigned long long v[10] = {0};
        if (sscanf(buf, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
                   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]) >= 4) {
            /* guest time (8, 9) is already inside user/nice */
            for (int i = 0; i < 8; i++) h->cpu_total += v[i];
            h->cpu_busy = h->cpu_total - v[3] - v[4]; /* minus idle and iowait */
        }
    }
    if (read_small("/proc/meminfo", buf, sizeof(buf))) {
        const char *t = strstr(buf, "MemTotal:"), *a = strstr(buf, "MemAvailable:");
        unsigned long long kb = 0;
        if (t && sscanf(t + 9, "%llu", &kb) == 1) h->mem_total = (double)kb * 1024;
        if (a && sscanf(a + 13, "%llu", &kb) == 1) h->mem_avail = (double)kb * 1024;
    }
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentiles p50/p95/p99 of v[0..n) seconds into q[] ms (sorts v). */
static void pcts(double *v, int n, float q[3]) {
    static const double ps[3] = {0.50, 0.95, 0.99};
    if (n <= 0) {
        for (int i = 0; i < 3; i++) q[i] = NAN;
        return;
    }
    qsort(v, (size_t)n, sizeof(double), cmp_dbl);
    for (int i = 0; i < 3; i++) {
        int k = (int)(ps[i] * n + 0.999999) - 1;
        q[i] = (float)(v[k < 0 ? 0 : k >= n ? n - 1 : k] * 1e3);
    }
}

/* The latencies of the requests that finished in the last SRV_CON_WINDOW_S seconds: ttft, itl,
 * e2e percentiles (ms) and how many of each; returns the number of requests in the window.
 * ITL is each request's mean gap between output tokens (TPOT). */
static int window_pcts(srv_console *c, double now, float q[3][3], int cnt[3]) {
    int nt = 0, ni = 0, ne = 0, cap = 0;
    double *ttft = NULL, *itl = NULL, *e2e = NULL;
    pthread_mutex_lock(&c->mu);
    uint64_t last = c->last_seq, oldest = last > (uint64_t)c->cap ? last - (uint64_t)c->cap + 1 : 1;
    for (uint64_t k = last; k >= oldest && k > 0; k--) {
        if (now - c->ring[(k - 1) % (uint64_t)c->cap].t_mono > SRV_CON_WINDOW_S) break;
        cap++;
    }
    if (cap) {
        ttft = malloc(sizeof(double) * (size_t)cap * 3);
        itl = ttft ? ttft + cap : NULL;
        e2e = ttft ? ttft + 2 * cap : NULL;
    }
    for (uint64_t k = last; ttft && k >= oldest && k > last - (uint64_t)cap; k--) {
        const srv_con_entry *e = &c->ring[(k - 1) % (uint64_t)c->cap];
        if (!e->gen || e->status != 200) continue;
        if (e->ttft_s >= 0) ttft[nt++] = e->ttft_s;
        if (strcmp(e->finish, "cancelled")) e2e[ne++] = e->total_s;
        if (e->ttft_s >= 0 && e->output > e->n && e->n > 0)
            itl[ni++] = (e->total_s - e->ttft_s) / ((double)e->output / e->n - 1);
    }
    pthread_mutex_unlock(&c->mu);
    pcts(ttft, nt, q[0]);
    pcts(itl, ni, q[1]);
    pcts(e2e, ne, q[2]);
    cnt[0] = nt, cnt[1] = ni, cnt[2] = ne;
    free(ttft);
    return cap;
}

static void window_out(srv_buf *b, srv_console *c, double now) {
    float q[3][3];
    int cnt[3];
    int nreq = window_pcts(c, now, q, cnt);
    static const char *const names[3] = {"ttft_ms", "itl_ms", "e2e_ms"};
    srv_buf_printf(b, ",\"window_s\":%g,\"window_requests\":%d", SRV_CON_WINDOW_S, nreq);
    for (int i = 0; i < 3; i++) {
        if (!cnt[i])
            srv_buf_printf(b, ",\"%s\":null", names[i]);
        else
            srv_buf_printf(b, ",\"%s\":{\"n\":%d,\"p50\":%.3f,\"p95\":%.3f,\"p99\":%.3f}", names[i],
                           cnt[i], q[i][0], q[i][1], q[i][2]);
    }
}

/* ---- the history ring ---- */

bool srv_con_hist_init(srv_con_hist *h, int cap) {
    memset(h, 0, sizeof(*h));
    h->s = calloc((size_t)cap, sizeof(*h->s));
    if (!h->s) return false;
    h->cap = cap;
    return true;
}

void srv_con_hist_free(srv_con_hist *h) {
    free(h->s);
    memset(h, 0, sizeof(*h));
}

void srv_con_hist_push(srv_con_hist *h, const srv_con_sample *x) {
    if (!h->cap) return;
    h->s[h->n % (uint64_t)h->cap] = *x;
    h->n++;
}

/* One column: the value of each sample k in [from, to), via get; NAN prints as null. */
typedef double (*hist_get)(const srv_con_sample *x, const srv_con_sample *prev);
static double get_t(const srv_con_sample *x, const srv_con_sample *p);
static void column(srv_buf *b, const srv_con_hist *h, uint64_t from, uint64_t to, uint64_t oldest,
                   const char *name, hist_get get) {
    srv_buf_printf(b, ",\"%s\":[", name);
    for (uint64_t k = from; k < to; k++) {
        const srv_con_sample *x = &h->s[k % (uint64_t)h->cap];
        const srv_con_sample *p = k > oldest ? &h->s[(k - 1) % (uint64_t)h->cap] : NULL;
        double v = get(x, p);
        if (k > from) srv_buf_add(b, ",", 1);
        if (isfinite(v))
            srv_buf_printf(b, get == get_t ? "%.2f" : "%.4g", v); /* unix time needs 12 digits */
        else
            srv_buf_add(b, "null", 4);
    }
    srv_buf_add(b, "]", 1);
}

#define RATE(field)                                                                                \
    static double get_##field(const srv_con_sample *x, const srv_con_sample *p) {                  \
        return p && x->t > p->t ? (x->field - p->field) / (x->t - p->t) : NAN;                     \
    }
#define DELTA(field)                                                                               \
    static double get_##field(const srv_con_sample *x, const srv_con_sample *p) {                  \
        return p ? x->field - p->field : NAN;                                                      \
    }
#define GAUGE(field)                                                                               \
    static double get_##field(const srv_con_sample *x, const srv_con_sample *p) {                  \
        (void)p;                                                                                   \
        return x->field;                                                                           \
    }
#define PCT(arr, i)                                                                                \
    static double get_##arr##i(const srv_con_sample *x, const srv_con_sample *p) {                 \
        (void)p;                                                                                   \
        return x->arr[i];                                                                          \
    }
GAUGE(t)
RATE(prompt_tokens)
RATE(gen_tokens)
DELTA(prefix_q)
DELTA(prefix_h)
DELTA(http_total)
DELTA(http_5xx)
DELTA(http_429)
DELTA(preemptions)
RATE(spec_draft)
/* share of the second's draft tokens the target model accepted; NAN without drafts */
static double get_spec_acc(const srv_con_sample *x, const srv_con_sample *p) {
    double d = p ? x->spec_draft - p->spec_draft : 0;
    return d > 0 ? 100 * (x->spec_accepted - p->spec_accepted) / d : NAN;
}
GAUGE(running)
GAUGE(in_flight)
GAUGE(waiting)
GAUGE(kv_pct)
GAUGE(slots_pct)
GAUGE(proc_cpu_pct)
GAUGE(host_cpu_pct)
GAUGE(host_mem_pct)
PCT(ttft, 0)
PCT(ttft, 1)
PCT(ttft, 2)
PCT(itl, 0)
PCT(itl, 1)
PCT(itl, 2)
PCT(e2e, 0)
PCT(e2e, 1)
PCT(e2e, 2)

static const struct {
    const char *name;
    hist_get get;
} hist_cols[] = {
    {"t", get_t},
    {"ptps", get_prompt_tokens},
    {"gtps", get_gen_tokens},
    {"running", get_running},
    {"inflight", get_in_flight},
    {"waiting", get_waiting},
    {"kv", get_kv_pct},
    {"slots", get_slots_pct},
    {"pcpu", get_proc_cpu_pct},
    {"hcpu", get_host_cpu_pct},
    {"hmem", get_host_mem_pct},
    {"pq", get_prefix_q},
    {"ph", get_prefix_h},
    {"req", get_http_total},
    {"e5xx", get_http_5xx},
    {"r429", get_http_429},
    {"preempt", get_preemptions},
    {"sdraft", get_spec_draft},
    {"sacc", get_spec_acc},
    {"ttft50", get_ttft0},
    {"ttft95", get_ttft1},
    {"ttft99", get_ttft2},
    {"itl50", get_itl0},
    {"itl95", get_itl1},
    {"itl99", get_itl2},
    {"e2e50", get_e2e0},
    {"e2e95", get_e2e1},
    {"e2e99", get_e2e2},
};

void srv_con_hist_json(const srv_con_hist *h, double since, srv_buf *b) {
    uint64_t oldest = h->n > (uint64_t)h->cap ? h->n - (uint64_t)h->cap : 0, from = h->n;
    /* samples are in time order: walk back while newer than since */
    while (from > oldest && h->s[(from - 1) % (uint64_t)h->cap].t > since) from--;
    srv_buf_printf(b, ",\"history\":{\"step_s\":1,\"n\":%llu", (unsigned long long)(h->n - from));
    for (size_t i = 0; i < sizeof(hist_cols) / sizeof(*hist_cols); i++)
        column(b, h, from, h->n, oldest, hist_cols[i].name, hist_cols[i].get);
    srv_buf_add(b, "}", 1);
}

/* ---- sampling (the housekeeping thread, every 0.25 s) ---- */

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float pct_of(double a, double b) {
    return b > 0 ? (float)(100 * a / b) : NAN;
}

static void bucket_start(srv_con_bucket *k, double now, const host_probe *h) {
    memset(k, 0, sizeof(*k));
    k->t0 = now;
    k->proc_cpu_s = h->proc_cpu_s;
    k->cpu_busy = h->cpu_busy;
    k->cpu_total = h->cpu_total;
}

static void bucket_close(cllm_server *s, srv_console *c, const cllm_engine_stats *st, double now) {
    srv_con_sample x;
    memset(&x, 0, sizeof(x));
    host_probe h;
    probe_host(&h);
    float q[3][3];
    int cnt[3];
    window_pcts(c, now, q, cnt);
    memcpy(x.ttft, q[0], sizeof(x.ttft));
    memcpy(x.itl, q[1], sizeof(x.itl));
    memcpy(x.e2e, q[2], sizeof(x.e2e));
    x.t = wall_now();
    x.prompt_tokens = (double)st->prompt_tokens;
    x.gen_tokens = (double)st->generation_tokens;
    x.prefix_q = (double)st->prefix_queries_tokens;
    x.prefix_h = (double)st->prefix_hits_tokens;
    x.preemptions = (double)st->preemptions;
    x.spec_draft = (double)st->spec_draft_tokens;
    x.spec_accepted = (double)st->spec_accepted_tokens;
    srv_metrics *m = &s->m;
    pthread_mutex_lock(&m->mu);
    for (int i = 100; i < 600; i++) x.http_total += (double)m->http[i];
    for (int i = 500; i < 600; i++) x.http_5xx += (double)m->http[i];
    x.http_429 = (double)m->http[429];
    pthread_mutex_unlock(&m->mu);
    pthread_mutex_lock(&s->mu);
    x.in_flight = (float)s->in_flight_peak;
    s->in_flight_peak = s->in_flight;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&c->hmu);
    srv_con_bucket *k = &c->bucket;
    x.running = k->running, x.waiting = k->waiting;
    x.kv_pct = k->kv_pct, x.slots_pct = k->slots_pct;
    /* the first sample (the housekeeping thread's first look) has no CPU baseline, but its
     * counters are the base the next sample's rates start from */
    bool first = k->t0 <= 0;
    double dt = now - k->t0;
    x.proc_cpu_pct = !first && dt > 0 && h.ncpu > 0
                         ? (float)(100 * (h.proc_cpu_s - k->proc_cpu_s) / dt / (double)h.ncpu)
                         : NAN;
    x.host_cpu_pct =
        first ? NAN
              : pct_of((double)(h.cpu_busy - k->cpu_busy), (double)(h.cpu_total - k->cpu_total));
    x.host_mem_pct = h.mem_total > 0 ? (float)(100 * (1 - h.mem_avail / h.mem_total)) : NAN;
    srv_con_hist_push(&c->hist, &x);
    bucket_start(k, now, &h);
    pthread_mutex_unlock(&c->hmu);
}

void srv_console_tick(cllm_server *s) {
    srv_console *c = s->console;
    if (!c || !c->hist.cap) return;
    cllm_engine_stats st;
    memset(&st, 0, sizeof(st));
    if (s->ops.stats) s->ops.stats(s->ops.ctx, &st);
    double now = srv_now();
    pthread_mutex_lock(&c->hmu);
    srv_con_bucket *k = &c->bucket;
    float kv = pct_of((double)st.kv_blocks_used, (double)st.kv_blocks_total);
    float sl = pct_of((double)st.state_slots_used, (double)st.state_slots_total);
    if (st.running > k->running) k->running = (float)st.running;
    if (st.waiting > k->waiting) k->waiting = (float)st.waiting;
    if (kv > k->kv_pct) k->kv_pct = kv;
    if (sl > k->slots_pct) k->slots_pct = sl;
    bool due = k->t0 <= 0 || now - k->t0 >= 1.0 - 0.05;
    pthread_mutex_unlock(&c->hmu);
    if (due) bucket_close(s, c, &st, now);
}

/* The samples after `since` (and the one before them, for rates), copied out under the lock
 * and formatted unlocked: formatting an hour takes tens of ms, which the housekeeping thread
 * must not wait for, and a page that polls with since= copies only a sample or two. */
static void history_out(srv_buf *b, const srv_con_hist *h, pthread_mutex_t *mu, double since) {
    pthread_mutex_lock(mu);
    uint64_t oldest = h->n > (uint64_t)h->cap ? h->n - (uint64_t)h->cap : 0, from = h->n;
    while (from > oldest && h->s[(from - 1) % (uint64_t)h->cap].t > since) from--;
    if (from > oldest) from--; /* the predecessor */
    srv_con_hist snap = {0};
    int cnt = (int)(h->n - from);
    if (srv_con_hist_init(&snap, cnt > 0 ? cnt : 1)) {
        for (uint64_t k = from; k < h->n; k++)
            srv_con_hist_push(&snap, &h->s[k % (uint64_t)h->cap]);
    } else {
        b->oom = true;
    }
    pthread_mutex_unlock(mu);
    if (snap.s) srv_con_hist_json(&snap, since, b);
    srv_con_hist_free(&snap);
}

static char *stats_json(cllm_server *s, double since, size_t *len) {
    cllm_engine_stats st;
    memset(&st, 0, sizeof(st));
    if (s->ops.stats) s->ops.stats(s->ops.ctx, &st);
    double now = srv_now();
    srv_buf b = {0};
    srv_buf_printf(&b, "{\"t\":%.3f,\"uptime_s\":%.0f", now, (double)(time(NULL) - s->started));
    srv_buf_printf(&b, ",\"ready\":%s,\"draining\":%s",
                   __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) ? "true" : "false",
                   __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE) ? "true" : "false");
    srv_buf_printf(&b,
                   ",\"running\":%d,\"waiting\":%d,\"kv_blocks_used\":%llu,\"kv_blocks_total\":%llu"
                   ",\"state_slots_used\":%d,\"state_slots_total\":%d"
                   ",\"prefix_queries_tokens\":%llu,\"prefix_hits_tokens\":%llu"
                   ",\"engine_prompt_tokens\":%llu,\"engine_generation_tokens\":%llu"
                   ",\"preemptions\":%llu",
                   st.running, st.waiting, (unsigned long long)st.kv_blocks_used,
                   (unsigned long long)st.kv_blocks_total, st.state_slots_used,
                   st.state_slots_total, (unsigned long long)st.prefix_queries_tokens,
                   (unsigned long long)st.prefix_hits_tokens, (unsigned long long)st.prompt_tokens,
                   (unsigned long long)st.generation_tokens, (unsigned long long)st.preemptions);
    srv_buf_printf(&b,
                   ",\"spec_k\":%d,\"spec_drafts\":%llu,\"spec_draft_tokens\":%llu"
                   ",\"spec_accepted_tokens\":%llu",
                   st.spec_k, (unsigned long long)st.spec_drafts,
                   (unsigned long long)st.spec_draft_tokens,
                   (unsigned long long)st.spec_accepted_tokens);
    srv_metrics *m = &s->m;
    pthread_mutex_lock(&m->mu);
    uint64_t h4 = 0, h5 = 0, rej = 0;
    for (int i = 400; i < 500; i++) h4 += m->http[i];
    for (int i = 500; i < 600; i++) h5 += m->http[i];
    for (int i = 0; i < SRV_REJ_COUNT; i++) rej += m->rejections[i];
    srv_buf_printf(&b,
                   ",\"prompt_tokens\":%llu,\"generation_tokens\":%llu,\"cached_tokens\":%llu"
                   ",\"http_200\":%llu,\"http_429\":%llu,\"http_4xx\":%llu,\"http_5xx\":%llu"
                   ",\"rejections\":%llu,\"cancelled_disconnect\":%llu"
                   ",\"finished\":{\"stop\":%llu,\"length\":%llu,\"abort\":%llu,\"error\":%llu}",
                   (unsigned long long)m->prompt_tokens, (unsigned long long)m->generation_tokens,
                   (unsigned long long)m->cached_tokens, (unsigned long long)m->http[200],
                   (unsigned long long)m->http[429], (unsigned long long)h4, (unsigned long long)h5,
                   (unsigned long long)rej, (unsigned long long)m->requests_cancelled_disconnect,
                   (unsigned long long)m->success[CLLM_FINISH_STOP],
                   (unsigned long long)m->success[CLLM_FINISH_LENGTH],
                   (unsigned long long)m->success[CLLM_FINISH_ABORT],
                   (unsigned long long)m->success[CLLM_FINISH_ERROR]);
    pthread_mutex_unlock(&m->mu);
    pthread_mutex_lock(&s->mu);
    int inflight = s->in_flight;
    pthread_mutex_unlock(&s->mu);
    srv_buf_printf(&b, ",\"in_flight\":%d", inflight);
    if (s->console) window_out(&b, s->console, now);
    host_probe h;
    probe_host(&h);
    srv_buf_printf(&b,
                   ",\"proc_cpu_s\":%.3f,\"proc_rss_bytes\":%.0f,\"proc_threads\":%d"
                   ",\"host_cpu_busy\":%llu,\"host_cpu_total\":%llu,\"ncpu\":%ld"
                   ",\"mem_total_bytes\":%.0f,\"mem_available_bytes\":%.0f",
                   h.proc_cpu_s, h.proc_rss, h.proc_threads, h.cpu_busy, h.cpu_total, h.ncpu,
                   h.mem_total, h.mem_avail);
    if (s->console && since >= 0) history_out(&b, &s->console->hist, &s->console->hmu, since);
    srv_buf_add(&b, "}", 1);
    if (b.oom) {
        srv_buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.p;
}

char *srv_console_stats_json(cllm_server *s, size_t *len) {
    return stats_json(s, -1, len);
}

char *srv_console_stats_since_json(cllm_server *s, double since, size_t *len) {
    return stats_json(s, since < 0 ? 0 : since, len);
}
