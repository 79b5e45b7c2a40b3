/* The web console (issue 17): the single-page app at / and /console/ (embedded assets), its JSON
 * data endpoints /console/stats, /console/info and /console/requests, and the ring buffer of the
 * last N requests that /console/requests reads. Private to server/; server.c calls these from its
 * MHD callbacks:
 *  - srv_console_public(url) during auth: the page and its static files load without the API key
 *    (they hold no data); the data endpoints go through the normal Bearer check;
 *  - srv_console_dispatch(r) for any url where srv_console_owns(url) is true;
 *  - srv_console_record(r) once per finished HTTP request (on_completed).
 * Off (every console url 404s like any unknown route, nothing recorded) with opts.console false.
 * Locking: the console's own mutex guards the ring and the model card; stats also take the
 * metrics and server mutexes briefly, never while holding the console one. */
#ifndef CLLM_SERVER_SRV_CONSOLE_INT_H
#define CLLM_SERVER_SRV_CONSOLE_INT_H

#include <stdbool.h>

#include <microhttpd.h>

struct cllm_server;
struct srv_req;
typedef struct srv_console srv_console;

/* NULL with opts.console off; on allocation failure too (logged: the API still works). */
srv_console *srv_console_new(const struct cllm_server *s);
void srv_console_free(srv_console *c);

bool srv_console_owns(const struct cllm_server *s, const char *url);
bool srv_console_public(const struct cllm_server *s, const char *url);
enum MHD_Result srv_console_dispatch(struct srv_req *r);
/* Copies what the requests table shows out of r (never prompt text unless
 * opts.console_log_prompts). Skips the console's own urls and the health/metrics probes. */
void srv_console_record(struct srv_req *r, bool completed_ok);
/* The housekeeping thread calls this every 0.25 s: it feeds the dashboard's history ring
 * (console_stats.c), one sample a second. No-op with the console off. */
void srv_console_tick(struct cllm_server *s);

#endif
