/* Table-driven flag parsing for subcommands; see cli.h. */
#include "cli/cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool cli_parse_size(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !(v >= 0) || !isfinite(v)) return false;
    while (*end == ' ') end++;
    double mul = 1;
    char u = (char)toupper((unsigned char)*end);
    if (u) {
        const char *units = "KMGT";
        const char *p = strchr(units, u);
        if (!p) return false;
        int pow = (int)(p - units) + 1;
        end++;
        int binary = 0;
        if (*end == 'i' || *end == 'I') {
            binary = 1;
            end++;
        }
        if (*end == 'B' || *end == 'b') end++;
        if (*end) return false;
        mul = binary     ? pow == 1   ? 1024.0
                           : pow == 2 ? 1048576.0
                           : pow == 3 ? 1073741824.0
                                      : 1099511627776.0
              : pow == 1 ? 1e3
              : pow == 2 ? 1e6
              : pow == 3 ? 1e9
                         : 1e12;
    }
    double r = v * mul;
    if (r > 1.8e19) return false;
    *out = (uint64_t)r;
    return true;
}

static void print_help(const cli_spec *spec) {
    printf("usage: cllm %s %s\n%s\n", spec->command, spec->usage, spec->summary);
    if (spec->opts && spec->opts[0].name) printf("\noptions:\n");
    for (const cli_opt *o = spec->opts; o && o->name; o++) {
        char left[64];
        const char *arg = o->type == CLI_FLAG     ? ""
                          : o->type == CLI_INT    ? " N"
                          : o->type == CLI_FLOAT  ? " X"
                          : o->type == CLI_SIZE   ? " BYTES"
                          : o->type == CLI_CHOICE ? " CHOICE"
                                                  : " VALUE";
        snprintf(left, sizeof(left), "%s%s%s%s", o->alias ? o->alias : "", o->alias ? ", " : "",
                 o->name, arg);
        printf("  %-28s %s", left, o->help);
        if (o->type == CLI_CHOICE) printf(" (%s)", o->choices);
        printf("\n");
    }
    printf("  %-28s %s\n", "-h, --help", "show this help");
}

static bool choice_ok(const char *choices, const char *v) {
    size_t vl = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == vl && !strncmp(p, v, l)) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

static int set_value(const cli_spec *spec, const cli_opt *o, const char *v) {
    char *end;
    errno = 0;
    switch (o->type) {
    case CLI_FLAG:
        break;
    case CLI_STR:
        *(const char **)o->target = v;
        return 0;
    case CLI_CHOICE:
        if (!choice_ok(o->choices, v)) {
            fprintf(stderr, "cllm %s: %s must be one of %s, got '%s'\n", spec->command, o->name,
                    o->choices, v);
            return 2;
        }
        *(const char **)o->target = v;
        return 0;
    case CLI_INT: {
        long x = strtol(v, &end, 10);
        if (end == v || *end || errno) {
            fprintf(stderr, "cllm %s: %s expects an integer, got '%s'\n", spec->command, o->name,
                    v);
            return 2;
        }
        if (o->min < o->max && (x < o->min || x > o->max)) {
            fprintf(stderr, "cllm %s: %s must be in [%g, %g], got %ld\n", spec->command, o->name,
                    o->min, o->max, x);
            return 2;
        }
        *(long *)o->target = x;
        return 0;
    }
    case CLI_FLOAT: {
        double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x)) {
            fprintf(stderr, "cllm %s: %s expects a number, got '%s'\n", spec->command, o->name, v);
            return 2;
        }
        if (o->min < o->max && (x < o->min || x > o->max)) {
            fprintf(stderr, "cllm %s: %s must be in [%g, %g], got %g\n", spec->command, o->name,
                    o->min, o->max, x);
            return 2;
        }
        *(double *)o->target = x;
        return 0;
    }
    case CLI_SIZE:
        if (!cli_parse_size(v, (uint64_t *)o->target)) {
            fprintf(stderr, "cllm %s: %s expects a size like 4GB or 512MiB, got '%s'\n",
                    spec->command, o->name, v);
            return 2;
        }
        return 0;
    }
    return 0;
}

int cli_parse(const cli_spec *spec, int argc, char **argv, const char **pos, int *n_pos) {
    *n_pos = 0;
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!only_pos && (!strcmp(a, "--help") || !strcmp(a, "-h"))) {
            print_help(spec);
            return -1;
        }
        if (!only_pos && !strcmp(a, "--")) {
            only_pos = true;
            continue;
        }
        if (!only_pos && a[0] == '-' && a[1] != '\0' &&
            !(isdigit((unsigned char)a[1]) || a[1] == '.')) {
            const char *eq = strchr(a, '=');
            size_t nl = eq ? (size_t)(eq - a) : strlen(a);
            const cli_opt *o = NULL;
            for (const cli_opt *c = spec->opts; c && c->name; c++) {
                if ((strlen(c->name) == nl && !strncmp(c->name, a, nl)) ||
                    (c->alias && strlen(c->alias) == nl && !strncmp(c->alias, a, nl))) {
                    o = c;
                    break;
                }
            }
            if (!o) {
                fprintf(stderr, "cllm %s: unknown option '%.*s' (see cllm %s --help)\n",
                        spec->command, (int)nl, a, spec->command);
                return 2;
            }
            if (o->type == CLI_FLAG) {
                if (eq) {
                    fprintf(stderr, "cllm %s: %s takes no value\n", spec->command, o->name);
                    return 2;
                }
                *(bool *)o->target = true;
                continue;
            }
            const char *v = eq ? eq + 1 : NULL;
            if (!v) {
                if (i + 1 >= argc) {
                    fprintf(stderr, "cllm %s: %s needs a value\n", spec->command, o->name);
                    return 2;
                }
                v = argv[++i];
            }
            int rc = set_value(spec, o, v);
            if (rc) return rc;
            continue;
        }
        if (*n_pos >= spec->max_pos) {
            fprintf(stderr, "cllm %s: unexpected argument '%s' (usage: cllm %s %s)\n",
                    spec->command, a, spec->command, spec->usage);
            return 2;
        }
        pos[(*n_pos)++] = a;
    }
    if (*n_pos < spec->min_pos) {
        fprintf(stderr, "cllm %s: missing argument (usage: cllm %s %s)\n", spec->command,
                spec->command, spec->usage);
        return 2;
    }
    return 0;
}
