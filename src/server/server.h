/* HTTP server: OpenAI- and vLLM-compatible routes over libmicrohttpd.
 *
 * Request path: a client's HTTP request -> this module (auth, body cap, JSON validation, chat
 * template + tokenize via tokenizer/) -> the engine through a function table (cllm_server_engine)
 * -> engine events come back on the engine thread, are copied into the request's queue and wake
 * the suspended connection -> SSE / NDJSON / JSON is written from the MHD thread.
 *
 * No thread waits per request: a connection waiting for tokens is suspended in MHD
 * (MHD_suspend_connection) and resumed by the engine's event callback, so idle keep-alive
 * connections and slow clients never block generation.
 *
 * Called by cli/cmd_serve.c (the `cllm serve` command) and by tests/server/test_server*.c, which
 * pass a scripted fake engine through the same function table. */
#ifndef CLLM_SERVER_SERVER_H
#define CLLM_SERVER_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/engine.h"

struct cllm_tok;

/* The engine as the server sees it. `ctx` is passed to every call. All functions may be called
 * from any server thread; the event callback given to submit runs on the engine's thread. */
typedef struct cllm_server_engine {
    void *ctx;
    cllm_status (*submit)(void *ctx, const cllm_request *r, uint64_t *id, cllm_error *err);
    void (*cancel)(void *ctx, uint64_t id);
    void (*drain)(void *ctx);
    void (*stats)(void *ctx, cllm_engine_stats *s);
    void (*sampling_defaults)(void *ctx, cllm_sampling *s);
    const struct cllm_tok *(*tokenizer)(void *ctx); /* NULL: no tokenizer */
    /* image input (engine.h cllm_vision_info); NULL: the model takes no images */
    void (*vision)(void *ctx, cllm_vision_info *vi);
} cllm_server_engine;

/* Fills ops with the real engine's functions (engine/engine.h). *holder is the engine, or NULL
 * while it loads (submit then answers EBUSY); it must outlive the server. */
void cllm_server_engine_real(cllm_server_engine *ops, cllm_engine **holder);

/* Alert thresholds of the web console (see cllm_server_opts.console_alerts). */
typedef struct cllm_console_alerts {
    double warn_pct, crit_pct, sustain_s; /* KV cache / state slots usage */
    double err_warn_pct, err_crit_pct;    /* 5xx share of responses */
    double mem_warn_pct, mem_crit_pct;    /* host MemAvailable below this % */
} cllm_console_alerts;

typedef struct cllm_server_opts {
    const char *host;              /* default "127.0.0.1" */
    int port;                      /* default 8000; 0 = pick a free port (tests) */
    const char *api_key;           /* NULL = no auth */
    bool auth_public_health;       /* /health, /metrics, /version without a key (default true) */
    const char *served_model_name; /* name in /v1/models, responses and metric labels */
    const char *model_dir;         /* shown as "root" in /v1/models */
    const char *allowed_origins;   /* CORS Access-Control-Allow-Origin value, NULL = no CORS */
    uint64_t max_body_size;        /* bytes, default 16 MiB -> 413 above */
    int max_json_depth;            /* default 64 */
    int max_num_queued_reqs;       /* waiting requests before 429 (0 = unbounded) */
    uint64_t max_queued_tokens; /* prompt tokens of not-yet-started requests before 429 (0 = off) */
    int max_logprobs;           /* default 20 (vLLM) */
    int max_n;                  /* default 128 */
    double stats_interval_s;    /* the periodic stats log line; default 5, <= 0 = off */
    bool access_log;            /* one line per HTTP request (default true) */
    const char *access_log_skip; /* comma-separated paths that get no access line, or NULL */
    bool force_include_usage;    /* streams end with a usage chunk even without include_usage */
    int n_threads;               /* MHD worker threads, default 2 */
    unsigned connection_limit;   /* --max-connections, default 1024 */
    /* against clients that hold connections (srv_conn.c; README "Connection limits") */
    unsigned per_ip_connection_limit; /* per client address; 0 = a quarter of connection_limit */
    double header_timeout_s;          /* request head complete within this (default 60) */
    double body_timeout_s;            /* request body complete within this of its head (60) */
    double keepalive_timeout_s;       /* idle connection closed after this (default 20) */
    double send_timeout_s;            /* no byte accepted for this long: response cut (30) */
    const char *default_chat_template_kwargs; /* JSON object text or NULL */
    /* web console (srv_console_int.h): on by default; its request log keeps counts and times only
     * unless console_log_prompts */
    bool console;
    int console_requests; /* requests kept for the console's log (default 1000) */
    bool console_log_prompts;
    /* the console's alert thresholds, served in /console/info: `cllm serve` copies
     * `cllm doctor`'s (dr_opts_default) so both judge a server alike; warn_pct 0 = not given
     * (the page then uses the same numbers built in) */
    cllm_console_alerts console_alerts;
    const char *const *model_aliases; /* more names accepted as `model` and listed in /v1/models
                                         (vLLM's --served-model-name A B); borrowed */
    int n_model_aliases;
    const char *chat_template; /* Jinja text replacing the tokenizer's template (NULL = its own) */
    bool has_default_seed;     /* --seed: requests without a seed get default_seed + their number */
    uint64_t default_seed;
    int max_num_seqs; /* the engine's --max-num-seqs: llama-server's slots in /props, /slots */
    /* image input (srv_image.c): vLLM's --limit-mm-per-prompt image count (default 999, vLLM's),
     * --allowed-local-media-path (file:// URLs under it; NULL = none), --mm-processor-kwargs
     * (JSON object text: min_pixels / max_pixels defaults for every request, or NULL; read once
     * at ready, its keys and ranges checked by the caller: `cllm serve` refuses bad ones) */
    int limit_mm_images;
    const char *allowed_local_media_path;
    const char *mm_processor_kwargs;
} cllm_server_opts;

void cllm_server_opts_defaults(cllm_server_opts *o);

typedef struct cllm_server cllm_server;

/* Starts listening (threads inside MHD). ops is copied; the engine must outlive the server.
 * The server reports "loading" (503 on /health, and on every model route) until
 * cllm_server_set_ready(s, true), which (re)reads the tokenizer, chat template and
 * max_model_len from ops. */
cllm_status cllm_server_start(const cllm_server_opts *o, const cllm_server_engine *ops,
                              cllm_server **out, cllm_error *err);

/* The port actually bound (useful with port 0). */
int cllm_server_port(const cllm_server *s);

void cllm_server_set_ready(cllm_server *s, bool ready);

/* The engine cannot run any more (a tensor-parallel rank died or hung): from now on /health and
 * every generation request answer 503 with msg, and requests that fail in flight report 503
 * instead of 500. Any thread, once (later calls are ignored). */
void cllm_server_set_failed(cllm_server *s, const char *msg);

/* Graceful drain: /health answers 503, new generation requests get 503, the engine stops
 * admitting; waits up to timeout_s for in-flight requests to finish and their responses to be
 * written, then cancels what is left (they end with finish_reason "abort") and waits for that.
 * Returns the number of requests that had to be cancelled. Call once, before cllm_server_stop. */
int cllm_server_drain(cllm_server *s, double timeout_s);

/* Number of generation requests submitted to the engine and not yet finished. */
int cllm_server_in_flight(cllm_server *s);

/* Stops listening, closes connections and frees s. In-flight requests are cancelled first. */
void cllm_server_stop(cllm_server *s);

/* Prometheus text of /metrics into a malloc'd string (tests). */
char *cllm_server_metrics_text(cllm_server *s);

/* The console's model card (/console/info "card"): a JSON object text, copied. No-op with the
 * console off. Any thread. */
void cllm_server_set_card(cllm_server *s, const char *json);

#endif
