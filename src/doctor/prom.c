/* Prometheus text reader; see prom.h. */
#include "doctor/prom.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void prom_free(prom_set *p) {
    for (size_t i = 0; i < p->n; i++) {
        free(p->s[i].name);
        free(p->s[i].labels);
    }
    free(p->s);
    memset(p, 0, sizeof(*p));
}

static bool name_char(char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
}

/* Parses one line; false if malformed. */
static bool parse_line(const char *l, size_t n, prom_sample *s) {
    size_t i = 0;
    while (i < n && (l[i] == ' ' || l[i] == '\t')) i++;
    size_t ns = i;
    if (i >= n || !name_char(l[i], true)) return false;
    while (i < n && name_char(l[i], false)) i++;
    size_t ne = i, ls = i, le = i;
    if (i < n && l[i] == '{') {
        ls = ++i;
        bool q = false;
        for (; i < n; i++) {
            if (q && l[i] == '\\') {
                i++;
                continue;
            }
            if (l[i] == '"')
                q = !q;
            else if (!q && l[i] == '}')
                break;
        }
        if (i >= n) return false;
        le = i++;
    }
    while (i < n && (l[i] == ' ' || l[i] == '\t')) i++;
    if (i >= n) return false;
    char num[64];
    size_t k = 0;
    while (i < n && l[i] != ' ' && l[i] != '\t' && k < sizeof(num) - 1) num[k++] = l[i++];
    num[k] = 0;
    char *end;
    double v;
    if (!strcmp(num, "+Inf"))
        v = INFINITY;
    else if (!strcmp(num, "-Inf"))
        v = -INFINITY;
    else if (!strcmp(num, "NaN"))
        v = NAN;
    else {
        v = strtod(num, &end);
        if (end == num || *end) return false;
    }
    s->name = strndup(l + ns, ne - ns);
    s->labels = strndup(l + ls, le - ls);
    s->value = v;
    return s->name && s->labels;
}

cllm_status prom_parse(const char *text, prom_set *out, cllm_error *err) {
    memset(out, 0, sizeof(*out));
    const char *p = text;
    while (p && *p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n && p[n - 1] == '\r') n--;
        size_t i = 0;
        while (i < n && (p[i] == ' ' || p[i] == '\t')) i++;
        if (i < n && p[i] != '#') {
            prom_sample s = {0};
            if (parse_line(p, n, &s)) {
                if (out->n == out->cap) {
                    size_t c = out->cap ? out->cap * 2 : 64;
                    prom_sample *q = realloc(out->s, c * sizeof(prom_sample));
                    if (!q) {
                        free(s.name), free(s.labels);
                        prom_free(out);
                        return cllm_err_set(err, CLLM_ENOMEM, "metrics: out of memory");
                    }
                    out->s = q, out->cap = c;
                }
                out->s[out->n++] = s;
            } else {
                free(s.name), free(s.labels);
                out->bad_lines++;
            }
        }
        p = nl ? nl + 1 : NULL;
    }
    return CLLM_OK;
}

bool prom_label(const prom_sample *s, const char *key, char *buf, size_t cap) {
    size_t kl = strlen(key);
    const char *p = s->labels;
    while (*p) {
        while (*p == ',' || *p == ' ') p++;
        const char *eq = strchr(p, '=');
        if (!eq || eq[1] != '"') return false;
        bool match = (size_t)(eq - p) == kl && !strncmp(p, key, kl);
        const char *v = eq + 2;
        size_t k = 0;
        for (; *v && *v != '"'; v++) {
            if (*v == '\\' && v[1]) v++;
            if (match && k + 1 < cap) buf[k++] = *v;
        }
        if (match) {
            buf[k] = 0;
            return true;
        }
        p = *v ? v + 1 : v;
    }
    return false;
}

bool prom_sum(const prom_set *p, const char *name, const char *key, const char *prefix,
              double *out) {
    bool any = false;
    double sum = 0;
    for (size_t i = 0; i < p->n; i++) {
        if (strcmp(p->s[i].name, name)) continue;
        if (key) {
            char v[128];
            if (!prom_label(&p->s[i], key, v, sizeof(v)) || strncmp(v, prefix, strlen(prefix)))
                continue;
        }
        sum += p->s[i].value;
        any = true;
    }
    *out = sum;
    return any;
}

bool prom_max(const prom_set *p, const char *name, double *out) {
    bool any = false;
    double m = -INFINITY;
    for (size_t i = 0; i < p->n; i++) {
        if (strcmp(p->s[i].name, name)) continue;
        if (p->s[i].value > m) m = p->s[i].value;
        any = true;
    }
    *out = any ? m : 0;
    return any;
}
