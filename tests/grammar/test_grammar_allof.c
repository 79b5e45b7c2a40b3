/* allOf with JSON Schema's meaning (issue 32, item 8): a branch's additionalProperties applies
 * to the keys the other branches name; allOf with no common instance is refused naming allOf;
 * the usual composition (a base $ref plus more properties) keeps working. Each case lists texts
 * the grammar must accept whole and texts it must refuse. */
#include <stdio.h>
#include <string.h>

#include "grammar/grammar.h"
#include "test.h"

static bool accepts(cllm_gm *g, const char *s) {
    cllm_gm_matcher *m = cllm_gm_matcher_new(g, NULL);
    bool ok = cllm_gm_matcher_accept_bytes(m, s, strlen(s)) && cllm_gm_matcher_is_accepting(m);
    cllm_gm_matcher_free(m);
    return ok;
}

static void t_semantics(void) {
    static const struct {
        const char *schema;
        const char *yes[4], *no[4];
    } cases[] = {
        /* additionalProperties false in one branch forbids the other's optional "b" */
        {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
         "\"required\":[\"a\"],\"additionalProperties\":false},"
         "{\"properties\":{\"b\":{\"type\":\"integer\"}}}]}",
         {"{\"a\":1}"},
         {"{\"a\":1,\"b\":2}", "{\"b\":2}"}},
        /* a schema-valued additionalProperties constrains the other branch's keys */
        {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
         "\"additionalProperties\":{\"type\":\"string\"}},"
         "{\"properties\":{\"b\":{}},\"required\":[\"b\"]}]}",
         {"{\"b\":\"x\"}", "{\"a\":1,\"b\":\"y\"}"},
         {"{\"b\":1}", "{\"a\":1,\"b\":true}"}},
        /* both branches name "a": its schemas intersect */
        {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
         "\"required\":[\"a\"],\"additionalProperties\":false},"
         "{\"properties\":{\"a\":{\"minimum\":0,\"maximum\":9}}}]}",
         {"{\"a\":5}"},
         {"{\"a\":10}", "{\"a\":-1}"}},
        /* the usual composition: a base through $ref plus more, no additionalProperties */
        {"{\"$defs\":{\"base\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},"
         "\"required\":[\"id\"]}},\"allOf\":[{\"$ref\":\"#/$defs/base\"},"
         "{\"properties\":{\"name\":{\"type\":\"string\"}},\"required\":[\"name\"]}]}",
         {"{\"id\":1,\"name\":\"x\"}"},
         {"{\"id\":1}", "{\"name\":\"x\"}", "{\"id\":1,\"name\":\"x\",\"z\":1}"}},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        cllm_gm *g = NULL;
        cllm_error e = {0};
        cllm_status st =
            cllm_gm_from_json_schema(cases[i].schema, strlen(cases[i].schema), NULL, &g, &e);
        CHECK_MSG(st == CLLM_OK, "allOf case %zu: %s", i, e.msg);
        if (!g) continue;
        for (int k = 0; k < 4 && cases[i].yes[k]; k++)
            CHECK_MSG(accepts(g, cases[i].yes[k]), "allOf case %zu refuses %s", i, cases[i].yes[k]);
        for (int k = 0; k < 4 && cases[i].no[k]; k++)
            CHECK_MSG(!accepts(g, cases[i].no[k]), "allOf case %zu accepts %s", i, cases[i].no[k]);
        cllm_gm_unref(g);
    }
}

/* No instance: refused, and the message names allOf and where it is. */
static void t_empty(void) {
    static const char *cases[] = {
        /* "b" is required by one branch and forbidden by the other */
        "{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},"
        "\"additionalProperties\":false},{\"properties\":{\"b\":{\"type\":\"integer\"}},"
        "\"required\":[\"b\"]}]}",
        "{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}",
        "{\"allOf\":[{\"type\":\"integer\",\"minimum\":5},{\"maximum\":3}]}",
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        cllm_gm *g = NULL;
        cllm_error e = {0};
        cllm_status st = cllm_gm_from_json_schema(cases[i], strlen(cases[i]), NULL, &g, &e);
        CHECK_MSG(st != CLLM_OK && strstr(e.msg, "allOf at #"), "empty allOf %zu: %d '%s'", i, st,
                  e.msg);
        cllm_gm_unref(g);
    }
}

int main(void) {
    t_semantics();
    t_empty();
    return test_report("test_grammar_allof");
}
