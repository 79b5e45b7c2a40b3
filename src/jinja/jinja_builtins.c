/* Jinja builtins: filters, tests, str/dict methods and globals (range, namespace,
 * raise_exception, strftime_now), with Python Jinja2 semantics. Used by jinja_eval.c.
 * Nothing here touches files or the environment. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "jinja/jinja_int.h"

/* ---- helpers ---- */

static jv undef(void) {
    return (jv){.t = JV_UNDEF};
}
static jv none(void) {
    return (jv){.t = JV_NONE};
}

static const jv *kwarg(const char **kwn, const jv *kwv, int nkw, const char *name) {
    for (int i = 0; i < nkw; i++)
        if (!strcmp(kwn[i], name)) return &kwv[i];
    return NULL;
}

/* Positional argument i, or the keyword of that name, or NULL. */
static const jv *arg(const jv *a, int na, const char **kwn, const jv *kwv, int nkw, int i,
                     const char *name) {
    if (i < na) return &a[i];
    return name ? kwarg(kwn, kwv, nkw, name) : NULL;
}

static const jv *need_str(jrender *r, const jv *v, const char *what, int line) {
    if (!v || v->t != JV_STR) jr_fail(r, CLLM_EINVAL, line, "%s expects a string", what);
    return v;
}

static uint32_t next_cp(const char *s, size_t len, size_t *i) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t n =
        utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(len - *i), &cp);
    if (n <= 0) {
        (*i)++;
        return 0xfffd;
    }
    *i += (size_t)n;
    return (uint32_t)cp;
}

static bool py_isspace(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

static bool in_chars(uint32_t c, const jv *chars) {
    if (!chars) return py_isspace(c);
    size_t i = 0;
    while (i < chars->u.s.len)
        if (next_cp(chars->u.s.p, chars->u.s.len, &i) == c) return true;
    return false;
}

static jv strip(jrender *r, const jv *s, const jv *chars, bool left, bool right) {
    size_t a = 0, b = s->u.s.len;
    if (left)
        while (a < b) {
            size_t i = a;
            if (!in_chars(next_cp(s->u.s.p, b, &i), chars)) break;
            a = i;
        }
    if (right)
        while (b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)s->u.s.p[k] & 0xc0) == 0x80) k--;
            size_t i = k;
            if (!in_chars(next_cp(s->u.s.p, b, &i), chars)) break;
            b = k;
        }
    return jv_str(r, s->u.s.p + a, b - a);
}

static jv map_case(jrender *r, const jv *s, int mode /* 0 lower 1 upper 2 capitalize 3 title */) {
    jbuf b = {0};
    size_t i = 0;
    bool first = true, prev_cased = false;
    while (i < s->u.s.len) {
        uint32_t c = next_cp(s->u.s.p, s->u.s.len, &i), o;
        if (mode == 0)
            o = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
        else if (mode == 1)
            o = (uint32_t)utf8proc_toupper((utf8proc_int32_t)c);
        else if (mode == 2)
            o = (uint32_t)(first ? utf8proc_toupper((utf8proc_int32_t)c)
                                 : utf8proc_tolower((utf8proc_int32_t)c));
        else
            o = (uint32_t)(prev_cased ? utf8proc_tolower((utf8proc_int32_t)c)
                                      : utf8proc_toupper((utf8proc_int32_t)c));
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
        prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL ||
                     cat == UTF8PROC_CATEGORY_LT;
        first = false;
        char tmp[4];
        jb_put(r, &b, tmp,
               (size_t)utf8proc_encode_char((utf8proc_int32_t)o, (utf8proc_uint8_t *)tmp));
    }
    return jv_str(r, b.p ? b.p : "", b.len);
}

static jv replace(jrender *r, const jv *s, const jv *old, const jv *nw, int64_t count) {
    jbuf b = {0};
    const char *p = s->u.s.p, *e = p + s->u.s.len;
    if (!old->u.s.len) { /* Python inserts the replacement between characters */
        size_t i = 0;
        int64_t k = 0;
        while (count < 0 || k < count) {
            jb_put(r, &b, nw->u.s.p, nw->u.s.len);
            k++;
            if (i >= s->u.s.len) break;
            size_t j = i;
            next_cp(s->u.s.p, s->u.s.len, &j);
            jb_put(r, &b, s->u.s.p + i, j - i);
            i = j;
        }
        jb_put(r, &b, s->u.s.p + i, s->u.s.len - i);
        return jv_str(r, b.p ? b.p : "", b.len);
    }
    int64_t k = 0;
    while (p < e && (count < 0 || k < count)) {
        const char *f = memmem(p, (size_t)(e - p), old->u.s.p, old->u.s.len);
        if (!f) break;
        jb_put(r, &b, p, (size_t)(f - p));
        jb_put(r, &b, nw->u.s.p, nw->u.s.len);
        p = f + old->u.s.len;
        k++;
    }
    jb_put(r, &b, p, (size_t)(e - p));
    return jv_str(r, b.p ? b.p : "", b.len);
}

static jv split(jrender *r, const jv *s, const jv *sep, int64_t maxsplit, int line) {
    jv out = jv_list(r);
    const char *p = s->u.s.p;
    size_t len = s->u.s.len, i = 0;
    if (!sep || sep->t == JV_NONE) {
        int64_t k = 0;
        while (i < len) {
            size_t j = i;
            while (j < len) { /* skip whitespace */
                size_t t = j;
                if (!py_isspace(next_cp(p, len, &t))) break;
                j = t;
            }
            if (j >= len) break;
            if (maxsplit >= 0 && k >= maxsplit) {
                /* the rest, with trailing whitespace removed */
                jv rest = jv_str(r, p + j, len - j);
                jl_push(r, out.u.l, strip(r, &rest, NULL, false, true));
                return out;
            }
            size_t w = j;
            while (w < len) {
                size_t t = w;
                if (py_isspace(next_cp(p, len, &t))) break;
                w = t;
            }
            jl_push(r, out.u.l, jv_str(r, p + j, w - j));
            k++;
            i = w;
        }
        return out;
    }
    need_str(r, sep, "split", line);
    if (!sep->u.s.len) jr_fail(r, CLLM_EINVAL, line, "empty separator");
    int64_t k = 0;
    for (;;) {
        const char *f = (maxsplit < 0 || k < maxsplit)
                            ? memmem(p + i, len - i, sep->u.s.p, sep->u.s.len)
                            : NULL;
        if (!f) {
            jl_push(r, out.u.l, jv_str(r, p + i, len - i));
            return out;
        }
        jl_push(r, out.u.l, jv_str(r, p + i, (size_t)(f - (p + i))));
        i = (size_t)(f - p) + sep->u.s.len;
        k++;
    }
}

static bool starts_ends(const jv *s, const jv *x, bool end) {
    if (x->t != JV_STR || x->u.s.len > s->u.s.len) return false;
    const char *p = end ? s->u.s.p + s->u.s.len - x->u.s.len : s->u.s.p;
    return !memcmp(p, x->u.s.p, x->u.s.len);
}

static size_t cp_count(const jv *s) {
    size_t n = 0;
    for (size_t i = 0; i < s->u.s.len; i++) n += ((unsigned char)s->u.s.p[i] & 0xc0) != 0x80;
    return n;
}

static int64_t length(jrender *r, const jv *v, int line) {
    switch (v->t) {
    case JV_STR:
        return (int64_t)cp_count(v);
    case JV_LIST:
        return (int64_t)v->u.l->n;
    case JV_DICT:
    case JV_NS:
        return (int64_t)v->u.d->n;
    case JV_UNDEF:
        return 0;
    default:
        jr_fail(r, CLLM_EINVAL, line, "object of type %s has no len()", jv_type_name(v->t));
    }
}

/* ---- methods ---- */

static jv items_of(jrender *r, const jv *d) {
    jv out = jv_list(r);
    for (size_t i = 0; i < d->u.d->n; i++) {
        jv pair = jv_list(r);
        jl_push(r, pair.u.l, jv_str(r, d->u.d->k[i], d->u.d->klen[i]));
        jl_push(r, pair.u.l, d->u.d->v[i]);
        jl_push(r, out.u.l, pair);
    }
    return out;
}

#define METHOD(NAME)                                                                               \
    static jv m_##NAME(jrender *r, const jv *self, const jv *a, int na, const char **kwn,          \
                       const jv *kwv, int nkw, int line)

METHOD(strip) {
    return strip(r, self, na && a[0].t == JV_STR ? &a[0] : NULL, true, true);
}
METHOD(lstrip) {
    return strip(r, self, na && a[0].t == JV_STR ? &a[0] : NULL, true, false);
}
METHOD(rstrip) {
    return strip(r, self, na && a[0].t == JV_STR ? &a[0] : NULL, false, true);
}
METHOD(split) {
    const jv *sep = arg(a, na, kwn, kwv, nkw, 0, "sep"),
             *mx = arg(a, na, kwn, kwv, nkw, 1, "maxsplit");
    return split(r, self, sep, mx && mx->t == JV_INT ? mx->u.i : -1, line);
}
static jv starts_common(jrender *r, const jv *self, const jv *a, int na, bool end, int line) {
    if (!na) jr_fail(r, CLLM_EINVAL, line, "startswith/endswith needs an argument");
    if (a[0].t == JV_LIST) {
        for (size_t i = 0; i < a[0].u.l->n; i++)
            if (starts_ends(self, &a[0].u.l->v[i], end)) return jv_bool(true);
        return jv_bool(false);
    }
    need_str(r, &a[0], "startswith/endswith", line);
    return jv_bool(starts_ends(self, &a[0], end));
}
METHOD(startswith) {
    return starts_common(r, self, a, na, false, line);
}
METHOD(endswith) {
    return starts_common(r, self, a, na, true, line);
}
METHOD(replace) {
    if (na < 2) jr_fail(r, CLLM_EINVAL, line, "replace needs two arguments");
    need_str(r, &a[0], "replace", line);
    need_str(r, &a[1], "replace", line);
    const jv *c = arg(a, na, kwn, kwv, nkw, 2, "count");
    return replace(r, self, &a[0], &a[1], c && c->t == JV_INT ? c->u.i : -1);
}
METHOD(upper) {
    return map_case(r, self, 1);
}
METHOD(lower) {
    return map_case(r, self, 0);
}
METHOD(title) {
    return map_case(r, self, 3);
}
METHOD(capitalize) {
    return map_case(r, self, 2);
}
METHOD(find) {
    need_str(r, na ? &a[0] : NULL, "find", line);
    const char *f = memmem(self->u.s.p, self->u.s.len, a[0].u.s.p, a[0].u.s.len);
    if (!f) return jv_int(-1);
    jv pre = {.t = JV_STR};
    pre.u.s.p = self->u.s.p;
    pre.u.s.len = (size_t)(f - self->u.s.p);
    return jv_int((int64_t)cp_count(&pre));
}
METHOD(count) {
    need_str(r, na ? &a[0] : NULL, "count", line);
    if (!a[0].u.s.len) return jv_int((int64_t)cp_count(self) + 1);
    int64_t k = 0;
    const char *p = self->u.s.p, *e = p + self->u.s.len, *f;
    while ((f = memmem(p, (size_t)(e - p), a[0].u.s.p, a[0].u.s.len))) k++, p = f + a[0].u.s.len;
    return jv_int(k);
}
METHOD(join) {
    if (!na || a[0].t != JV_LIST) jr_fail(r, CLLM_EINVAL, line, "join expects a list");
    jbuf b = {0};
    for (size_t i = 0; i < a[0].u.l->n; i++) {
        if (i) jb_put(r, &b, self->u.s.p, self->u.s.len);
        need_str(r, &a[0].u.l->v[i], "join", line);
        jb_put(r, &b, a[0].u.l->v[i].u.s.p, a[0].u.l->v[i].u.s.len);
    }
    return jv_str(r, b.p ? b.p : "", b.len);
}
METHOD(splitlines) {
    jv out = jv_list(r);
    size_t i = 0, s = 0, n = self->u.s.len;
    const char *p = self->u.s.p;
    while (i < n) {
        if (p[i] == '\n' || p[i] == '\r') {
            jl_push(r, out.u.l, jv_str(r, p + s, i - s));
            if (p[i] == '\r' && i + 1 < n && p[i + 1] == '\n') i++;
            s = ++i;
        } else {
            i++;
        }
    }
    if (s < n) jl_push(r, out.u.l, jv_str(r, p + s, n - s));
    return out;
}
static jv is_class(const jv *self, int k) {
    if (!self->u.s.len) return jv_bool(false);
    size_t i = 0;
    while (i < self->u.s.len) {
        uint32_t c = next_cp(self->u.s.p, self->u.s.len, &i);
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
        bool ok = k == 0   ? cat == UTF8PROC_CATEGORY_ND
                  : k == 1 ? (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO)
                           : py_isspace(c);
        if (!ok) return jv_bool(false);
    }
    return jv_bool(true);
}
METHOD(isdigit) {
    return is_class(self, 0);
}
METHOD(isalpha) {
    return is_class(self, 1);
}
METHOD(isspace) {
    return is_class(self, 2);
}
METHOD(items) {
    return items_of(r, self);
}
METHOD(keys) {
    jv out = jv_list(r);
    for (size_t i = 0; i < self->u.d->n; i++)
        jl_push(r, out.u.l, jv_str(r, self->u.d->k[i], self->u.d->klen[i]));
    return out;
}
METHOD(values) {
    jv out = jv_list(r);
    for (size_t i = 0; i < self->u.d->n; i++) jl_push(r, out.u.l, self->u.d->v[i]);
    return out;
}
METHOD(get) {
    if (!na) jr_fail(r, CLLM_EINVAL, line, "get needs a key");
    const jv *v = a[0].t == JV_STR ? jd_get(self->u.d, a[0].u.s.p, a[0].u.s.len) : NULL;
    if (v) return *v;
    const jv *d = arg(a, na, kwn, kwv, nkw, 1, "default");
    return d ? *d : none();
}

static const struct {
    const char *name;
    jv (*fn)(jrender *, const jv *, const jv *, int, const char **, const jv *, int, int);
} METHODS[] = {
    {"strip", m_strip},           {"lstrip", m_lstrip},
    {"rstrip", m_rstrip},         {"split", m_split},
    {"startswith", m_startswith}, {"endswith", m_endswith},
    {"replace", m_replace},       {"upper", m_upper},
    {"lower", m_lower},           {"title", m_title},
    {"capitalize", m_capitalize}, {"find", m_find},
    {"count", m_count},           {"join", m_join},
    {"splitlines", m_splitlines}, {"isdigit", m_isdigit},
    {"isalpha", m_isalpha},       {"isspace", m_isspace},
    {"items", m_items},           {"keys", m_keys},
    {"values", m_values},         {"get", m_get},
};

jv jb_attr(jrender *r, const jv *obj, const char *name, size_t len, int line) {
    static const char *str_m[] = {"strip",      "lstrip",  "rstrip",  "split", "startswith",
                                  "endswith",   "replace", "upper",   "lower", "title",
                                  "capitalize", "find",    "count",   "join",  "splitlines",
                                  "isdigit",    "isalpha", "isspace", NULL};
    static const char *dict_m[] = {"items", "keys", "values", "get", NULL};
    const char **set = obj->t == JV_STR ? str_m : obj->t == JV_DICT ? dict_m : NULL;
    for (int i = 0; set && set[i]; i++) {
        if (strlen(set[i]) != len || memcmp(set[i], name, len)) continue;
        jfunc *f = jr_alloc(r, sizeof(*f));
        f->fn = NULL;
        for (size_t k = 0; k < sizeof(METHODS) / sizeof(*METHODS); k++)
            if (!strcmp(METHODS[k].name, set[i])) f->fn = METHODS[k].fn;
        f->name = set[i];
        f->self = jr_alloc(r, sizeof(jv));
        *f->self = *obj;
        jv v = {.t = JV_FUNC};
        v.u.fn = f;
        return v;
    }
    return undef();
}

/* ---- globals ---- */

static jv g_range(jrender *r, const jv *self, const jv *a, int na, const char **kwn, const jv *kwv,
                  int nkw, int line) {
    int64_t s = 0, e, st = 1;
    for (int i = 0; i < na; i++)
        if (a[i].t != JV_INT) jr_fail(r, CLLM_EINVAL, line, "range expects integers");
    if (na == 1)
        e = a[0].u.i;
    else if (na >= 2)
        s = a[0].u.i, e = a[1].u.i, st = na > 2 ? a[2].u.i : 1;
    else
        jr_fail(r, CLLM_EINVAL, line, "range expects 1 to 3 arguments");
    if (!st) jr_fail(r, CLLM_EINVAL, line, "range step cannot be zero");
    jv out = jv_list(r);
    for (int64_t i = s; st > 0 ? i < e : i > e; i += st) {
        if (++r->steps > r->max_steps) jr_fail(r, CLLM_ENOMEM, line, "range too long");
        jl_push(r, out.u.l, jv_int(i));
    }
    return out;
}

static jv g_namespace(jrender *r, const jv *self, const jv *a, int na, const char **kwn,
                      const jv *kwv, int nkw, int line) {
    jv ns = jv_dict(r);
    ns.t = JV_NS;
    if (na && (a[0].t == JV_DICT || a[0].t == JV_NS))
        for (size_t i = 0; i < a[0].u.d->n; i++)
            jd_set(r, ns.u.d, a[0].u.d->k[i], a[0].u.d->klen[i], a[0].u.d->v[i]);
    for (int i = 0; i < nkw; i++) jd_set(r, ns.u.d, kwn[i], strlen(kwn[i]), kwv[i]);
    return ns;
}

static jv g_dict(jrender *r, const jv *self, const jv *a, int na, const char **kwn, const jv *kwv,
                 int nkw, int line) {
    jv d = g_namespace(r, self, a, na, kwn, kwv, nkw, line);
    d.t = JV_DICT;
    return d;
}

static jv g_raise(jrender *r, const jv *self, const jv *a, int na, const char **kwn, const jv *kwv,
                  int nkw, int line) {
    jv m = na ? jv_stringify(r, &a[0]) : jv_strz("error");
    jr_fail(r, CLLM_EINVAL, line, "raise_exception: %.*s", (int)(m.u.s.len > 300 ? 300 : m.u.s.len),
            m.u.s.p);
}

static jv g_strftime(jrender *r, const jv *self, const jv *a, int na, const char **kwn,
                     const jv *kwv, int nkw, int line) {
    need_str(r, na ? &a[0] : NULL, "strftime_now", line);
    char fmt[128], buf[256];
    snprintf(fmt, sizeof(fmt), "%.*s", (int)a[0].u.s.len, a[0].u.s.p);
    time_t t = time(NULL);
    struct tm tmv;
    localtime_r(&t, &tmv);
    size_t n = strftime(buf, sizeof(buf), fmt, &tmv);
    return jv_str(r, buf, n);
}

jv jb_global(jrender *r, const char *name, size_t len) {
    static const struct {
        const char *name;
        jv (*fn)(jrender *, const jv *, const jv *, int, const char **, const jv *, int, int);
    } G[] = {{"range", g_range},
             {"namespace", g_namespace},
             {"dict", g_dict},
             {"raise_exception", g_raise},
             {"strftime_now", g_strftime}};
    for (size_t i = 0; i < sizeof(G) / sizeof(*G); i++) {
        if (strlen(G[i].name) != len || memcmp(G[i].name, name, len)) continue;
        jfunc *f = jr_alloc(r, sizeof(*f));
        f->fn = G[i].fn;
        f->name = G[i].name;
        jv v = {.t = JV_FUNC};
        v.u.fn = f;
        return v;
    }
    return undef();
}

/* ---- tests ---- */

bool jb_test(jrender *r, const char *name, const jv *v, const jv *a, int na, int line) {
    if (!strcmp(name, "defined")) return v->t != JV_UNDEF;
    if (!strcmp(name, "undefined")) return v->t == JV_UNDEF;
    if (!strcmp(name, "none")) return v->t == JV_NONE;
    if (!strcmp(name, "string")) return v->t == JV_STR;
    if (!strcmp(name, "number")) return v->t == JV_INT || v->t == JV_FLOAT;
    if (!strcmp(name, "integer")) return v->t == JV_INT;
    if (!strcmp(name, "float")) return v->t == JV_FLOAT;
    if (!strcmp(name, "boolean")) return v->t == JV_BOOL;
    if (!strcmp(name, "true")) return v->t == JV_BOOL && v->u.b;
    if (!strcmp(name, "false")) return v->t == JV_BOOL && !v->u.b;
    if (!strcmp(name, "mapping")) return v->t == JV_DICT || v->t == JV_NS;
    if (!strcmp(name, "iterable"))
        return v->t == JV_LIST || v->t == JV_DICT || v->t == JV_STR || v->t == JV_UNDEF;
    if (!strcmp(name, "sequence")) return v->t == JV_LIST || v->t == JV_DICT || v->t == JV_STR;
    if (!strcmp(name, "callable")) return v->t == JV_FUNC || v->t == JV_MACRO;
    if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        if (v->t != JV_INT) jr_fail(r, CLLM_EINVAL, line, "odd/even expects an integer");
        return (v->u.i % 2 != 0) == (name[0] == 'o');
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (v->t != JV_STR) return false;
        jv m = map_case(r, v, name[0] == 'u');
        return jv_equal(&m, v);
    }
    if (!na) jr_fail(r, CLLM_EINVAL, line, "unknown test '%s' (or missing argument)", name);
    if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "==") ||
        !strcmp(name, "sameas"))
        return jv_equal(v, &a[0]);
    if (!strcmp(name, "ne") || !strcmp(name, "!=")) return !jv_equal(v, &a[0]);
    if (!strcmp(name, "lt") || !strcmp(name, "lessthan")) return jv_compare(r, v, &a[0], line) < 0;
    if (!strcmp(name, "gt") || !strcmp(name, "greaterthan"))
        return jv_compare(r, v, &a[0], line) > 0;
    if (!strcmp(name, "le")) return jv_compare(r, v, &a[0], line) <= 0;
    if (!strcmp(name, "ge")) return jv_compare(r, v, &a[0], line) >= 0;
    if (!strcmp(name, "in")) {
        const jv *h = &a[0];
        if (h->t == JV_STR)
            return v->t == JV_STR && memmem(h->u.s.p, h->u.s.len, v->u.s.p, v->u.s.len);
        if (h->t == JV_LIST) {
            for (size_t i = 0; i < h->u.l->n; i++)
                if (jv_equal(v, &h->u.l->v[i])) return true;
            return false;
        }
        if (h->t == JV_DICT) return v->t == JV_STR && jd_get(h->u.d, v->u.s.p, v->u.s.len);
        return false;
    }
    if (!strcmp(name, "divisibleby")) {
        if (v->t != JV_INT || a[0].t != JV_INT || !a[0].u.i)
            jr_fail(r, CLLM_EINVAL, line, "divisibleby expects integers");
        return v->u.i % a[0].u.i == 0;
    }
    jr_fail(r, CLLM_EINVAL, line, "unknown test '%s'", name);
}

/* ---- filters ---- */

static jv attr_path(jrender *r, const jv *v, const jv *attr) {
    if (attr->t == JV_INT)
        return v->t == JV_LIST && attr->u.i >= 0 && (size_t)attr->u.i < v->u.l->n
                   ? v->u.l->v[attr->u.i]
                   : undef();
    if (attr->t != JV_STR) return undef();
    /* "a.b" walks nested dicts */
    jv cur = *v;
    const char *p = attr->u.s.p, *e = p + attr->u.s.len;
    while (p <= e) {
        const char *dot = memchr(p, '.', (size_t)(e - p));
        size_t n = dot ? (size_t)(dot - p) : (size_t)(e - p);
        if (cur.t != JV_DICT && cur.t != JV_NS) return undef();
        const jv *x = jd_get(cur.u.d, p, n);
        if (!x) return undef();
        cur = *x;
        if (!dot) break;
        p = dot + 1;
    }
    return cur;
}

static void sort_list(jrender *r, jv *items, bool reverse, const jv *attr, int line) {
    /* insertion sort: stable, and lists in templates are short */
    jv *v = items->u.l->v;
    for (size_t i = 1; i < items->u.l->n; i++) {
        jv x = v[i];
        jv kx = attr ? attr_path(r, &x, attr) : x;
        size_t j = i;
        while (j > 0) {
            jv ky = attr ? attr_path(r, &v[j - 1], attr) : v[j - 1];
            int c = jv_compare(r, &ky, &kx, line);
            if (reverse ? c >= 0 : c <= 0) break;
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
}

static jv copy_list(jrender *r, const jv *l) {
    jv out = jv_list(r);
    for (size_t i = 0; i < l->u.l->n; i++) jl_push(r, out.u.l, l->u.l->v[i]);
    return out;
}

static jv to_list(jrender *r, const jv *v, int line) {
    if (v->t == JV_LIST) return copy_list(r, v);
    jv out = jv_list(r);
    if (v->t == JV_DICT || v->t == JV_NS) {
        for (size_t i = 0; i < v->u.d->n; i++)
            jl_push(r, out.u.l, jv_str(r, v->u.d->k[i], v->u.d->klen[i]));
    } else if (v->t == JV_STR) {
        size_t i = 0;
        while (i < v->u.s.len) {
            size_t s = i;
            next_cp(v->u.s.p, v->u.s.len, &i);
            jl_push(r, out.u.l, jv_str(r, v->u.s.p + s, i - s));
        }
    } else if (v->t != JV_UNDEF) {
        jr_fail(r, CLLM_EINVAL, line, "'%s' object is not iterable", jv_type_name(v->t));
    }
    return out;
}

/* Each filter gets the filter's name (a filter serving several names branches on it), the
 * operand, positional and keyword arguments. */
#define FILTER(NAME)                                                                               \
    static jv f_##NAME(jrender *r, const char *name, jv v, const jv *a, int na, const char **kwn,  \
                       const jv *kwv, int nkw, int line)

FILTER(safe) {
    return v; /* no autoescape */
}
FILTER(tojson) {
    const jv *ind = arg(a, na, kwn, kwv, nkw, 0, "indent");
    jbuf b = {0};
    jv_to_json(r, &v, ind && ind->t == JV_INT ? (int)ind->u.i : -1, 0, &b, line);
    return jv_str(r, b.p ? b.p : "", b.len);
}
FILTER(default) {
    const jv *dflt = arg(a, na, kwn, kwv, nkw, 0, "default_value");
    const jv *boolean = arg(a, na, kwn, kwv, nkw, 1, "boolean");
    bool use = v.t == JV_UNDEF || (boolean && jv_truthy(boolean) && !jv_truthy(&v));
    return use ? (dflt ? *dflt : jv_strz("")) : v;
}
FILTER(length) {
    return jv_int(length(r, &v, line));
}
FILTER(string) {
    return jv_stringify(r, &v);
}
FILTER(list) {
    return to_list(r, &v, line);
}
FILTER(items) {
    if (v.t == JV_UNDEF) return jv_list(r);
    if (v.t != JV_DICT && v.t != JV_NS) jr_fail(r, CLLM_EINVAL, line, "items expects a mapping");
    return items_of(r, &v);
}
FILTER(first) {
    jv l = to_list(r, &v, line);
    return l.u.l->n ? l.u.l->v[0] : undef();
}
FILTER(last) {
    jv l = to_list(r, &v, line);
    return l.u.l->n ? l.u.l->v[l.u.l->n - 1] : undef();
}
FILTER(reverse) {
    if (v.t == JV_STR) {
        jv l = to_list(r, &v, line);
        jbuf b = {0};
        for (size_t i = l.u.l->n; i-- > 0;) jb_put(r, &b, l.u.l->v[i].u.s.p, l.u.l->v[i].u.s.len);
        return jv_str(r, b.p ? b.p : "", b.len);
    }
    jv l = to_list(r, &v, line), out = jv_list(r);
    for (size_t i = l.u.l->n; i-- > 0;) jl_push(r, out.u.l, l.u.l->v[i]);
    return out;
}
FILTER(join) {
    const jv *sep = arg(a, na, kwn, kwv, nkw, 0, "d");
    const jv *at = arg(a, na, kwn, kwv, nkw, 1, "attribute");
    jv l = to_list(r, &v, line);
    jbuf b = {0};
    for (size_t i = 0; i < l.u.l->n; i++) {
        if (i && sep) {
            jv s = jv_stringify(r, sep);
            jb_put(r, &b, s.u.s.p, s.u.s.len);
        }
        jv x = at ? attr_path(r, &l.u.l->v[i], at) : l.u.l->v[i];
        jv s = jv_stringify(r, &x);
        jb_put(r, &b, s.u.s.p, s.u.s.len);
    }
    return jv_str(r, b.p ? b.p : "", b.len);
}
FILTER(sort) {
    const jv *rev = arg(a, na, kwn, kwv, nkw, 0, "reverse");
    const jv *at = arg(a, na, kwn, kwv, nkw, 2, "attribute");
    jv l = to_list(r, &v, line);
    sort_list(r, &l, rev && jv_truthy(rev), at, line);
    return l;
}
FILTER(dictsort) {
    if (v.t != JV_DICT) jr_fail(r, CLLM_EINVAL, line, "dictsort expects a mapping");
    jv l = items_of(r, &v);
    jv key = jv_int(0);
    sort_list(r, &l, false, &key, line);
    return l;
}
FILTER(unique) {
    jv l = to_list(r, &v, line), out = jv_list(r);
    for (size_t i = 0; i < l.u.l->n; i++) {
        bool seen = false;
        for (size_t j = 0; j < out.u.l->n && !seen; j++)
            seen = jv_equal(&out.u.l->v[j], &l.u.l->v[i]);
        if (!seen) jl_push(r, out.u.l, l.u.l->v[i]);
    }
    return out;
}
FILTER(map) {
    jv l = to_list(r, &v, line), out = jv_list(r);
    const jv *at = kwarg(kwn, kwv, nkw, "attribute");
    const jv *dflt = kwarg(kwn, kwv, nkw, "default");
    for (size_t i = 0; i < l.u.l->n; i++) {
        if (at) {
            jv x = attr_path(r, &l.u.l->v[i], at);
            jl_push(r, out.u.l, x.t == JV_UNDEF && dflt ? *dflt : x);
        } else if (na && a[0].t == JV_STR) {
            char fname[64];
            snprintf(fname, sizeof(fname), "%.*s", (int)a[0].u.s.len, a[0].u.s.p);
            jl_push(r, out.u.l,
                    jb_filter(r, fname, l.u.l->v[i], a + 1, na - 1, kwn, kwv, nkw, line));
        } else {
            jr_fail(r, CLLM_EINVAL, line, "map needs a filter name or attribute=");
        }
    }
    return out;
}
/* select, reject, selectattr, rejectattr */
FILTER(select) {
    bool sel = name[0] == 's', byattr = strstr(name, "attr") != NULL;
    int k = byattr ? 1 : 0;
    if (byattr && (!na || a[0].t != JV_STR))
        jr_fail(r, CLLM_EINVAL, line, "%s needs an attribute name", name);
    jv l = to_list(r, &v, line), out = jv_list(r);
    for (size_t i = 0; i < l.u.l->n; i++) {
        jv x = byattr ? attr_path(r, &l.u.l->v[i], &a[0]) : l.u.l->v[i];
        bool ok;
        if (na > k) {
            char tname[64];
            jv tn = jv_stringify(r, &a[k]);
            snprintf(tname, sizeof(tname), "%.*s", (int)tn.u.s.len, tn.u.s.p);
            ok = jb_test(r, tname, &x, a + k + 1, na - k - 1, line);
        } else {
            ok = jv_truthy(&x);
        }
        if (ok == sel) jl_push(r, out.u.l, l.u.l->v[i]);
    }
    return out;
}
FILTER(int) {
    const jv *dflt = arg(a, na, kwn, kwv, nkw, 0, "default");
    if (v.t == JV_INT) return v;
    if (v.t == JV_BOOL) return jv_int(v.u.b);
    if (v.t == JV_FLOAT) return jv_int((int64_t)v.u.f);
    if (v.t == JV_STR) {
        char buf[64], *end;
        snprintf(buf, sizeof(buf), "%.*s", (int)v.u.s.len, v.u.s.p);
        long long x = strtoll(buf, &end, 10);
        if (end != buf && !*end) return jv_int(x);
        double f = strtod(buf, &end);
        if (end != buf && !*end && isfinite(f)) return jv_int((int64_t)f);
    }
    return dflt ? *dflt : jv_int(0);
}
FILTER(float) {
    jv out = {.t = JV_FLOAT};
    if (v.t == JV_FLOAT) return v;
    if (v.t == JV_INT || v.t == JV_BOOL)
        out.u.f = v.t == JV_INT ? (double)v.u.i : v.u.b;
    else if (v.t == JV_STR) {
        char buf[64], *end;
        snprintf(buf, sizeof(buf), "%.*s", (int)v.u.s.len, v.u.s.p);
        out.u.f = strtod(buf, &end);
        if (end == buf || *end) out.u.f = 0;
    }
    return out;
}
FILTER(abs) {
    if (v.t == JV_INT) return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    if (v.t == JV_FLOAT) return v.u.f = fabs(v.u.f), v;
    jr_fail(r, CLLM_EINVAL, line, "abs expects a number");
}
FILTER(round) {
    const jv *pr = arg(a, na, kwn, kwv, nkw, 0, "precision");
    double x = v.t == JV_FLOAT ? v.u.f
               : v.t == JV_INT ? (double)v.u.i
                               : 0,
           m = pow(10, pr && pr->t == JV_INT ? (double)pr->u.i : 0);
    jv out = {.t = JV_FLOAT};
    out.u.f = round(x * m) / m;
    return out;
}
/* string filters: the operand is stringified first */
FILTER(trim) {
    jv s = jv_stringify(r, &v);
    return strip(r, &s, na && a[0].t == JV_STR ? &a[0] : NULL, true, true);
}
FILTER(upper) {
    jv s = jv_stringify(r, &v);
    return map_case(r, &s, 1);
}
FILTER(lower) {
    jv s = jv_stringify(r, &v);
    return map_case(r, &s, 0);
}
FILTER(capitalize) {
    jv s = jv_stringify(r, &v);
    return map_case(r, &s, 2);
}
FILTER(title) {
    jv s = jv_stringify(r, &v);
    return map_case(r, &s, 3);
}
FILTER(wordcount) {
    jv s = jv_stringify(r, &v);
    return jv_int((int64_t)split(r, &s, NULL, -1, line).u.l->n);
}
FILTER(replace) {
    jv s = jv_stringify(r, &v);
    if (na < 2) jr_fail(r, CLLM_EINVAL, line, "replace needs two arguments");
    jv o = jv_stringify(r, &a[0]), n = jv_stringify(r, &a[1]);
    const jv *c = arg(a, na, kwn, kwv, nkw, 2, "count");
    return replace(r, &s, &o, &n, c && c->t == JV_INT ? c->u.i : -1);
}
/* indent(width=4, first=False, blank=False) */
FILTER(indent) {
    jv s = jv_stringify(r, &v);
    const jv *w = arg(a, na, kwn, kwv, nkw, 0, "width");
    const jv *first = arg(a, na, kwn, kwv, nkw, 1, "first");
    const jv *blank = arg(a, na, kwn, kwv, nkw, 2, "blank");
    jv pad = w && w->t == JV_STR ? *w : jv_strz("    ");
    if (w && w->t == JV_INT) {
        char *sp = jr_alloc(r, (size_t)(w->u.i > 0 ? w->u.i : 0) + 1);
        memset(sp, ' ', (size_t)(w->u.i > 0 ? w->u.i : 0));
        pad = jv_str(r, sp, (size_t)(w->u.i > 0 ? w->u.i : 0));
    }
    jbuf b = {0};
    size_t i = 0, ln = 0;
    while (i <= s.u.s.len) {
        const char *nl = memchr(s.u.s.p + i, '\n', s.u.s.len - i);
        size_t e = nl ? (size_t)(nl - s.u.s.p) : s.u.s.len;
        bool empty = e == i;
        if ((ln > 0 || (first && jv_truthy(first))) && (!empty || (blank && jv_truthy(blank))))
            jb_put(r, &b, pad.u.s.p, pad.u.s.len);
        jb_put(r, &b, s.u.s.p + i, e - i);
        if (!nl) break;
        jb_put(r, &b, "\n", 1);
        i = e + 1;
        ln++;
    }
    return jv_str(r, b.p ? b.p : "", b.len);
}

static const struct {
    const char *name;
    jv (*fn)(jrender *, const char *, jv, const jv *, int, const char **, const jv *, int, int);
} FILTERS[] = {
    {"safe", f_safe},         {"e", f_safe},
    {"escape", f_safe},       {"forceescape", f_safe},
    {"tojson", f_tojson},     {"default", f_default},
    {"d", f_default},         {"length", f_length},
    {"count", f_length},      {"string", f_string},
    {"list", f_list},         {"items", f_items},
    {"first", f_first},       {"last", f_last},
    {"reverse", f_reverse},   {"join", f_join},
    {"sort", f_sort},         {"dictsort", f_dictsort},
    {"unique", f_unique},     {"map", f_map},
    {"selectattr", f_select}, {"rejectattr", f_select},
    {"select", f_select},     {"reject", f_select},
    {"int", f_int},           {"float", f_float},
    {"abs", f_abs},           {"round", f_round},
    {"trim", f_trim},         {"upper", f_upper},
    {"lower", f_lower},       {"capitalize", f_capitalize},
    {"title", f_title},       {"replace", f_replace},
    {"indent", f_indent},     {"wordcount", f_wordcount},
};

jv jb_filter(jrender *r, const char *name, jv v, const jv *a, int na, const char **kwn,
             const jv *kwv, int nkw, int line) {
    for (size_t i = 0; i < sizeof(FILTERS) / sizeof(*FILTERS); i++)
        if (!strcmp(FILTERS[i].name, name))
            return FILTERS[i].fn(r, name, v, a, na, kwn, kwv, nkw, line);
    jr_fail(r, CLLM_EINVAL, line, "unknown filter '%s'", name);
}
