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

int cmd_bench_serve(int argc, char **argv) {
    const char *url = NULL, *backend = "openai", *model = NULL, *api_key = NULL;
    const char *dataset = "random", *dataset_path = NULL, *think_s = NULL, *goodput = NULL;
    const char *save = NULL, *plot = NULL;
    long in_len = 1024, out_len = 128, prefix_len = 0, turns = 1, num_prompts = 0, max_conc = 0;
    long users = 0, warmups = 0, seed = 0;
    double range_ratio = 0, rate = INFINITY, burst = 1, duration = 0, ramp = 0, timeout = 600,
           temperature = -1;
    bool ignore_eos = false, no_usage = false, quiet = false;
    const cli_opt opts[] = {
        {"--url", "--base-url", CLI_STR, &url,
         "server base URL, e.g. http://127.0.0.1:8000 (required)"},
        {"--backend", NULL, CLI_CHOICE, &backend,
         "openai = /v1/completions, openai-chat = /v1/chat/completions", "openai|openai-chat"},
        {"--model", NULL, CLI_STR, &model,
         "model name to send (default: first id from /v1/models)"},
        {"--api-key", NULL, CLI_STR, &api_key, "bearer token"},
        {"--dataset-name", NULL, CLI_CHOICE, &dataset, "prompt source", "random|jsonl"},
        {"--dataset-path", NULL, CLI_STR, &dataset_path,
         "JSONL file: {prompt|turns|messages, max_tokens}"},
        {"--random-input-len", NULL, CLI_INT, &in_len,
         "prompt length in words ~ tokens (default 1024)", NULL, 0, 1e7},
        {"--random-output-len", NULL, CLI_INT, &out_len, "max_tokens per request (default 128)",
         NULL, 1, 1e7},
        {"--random-range-ratio", NULL, CLI_FLOAT, &range_ratio,
         "lengths uniform in len*[1-r, 1+r] (default 0)", NULL, 0, 0.999},
        {"--random-prefix-len", NULL, CLI_INT, &prefix_len,
         "shared prefix words before every prompt (default 0)", NULL, 0, 1e7},
        {"--multi-turn", "--turns", CLI_INT, &turns,
         "random dataset: turns per conversation (default 1)", NULL, 1, 1000},
        {"--num-prompts", "-n", CLI_INT, &num_prompts,
         "requests to send (default 1000 unless --duration)", NULL, 1, 1e9},
        {"--duration", NULL, CLI_FLOAT, &duration,
         "seconds to keep sending (in-flight requests finish)", NULL, 0, 1e7},
        {"--request-rate", NULL, CLI_FLOAT, &rate,
         "open loop: arrivals per second (default inf = all at once)", NULL, 0, 1e9},
        {"--burstiness", NULL, CLI_FLOAT, &burst,
         "gamma shape of the gaps; 1 = Poisson (default 1)", NULL, 1e-3, 1e3},
        {"--max-concurrency", NULL, CLI_INT, &max_conc, "cap on requests in flight (default none)",
         NULL, 1, 1e6},
        {"--users", NULL, CLI_INT, &users,
         "closed loop: N users, each waits for its answer then thinks", NULL, 1, 1e6},
        {"--think-time", NULL, CLI_STR, &think_s,
         "seconds between a user's requests, LO-HI or X (e.g. 2-5)"},
        {"--ramp-up", NULL, CLI_FLOAT, &ramp,
         "closed loop: start users evenly over this many seconds", NULL, 0, 1e6},
        {"--num-warmups", NULL, CLI_INT, &warmups,
         "warmup requests before the measured run (default 0)", NULL, 0, 1e6},
        {"--goodput", NULL, CLI_STR, &goodput,
         "SLOs in ms: 'ttft:MS tpot:MS e2el:MS' (also as extra arguments)"},
        {"--timeout", NULL, CLI_FLOAT, &timeout, "per-request timeout in seconds (default 600)",
         NULL, 0.001, 1e6},
        {"--ignore-eos", NULL, CLI_FLAG, &ignore_eos,
         "send ignore_eos so every request produces max_tokens"},
        {"--temperature", NULL, CLI_FLOAT, &temperature,
         "sampling temperature to send (default: not sent)", NULL, 0, 100},
        {"--no-usage", NULL, CLI_FLAG, &no_usage,
         "do not ask for stream usage; count text chunks as tokens"},
        {"--seed", NULL, CLI_INT, &seed, "random seed for prompts and arrivals (default 0)", NULL,
         0, 9.2e18},
        {"--save-result", NULL, CLI_STR, &save, "write summary + per-request records to FILE.json"},
        {"--plot", NULL, CLI_STR, &plot,
         "write latency/throughput over time to FILE.png (gnuplot)"},
        {"--quiet", "-q", CLI_FLAG, &quiet, "no progress lines"},
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
    if (rc) return rc < 0 ? 0 : rc;
    if (!url) {
        fprintf(stderr, "cllm bench-serve: --url is required\n");
        return 2;
    }
    lg_slo slo = {0};
    if (goodput && !parse_goodput(goodput, &slo)) {
        fprintf(stderr, "cllm bench-serve: bad --goodput '%s' (want ttft:MS tpot:MS e2el:MS)\n",
                goodput);
        return 2;
    }
    for (int i = 0; i < np; i++) {
        if (!parse_goodput(pos[i], &slo)) {
            fprintf(stderr, "cllm bench-serve: unexpected argument '%s'\n", pos[i]);
            return 2;
        }
    }
    double think_lo = 0, think_hi = 0;
    if (think_s && !parse_range(think_s, &think_lo, &think_hi)) {
        fprintf(stderr, "cllm bench-serve: bad --think-time '%s' (want LO-HI seconds, e.g. 2-5)\n",
                think_s);
        return 2;
    }
    if (users && (isfinite(rate) || max_conc)) {
        fprintf(stderr, "cllm bench-serve: --users is a closed loop; it excludes --request-rate "
                        "and --max-concurrency\n");
        return 2;
    }
    if (!strcmp(dataset, "jsonl") && !dataset_path) {
        fprintf(stderr, "cllm bench-serve: --dataset-name jsonl needs --dataset-path\n");
        return 2;
    }
    if (dataset_path) dataset = "jsonl";
    if (!num_prompts && duration <= 0) num_prompts = users ? 0 : 1000;
    if (users && !num_prompts && duration <= 0) {
        fprintf(stderr, "cllm bench-serve: --users needs --duration or --num-prompts\n");
        return 2;
    }

    cllm_error err;
    lg_dataset ds;
    cllm_status st;
    if (!strcmp(dataset, "jsonl")) {
        st = lg_dataset_jsonl(dataset_path, (int)out_len, &ds, &err);
    } else {
        long n = num_prompts ? num_prompts : 1000;
        if (users && n < users) n = users;
        lg_random_opts ro = {.n = n,
                             .input_len = (int)in_len,
                             .output_len = (int)out_len,
                             .range_ratio = range_ratio,
                             .prefix_len = (int)prefix_len,
                             .turns = (int)turns,
                             .seed = (uint64_t)seed};
        st = lg_dataset_random(&ro, &ds, &err);
    }
    if (st) {
        fprintf(stderr, "cllm bench-serve: %s\n", err.msg);
        return 1;
    }
    lg_config c = {
        .base_url = url,
        .chat = !strcmp(backend, "openai-chat"),
        .model = model,
        .api_key = api_key,
        .request_rate = rate,
        .burstiness = burst,
        .max_concurrency = max_conc,
        .users = users,
        .think_lo = think_lo,
        .think_hi = think_hi,
        .ramp_up_s = ramp,
        .duration_s = duration,
        .num_prompts = num_prompts,
        .num_warmups = warmups,
        .timeout_s = timeout,
        .ignore_eos = ignore_eos,
        .temperature = temperature,
        .include_usage = !no_usage,
        .seed = (uint64_t)seed,
        .ds = &ds,
        .progress = !quiet,
    };
    lg_result res;
    st = lg_bench_run(&c, &res, &err);
    if (st) {
        fprintf(stderr, "cllm bench-serve: %s\n", err.msg);
        lg_dataset_free(&ds);
        return 1;
    }
    lg_summary s;
    int ret = 0;
    if (!lg_metrics_compute(res.reqs, res.n, res.duration_s, &slo, &s)) {
        fprintf(stderr, "cllm bench-serve: out of memory\n");
        ret = 1;
    } else {
        lg_print_info pi = {
            .max_concurrency = max_conc, .request_rate = rate, .users = users, .think = think_s};
        lg_metrics_print(stdout, &s, &pi);
        lg_overhead_print(stdout, &res);
        fflush(stdout);
        lg_run_info ri = {.backend = backend,
                          .base_url = url,
                          .dataset = dataset_path ? dataset_path : "random",
                          .request_rate = rate,
                          .burstiness = burst,
                          .max_concurrency = max_conc,
                          .users = users,
                          .num_prompts = num_prompts,
                          .think_lo = think_lo,
                          .think_hi = think_hi,
                          .duration_s = duration};
        if (save && lg_save_result(save, &ri, &res, &s, &err)) {
            fprintf(stderr, "cllm bench-serve: %s\n", err.msg);
            ret = 1;
        }
        if (plot && lg_plot(plot, &res, &err)) {
            fprintf(stderr, "cllm bench-serve: %s\n", err.msg);
            ret = 1;
        }
        if (s.completed == 0) {
            fprintf(stderr, "cllm bench-serve: no request succeeded\n");
            ret = 1;
        }
    }
    lg_result_free(&res);
    lg_dataset_free(&ds);
    return ret;
}
