/* Private to console*.c: the request ring and the console's state. */
#ifndef CLLM_SERVER_CONSOLE_INT_H
#define CLLM_SERVER_CONSOLE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "server/console.h"
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
    char *prompt_text; /* only with --console-log-prompts, else NULL */
} srv_con_entry;

struct srv_console {
    pthread_mutex_t mu;
    srv_con_entry *ring; /* [cap]; entry seq s lives at (s - 1) % cap */
    int cap;
    uint64_t last_seq; /* newest seq recorded (0 = none) */
    char *card;        /* JSON object text from cllm_server_set_card, or NULL */
    bool log_prompts;
};

/* Seconds of finished requests the latency percentiles of /console/stats cover. */
#define SRV_CON_WINDOW_S 60.0

/* /console/stats body (malloc'd JSON) or NULL on OOM. console_stats.c. */
char *srv_console_stats_json(cllm_server *s, size_t *len);

#endif
