/* `cllm serve MODEL`: the OpenAI- and vLLM-compatible HTTP server (server/server.h) over the
 * engine (engine/engine.h). Starts listening first (/health answers 503 while the model loads),
 * loads the engine, then serves until SIGTERM/SIGINT, when it drains: stops admitting, lets
 * in-flight requests finish for up to --shutdown-timeout seconds, cancels the rest, exits 0.
 * A second SIGINT during the drain exits 130 at once; SIGHUP is logged and ignored. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "engine/engine.h"
#include "server/server.h"
#include "cli/cli.h"
#include "cli/commands.h"

/* Runs during the drain: a second SIGINT ends the process at once (the operator pressed Ctrl-C
 * twice and does not want to wait for in-flight requests); SIGTERM and SIGHUP repeated during
 * the drain change nothing (the drain is already under way; a supervisor escalates with SIGKILL). */
static void *second_signal(void *arg) {
    sigset_t *sigs = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(sigs, &sig)) return NULL;
        if (sig == SIGINT) {
            LOG_WARN("second SIGINT: aborting now without waiting for in-flight requests");
            _exit(130);
        }
        LOG_INFO("%s during the drain: ignored", sig == SIGTERM ? "SIGTERM" : "SIGHUP");
    }
}

int cmd_serve(int argc, char **argv) {
    const char *host = "127.0.0.1", *api_key = NULL, *name = NULL, *origins = NULL,
               *log_format = NULL;
    const char *kwargs = NULL;
    long port = 8000, max_model_len = 0, max_seqs = 256, max_batched = 2048, block = 16,
         threads = 0;
    long max_queued = 0, http_threads = 2, max_logprobs = 20;
    uint64_t kv_bytes = 0, max_body = 16u << 20, max_queued_tokens = 0;
    double mem_util = 0.5, shutdown_timeout = 30, stats_interval = 5;
    bool prefix = false, no_prefix = false, no_log_requests = false, auth_all = false;
    const cli_opt opts[] = {
        {"--host", NULL, CLI_STR, &host, "bind address (default 127.0.0.1; 0.0.0.0 for all)"},
        {"--port", NULL, CLI_INT, &port, "TCP port (default 8000)", NULL, 0, 65535},
        {"--api-key", NULL, CLI_STR, &api_key,
         "require 'Authorization: Bearer KEY' (or env CLLM_API_KEY / VLLM_API_KEY)"},
        {"--served-model-name", NULL, CLI_STR, &name,
         "model name in the API and metric labels (default: directory name)"},
        {"--max-model-len", "-c", CLI_INT, &max_model_len,
         "prompt + output tokens per request (0 = model/memory limit)", NULL, 0, 1e9},
        {"--max-num-seqs", "-np", CLI_INT, &max_seqs,
         "concurrently running sequences (default 256)", NULL, 1, 1e6},
        {"--max-num-batched-tokens", "-b", CLI_INT, &max_batched,
         "token budget per engine step (default 2048)", NULL, 1, 1e9},
        {"--block-size", NULL, CLI_INT, &block, "KV block size in tokens (default 16)", NULL, 1,
         65536},
        {"--kv-cache-memory", NULL, CLI_SIZE, &kv_bytes,
         "KV cache bytes (e.g. 4GiB; default from --memory-utilization)"},
        {"--memory-utilization", "--gpu-memory-utilization", CLI_FLOAT, &mem_util,
         "share of RAM for weights + KV + state (default 0.5)", NULL, 0.01, 1},
        {"--enable-prefix-caching", NULL, CLI_FLAG, &prefix,
         "reuse cached prompt prefixes (default on)"},
        {"--no-enable-prefix-caching", NULL, CLI_FLAG, &no_prefix, "disable prefix caching"},
        {"--threads", "-t", CLI_INT, &threads, "compute threads (0 = all cores)", NULL, 0, 4096},
        {"--max-num-queued-reqs", NULL, CLI_INT, &max_queued,
         "waiting requests before 429 (0 = unbounded)", NULL, 0, 1e9},
        {"--max-queued-tokens", "--max-num-queued-tokens", CLI_SIZE, &max_queued_tokens,
         "prompt tokens of not-yet-started requests before 429 (0 = off)"},
        {"--max-body-size", NULL, CLI_SIZE, &max_body,
         "largest request body; above it 413 (default 16MiB)"},
        {"--max-logprobs", NULL, CLI_INT, &max_logprobs,
         "largest logprobs / top_logprobs (default 20)", NULL, 0, 1000},
        {"--shutdown-timeout", NULL, CLI_FLOAT, &shutdown_timeout,
         "seconds to let in-flight requests finish on SIGTERM (default 30; 0 = abort)", NULL, 0,
         1e9},
        {"--allowed-origins", NULL, CLI_STR, &origins,
         "CORS Access-Control-Allow-Origin value (e.g. '*'); default no CORS"},
        {"--default-chat-template-kwargs", NULL, CLI_STR, &kwargs,
         "JSON object merged under each request's chat_template_kwargs"},
        {"--disable-log-requests", NULL, CLI_FLAG, &no_log_requests,
         "no access log line per request"},
        {"--stats-interval", NULL, CLI_FLOAT, &stats_interval,
         "seconds between throughput log lines (default 5; 0 = off)", NULL, 0, 86400},
        {"--http-threads", NULL, CLI_INT, &http_threads, "HTTP event-loop threads (default 2)",
         NULL, 1, 256},
        {"--auth-health", NULL, CLI_FLAG, &auth_all,
         "require the API key on /health, /metrics and /version too"},
        {"--log-format", NULL, CLI_CHOICE, &log_format, "log lines as text or JSON objects",
         "text|json"},
        {0}};
    const cli_spec spec = {"serve",
                           "MODEL [options]",
                           "OpenAI- and vLLM-compatible HTTP server: /v1/completions, "
                           "/v1/chat/completions, /v1/models, "
                           "/tokenize, /detokenize, /generate, /health, /metrics, /version.",
                           opts,
                           1,
                           1};
    const char *pos[1];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    if (log_format) cllm_log_set_format_name(log_format);
    if (!api_key) api_key = getenv("CLLM_API_KEY");
    if (!api_key) api_key = getenv("VLLM_API_KEY");
    if (!name) {
        const char *p = pos[0] + strlen(pos[0]);
        while (p > pos[0] && p[-1] == '/') p--;
        const char *e = p;
        while (p > pos[0] && p[-1] != '/') p--;
        static char base[256];
        snprintf(base, sizeof(base), "%.*s", (int)(e - p), p);
        name = base[0] ? base : "cllm";
    }

    /* Every thread created from here on inherits the blocked signals; main waits for them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    cllm_engine *engine = NULL;
    cllm_server_engine ops;
    cllm_server_engine_real(&ops, &engine);
    cllm_server_opts so;
    cllm_server_opts_defaults(&so);
    so.host = host;
    so.port = (int)port;
    so.api_key = api_key && *api_key ? api_key : NULL;
    so.auth_public_health = !auth_all;
    so.served_model_name = name;
    so.model_dir = pos[0];
    so.allowed_origins = origins;
    so.max_body_size = max_body;
    so.max_num_queued_reqs = (int)max_queued;
    so.max_queued_tokens = max_queued_tokens;
    so.max_logprobs = (int)max_logprobs;
    so.stats_interval_s = stats_interval;
    so.access_log = !no_log_requests;
    so.n_threads = (int)http_threads;
    so.default_chat_template_kwargs = kwargs;
    cllm_server *srv;
    cllm_error err = {0};
    if (cllm_server_start(&so, &ops, &srv, &err) != CLLM_OK) {
        fprintf(stderr, "cllm serve: %s\n", err.msg);
        return 1;
    }

    cllm_engine_opts eo;
    cllm_engine_opts_defaults(&eo);
    eo.model_dir = pos[0];
    eo.n_threads = (int)threads;
    eo.max_model_len = (int)max_model_len;
    eo.max_num_seqs = (int)max_seqs;
    eo.max_num_batched_tokens = (int)max_batched;
    eo.block_size = (int)block;
    eo.kv_cache_bytes = kv_bytes;
    eo.memory_utilization = mem_util;
    eo.enable_prefix_caching = !no_prefix;
    (void)prefix;
    cllm_engine *e = NULL;
    if (cllm_engine_create(&eo, &e, &err) != CLLM_OK) {
        fprintf(stderr, "cllm serve: %s\n", err.msg);
        cllm_server_stop(srv);
        return 1;
    }
    __atomic_store_n(&engine, e, __ATOMIC_RELEASE);
    cllm_server_set_ready(srv, true);
    LOG_INFO("ready: %s (%s)", name, pos[0]);

    /* SIGHUP is ignored: logs go to stderr (nothing to reopen; the supervisor owns the file), and
     * its default action would kill the server when the controlling terminal goes away. */
    int sig = 0;
    while (sigwait(&sigs, &sig) == 0 && sig == SIGHUP) LOG_INFO("SIGHUP received: ignored");
    LOG_INFO("%s received: draining (up to %.0f s)", sig == SIGINT ? "SIGINT" : "SIGTERM",
             shutdown_timeout);
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, second_signal, &sigs) == 0) pthread_detach(watcher);
    int cancelled = cllm_server_drain(srv, shutdown_timeout);
    cllm_server_stop(srv);
    cllm_engine_free(e);
    LOG_INFO("shut down cleanly (%d request(s) cancelled)", cancelled);
    return 0;
}
