/* Jinja lexer and parser: template source -> AST (jinja_int.h), once per model at load time.
 *
 * Whitespace follows Jinja2 as HF transformers configures it: trim_blocks (drop the newline after
 * a block or comment tag), lstrip_blocks (drop spaces/tabs before a block or comment tag that
 * starts a line), '-' markers strip all whitespace on that side, and one trailing newline of the
 * template is dropped. Errors are CLLM_EFORMAT with the line number. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_int.h"

/* ---- arena ---- */

struct jchunk {
    struct jchunk *next;
    size_t used, size;
    max_align_t data[];
};

void *ja_alloc(jarena *a, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (a->cap_total && a->used + n > a->cap_total) return NULL;
    struct jchunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t sz = n > 65536 ? n : 65536;
        c = malloc(sizeof(*c) + sz);
        if (!c) return NULL;
        c->next = a->head;
        c->used = 0;
        c->size = sz;
        a->head = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void ja_free(jarena *a) {
    for (struct jchunk *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- tokens ---- */

typedef enum tk {
    T_EOF,
    T_TEXT,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_VAR_BEGIN,
    T_VAR_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_LPAREN,
    T_RPAREN,
    T_LBRACK,
    T_RBRACK,
    T_LBRACE,
    T_RBRACE,
    T_COMMA,
    T_DOT,
    T_COLON,
    T_PIPE,
    T_ASSIGN,
    T_ADD,
    T_SUB,
    T_MUL,
    T_DIV,
    T_FLOORDIV,
    T_MOD,
    T_POW,
    T_TILDE,
    T_EQ,
    T_NE,
    T_LT,
    T_GT,
    T_LE,
    T_GE,
} tk;

typedef struct token {
    tk t;
    int line;
    const char *s; /* T_TEXT, T_NAME, T_STRING: arena copy */
    size_t len;
    int64_t i;
    double f;
} token;

typedef struct parser {
    jarena *arena;
    jmp_buf fail;
    cllm_error *err;
    cllm_status status;
    token *toks;
    size_t n, cap, pos;
    int depth;
} parser;

static _Noreturn void pfail(parser *p, int line, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    p->status = cllm_err_set(p->err, CLLM_EFORMAT, "chat template line %d: %s", line, msg);
    longjmp(p->fail, 1);
}

static void *palloc(parser *p, size_t n) {
    void *m = ja_alloc(p->arena, n);
    if (!m) {
        p->status = cllm_err_set(p->err, CLLM_ENOMEM, "chat template: out of memory");
        longjmp(p->fail, 1);
    }
    return m;
}

static char *pstrdup(parser *p, const char *s, size_t n) {
    char *d = palloc(p, n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static void emit(parser *p, token t) {
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 256;
        token *nt = realloc(p->toks, nc * sizeof(*nt));
        if (!nt) {
            p->status = cllm_err_set(p->err, CLLM_ENOMEM, "chat template: out of memory");
            longjmp(p->fail, 1);
        }
        p->toks = nt;
        p->cap = nc;
    }
    p->toks[p->n++] = t;
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static bool is_ident(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (c >= '0' && c <= '9');
}

static int count_lines(const char *a, const char *b) {
    int n = 0;
    for (; a < b; a++) n += *a == '\n';
    return n;
}

/* Finds the end of a tag body starting at s (after the opener), skipping string literals.
 * close is "}}", "%}" or "#}". Returns a pointer to the closer (possibly preceded by '-'). */
static const char *find_close(const char *s, const char *end, const char *close) {
    char q = 0;
    for (const char *c = s; c + 1 < end; c++) {
        if (close[0] == '#') {
            if (c[0] == '#' && c[1] == '}') return c;
            continue;
        }
        if (q) {
            if (*c == '\\')
                c++;
            else if (*c == q)
                q = 0;
        } else if (*c == '\'' || *c == '"') {
            q = *c;
        } else if (c[0] == close[0] && c[1] == close[1]) {
            return c;
        }
    }
    return NULL;
}

/* Tokenizes inside a tag [s, e). */
static void lex_expr(parser *p, const char *s, const char *e, int line) {
    while (s < e) {
        char c = *s;
        if (is_space(c)) {
            line += c == '\n';
            s++;
            continue;
        }
        token t = {.line = line};
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') {
            const char *b = s;
            while (s < e && is_ident(*s)) s++;
            t.t = T_NAME;
            t.s = pstrdup(p, b, (size_t)(s - b));
            t.len = (size_t)(s - b);
        } else if (c >= '0' && c <= '9') {
            const char *b = s;
            while (s < e && ((*s >= '0' && *s <= '9') || *s == '_')) s++;
            bool fl = false;
            if (s + 1 < e && *s == '.' && s[1] >= '0' && s[1] <= '9') {
                fl = true;
                s++;
                while (s < e && *s >= '0' && *s <= '9') s++;
            }
            if (s < e && (*s == 'e' || *s == 'E')) {
                fl = true;
                s++;
                if (s < e && (*s == '+' || *s == '-')) s++;
                while (s < e && *s >= '0' && *s <= '9') s++;
            }
            char num[64];
            size_t nl = 0;
            for (const char *k = b; k < s && nl < sizeof(num) - 1; k++)
                if (*k != '_') num[nl++] = *k;
            num[nl] = 0;
            if (fl)
                t.t = T_FLOAT, t.f = strtod(num, NULL);
            else
                t.t = T_INT, t.i = strtoll(num, NULL, 10);
        } else if (c == '\'' || c == '"') {
            char *buf = palloc(p, (size_t)(e - s) + 1);
            size_t n = 0;
            s++;
            while (s < e && *s != c) {
                if (*s == '\\' && s + 1 < e) {
                    s++;
                    char x = *s++;
                    switch (x) {
                    case 'n':
                        buf[n++] = '\n';
                        break;
                    case 't':
                        buf[n++] = '\t';
                        break;
                    case 'r':
                        buf[n++] = '\r';
                        break;
                    case 'b':
                        buf[n++] = '\b';
                        break;
                    case 'f':
                        buf[n++] = '\f';
                        break;
                    case 'v':
                        buf[n++] = '\v';
                        break;
                    case '0':
                        buf[n++] = '\0';
                        break;
                    case '\\':
                    case '\'':
                    case '"':
                        buf[n++] = x;
                        break;
                    case '\n':
                        line++;
                        break; /* line continuation */
                    default:
                        buf[n++] = '\\', buf[n++] = x;
                        break; /* Python keeps unknown escapes */
                    }
                } else {
                    line += *s == '\n';
                    buf[n++] = *s++;
                }
            }
            if (s >= e) pfail(p, t.line, "unterminated string");
            s++;
            t.t = T_STRING;
            t.s = buf;
            t.len = n;
        } else {
            static const struct {
                const char *s;
                tk t;
            } ops[] = {
                {"**", T_POW},   {"//", T_FLOORDIV}, {"==", T_EQ},    {"!=", T_NE},
                {"<=", T_LE},    {">=", T_GE},       {"(", T_LPAREN}, {")", T_RPAREN},
                {"[", T_LBRACK}, {"]", T_RBRACK},    {"{", T_LBRACE}, {"}", T_RBRACE},
                {",", T_COMMA},  {".", T_DOT},       {":", T_COLON},  {"|", T_PIPE},
                {"=", T_ASSIGN}, {"+", T_ADD},       {"-", T_SUB},    {"*", T_MUL},
                {"/", T_DIV},    {"%", T_MOD},       {"~", T_TILDE},  {"<", T_LT},
                {">", T_GT},
            };
            size_t k = 0;
            for (; k < sizeof(ops) / sizeof(*ops); k++) {
                size_t ol = strlen(ops[k].s);
                if ((size_t)(e - s) >= ol && !memcmp(s, ops[k].s, ol)) break;
            }
            if (k == sizeof(ops) / sizeof(*ops)) pfail(p, line, "unexpected character '%c'", c);
            t.t = ops[k].t;
            s += strlen(ops[k].s);
        }
        emit(p, t);
    }
}

static void lex(parser *p, const char *src, size_t len) {
    const char *s = src, *end = src + len;
    if (len && end[-1] == '\n') end--; /* keep_trailing_newline=False */
    int line = 1;
    bool strip_next = false, trim_next = false;
    while (s < end) {
        /* Text up to the next tag opener. */
        const char *t = s;
        while (t + 1 < end && !(t[0] == '{' && (t[1] == '{' || t[1] == '%' || t[1] == '#'))) t++;
        if (t + 1 >= end) t = end;
        const char *ts = s, *te = t;
        if (strip_next)
            while (ts < te && is_space(*ts)) ts++;
        else if (trim_next && ts < te && *ts == '\n')
            ts++;
        else if (trim_next && ts + 1 < te && ts[0] == '\r' && ts[1] == '\n')
            ts += 2;
        strip_next = trim_next = false;
        char kind = t < end ? t[1] : 0;
        bool lstrip = t < end && t + 2 < end && t[2] == '-';
        bool plus = t < end && t + 2 < end && t[2] == '+';
        if (lstrip) {
            while (te > ts && is_space(te[-1])) te--;
        } else if ((kind == '%' || kind == '#') && !plus) {
            /* lstrip_blocks: only spaces/tabs between the line start and the tag */
            const char *k = te;
            while (k > ts && (k[-1] == ' ' || k[-1] == '\t')) k--;
            if ((k == ts && (ts == src || ts[-1] == '\n')) || (k > ts && k[-1] == '\n')) te = k;
        }
        if (te > ts) {
            token tt = {.t = T_TEXT,
                        .line = line,
                        .s = pstrdup(p, ts, (size_t)(te - ts)),
                        .len = (size_t)(te - ts)};
            emit(p, tt);
        }
        line += count_lines(s, t);
        if (t >= end) break;
        const char *body = t + 2 + (lstrip || plus);
        const char *close = find_close(body, end, kind == '{' ? "}}" : kind == '%' ? "%}" : "#}");
        if (!close) pfail(p, line, "unclosed tag");
        const char *be = close;
        bool rstrip = be > body && be[-1] == '-';
        if (rstrip || (be > body && be[-1] == '+')) be--;
        if (kind != '#') {
            emit(p, (token){.t = kind == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN, .line = line});
            lex_expr(p, body, be, line);
            emit(p, (token){.t = kind == '{' ? T_VAR_END : T_BLOCK_END,
                            .line = line + count_lines(body, be)});
        }
        line += count_lines(t, close + 2);
        s = close + 2;
        strip_next = rstrip;
        trim_next = !rstrip && kind != '{';
    }
    emit(p, (token){.t = T_EOF, .line = line});
}

/* ---- parser ---- */

static token *cur(parser *p) {
    return &p->toks[p->pos];
}
static token *next(parser *p) {
    return &p->toks[p->pos++];
}
static bool is_name(parser *p, const char *n) {
    return cur(p)->t == T_NAME && !strcmp(cur(p)->s, n);
}
static bool accept(parser *p, tk t) {
    if (cur(p)->t != t) return false;
    p->pos++;
    return true;
}
static bool accept_name(parser *p, const char *n) {
    if (!is_name(p, n)) return false;
    p->pos++;
    return true;
}
static void expect(parser *p, tk t, const char *what) {
    if (!accept(p, t)) pfail(p, cur(p)->line, "expected %s", what);
}
static const char *expect_name(parser *p) {
    if (cur(p)->t != T_NAME) pfail(p, cur(p)->line, "expected a name");
    return next(p)->s;
}

static jnode *node(parser *p, jn_kind k, int line) {
    jnode *n = palloc(p, sizeof(*n));
    n->kind = k;
    n->line = line;
    return n;
}

typedef struct nvec {
    jnode **v;
    const char **names;
    int n, cap;
} nvec;

static void nv_push(parser *p, nvec *v, jnode *n, const char *name) {
    if (v->n == v->cap) {
        int nc = v->cap ? v->cap * 2 : 4;
        jnode **nn = palloc(p, (size_t)nc * sizeof(*nn));
        const char **nm = palloc(p, (size_t)nc * sizeof(*nm));
        if (v->n) {
            memcpy(nn, v->v, (size_t)v->n * sizeof(*nn));
            memcpy(nm, v->names, (size_t)v->n * sizeof(*nm));
        }
        v->v = nn;
        v->names = nm;
        v->cap = nc;
    }
    v->names[v->n] = name;
    v->v[v->n++] = n;
}

static jnode *parse_expr(parser *p);
static jnode *parse_unary(parser *p, bool with_filter);
static jnode *parse_or(parser *p);

/* Arguments of a call, filter or test: positional and name=value. */
static void parse_args(parser *p, jnode *n) {
    nvec v = {0};
    while (!accept(p, T_RPAREN)) {
        if (v.n) expect(p, T_COMMA, "',' or ')'");
        if (accept(p, T_RPAREN)) break;
        const char *kw = NULL;
        if (cur(p)->t == T_NAME && p->toks[p->pos + 1].t == T_ASSIGN) {
            kw = next(p)->s;
            p->pos++;
        }
        nv_push(p, &v, parse_expr(p), kw);
    }
    n->kids = v.v;
    n->names = v.names;
    n->nkids = n->nnames = v.n;
}

static jnode *parse_primary(parser *p) {
    token *t = next(p);
    jnode *n;
    switch (t->t) {
    case T_NAME:
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") ||
            !strcmp(t->s, "False")) {
            n = node(p, JN_LIT, t->line);
            n->v = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            n = node(p, JN_LIT, t->line);
            n->v.t = JV_NONE;
        } else {
            n = node(p, JN_NAME, t->line);
            n->s = t->s;
            n->slen = t->len;
        }
        return n;
    case T_STRING: {
        /* Adjacent literals concatenate, as in Python. */
        size_t total = t->len;
        size_t k = p->pos;
        while (p->toks[k].t == T_STRING) total += p->toks[k++].len;
        char *buf = palloc(p, total + 1);
        memcpy(buf, t->s, t->len);
        size_t o = t->len;
        while (cur(p)->t == T_STRING) {
            token *u = next(p);
            memcpy(buf + o, u->s, u->len);
            o += u->len;
        }
        n = node(p, JN_LIT, t->line);
        n->v.t = JV_STR;
        n->v.u.s.p = buf;
        n->v.u.s.len = total;
        return n;
    }
    case T_INT:
        n = node(p, JN_LIT, t->line);
        n->v = jv_int(t->i);
        return n;
    case T_FLOAT:
        n = node(p, JN_LIT, t->line);
        n->v.t = JV_FLOAT;
        n->v.u.f = t->f;
        return n;
    case T_LPAREN: {
        if (accept(p, T_RPAREN)) return node(p, JN_TUPLE, t->line);
        jnode *e = parse_expr(p);
        if (accept(p, T_RPAREN)) return e;
        nvec v = {0};
        nv_push(p, &v, e, NULL);
        while (accept(p, T_COMMA)) {
            if (cur(p)->t == T_RPAREN) break;
            nv_push(p, &v, parse_expr(p), NULL);
        }
        expect(p, T_RPAREN, "')'");
        n = node(p, JN_TUPLE, t->line);
        n->kids = v.v;
        n->nkids = v.n;
        return n;
    }
    case T_LBRACK: {
        nvec v = {0};
        while (!accept(p, T_RBRACK)) {
            if (v.n) expect(p, T_COMMA, "',' or ']'");
            if (accept(p, T_RBRACK)) break;
            nv_push(p, &v, parse_expr(p), NULL);
        }
        n = node(p, JN_LIST, t->line);
        n->kids = v.v;
        n->nkids = v.n;
        return n;
    }
    case T_LBRACE: {
        nvec v = {0};
        while (!accept(p, T_RBRACE)) {
            if (v.n) expect(p, T_COMMA, "',' or '}'");
            if (accept(p, T_RBRACE)) break;
            nv_push(p, &v, parse_expr(p), NULL);
            expect(p, T_COLON, "':'");
            nv_push(p, &v, parse_expr(p), NULL);
        }
        n = node(p, JN_DICT, t->line);
        n->kids = v.v;
        n->nkids = v.n;
        return n;
    }
    default:
        pfail(p, t->line, "unexpected token in expression");
    }
}

static jnode *parse_postfix(parser *p, jnode *n) {
    for (;;) {
        int line = cur(p)->line;
        if (accept(p, T_DOT)) {
            jnode *a = node(p, JN_ATTR, line);
            a->a = n;
            if (cur(p)->t == T_INT) { /* x.0 means x[0] */
                a->kind = JN_ITEM;
                a->b = node(p, JN_LIT, line);
                a->b->v = jv_int(next(p)->i);
            } else {
                token *t = cur(p);
                a->s = expect_name(p);
                a->slen = t->len;
            }
            n = a;
        } else if (accept(p, T_LBRACK)) {
            jnode *parts[3] = {0};
            int k = 0;
            bool slice = false;
            for (;;) {
                if (cur(p)->t != T_COLON && cur(p)->t != T_RBRACK) parts[k] = parse_expr(p);
                if (accept(p, T_COLON)) {
                    slice = true;
                    if (++k > 2) pfail(p, line, "bad slice");
                    continue;
                }
                break;
            }
            expect(p, T_RBRACK, "']'");
            jnode *a = node(p, slice ? JN_SLICE : JN_ITEM, line);
            a->a = n;
            a->b = parts[0];
            a->c = parts[1];
            a->d = parts[2];
            if (!slice && !a->b) pfail(p, line, "empty subscript");
            n = a;
        } else if (accept(p, T_LPAREN)) {
            jnode *a = node(p, JN_CALL, line);
            a->a = n;
            parse_args(p, a);
            n = a;
        } else {
            return n;
        }
    }
}

static jnode *parse_filter_expr(parser *p, jnode *n) {
    for (;;) {
        int line = cur(p)->line;
        if (accept(p, T_PIPE)) {
            jnode *f = node(p, JN_FILTER, line);
            f->a = n;
            token *t = cur(p);
            f->s = expect_name(p);
            f->slen = t->len;
            while (accept(p, T_DOT)) { /* dotted filter names are not used; keep the last */
                t = cur(p);
                f->s = expect_name(p);
                f->slen = t->len;
            }
            if (accept(p, T_LPAREN)) parse_args(p, f);
            n = f;
        } else if (accept_name(p, "is")) {
            jnode *f = node(p, JN_TEST, line);
            f->a = n;
            f->neg = accept_name(p, "not");
            token *t = cur(p);
            f->s = expect_name(p);
            f->slen = t->len;
            if (accept(p, T_LPAREN)) {
                parse_args(p, f);
            } else {
                tk k = cur(p)->t;
                bool arg = k == T_STRING || k == T_INT || k == T_FLOAT || k == T_LBRACK ||
                           k == T_LBRACE ||
                           (k == T_NAME && !is_name(p, "else") && !is_name(p, "or") &&
                            !is_name(p, "and") && !is_name(p, "if") && !is_name(p, "is") &&
                            !is_name(p, "in") && !is_name(p, "not"));
                if (arg) {
                    jnode *e = parse_unary(p, false);
                    f->kids = palloc(p, sizeof(jnode *));
                    f->names = palloc(p, sizeof(char *));
                    f->kids[0] = e;
                    f->nkids = f->nnames = 1;
                }
            }
            n = f;
        } else {
            return n;
        }
    }
}

static jnode *parse_unary(parser *p, bool with_filter) {
    int line = cur(p)->line;
    if (++p->depth > 200) pfail(p, line, "expression nested too deeply");
    jnode *n;
    if (accept(p, T_SUB) || (cur(p)->t == T_ADD && (p->pos++, 1))) {
        bool neg = p->toks[p->pos - 1].t == T_SUB;
        n = node(p, JN_UNARY, line);
        n->op = neg ? OP_NEG : OP_POS;
        n->a = parse_unary(p, false);
    } else {
        n = parse_postfix(p, parse_primary(p));
    }
    if (with_filter) n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static jnode *bin(parser *p, int op, jnode *a, jnode *b, int line) {
    jnode *n = node(p, JN_BIN, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *p) {
    jnode *n = parse_unary(p, true);
    while (cur(p)->t == T_POW) {
        int line = next(p)->line;
        n = bin(p, OP_POW, n, parse_unary(p, true), line);
    }
    return n;
}

static jnode *parse_math2(parser *p) {
    jnode *n = parse_pow(p);
    for (;;) {
        tk k = cur(p)->t;
        int op = k == T_MUL        ? OP_MUL
                 : k == T_DIV      ? OP_DIV
                 : k == T_FLOORDIV ? OP_FLOORDIV
                 : k == T_MOD      ? OP_MOD
                                   : 0;
        if (!op) return n;
        int line = next(p)->line;
        n = bin(p, op, n, parse_pow(p), line);
    }
}

static jnode *parse_concat(parser *p) {
    jnode *n = parse_math2(p);
    while (cur(p)->t == T_TILDE) {
        int line = next(p)->line;
        n = bin(p, OP_CONCAT, n, parse_math2(p), line);
    }
    return n;
}

static jnode *parse_math1(parser *p) {
    jnode *n = parse_concat(p);
    for (;;) {
        tk k = cur(p)->t;
        if (k != T_ADD && k != T_SUB) return n;
        int line = next(p)->line;
        n = bin(p, k == T_ADD ? OP_ADD : OP_SUB, n, parse_concat(p), line);
    }
}

static jnode *parse_compare(parser *p) {
    jnode *n = parse_math1(p);
    for (;;) {
        tk k = cur(p)->t;
        int line = cur(p)->line, op = 0;
        if (k == T_EQ)
            op = OP_EQ;
        else if (k == T_NE)
            op = OP_NE;
        else if (k == T_LT)
            op = OP_LT;
        else if (k == T_GT)
            op = OP_GT;
        else if (k == T_LE)
            op = OP_LE;
        else if (k == T_GE)
            op = OP_GE;
        if (op) {
            p->pos++;
        } else if (accept_name(p, "in")) {
            op = OP_IN;
        } else if (is_name(p, "not") && p->toks[p->pos + 1].t == T_NAME &&
                   !strcmp(p->toks[p->pos + 1].s, "in")) {
            p->pos += 2;
            op = OP_NOTIN;
        } else {
            return n;
        }
        n = bin(p, op, n, parse_math1(p), line);
    }
}

static jnode *parse_not(parser *p) {
    int line = cur(p)->line;
    if (accept_name(p, "not")) {
        jnode *n = node(p, JN_UNARY, line);
        n->op = OP_NOT;
        n->a = parse_not(p);
        return n;
    }
    return parse_compare(p);
}

static jnode *parse_and(parser *p) {
    jnode *n = parse_not(p);
    while (is_name(p, "and")) {
        int line = next(p)->line;
        n = bin(p, OP_AND, n, parse_not(p), line);
    }
    return n;
}

static jnode *parse_or(parser *p) {
    jnode *n = parse_and(p);
    while (is_name(p, "or")) {
        int line = next(p)->line;
        n = bin(p, OP_OR, n, parse_and(p), line);
    }
    return n;
}

static jnode *parse_expr(parser *p) {
    jnode *n = parse_or(p);
    while (is_name(p, "if")) {
        int line = next(p)->line;
        jnode *c = node(p, JN_COND, line);
        c->a = parse_or(p);
        c->b = n;
        if (accept_name(p, "else")) c->c = parse_expr(p);
        n = c;
    }
    return n;
}

/* A bare tuple "a, b" as used by for targets and set. */
static jnode *parse_tuple_expr(parser *p) {
    jnode *e = parse_expr(p);
    if (cur(p)->t != T_COMMA) return e;
    nvec v = {0};
    nv_push(p, &v, e, NULL);
    while (accept(p, T_COMMA)) nv_push(p, &v, parse_expr(p), NULL);
    jnode *t = node(p, JN_TUPLE, e->line);
    t->kids = v.v;
    t->nkids = v.n;
    return t;
}

static void parse_targets(parser *p, jnode *n) {
    nvec v = {0};
    do {
        nv_push(p, &v, NULL, expect_name(p));
    } while (accept(p, T_COMMA));
    n->names = v.names;
    n->nnames = v.n;
}

/* Parses statements until one of the end names appears as the next block tag; returns the
 * block and leaves the parser after "{%" with the end name as current token. */
static jnode *parse_body(parser *p, const char *const *ends);

static void end_tag(parser *p) {
    expect(p, T_BLOCK_END, "'%}'");
}

static jnode *parse_if(parser *p, int line) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jnode *n = node(p, JN_IF, line);
    n->a = parse_expr(p);
    end_tag(p);
    n->b = parse_body(p, ends);
    int l2 = cur(p)->line;
    if (accept_name(p, "elif")) {
        n->c = parse_if(p, l2);
        return n;
    }
    if (accept_name(p, "else")) {
        end_tag(p);
        static const char *const e2[] = {"endif", NULL};
        n->c = parse_body(p, e2);
    }
    expect_name(p); /* endif */
    end_tag(p);
    return n;
}

static jnode *parse_statement(parser *p) {
    int line = cur(p)->line;
    const char *kw = expect_name(p);
    jnode *n;
    if (!strcmp(kw, "if")) return parse_if(p, line);
    if (!strcmp(kw, "for")) {
        static const char *const ends[] = {"else", "endfor", NULL};
        n = node(p, JN_FOR, line);
        parse_targets(p, n);
        if (!accept_name(p, "in")) pfail(p, line, "expected 'in'");
        n->a = parse_or(p);
        if (accept_name(p, "if")) n->d = parse_expr(p);
        accept_name(p, "recursive");
        end_tag(p);
        n->b = parse_body(p, ends);
        if (accept_name(p, "else")) {
            end_tag(p);
            static const char *const e2[] = {"endfor", NULL};
            n->c = parse_body(p, e2);
        }
        expect_name(p);
        end_tag(p);
        return n;
    }
    if (!strcmp(kw, "set")) {
        n = node(p, JN_SET, line);
        if (cur(p)->t == T_NAME && p->toks[p->pos + 1].t == T_DOT) {
            jnode *obj = node(p, JN_NAME, line);
            token *t = next(p);
            obj->s = t->s;
            obj->slen = t->len;
            p->pos++;
            n->c = obj;
            n->s = expect_name(p);
        } else {
            parse_targets(p, n);
        }
        if (accept(p, T_ASSIGN)) {
            n->a = parse_tuple_expr(p);
            end_tag(p);
        } else {
            end_tag(p);
            static const char *const ends[] = {"endset", NULL};
            n->b = parse_body(p, ends);
            expect_name(p);
            end_tag(p);
        }
        return n;
    }
    if (!strcmp(kw, "macro")) {
        n = node(p, JN_MACRO, line);
        n->s = expect_name(p);
        expect(p, T_LPAREN, "'('");
        nvec v = {0};
        while (!accept(p, T_RPAREN)) {
            if (v.n) expect(p, T_COMMA, "','");
            const char *pn = expect_name(p);
            nv_push(p, &v, accept(p, T_ASSIGN) ? parse_expr(p) : NULL, pn);
        }
        n->kids = v.v;
        n->names = v.names;
        n->nkids = n->nnames = v.n;
        end_tag(p);
        static const char *const ends[] = {"endmacro", NULL};
        n->b = parse_body(p, ends);
        expect_name(p);
        end_tag(p);
        return n;
    }
    if (!strcmp(kw, "call")) {
        n = node(p, JN_CALLBLOCK, line);
        n->a = parse_expr(p);
        if (n->a->kind != JN_CALL) pfail(p, line, "call block needs a macro call");
        end_tag(p);
        static const char *const ends[] = {"endcall", NULL};
        n->b = parse_body(p, ends);
        expect_name(p);
        end_tag(p);
        return n;
    }
    if (!strcmp(kw, "filter")) {
        n = node(p, JN_FILTERBLOCK, line);
        jnode *f = node(p, JN_FILTER, line);
        token *t = cur(p);
        f->s = expect_name(p);
        f->slen = t->len;
        if (accept(p, T_LPAREN)) parse_args(p, f);
        n->a = f;
        end_tag(p);
        static const char *const ends[] = {"endfilter", NULL};
        n->b = parse_body(p, ends);
        expect_name(p);
        end_tag(p);
        return n;
    }
    if (!strcmp(kw, "generation")) { /* transformers' assistant-mask marker: renders its body */
        end_tag(p);
        static const char *const ends[] = {"endgeneration", NULL};
        n = parse_body(p, ends);
        expect_name(p);
        end_tag(p);
        return n;
    }
    if (!strcmp(kw, "break") || !strcmp(kw, "continue")) {
        n = node(p, kw[0] == 'b' ? JN_BREAK : JN_CONTINUE, line);
        end_tag(p);
        return n;
    }
    pfail(p, line, "unknown statement '%s'", kw);
}

static jnode *parse_body(parser *p, const char *const *ends) {
    nvec v = {0};
    int line = cur(p)->line;
    if (++p->depth > 200) pfail(p, line, "blocks nested too deeply");
    for (;;) {
        token *t = cur(p);
        if (t->t == T_EOF) {
            if (ends) pfail(p, t->line, "missing {%% %s %%}", ends[0]);
            break;
        }
        if (t->t == T_TEXT) {
            jnode *n = node(p, JN_TEXT, t->line);
            n->s = t->s;
            n->slen = t->len;
            nv_push(p, &v, n, NULL);
            p->pos++;
        } else if (t->t == T_VAR_BEGIN) {
            p->pos++;
            jnode *n = node(p, JN_OUTPUT, t->line);
            n->a = parse_tuple_expr(p);
            expect(p, T_VAR_END, "'}}'");
            nv_push(p, &v, n, NULL);
        } else if (t->t == T_BLOCK_BEGIN) {
            token *k = &p->toks[p->pos + 1];
            bool is_end = false;
            for (int i = 0; ends && ends[i]; i++)
                if (k->t == T_NAME && !strcmp(k->s, ends[i])) is_end = true;
            if (is_end) {
                p->pos++;
                break;
            }
            if (k->t == T_NAME &&
                (!strncmp(k->s, "end", 3) || !strcmp(k->s, "else") || !strcmp(k->s, "elif")))
                pfail(p, k->line, "unexpected '%s'", k->s);
            p->pos++;
            nv_push(p, &v, parse_statement(p), NULL);
        } else {
            pfail(p, t->line, "unexpected token");
        }
    }
    p->depth--;
    jnode *b = node(p, JN_BLOCK, line);
    b->kids = v.v;
    b->nkids = v.n;
    return b;
}

cllm_status cllm_jinja_compile(const char *src, size_t len, cllm_jinja **out, cllm_error *err) {
    *out = NULL;
    cllm_jinja *t = calloc(1, sizeof(*t));
    if (!t) return cllm_err_set(err, CLLM_ENOMEM, "chat template: out of memory");
    t->arena.cap_total = (size_t)1 << 30;
    parser p = {.arena = &t->arena, .err = err};
    if (setjmp(p.fail)) {
        free(p.toks);
        cllm_jinja_free(t);
        return p.status;
    }
    lex(&p, src, len);
    t->root = parse_body(&p, NULL);
    free(p.toks);
    *out = t;
    return CLLM_OK;
}

void cllm_jinja_free(cllm_jinja *t) {
    if (!t) return;
    ja_free(&t->arena);
    free(t);
}
