/* Table-driven flag parsing for subcommands; see cli.h. */
#include "cli/cli.h"

#include "cli/options.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses "4GB", "512MiB", "1.5G", "1000" into bytes; false on garbage. */
static bool cli_parse_size(const char *s, uint64_t *out) {
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
        if (!o->help) continue; /* accepted but not listed (see cli_opt.help) */
        char left[64];
        const char *arg = o->type == CLI_FLAG     ? ""
                          : o->type == CLI_INT    ? " N"
                          : o->type == CLI_FLOAT  ? " X"
                          : o->type == CLI_SIZE   ? " BYTES"
                          : o->type == CLI_CHOICE ? " CHOICE"
                          : o->type == CLI_LIST   ? " V [V...]"
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

static int list_add(const cli_spec *spec, const cli_opt *o, const char *v);

static int set_value(const cli_spec *spec, const cli_opt *o, const char *v) {
    char *end;
    errno = 0;
    switch (o->type) {
    case CLI_FLAG:
        break;
    case CLI_STR:
        *(const char **)o->target = v;
        return 0;
    case CLI_LIST:
        return list_add(spec, o, v);
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

/* Edit distance (Levenshtein) of two short strings, capped at 64 bytes each. */
static int edit_distance(const char *a, size_t la, const char *b, size_t lb) {
    if (la > 64 || lb > 64) return 99;
    int d[65][65];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int x = d[i - 1][j] + 1, y = d[i][j - 1] + 1;
            d[i][j] = c < x ? (c < y ? c : y) : (x < y ? x : y);
        }
    return d[la][lb];
}

/* The closest known flag to an unknown one (NULL when nothing is close): a small edit distance,
 * or the unknown name contained in a known one (--max-len -> --max-model-len). */
static const char *suggest(const cli_spec *spec, const char *a, size_t nl) {
    const char *best = NULL;
    int bd = 99;
    for (const cli_opt *c = spec->opts; c && c->name; c++) {
        const char *names[2] = {c->name, c->alias};
        for (int k = 0; k < 2; k++) {
            if (!names[k]) continue;
            size_t l = strlen(names[k]);
            int d = edit_distance(a, nl, names[k], l);
            if (nl > 4 && d > 2) {
                char sub[80];
                snprintf(sub, sizeof(sub), "%.*s", (int)(nl - 2), a + 2);
                if (strstr(names[k], sub)) d = 2;
            }
            if (d < bd) bd = d, best = c->name;
        }
    }
    int limit = nl <= 4 ? 1 : nl <= 10 ? 2 : 3;
    return bd <= limit ? best : NULL;
}

/* A long flag's name as written, with '_' spelled '-' (vLLM's argparse takes --max_model_len). */
static size_t norm_name(const char *a, size_t nl, char *out, size_t cap) {
    size_t n = nl < cap - 1 ? nl : cap - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = (a[i] == '_' && a[0] == '-' && a[1] == '-') ? '-' : a[i];
    out[n] = 0;
    return n;
}

static const cli_opt *find_opt(const cli_spec *spec, const char *a, size_t nl) {
    for (const cli_opt *c = spec->opts; c && c->name; c++)
        if ((strlen(c->name) == nl && !strncmp(c->name, a, nl)) ||
            (c->alias && strlen(c->alias) == nl && !strncmp(c->alias, a, nl)))
            return c;
    return NULL;
}

static bool looks_like_flag(const char *a) {
    return a[0] == '-' && a[1] != '\0' && !(isdigit((unsigned char)a[1]) || a[1] == '.');
}

/* CLI_LIST: appends one value (a comma-separated value adds each part). */
static int list_add(const cli_spec *spec, const cli_opt *o, const char *v) {
    cli_list *l = o->target;
    for (const char *p = v; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        if (n) {
            if (l->n >= CLI_LIST_MAX) {
                fprintf(stderr, "cllm %s: %s takes at most %d values\n", spec->command, o->name,
                        CLI_LIST_MAX);
                return 2;
            }
            if (n >= sizeof(l->v[0])) {
                fprintf(stderr, "cllm %s: %s value too long: '%.40s...'\n", spec->command, o->name,
                        p);
                return 2;
            }
            memcpy(l->v[l->n], p, n);
            l->v[l->n][n] = 0;
            l->n++;
        }
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}

int cli_parse(const cli_spec *spec, int argc, char **argv, const char **pos, int *n_pos) {
    *n_pos = 0;
    bool only_pos = false;
    /* unknown flags are collected and reported together, so one run shows every one of them */
    char unknown[1024] = "";
    size_t ulen = 0;
    int n_unknown = 0;
    const char *extra = NULL;
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
        if (!only_pos && looks_like_flag(a)) {
            const char *eq = strchr(a, '=');
            char nm[128];
            size_t nl = norm_name(a, eq ? (size_t)(eq - a) : strlen(a), nm, sizeof(nm));
            const cli_opt *o = find_opt(spec, nm, nl);
            if (!o) {
                const char *sg = suggest(spec, nm, nl);
                int w = snprintf(unknown + ulen, sizeof(unknown) - ulen, "%s'%s'%s%s%s",
                                 n_unknown ? ", " : "", nm, sg ? " (did you mean " : "",
                                 sg ? sg : "", sg ? "?)" : "");
                if (w > 0 && ulen + (size_t)w < sizeof(unknown)) ulen += (size_t)w;
                n_unknown++;
                /* its value, if any, is not a positional argument */
                if (!eq && i + 1 < argc && !looks_like_flag(argv[i + 1])) i++;
                continue;
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
            /* a list takes every following value up to the next flag (argparse nargs='+') */
            while (o->type == CLI_LIST && !eq && i + 1 < argc && !looks_like_flag(argv[i + 1]) &&
                   strcmp(argv[i + 1], "--"))
                if ((rc = set_value(spec, o, argv[++i]))) return rc;
            continue;
        }
        if (*n_pos >= spec->max_pos) {
            if (!extra) extra = a; /* reported after the unknown flags, if any */
            continue;
        }
        pos[(*n_pos)++] = a;
    }
    if (n_unknown) {
        fprintf(stderr, "cllm %s: unknown option%s %s (see cllm %s --help)\n", spec->command,
                n_unknown > 1 ? "s" : "", unknown, spec->command);
        return 2;
    }
    if (extra) {
        fprintf(stderr, "cllm %s: unexpected argument '%s' (usage: cllm %s %s)\n", spec->command,
                extra, spec->command, spec->usage);
        return 2;
    }
    if (*n_pos < spec->min_pos) {
        fprintf(stderr, "cllm %s: missing argument (usage: cllm %s %s)\n", spec->command,
                spec->command, spec->usage);
        return 2;
    }
    return 0;
}

cllm_fwd_opts cli_fwd_opts(const char *act16) {
    cllm_opts o = *cli_opts();
    cllm_error err = {0};
    /* cli_parse checked the value against CLI_ACT16_CHOICES: the table's parser accepts it */
    if (act16 && cllm_opts_set(&o, "CLLM_ACT16", act16, "--act16", &err) != CLLM_OK)
        fprintf(stderr, "cllm: %s (ignored)\n", err.msg);
    return o.fwd;
}
