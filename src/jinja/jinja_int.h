/* Private structures of the Jinja interpreter: values, AST, render state.
 * jinja_parse.c builds the AST, jinja_value.c holds values and JSON, jinja_eval.c evaluates,
 * jinja_builtins.c has filters, tests and methods. All render-time memory comes from one arena
 * per render, released at once, so errors never leak and the cap bounds memory. */
#ifndef CLLM_JINJA_JINJA_INT_H
#define CLLM_JINJA_JINJA_INT_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "jinja/jinja.h"

/* ---- values ---- */

typedef enum jv_type {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,  /* also tuples */
    JV_DICT,  /* insertion-ordered */
    JV_NS,    /* namespace(): a dict whose attributes can be set */
    JV_MACRO, /* a {% macro %} */
    JV_FUNC,  /* a builtin global or a bound method */
} jv_type;

typedef struct jv jv;
typedef struct jlist jlist;
typedef struct jdict jdict;
struct jnode;
struct jrender;

typedef struct jfunc {
    /* Builtin: fn(render, self, args, nargs, kw names, kw values, nkw, line). */
    jv (*fn)(struct jrender *r, const jv *self, const jv *args, int nargs, const char **kwn,
             const jv *kwv, int nkw, int line);
    const char *name;
    jv *self; /* bound receiver, or NULL */
    const struct jnode *macro;
} jfunc;

struct jv {
    jv_type t;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;
            size_t len;
        } s;
        jlist *l;
        jdict *d;
        jfunc *fn;
    } u;
};

struct jlist {
    jv *v;
    size_t n, cap;
};

struct jdict {
    const char **k;
    size_t *klen;
    jv *v;
    size_t n, cap;
};

/* ---- AST ---- */

typedef enum jn_kind {
    /* statements */
    JN_BLOCK,  /* kids[0..n) */
    JN_TEXT,   /* s */
    JN_OUTPUT, /* a */
    JN_IF,     /* a = cond, b = then (block), c = else (block or IF) */
    JN_FOR,    /* targets in names, a = iterable, b = body, c = else, d = filter cond */
    JN_SET,    /* names (targets) or a2 = attribute target (a.b), a = value or b = block body */
    JN_MACRO,  /* s = name, names = params, kids = defaults (NULL entries), b = body */
    JN_BREAK,
    JN_CONTINUE,
    JN_CALLBLOCK,   /* a = call expression, b = caller body */
    JN_FILTERBLOCK, /* a = filter node (operand NULL), b = body */
    /* expressions */
    JN_LIT,    /* v */
    JN_NAME,   /* s */
    JN_ATTR,   /* a . s */
    JN_ITEM,   /* a [ b ] */
    JN_SLICE,  /* a [ b : c : d ] (NULL parts omitted) */
    JN_CALL,   /* a ( kids ) with kwnames */
    JN_FILTER, /* a | s ( kids ) */
    JN_TEST,   /* a is [not] s ( kids ); neg */
    JN_UNARY,  /* op, a */
    JN_BIN,    /* op, a, b */
    JN_COND,   /* b if a else c */
    JN_LIST,   /* kids */
    JN_TUPLE,  /* kids */
    JN_DICT,   /* kids: k0, v0, k1, v1 ... */
} jn_kind;

typedef struct jnode {
    jn_kind kind;
    int line;
    int op; /* JN_UNARY / JN_BIN: token code */
    bool neg;
    const char *s;
    size_t slen;
    jv v;
    struct jnode *a, *b, *c, *d;
    struct jnode **kids;
    int nkids;
    const char **names; /* targets / params / kwarg names (NULL for positional) */
    int nnames;
} jnode;

/* Operator codes used in JN_UNARY / JN_BIN. */
enum {
    OP_ADD = 1,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_CONCAT,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_GT,
    OP_LE,
    OP_GE,
    OP_IN,
    OP_NOTIN,
    OP_AND,
    OP_OR,
    OP_NOT,
    OP_NEG,
    OP_POS,
};

/* ---- arena ---- */

typedef struct jarena {
    struct jchunk *head;
    size_t used, cap_total; /* bytes handed out, limit */
} jarena;

void *ja_alloc(jarena *a, size_t n); /* NULL when over the cap or out of memory */
void ja_free(jarena *a);

struct cllm_jinja {
    jarena arena; /* owns the AST and its strings */
    jnode *root;
};

/* ---- render state ---- */

typedef struct jscope {
    struct jscope *parent;
    jdict vars;
} jscope;

typedef struct jrender {
    jarena arena;
    jmp_buf fail; /* errors longjmp here; all memory is in the arena */
    cllm_error *err;
    cllm_status status;
    char *out;
    size_t out_len, out_cap, max_output;
    long steps, max_steps;
    int depth, mdepth, max_depth; /* expression depth, macro call depth, limit */
    jscope *globals;
    int brk; /* 1 break, 2 continue pending */
} jrender;

_Noreturn void jr_fail(jrender *r, cllm_status st, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void *jr_alloc(jrender *r, size_t n);

/* values */
jv jv_str(jrender *r, const char *p, size_t len); /* copies */
jv jv_strz(const char *p);                        /* static string, no copy */
jv jv_int(int64_t i);
jv jv_bool(bool b);
jv jv_list(jrender *r);
jv jv_dict(jrender *r);
void jl_push(jrender *r, jlist *l, jv v);
void jd_set(jrender *r, jdict *d, const char *k, size_t klen, jv v);
const jv *jd_get(const jdict *d, const char *k, size_t klen);
bool jv_truthy(const jv *v);
bool jv_equal(const jv *a, const jv *b);
int jv_compare(jrender *r, const jv *a, const jv *b, int line); /* <0, 0, >0 */
jv jv_from_json(jrender *r, json_t *j);
/* Python str(): appends to a growable buffer */
typedef struct jbuf {
    char *p;
    size_t len, cap;
} jbuf;
void jb_put(jrender *r, jbuf *b, const char *s, size_t n);
void jv_to_str(jrender *r, const jv *v, jbuf *b);
jv jv_stringify(jrender *r, const jv *v);
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: none)) */
void jv_to_json(jrender *r, const jv *v, int indent, int depth, jbuf *b, int line);
const char *jv_type_name(jv_type t);

/* builtins */
jv jb_filter(jrender *r, const char *name, jv operand, const jv *args, int nargs, const char **kwn,
             const jv *kwv, int nkw, int line);
bool jb_test(jrender *r, const char *name, const jv *operand, const jv *args, int nargs, int line);
jv jb_attr(jrender *r, const jv *obj, const char *name, size_t len, int line); /* methods */
jv jb_global(jrender *r, const char *name, size_t len); /* range, namespace... */

#endif
