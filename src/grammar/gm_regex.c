/* Regex front end: the ECMAScript subset used by JSON Schema `pattern` and vLLM's guided_regex,
 * parsed into builder expressions over code points (UTF-8 at the byte level). Supported:
 * literals, escapes (\d \w \s and negations, \n \t \r \f \v \0 \xHH \uHHHH \u{H..}, escaped
 * punctuation), classes with ranges and negation, '.', groups (capturing, (?:...), named),
 * alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms: same language), ^ at the start and
 * $ at the end. Refused with a message: backreferences, lookaround, \b \B, anchors elsewhere,
 * \p{...}. Called by gm_schema.c (pattern) and cllm_gm_from_regex. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_int.h"

enum { MAX_REPEAT = 10000, MAX_DEPTH = 200 };

typedef struct rx {
    gm_builder *b;
    const char *s;
    size_t n, i;
    int mode;
    int depth;
} rx;

static bool rx_err(rx *r, const char *what) {
    return gb_error(r->b, CLLM_EINVAL, "regex: %s at offset %zu", what, r->i);
}

/* Next code point of the pattern (UTF-8; invalid bytes taken as Latin-1). */
static uint32_t rx_cp(rx *r) {
    const unsigned char *p = (const unsigned char *)r->s + r->i;
    size_t left = r->n - r->i;
    uint32_t c = p[0];
    int l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if ((size_t)l > left) l = 1;
    if (l > 1) {
        uint32_t v = c & (0xFF >> (l + 1));
        for (int k = 1; k < l; k++) {
            if ((p[k] & 0xC0) != 0x80) {
                l = 1;
                break;
            }
            v = v << 6 | (p[k] & 63);
        }
        if (l > 1) c = v;
    }
    r->i += (size_t)l;
    return c;
}

/* Turns a code point set into an expression for the regex's mode. */
static int emit_set(rx *r, gm_cpset *s) {
    gm_builder *b = r->b;
    cps_norm(s);
    if (r->mode == GRX_WHOLE) return gb_cps(b, s->r, s->n);
    bool has_q = false, has_bs = false;
    for (int i = 0; i < s->n; i++) {
        if (s->r[2 * i] <= '"' && '"' <= s->r[2 * i + 1]) has_q = true;
        if (s->r[2 * i] <= '\\' && '\\' <= s->r[2 * i + 1]) has_bs = true;
    }
    cps_sub(s, 0, 0x1F);
    cps_sub(s, 0x7F, 0x7F);
    if (r->mode == GRX_JSON_STR) {
        cps_sub(s, '"', '"');
        cps_sub(s, '\\', '\\');
    } else {
        cps_sub(s, '<', '<');
        cps_sub(s, '\\', '\\');
        cps_sub(s, '"', '"');
    }
    int alts[3], na = 0;
    if (s->n) alts[na++] = gb_cps(b, s->r, s->n);
    if (r->mode == GRX_JSON_STR && has_q) alts[na++] = gb_lits(b, "\\\"");
    if (r->mode == GRX_JSON_STR && has_bs) alts[na++] = gb_lits(b, "\\\\");
    return gb_alt(b, alts, na);
}

static void add_class_escape(gm_cpset *s, char c) {
    switch (c) {
    case 'd':
        cps_add(s, '0', '9');
        break;
    case 'w':
        cps_add(s, '0', '9'), cps_add(s, 'A', 'Z'), cps_add(s, 'a', 'z'), cps_add(s, '_', '_');
        break;
    case 's':
        cps_add(s, 9, 13), cps_add(s, ' ', ' '), cps_add(s, 0xA0, 0xA0);
        cps_add(s, 0x1680, 0x1680), cps_add(s, 0x2000, 0x200A), cps_add(s, 0x2028, 0x2029);
        cps_add(s, 0x202F, 0x202F), cps_add(s, 0x205F, 0x205F), cps_add(s, 0x3000, 0x3000);
        cps_add(s, 0xFEFF, 0xFEFF);
        break;
    }
}

static int hexv(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* After a backslash. Returns a code point, or -1 after filling s for a class escape, or -2 on
 * error. in_class: \b is backspace there. */
static long parse_escape(rx *r, gm_cpset *s, bool in_class) {
    if (r->i >= r->n) return rx_err(r, "trailing backslash"), -2;
    char c = r->s[r->i++];
    switch (c) {
    case 'd':
    case 'w':
    case 's':
        add_class_escape(s, c);
        return -1;
    case 'D':
    case 'W':
    case 'S': {
        gm_cpset t = {0};
        add_class_escape(&t, (char)(c + 32));
        cps_negate(&t);
        for (int i = 0; i < t.n; i++) cps_add(s, t.r[2 * i], t.r[2 * i + 1]);
        cps_free(&t);
        return -1;
    }
    case 'n':
        return '\n';
    case 't':
        return '\t';
    case 'r':
        return '\r';
    case 'f':
        return '\f';
    case 'v':
        return '\v';
    case '0':
        return 0;
    case 'b':
        if (in_class) return '\b';
        return rx_err(r, "\\b (word boundary) is not supported"), -2;
    case 'B':
        return rx_err(r, "\\B is not supported"), -2;
    case 'x': {
        if (r->i + 2 > r->n || hexv(r->s[r->i]) < 0 || hexv(r->s[r->i + 1]) < 0)
            return rx_err(r, "bad \\x escape"), -2;
        long v = hexv(r->s[r->i]) * 16 + hexv(r->s[r->i + 1]);
        r->i += 2;
        return v;
    }
    case 'u': {
        long v = 0;
        if (r->i < r->n && r->s[r->i] == '{') {
            r->i++;
            int k = 0;
            while (r->i < r->n && r->s[r->i] != '}' && k < 7) {
                int h = hexv(r->s[r->i++]);
                if (h < 0) return rx_err(r, "bad \\u{} escape"), -2;
                v = v * 16 + h, k++;
            }
            if (r->i >= r->n || r->s[r->i] != '}' || !k || v > 0x10FFFF)
                return rx_err(r, "bad \\u{} escape"), -2;
            r->i++;
            return v;
        }
        if (r->i + 4 > r->n) return rx_err(r, "bad \\u escape"), -2;
        for (int k = 0; k < 4; k++) {
            int h = hexv(r->s[r->i++]);
            if (h < 0) return rx_err(r, "bad \\u escape"), -2;
            v = v * 16 + h;
        }
        return v;
    }
    case 'p':
    case 'P':
        return rx_err(r, "unicode property escapes (\\p) are not supported"), -2;
    case 'c':
        return rx_err(r, "\\c control escapes are not supported"), -2;
    default:
        if (c >= '1' && c <= '9') return rx_err(r, "backreferences are not supported"), -2;
        if (c == 'k') return rx_err(r, "named backreferences are not supported"), -2;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return rx_err(r, "unknown escape"), -2;
        r->i--;
        return (long)rx_cp(r);
    }
}

static int parse_class(rx *r) {
    gm_cpset s = {0};
    bool neg = false;
    if (r->i < r->n && r->s[r->i] == '^') neg = true, r->i++;
    bool first = true;
    for (;;) {
        if (r->i >= r->n) {
            cps_free(&s);
            return rx_err(r, "unterminated character class"), -1;
        }
        if (r->s[r->i] == ']' && !first) break;
        if (r->s[r->i] == ']' && first) { /* ECMAScript: [] matches nothing, [^] anything */
            break;
        }
        first = false;
        long lo;
        if (r->s[r->i] == '\\') {
            r->i++;
            lo = parse_escape(r, &s, true);
            if (lo == -2) {
                cps_free(&s);
                return -1;
            }
            if (lo == -1) continue;
        } else {
            lo = (long)rx_cp(r);
        }
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            long hi;
            if (r->s[r->i] == '\\') {
                r->i++;
                hi = parse_escape(r, &s, true);
                if (hi < 0) {
                    cps_free(&s);
                    return hi == -2 ? -1 : (rx_err(r, "class escape in a range"), -1);
                }
            } else {
                hi = (long)rx_cp(r);
            }
            if (hi < lo) {
                cps_free(&s);
                return rx_err(r, "range out of order in character class"), -1;
            }
            cps_add(&s, (uint32_t)lo, (uint32_t)hi);
        } else {
            cps_add(&s, (uint32_t)lo, (uint32_t)lo);
        }
    }
    r->i++; /* ] */
    if (neg) cps_negate(&s);
    if (!s.n) {
        cps_free(&s);
        return gb_fail(r->b);
    }
    int x = emit_set(r, &s);
    cps_free(&s);
    return x;
}

static int parse_alt(rx *r);

static int parse_atom(rx *r) {
    char c = r->s[r->i];
    if (c == '(') {
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':') {
                r->i += 2;
            } else if (r->i + 1 < r->n && r->s[r->i + 1] == '<' && r->i + 2 < r->n &&
                       r->s[r->i + 2] != '=' && r->s[r->i + 2] != '!') {
                const char *gt = memchr(r->s + r->i, '>', r->n - r->i);
                if (!gt) return rx_err(r, "bad named group"), -1;
                r->i = (size_t)(gt - r->s) + 1;
            } else {
                return rx_err(r, "lookaround and inline flags are not supported"), -1;
            }
        }
        if (++r->depth > MAX_DEPTH) return rx_err(r, "groups nested too deeply"), -1;
        int x = parse_alt(r);
        r->depth--;
        if (r->i >= r->n || r->s[r->i] != ')') return rx_err(r, "missing )"), -1;
        r->i++;
        return x;
    }
    if (c == '[') {
        r->i++;
        return parse_class(r);
    }
    gm_cpset s = {0};
    if (c == '.') {
        r->i++;
        cps_add(&s, 0, 0x10FFFF);
        cps_sub(&s, '\n', '\n');
        cps_sub(&s, '\r', '\r');
        cps_sub(&s, 0x2028, 0x2029);
    } else if (c == '\\') {
        r->i++;
        long v = parse_escape(r, &s, false);
        if (v == -2) return -1;
        if (v >= 0) cps_add(&s, (uint32_t)v, (uint32_t)v);
    } else if (c == '^' || c == '$') {
        return rx_err(r, "anchors are only supported at the start (^) and end ($)"), -1;
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (c == '{' && !(r->i + 1 < r->n && r->s[r->i + 1] >= '0' && r->s[r->i + 1] <= '9')) {
            r->i++;
            cps_add(&s, '{', '{');
        } else {
            return rx_err(r, "nothing to repeat"), -1;
        }
    } else if (c == ')' || c == ']' || c == '}') {
        if (c == ')') return rx_err(r, "unmatched )"), -1;
        r->i++;
        cps_add(&s, (uint32_t)c, (uint32_t)c);
    } else {
        uint32_t cp = rx_cp(r);
        cps_add(&s, cp, cp);
    }
    int x = emit_set(r, &s);
    cps_free(&s);
    return x;
}

static bool parse_int(rx *r, int *v) {
    long x = 0;
    size_t st = r->i;
    while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') {
        x = x * 10 + (r->s[r->i++] - '0');
        if (x > 1000000) x = 1000000;
    }
    *v = (int)x;
    return r->i > st;
}

static int parse_seq(rx *r) {
    int cap = 16, n = 0;
    int *xs = malloc((size_t)cap * sizeof(int));
    if (!xs) return gb_error(r->b, CLLM_ENOMEM, "out of memory"), -1;
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        if (r->s[r->i] == '$' && r->i + 1 == r->n && r->depth == 0) break;
        int x = parse_atom(r);
        if (x < 0) {
            free(xs);
            return -1;
        }
        for (;;) { /* quantifiers */
            if (r->i >= r->n) break;
            char q = r->s[r->i];
            int lo, hi;
            if (q == '*')
                lo = 0, hi = -1, r->i++;
            else if (q == '+')
                lo = 1, hi = -1, r->i++;
            else if (q == '?')
                lo = 0, hi = 1, r->i++;
            else if (q == '{' && r->i + 1 < r->n && r->s[r->i + 1] >= '0' &&
                     r->s[r->i + 1] <= '9') {
                r->i++;
                parse_int(r, &lo);
                hi = lo;
                if (r->i < r->n && r->s[r->i] == ',') {
                    r->i++;
                    if (!parse_int(r, &hi)) hi = -1;
                }
                if (r->i >= r->n || r->s[r->i] != '}') {
                    free(xs);
                    return rx_err(r, "bad {n,m} quantifier"), -1;
                }
                r->i++;
                if (lo > MAX_REPEAT || hi > MAX_REPEAT) {
                    free(xs);
                    return gb_error(r->b, CLLM_ERANGE, "regex: repetition count over %d",
                                    MAX_REPEAT),
                           -1;
                }
                if (hi >= 0 && hi < lo) {
                    free(xs);
                    return rx_err(r, "numbers out of order in {} quantifier"), -1;
                }
            } else {
                break;
            }
            if (r->i < r->n && r->s[r->i] == '?') r->i++; /* lazy: same language */
            x = gb_rep(r->b, x, lo, hi);
            if (x < 0) {
                free(xs);
                return -1;
            }
            /* ECMAScript: a quantifier on a quantifier is "nothing to repeat" (stacked ones such
             * as a*++++ also nested repetitions without bound: fuzz_grammar's 36-byte input took
             * 0.7 s of CPU to compile) */
            if (r->i < r->n && (r->s[r->i] == '*' || r->s[r->i] == '+' || r->s[r->i] == '?' ||
                                (r->s[r->i] == '{' && r->i + 1 < r->n && r->s[r->i + 1] >= '0' &&
                                 r->s[r->i + 1] <= '9'))) {
                free(xs);
                return rx_err(r, "nothing to repeat (a quantifier after a quantifier)"), -1;
            }
            break;
        }
        if (!gb_push(r->b, &xs, &n, &cap, x)) return -1;
    }
    int x = gb_seq(r->b, xs, n);
    free(xs);
    return x;
}

static int parse_alt(rx *r) {
    int cap = 4, n = 0;
    int *xs = malloc((size_t)cap * sizeof(int));
    if (!xs) return gb_error(r->b, CLLM_ENOMEM, "out of memory"), -1;
    for (;;) {
        int x = parse_seq(r);
        if (x < 0) {
            free(xs);
            return -1;
        }
        if (!gb_push(r->b, &xs, &n, &cap, x)) return -1;
        if (r->i < r->n && r->s[r->i] == '|') {
            r->i++;
            continue;
        }
        break;
    }
    int x = gb_alt(r->b, xs, n);
    free(xs);
    return x;
}

static int any_star(rx *r) {
    gm_cpset s = {0};
    cps_add(&s, 0, 0x10FFFF);
    if (r->mode == GRX_WHOLE) {
        cps_sub(&s, '\n', '\n');
        cps_sub(&s, '\r', '\r');
    }
    int x = gb_rep(r->b, emit_set(r, &s), 0, -1);
    cps_free(&s);
    return x;
}

int gm_regex_expr(gm_builder *b, const char *re, size_t len, int mode, bool search) {
    if (b->failed) return -1;
    if ((long)len > b->o.max_source)
        return gb_error(b, CLLM_ERANGE, "regex longer than %d bytes", b->o.max_source), -1;
    rx r = {.b = b, .s = re, .n = len, .mode = mode};
    bool start = len && re[0] == '^';
    if (start) r.i = 1;
    int body = parse_alt(&r);
    if (body < 0) return -1;
    bool end = false;
    if (r.i < r.n && r.s[r.i] == '$' && r.i + 1 == r.n) end = true, r.i++;
    if (r.i != r.n) return rx_err(&r, "unexpected character"), -1;
    if (!search) return body;
    int pre = start ? gb_empty(b) : any_star(&r);
    int post = end ? gb_empty(b) : any_star(&r);
    return gb_seq3(b, pre, body, post);
}

cllm_status cllm_gm_from_regex(const char *re, size_t len, const cllm_gm_opts *opts, cllm_gm **out,
                               cllm_error *err) {
    gm_builder b;
    gb_init(&b, opts, err);
    int root = gb_rule(&b, "root");
    gb_rule_set(&b, root, gm_regex_expr(&b, re, len, GRX_WHOLE, false));
    cllm_status st = gb_finish(&b, out);
    gb_free(&b);
    return st;
}

cllm_status cllm_gm_from_choice(const char *const *choices, const size_t *lens, int n,
                                const cllm_gm_opts *opts, cllm_gm **out, cllm_error *err) {
    gm_builder b;
    gb_init(&b, opts, err);
    int root = gb_rule(&b, "root");
    if (n <= 0) {
        gb_free(&b);
        return cllm_err_set(err, CLLM_EINVAL, "choice: the list is empty");
    }
    if (n > CLLM_GM_MAX_CHOICES) {
        gb_free(&b);
        return cllm_err_set(err, CLLM_ERANGE, "choice: %d strings, more than the limit of %d", n,
                            CLLM_GM_MAX_CHOICES);
    }
    gb_rule_set(&b, root, gb_trie(&b, choices, lens, NULL, n));
    cllm_status st = gb_finish(&b, out);
    gb_free(&b);
    return st;
}
