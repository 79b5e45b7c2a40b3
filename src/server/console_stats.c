/* /console/stats: one small JSON object the dashboard polls every 2 s. It reads the same sources
 * as /metrics (the engine's stats snapshot and the server's metrics counters), adds latency
 * percentiles of the requests that finished in the last SRV_CON_WINDOW_S seconds (from the
 * console's request ring) and process/host CPU and memory from /proc.
 *
 * Counters are cumulative; the page turns them into rates from two samples, so the endpoint
 * keeps no per-client state and any number of dashboards can poll it. Cost is a few mutex
 * sections, three small /proc reads and a sort of the window's latencies (measured in
 * tests/server/console_browser.sh's notes: well under 1 ms at 64 concurrent streams). */
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

/* Nearest-rank percentiles p50/p95/p99 of v[0..n) in seconds, as {"p50":ms,...} or null. */
static void pct_out(srv_buf *b, const char *name, double *v, int n) {
    if (n <= 0) {
        srv_buf_printf(b, ",\"%s\":null", name);
        return;
    }
    qsort(v, (size_t)n, sizeof(double), cmp_dbl);
    static const double ps[3] = {0.50, 0.95, 0.99};
    double q[3];
    for (int i = 0; i < 3; i++) {
        int k = (int)(ps[i] * n + 0.999999) - 1;
        q[i] = v[k < 0 ? 0 : k >= n ? n - 1 : k] * 1e3;
    }
    srv_buf_printf(b, ",\"%s\":{\"n\":%d,\"p50\":%.3f,\"p95\":%.3f,\"p99\":%.3f}", name, n, q[0],
                   q[1], q[2]);
}

/* The window's latencies. ITL is each request's mean gap between output tokens (TPOT). */
static void window_out(srv_buf *b, srv_console *c, double now) {
    int nt = 0, ni = 0, ne = 0, cap = 0;
    double *ttft = NULL, *itl = NULL, *e2e = NULL;
    pthread_mutex_lock(&c->mu);
    uint64_t last = c->last_seq, oldest = last > (uint64_t)c->cap ? last - (uint64_t)c->cap + 1 : 1;
    for (uint64_t q = last; q >= oldest && q > 0; q--) {
        if (now - c->ring[(q - 1) % (uint64_t)c->cap].t_mono > SRV_CON_WINDOW_S) break;
        cap++;
    }
    if (cap) {
        ttft = malloc(sizeof(double) * (size_t)cap * 3);
        itl = ttft ? ttft + cap : NULL;
        e2e = ttft ? ttft + 2 * cap : NULL;
    }
    for (uint64_t q = last; ttft && q >= oldest && q > last - (uint64_t)cap; q--) {
        const srv_con_entry *e = &c->ring[(q - 1) % (uint64_t)c->cap];
        if (!e->gen || e->status != 200) continue;
        if (e->ttft_s >= 0) ttft[nt++] = e->ttft_s;
        if (strcmp(e->finish, "cancelled")) e2e[ne++] = e->total_s;
        if (e->ttft_s >= 0 && e->output > e->n && e->n > 0)
            itl[ni++] = (e->total_s - e->ttft_s) / ((double)e->output / e->n - 1);
    }
    pthread_mutex_unlock(&c->mu);
    srv_buf_printf(b, ",\"window_s\":%g,\"window_requests\":%d", SRV_CON_WINDOW_S, cap);
    pct_out(b, "ttft_ms", ttft, nt);
    pct_out(b, "itl_ms", itl, ni);
    pct_out(b, "e2e_ms", e2e, ne);
    free(ttft);
}

char *srv_console_stats_json(cllm_server *s, size_t *len) {
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
                   ",\"mem_total_bytes\":%.0f,\"mem_available_bytes\":%.0f}",
                   h.proc_cpu_s, h.proc_rss, h.proc_threads, h.cpu_busy, h.cpu_total, h.ncpu,
                   h.mem_total, h.mem_avail);
    if (b.oom) {
        srv_buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.p;
}
