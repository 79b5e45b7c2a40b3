/* Generic JSON value grammars (any value, object, string, number) as shared rules, whitespace,
 * literals of JSON values, and response_format json_object. Strings are valid UTF-8 with JSON's
 * escapes; numbers follow RFC 8259. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_json_int.h"

void sc_init(gm_sc *c, gm_builder *b, json_t *root) {
    memset(c, 0, sizeof(*c));
    c->b = b;
    c->root = root;
    c->ws = -1;
    c->ws_rule = c->any_rule = c->str_rule = c->num_rule = c->int_rule = -1;
    c->obj_rule = c->arr_rule = -1;
    c->keep = json_array();
}

void sc_free(gm_sc *c) {
    for (int i = 0; i < c->n_refs; i++) free(c->refs[i].ptr);
    free(c->refs);
    json_decref(c->keep);
    memset(c, 0, sizeof(*c));
}

int sc_ws(gm_sc *c) {
    gm_builder *b = c->b;
    if (c->ws_rule >= 0) return gb_ref(b, c->ws_rule);
    if (!b->o.ws_pattern && !b->o.any_whitespace) return gb_empty(b);
    c->ws_rule = gb_rule(b, "ws");
    int x;
    if (b->o.ws_pattern)
        x = gm_regex_expr(b, b->o.ws_pattern, strlen(b->o.ws_pattern), GRX_WHOLE, false);
    else
        x = gb_rep(b, gb_alt2(b, gb_alt2(b, gb_lits(b, " "), gb_lits(b, "\n")), gb_lits(b, "\t")),
                   0, -1);
    gb_rule_set(b, c->ws_rule, x);
    return gb_ref(b, c->ws_rule);
}

int sc_sep(gm_sc *c, char ch) {
    char s[2] = {ch, 0};
    return gb_seq3(c->b, sc_ws(c), gb_lits(c->b, s), sc_ws(c));
}

int sc_str_char(gm_sc *c, bool raw) {
    gm_builder *b = c->b;
    gm_cpset s = {0};
    cps_add(&s, 0x20, 0x10FFFF);
    cps_sub(&s, 0x7F, 0x7F);
    if (raw) {
        cps_sub(&s, '<', '<');
        cps_sub(&s, '"', '"');
        cps_sub(&s, '\\', '\\');
        int x = gb_cps(b, s.r, s.n);
        cps_free(&s);
        return x;
    }
    cps_sub(&s, '"', '"');
    cps_sub(&s, '\\', '\\');
    int plain = gb_cps(b, s.r, s.n);
    cps_free(&s);
    int hex =
        gb_alt2(b, gb_alt2(b, gb_range(b, '0', '9'), gb_range(b, 'a', 'f')), gb_range(b, 'A', 'F'));
    int esc1 = gb_alt(b,
                      (int[]){gb_lits(b, "\""), gb_lits(b, "\\"), gb_lits(b, "/"), gb_lits(b, "b"),
                              gb_lits(b, "f"), gb_lits(b, "n"), gb_lits(b, "r"), gb_lits(b, "t")},
                      8);
    /* \u escapes of ASCII letters/digits only: keeps outputs readable and avoids lone
     * surrogates, which some validators reject */
    int u = gb_seq2(b, gb_lits(b, "u00"), gb_seq2(b, gb_range(b, '2', '7'), hex));
    int esc = gb_seq2(b, gb_lits(b, "\\"), gb_alt2(b, esc1, u));
    return gb_alt2(b, plain, esc);
}

static int sc_string_generic(gm_sc *c) {
    gm_builder *b = c->b;
    if (c->str_rule < 0) {
        c->str_rule = gb_rule(b, "string");
        gb_rule_set(b, c->str_rule,
                    gb_seq3(b, gb_lits(b, "\""), gb_rep(b, sc_str_char(c, false), 0, -1),
                            gb_lits(b, "\"")));
    }
    return gb_ref(b, c->str_rule);
}

int sc_integer_generic(gm_sc *c) {
    gm_builder *b = c->b;
    if (c->int_rule < 0) {
        c->int_rule = gb_rule(b, "integer");
        gb_rule_set(b, c->int_rule, sc_int_range(b, false, 0, false, 0));
    }
    return gb_ref(b, c->int_rule);
}

int sc_number_generic(gm_sc *c) {
    gm_builder *b = c->b;
    if (c->num_rule < 0) {
        c->num_rule = gb_rule(b, "number");
        int digits = gb_rep(b, gb_range(b, '0', '9'), 1, -1);
        int frac = gb_opt(b, gb_seq2(b, gb_lits(b, "."), digits));
        int sign = gb_opt(b, gb_alt2(b, gb_lits(b, "+"), gb_lits(b, "-")));
        /* exponents of up to two digits keep every number a finite double */
        int exp = gb_opt(b, gb_seq3(b, gb_alt2(b, gb_lits(b, "e"), gb_lits(b, "E")), sign,
                                    gb_rep(b, gb_range(b, '0', '9'), 1, 2)));
        gb_rule_set(b, c->num_rule, gb_seq3(b, sc_integer_generic(c), frac, exp));
    }
    return gb_ref(b, c->num_rule);
}

static int sc_any_object(gm_sc *c) {
    gm_builder *b = c->b;
    if (c->obj_rule < 0) {
        c->obj_rule = gb_rule(b, "object");
        int member = gb_seq3(b, sc_string_generic(c), sc_sep(c, ':'), sc_any(c));
        int more = gb_rep(b, gb_seq2(b, sc_sep(c, ','), member), 0, -1);
        int body = gb_opt(b, gb_seq2(b, member, more));
        gb_rule_set(
            b, c->obj_rule,
            gb_seq(b, (int[]){gb_lits(b, "{"), sc_ws(c), body, sc_ws(c), gb_lits(b, "}")}, 5));
    }
    return gb_ref(b, c->obj_rule);
}

int sc_any(gm_sc *c) {
    gm_builder *b = c->b;
    if (c->any_rule < 0) {
        c->any_rule = gb_rule(b, "value");
        c->arr_rule = gb_rule(b, "array");
        int more = gb_rep(b, gb_seq2(b, sc_sep(c, ','), gb_ref(b, c->any_rule)), 0, -1);
        int body = gb_opt(b, gb_seq2(b, gb_ref(b, c->any_rule), more));
        gb_rule_set(
            b, c->arr_rule,
            gb_seq(b, (int[]){gb_lits(b, "["), sc_ws(c), body, sc_ws(c), gb_lits(b, "]")}, 5));
        int alts[] = {sc_any_object(c),     gb_ref(b, c->arr_rule), sc_string_generic(c),
                      sc_number_generic(c), gb_lits(b, "true"),     gb_lits(b, "false"),
                      gb_lits(b, "null")};
        gb_rule_set(b, c->any_rule, gb_alt(b, alts, 7));
    }
    return gb_ref(b, c->any_rule);
}

int sc_literal(gm_sc *c, json_t *v, bool raw) {
    if (raw && json_is_string(v)) return gb_lit(c->b, json_string_value(v), json_string_length(v));
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s) return gb_error(c->b, CLLM_ENOMEM, "out of memory"), -1;
    int x = gb_lits(c->b, s);
    free(s);
    return x;
}

cllm_status cllm_gm_json_object(const cllm_gm_opts *opts, cllm_gm **out, cllm_error *err) {
    gm_builder b;
    gb_init(&b, opts, err);
    gm_sc c;
    sc_init(&c, &b, NULL);
    int root = gb_rule(&b, "root");
    gb_rule_set(&b, root, sc_any_object(&c));
    cllm_status st = gb_finish(&b, out);
    sc_free(&c);
    gb_free(&b);
    return st;
}
