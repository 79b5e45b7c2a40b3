/* GBNF front end (llama.cpp / xgrammar EBNF): rules `name ::= body`, bodies of alternatives `|`,
 * sequences of "literals" (\n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH escapes), [classes] ([^...]
 * negated, ranges), rule names, ( groups ), the postfix operators * + ? {m} {m,} {m,n}, `.` (any
 * character) and # comments. The start rule is `root`. Errors give the line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_int.h"

typedef struct gp {
    gm_builder *b;
    const char *s;
    size_t n, i;
    int depth;
} gp;

static int line_of(const gp *p) {
    int l = 1;
    for (size_t k = 0; k < p->i && k < p->n; k++) l += p->s[k] == '\n';
    return l;
}

static bool gp_err(gp *p, const char *what) {
    return gb_error(p->b, CLLM_EINVAL, "grammar: %s at line %d", what, line_of(p));
}

/* Skips spaces, tabs, comments; newlines too when nl (inside groups a body may span lines). */
static void ws(gp *p, bool nl) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\r' || (nl && c == '\n')) {
            p->i++;
        } else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else {
            break;
        }
    }
}

static bool is_name(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
}

static int hexd(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One (possibly escaped) code point of a literal or class; -1 on error. */
static long gp_char(gp *p) {
    if (p->i >= p->n) return gp_err(p, "unexpected end"), -1;
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\\') {
        p->i++;
        if (p->i >= p->n) return gp_err(p, "trailing backslash"), -1;
        char e = p->s[p->i++];
        int nd = 0;
        switch (e) {
        case 'n':
            return '\n';
        case 't':
            return '\t';
        case 'r':
            return '\r';
        case '0':
            return 0;
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
            return e;
        case 'x':
            nd = 2;
            break;
        case 'u':
            nd = 4;
            break;
        case 'U':
            nd = 8;
            break;
        default:
            return gp_err(p, "unknown escape"), -1;
        }
        long v = 0;
        for (int k = 0; k < nd; k++) {
            int h = p->i < p->n ? hexd(p->s[p->i]) : -1;
            if (h < 0) return gp_err(p, "bad hex escape"), -1;
            v = v * 16 + h;
            p->i++;
        }
        if (v > 0x10FFFF) return gp_err(p, "code point out of range"), -1;
        return v;
    }
    /* UTF-8 */
    int l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!l || p->i + (size_t)l > p->n) return gp_err(p, "invalid UTF-8"), -1;
    long v = l == 1 ? c : c & (0xFF >> (l + 1));
    for (int k = 1; k < l; k++) {
        unsigned char d = (unsigned char)p->s[p->i + (size_t)k];
        if ((d & 0xC0) != 0x80) return gp_err(p, "invalid UTF-8"), -1;
        v = v << 6 | (d & 63);
    }
    p->i += (size_t)l;
    return v;
}

static int rule_ref(gp *p, const char *name, size_t len) {
    char buf[256];
    if (len >= sizeof(buf)) return gp_err(p, "rule name too long"), -1;
    memcpy(buf, name, len);
    buf[len] = 0;
    int r = gb_rule_find(p->b, buf);
    if (r < 0) r = gb_rule(p->b, buf);
    return r < 0 ? -1 : gb_ref(p->b, r);
}

static int gp_alt(gp *p);

static int gp_atom(gp *p) {
    char c = p->s[p->i];
    if (c == '"' || c == '\'') {
        char q = c;
        p->i++;
        int cap = 16, n = 0;
        int *xs = malloc((size_t)cap * sizeof(int));
        if (!xs) return gb_error(p->b, CLLM_ENOMEM, "out of memory"), -1;
        while (p->i < p->n && p->s[p->i] != q) {
            if (p->s[p->i] == '\n') break;
            long v = gp_char(p);
            if (v < 0) {
                free(xs);
                return -1;
            }
            uint32_t r2[2] = {(uint32_t)v, (uint32_t)v};
            if (!gb_push(p->b, &xs, &n, &cap, gb_cps(p->b, r2, 1))) return -1;
        }
        if (p->i >= p->n || p->s[p->i] != q) {
            free(xs);
            return gp_err(p, "unterminated string"), -1;
        }
        p->i++;
        int x = gb_seq(p->b, xs, n);
        free(xs);
        return x;
    }
    if (c == '[') {
        p->i++;
        gm_cpset s = {0};
        bool neg = false;
        if (p->i < p->n && p->s[p->i] == '^') neg = true, p->i++;
        while (p->i < p->n && p->s[p->i] != ']') {
            long lo = gp_char(p);
            if (lo < 0) {
                cps_free(&s);
                return -1;
            }
            long hi = lo;
            if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
                p->i++;
                hi = gp_char(p);
                if (hi < 0 || hi < lo) {
                    cps_free(&s);
                    return hi < 0 ? -1 : (gp_err(p, "range out of order"), -1);
                }
            }
            cps_add(&s, (uint32_t)lo, (uint32_t)hi);
        }
        if (p->i >= p->n) {
            cps_free(&s);
            return gp_err(p, "unterminated character class"), -1;
        }
        p->i++;
        if (neg) cps_negate(&s);
        cps_norm(&s);
        int x = s.n ? gb_cps(p->b, s.r, s.n) : gb_fail(p->b);
        cps_free(&s);
        return x;
    }
    if (c == '.') {
        p->i++;
        uint32_t r2[2] = {0, 0x10FFFF};
        return gb_cps(p->b, r2, 1);
    }
    if (c == '(') {
        p->i++;
        if (++p->depth > 200) return gp_err(p, "groups nested too deeply"), -1;
        int x = gp_alt(p);
        p->depth--;
        ws(p, true);
        if (p->i >= p->n || p->s[p->i] != ')') return gp_err(p, "missing )"), -1;
        p->i++;
        return x;
    }
    if (is_name(c)) {
        size_t st = p->i;
        while (p->i < p->n && is_name(p->s[p->i])) p->i++;
        return rule_ref(p, p->s + st, p->i - st);
    }
    return gp_err(p, "unexpected character"), -1;
}

static bool gp_int(gp *p, int *v) {
    long x = 0;
    size_t st = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        x = x * 10 + (p->s[p->i++] - '0');
        if (x > 100000) x = 100000;
    }
    *v = (int)x;
    return p->i > st;
}

/* Does a new rule start here (`name ::=`)? */
static bool at_rule_start(gp *p) {
    size_t k = p->i;
    while (k < p->n && is_name(p->s[k])) k++;
    if (k == p->i) return false;
    while (k < p->n && (p->s[k] == ' ' || p->s[k] == '\t')) k++;
    return k + 3 <= p->n && !memcmp(p->s + k, "::=", 3);
}

static int gp_seq(gp *p) {
    int cap = 8, n = 0;
    int *xs = malloc((size_t)cap * sizeof(int));
    if (!xs) return gb_error(p->b, CLLM_ENOMEM, "out of memory"), -1;
    for (;;) {
        ws(p, p->depth > 0);
        if (p->i < p->n && p->s[p->i] == '\n' && p->depth == 0) {
            /* a body ends at the line's end unless the next line goes on with '|' */
            size_t save = p->i;
            ws(p, true);
            if (p->i >= p->n || p->s[p->i] != '|') p->i = save;
            break;
        }
        if (p->i >= p->n) break;
        char c = p->s[p->i];
        if (c == '|' || c == ')' || c == '\n') break;
        if (p->depth == 0 && at_rule_start(p)) break;
        int x = gp_atom(p);
        if (x < 0) {
            free(xs);
            return -1;
        }
        for (;;) {
            if (p->i >= p->n) break;
            char q = p->s[p->i];
            int lo, hi;
            if (q == '*')
                lo = 0, hi = -1, p->i++;
            else if (q == '+')
                lo = 1, hi = -1, p->i++;
            else if (q == '?')
                lo = 0, hi = 1, p->i++;
            else if (q == '{') {
                p->i++;
                ws(p, false);
                if (!gp_int(p, &lo)) {
                    free(xs);
                    return gp_err(p, "bad {m,n}"), -1;
                }
                hi = lo;
                ws(p, false);
                if (p->i < p->n && p->s[p->i] == ',') {
                    p->i++;
                    ws(p, false);
                    if (!gp_int(p, &hi)) hi = -1;
                    ws(p, false);
                }
                if (p->i >= p->n || p->s[p->i] != '}' || (hi >= 0 && hi < lo)) {
                    free(xs);
                    return gp_err(p, "bad {m,n}"), -1;
                }
                p->i++;
            } else {
                break;
            }
            x = gb_rep(p->b, x, lo, hi);
            if (x < 0) {
                free(xs);
                return -1;
            }
        }
        if (!gb_push(p->b, &xs, &n, &cap, x)) return -1;
    }
    int x = gb_seq(p->b, xs, n);
    free(xs);
    return x;
}

static int gp_alt(gp *p) {
    int cap = 4, n = 0;
    int *xs = malloc((size_t)cap * sizeof(int));
    if (!xs) return gb_error(p->b, CLLM_ENOMEM, "out of memory"), -1;
    for (;;) {
        int x = gp_seq(p);
        if (x < 0) {
            free(xs);
            return -1;
        }
        if (!gb_push(p->b, &xs, &n, &cap, x)) return -1;
        ws(p, p->depth > 0);
        if (p->i < p->n && p->s[p->i] == '|') {
            p->i++;
            ws(p, true);
            continue;
        }
        break;
    }
    int x = gb_alt(p->b, xs, n);
    free(xs);
    return x;
}

cllm_status cllm_gm_from_gbnf(const char *text, size_t len, const cllm_gm_opts *opts, cllm_gm **out,
                              cllm_error *err) {
    gm_builder b;
    gb_init(&b, opts, err);
    *out = NULL;
    if ((long)len > b.o.max_source) {
        int cap = b.o.max_source; /* read before gb_free clears the options */
        gb_free(&b);
        return cllm_err_set(err, CLLM_ERANGE, "grammar longer than %d bytes", cap);
    }
    gb_rule(&b, "root"); /* rule 0 is the start rule */
    gp p = {.b = &b, .s = text, .n = len};
    bool any = false;
    for (;;) {
        ws(&p, true);
        if (p.i >= p.n || b.failed) break;
        size_t st = p.i;
        while (p.i < p.n && is_name(p.s[p.i])) p.i++;
        if (p.i == st) {
            gp_err(&p, "expected a rule name");
            break;
        }
        char name[256];
        if (p.i - st >= sizeof(name)) {
            gp_err(&p, "rule name too long");
            break;
        }
        memcpy(name, p.s + st, p.i - st);
        name[p.i - st] = 0;
        ws(&p, false);
        if (p.i + 3 > p.n || memcmp(p.s + p.i, "::=", 3)) {
            gp_err(&p, "expected ::=");
            break;
        }
        p.i += 3;
        int r = gb_rule_find(&b, name);
        if (r < 0) r = gb_rule(&b, name);
        if (r >= 0 && b.rule_body[r] >= 0) {
            gb_error(&b, CLLM_EINVAL, "grammar: rule %s defined twice (line %d)", name,
                     line_of(&p));
            break;
        }
        int x = gp_alt(&p);
        if (x < 0) break;
        ws(&p, false);
        if (p.i < p.n && p.s[p.i] != '\n') {
            gp_err(&p, "unexpected character");
            break;
        }
        gb_rule_set(&b, r, x);
        any = true;
    }
    cllm_status st;
    if (!b.failed && !any) gb_error(&b, CLLM_EINVAL, "grammar: no rules");
    if (!b.failed && b.rule_body[0] < 0) gb_error(&b, CLLM_EINVAL, "grammar: no root rule");
    st = gb_finish(&b, out);
    gb_free(&b);
    return st;
}
