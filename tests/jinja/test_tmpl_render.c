/* The Jinja interpreter (src/jinja/, jinja/jinja.h) on the chat templates of
 * tests/data/tokenizer/templates/ vs the references in cases.json there
 * (tools/tokref/gen_tmpl_ref.js): Python Jinja2 as HF transformers runs it ("py") and
 * @huggingface/jinja ("js"). Every case must equal py (or fail
 * when py failed); it must also equal js on each case where js and py agree (>= 50 cases).
 * Also: syntax/runtime errors name the line, and the sandbox limits stop runaway templates. */
#include <jansson.h>

#include "test.h"
#include "test_tok_common.h"
#include "jinja/jinja.h"

static char *render(const char *src, const char *ctx_json, cllm_error *err, cllm_status *st,
                    const cllm_jinja_limits *lim) {
    cllm_jinja *t = NULL;
    *st = cllm_jinja_compile(src, strlen(src), &t, err);
    if (*st) return NULL;
    json_t *ctx = json_loads(ctx_json, 0, NULL);
    char *out = NULL;
    size_t n;
    *st = cllm_jinja_render(t, ctx, lim, &out, &n, err);
    json_decref(ctx);
    cllm_jinja_free(t);
    return out;
}

static void check_cases(void) {
    json_error_t je;
    json_t *root = json_load_file(tt_path("tests/data/tokenizer/templates/cases.json"), 0, &je);
    CHECK_MSG(root != NULL, "cannot read cases.json: %s", je.text);
    if (!root) return;
    json_t *cases = json_object_get(root, "cases");
    int n = 0, py_ok = 0, js_agree = 0, js_ok = 0;
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        const char *tname = json_string_value(json_object_get(c, "template"));
        char rel[256];
        snprintf(rel, sizeof(rel), "tests/data/tokenizer/templates/%s.jinja", tname);
        size_t sl;
        char *src = tt_read(tt_path(rel), &sl);
        CHECK_MSG(src != NULL, "missing %s", rel);
        if (!src) continue;
        cllm_jinja *t = NULL;
        cllm_error err = {0};
        char *out = NULL;
        size_t ol = 0;
        cllm_status st = cllm_jinja_compile(src, sl, &t, &err);
        if (!st) st = cllm_jinja_render(t, json_object_get(c, "ctx"), NULL, &out, &ol, &err);
        json_t *py = json_object_get(c, "py"), *js = json_object_get(c, "js");
        bool want_err = json_is_null(py);
        bool ok = want_err ? st != CLLM_OK
                           : st == CLLM_OK && ol == json_string_length(py) &&
                                 !memcmp(out, json_string_value(py), ol);
        if (!ok)
            fprintf(stderr, "TEMPLATE MISMATCH %s / %s: %s\n--- want\n%s\n--- got\n%s\n", tname,
                    json_string_value(json_object_get(c, "note")), st ? err.msg : "",
                    want_err ? "(error)" : json_string_value(py), out ? out : "(error)");
        py_ok += ok;
        bool agree = json_equal(py, js);
        if (agree) {
            js_agree++;
            js_ok += ok;
        }
        n++;
        free(out);
        free(src);
        cllm_jinja_free(t);
    }
    fprintf(stderr,
            "templates: %d cases, %d equal to Python Jinja2; %d where @huggingface/jinja agrees, "
            "%d of those equal\n",
            n, py_ok, js_agree, js_ok);
    CHECK(n >= 50);
    CHECK(py_ok == n);
    CHECK(js_agree >= 50 && js_ok == js_agree);
    json_decref(root);
}

static void check_semantics(void) {
    cllm_error err = {0};
    cllm_status st;
    struct {
        const char *src, *ctx, *want;
    } cases[] = {
        {"{{ 1 + 2 * 3 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ 7 % -3 }}|{{ 2 ** 10 }}|{{ 1 / 4 }}", "{}",
         "7|3|-4|-2|1024|0.25"},
        {"{{ 'abc'[::-1] }}|{{ 'héllo'[1:3] }}|{{ [1,2,3][-1] }}|{{ 'a,b,,c'.split(',') }}", "{}",
         "cba|él|3|['a', 'b', '', 'c']"},
        {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
         "{\"d\":{\"x\":1,\"y\":[true,null]}}", "x=1;y=[True, None];"},
        {"{% set ns = namespace(n=0) %}{% for i in range(5) if i is odd %}{% set ns.n = ns.n + i "
         "%}{% endfor %}{{ ns.n }}",
         "{}", "4"},
        {"{% for x in [] %}a{% else %}empty{% endfor %}", "{}", "empty"},
        {"{% for x in [1,2,3,4] %}{% if x == 3 %}{% break %}{% endif %}{{ loop.index }}{{ "
         "loop.last }}{% endfor %}",
         "{}", "1False2False"},
        {"{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(2, b=3) }}", "{}",
         "[1B][23]"},
        {"{{ x | default('d') }}|{{ '' | default('e', true) }}|{{ [3,1,2] | sort | join(',') }}|{{ "
         "'a' ~ 1 }}",
         "{}", "d|e|1,2,3|a1"},
        {"{{ {'a': 'é\\n', 'b': [1, 2.5, none]} | tojson }}", "{}",
         "{\"a\": \"é\\n\", \"b\": [1, 2.5, null]}"},
        {"{{ d | tojson(indent=2) }}", "{\"d\":{\"a\":[1,{}],\"b\":{}}}",
         "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": {}\n}"},
        {"{{ '  x  ' | trim }}|{{ 'Hello World' | lower }}|{{ 'ab' | upper }}|{{ 'x\\ny' | "
         "indent(2, true) }}",
         "{}", "x|hello world|AB|  x\n  y"},
        {"{%- if true -%}\n  a  \n{%- endif -%}\n b", "{}", "ab"},
        {"  {% if true %}\nyes\n  {% endif %}\nend", "{}", "yes\nend"},
        {"{{ 'x' if false }}|{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e20 }}|{{ 3.14 }}", "{}",
         "|None|True|1.0|1e+20|3.14"},
        {"{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | "
         "join('+') }}",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"bot\",\"content\":\"b\"}"
         ",{\"role\":\"user\",\"content\":\"c\"}]}",
         "a+c"},
        {"{% set a, b = [1, 2] %}{{ b }}{{ a }}|{{ 'x' in 'xyz' }}|{{ 2 not in [1] }}|{{ "
         "d.get('q', 5) }}",
         "{\"d\":{}}", "21|True|True|5"},
        {"{% set s %}inner{{ 1 }}{% endset %}{{ s | length }}|{{ 'a b  c'.split() | length }}|{{ "
         "'aXbXc'.replace('X', '-', 1) }}",
         "{}", "6|3|a-bXc"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        char *out = render(cases[i].src, cases[i].ctx, &err, &st, NULL);
        CHECK_MSG(out && !strcmp(out, cases[i].want), "case %zu: want [%s] got [%s] (%s)", i,
                  cases[i].want, out ? out : "(null)", st ? err.msg : "");
        free(out);
    }
    /* Errors name the line. */
    char *out = render("line1\n{% if %}\n", "{}", &err, &st, NULL);
    CHECK(!out && st == CLLM_EFORMAT && strstr(err.msg, "line 2"));
    out = render("a\nb\n{{ raise_exception('bad input') }}", "{}", &err, &st, NULL);
    CHECK(!out && st == CLLM_EINVAL && strstr(err.msg, "line 3") && strstr(err.msg, "bad input"));
    out = render("{% for x in y %}", "{}", &err, &st, NULL);
    CHECK(!out && st == CLLM_EFORMAT);
    out = render("{{ x.y }}", "{}", &err, &st, NULL);
    CHECK(!out && st == CLLM_EINVAL);
    /* Sandbox limits: runaway loops, recursion and output are stopped with a status. */
    cllm_jinja_limits lim = {.max_steps = 100000, .max_output = 1 << 20};
    out = render("{% for i in range(100000000) %}x{% endfor %}", "{}", &err, &st, &lim);
    CHECK(!out && st == CLLM_ENOMEM);
    out = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", &err, &st, &lim);
    CHECK(!out && st == CLLM_ENOMEM);
    out = render(
        "{% set s = 'xxxxxxxxxxxxxxxx' %}{% for i in range(50000) %}{{ s * 10 }}{% endfor %}", "{}",
        &err, &st, &lim);
    CHECK(!out && st == CLLM_ENOMEM);
}

int main(void) {
    check_cases();
    check_semantics();
    return test_report("test_tmpl_render");
}
