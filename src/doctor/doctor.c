/* `cllm doctor` checks; see doctor.h. */
#include "doctor/doctor.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "doctor/prom.h"
#include "base/http.h"

const char *dr_level_name(dr_level l) {
    switch (l) {
    case DR_OK:
        return "ok";
    case DR_WARN:
        return "warn";
    case DR_CRIT:
        return "critical";
    default:
        return "skip";
    }
}

void dr_opts_default(dr_opts *o) {
    memset(o, 0, sizeof(*o));
    o->window_s = 2;
    o->sustain_s = 30;
    o->interval_s = 1;
    o->warn_pct = 92, o->crit_pct = 95;
    o->err_warn_pct = 1, o->err_crit_pct = 5;
    o->mem_warn_pct = 10, o->mem_crit_pct = 5;
    o->timeout_s = 5;
    o->log_tail_bytes = 1 << 20;
}

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
}

static dr_check *add(dr_report *r, const char *name, dr_level l, double v, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static dr_check *add(dr_report *r, const char *name, dr_level l, double v, const char *fmt, ...) {
    if (r->n >= DR_MAX_CHECKS) return NULL;
    dr_check *c = &r->checks[r->n++];
    c->name = name, c->level = l, c->value = v;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->detail, sizeof(c->detail), fmt, ap);
    va_end(ap);
    if (l != DR_SKIP && l > r->overall) r->overall = l;
    return c;
}

static bool ci_has(const char *s, size_t n, const char *pat) {
    size_t pl = strlen(pat);
    for (size_t i = 0; i + pl <= n; i++)
        if (!strncasecmp(s + i, pat, pl)) return true;
    return false;
}

void dr_scan_log(const char *text, size_t n, long *errors, long *critical, char *last, size_t cap) {
    static const char *const crit[] = {
        "fatal", "panic", "out of memory", "segmentation fault", "oom-kill", "core dumped"};
    static const char *const err[] = {"error", "\"level\":\"error\"", "traceback", "exception"};
    *errors = *critical = 0;
    if (cap) last[0] = 0;
    const char *p = text, *end = text + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t ln = nl ? (size_t)(nl - p) : (size_t)(end - p);
        bool is_c = false, is_e = false;
        for (size_t i = 0; i < sizeof(crit) / sizeof(crit[0]); i++) is_c |= ci_has(p, ln, crit[i]);
        for (size_t i = 0; !is_c && i < sizeof(err) / sizeof(err[0]); i++)
            is_e |= ci_has(p, ln, err[i]);
        if (is_c) (*critical)++;
        if (is_e || is_c) {
            (*errors)++;
            if (cap) snprintf(last, cap, "%.*s", (int)(ln < 200 ? ln : 200), p);
        }
        p = nl ? nl + 1 : end;
    }
}

bool dr_parse_meminfo(const char *text, double *total_kb, double *avail_kb) {
    const char *t = strstr(text, "MemTotal:"), *a = strstr(text, "MemAvailable:");
    if (!t || !a) return false;
    *total_kb = strtod(t + 9, NULL);
    *avail_kb = strtod(a + 13, NULL);
    return *total_kb > 0;
}

static char *read_tail(const char *path, long max, size_t *n, char *why, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, cap, "%s", strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f), off = size > max ? size - max : 0;
    if (size <= 0) size = 65536; /* /proc files report size 0: read the first 64 KiB */
    fseek(f, off, SEEK_SET);
    char *buf = malloc((size_t)(size - off) + 1);
    if (!buf) {
        fclose(f);
        snprintf(why, cap, "out of memory");
        return NULL;
    }
    *n = fread(buf, 1, (size_t)(size - off), f);
    buf[*n] = 0;
    fclose(f);
    /* start at a whole line */
    if (off > 0) {
        char *nl = memchr(buf, '\n', *n);
        if (nl) {
            size_t skip = (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, *n - skip + 1);
            *n -= skip;
        }
    }
    return buf;
}

/* ---- /metrics ---- */

typedef struct gauge {
    const char *label; /* "KV cache" */
    bool present;
    double last, peak; /* fraction 0..1 */
    double high_since; /* mono() when the current above-critical run began; < 0 if not above */
    double high_for;   /* longest above-critical run seen, s */
    bool was_high;     /* some scrape read above crit_pct: high_for == 0 alone cannot say so */
} gauge;

static void gauge_update(gauge *g, bool present, double v, double now, double crit) {
    if (!present) return;
    if (!g->present) g->peak = v, g->high_since = -1;
    g->present = true;
    g->last = v;
    if (v > g->peak) g->peak = v;
    if (v * 100 > crit) {
        g->was_high = true;
        if (g->high_since < 0) g->high_since = now;
        if (now - g->high_since > g->high_for) g->high_for = now - g->high_since;
    } else {
        g->high_since = -1;
    }
}

typedef struct counters {
    bool has_err, has_total, has_preempt;
    double err, total, preempt;
} counters;

static void read_counters(const prom_set *p, counters *c) {
    double v;
    memset(c, 0, sizeof(*c));
    if (prom_sum(p, "cllm:request_errors_total", NULL, NULL, &v)) c->has_err = true, c->err += v;
    if (prom_sum(p, "http_requests_total", "status", "5", &v)) c->has_err = true, c->err += v;
    if (prom_sum(p, "vllm:request_success_total", "finished_reason", "error", &v))
        c->has_err = true, c->err += v;
    if (prom_sum(p, "cllm_http_responses_total", "code", "5", &v)) c->has_err = true, c->err += v;
    if (prom_sum(p, "cllm:requests_total", NULL, NULL, &v))
        c->has_total = true, c->total = v;
    else if (prom_sum(p, "cllm_http_responses_total", NULL, NULL, &v))
        c->has_total = true, c->total = v;
    else if (prom_sum(p, "http_requests_total", NULL, NULL, &v))
        c->has_total = true, c->total = v;
    else if (prom_sum(p, "vllm:request_success_total", NULL, NULL, &v))
        c->has_total = true, c->total = v;
    if (prom_sum(p, "vllm:num_preemptions_total", NULL, NULL, &v))
        c->has_preempt = true, c->preempt += v;
    else if (prom_sum(p, "cllm:preemptions_total", NULL, NULL, &v))
        c->has_preempt = true, c->preempt += v;
}

/* One scrape; false (why in msg) when /metrics could not be read. */
static bool scrape(const dr_opts *o, prom_set *p, char *msg, size_t cap) {
    char url[1024];
    cllm_url_join(url, sizeof(url), o->url, "/metrics");
    cllm_http_resp resp;
    cllm_error err;
    if (cllm_http_get(url, o->api_key, o->timeout_s, 64u << 20, &resp, &err)) {
        snprintf(msg, cap, "%.200s", err.msg);
        return false;
    }
    if (resp.status != 200) {
        snprintf(msg, cap, "/metrics answered HTTP %d", resp.status);
        cllm_http_resp_free(&resp);
        return false;
    }
    cllm_status st = prom_parse(resp.body, p, &err);
    cllm_http_resp_free(&resp);
    if (st) snprintf(msg, cap, "%.200s", err.msg);
    return st == CLLM_OK;
}

static void gauge_check(dr_report *r, const dr_opts *o, const char *name, const gauge *g,
                        const char *metric, double window) {
    if (!g->present) {
        add(r, name, DR_SKIP, NAN, "%s not exported", metric);
        return;
    }
    double last = 100 * g->last, peak = 100 * g->peak;
    /* "above crit_pct for sustain_s" needs a reading above it: with sustain_s 0 (doctor --watch
     * judges each round at once) an idle gauge's high_for of 0 would otherwise count as met */
    if (g->was_high && g->high_for >= o->sustain_s)
        add(r, name, DR_CRIT, last, "%.1f%% used, above %.0f%% for %.1f s (critical after %.0f s)",
            last, o->crit_pct, g->high_for, o->sustain_s);
    else if (last > o->warn_pct || peak > o->crit_pct)
        add(r, name, DR_WARN, last, "%.1f%% used (peak %.1f%% over %.1f s; warn above %.0f%%)",
            last, peak, window, o->warn_pct);
    else
        add(r, name, DR_OK, last, "%.1f%% used (peak %.1f%% over %.1f s)", last, peak, window);
}

/* State-slot usage: cllm:state_slots_usage_perc, else cllm_state_slots_used / _capacity. */
static bool slots_usage(const prom_set *p, double *v) {
    if (prom_max(p, "cllm:state_slots_usage_perc", v)) return true;
    double used, cap;
    if (prom_sum(p, "cllm_state_slots_used", NULL, NULL, &used) &&
        prom_sum(p, "cllm_state_slots_capacity", NULL, NULL, &cap) && cap > 0) {
        *v = used / cap;
        return true;
    }
    return false;
}

static void metrics_checks(const dr_opts *o, dr_report *r) {
    prom_set p;
    char msg[256];
    if (!scrape(o, &p, msg, sizeof(msg))) {
        add(r, "metrics", DR_WARN, NAN, "cannot read /metrics: %s", msg);
        return;
    }
    double t0 = mono(), v;
    gauge kv = {.label = "KV", .high_since = -1}, slots = {.label = "slots", .high_since = -1};
    counters c0, c1;
    read_counters(&p, &c0);
    bool has_kv = prom_max(&p, "vllm:kv_cache_usage_perc", &v) ||
                  prom_max(&p, "vllm:gpu_cache_usage_perc", &v);
    gauge_update(&kv, has_kv, v, t0, o->crit_pct);
    bool has_sl = slots_usage(&p, &v);
    gauge_update(&slots, has_sl, v, t0, o->crit_pct);
    double running = NAN, waiting = NAN;
    prom_sum(&p, "vllm:num_requests_running", NULL, NULL, &running);
    prom_sum(&p, "vllm:num_requests_waiting", NULL, NULL, &waiting);
    prom_free(&p);
    c1 = c0;
    double now = t0;
    int scrapes = 1, failed = 0;
    /* Scrape until the window has passed and no gauge is in an above-critical run that could
     * still reach sustain_s. */
    for (;;) {
        double el = now - t0;
        bool pending = (kv.high_since >= 0 && kv.high_for < o->sustain_s) ||
                       (slots.high_since >= 0 && slots.high_for < o->sustain_s);
        if (el >= o->window_s && !pending) break;
        if (el >= o->window_s + o->sustain_s + o->interval_s) break;
        double step = o->interval_s;
        if (!pending && el + step > o->window_s) step = o->window_s - el;
        /* land on the sustain boundary instead of stepping past it */
        if (pending) {
            double hs = kv.high_since >= 0 ? kv.high_since : slots.high_since;
            double left = hs + o->sustain_s - now;
            if (left > 0 && left < step) step = left;
        }
        sleep_s(step);
        now = mono();
        bool got = scrape(o, &p, msg, sizeof(msg));
        now = mono(); /* a slow or failed scrape still uses up the window */
        if (!got) {
            failed++;
            if (failed > 3) break;
            continue;
        }
        scrapes++;
        read_counters(&p, &c1);
        bool h1 = prom_max(&p, "vllm:kv_cache_usage_perc", &v) ||
                  prom_max(&p, "vllm:gpu_cache_usage_perc", &v);
        gauge_update(&kv, h1, v, now, o->crit_pct);
        bool h2 = slots_usage(&p, &v);
        gauge_update(&slots, h2, v, now, o->crit_pct);
        prom_sum(&p, "vllm:num_requests_running", NULL, NULL, &running);
        prom_sum(&p, "vllm:num_requests_waiting", NULL, NULL, &waiting);
        prom_free(&p);
    }
    double window = now - t0;
    gauge_check(r, o, "kv_cache", &kv, "vllm:kv_cache_usage_perc", window);
    if (kv.present && !isnan(running)) {
        dr_check *k = &r->checks[r->n - 1];
        size_t l = strlen(k->detail);
        snprintf(k->detail + l, sizeof(k->detail) - l, "; %.0f running, %.0f waiting", running,
                 isnan(waiting) ? 0 : waiting);
    }
    gauge_check(r, o, "state_slots", &slots, "cllm:state_slots_usage_perc", window);
    if (scrapes < 2) {
        add(r, "errors", DR_WARN, NAN, "only one /metrics scrape succeeded: %s", msg);
        return;
    }
    if (!c0.has_err && !c0.has_total) {
        add(r, "errors", DR_SKIP, NAN, "no request/error counters exported");
    } else {
        double de = c1.err - c0.err, dt = c1.total - c0.total;
        double pct = dt > 0 ? 100 * de / dt : (de > 0 ? 100 : 0);
        dr_level l = pct > o->err_crit_pct ? DR_CRIT : pct > o->err_warn_pct ? DR_WARN : DR_OK;
        add(r, "errors", l, pct,
            "%.0f errors / %.0f requests in %.1f s (%.2f%%; warn > %.0f%%, critical > %.0f%%)", de,
            dt, window, pct, o->err_warn_pct, o->err_crit_pct);
    }
    if (!c0.has_preempt) {
        add(r, "preemptions", DR_SKIP, NAN, "vllm:num_preemptions_total not exported");
    } else {
        double d = c1.preempt - c0.preempt;
        add(r, "preemptions", d > 0 ? DR_WARN : DR_OK, d, "%.0f in %.1f s (%.0f since start)", d,
            window, c1.preempt);
    }
}

void dr_run(const dr_opts *o, dr_report *r) {
    memset(r, 0, sizeof(*r));
    double t_start = mono();
    char url[1024];
    cllm_error err;
    cllm_http_resp resp;

    /* server reachable + /health */
    cllm_url_join(url, sizeof(url), o->url, "/health");
    bool up = false;
    if (cllm_http_get(url, o->api_key, o->timeout_s, 1 << 20, &resp, &err)) {
        add(r, "server", DR_CRIT, NAN, "unreachable: %s", err.msg);
    } else {
        up = true;
        add(r, "server", DR_OK, resp.time_s * 1000, "reachable (%.1f ms)", resp.time_s * 1000);
        add(r, "health", resp.status == 200 ? DR_OK : DR_CRIT, resp.status,
            "/health answered HTTP %d", resp.status);
        cllm_http_resp_free(&resp);
    }

    if (up) {
        cllm_url_join(url, sizeof(url), o->url, "/v1/models");
        if (cllm_http_get(url, o->api_key, o->timeout_s, 8 << 20, &resp, &err)) {
            add(r, "model", DR_CRIT, NAN, "/v1/models: %s", err.msg);
        } else {
            json_t *j = resp.status == 200 ? json_loads(resp.body, 0, NULL) : NULL;
            json_t *data = json_object_get(j, "data");
            size_t n = json_array_size(data);
            const char *id = json_string_value(json_object_get(json_array_get(data, 0), "id"));
            if (resp.status != 200)
                add(r, "model", DR_CRIT, NAN, "/v1/models answered HTTP %d", resp.status);
            else if (!n || !id)
                add(r, "model", DR_CRIT, 0, "no model loaded (/v1/models has no data[].id)");
            else
                add(r, "model", DR_OK, (double)n, "%zu loaded: %s%s", n, id, n > 1 ? ", ..." : "");
            json_decref(j);
            cllm_http_resp_free(&resp);
        }
        metrics_checks(o, r);
    }

    if (o->log_path) {
        char why[256];
        size_t n = 0;
        char *text = read_tail(o->log_path, o->log_tail_bytes, &n, why, sizeof(why));
        if (!text) {
            add(r, "log", DR_WARN, NAN, "%s: %s", o->log_path, why);
        } else {
            long e, c;
            char last[256];
            dr_scan_log(text, n, &e, &c, last, sizeof(last));
            free(text);
            if (c)
                add(r, "log", DR_CRIT, (double)e,
                    "%ld error lines (%ld fatal) in the last %zu bytes; last: %s", e, c, n, last);
            else if (e)
                add(r, "log", DR_WARN, (double)e, "%ld error lines in the last %zu bytes; last: %s",
                    e, n, last);
            else
                add(r, "log", DR_OK, 0, "no errors in the last %zu bytes", n);
        }
    }

    const char *mi = o->meminfo_path ? o->meminfo_path : "/proc/meminfo";
    char why[256];
    size_t n = 0;
    char *text = read_tail(mi, 1 << 20, &n, why, sizeof(why));
    double tot, av;
    if (!text || !dr_parse_meminfo(text, &tot, &av)) {
        add(r, "memory", DR_SKIP, NAN, "%s: %s", mi, text ? "no MemTotal/MemAvailable" : why);
    } else {
        double pct = 100 * av / tot;
        dr_level l = pct < o->mem_crit_pct ? DR_CRIT : pct < o->mem_warn_pct ? DR_WARN : DR_OK;
        add(r, "memory", l, pct,
            "%.1f GiB available of %.1f GiB (%.1f%%; warn < %.0f%%, critical < %.0f%%)",
            av / 1048576, tot / 1048576, pct, o->mem_warn_pct, o->mem_crit_pct);
    }
    free(text);
    r->elapsed_s = mono() - t_start;
}

void dr_print_text(FILE *f, const dr_opts *o, const dr_report *r) {
    static const char *tag[] = {"OK", "WARN", "CRIT", "--"};
    fprintf(f, "cllm doctor  %s\n", o->url);
    for (int i = 0; i < r->n; i++)
        fprintf(f, "  %-5s %-12s %s\n", tag[r->checks[i].level], r->checks[i].name,
                r->checks[i].detail);
    fprintf(f, "overall: %s (exit %d) in %.1f s\n",
            r->overall == DR_OK     ? "OK"
            : r->overall == DR_WARN ? "WARN"
                                    : "CRITICAL",
            (int)r->overall, r->elapsed_s);
}

void dr_print_json(FILE *f, const dr_opts *o, const dr_report *r) {
    json_t *j = json_object(), *a = json_array();
    json_object_set_new(j, "url", json_string(o->url));
    json_object_set_new(j, "status", json_string(dr_level_name(r->overall)));
    json_object_set_new(j, "exit_code", json_integer(r->overall));
    json_object_set_new(j, "elapsed_s", json_real(r->elapsed_s));
    for (int i = 0; i < r->n; i++) {
        const dr_check *c = &r->checks[i];
        json_array_append_new(a, json_pack("{s:s,s:s,s:o,s:s}", "name", c->name, "status",
                                           dr_level_name(c->level), "value",
                                           isnan(c->value) ? json_null() : json_real(c->value),
                                           "detail", c->detail));
    }
    json_object_set_new(j, "checks", a);
    char *s = json_dumps(j, JSON_INDENT(1));
    if (s) fprintf(f, "%s\n", s);
    free(s);
    json_decref(j);
}
