/* `cllm doctor --url URL [--log FILE] [--json] [--watch N]`: front end of doctor/. Exit code is the
 * report's level (0 ok, 1 warn, 2 critical) for cron and monitoring; a usage error is also 2. */
#include <stdio.h>

#include "doctor/doctor.h"
#include "cli/cli.h"
#include "cli/doctor_watch.h"
#include "cli/commands.h"

int cmd_doctor(int argc, char **argv) {
    dr_opts o;
    dr_opts_default(&o);
    bool json = false;
    double watch = 0;
    long rounds = 0;
    const cli_opt opts[] = {
        {"--watch", NULL, CLI_FLOAT, &watch,
         "re-check every N seconds; ALERT when a check stays critical for --sustain seconds", NULL,
         0.1, 86400},
        {"--rounds", NULL, CLI_INT, &rounds, "with --watch: stop after N rounds (0 = never)", NULL,
         0, 1e9},
        {"--url", "--base-url", CLI_STR, &o.url,
         "server base URL, e.g. http://127.0.0.1:8000 (required)"},
        {"--log", NULL, CLI_STR, &o.log_path, "server log file to scan for recent errors"},
        {"--json", NULL, CLI_FLAG, &json, "print the report as JSON"},
        {"--api-key", NULL, CLI_STR, &o.api_key, "bearer token"},
        {"--window", NULL, CLI_FLOAT, &o.window_s,
         "seconds between /metrics scrapes for rates (default 2)", NULL, 0, 3600},
        {"--sustain", NULL, CLI_FLOAT, &o.sustain_s,
         "usage above critical this long is critical (default 30)", NULL, 0, 3600},
        {"--interval", NULL, CLI_FLOAT, &o.interval_s,
         "scrape period while watching a high gauge (default 1)", NULL, 0.01, 60},
        {"--warn-pct", NULL, CLI_FLOAT, &o.warn_pct,
         "KV / state-slot usage warning level (default 92)", NULL, 0, 100},
        {"--crit-pct", NULL, CLI_FLOAT, &o.crit_pct,
         "KV / state-slot usage critical level (default 95)", NULL, 0, 100},
        {"--err-warn-pct", NULL, CLI_FLOAT, &o.err_warn_pct,
         "error rate warning level, % (default 1)", NULL, 0, 100},
        {"--err-crit-pct", NULL, CLI_FLOAT, &o.err_crit_pct,
         "error rate critical level, % (default 5)", NULL, 0, 100},
        {"--mem-warn-pct", NULL, CLI_FLOAT, &o.mem_warn_pct,
         "warn when MemAvailable is below this % (default 10)", NULL, 0, 100},
        {"--mem-crit-pct", NULL, CLI_FLOAT, &o.mem_crit_pct, "critical below this % (default 5)",
         NULL, 0, 100},
        {"--meminfo", NULL, CLI_STR, &o.meminfo_path,
         "read memory from this file instead of /proc/meminfo"},
        {"--timeout", NULL, CLI_FLOAT, &o.timeout_s, "per HTTP call, seconds (default 5)", NULL,
         0.01, 600},
        {0}};
    const cli_spec spec = {
        "doctor",
        "--url URL [--log FILE] [--json] [options]",
        "Daily health inspection: reachability, /health, model, KV and state-slot usage, "
        "error rate and preemptions, log errors, host memory. Exit 0 ok, 1 warn, 2 critical.",
        opts,
        0,
        0};
    const char *pos[1];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    if (!o.url) {
        fprintf(stderr, "cllm doctor: --url is required\n");
        return 2;
    }
    if (o.warn_pct > o.crit_pct) {
        fprintf(stderr, "cllm doctor: --warn-pct is above --crit-pct\n");
        return 2;
    }
    if (watch > 0) {
        if (json) {
            fprintf(stderr, "cllm doctor: --watch prints lines, not --json\n");
            return 2;
        }
        return cli_doctor_watch(&o, watch, rounds, stdout);
    }
    dr_report r;
    dr_run(&o, &r);
    if (json)
        dr_print_json(stdout, &o, &r);
    else
        dr_print_text(stdout, &o, &r);
    return (int)r.overall;
}
