/* Private to console*.c: the request ring and the console's state. */
#ifndef CLLM_SERVER_CONSOLE_INT_H
#define CLLM_SERVER_CONSOLE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "server/srv_console_int.h"
#include "server/srv_int.h"

/* One finished HTTP request, as the Requests tab shows it. */
typedef struct srv_con_entry {
    uint64_t seq;  /* 1, 2, ... in finishing order */
    double t_wall; /* unix seconds when the response finished */
    double t_mono; /* srv_now() then: the stats window uses it */
    char method[8];
    char path[128]; /* url path only (MHD strips the query) */
    char id[48];    /* response id (chatcmpl-...) or "" */
    unsigned status;
    int n;                      /* samples */
    int prompt, cached, output; /* tokens; -1 = not a generation request */
    double ttft_s;              /* time to first token from arrival; < 0 when none came */
    double total_s;             /* arrival to the connection's end */
    char finish[12];            /* stop|length|abort|error|cancelled|"" */
    bool gen, stream;
    float temperature, top_p; /* the request's sampling (gen only) */
    int max_tokens;           /* as the engine ran it (the API's default filled in) */
    long long seed;           /* -1 = none */
    char *prompt_text;        /* only with --console-log-prompts, else NULL */
} srv_con_entry;

/* One second of the dashboard's history (issue 35). Gauges are the highest value seen during the
 * second (the housekeeping thread looks every 0.25 s), so a burst shorter than the page's poll
 * still shows; counters are totals at the second's end (the JSON turns them into per-second
 * rates); CPU is the share used over the second; latencies are the percentiles of the
 * SRV_CON_WINDOW_S window at the second's end, NAN when the window has none. */
typedef struct srv_con_sample {
    double t; /* unix seconds at the end of the second */
    float running, waiting, kv_pct, slots_pct;
    float in_flight; /* highest number of generation requests in flight (exact, not sampled) */
    double prompt_tokens, gen_tokens, prefix_q, prefix_h; /* engine counters, cumulative */
    double http_total, http_5xx, http_429, preemptions;   /* server counters, cumulative */
    double spec_draft, spec_accepted; /* speculative decoding's draft tokens, cumulative */
    float proc_cpu_pct, host_cpu_pct, host_mem_pct;
    float ttft[3], itl[3], e2e[3]; /* p50 / p95 / p99 ms */
} srv_con_sample;

/* The ring of the last SRV_CON_HIST samples: sample k (0-based, in push order) is at
 * s[k % cap]. */
typedef struct srv_con_hist {
    srv_con_sample *s;
    int cap;
    uint64_t n; /* samples pushed so far */
} srv_con_hist;

#define SRV_CON_HIST 3600 /* one hour at one sample a second */

bool srv_con_hist_init(srv_con_hist *h, int cap);
void srv_con_hist_free(srv_con_hist *h);
void srv_con_hist_push(srv_con_hist *h, const srv_con_sample *x);
/* Appends ,"history":{"t":[...],"gtps":[...],...} (columns, oldest first) of the samples with
 * t > since: rates from each sample and the one before it (the oldest kept has none: null). */
void srv_con_hist_json(const srv_con_hist *h, double since, srv_buf *b);

/* The bucket being filled between two samples. */
typedef struct srv_con_bucket {
    double t0;                                 /* srv_now() when it began */
    float running, waiting, kv_pct, slots_pct; /* max so far */
    double proc_cpu_s;                         /* at t0 */
    unsigned long long cpu_busy, cpu_total;    /* /proc/stat at t0 */
} srv_con_bucket;

struct srv_console {
    pthread_mutex_t mu;
    srv_con_entry *ring; /* [cap]; entry seq s lives at (s - 1) % cap */
    int cap;
    uint64_t last_seq; /* newest seq recorded (0 = none) */
    char *card;        /* JSON object text from cllm_server_set_card, or NULL */
    bool log_prompts;
    pthread_mutex_t hmu; /* the history ring and the bucket (only the housekeeping thread writes) */
    srv_con_hist hist;
    srv_con_bucket bucket;
};

/* Seconds of finished requests the latency percentiles of /console/stats cover. */
#define SRV_CON_WINDOW_S 60.0

/* /console/stats body (malloc'd JSON) or NULL on OOM. console_stats.c. */
char *srv_console_stats_json(cllm_server *s, size_t *len);
/* /console/stats?since=T: the same plus the history after T (T = 0: all of it). */
char *srv_console_stats_since_json(cllm_server *s, double since, size_t *len);

#endif
