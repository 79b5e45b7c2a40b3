/* `cllm serve MODEL`: the OpenAI- and vLLM-compatible HTTP server (server/server.h) over the
 * engine (engine/engine.h). Starts listening first (/health answers 503 while the model loads),
 * loads the engine, then serves until SIGTERM/SIGINT, when it drains: stops admitting, lets
 * in-flight requests finish for up to --shutdown-timeout seconds, cancels the rest, exits 0.
 * A second SIGINT during the drain exits 130 at once; SIGHUP is logged and ignored.
 *
 * vLLM's launch line works as written (`cllm serve --model M --tokenizer T
 * --tensor-parallel-size 1 --max-model-len 4096 --gpu-memory-utilization 0.9 --enforce-eager ...`):
 * flags that only mean something on a GPU are accepted and logged as having no effect, flags cllm
 * cannot honour are refused naming them, and the checks vLLM does at start (max_model_len above
 * the model's, no tokenizer, quantization not matching the checkpoint, port in use) fail here
 * before `ready`, exit 1.
 *
 * Phases: serve_parse (flag table, env) -> serve_check (the refusals, against config.json) ->
 * serve_start (listen, load) -> serve_wait (signals, drain). */
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/log.h"
#include "doctor/doctor.h"
#include "engine/engine.h"
#include "model/config.h"
#include "model/forward.h"
#include "server/server.h"
#include "cli/cli.h"
#include "cli/options.h"
#include "cli/cli_spec.h"
#include "cli/commands.h"
#include "cli/serve_card.h"
#include "cli/serve_tp.h"
#include "cli/serve_vllm.h"
#include "dist/dist.h"

typedef struct serve_args {
    const char *model, *model_flag, *tokenizer, *host, *api_key, *origins, *log_format, *kwargs;
    const char *dtype, *kv_dtype, *ssm_dtype, *gdn_prefill, *act16, *chat_template_arg,
        *tool_parser, *reasoning_parser, *quant;
    /* vLLM flags with an effect here (the rest: serve_vllm.c) */
    const char *gen_config, *gen_override, *uvicorn_level, *list_vllm, *access_skip;
    bool no_log_stats, no_uvicorn_access, force_usage;
    serve_vstate vllm; /* the vLLM flags cllm accepts as no-ops or refuses */
    cli_list names;
    long port, max_model_len, max_seqs, max_batched, block, threads, max_queued, http_threads,
        max_logprobs, tp, pp, seed;
    uint64_t kv_bytes, max_body, max_queued_tokens;
    double mem_util, gpu_mem_util, swap_space, shutdown_timeout, stats_interval;
    bool no_console, console_prompts; /* web console (serve_card.c, server/console.c) */
    long console_requests;            /* 0 = the server's default (1000) */
    bool prefix, no_prefix, no_log_requests, auth_all, enforce_eager, trust_remote_code,
        auto_tool_choice, skip_tokenizer, seed_set;
    /* connection limits against hostile clients (server/srv_conn.c) */
    long max_conns, max_conns_ip;
    double header_timeout, body_timeout, keepalive_timeout, send_timeout;
    /* derived by serve_check */
    char *chat_template; /* file contents (malloc) */
    const char *alias_ptrs[CLI_LIST_MAX];
    char base_name[256];
    const char *spec_json; /* --speculative-config */
    /* image input: --limit-mm-per-prompt, --allowed-local-media-path, --mm-processor-kwargs */
    const char *mm_limit, *media_path, *mm_kwargs;
    long mm_images;
    cllm_spec_opts spec;
} serve_args;

/* Runs during the drain: a second SIGINT ends the process at once (the operator pressed Ctrl-C
 * twice and does not want to wait for in-flight requests); SIGTERM and SIGHUP repeated during
 * the drain change nothing (the drain is already under way; a supervisor escalates with SIGKILL).
 */
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

/* ---- phase 1: flags and environment ---- */

/* vLLM reads these environment variables for flags cllm has; a flag given wins. */
static void serve_env(serve_args *a, bool stats_flag) {
    const cllm_opts *o = cli_opts(); /* cli/options.c read them */
    if (!a->api_key) a->api_key = o->api_key;
    if (o->log_stats_interval >= 0 && !stats_flag) a->stats_interval = o->log_stats_interval;
    const char *v = o->vllm_logging_level;
    if (v && cllm_log_set_level_name(v) != 0) {
        /* vLLM's names are upper case (INFO, DEBUG); ours lower */
        char low[16];
        size_t i = 0;
        for (; v[i] && i + 1 < sizeof(low); i++) low[i] = (char)(v[i] | 0x20);
        low[i] = 0;
        if (cllm_log_set_level_name(low) != 0)
            LOG_WARN("VLLM_LOGGING_LEVEL=%s: unknown level, ignored", v);
    }
}

/* After the flags: the model path (the MODEL argument pos0 or --model), the log format, and the
 * flags that only switch others (--disable-log-stats, the uvicorn log flags). 0, or 2 on a usage
 * error (printed). */
static int serve_parsed(serve_args *a, const char *pos0) {
    if (pos0 && a->model_flag && strcmp(pos0, a->model_flag)) {
        fprintf(stderr, "cllm serve: MODEL '%s' and --model '%s' differ; give one\n", pos0,
                a->model_flag);
        return 2;
    }
    a->model = pos0 ? pos0 : a->model_flag;
    if (!a->model) {
        fprintf(stderr, "cllm serve: missing MODEL (usage: cllm serve MODEL [options], or "
                        "--model MODEL)\n");
        return 2;
    }
    if (a->log_format) cllm_log_set_format_name(a->log_format);
    if (a->no_log_stats) a->stats_interval = 0;
    bool stats_flag = a->stats_interval >= 0;
    if (!stats_flag) a->stats_interval = 5;
    if (a->no_uvicorn_access) a->no_log_requests = true;
    if (a->uvicorn_level &&
        (!strcmp(a->uvicorn_level, "critical") || !strcmp(a->uvicorn_level, "error") ||
         !strcmp(a->uvicorn_level, "warning")))
        a->no_log_requests = true;
    a->seed_set = a->seed >= 0;
    serve_env(a, stats_flag);
    return 0;
}

#define BATCHED_HELP                                                                               \
    "token budget per engine step (default " CLI_STR_OF(CLLM_MAX_NUM_BATCHED_TOKENS_DEFAULT) ")"

/* serve's own flags (opts, n_own of them), then the vLLM flags it has no own meaning for */
static int serve_run_table(const cli_opt *opts, size_t n_own, serve_args *a, int argc,
                           char **argv) {
    /* the vLLM flags cllm has no own meaning for follow the table above (serve_vllm.c) */
    cli_opt all[512];
    if (n_own + 256 > sizeof(all) / sizeof(all[0])) {
        fprintf(stderr, "cllm serve: the flag table does not fit\n");
        return 1;
    }
    memcpy(all, opts, (n_own + 1) * sizeof(*opts));
    int n_all = (int)n_own;
    if (serve_vllm_add_opts(all, &n_all, (int)(sizeof(all) / sizeof(all[0])), &a->vllm)) {
        fprintf(stderr, "cllm serve: the vLLM flag table does not fit\n");
        return 1;
    }
    const cli_spec spec = {"serve",
                           "MODEL [options]",
                           "OpenAI- and vLLM-compatible HTTP server: /v1/completions, "
                           "/v1/chat/completions, /v1/responses, /v1/models[/ID], "
                           "/tokenize, /detokenize, /generate, /health, /metrics, /version; "
                           "llama-server's /completion, /props, /slots.",
                           all,
                           0,
                           1};
    const char *pos[1] = {NULL};
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? -1 : rc;
    if (a->list_vllm) {
        if (serve_vllm_print(opts, !strcmp(a->list_vllm, "tsv"))) return 1;
        return -1;
    }
    return serve_parsed(a, np ? pos[0] : NULL);
}

static int serve_parse(int argc, char **argv, serve_args *a) {
    *a = (serve_args){.host = "127.0.0.1",
                      .port = 8000,
                      .max_seqs = 256,
                      .max_batched = CLLM_MAX_NUM_BATCHED_TOKENS_DEFAULT,
                      .block = 16,
                      .http_threads = 2,
                      .max_logprobs = 20,
                      .tp = 1,
                      .pp = 1,
                      .seed = -1,
                      .max_body = 16u << 20,
                      .mem_util = 0.5,
                      .gpu_mem_util = -1,
                      .swap_space = -1,
                      .shutdown_timeout = 30,
                      .stats_interval = -1,
                      .max_conns = 1024,
                      .header_timeout = 60,
                      .body_timeout = 60,
                      .keepalive_timeout = 20,
                      .send_timeout = 30};
    const cli_opt opts[] = {
        {"--model", "-m", CLI_STR, &a->model_flag,
         "model directory (same as the MODEL argument; -m as llama-server)"},
        {"--tokenizer", NULL, CLI_STR, &a->tokenizer,
         "directory with tokenizer.json (default: the model directory)"},
        {"--skip-tokenizer-init", NULL, CLI_FLAG, &a->skip_tokenizer,
         "load no tokenizer: prompts as token ids only; text routes answer 400"},
        {"--host", NULL, CLI_STR, &a->host, "bind address (default 127.0.0.1; 0.0.0.0 for all)"},
        {"--port", NULL, CLI_INT, &a->port, "TCP port (default 8000)", NULL, 0, 65535},
        {"--api-key", NULL, CLI_STR, &a->api_key,
         "require 'Authorization: Bearer KEY' (or env CLLM_API_KEY / VLLM_API_KEY)"},
        {"--served-model-name", NULL, CLI_LIST, &a->names,
         "model name(s) in the API; the first in responses and metric labels (default: directory "
         "name)"},
        {"--max-model-len", "-c", CLI_INT, &a->max_model_len,
         "prompt + output tokens per request (0 = model/memory limit; above the model's "
         "max_position_embeddings is refused)",
         NULL, 0, 1e9},
        {"--max-num-seqs", "-np", CLI_INT, &a->max_seqs,
         "concurrently running sequences (default 256)", NULL, 1, 1e6},
        {"--max-num-batched-tokens", "-b", CLI_INT, &a->max_batched, BATCHED_HELP, NULL, 1, 1e9},
        {"--block-size", NULL, CLI_INT, &a->block, "KV block size in tokens (default 16)", NULL, 1,
         65536},
        {"--kv-cache-memory", "--kv-cache-memory-bytes", CLI_SIZE, &a->kv_bytes,
         "KV cache bytes (e.g. 4GiB; default from --memory-utilization)"},
        {"--kv-cache-dtype", NULL, CLI_STR, &a->kv_dtype,
         "KV cache element type: auto (= float32), float32/fp32, bfloat16/bf16; float16, fp8*, "
         "int8 and nvfp4 are refused"},
        {"--mamba-ssm-cache-dtype", NULL, CLI_STR, &a->ssm_dtype,
         "Gated DeltaNet recurrent state element type: auto (= the checkpoint's mamba_ssm_dtype, "
         "float32), float32/fp32, bfloat16/bf16 (half the state memory and traffic); float16 is "
         "refused"},
        {"--generation-config", NULL, CLI_STR, &a->gen_config,
         "sampling defaults: auto (the model's generation_config.json), vllm (neutral), or a "
         "folder with a generation_config.json"},
        {"--override-generation-config", NULL, CLI_STR, &a->gen_override,
         "JSON object over the generation config, e.g. '{\"temperature\": 0.6}'"},
        {"--act16", NULL, CLI_CHOICE, &a->act16, CLI_ACT16_HELP, CLI_ACT16_CHOICES},
        {"--speculative-config", NULL, CLI_STR, &a->spec_json,
         "speculative decoding as vLLM's JSON, e.g. '{\"method\": \"ngram\", "
         "\"num_speculative_tokens\": 4}' (docs/internals/spec.md)"},
        {"--gdn-prefill", NULL, CLI_CHOICE, &a->gdn_prefill,
         "Gated DeltaNet prefill: token-by-token recurrence (default) or the chunked form",
         "recurrent|chunked"},
        {"--memory-utilization", NULL, CLI_FLOAT, &a->mem_util,
         "share of RAM for weights + KV + state (default 0.5)", NULL, 0.01, 1},
        {"--gpu-memory-utilization", NULL, CLI_FLOAT, &a->gpu_mem_util,
         "accepted for vLLM command lines; no effect on a CPU (RAM share: --memory-utilization)",
         NULL, 0, 1},
        {"--swap-space", NULL, CLI_FLOAT, &a->swap_space,
         "accepted for vLLM command lines; no effect (the KV cache is in RAM already)", NULL, 0,
         1e6},
        {"--enforce-eager", NULL, CLI_FLAG, &a->enforce_eager,
         "accepted for vLLM command lines; no effect (no CUDA graphs on a CPU)"},
        {"--trust-remote-code", NULL, CLI_FLAG, &a->trust_remote_code,
         "accepted for vLLM command lines; no effect (cllm runs no model code from the "
         "checkpoint)"},
        {"--tensor-parallel-size", "-tp", CLI_INT, &a->tp,
         "processes splitting each layer: rank 0 serves HTTP, the others follow its engine "
         "(under mpirun -np N, or re-launched through mpirun)",
         NULL, 1, 4096},
        {"--pipeline-parallel-size", "-pp", CLI_INT, &a->pp, "pipeline stages (only 1)", NULL, 1,
         4096},
        {"--dtype", NULL, CLI_CHOICE, &a->dtype,
         "weights as stored: auto, or the checkpoint's own dtype (no conversion at load)",
         "auto|bfloat16|float16|half|float32|float"},
        {"--quantization", "-q", CLI_CHOICE, &a->quant,
         "checked against the checkpoint's quantization_config (detected anyway)",
         "gptq|compressed-tensors|none"},
        {"--seed", NULL, CLI_INT, &a->seed,
         "requests without a seed get SEED + their arrival number (repeatable runs)", NULL, 0,
         4.6e18},
        {"--chat-template", "--chat-template-file", CLI_STR, &a->chat_template_arg,
         "Jinja chat template file (or inline template text) replacing the tokenizer's"},
        {"--default-chat-template-kwargs", NULL, CLI_STR, &a->kwargs,
         "JSON object merged under each request's chat_template_kwargs"},
        {"--limit-mm-per-prompt", NULL, CLI_STR, &a->mm_limit,
         "images per prompt, as vLLM: '{\"image\": N}' (default 999; video is refused)"},
        {"--allowed-local-media-path", NULL, CLI_STR, &a->media_path,
         "folder whose files requests may name as file:// image URLs"},
        {"--mm-processor-kwargs", NULL, CLI_STR, &a->mm_kwargs,
         "image processor defaults for every request: '{\"min_pixels\": N, \"max_pixels\": M}'"},
        {"--enable-auto-tool-choice", NULL, CLI_FLAG, &a->auto_tool_choice,
         "accepted: tool calls are parsed whenever a request has tools"},
        {"--tool-call-parser", NULL, CLI_CHOICE, &a->tool_parser,
         "tool-call format (both are always recognised)", "qwen3_xml|qwen3_coder|hermes"},
        {"--reasoning-parser", NULL, CLI_CHOICE, &a->reasoning_parser,
         "reasoning split (on when the template has <think>)", "qwen3"},
        {"--enable-prefix-caching", NULL, CLI_FLAG, &a->prefix,
         "reuse cached prompt prefixes (default on)"},
        {"--no-enable-prefix-caching", NULL, CLI_FLAG, &a->no_prefix, "disable prefix caching"},
        {"--threads", "-t", CLI_INT, &a->threads, "compute threads (0 = all cores)", NULL, 0, 4096},
        {"--max-num-queued-reqs", NULL, CLI_INT, &a->max_queued,
         "waiting requests before 429 (0 = unbounded)", NULL, 0, 1e9},
        {"--max-queued-tokens", "--max-num-queued-tokens", CLI_SIZE, &a->max_queued_tokens,
         "prompt tokens of not-yet-started requests before 429 (0 = off)"},
        {"--max-body-size", NULL, CLI_SIZE, &a->max_body,
         "largest request body; above it 413 (default 16MiB)"},
        {"--max-logprobs", NULL, CLI_INT, &a->max_logprobs,
         "largest logprobs / top_logprobs (default 20)", NULL, 0, 1000},
        {"--shutdown-timeout", NULL, CLI_FLOAT, &a->shutdown_timeout,
         "seconds to let in-flight requests finish on SIGTERM (default 30; 0 = abort)", NULL, 0,
         1e9},
        {"--allowed-origins", NULL, CLI_STR, &a->origins,
         "CORS Access-Control-Allow-Origin value: '*' (no credentials) or one origin (with "
         "Allow-Credentials); default no CORS"},
        {"--disable-log-requests", NULL, CLI_FLAG, &a->no_log_requests,
         "no access log line per request"},
        {"--disable-uvicorn-access-log", NULL, CLI_FLAG, &a->no_uvicorn_access,
         "no access log line per request (vLLM's name)"},
        {"--disable-access-log-for-endpoints", NULL, CLI_STR, &a->access_skip,
         "comma-separated paths with no access line, e.g. /health,/metrics"},
        {"--uvicorn-log-level", NULL, CLI_CHOICE, &a->uvicorn_level,
         "critical, error or warning turn the access log off (its lines are INFO); info, debug "
         "and trace keep it",
         "critical|error|warning|info|debug|trace"},
        {"--enable-force-include-usage", NULL, CLI_FLAG, &a->force_usage,
         "every completions/chat stream ends with a usage chunk, as with "
         "stream_options.include_usage"},
        {"--disable-log-stats", NULL, CLI_FLAG, &a->no_log_stats,
         "no periodic throughput line (as --stats-interval 0; /metrics is unaffected)"},
        {"--stats-interval", NULL, CLI_FLOAT, &a->stats_interval,
         "seconds between throughput log lines (default 5, env VLLM_LOG_STATS_INTERVAL; 0 = off)",
         NULL, 0, 86400},
        {"--http-threads", NULL, CLI_INT, &a->http_threads, "HTTP event-loop threads (default 2)",
         NULL, 1, 256},
        /* connection limits (README "Connection limits and deadlines") */
        {"--max-connections", NULL, CLI_INT, &a->max_conns,
         "open HTTP connections; more are closed at accept (default 1024)", NULL, 1, 1e6},
        {"--max-connections-per-ip", NULL, CLI_INT, &a->max_conns_ip,
         "open connections per client address (default a quarter of --max-connections)", NULL, 0,
         1e6},
        {"--client-header-timeout", NULL, CLI_FLOAT, &a->header_timeout,
         "seconds for a whole request head, from connect or the previous response (default 60; "
         "0 = none)",
         NULL, 0, 1e6},
        {"--client-body-timeout", NULL, CLI_FLOAT, &a->body_timeout,
         "seconds for a whole request body after its head (default 60; 0 = none)", NULL, 0, 1e6},
        {"--timeout-keep-alive", NULL, CLI_FLOAT, &a->keepalive_timeout,
         "seconds an idle connection stays open (default 20; vLLM's uvicorn: 5)", NULL, 1, 1e6},
        {"--send-timeout", NULL, CLI_FLOAT, &a->send_timeout,
         "seconds a client may accept no byte of a response; a stream is then cancelled "
         "(default 30)",
         NULL, 1, 1e6},
        {"--auth-health", NULL, CLI_FLAG, &a->auth_all,
         "require the API key on /health, /metrics and /version too"},
        {"--log-format", NULL, CLI_CHOICE, &a->log_format, "log lines as text or JSON objects",
         "text|json"},
        {"--no-console", NULL, CLI_FLAG, &a->no_console,
         "no web console at / and /console/ (chat, dashboard, request log)"},
        {"--console-requests", NULL, CLI_INT, &a->console_requests,
         "requests kept for the console's request log (default 1000)", NULL, 1, 1000000},
        {"--console-log-prompts", NULL, CLI_FLAG, &a->console_prompts,
         "keep prompt text in the console's request log (default: counts and times only)"},
        {"--list-vllm-flags", NULL, CLI_CHOICE, &a->list_vllm,
         "print every vLLM serve flag and what cllm does with it (md: docs/vllm-flags.md); the "
         "ones not listed here are accepted as no-ops or refused with the reason",
         "md|tsv"},
        {0}};
    return serve_run_table(opts, sizeof(opts) / sizeof(opts[0]) - 1, a, argc, argv);
}

/* ---- phase 2: the refusals vLLM makes at start, before anything listens ---- */

static int refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int refuse(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cllm serve: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 1;
}

static bool same_dtype(const char *flag, const char *file) {
    if (!strcmp(flag, "half")) flag = "float16";
    if (!strcmp(flag, "float")) flag = "float32";
    return !strcmp(flag, file);
}

/* quantization_config.quant_method ("none" when absent) and the stored dtype (top level or
 * under text_config, "" when not written) of config.json. */
static void file_facts(const char *dir, char *qm, size_t qcap, char *dt, size_t dcap) {
    snprintf(qm, qcap, "none");
    dt[0] = 0;
    char path[4096];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    json_t *j = json_load_file(path, 0, NULL);
    json_t *q = json_object_get(json_object_get(j, "quantization_config"), "quant_method");
    if (json_is_string(q)) snprintf(qm, qcap, "%s", json_string_value(q));
    json_t *tc = json_object_get(j, "text_config");
    const char *keys[2] = {"dtype", "torch_dtype"};
    json_t *objs[2] = {j, tc};
    for (int o = 0; o < 2 && !dt[0]; o++)
        for (int k = 0; k < 2 && !dt[0]; k++) {
            json_t *v = json_object_get(objs[o], keys[k]);
            if (json_is_string(v)) snprintf(dt, dcap, "%s", json_string_value(v));
        }
    json_decref(j);
}

static int check_model_config(serve_args *a) {
    cllm_config cf;
    cllm_error err = {0};
    if (cllm_config_load(a->model, &cf, &err) != CLLM_OK) return refuse("%s", err.msg);
    int mpe = cf.max_position_embeddings;
    cllm_config_free(&cf);
    char qm[64], dt[32];
    file_facts(a->model, qm, sizeof(qm), dt, sizeof(dt));
    if (a->max_model_len > 0 && mpe > 0 && a->max_model_len > mpe)
        return refuse("User-specified max_model_len (%ld) is greater than the derived "
                      "max_model_len (max_position_embeddings=%d in model's config.json). cllm "
                      "does not run positions past it (VLLM_ALLOW_LONG_MAX_MODEL_LEN is not "
                      "honoured); use --max-model-len %d or less.",
                      a->max_model_len, mpe, mpe);
    if (a->dtype && strcmp(a->dtype, "auto") && !same_dtype(a->dtype, dt[0] ? dt : "unknown"))
        return refuse("--dtype %s: the checkpoint stores %s and cllm runs weights as stored "
                      "(activations in float32); use --dtype auto, or convert the checkpoint",
                      a->dtype, dt[0] ? dt : "an unrecorded dtype");
    if (a->quant && strcmp(qm, a->quant))
        return refuse("Quantization method specified in the model config (%s) does not match the "
                      "quantization method specified in the `quantization` argument (%s).",
                      qm, a->quant);
    return 0;
}

static int check_tokenizer(serve_args *a) {
    if (a->skip_tokenizer) return 0;
    const char *dir = a->tokenizer ? a->tokenizer : a->model;
    if (a->tokenizer && cli_check_model_dir("serve --tokenizer", &a->tokenizer)) return 1;
    char path[4096];
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    if (access(path, R_OK) != 0)
        return refuse("Can't load tokenizer for '%s': no readable tokenizer.json there. Pass "
                      "--tokenizer DIR (a directory with tokenizer.json and "
                      "tokenizer_config.json), or --skip-tokenizer-init to serve token-id "
                      "prompts only.",
                      dir);
    return 0;
}

static int load_chat_template(serve_args *a) {
    const char *t = a->chat_template_arg;
    if (!t) return 0;
    size_t n = 0;
    cllm_error err = {0};
    char *text = NULL;
    if (access(t, F_OK) == 0) {
        text = cllm_read_file(t, 16u << 20, &n, &err);
        if (!text) return refuse("--chat-template %s: %s", t, err.msg);
    } else if (strstr(t, "{{") || strstr(t, "{%")) {
        text = strdup(t); /* vLLM also takes the template itself */
    } else {
        return refuse("--chat-template %s: no such file (and not a Jinja template)", t);
    }
    if (!text) return refuse("out of memory");
    a->chat_template = text;
    return 0;
}

/* Logs what a vLLM flag means here, so nobody wonders whether it took effect. */
static void log_no_ops(const serve_args *a) {
    if (a->gpu_mem_util >= 0)
        LOG_INFO("--gpu-memory-utilization %.2f: no GPU, no effect (RAM share for weights + KV is "
                 "--memory-utilization %.2f)",
                 a->gpu_mem_util, a->mem_util);
    if (a->swap_space >= 0)
        LOG_INFO("--swap-space %.0f: no effect (the KV cache lives in RAM)", a->swap_space);
    if (a->enforce_eager) LOG_INFO("--enforce-eager: no effect (no CUDA graphs on a CPU)");
    if (a->trust_remote_code)
        LOG_INFO("--trust-remote-code: no effect (cllm runs no code from the checkpoint)");
    if (a->auto_tool_choice || a->tool_parser)
        LOG_INFO("tool calls: parsed whenever a request has tools (Qwen3 XML and hermes JSON)");
}

/* --kv-cache-dtype: vLLM's names for what the engine stores (float32, bfloat16); vLLM's other
 * choices (float16, fp8*, int8, nvfp4) are not implemented, so they are refused by name with the
 * reason rather than silently run in float32. */
static int check_kv_dtype(serve_args *a) {
    const char *v = a->kv_dtype;
    if (!v) return 0;
    static const char *const ok[] = {"auto", "fp32", "float32", "float", "bfloat16", "bf16"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (!strcmp(v, ok[i])) return 0;
    if (!strncmp(v, "fp8", 3) || !strcmp(v, "int8") || !strcmp(v, "int4") || !strcmp(v, "nvfp4"))
        return refuse("--kv-cache-dtype %s: quantized KV caches (fp8, int8, nvfp4) are not "
                      "implemented on the CPU; use auto (float32) or bfloat16 (half the memory)",
                      v);
    if (!strcmp(v, "float16") || !strcmp(v, "fp16") || !strcmp(v, "half"))
        return refuse("--kv-cache-dtype %s: a float16 KV cache is not implemented on the CPU; "
                      "bfloat16 takes the same memory (use bfloat16, or auto for float32)",
                      v);
    return refuse("--kv-cache-dtype %s: unknown; use auto (float32), float32 or bfloat16", v);
}

static bool is_bf16(const char *v) {
    return v && (!strcmp(v, "bfloat16") || !strcmp(v, "bf16"));
}

/* --mamba-ssm-cache-dtype: vLLM's names for the recurrent state's type. float16 is refused by
 * name, and so is bfloat16 beside --gdn-prefill chunked (whose WY form updates a float32 state
 * in place). */
static int check_ssm_dtype(serve_args *a) {
    const char *v = a->ssm_dtype;
    if (!v) return 0;
    if (!strcmp(v, "float16") || !strcmp(v, "fp16") || !strcmp(v, "half"))
        return refuse("--mamba-ssm-cache-dtype %s: a float16 recurrent state is not implemented; "
                      "bfloat16 takes the same memory (use bfloat16, or auto for float32)",
                      v);
    if (is_bf16(v)) {
        if (a->gdn_prefill && cllm_gdn_prefill_parse(a->gdn_prefill) == CLLM_GDN_CHUNKED)
            return refuse("--mamba-ssm-cache-dtype %s with --gdn-prefill chunked: the chunked "
                          "prefill needs a float32 recurrent state",
                          v);
        return 0;
    }
    static const char *const ok[] = {"auto", "fp32", "float32", "float"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        if (!strcmp(v, ok[i])) return 0;
    return refuse("--mamba-ssm-cache-dtype %s: unknown; use auto (float32), float32 or bfloat16",
                  v);
}

/* --generation-config DIR must hold a generation_config.json (vLLM would fall back to its
 * neutral defaults without a word); --override-generation-config is checked on a scratch copy so
 * a bad one fails before the server listens. */
static int check_gen_config(serve_args *a) {
    const char *g = a->gen_config;
    if (g && strcmp(g, "auto") && strcmp(g, "vllm")) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/generation_config.json", g);
        if (access(path, R_OK) != 0)
            return refuse("--generation-config %s: no readable generation_config.json there (use "
                          "auto, vllm, or a folder that has one)",
                          g);
    }
    if (a->gen_override) {
        cllm_gen_config scratch;
        cllm_gen_config_neutral(&scratch);
        cllm_error err = {0};
        if (cllm_gen_config_override(&scratch, a->gen_override, &err) != CLLM_OK)
            return refuse("%s", err.msg);
    }
    return 0;
}

/* vLLM's multimodal flags (server/srv_image.c applies them) */
static int check_mm(serve_args *a) {
    a->mm_images = 999;
    if (a->mm_limit) {
        json_t *j = json_loads(a->mm_limit, 0, NULL);
        const char *k;
        json_t *v;
        if (!json_is_object(j)) {
            json_decref(j);
            return refuse("--limit-mm-per-prompt must be a JSON object such as '{\"image\": 2}'");
        }
        json_object_foreach(j, k, v) {
            bool img = !strcmp(k, "image");
            if (!json_is_integer(v) || json_integer_value(v) < 0 ||
                json_integer_value(v) > 100000 || (!img && json_integer_value(v) != 0)) {
                json_decref(j);
                return refuse("--limit-mm-per-prompt: '%s' %s", k,
                              img ? "must be an integer in [0, 100000]"
                                  : "input is not supported (only images; give it 0)");
            }
            if (img) a->mm_images = (long)json_integer_value(v);
        }
        json_decref(j);
    }
    if (a->mm_kwargs) {
        json_t *j = json_loads(a->mm_kwargs, 0, NULL);
        bool ok = json_is_object(j);
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) ok &= (!strcmp(k, "min_pixels") || !strcmp(k, "max_pixels")) &&
                                           json_is_integer(v) && json_integer_value(v) >= 1 &&
                                           json_integer_value(v) <= (1LL << 28);
        json_decref(j);
        if (!ok)
            return refuse("--mm-processor-kwargs must be a JSON object of min_pixels / max_pixels "
                          "(integers in [1, 268435456])");
    }
    struct stat sb;
    if (a->media_path && (stat(a->media_path, &sb) || !S_ISDIR(sb.st_mode)))
        return refuse("--allowed-local-media-path %s is not a folder", a->media_path);
    return 0;
}

static int serve_check(serve_args *a) {
    char smsg[256];
    if (cli_spec_parse(a->spec_json, false, &a->spec, smsg, sizeof(smsg)) != 0)
        return refuse("%s", smsg);
    if (serve_vllm_check(&a->vllm) || check_mm(a)) return 1;
    const char *given = a->model; /* a .gguf file is replaced by its private folder */
    if (cli_check_model_dir("serve", &a->model)) return 1;
    if (check_kv_dtype(a) || check_ssm_dtype(a) || check_gen_config(a)) return 1;
    if (a->pp > 1)
        return refuse("--pipeline-parallel-size %ld: pipeline parallelism is not supported (use "
                      "--pipeline-parallel-size 1)",
                      a->pp);
    if (check_model_config(a) || check_tokenizer(a) || load_chat_template(a)) return 1;
    for (int i = 0; i < a->names.n; i++) a->alias_ptrs[i] = a->names.v[i];
    if (!a->names.n) {
        const char *p = given + strlen(given);
        while (p > given && p[-1] == '/') p--;
        const char *e = p;
        while (p > given && p[-1] != '/') p--;
        snprintf(a->base_name, sizeof(a->base_name), "%.*s", (int)(e - p), p);
        if (!a->base_name[0]) snprintf(a->base_name, sizeof(a->base_name), "cllm");
    }
    return 0;
}

/* ---- phase 3: listen, then load ---- */

static void fill_server_opts(const serve_args *a, cllm_server_opts *so) {
    cllm_server_opts_defaults(so);
    so->host = a->host;
    so->port = (int)a->port;
    so->api_key = a->api_key && *a->api_key ? a->api_key : NULL;
    so->auth_public_health = !a->auth_all;
    so->served_model_name = a->names.n ? a->names.v[0] : a->base_name;
    so->model_aliases = a->names.n > 1 ? a->alias_ptrs + 1 : NULL;
    so->n_model_aliases = a->names.n > 1 ? a->names.n - 1 : 0;
    so->model_dir = a->model;
    so->allowed_origins = a->origins;
    so->max_body_size = a->max_body;
    so->max_num_queued_reqs = (int)a->max_queued;
    so->max_queued_tokens = a->max_queued_tokens;
    so->max_logprobs = (int)a->max_logprobs;
    so->stats_interval_s = a->stats_interval;
    so->connection_limit = (unsigned)a->max_conns;
    so->per_ip_connection_limit = (unsigned)a->max_conns_ip;
    so->header_timeout_s = a->header_timeout;
    so->body_timeout_s = a->body_timeout;
    so->keepalive_timeout_s = a->keepalive_timeout;
    so->send_timeout_s = a->send_timeout;
    so->access_log = !a->no_log_requests;
    so->access_log_skip = a->access_skip;
    so->force_include_usage = a->force_usage;
    so->n_threads = (int)a->http_threads;
    so->default_chat_template_kwargs = a->kwargs;
    so->limit_mm_images = (int)a->mm_images;
    so->allowed_local_media_path = a->media_path;
    so->mm_processor_kwargs = a->mm_kwargs;
    so->console = !a->no_console;
    if (a->console_requests > 0) so->console_requests = (int)a->console_requests;
    so->console_log_prompts = a->console_prompts;
    dr_opts dr; /* the console's alerts use `cllm doctor`'s thresholds: one definition */
    dr_opts_default(&dr);
    so->console_alerts.warn_pct = dr.warn_pct, so->console_alerts.crit_pct = dr.crit_pct;
    so->console_alerts.sustain_s = dr.sustain_s;
    so->console_alerts.err_warn_pct = dr.err_warn_pct;
    so->console_alerts.err_crit_pct = dr.err_crit_pct;
    so->console_alerts.mem_warn_pct = dr.mem_warn_pct;
    so->console_alerts.mem_crit_pct = dr.mem_crit_pct;
    so->chat_template = a->chat_template;
    so->has_default_seed = a->seed_set;
    so->default_seed = a->seed_set ? (uint64_t)a->seed : 0;
    so->max_num_seqs = (int)a->max_seqs;
}

static void fill_engine_opts(const serve_args *a, cllm_engine_opts *eo) {
    cllm_engine_opts_defaults(eo);
    eo->fwd = cli_fwd_opts(a->act16);
    eo->model_dir = a->model;
    eo->tokenizer_dir = a->tokenizer;
    eo->skip_tokenizer_init = a->skip_tokenizer;
    eo->n_threads = (int)a->threads;
    eo->max_model_len = (int)a->max_model_len;
    eo->max_num_seqs = (int)a->max_seqs;
    eo->max_num_batched_tokens = (int)a->max_batched;
    eo->block_size = (int)a->block;
    eo->kv_cache_bytes = a->kv_bytes;
    eo->memory_utilization = a->mem_util;
    eo->enable_prefix_caching = !a->no_prefix;
    eo->kv_cache_bf16 = is_bf16(a->kv_dtype);
    eo->ssm_state_bf16 = is_bf16(a->ssm_dtype);
    eo->generation_config = a->gen_config;
    eo->override_generation_config = a->gen_override;
    if (a->gdn_prefill) eo->gdn_prefill = cllm_gdn_prefill_parse(a->gdn_prefill);
    eo->spec = a->spec;
}

/* ---- tensor parallel (cli/serve_tp.h) ---- */

static cllm_server *tp_srv; /* for the failure hook */

/* A rank died or hung (dist/dist.h): every request answers 503 from now on and the process
 * drains (the in-flight requests fail at once: every collective does) and exits non-zero. */
static void tp_failed(const char *msg) {
    char m[320];
    snprintf(m, sizeof(m), "%s; this server cannot run the model any more", msg);
    cllm_server *srv = __atomic_load_n(&tp_srv, __ATOMIC_ACQUIRE);
    if (srv) cllm_server_set_failed(srv, m);
    kill(getpid(), SIGTERM);
}

/* Ranks > 0: no HTTP; the engine runs what rank 0's engine runs until rank 0 closes it. Signals
 * are left to rank 0 (a drain there ends this loop with it). */
static int serve_follower(const serve_args *a, cllm_engine_opts *eo) {
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    eo->skip_tokenizer_init = true; /* text stays on rank 0 */
    cllm_engine *e = NULL;
    cllm_error err = {0};
    if (cllm_engine_create(eo, &e, &err) != CLLM_OK) {
        fprintf(stderr, "cllm serve: rank %d: %s\n", cllm_dist_rank(), err.msg);
        return 1;
    }
    cllm_status rc = serve_tp_follow(e, &err);
    cllm_engine_free(e);
    if (rc != CLLM_OK) fprintf(stderr, "cllm serve: rank %d: %s\n", cllm_dist_rank(), err.msg);
    return rc == CLLM_OK ? 0 : 1;
}

/* ---- phase 4: serve until a signal, then drain ---- */

static int serve_wait(sigset_t *sigs, cllm_server *srv, double shutdown_timeout) {
    /* SIGHUP is ignored: logs go to stderr (nothing to reopen; the supervisor owns the file), and
     * its default action would kill the server when the controlling terminal goes away. */
    int sig = 0;
    while (sigwait(sigs, &sig) == 0 && sig == SIGHUP) LOG_INFO("SIGHUP received: ignored");
    LOG_INFO("%s received: draining (up to %.0f s)",
             sig == SIGINT    ? "SIGINT"
             : sig == SIGUSR1 ? "SIGUSR1"
                              : "SIGTERM",
             shutdown_timeout);
    pthread_t watcher;
    if (pthread_create(&watcher, NULL, second_signal, sigs) == 0) pthread_detach(watcher);
    return cllm_server_drain(srv, shutdown_timeout);
}

int cmd_serve(int argc, char **argv) {
    serve_args a;
    int rc = serve_parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    if (serve_check(&a)) {
        free(a.chat_template);
        return 1;
    }
    log_no_ops(&a);
    if (cllm_dist_active() && cllm_dist_rank() > 0) {
        cllm_engine_opts eo;
        fill_engine_opts(&a, &eo);
        eo.mirror = serve_tp_mirror();
        free(a.chat_template);
        return serve_follower(&a, &eo);
    }

    /* Every thread created from here on inherits the blocked signals; main waits for them. */
    static sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGHUP);
    /* under tensor parallel, mpirun forwards SIGUSR1 to every rank (not SIGTERM, which it turns
     * into killing the job): it drains like SIGTERM; the followers ignore it */
    if (cllm_dist_active()) sigaddset(&sigs, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    cllm_engine *engine = NULL;
    cllm_server_engine ops;
    cllm_server_engine_real(&ops, &engine);
    cllm_server_opts so;
    fill_server_opts(&a, &so);
    cllm_server *srv;
    cllm_error err = {0};
    if (cllm_server_start(&so, &ops, &srv, &err) != CLLM_OK) {
        fprintf(stderr, "cllm serve: %s\n", err.msg);
        free(a.chat_template);
        return 1;
    }
    cllm_engine_opts eo;
    fill_engine_opts(&a, &eo);
    if (cllm_dist_active()) {
        eo.mirror = serve_tp_mirror();
        tp_srv = srv;
        cllm_dist_on_failure(tp_failed);
    }
    cllm_engine *e = NULL;
    if (cllm_engine_create(&eo, &e, &err) != CLLM_OK) {
        fprintf(stderr, "cllm serve: %s\n", err.msg);
        cllm_server_stop(srv);
        free(a.chat_template);
        return 1;
    }
    __atomic_store_n(&engine, e, __ATOMIC_RELEASE);
    cli_serve_card_set(srv, a.model, so.served_model_name, &eo);
    cllm_server_set_ready(srv, true);
    LOG_INFO("ready: %s (%s)", so.served_model_name, a.model);

    if (cllm_dist_active())
        LOG_INFO("tensor parallel: %d ranks; rank 0 (this process) serves HTTP", cllm_dist_size());

    int cancelled = serve_wait(&sigs, srv, a.shutdown_timeout);
    /* after a tensor-parallel failure, new requests keep getting the 503 that says why for a
     * second before the port closes */
    if (cllm_dist_failure()) sleep(1);
    __atomic_store_n(&tp_srv, NULL, __ATOMIC_RELEASE);
    cllm_server_stop(srv);
    cllm_engine_free(e);
    free(a.chat_template);
    const char *tpf = cllm_dist_failure();
    if (tpf) {
        LOG_ERROR("shut down after a tensor-parallel failure: %s", tpf);
        return 1;
    }
    LOG_INFO("shut down cleanly (%d request(s) cancelled)", cancelled);
    return 0;
}
