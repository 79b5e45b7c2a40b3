/* Private to server/: the server object, per-request state, parsed generation requests, the
 * metrics registry and small buffers. See server.h for the request path. */
#ifndef CLLM_SERVER_SRV_INT_H
#define CLLM_SERVER_SRV_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#include "image/image.h"
#include "server/server.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/output_parser.h"
#include "tokenizer/tokenizer.h"

/* ---- growable byte buffer (curl's dynbuf): every append checks a cap ---- */
typedef struct srv_buf {
    char *p;
    size_t len, cap;
    bool oom; /* an append failed; contents are truncated */
} srv_buf;

void srv_buf_add(srv_buf *b, const char *s, size_t n);
void srv_buf_adds(srv_buf *b, const char *s);
void srv_buf_printf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void srv_buf_free(srv_buf *b);

double srv_now(void); /* CLOCK_MONOTONIC seconds */

/* ---- metrics (metrics.c) ---- */
typedef struct srv_hist {
    const double *bounds; /* ascending upper bounds, +Inf implied */
    int n_bounds;
    uint64_t *counts; /* [n_bounds + 1], non-cumulative */
    double sum;
    uint64_t count;
} srv_hist;

enum {
    SRV_H_TTFT,
    SRV_H_ITL,
    SRV_H_E2E,
    SRV_H_QUEUE,
    SRV_H_PROMPT,
    SRV_H_GEN,
    SRV_H_PREFILL,     /* scheduled -> first token */
    SRV_H_DECODE,      /* first token -> last token */
    SRV_H_INFERENCE,   /* scheduled -> last token */
    SRV_H_TPOT,        /* per request: decode time / (generated - 1) */
    SRV_H_PARAMS_N,    /* the n request parameter */
    SRV_H_PARAMS_MAX,  /* the max_tokens request parameter */
    SRV_H_KV_COMPUTED, /* prompt tokens computed in prefill (not from the prefix cache) */
    SRV_H_COUNT
};
enum { SRV_REJ_QUEUE, SRV_REJ_TOKENS, SRV_REJ_ENGINE, SRV_REJ_DRAINING, SRV_REJ_COUNT };
/* why srv_conn.c or MHD cut a connection short (cllm_http_deadline_closes_total{reason}) */
enum { SRV_DL_HEADER, SRV_DL_BODY, SRV_DL_SEND, SRV_DL_COUNT };

typedef struct srv_metrics {
    pthread_mutex_t mu;
    srv_hist h[SRV_H_COUNT];
    double *tok_bounds;  /* 1-2-5 steps up to max_model_len */
    uint64_t success[5]; /* by cllm_finish */
    uint64_t prompt_tokens, generation_tokens, cached_tokens;
    uint64_t http[600]; /* responses by status code */
    uint64_t rejections[SRV_REJ_COUNT];
    uint64_t requests_cancelled_disconnect;
    uint64_t deadline_closes[SRV_DL_COUNT];
    /* for the periodic log line */
    uint64_t last_prompt, last_gen;
    uint64_t last_pq, last_ph;
    double last_t;
} srv_metrics;

int srv_metrics_init(srv_metrics *m, int max_model_len);
void srv_metrics_free(srv_metrics *m);
void srv_metrics_set_max_len(srv_metrics *m, int max_model_len);
void srv_metrics_observe(srv_metrics *m, int which, double v);
void srv_metrics_http(srv_metrics *m, unsigned status);
char *srv_metrics_render(cllm_server *s);
/* Standard process_* and host metrics (metrics_proc.c), appended to b. */
void srv_metrics_process(srv_buf *b);
/* A number as Prometheus text: a whole number below 2^53 as its digits, any other the shortest
 * form that reads back to the same double. */
void srv_metrics_num(char *out, size_t cap, double v);
void srv_metrics_log_line(cllm_server *s);

/* ---- parsed generation request (openai.c) ---- */
typedef enum srv_route {
    SRV_COMPLETIONS,
    SRV_CHAT,
    SRV_GENERATE,   /* vLLM demo /generate */
    SRV_RESPONSES,  /* OpenAI Responses API (responses.c; parsed as chat) */
    SRV_EMBEDDINGS, /* /v1/embeddings (srv_embed.c): one engine request per input, no sampling */
    SRV_LLAMA,      /* llama-server's /completion (llama_api.c; parsed as completions) */
} srv_route;

/* Flags of a row of server.c's route table (srv_route_flags). */
enum {
    /* a probe or a scrape: answered while the model loads, left out of the HTTP metrics (vLLM's
     * leave them out too) and of the console's request log */
    SRV_RT_PROBE = 1u << 0,
    SRV_RT_PUBLIC = 1u << 1, /* no API key needed under --auth-public-health (the default) */
    SRV_RT_ADMITTED =
        1u << 2,           /* generation: counted by drain from its head on, 503 while draining */
    SRV_RT_BODY = 1u << 3, /* takes a JSON body: size checks, parsed before the handler */
    SRV_RT_DOWN = 1u << 4, /* 503 with the failure message once cllm_server_set_failed ran */
};
/* The flags of the route url matches, 0 when none does. */
unsigned srv_route_flags(const char *url);

/* llama-server /completion options with no /v1/completions equivalent (llama_api.c). */
typedef struct srv_gen_llama {
    long long n_predict; /* as given (-1: to the end of the context) */
    int n_probs;         /* top tokens per generated token in completion_probabilities */
    int repeat_last_n;
    bool return_tokens, timings_per_token;
} srv_gen_llama;

typedef struct srv_gen {
    srv_route route;
    bool stream, include_usage, continuous_usage;
    bool echo;
    int n;
    cllm_sampling s; /* pointer fields point into the arrays below */
    char **stop;
    int n_stop;
    int *stop_ids, n_stop_ids;
    int *bias_ids;
    float *bias_vals;
    int n_bias;
    cllm_tok_ids prompt;
    char *prompt_text; /* for echo and /generate (NULL when the prompt was token ids) */
    /* /v1/completions with several prompts: each is its own engine request with s.n samples;
     * choice i belongs to prompt i / s.n, and n = n_batch * s.n. prompt is then empty. */
    int n_batch;
    cllm_tok_ids *batch;
    char **batch_text;
    size_t prompt_total; /* tokens over all prompts */
    int logprobs;        /* completions: top N (-1 none); chat: top_logprobs when chat_logprobs */
    bool chat_logprobs;
    /* scoring (oai_score.c): prompt_logprobs asked for (or implied by echo + logprobs) and shown
     * in the answer; score_only = completions max_tokens 0 with echo (the engine samples one
     * token that is never shown); chat_echo = the last message's content echoed (chat echo) */
    bool show_prompt_lp, score_only;
    char *chat_echo;
    bool embed_base64, embed_normalize; /* /v1/embeddings: encoding_format, normalize */
    json_t *tools;                      /* owned ref or NULL */
    bool parse_tools, parse_reasoning, starts_in_reasoning;
    char *cache_salt;
    struct cllm_gm *grammar; /* structured-output constraint (owned ref) or NULL; s.grammar */
    srv_gen_llama llama;     /* SRV_LLAMA only */
    /* image input (srv_image.c): the prompt's images in order, pixels owned; their pads are
     * expanded in prompt and images[i].pos set once the prompt is tokenized */
    cllm_image_input *images;
    int n_images;
    long mm_min_pixels, mm_max_pixels; /* 0 = the processor's */
} srv_gen;

void srv_gen_free(srv_gen *g);

/* An error to return: status + OpenAI error object fields. */
typedef struct srv_err {
    unsigned status;
    char type[48];
    char param[64];
    char code[48];
    char msg[600];
} srv_err;

void srv_err_set(srv_err *e, unsigned status, const char *type, const char *param, const char *fmt,
                 ...) __attribute__((format(printf, 5, 6)));
/* A 400 invalid_request_error naming param; returns false, for `return srv_bad(...)` in the
 * request parsers. */
bool srv_bad(srv_err *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The chat template's Jinja source: --chat-template's, else the tokenizer's, else NULL. */
const char *srv_chat_template_src(const cllm_server *s);

/* srv_image.c: image content parts. srv_image_kwargs reads the request's mm_processor_kwargs
 * before the messages; srv_image_part loads one image part (data: URL, or a file:// URL under
 * --allowed-local-media-path) into g->images; srv_image_expand turns each image-pad token of
 * g->prompt into the image's tokens. */
bool srv_image_kwargs(cllm_server *s, json_t *body, srv_gen *g, srv_err *e);
/* At ready: s->img_prep from the model folder's preprocessor_config.json (HF keys), then
 * --mm-processor-kwargs, over the Qwen3.5 defaults, the patch geometry from the tower's config;
 * s->tmpl_image_parts (the template renders image parts itself, else the server writes the
 * placeholder text). */
void srv_image_load_prep(cllm_server *s);
bool srv_image_part(cllm_server *s, json_t *part, size_t msg, srv_gen *g, srv_err *e);
bool srv_image_expand(cllm_server *s, srv_gen *g, srv_err *e);
void srv_image_free(srv_gen *g);
/* the placeholder a string-content template gets for an image (Qwen3-VL's) */
#define SRV_IMAGE_PLACEHOLDER "<|vision_start|><|image_pad|><|vision_end|>"
/* why a model without a tower refuses images (chat and the console's /console/info) */
#define SRV_NO_VISION "this model takes no images (it has no vision tower)"

/* Parses a completions / chat / generate body into g. Returns false with e filled. */
bool srv_parse_gen(cllm_server *s, srv_route route, json_t *body, srv_gen *g, srv_err *e);
/* /tokenize body: {"prompt"} or {"messages"} (chat template applied); fills g->prompt. */
bool srv_parse_tokenize(cllm_server *s, json_t *body, srv_gen *g, srv_err *e);
/* Structured outputs and forced tool calls (srv_struct.c): compiles the request's constraint
 * into g->grammar / g->s. Call after the prompt (and tools) are parsed. */
bool srv_parse_structured(cllm_server *s, json_t *body, srv_gen *g, srv_err *e);

/* ---- per-request state (srv_req.c) ---- */
typedef struct srv_ev {
    struct srv_ev *next;
    int index;
    char *text;
    size_t text_len;
    int *tokens;
    int n_tokens;
    cllm_token_logprob *lp; /* [n_tokens][1 + n_top] or NULL */
    int n_top;
    cllm_prompt_logprob *plp; /* the prompt's rows (cllm_event.prompt_lp) or NULL */
    int n_plp, plp_top;
    float *emb; /* cllm_event.embedding or NULL */
    int n_emb;
    cllm_finish finish;
    char *error;
    char *stop_str; /* stop_reason: the matched stop string, or */
    bool has_stop_token;
    int stop_token; /* the stop token id */
    int prompt_tokens, completion_tokens, cached_prompt_tokens;
} srv_ev;

typedef struct srv_choice {
    srv_buf text;      /* all text (completions, generate) */
    cllm_outp *parser; /* chat */
    srv_buf content, reasoning;
    json_t *tool_calls; /* chat, non-stream: accumulated [{id,type,function}] */
    int n_tool_calls;
    json_t *lp; /* accumulated logprobs for non-stream */
    float *emb; /* /v1/embeddings: the input's vector */
    int n_emb;
    int completion_tokens;
    int text_offset; /* completions logprobs text_offset */
    cllm_finish finish;
    char *error;
    char *stop_str; /* stop_reason (see srv_ev) */
    bool has_stop_token;
    int stop_token;
    bool started;
} srv_choice;

typedef struct srv_req srv_req;

/* One engine request of a srv_req (several for batched prompts): the event callback's user. */
typedef struct srv_sub {
    srv_req *r;
    int base; /* choice index of its sample 0 */
    uint64_t id;
    bool submitted;
} srv_sub;

struct srv_req {
    /* shared with the engine thread, under mu */
    pthread_mutex_t mu;
    int refs;
    srv_ev *head, *tail;
    int n_finished_engine;
    bool suspended;       /* we suspended the connection and nobody resumed it yet */
    bool conn_gone;       /* MHD finished with the connection: never resume again */
    double *t_last_token; /* [n] engine-thread timing */
    bool first_token_seen;
    bool ev_oom;          /* an event copy failed: the request reports an error */
    bool watch_cancelled; /* the disconnect watch cancelled it (server.c) */
    double t_drain;       /* srv_now() when the stream last had room for bytes (srv_conn.c) */
    double t_first_token; /* srv_now() of the first token (console's requests log) */

    /* connection side (MHD thread) */
    cllm_server *srv;
    struct MHD_Connection *conn;
    srv_route route;
    char method[16], url[256];
    const char *url_tail; /* in url: from the route's {id} on (pattern routes), else NULL */
    srv_buf body;
    bool body_too_large;
    bool close_conn; /* the response says Connection: close (a head refused for its framing) */
    bool is_gen;     /* a generation route that counts against drain */
    bool submitted;
    bool counted_in_flight;
    bool all_done; /* connection side has seen every final */
    bool trailer_sent;
    bool oom_tail; /* r->out lost bytes: the stream ends with a fixed error event (out_off in it) */
    uint64_t engine_id; /* subs[0].id */
    srv_sub *subs;      /* [n_subs] */
    int n_subs;
    struct srv_plp *plp;         /* [n_subs] prompt logprobs per prompt (oai_score.c), or NULL */
    struct srv_resp_state *resp; /* /v1/responses output state (responses.c) or NULL */
    srv_gen gen;
    srv_choice *choices; /* [gen.n] */
    int n_finished_conn;
    int prompt_tokens, cached_tokens;
    char id[48];
    long created;
    double t_arrival;
    srv_buf out; /* formatted bytes not yet handed to MHD */
    size_t out_off;
    unsigned status;
    uint64_t bytes_sent;
    bool queued_tokens_counted;
    srv_req *reg_prev, *reg_next; /* server's in-flight registry */
};

/* ---- connection guard (srv_conn.c) ----
 * One per TCP connection (MHD's socket context): which part of a request it is in and since
 * when, for the header and body deadlines libmicrohttpd does not have. */
typedef enum srv_conn_phase {
    SRV_CONN_HEAD, /* waiting for a complete request head (new or kept-alive connection) */
    SRV_CONN_BODY, /* head seen, reading the body */
    SRV_CONN_BUSY, /* request read: being answered */
} srv_conn_phase;

typedef struct srv_conn {
    struct srv_conn *prev, *next; /* s->conns, under s->conn_mu */
    int fd;
    srv_conn_phase phase; /* under s->conn_mu */
    double t_phase;       /* srv_now() when the phase began */
    bool cut;             /* a deadline shut the socket down */
    bool linger;          /* answered before its body was read: drain it after MHD closes */
} srv_conn;

/* A socket kept after MHD closed the connection (srv_conn_linger): its unread body is drained so
 * the close does not reset the answer away. */
#define SRV_LINGER_MAX 64
typedef struct srv_linger {
    int fd;    /* a dup of the socket: MHD's close leaves it open */
    double t0; /* srv_now() when MHD closed it */
} srv_linger;

/* MHD_OPTION_NOTIFY_CONNECTION: registers / unregisters the connection. */
void srv_conn_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code);
/* The connection moves to phase p (MHD thread). Returns false when a deadline cut it already. */
bool srv_conn_enter(cllm_server *s, struct MHD_Connection *c, srv_conn_phase p);
/* Housekeeping thread: shuts down connections past --client-header-timeout or
 * --client-body-timeout, and cancels streams that accepted no byte for --send-timeout. */
void srv_conn_watch(cllm_server *s);
/* The request head's framing and Host checks (first access-handler call). Returns 0 when the
 * head is acceptable, else the status to answer with msg filled. */
unsigned srv_conn_check_head(struct MHD_Connection *c, const char *version, char *msg, size_t cap);
/* The connection's answer goes out before its request body is read (any answer from the head
 * of a request that announces a body: 401, 413, a refused framing; a chunked body past the
 * cap): when MHD closes it, keep reading
 * and dropping what the client still sends, for up to SRV_LINGER_S, then close. Without that the
 * kernel answers the unread bytes with a reset, which can reach a client still sending (curl
 * with the whole body) before it has read the answer. */
void srv_conn_linger(cllm_server *s, struct MHD_Connection *c);
/* Closes every lingering socket (server stop). */
void srv_conn_linger_free(cllm_server *s);
/* Writes a complete response (status, JSON body, Connection: close) straight to the socket: for
 * the one case MHD cannot queue one, a body refused while it is being read. Best effort. */
void srv_conn_write_raw(struct MHD_Connection *c, unsigned status, const char *json);

struct cllm_server {
    cllm_server_opts o;
    cllm_server_engine ops;
    cllm_vision_info vision;  /* read at ready (srv_image.c) */
    cllm_image_prep img_prep; /* the processor's settings: preprocessor_config.json and
                                 --mm-processor-kwargs over the defaults */
    bool tmpl_image_parts;    /* the chat template renders image parts itself (srv_image.c) */
    struct MHD_Daemon *d;
    int port;
    const cllm_tok *tok;
    cllm_jinja *tmpl;
    json_t *default_kwargs;
    char *model_name;
    int max_model_len;
    long started;
    volatile int ready; /* atomic via __atomic */
    volatile int draining;
    volatile int failed;  /* cllm_server_set_failed: 1 once failed_msg is written (atomic) */
    char failed_msg[256]; /* why every generation request gets 503 */
    pthread_mutex_t mu;   /* registry, counters below */
    pthread_cond_t cv;
    srv_req *reg_head;
    int in_flight;      /* submitted, not all finals seen by the engine callback */
    int in_flight_peak; /* highest in_flight since the console's last history sample */
    int open_gen_conns; /* generation connections not yet completed by MHD */
    uint64_t queued_tokens;
    uint64_t next_id;
    srv_metrics m;
    pthread_t stats_thread;
    bool stats_running, stop_stats;
    struct srv_console *console;       /* web console (srv_console_int.h); NULL when off */
    uint64_t seed_ctr;                 /* --seed: unseeded requests so far (atomic) */
    struct srv_resp_store *resp_store; /* finished /v1/responses (responses.c), made on first use */
    pthread_mutex_t conn_mu;           /* conns and every srv_conn's phase */
    srv_conn *conns;                   /* open connections (srv_conn.c) */
    srv_linger lingers[SRV_LINGER_MAX]; /* closed by MHD, drained by srv_conn_watch; conn_mu */
    int n_lingers;
};

/* path is one of the comma-separated entries of list (NULL: none). */
bool srv_path_listed(const char *list, const char *path);

/* name is one of the served model names, or the model directory as given (vLLM accepts it). */
bool srv_model_known(const cllm_server *s, const char *name);

srv_req *srv_req_new(cllm_server *s, struct MHD_Connection *c, const char *method, const char *url);
void srv_req_unref(srv_req *r);
/* The prompt text of choice idx (echo), NULL when the prompt was token ids. */
const char *srv_gen_prompt_text(const srv_gen *g, int idx);
/* Submits r->gen to the engine. Returns false with e filled (429/503/400). */
bool srv_req_submit(srv_req *r, srv_err *e);
/* Takes queued events and formats them into r->out (stream) or the choices (non-stream).
 * Returns true when every sample has finished. If nothing is queued and not finished, suspends
 * the connection (under the request lock) and returns false. */
bool srv_req_pump(srv_req *r, bool *suspended);
/* Builds the final JSON for a non-stream request. */
char *srv_req_final_json(srv_req *r, size_t *len, unsigned *status);
ssize_t srv_req_stream_reader(void *cls, uint64_t pos, char *buf, size_t max);
void srv_req_stream_free(void *cls);
void srv_req_conn_done(srv_req *r);

/* oai_score.c: prompt logprobs and echo of the prompt's tokens */
typedef struct srv_plp {
    cllm_prompt_logprob *rows; /* [n][1 + top], owned */
    int n, top;
} srv_plp;
/* The body's prompt_logprobs (vLLM's checks and words) for completions and chat; call after
 * stream, logprobs and echo are parsed. */
bool srv_parse_prompt_logprobs(cllm_server *s, json_t *body, srv_gen *g, srv_err *e);
/* Keeps an event's prompt rows for its prompt (takes ev->plp). */
void srv_plp_take(srv_req *r, int choice, srv_ev *ev);
/* vLLM's prompt_logprobs list of choice's prompt: [null, {"id": {logprob, rank, decoded_token}},
 * ...], or null when the rows never came (the request failed first). */
json_t *srv_plp_json(srv_req *r, int choice);
/* Completions echo with logprobs: the prompt's tokens first in lp (null logprob for the first). */
void srv_plp_echo(srv_req *r, srv_choice *c, int choice, json_t *lp);
void srv_plp_free(srv_req *r);
/* A token id as the text logprobs show (oai_fmt.c). */
json_t *srv_fmt_tok_str(const srv_req *r, int id);

/* srv_embed.c: /v1/embeddings */
bool srv_parse_embed(cllm_server *s, json_t *body, srv_gen *g, srv_err *e);
void srv_embed_take(srv_choice *c, srv_ev *ev); /* keeps the event's vector (takes ev->emb) */
json_t *srv_embed_final(srv_req *r, srv_err *e);

/* What varies in the output of a generation route (oai_fmt.c's table, one row per srv_route):
 * the data here, the per-route code behind the two function pointers. */
typedef enum srv_lp_layout {
    SRV_LP_NONE,        /* no OpenAI logprobs object (the route has its own, or none) */
    SRV_LP_COMPLETIONS, /* {text_offset, token_logprobs, tokens, top_logprobs} */
    SRV_LP_CHAT,        /* {content: [{token, logprob, bytes, top_logprobs}]} */
} srv_lp_layout;

typedef struct srv_fmt {
    const char *id_prefix;    /* r->id is this and 16 hex digits */
    const char *object;       /* "object" of the non-stream body (OpenAI layouts), else NULL */
    const char *chunk_object; /* "object" of each stream chunk (OpenAI layouts), else NULL */
    bool ndjson;              /* a stream of JSON lines (vLLM /generate), not SSE `data:` frames */
    /* OpenAI's stream end: the usage chunk and data: [DONE]; --enable-force-include-usage */
    bool usage_chunks;
    srv_lp_layout lp;
    /* One event of choice idx after the shared bookkeeping; owns lp (NULL when none). */
    void (*events)(srv_req *r, int idx, srv_choice *c, srv_ev *ev, json_t *lp);
    /* The non-stream body, or NULL with *e set. */
    json_t *(*final)(srv_req *r, srv_err *e);
} srv_fmt;

/* oai_fmt.c formatting */
const srv_fmt *srv_fmt_of(srv_route route);
void srv_fmt_events(srv_req *r, srv_ev *list); /* consumes list into choices / r->out */
/* stream end: usage chunk, [DONE]. Chat's role chunk goes out with the first token (oai_fmt.c) */
void srv_fmt_trailer(srv_req *r);
char *srv_fmt_error_json(const srv_err *e);

/* responses.c: the Responses API on top of the chat pipeline */
struct srv_resp_state;
struct srv_resp_store;
bool srv_resp_parse(cllm_server *s, json_t *body, srv_gen *g, struct srv_resp_state **out,
                    srv_err *e);
void srv_resp_events(srv_req *r, srv_choice *c, srv_ev *ev);
json_t *srv_resp_final(srv_req *r, srv_err *e);
json_t *srv_resp_lookup(cllm_server *s, const char *id); /* new ref or NULL */
/* POST /v1/responses/{id}/cancel (tail = "{id}/cancel", a non-empty id: server.c's route
 * pattern). vLLM/OpenAI cancel only background responses that are still queued or in progress;
 * cllm refuses `background`, so every stored response is a finished synchronous one: 400 "Cannot
 * cancel a synchronous response." (vLLM's words), an unknown id 404. An in-flight synchronous
 * response is not in the store yet (as in vLLM): 404; its client cancels it by closing the
 * connection. */
json_t *srv_resp_cancel(cllm_server *s, const char *tail, srv_err *e); /* NULL: *e set */
void srv_resp_state_free(struct srv_resp_state *st);
void srv_resp_store_free(struct srv_resp_store *st);
json_t *srv_fmt_final(srv_req *r, srv_err *e);

/* llama_api.c: llama-server's /completion, /props, /slots */
bool srv_llama_parse(cllm_server *s, json_t *body, srv_gen *g, srv_err *e);
/* One event of choice c (after oai_fmt.c's bookkeeping): an SSE object per event, or kept in c
 * (c->lp holds {"tokens", "probs"}) for the final body. */
void srv_llama_events(srv_req *r, srv_choice *c, const srv_ev *ev);
json_t *srv_llama_final(srv_req *r, srv_err *e);
json_t *srv_llama_props(cllm_server *s);
/* Takes s->mu. *free_slots: places not running a sequence. */
json_t *srv_llama_slots(cllm_server *s, int *free_slots);

#endif
