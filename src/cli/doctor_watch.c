/* `cllm doctor --watch N`: the inspection every N seconds, with the reference's sustained-breach
 * rule applied across rounds: a check that stays critical for --sustain seconds (30 by default)
 * raises one ALERT line; it clears with a RECOVERED line. Each round also prints a one-line
 * status. Within a round gauges are judged at once (sustain 0): the rule is the rounds' job. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/doctor_watch.h"

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct breach {
    const char *name;
    double since; /* < 0: not critical */
    bool alerted;
} breach;

static breach *find(breach *b, int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(b[i].name, name)) return &b[i];
    if (*n >= DR_MAX_CHECKS * 2) return NULL;
    b[*n] = (breach){name, -1, false};
    return &b[(*n)++];
}

int cli_doctor_watch(const dr_opts *o, double every_s, long rounds, FILE *out) {
    dr_opts ro = *o;
    ro.sustain_s = 0;
    breach b[DR_MAX_CHECKS * 2];
    int nb = 0, worst = DR_OK;
    for (long k = 0; rounds <= 0 || k < rounds; k++) {
        double t0 = mono();
        dr_report r;
        dr_run(&ro, &r);
        double now = mono();
        char worst_checks[256] = "";
        for (int i = 0; i < r.n; i++) {
            const dr_check *c = &r.checks[i];
            breach *x = find(b, &nb, c->name);
            if (c->level == DR_WARN || c->level == DR_CRIT) {
                size_t l = strlen(worst_checks);
                snprintf(worst_checks + l, sizeof(worst_checks) - l, "%s%s=%s", l ? " " : "",
                         c->name, dr_level_name(c->level));
            }
            if (!x) continue;
            if (c->level == DR_CRIT) {
                if (x->since < 0) x->since = now;
                if (!x->alerted && now - x->since >= o->sustain_s) {
                    x->alerted = true;
                    fprintf(out, "ALERT %s critical for %.0f s: %s\n", c->name, now - x->since,
                            c->detail);
                }
            } else {
                if (x->alerted) fprintf(out, "RECOVERED %s: %s\n", c->name, c->detail);
                x->since = -1;
                x->alerted = false;
            }
        }
        /* the exit code says what was sustained, not a one-round blip */
        for (int i = 0; i < nb; i++)
            if (b[i].alerted) worst = DR_CRIT;
        if (worst < DR_CRIT && r.overall == DR_WARN) worst = DR_WARN;
        fprintf(out, "doctor %s round %ld: %s%s%s\n", o->url, k + 1, dr_level_name(r.overall),
                worst_checks[0] ? " " : "", worst_checks);
        fflush(out);
        if (rounds > 0 && k + 1 >= rounds) break;
        double left = every_s - (mono() - t0);
        if (left > 0) {
            struct timespec ts = {(time_t)left, (long)((left - floor(left)) * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
    return worst;
}
