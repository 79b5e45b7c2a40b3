/* Jinja values: construction, JSON import, Python-style str()/repr(), json.dumps, equality and
 * ordering. Everything is allocated from the render arena (jrender.arena). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

_Noreturn void jr_fail(jrender *r, cllm_status st, int line, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    r->status = cllm_err_set(r->err, st, "chat template line %d: %s", line, msg);
    longjmp(r->fail, 1);
}

void *jr_alloc(jrender *r, size_t n) {
    void *p = ja_alloc(&r->arena, n);
    if (!p) jr_fail(r, CLLM_ENOMEM, 0, "memory limit reached while rendering");
    return p;
}

jv jv_str(jrender *r, const char *p, size_t len) {
    char *d = jr_alloc(r, len + 1);
    if (len) memcpy(d, p, len);
    jv v = {.t = JV_STR};
    v.u.s.p = d;
    v.u.s.len = len;
    return v;
}

jv jv_strz(const char *p) {
    jv v = {.t = JV_STR};
    v.u.s.p = p;
    v.u.s.len = strlen(p);
    return v;
}

jv jv_int(int64_t i) {
    jv v = {.t = JV_INT};
    v.u.i = i;
    return v;
}

jv jv_bool(bool b) {
    jv v = {.t = JV_BOOL};
    v.u.b = b;
    return v;
}

jv jv_list(jrender *r) {
    jv v = {.t = JV_LIST};
    v.u.l = jr_alloc(r, sizeof(jlist));
    return v;
}

jv jv_dict(jrender *r) {
    jv v = {.t = JV_DICT};
    v.u.d = jr_alloc(r, sizeof(jdict));
    return v;
}

void jl_push(jrender *r, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 8;
        jv *nv = jr_alloc(r, nc * sizeof(jv));
        if (l->n) memcpy(nv, l->v, l->n * sizeof(jv));
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = v;
}

const jv *jd_get(const jdict *d, const char *k, size_t klen) {
    for (size_t i = 0; i < d->n; i++)
        if (d->klen[i] == klen && !memcmp(d->k[i], k, klen)) return &d->v[i];
    return NULL;
}

void jd_set(jrender *r, jdict *d, const char *k, size_t klen, jv v) {
    for (size_t i = 0; i < d->n; i++)
        if (d->klen[i] == klen && !memcmp(d->k[i], k, klen)) {
            d->v[i] = v;
            return;
        }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 8;
        const char **nk = jr_alloc(r, nc * sizeof(char *));
        size_t *nl = jr_alloc(r, nc * sizeof(size_t));
        jv *nv = jr_alloc(r, nc * sizeof(jv));
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof(char *));
            memcpy(nl, d->klen, d->n * sizeof(size_t));
            memcpy(nv, d->v, d->n * sizeof(jv));
        }
        d->k = nk, d->klen = nl, d->v = nv, d->cap = nc;
    }
    d->k[d->n] = k;
    d->klen[d->n] = klen;
    d->v[d->n++] = v;
}

const char *jv_type_name(jv_type t) {
    static const char *n[] = {"undefined", "none", "bool",      "int",   "float",   "str",
                              "list",      "dict", "namespace", "macro", "function"};
    return n[t];
}

bool jv_truthy(const jv *v) {
    switch (v->t) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v->u.b;
    case JV_INT:
        return v->u.i != 0;
    case JV_FLOAT:
        return v->u.f != 0;
    case JV_STR:
        return v->u.s.len > 0;
    case JV_LIST:
        return v->u.l->n > 0;
    case JV_DICT:
        return v->u.d->n > 0;
    default:
        return true;
    }
}

static bool is_num(const jv *v) {
    return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL;
}
static double num(const jv *v) {
    return v->t == JV_FLOAT ? v->u.f : v->t == JV_INT ? (double)v->u.i : (double)v->u.b;
}

bool jv_equal(const jv *a, const jv *b) {
    if (is_num(a) && is_num(b)) {
        if (a->t != JV_FLOAT && b->t != JV_FLOAT) {
            int64_t x = a->t == JV_INT ? a->u.i : a->u.b, y = b->t == JV_INT ? b->u.i : b->u.b;
            return x == y;
        }
        return num(a) == num(b);
    }
    if (a->t != b->t) return false;
    switch (a->t) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return a->u.s.len == b->u.s.len && !memcmp(a->u.s.p, b->u.s.p, a->u.s.len);
    case JV_LIST:
        if (a->u.l->n != b->u.l->n) return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!jv_equal(&a->u.l->v[i], &b->u.l->v[i])) return false;
        return true;
    case JV_DICT:
    case JV_NS:
        if (a->u.d->n != b->u.d->n) return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            const jv *o = jd_get(b->u.d, a->u.d->k[i], a->u.d->klen[i]);
            if (!o || !jv_equal(&a->u.d->v[i], o)) return false;
        }
        return true;
    default:
        return a->u.fn == b->u.fn;
    }
}

int jv_compare(jrender *r, const jv *a, const jv *b, int line) {
    if (is_num(a) && is_num(b)) {
        double x = num(a), y = num(b);
        if (a->t == JV_INT && b->t == JV_INT) return (a->u.i > b->u.i) - (a->u.i < b->u.i);
        return (x > y) - (x < y);
    }
    if (a->t == JV_STR && b->t == JV_STR) {
        size_t n = a->u.s.len < b->u.s.len ? a->u.s.len : b->u.s.len;
        int c = memcmp(a->u.s.p, b->u.s.p, n);
        if (c) return c < 0 ? -1 : 1;
        return (a->u.s.len > b->u.s.len) - (a->u.s.len < b->u.s.len);
    }
    if (a->t == JV_LIST && b->t == JV_LIST) {
        for (size_t i = 0; i < a->u.l->n && i < b->u.l->n; i++) {
            int c = jv_compare(r, &a->u.l->v[i], &b->u.l->v[i], line);
            if (c) return c;
        }
        return (a->u.l->n > b->u.l->n) - (a->u.l->n < b->u.l->n);
    }
    jr_fail(r, CLLM_EINVAL, line, "cannot compare %s with %s", jv_type_name(a->t),
            jv_type_name(b->t));
}

jv jv_from_json(jrender *r, json_t *j) {
    jv v = {.t = JV_NONE};
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        v = jv_dict(r);
        const char *k;
        json_t *x;
        json_object_foreach(j, k, x) {
            size_t kl = strlen(k);
            jv key = jv_str(r, k, kl);
            jd_set(r, v.u.d, key.u.s.p, kl, jv_from_json(r, x));
        }
        return v;
    }
    case JSON_ARRAY: {
        v = jv_list(r);
        size_t i;
        json_t *x;
        json_array_foreach(j, i, x) jl_push(r, v.u.l, jv_from_json(r, x));
        return v;
    }
    case JSON_STRING:
        return jv_str(r, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return jv_int(json_integer_value(j));
    case JSON_REAL:
        v.t = JV_FLOAT;
        v.u.f = json_real_value(j);
        return v;
    case JSON_TRUE:
        return jv_bool(true);
    case JSON_FALSE:
        return jv_bool(false);
    default:
        return v;
    }
}

void jb_put(jrender *r, jbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
        while (nc < b->len + n + 1) nc *= 2;
        char *np = jr_alloc(r, nc);
        if (b->len) memcpy(np, b->p, b->len);
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void jb_puts(jrender *r, jbuf *b, const char *s) {
    jb_put(r, b, s, strlen(s));
}

/* Python float repr: shortest round-trip digits, fixed notation for 1e-4 <= |x| < 1e16. */
static void float_repr(double x, char *out, size_t cap, bool json) {
    if (isnan(x)) {
        snprintf(out, cap, "%s", json ? "NaN" : "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(out, cap, "%s%s", x < 0 ? "-" : "", json ? "Infinity" : "inf");
        return;
    }
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    /* e = [-]d.ddde[+-]XX */
    char digits[24];
    int nd = 0;
    const char *p = e;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out[o++] = '0', out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp + 1)
                for (int i = exp + 1; i < nd; i++) out[o++] = digits[i];
            else
                out[o++] = '0';
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, cap - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

static void str_repr(jrender *r, const jv *v, jbuf *b) {
    const char *s = v->u.s.p;
    size_t n = v->u.s.len;
    bool sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
    char q = sq && !dq ? '"' : '\'';
    jb_put(r, b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '\\' || c == (unsigned char)q) {
            esc[0] = '\\', esc[1] = (char)c;
            jb_put(r, b, esc, 2);
        } else if (c == '\n')
            jb_puts(r, b, "\\n");
        else if (c == '\r')
            jb_puts(r, b, "\\r");
        else if (c == '\t')
            jb_puts(r, b, "\\t");
        else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", c);
            jb_puts(r, b, esc);
        } else {
            jb_put(r, b, (const char *)&c, 1);
        }
    }
    jb_put(r, b, &q, 1);
}

static void to_str(jrender *r, const jv *v, jbuf *b, bool repr) {
    char tmp[64];
    switch (v->t) {
    case JV_UNDEF:
        return;
    case JV_NONE:
        jb_puts(r, b, "None");
        return;
    case JV_BOOL:
        jb_puts(r, b, v->u.b ? "True" : "False");
        return;
    case JV_INT:
        snprintf(tmp, sizeof(tmp), "%lld", (long long)v->u.i);
        jb_puts(r, b, tmp);
        return;
    case JV_FLOAT:
        float_repr(v->u.f, tmp, sizeof(tmp), false);
        jb_puts(r, b, tmp);
        return;
    case JV_STR:
        if (repr)
            str_repr(r, v, b);
        else
            jb_put(r, b, v->u.s.p, v->u.s.len);
        return;
    case JV_LIST:
        jb_puts(r, b, "[");
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) jb_puts(r, b, ", ");
            to_str(r, &v->u.l->v[i], b, true);
        }
        jb_puts(r, b, "]");
        return;
    case JV_DICT:
    case JV_NS:
        jb_puts(r, b, v->t == JV_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v->u.d->n; i++) {
            if (i) jb_puts(r, b, ", ");
            jv k = {.t = JV_STR};
            k.u.s.p = v->u.d->k[i];
            k.u.s.len = v->u.d->klen[i];
            str_repr(r, &k, b);
            jb_puts(r, b, ": ");
            to_str(r, &v->u.d->v[i], b, true);
        }
        jb_puts(r, b, v->t == JV_NS ? "}>" : "}");
        return;
    default:
        jb_puts(r, b, "<function>");
        return;
    }
}

void jv_to_str(jrender *r, const jv *v, jbuf *b) {
    to_str(r, v, b, false);
}

jv jv_stringify(jrender *r, const jv *v) {
    if (v->t == JV_STR) return *v;
    jbuf b = {0};
    jv_to_str(r, v, &b);
    jv s = {.t = JV_STR};
    s.u.s.p = b.p ? b.p : "";
    s.u.s.len = b.len;
    return s;
}

static void json_str(jrender *r, const char *s, size_t n, jbuf *b) {
    jb_puts(r, b, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[8];
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c == '\b')
            esc = "\\b";
        else if (c == '\f')
            esc = "\\f";
        else if (c < 0x20) {
            snprintf(tmp, sizeof(tmp), "\\u%04x", c);
            esc = tmp;
        }
        if (esc) {
            jb_put(r, b, s + i - run, run);
            run = 0;
            jb_puts(r, b, esc);
        } else {
            run++;
        }
    }
    jb_put(r, b, s + n - run, run);
    jb_puts(r, b, "\"");
}

static void newline_indent(jrender *r, jbuf *b, int indent, int depth) {
    jb_puts(r, b, "\n");
    for (int i = 0; i < indent * depth; i++) jb_puts(r, b, " ");
}

void jv_to_json(jrender *r, const jv *v, int indent, int depth, jbuf *b, int line) {
    char tmp[64];
    if (depth > 256) jr_fail(r, CLLM_EINVAL, line, "tojson: value nested too deeply");
    switch (v->t) {
    case JV_UNDEF:
    case JV_NONE:
        jb_puts(r, b, "null");
        return;
    case JV_BOOL:
        jb_puts(r, b, v->u.b ? "true" : "false");
        return;
    case JV_INT:
        snprintf(tmp, sizeof(tmp), "%lld", (long long)v->u.i);
        jb_puts(r, b, tmp);
        return;
    case JV_FLOAT:
        float_repr(v->u.f, tmp, sizeof(tmp), true);
        jb_puts(r, b, tmp);
        return;
    case JV_STR:
        json_str(r, v->u.s.p, v->u.s.len, b);
        return;
    case JV_LIST:
        if (!v->u.l->n) {
            jb_puts(r, b, "[]");
            return;
        }
        jb_puts(r, b, "[");
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) jb_puts(r, b, indent >= 0 ? "," : ", ");
            if (indent >= 0) newline_indent(r, b, indent, depth + 1);
            jv_to_json(r, &v->u.l->v[i], indent, depth + 1, b, line);
        }
        if (indent >= 0) newline_indent(r, b, indent, depth);
        jb_puts(r, b, "]");
        return;
    case JV_DICT:
    case JV_NS:
        if (!v->u.d->n) {
            jb_puts(r, b, "{}");
            return;
        }
        jb_puts(r, b, "{");
        for (size_t i = 0; i < v->u.d->n; i++) {
            if (i) jb_puts(r, b, indent >= 0 ? "," : ", ");
            if (indent >= 0) newline_indent(r, b, indent, depth + 1);
            json_str(r, v->u.d->k[i], v->u.d->klen[i], b);
            jb_puts(r, b, ": ");
            jv_to_json(r, &v->u.d->v[i], indent, depth + 1, b, line);
        }
        if (indent >= 0) newline_indent(r, b, indent, depth);
        jb_puts(r, b, "}");
        return;
    default:
        jr_fail(r, CLLM_EINVAL, line, "tojson: cannot serialize a %s", jv_type_name(v->t));
    }
}
