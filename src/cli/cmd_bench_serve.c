/* `cllm bench-serve --url URL ...`: front end of loadgen/ (vLLM `bench serve` flags and output,
 * plus closed-loop --users/--think-time). Flag names follow vLLM's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/client.h"
#include "loadgen/dataset.h"
#include "loadgen/metrics.h"
#include "loadgen/report.h"
#include "cli/cli.h"
#include "cli/commands.h"

/* "ttft:500 tpot:50,e2el:2000" -> slo; false on anything else. */
static bool parse_goodput(const char *s, lg_slo *slo) {
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    char *save = NULL;
    for (char *tok = strtok_r(buf, " ,", &save); tok; tok = strtok_r(NULL, " ,", &save)) {
        char *colon = strchr(tok, ':'), *end;
        if (!colon) return false;
        *colon = 0;
        double v = strtod(colon + 1, &end);
        if (*end || !(v > 0)) return false;
        if (!strcmp(tok, "ttft"))
            slo->ttft_ms = v;
        else if (!strcmp(tok, "tpot"))
            slo->tpot_ms = v;
        else if (!strcmp(tok, "e2el"))
            slo->e2el_ms = v;
        else
            return false;
    }
    return true;
}

static bool parse_range(const char *s, double *lo, double *hi) {
    char *end;
    *lo = strtod(s, &end);
    if (end == s) return false;
    if (*end == 0) {
        *hi = *lo;
    } else if (*end == '-' || *end == ',' || *end == ':') {
        const char *p = end + 1;
        *hi = strtod(p, &end);
        if (end == p || *end) return false;
    } else {
        return false;
    }
    return *lo >= 0 && *hi >= *lo;
}

typedef struct bs_args {
    const char *url, *backend, *model, *api_key, *dataset, *dataset_path, *think_s, *goodput;
    const char *save, *plot;
    long in_len, out_len, prefix_len, turns, num_prompts, max_conc, users, warmups, seed;
    double range_ratio, rate, burst, duration, ramp, timeout, temperature;
    bool ignore_eos, no_usage, quiet;
    lg_slo slo;
    double think_lo, think_hi;
} bs_args;

/* Phase 1: flags, positional SLOs and their consistency. 0 ok, 2 usage error, -1 --help. */
static int bs_parse(int argc, char **argv, bs_args *a) {
    *a = (bs_args){.backend = "openai",
                   .dataset = "random",
                   .in_len = 1024,
                   .out_len = 128,
                   .turns = 1,
                   .rate = INFINITY,
                   .burst = 1,
                   .timeout = 600,
                   .temperature = -1};
    const cli_opt opts[] = {
        {"--url", "--base-url", CLI_STR, &a->url,
         "server base URL, e.g. http://127.0.0.1:8000 (required)"},
        {"--backend", NULL, CLI_CHOICE, &a->backend,
         "openai = /v1/completions, openai-chat = /v1/chat/completions", "openai|openai-chat"},
        {"--model", NULL, CLI_STR, &a->model,
         "model name to send (default: first id from /v1/models)"},
        {"--api-key", NULL, CLI_STR, &a->api_key, "bearer token"},
        {"--dataset-name", NULL, CLI_CHOICE, &a->dataset, "prompt source", "random|jsonl"},
        {"--dataset-path", NULL, CLI_STR, &a->dataset_path,
         "JSONL file: {prompt|turns|messages, max_tokens}"},
        {"--random-input-len", NULL, CLI_INT, &a->in_len,
         "prompt length in words ~ tokens (default 1024)", NULL, 0, 1e7},
        {"--random-output-len", NULL, CLI_INT, &a->out_len, "max_tokens per request (default 128)",
         NULL, 1, 1e7},
        {"--random-range-ratio", NULL, CLI_FLOAT, &a->range_ratio,
         "lengths uniform in len*[1-r, 1+r] (default 0)", NULL, 0, 0.999},
        {"--random-prefix-len", NULL, CLI_INT, &a->prefix_len,
         "shared prefix words before every prompt (default 0)", NULL, 0, 1e7},
        {"--multi-turn", "--turns", CLI_INT, &a->turns,
         "random dataset: turns per conversation (default 1)", NULL, 1, 1000},
        {"--num-prompts", "-n", CLI_INT, &a->num_prompts,
         "requests to send (default 1000 unless --duration)", NULL, 1, 1e9},
        {"--duration", NULL, CLI_FLOAT, &a->duration,
         "seconds to keep sending (in-flight requests finish)", NULL, 0, 1e7},
        {"--request-rate", NULL, CLI_FLOAT, &a->rate,
         "open loop: arrivals per second (default inf = all at once)", NULL, 0, 1e9},
        {"--burstiness", NULL, CLI_FLOAT, &a->burst,
         "gamma shape of the gaps; 1 = Poisson (default 1)", NULL, 1e-3, 1e3},
        {"--max-concurrency", NULL, CLI_INT, &a->max_conc,
         "cap on requests in flight (default none)", NULL, 1, 1e6},
        {"--users", NULL, CLI_INT, &a->users,
         "closed loop: N users, each waits for its answer then thinks", NULL, 1, 1e6},
        {"--think-time", NULL, CLI_STR, &a->think_s,
         "seconds between a user's requests, LO-HI or X (e.g. 2-5)"},
        {"--ramp-up", NULL, CLI_FLOAT, &a->ramp,
         "closed loop: start users evenly over this many seconds", NULL, 0, 1e6},
        {"--num-warmups", NULL, CLI_INT, &a->warmups,
         "warmup requests before the measured run (default 0)", NULL, 0, 1e6},
        {"--goodput", NULL, CLI_STR, &a->goodput,
         "SLOs in ms: 'ttft:MS tpot:MS e2el:MS' (also as extra arguments)"},
        {"--timeout", NULL, CLI_FLOAT, &a->timeout, "per-request timeout in seconds (default 600)",
         NULL, 0.001, 1e6},
        {"--ignore-eos", NULL, CLI_FLAG, &a->ignore_eos,
         "send ignore_eos so every request produces max_tokens"},
        {"--temperature", NULL, CLI_FLOAT, &a->temperature,
         "sampling temperature to send (default: not sent)", NULL, 0, 100},
        {"--no-usage", NULL, CLI_FLAG, &a->no_usage,
         "do not ask for stream usage; count text chunks as tokens"},
        {"--seed", NULL, CLI_INT, &a->seed, "random seed for prompts and arrivals (default 0)",
         NULL, 0, 9.2e18},
        {"--save-result", NULL, CLI_STR, &a->save,
         "write summary + per-request records to FILE.json"},
        {"--plot", NULL, CLI_STR, &a->plot,
         "write latency/throughput over time to FILE.png (gnuplot)"},
        {"--quiet", "-q", CLI_FLAG, &a->quiet, "no progress lines"},
        {0}};
    const cli_spec spec = {
        "bench-serve",
        "--url URL [options] [ttft:MS tpot:MS ...]",
        "Load-test an OpenAI-compatible server with streaming requests; prints vLLM "
        "`bench serve` metrics (TTFT, TPOT, ITL, E2EL, throughput, goodput).",
        opts,
        0,
        3};
    const char *pos[3];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? -1 : rc;
    if (!a->url) {
        fprintf(stderr, "cllm bench-serve: --url is required\n");
        return 2;
    }
    if (a->goodput && !parse_goodput(a->goodput, &a->slo)) {
        fprintf(stderr, "cllm bench-serve: bad --goodput '%s' (want ttft:MS tpot:MS e2el:MS)\n",
                a->goodput);
        return 2;
    }
    for (int i = 0; i < np; i++) {
        if (!parse_goodput(pos[i], &a->slo)) {
            fprintf(stderr, "cllm bench-serve: unexpected argument '%s'\n", pos[i]);
            return 2;
        }
    }
    if (a->think_s && !parse_range(a->think_s, &a->think_lo, &a->think_hi)) {
        fprintf(stderr, "cllm bench-serve: bad --think-time '%s' (want LO-HI seconds, e.g. 2-5)\n",
                a->think_s);
        return 2;
    }
    if (a->users && (isfinite(a->rate) || a->max_conc)) {
        fprintf(stderr, "cllm bench-serve: --users is a closed loop; it excludes --request-rate "
                        "and --max-concurrency\n");
        return 2;
    }
    if (!strcmp(a->dataset, "jsonl") && !a->dataset_path) {
        fprintf(stderr, "cllm bench-serve: --dataset-name jsonl needs --dataset-path\n");
        return 2;
    }
    if (a->dataset_path) a->dataset = "jsonl";
    if (!a->num_prompts && a->duration <= 0) a->num_prompts = a->users ? 0 : 1000;
    if (a->users && !a->num_prompts && a->duration <= 0) {
        fprintf(stderr, "cllm bench-serve: --users needs --duration or --num-prompts\n");
        return 2;
    }

    return 0;
}

/* Phase 2: the prompts. */
static cllm_status bs_dataset(const bs_args *a, lg_dataset *ds, cllm_error *err) {
    if (!strcmp(a->dataset, "jsonl"))
        return lg_dataset_jsonl(a->dataset_path, (int)a->out_len, ds, err);
    long n = a->num_prompts ? a->num_prompts : 1000;
    if (a->users && n < a->users) n = a->users;
    lg_random_opts ro = {.n = n,
                         .input_len = (int)a->in_len,
                         .output_len = (int)a->out_len,
                         .range_ratio = a->range_ratio,
                         .prefix_len = (int)a->prefix_len,
                         .turns = (int)a->turns,
                         .seed = (uint64_t)a->seed};
    return lg_dataset_random(&ro, ds, err);
}

/* Phase 4: vLLM's result block, the overhead line, --save-result, --plot. */
static int bs_report(const bs_args *a, lg_result *res) {
    lg_summary s;
    cllm_error err;
    if (!lg_metrics_compute(res->reqs, res->n, res->duration_s, &a->slo, &s)) {
        fprintf(stderr, "cllm bench-serve: out of memory\n");
        return 1;
    }
    int ret = 0;
    lg_print_info pi = {.max_concurrency = a->max_conc,
                        .request_rate = a->rate,
                        .users = a->users,
                        .think = a->think_s};
    lg_metrics_print(stdout, &s, &pi);
    lg_overhead_print(stdout, res);
    fflush(stdout);
    lg_run_info ri = {.backend = a->backend,
                      .base_url = a->url,
                      .dataset = a->dataset_path ? a->dataset_path : "random",
                      .request_rate = a->rate,
                      .burstiness = a->burst,
                      .max_concurrency = a->max_conc,
                      .users = a->users,
                      .num_prompts = a->num_prompts,
                      .think_lo = a->think_lo,
                      .think_hi = a->think_hi,
                      .duration_s = a->duration};
    if (a->save && lg_save_result(a->save, &ri, res, &s, &err)) {
        fprintf(stderr, "cllm bench-serve: %s\n", err.msg);
        ret = 1;
    }
    if (a->plot && lg_plot(a->plot, res, &err)) {
        fprintf(stderr, "cllm bench-serve: %s\n", err.msg);
        ret = 1;
    }
    if (s.completed == 0) {
        fprintf(stderr, "cllm bench-serve: no request succeeded\n");
        ret = 1;
    }
    return ret;
}

int cmd_bench_serve(int argc, char **argv) {
    bs_args a;
    int rc = bs_parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    cllm_error err;
    lg_dataset ds;
    if (bs_dataset(&a, &ds, &err)) {
        fprintf(stderr, "cllm bench-serve: %s\n", err.msg);
        return 1;
    }
    /* phase 3: the run */
    lg_config c = {
        .base_url = a.url,
        .chat = !strcmp(a.backend, "openai-chat"),
        .model = a.model,
        .api_key = a.api_key,
        .request_rate = a.rate,
        .burstiness = a.burst,
        .max_concurrency = a.max_conc,
        .users = a.users,
        .think_lo = a.think_lo,
        .think_hi = a.think_hi,
        .ramp_up_s = a.ramp,
        .duration_s = a.duration,
        .num_prompts = a.num_prompts,
        .num_warmups = a.warmups,
        .timeout_s = a.timeout,
        .ignore_eos = a.ignore_eos,
        .temperature = a.temperature,
        .include_usage = !a.no_usage,
        .seed = (uint64_t)a.seed,
        .ds = &ds,
        .progress = !a.quiet,
    };
    lg_result res;
    if (lg_bench_run(&c, &res, &err)) {
        fprintf(stderr, "cllm bench-serve: %s\n", err.msg);
        lg_dataset_free(&ds);
        return 1;
    }
    int ret = bs_report(&a, &res);
    lg_result_free(&res);
    lg_dataset_free(&ds);
    return ret;
}
