/* Forced tool calls: the Qwen3.5 XML tool-call format that tokenizer/tool_call_parse.c reads,
 *   <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n...</function>\n</tool_call>
 * one or more blocks separated by a newline. Parameters come in the schema's property order,
 * required ones always; a string value is raw text (no '<', no control characters), any other
 * value is compact JSON satisfying the parameter's schema, which is how the parser types them. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_json_int.h"

static int one_function(gm_sc *c, json_t *fn, int idx) {
    gm_builder *b = c->b;
    const char *name = json_string_value(json_object_get(fn, "name"));
    json_t *params = json_object_get(fn, "parameters");
    char ptr[128];
    snprintf(ptr, sizeof(ptr), "tools[%d].function.parameters", idx);
    if (params && !json_is_object(params))
        return gb_error(b, CLLM_EINVAL, "%s must be an object", ptr), -1;
    const char *k;
    json_t *v;
    json_object_foreach(params, k, v) {
        if (!strcmp(k, "type") || !strcmp(k, "properties") || !strcmp(k, "required") ||
            !strcmp(k, "additionalProperties") || !strcmp(k, "$defs") ||
            !strcmp(k, "definitions") || !strcmp(k, "title") || !strcmp(k, "description") ||
            !strcmp(k, "$schema") || !strcmp(k, "strict"))
            continue;
        return gb_error(b, CLLM_EUNSUPPORTED,
                        "unsupported JSON Schema keyword '%s' at %s (forced tool calls)", k, ptr),
               -1;
    }
    json_t *props = json_object_get(params, "properties"),
           *req = json_object_get(params, "required");
    json_t *addl = json_object_get(params, "additionalProperties");
    if (json_is_true(addl) || json_is_object(addl))
        return gb_error(b, CLLM_EUNSUPPORTED,
                        "unsupported JSON Schema keyword 'additionalProperties' at %s (forced tool "
                        "calls name every parameter)",
                        ptr),
               -1;
    size_t i;
    json_array_foreach(req, i, v) {
        if (!json_is_string(v) || !json_object_get(props, json_string_value(v)))
            return gb_error(b, CLLM_EUNSUPPORTED, "%s: required parameter '%.80s' has no schema",
                            ptr, json_is_string(v) ? json_string_value(v) : "?"),
                   -1;
    }
    int n = (int)json_object_size(props), j = 0;
    int *xs = malloc(((size_t)n + 3) * sizeof(int));
    if (!xs) return gb_error(b, CLLM_ENOMEM, "out of memory"), -1;
    size_t hl = strlen(name) + 64;
    char *head = malloc(hl);
    if (!head) {
        free(xs);
        return gb_error(b, CLLM_ENOMEM, "out of memory"), -1;
    }
    snprintf(head, hl, "<tool_call>\n<function=%s>\n", name);
    xs[j++] = gb_lits(b, head);
    free(head);
    /* many parameters: the openers are keys of gm_schema_keys.c's form (one optional block
     * after another keeps a stack per block at each '<') */
    bool many = n >= SC_MANY_MEMBERS;
    char **keys = many ? calloc((size_t)n + 1, sizeof(char *)) : NULL;
    size_t *klen = many ? malloc(((size_t)n + 1) * sizeof(size_t)) : NULL;
    bool *rq = many ? malloc(((size_t)n + 1) * sizeof(bool)) : NULL;
    int *vals = many ? malloc(((size_t)n + 1) * sizeof(int)) : NULL;
    if (many && (!keys || !klen || !rq || !vals)) gb_error(b, CLLM_ENOMEM, "out of memory");
    int m = 0;
    json_object_foreach(props, k, v) {
        if (b->failed) break;
        bool r = false;
        json_t *x;
        json_array_foreach(req, i, x) r |= !strcmp(json_string_value(x), k);
        char pp[300];
        snprintf(pp, sizeof(pp), "%s/properties/%s", ptr, k);
        const char *ty = json_string_value(json_object_get(v, "type"));
        bool raw = ty && !strcmp(ty, "string");
        size_t ol = strlen(k) + 32;
        char *open = malloc(ol);
        if (!open) break;
        snprintf(open, ol, "<parameter=%s>\n", k);
        int val = gb_seq2(b, sc_schema(c, v, pp, 1, raw), gb_lits(b, "\n</parameter>\n"));
        if (many) {
            keys[m] = open, klen[m] = strlen(open), rq[m] = r, vals[m++] = val;
            continue;
        }
        int blk = gb_seq2(b, gb_lits(b, open), val);
        free(open);
        xs[j++] = r ? blk : gb_opt(b, blk);
    }
    int end = gb_lits(b, "</function>\n</tool_call>");
    if (many && !b->failed)
        xs[j++] =
            sc_object_members(c, m, (const char *const *)keys, klen, rq, vals, end, end, false);
    else
        xs[j++] = end;
    for (int q = 0; keys && q < m; q++) free(keys[q]);
    free(keys), free(klen), free(rq), free(vals);
    int x = gb_seq(b, xs, j);
    free(xs);
    return x;
}

cllm_status cllm_gm_from_tools(const char *tools_json, size_t len, const char *only_fn,
                               int min_calls, int max_calls, const cllm_gm_opts *opts,
                               cllm_gm **out, cllm_error *err) {
    *out = NULL;
    json_error_t je;
    json_t *tools = json_loadb(tools_json, len, 0, &je);
    if (!json_is_array(tools)) {
        json_decref(tools);
        return cllm_err_set(err, CLLM_EINVAL, "tools must be an array");
    }
    gm_builder b;
    gb_init(&b, opts, err);
    gm_sc c;
    sc_init(&c, &b, NULL);
    int root = gb_rule(&b, "root");
    int n = (int)json_array_size(tools), na = 0;
    int *alts = malloc(((size_t)n + 1) * sizeof(int));
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        if (!alts) break;
        json_t *fn = json_object_get(t, "function");
        if (!fn) fn = t;
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (!name) {
            gb_error(&b, CLLM_EINVAL, "tools[%zu].function.name is required", i);
            break;
        }
        if (only_fn && strcmp(name, only_fn)) continue;
        /* each parameters schema is its own root for $ref */
        c.root = json_object_get(fn, "parameters");
        alts[na++] = one_function(&c, fn, (int)i);
    }
    if (!b.failed && !alts) gb_error(&b, CLLM_ENOMEM, "out of memory");
    if (!b.failed && na == 0)
        gb_error(&b, CLLM_EINVAL, "tool_choice names function '%.80s', which is not in tools",
                 only_fn ? only_fn : "?");
    if (!b.failed) {
        int call = gb_rule(&b, "call");
        gb_rule_set(&b, call, gb_alt(&b, alts, na));
        if (min_calls < 1) min_calls = 1;
        int more = gb_rep(&b, gb_seq2(&b, gb_lits(&b, "\n"), gb_ref(&b, call)), min_calls - 1,
                          max_calls < 0 ? -1 : max_calls - 1);
        gb_rule_set(&b, root, gb_seq2(&b, gb_ref(&b, call), more));
    }
    free(alts);
    cllm_status st = gb_finish(&b, out);
    sc_free(&c);
    gb_free(&b);
    json_decref(tools);
    return st;
}
