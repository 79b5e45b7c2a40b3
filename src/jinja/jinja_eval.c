/* Jinja evaluator: walks the AST of jinja_parse.c with Python Jinja2 semantics and renders into
 * a capped buffer. cllm_jinja_render (jinja.h) is called once per request by the chat-template
 * code.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

static jv eval(jrender *r, const jnode *n, jscope *sc);
static void exec(jrender *r, const jnode *n, jscope *sc, jbuf *out);

static void step(jrender *r, int line) {
    if (++r->steps > r->max_steps)
        jr_fail(r, CLLM_ENOMEM, line, "step limit reached (loop too long?)");
}

static void put_out(jrender *r, jbuf *out, const char *s, size_t n, int line) {
    if (out->len + n > r->max_output) jr_fail(r, CLLM_ENOMEM, line, "output larger than the limit");
    jb_put(r, out, s, n);
}

static jscope *new_scope(jrender *r, jscope *parent) {
    jscope *s = jr_alloc(r, sizeof(*s));
    s->parent = parent;
    return s;
}

static const jv *lookup(jscope *sc, const char *k, size_t kl) {
    for (; sc; sc = sc->parent) {
        const jv *v = jd_get(&sc->vars, k, kl);
        if (v) return v;
    }
    return NULL;
}

/* Code point offsets of a string, for Python-style indexing and slicing. */
static size_t cp_offsets(jrender *r, const jv *s, size_t **offs) {
    size_t n = 0;
    for (size_t i = 0; i < s->u.s.len; i++) n += ((unsigned char)s->u.s.p[i] & 0xc0) != 0x80;
    *offs = jr_alloc(r, (n + 1) * sizeof(size_t));
    size_t k = 0;
    for (size_t i = 0; i < s->u.s.len; i++)
        if (((unsigned char)s->u.s.p[i] & 0xc0) != 0x80) (*offs)[k++] = i;
    (*offs)[n] = s->u.s.len;
    return n;
}

static jv item(jrender *r, const jv *obj, const jv *key, int line) {
    jv undef = {.t = JV_UNDEF};
    if ((obj->t == JV_DICT || obj->t == JV_NS) && key->t == JV_STR) {
        const jv *v = jd_get(obj->u.d, key->u.s.p, key->u.s.len);
        return v ? *v : jb_attr(r, obj, key->u.s.p, key->u.s.len, line);
    }
    if ((obj->t == JV_LIST || obj->t == JV_STR) && (key->t == JV_INT || key->t == JV_BOOL)) {
        int64_t i = key->t == JV_INT ? key->u.i : key->u.b;
        if (obj->t == JV_LIST) {
            int64_t n = (int64_t)obj->u.l->n;
            if (i < 0) i += n;
            return i >= 0 && i < n ? obj->u.l->v[i] : undef;
        }
        size_t *offs;
        int64_t n = (int64_t)cp_offsets(r, obj, &offs);
        if (i < 0) i += n;
        if (i < 0 || i >= n) return undef;
        return jv_str(r, obj->u.s.p + offs[i], offs[i + 1] - offs[i]);
    }
    if ((obj->t == JV_STR || obj->t == JV_LIST) && key->t == JV_STR)
        return jb_attr(r, obj, key->u.s.p, key->u.s.len, line);
    if (obj->t == JV_UNDEF) jr_fail(r, CLLM_EINVAL, line, "subscript of an undefined value");
    return undef;
}

static jv attr(jrender *r, const jv *obj, const char *name, size_t len, int line) {
    if (obj->t == JV_UNDEF)
        jr_fail(r, CLLM_EINVAL, line, "'%.*s' of an undefined value", (int)len, name);
    if (obj->t == JV_DICT || obj->t == JV_NS) {
        /* Jinja tries the attribute first: dict methods shadow keys of the same name. */
        static const char *methods[] = {"items", "keys", "values", "get"};
        if (obj->t == JV_DICT)
            for (size_t i = 0; i < 4; i++)
                if (strlen(methods[i]) == len && !memcmp(methods[i], name, len))
                    return jb_attr(r, obj, name, len, line);
        const jv *v = jd_get(obj->u.d, name, len);
        if (v) return *v;
        return (jv){.t = JV_UNDEF};
    }
    return jb_attr(r, obj, name, len, line);
}

static int64_t clampi(int64_t i, int64_t n, int64_t lo, int64_t hi) {
    if (i < 0) i += n;
    return i < lo ? lo : i > hi ? hi : i;
}

static jv slice(jrender *r, const jv *obj, const jnode *n, jscope *sc) {
    jv a = n->b ? eval(r, n->b, sc) : (jv){.t = JV_NONE};
    jv b = n->c ? eval(r, n->c, sc) : (jv){.t = JV_NONE};
    jv c = n->d ? eval(r, n->d, sc) : (jv){.t = JV_NONE};
    int64_t st = c.t == JV_INT ? c.u.i : 1;
    if (!st) jr_fail(r, CLLM_EINVAL, n->line, "slice step cannot be zero");
    size_t *offs = NULL;
    int64_t len;
    if (obj->t == JV_LIST)
        len = (int64_t)obj->u.l->n;
    else if (obj->t == JV_STR)
        len = (int64_t)cp_offsets(r, obj, &offs);
    else
        jr_fail(r, CLLM_EINVAL, n->line, "cannot slice a %s", jv_type_name(obj->t));
    int64_t lo, hi;
    if (st > 0) {
        lo = a.t == JV_INT ? clampi(a.u.i, len, 0, len) : 0;
        hi = b.t == JV_INT ? clampi(b.u.i, len, 0, len) : len;
    } else {
        lo = a.t == JV_INT ? clampi(a.u.i, len, -1, len - 1) : len - 1;
        hi = b.t == JV_INT ? clampi(b.u.i, len, -1, len - 1) : -1;
    }
    if (obj->t == JV_LIST) {
        jv out = jv_list(r);
        for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) jl_push(r, out.u.l, obj->u.l->v[i]);
        return out;
    }
    jbuf buf = {0};
    for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st)
        jb_put(r, &buf, obj->u.s.p + offs[i], offs[i + 1] - offs[i]);
    return jv_str(r, buf.p ? buf.p : "", buf.len);
}

static bool is_num(const jv *v) {
    return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL;
}
static double num(const jv *v) {
    return v->t == JV_FLOAT ? v->u.f : v->t == JV_INT ? (double)v->u.i : v->u.b;
}
static int64_t inum(const jv *v) {
    return v->t == JV_INT ? v->u.i : v->u.b;
}

static bool contains(jrender *r, const jv *needle, const jv *hay, int line) {
    if (hay->t == JV_STR) {
        if (needle->t != JV_STR)
            jr_fail(r, CLLM_EINVAL, line, "'in <string>' needs a string on the left");
        return needle->u.s.len == 0 ||
               memmem(hay->u.s.p, hay->u.s.len, needle->u.s.p, needle->u.s.len) != NULL;
    }
    if (hay->t == JV_LIST) {
        for (size_t i = 0; i < hay->u.l->n; i++)
            if (jv_equal(needle, &hay->u.l->v[i])) return true;
        return false;
    }
    if (hay->t == JV_DICT || hay->t == JV_NS)
        return needle->t == JV_STR && jd_get(hay->u.d, needle->u.s.p, needle->u.s.len);
    if (hay->t == JV_UNDEF) return false;
    jr_fail(r, CLLM_EINVAL, line, "'in' on a %s", jv_type_name(hay->t));
}

static jv binop(jrender *r, int op, jv a, jv b, int line) {
    jv out = {.t = JV_NONE};
    switch (op) {
    case OP_EQ:
        return jv_bool(jv_equal(&a, &b));
    case OP_NE:
        return jv_bool(!jv_equal(&a, &b));
    case OP_LT:
        return jv_bool(jv_compare(r, &a, &b, line) < 0);
    case OP_GT:
        return jv_bool(jv_compare(r, &a, &b, line) > 0);
    case OP_LE:
        return jv_bool(jv_compare(r, &a, &b, line) <= 0);
    case OP_GE:
        return jv_bool(jv_compare(r, &a, &b, line) >= 0);
    case OP_IN:
        return jv_bool(contains(r, &a, &b, line));
    case OP_NOTIN:
        return jv_bool(!contains(r, &a, &b, line));
    case OP_CONCAT: {
        jv x = jv_stringify(r, &a), y = jv_stringify(r, &b);
        jbuf buf = {0};
        jb_put(r, &buf, x.u.s.p, x.u.s.len);
        jb_put(r, &buf, y.u.s.p, y.u.s.len);
        return jv_str(r, buf.p ? buf.p : "", buf.len);
    }
    default:
        break;
    }
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        char *p = jr_alloc(r, a.u.s.len + b.u.s.len + 1);
        memcpy(p, a.u.s.p, a.u.s.len);
        memcpy(p + a.u.s.len, b.u.s.p, b.u.s.len);
        out.t = JV_STR;
        out.u.s.p = p;
        out.u.s.len = a.u.s.len + b.u.s.len;
        return out;
    }
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST) {
        out = jv_list(r);
        for (size_t i = 0; i < a.u.l->n; i++) jl_push(r, out.u.l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) jl_push(r, out.u.l, b.u.l->v[i]);
        return out;
    }
    if (op == OP_MUL && (a.t == JV_STR || a.t == JV_LIST) && b.t == JV_INT) {
        int64_t k = b.u.i < 0 ? 0 : b.u.i;
        if (a.t == JV_STR) {
            if (a.u.s.len && (uint64_t)k > r->max_output / a.u.s.len)
                jr_fail(r, CLLM_ENOMEM, line, "string too long");
            jbuf buf = {0};
            for (int64_t i = 0; i < k; i++) jb_put(r, &buf, a.u.s.p, a.u.s.len);
            return jv_str(r, buf.p ? buf.p : "", buf.len);
        }
        out = jv_list(r);
        for (int64_t i = 0; i < k; i++) {
            step(r, line);
            for (size_t j = 0; j < a.u.l->n; j++) jl_push(r, out.u.l, a.u.l->v[j]);
        }
        return out;
    }
    if (!is_num(&a) || !is_num(&b))
        jr_fail(r, CLLM_EINVAL, line, "unsupported operand types %s and %s", jv_type_name(a.t),
                jv_type_name(b.t));
    bool fl = a.t == JV_FLOAT || b.t == JV_FLOAT;
    double x = num(&a), y = num(&b);
    int64_t i = inum(&a), j = inum(&b);
    switch (op) {
    case OP_ADD:
        if (fl) break;
        return jv_int((int64_t)((uint64_t)i + (uint64_t)j));
    case OP_SUB:
        if (fl) break;
        return jv_int((int64_t)((uint64_t)i - (uint64_t)j));
    case OP_MUL:
        if (fl) break;
        return jv_int((int64_t)((uint64_t)i * (uint64_t)j));
    case OP_DIV:
        if (y == 0) jr_fail(r, CLLM_EINVAL, line, "division by zero");
        out.t = JV_FLOAT;
        out.u.f = x / y;
        return out;
    case OP_FLOORDIV:
    case OP_MOD:
        if (y == 0) jr_fail(r, CLLM_EINVAL, line, "division by zero");
        if (!fl) {
            if (j == -1 && i == INT64_MIN) jr_fail(r, CLLM_EINVAL, line, "integer overflow");
            int64_t q = i / j, m = i % j;
            if (m && ((m < 0) != (j < 0))) q--, m += j; /* Python floors */
            return jv_int(op == OP_MOD ? m : q);
        }
        break;
    case OP_POW:
        if (!fl && j >= 0) {
            int64_t res = 1;
            for (int64_t k = 0; k < j && k < 64; k++) res = (int64_t)((uint64_t)res * (uint64_t)i);
            return jv_int(res);
        }
        break;
    }
    out.t = JV_FLOAT;
    switch (op) {
    case OP_ADD:
        out.u.f = x + y;
        break;
    case OP_SUB:
        out.u.f = x - y;
        break;
    case OP_MUL:
        out.u.f = x * y;
        break;
    case OP_FLOORDIV:
        out.u.f = floor(x / y);
        break;
    case OP_MOD:
        out.u.f = x - floor(x / y) * y;
        break;
    case OP_POW:
        out.u.f = pow(x, y);
        break;
    }
    return out;
}

/* Evaluated call arguments. */
typedef struct args {
    jv *pos;
    int npos;
    const char **kwn;
    jv *kwv;
    int nkw;
} args;

static args eval_args(jrender *r, const jnode *n, jscope *sc) {
    args a = {0};
    a.pos = jr_alloc(r, (size_t)(n->nkids + 1) * sizeof(jv));
    a.kwv = jr_alloc(r, (size_t)(n->nkids + 1) * sizeof(jv));
    a.kwn = jr_alloc(r, (size_t)(n->nkids + 1) * sizeof(char *));
    for (int i = 0; i < n->nkids; i++) {
        jv v = eval(r, n->kids[i], sc);
        if (n->names && n->names[i]) {
            a.kwn[a.nkw] = n->names[i];
            a.kwv[a.nkw++] = v;
        } else {
            a.pos[a.npos++] = v;
        }
    }
    return a;
}

static jv call_macro(jrender *r, const jfunc *f, const args *a, const jv *caller, int line) {
    const jnode *m = f->macro;
    if (++r->mdepth > r->max_depth) jr_fail(r, CLLM_ENOMEM, line, "macro recursion too deep");
    jscope *sc = new_scope(r, r->globals);
    jv varargs = jv_list(r), kwargs = jv_dict(r);
    for (int i = 0; i < m->nnames; i++) {
        jv v = {.t = JV_UNDEF};
        bool set = false;
        if (i < a->npos) v = a->pos[i], set = true;
        for (int k = 0; k < a->nkw && !set; k++)
            if (!strcmp(a->kwn[k], m->names[i])) v = a->kwv[k], set = true;
        if (!set && m->kids[i]) v = eval(r, m->kids[i], sc);
        jd_set(r, &sc->vars, m->names[i], strlen(m->names[i]), v);
    }
    for (int i = m->nnames; i < a->npos; i++) jl_push(r, varargs.u.l, a->pos[i]);
    for (int k = 0; k < a->nkw; k++) {
        bool known = false;
        for (int i = 0; i < m->nnames; i++) known |= !strcmp(a->kwn[k], m->names[i]);
        if (!known) jd_set(r, kwargs.u.d, a->kwn[k], strlen(a->kwn[k]), a->kwv[k]);
    }
    jd_set(r, &sc->vars, "varargs", 7, varargs);
    jd_set(r, &sc->vars, "kwargs", 6, kwargs);
    if (caller) jd_set(r, &sc->vars, "caller", 6, *caller);
    jbuf out = {0};
    exec(r, m->b, sc, &out);
    r->mdepth--;
    return jv_str(r, out.p ? out.p : "", out.len);
}

static jv call_value(jrender *r, const jv *fnv, const args *a, const jv *caller, int line) {
    step(r, line);
    if (fnv->t != JV_FUNC && fnv->t != JV_MACRO)
        jr_fail(r, CLLM_EINVAL, line, "%s is not callable", jv_type_name(fnv->t));
    const jfunc *f = fnv->u.fn;
    if (f->macro) return call_macro(r, f, a, caller, line);
    return f->fn(r, f->self, a->pos, a->npos, a->kwn, a->kwv, a->nkw, line);
}

static jv eval(jrender *r, const jnode *n, jscope *sc) {
    if (++r->depth > r->max_depth + 200) jr_fail(r, CLLM_ENOMEM, n->line, "expression too deep");
    jv res = {.t = JV_UNDEF};
    switch (n->kind) {
    case JN_LIT:
        res = n->v;
        break;
    case JN_NAME: {
        const jv *v = lookup(sc, n->s, n->slen);
        res = v ? *v : jb_global(r, n->s, n->slen);
        break;
    }
    case JN_ATTR: {
        jv o = eval(r, n->a, sc);
        res = attr(r, &o, n->s, n->slen, n->line);
        break;
    }
    case JN_ITEM: {
        jv o = eval(r, n->a, sc), k = eval(r, n->b, sc);
        res = item(r, &o, &k, n->line);
        break;
    }
    case JN_SLICE: {
        jv o = eval(r, n->a, sc);
        res = slice(r, &o, n, sc);
        break;
    }
    case JN_CALL: {
        jv f = eval(r, n->a, sc);
        args a = eval_args(r, n, sc);
        res = call_value(r, &f, &a, NULL, n->line);
        break;
    }
    case JN_FILTER: {
        jv o = eval(r, n->a, sc);
        args a = eval_args(r, n, sc);
        res = jb_filter(r, n->s, o, a.pos, a.npos, a.kwn, a.kwv, a.nkw, n->line);
        break;
    }
    case JN_TEST: {
        jv o = eval(r, n->a, sc);
        args a = eval_args(r, n, sc);
        res = jv_bool(jb_test(r, n->s, &o, a.pos, a.npos, n->line) != n->neg);
        break;
    }
    case JN_UNARY: {
        jv o = eval(r, n->a, sc);
        if (n->op == OP_NOT)
            res = jv_bool(!jv_truthy(&o));
        else if (o.t == JV_INT || o.t == JV_BOOL)
            res = jv_int(n->op == OP_NEG ? -inum(&o) : inum(&o));
        else if (o.t == JV_FLOAT)
            res = o, res.u.f = n->op == OP_NEG ? -o.u.f : o.u.f;
        else
            jr_fail(r, CLLM_EINVAL, n->line, "bad operand type for unary -: %s", jv_type_name(o.t));
        break;
    }
    case JN_BIN: {
        jv a = eval(r, n->a, sc);
        if (n->op == OP_AND)
            res = jv_truthy(&a) ? eval(r, n->b, sc) : a;
        else if (n->op == OP_OR)
            res = jv_truthy(&a) ? a : eval(r, n->b, sc);
        else
            res = binop(r, n->op, a, eval(r, n->b, sc), n->line);
        break;
    }
    case JN_COND: {
        jv c = eval(r, n->a, sc);
        res = jv_truthy(&c) ? eval(r, n->b, sc) : n->c ? eval(r, n->c, sc) : (jv){.t = JV_UNDEF};
        break;
    }
    case JN_LIST:
    case JN_TUPLE:
        res = jv_list(r);
        for (int i = 0; i < n->nkids; i++) jl_push(r, res.u.l, eval(r, n->kids[i], sc));
        break;
    case JN_DICT:
        res = jv_dict(r);
        for (int i = 0; i + 1 < n->nkids; i += 2) {
            jv k = eval(r, n->kids[i], sc), v = eval(r, n->kids[i + 1], sc);
            if (k.t != JV_STR) k = jv_stringify(r, &k);
            jd_set(r, res.u.d, k.u.s.p, k.u.s.len, v);
        }
        break;
    default:
        jr_fail(r, CLLM_EINVAL, n->line, "statement used as an expression");
    }
    r->depth--;
    return res;
}

static void assign(jrender *r, jscope *sc, const jnode *n, jv v) {
    if (n->nnames == 1) {
        jd_set(r, &sc->vars, n->names[0], strlen(n->names[0]), v);
        return;
    }
    if (v.t != JV_LIST || v.u.l->n != (size_t)n->nnames)
        jr_fail(r, CLLM_EINVAL, n->line, "cannot unpack into %d names", n->nnames);
    for (int i = 0; i < n->nnames; i++)
        jd_set(r, &sc->vars, n->names[i], strlen(n->names[i]), v.u.l->v[i]);
}

static void exec_for(jrender *r, const jnode *n, jscope *sc, jbuf *out) {
    jv it = eval(r, n->a, sc);
    jv items = jv_list(r);
    if (it.t == JV_LIST) {
        items = it;
    } else if (it.t == JV_DICT || it.t == JV_NS) {
        for (size_t i = 0; i < it.u.d->n; i++)
            jl_push(r, items.u.l, jv_str(r, it.u.d->k[i], it.u.d->klen[i]));
    } else if (it.t == JV_STR) {
        size_t *offs, cnt = cp_offsets(r, &it, &offs);
        for (size_t i = 0; i < cnt; i++)
            jl_push(r, items.u.l, jv_str(r, it.u.s.p + offs[i], offs[i + 1] - offs[i]));
    } else if (it.t != JV_UNDEF) {
        jr_fail(r, CLLM_EINVAL, n->line, "'%s' object is not iterable", jv_type_name(it.t));
    }
    jscope *ls = new_scope(r, sc);
    if (n->d) { /* {% for x in xs if cond %}: filter first so loop.* counts the kept items */
        jv kept = jv_list(r);
        for (size_t i = 0; i < items.u.l->n; i++) {
            step(r, n->line);
            assign(r, ls, n, items.u.l->v[i]);
            jv c = eval(r, n->d, ls);
            if (jv_truthy(&c)) jl_push(r, kept.u.l, items.u.l->v[i]);
        }
        items = kept;
    }
    size_t cnt = items.u.l->n;
    for (size_t i = 0; i < cnt; i++) {
        step(r, n->line);
        jv loop = jv_dict(r);
        jdict *d = loop.u.d;
        jd_set(r, d, "index", 5, jv_int((int64_t)i + 1));
        jd_set(r, d, "index0", 6, jv_int((int64_t)i));
        jd_set(r, d, "revindex", 8, jv_int((int64_t)(cnt - i)));
        jd_set(r, d, "revindex0", 9, jv_int((int64_t)(cnt - i - 1)));
        jd_set(r, d, "first", 5, jv_bool(i == 0));
        jd_set(r, d, "last", 4, jv_bool(i + 1 == cnt));
        jd_set(r, d, "length", 6, jv_int((int64_t)cnt));
        jd_set(r, d, "previtem", 8, i ? items.u.l->v[i - 1] : (jv){.t = JV_UNDEF});
        jd_set(r, d, "nextitem", 8, i + 1 < cnt ? items.u.l->v[i + 1] : (jv){.t = JV_UNDEF});
        jd_set(r, &ls->vars, "loop", 4, loop);
        assign(r, ls, n, items.u.l->v[i]);
        exec(r, n->b, ls, out);
        if (r->brk == 1) {
            r->brk = 0;
            break;
        }
        r->brk = 0;
    }
    if (!cnt && n->c) exec(r, n->c, ls, out);
}

static void exec(jrender *r, const jnode *n, jscope *sc, jbuf *out) {
    switch (n->kind) {
    case JN_BLOCK:
        for (int i = 0; i < n->nkids && !r->brk; i++) exec(r, n->kids[i], sc, out);
        return;
    case JN_TEXT:
        put_out(r, out, n->s, n->slen, n->line);
        return;
    case JN_OUTPUT: {
        jv v = eval(r, n->a, sc);
        if (v.t == JV_STR) {
            put_out(r, out, v.u.s.p, v.u.s.len, n->line);
        } else {
            jbuf b = {0};
            jv_to_str(r, &v, &b);
            put_out(r, out, b.p ? b.p : "", b.len, n->line);
        }
        return;
    }
    case JN_IF: {
        jv c = eval(r, n->a, sc);
        if (jv_truthy(&c))
            exec(r, n->b, sc, out);
        else if (n->c)
            exec(r, n->c, sc, out);
        return;
    }
    case JN_FOR:
        exec_for(r, n, sc, out);
        return;
    case JN_SET: {
        jv v;
        if (n->a) {
            v = eval(r, n->a, sc);
        } else {
            jbuf b = {0};
            exec(r, n->b, sc, &b);
            v = jv_str(r, b.p ? b.p : "", b.len);
        }
        if (n->c) {
            jv ns = eval(r, n->c, sc);
            if (ns.t != JV_NS)
                jr_fail(r, CLLM_EINVAL, n->line, "cannot assign attribute on a %s",
                        jv_type_name(ns.t));
            jd_set(r, ns.u.d, n->s, strlen(n->s), v);
        } else {
            assign(r, sc, n, v);
        }
        return;
    }
    case JN_MACRO: {
        jfunc *f = jr_alloc(r, sizeof(*f));
        f->macro = n;
        f->name = n->s;
        jv v = {.t = JV_MACRO};
        v.u.fn = f;
        jd_set(r, &sc->vars, n->s, strlen(n->s), v);
        return;
    }
    case JN_CALLBLOCK: {
        /* caller() renders the block body in the calling scope. */
        jfunc *cf = jr_alloc(r, sizeof(*cf));
        jnode *m = jr_alloc(r, sizeof(*m));
        m->kind = JN_MACRO;
        m->b = n->b;
        m->line = n->line;
        cf->macro = m;
        jv caller = {.t = JV_MACRO};
        caller.u.fn = cf;
        jv f = eval(r, n->a->a, sc);
        args a = eval_args(r, n->a, sc);
        if (f.t != JV_MACRO) jr_fail(r, CLLM_EINVAL, n->line, "call block needs a macro");
        jv res = call_value(r, &f, &a, &caller, n->line);
        put_out(r, out, res.u.s.p, res.u.s.len, n->line);
        return;
    }
    case JN_FILTERBLOCK: {
        jbuf b = {0};
        exec(r, n->b, sc, &b);
        const jnode *f = n->a;
        args a = eval_args(r, f, sc);
        jv v = jb_filter(r, f->s, jv_str(r, b.p ? b.p : "", b.len), a.pos, a.npos, a.kwn, a.kwv,
                         a.nkw, n->line);
        jv s = jv_stringify(r, &v);
        put_out(r, out, s.u.s.p, s.u.s.len, n->line);
        return;
    }
    case JN_BREAK:
        r->brk = 1;
        return;
    case JN_CONTINUE:
        r->brk = 2;
        return;
    default:
        jr_fail(r, CLLM_EINVAL, n->line, "expression used as a statement");
    }
}

cllm_status cllm_jinja_render(const cllm_jinja *t, json_t *ctx, const cllm_jinja_limits *lim,
                              char **out, size_t *out_len, cllm_error *err) {
    *out = NULL;
    jrender *r = calloc(1, sizeof(*r));
    if (!r) return cllm_err_set(err, CLLM_ENOMEM, "chat template: out of memory");
    r->err = err;
    r->max_output = lim && lim->max_output ? lim->max_output : (size_t)64 << 20;
    r->arena.cap_total = lim && lim->max_memory ? lim->max_memory : (size_t)256 << 20;
    r->max_steps = lim && lim->max_steps ? lim->max_steps : 10000000;
    r->max_depth = lim && lim->max_depth ? lim->max_depth : 64;
    cllm_status st = CLLM_OK;
    if (setjmp(r->fail)) {
        st = r->status;
    } else {
        r->globals = new_scope(r, NULL);
        if (json_is_object(ctx)) {
            const char *k;
            json_t *v;
            json_object_foreach(ctx, k, v) {
                size_t kl = strlen(k);
                jv key = jv_str(r, k, kl);
                jd_set(r, &r->globals->vars, key.u.s.p, kl, jv_from_json(r, v));
            }
        }
        jbuf buf = {0};
        exec(r, t->root, r->globals, &buf);
        *out = malloc(buf.len + 1);
        if (!*out) {
            st = cllm_err_set(err, CLLM_ENOMEM, "chat template: out of memory");
        } else {
            if (buf.len) memcpy(*out, buf.p, buf.len);
            (*out)[buf.len] = 0;
            if (out_len) *out_len = buf.len;
        }
    }
    ja_free(&r->arena);
    free(r);
    return st;
}
