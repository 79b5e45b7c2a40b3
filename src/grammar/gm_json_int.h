/* Private to grammar/: JSON value grammars shared by the schema compiler (gm_schema.c), the
 * numbers and formats (gm_schema_num.c) and the tool-call grammar (gm_tools.c). */
#ifndef CLLM_GRAMMAR_GM_JSON_INT_H
#define CLLM_GRAMMAR_GM_JSON_INT_H

#include <jansson.h>

#include "grammar/gm_int.h"

typedef struct gm_sc {
    gm_builder *b;
    json_t *root;
    int ws; /* whitespace expression between JSON tokens (empty when compact) */
    int ws_rule;
    int any_rule, str_rule, num_rule, int_rule, obj_rule, arr_rule; /* generic, -1 until built */
    int n_visits;
    struct sc_ref {
        char *ptr;
        int rule;
    } * refs;
    int n_refs, cap_refs;
    json_t *keep; /* array owning merged schemas for the compile's lifetime */
} gm_sc;

void sc_init(gm_sc *c, gm_builder *b, json_t *root);
void sc_free(gm_sc *c);
int sc_ws(gm_sc *c);
int sc_sep(gm_sc *c, char ch);       /* ws ch ws */
int sc_any(gm_sc *c);                /* any JSON value */
int sc_str_char(gm_sc *c, bool raw); /* one character of a string's content */
int sc_number_generic(gm_sc *c);
int sc_integer_generic(gm_sc *c);
/* Literal JSON text of a value (compact); raw: a string's content without quotes. */
int sc_literal(gm_sc *c, json_t *v, bool raw);

/* gm_schema_keys.c: an object's members (n >= 1) in order, member i optional unless
 * required[i], keys as JSON text (quotes included), values val[i]; tail0 / tail1 follow the
 * last member written (tail0 when none was). json: ':' after a key and ',' between members
 * (else keys and values are written as given, nothing between). Returns the members'
 * expression (no braces). Objects of SC_MANY_MEMBERS members or more take this form. */
int sc_object_members(gm_sc *c, int n, const char *const *key, const size_t *klen,
                      const bool *required, const int *val, int tail0, int tail1, bool json);
enum { SC_MANY_MEMBERS = 32 };

/* gm_schema_num.c */
/* Decimal integers in [lo, hi]; has_lo/has_hi false = unbounded on that side. */
int sc_int_range(gm_builder *b, bool has_lo, long long lo, bool has_hi, long long hi);
/* Decimal numbers x with lo <= x <= hi (lo_x / hi_x: the bound itself excluded; has_*: bounded
 * on that side), exactly: I[.F] with I without leading zeros and F of up to max(6, a bound's
 * fraction digits + 1) digits, no exponent. ptr names the schema for errors. */
int sc_decimal_range(gm_builder *b, bool has_lo, double lo, bool lo_x, bool has_hi, double hi,
                     bool hi_x, const char *ptr);
/* A string format's content (inside the quotes); -1 with an error when unknown. */
int sc_format(gm_sc *c, const char *fmt, const char *ptr);

/* A schema (any JSON value) -> expression. ptr is its JSON pointer for messages; raw: a string at
 * the top is emitted without quotes (tool-call XML values). */
int sc_schema(gm_sc *c, json_t *s, const char *ptr, int depth, bool raw);

#endif
