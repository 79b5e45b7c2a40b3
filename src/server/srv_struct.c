/* Structured-output request fields -> a compiled grammar on the parsed request (grammar/).
 *
 * Accepted: OpenAI `response_format` {type: text | json_object | json_schema {name, schema,
 * strict, description}}; vLLM `structured_outputs` {json, regex, choice, grammar, json_object,
 * disable_any_whitespace, whitespace_pattern} and the older top-level `guided_json`,
 * `guided_regex`, `guided_choice`, `guided_grammar`, `guided_whitespace_pattern`,
 * `guided_decoding_backend` (cllm has one backend: the name is accepted, not used); chat
 * `tool_choice` "required" / {"type":"function","function":{"name"}} (forced Qwen3.5 XML tool
 * calls, one when `parallel_tool_calls` is false) and "none" (the <tool_call> token is biased
 * away and calls are not parsed). At most one constraint per request; a schema, regex or grammar
 * that does not compile is a 400 naming the field and, for schemas, the keyword and its JSON
 * pointer. With reasoning on, the constraint starts after </think>. Called by openai.c on the MHD
 * thread after the prompt is parsed. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "server/srv_int.h"

static bool bad(srv_err *e, const char *param, const char *msg) {
    srv_err_set(e, 400, "invalid_request_error", param, "%s", msg);
    return false;
}

static json_t *get(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    return json_is_null(v) ? NULL : v;
}

static bool compiled(cllm_status st, const cllm_error *ce, const char *param, srv_err *e) {
    if (st == CLLM_OK) return true;
    srv_err_set(e, 400, "invalid_request_error", param, "%s: %s", param, ce->msg);
    return false;
}

static bool schema_grammar(json_t *schema, const cllm_gm_opts *o, const char *param, cllm_gm **g,
                           srv_err *e) {
    char *text = NULL;
    if (json_is_string(schema)) /* vLLM takes the schema as JSON text too */
        text = strdup(json_string_value(schema));
    else if (json_is_object(schema) || json_is_boolean(schema))
        text = json_dumps(schema, JSON_COMPACT | JSON_PRESERVE_ORDER);
    else
        return bad(e, param, "the JSON schema must be an object (or its JSON text)");
    if (!text) return bad(e, param, "out of memory");
    cllm_error ce = {0};
    cllm_status st = cllm_gm_from_json_schema(text, strlen(text), o, g, &ce);
    free(text);
    return compiled(st, &ce, param, e);
}

static bool choice_grammar(json_t *ch, const cllm_gm_opts *o, const char *param, cllm_gm **g,
                           srv_err *e) {
    size_t n = json_array_size(ch);
    if (!json_is_array(ch) || n == 0 || n > 10000)
        return bad(e, param, "the choice must be a non-empty array of strings");
    const char **s = calloc(n, sizeof(char *));
    size_t *l = calloc(n, sizeof(size_t));
    if (!s || !l) {
        free(s), free(l);
        return bad(e, param, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(ch, i);
        if (!json_is_string(x)) {
            free(s), free(l);
            return bad(e, param, "the choice must be a non-empty array of strings");
        }
        s[i] = json_string_value(x);
        l[i] = json_string_length(x);
    }
    cllm_error ce = {0};
    cllm_status st = cllm_gm_from_choice(s, l, (int)n, o, g, &ce);
    free(s), free(l);
    return compiled(st, &ce, param, e);
}

static bool text_grammar(json_t *v, bool regex, const cllm_gm_opts *o, const char *param,
                         cllm_gm **g, srv_err *e) {
    if (!json_is_string(v))
        return bad(e, param, regex ? "the regex must be a string" : "the grammar must be a string");
    cllm_error ce = {0};
    cllm_status st =
        regex ? cllm_gm_from_regex(json_string_value(v), json_string_length(v), o, g, &ce)
              : cllm_gm_from_gbnf(json_string_value(v), json_string_length(v), o, g, &ce);
    return compiled(st, &ce, param, e);
}

/* One constraint from whichever field names it; *param gets the field for messages. */
static bool one_constraint(cllm_server *s, json_t *body, srv_gen *g, cllm_gm **out,
                           const char **which, srv_err *e) {
    cllm_gm_opts o = {0};
    int n = 0;
    json_t *wsp = get(body, "guided_whitespace_pattern");
    if (wsp && !json_is_string(wsp))
        return bad(e, "guided_whitespace_pattern", "'guided_whitespace_pattern' must be a string");
    if (wsp) o.ws_pattern = json_string_value(wsp);
    json_t *be = get(body, "guided_decoding_backend");
    if (be && !json_is_string(be))
        return bad(e, "guided_decoding_backend", "'guided_decoding_backend' must be a string");

    json_t *rf = get(body, "response_format");
    if (rf) {
        json_t *ty = json_object_get(rf, "type");
        if (!json_is_object(rf) || !json_is_string(ty))
            return bad(e, "response_format", "'response_format' must be an object with a 'type'");
        const char *t = json_string_value(ty);
        if (!strcmp(t, "json_object")) {
            cllm_error ce = {0};
            if (!compiled(cllm_gm_json_object(&o, out, &ce), &ce, "response_format", e))
                return false;
            n++, *which = "response_format";
        } else if (!strcmp(t, "json_schema")) {
            json_t *js = get(rf, "json_schema");
            if (!json_is_object(js))
                return bad(e, "response_format",
                           "response_format type 'json_schema' needs a 'json_schema' object");
            json_t *nm = get(js, "name"), *st = get(js, "strict");
            if (nm && !json_is_string(nm))
                return bad(e, "response_format",
                           "'response_format.json_schema.name' must be a string");
            if (st && !json_is_boolean(st))
                return bad(e, "response_format",
                           "'response_format.json_schema.strict' must be a boolean");
            json_t *sc = get(js, "schema");
            if (!sc)
                return bad(e, "response_format",
                           "'response_format.json_schema.schema' is required");
            if (!schema_grammar(sc, &o, "response_format", out, e)) return false;
            n++, *which = "response_format";
        } else if (strcmp(t, "text")) {
            srv_err_set(e, 400, "invalid_request_error", "response_format",
                        "response_format type '%.40s' is not supported (text, json_object, "
                        "json_schema)",
                        t);
            return false;
        }
    }
    json_t *so = get(body, "structured_outputs");
    if (so) {
        if (!json_is_object(so))
            return bad(e, "structured_outputs", "'structured_outputs' must be an object");
        const char *k;
        json_t *v;
        cllm_gm_opts o2 = o;
        json_object_foreach(so, k, v) {
            if (json_is_null(v)) continue;
            if (!strcmp(k, "disable_any_whitespace")) {
                if (!json_is_boolean(v))
                    return bad(e, "structured_outputs",
                               "'disable_any_whitespace' must be a boolean");
                o2.any_whitespace = !json_is_true(v);
            } else if (!strcmp(k, "whitespace_pattern")) {
                if (!json_is_string(v))
                    return bad(e, "structured_outputs", "'whitespace_pattern' must be a string");
                o2.ws_pattern = json_string_value(v);
            } else if (strcmp(k, "json") && strcmp(k, "regex") && strcmp(k, "choice") &&
                       strcmp(k, "grammar") && strcmp(k, "json_object")) {
                srv_err_set(e, 400, "invalid_request_error", "structured_outputs",
                            "structured_outputs.%.60s is not supported (json, regex, choice, "
                            "grammar, json_object, disable_any_whitespace, whitespace_pattern)",
                            k);
                return false;
            }
        }
        json_t *x;
        if ((x = get(so, "json"))) {
            if (n++ || !schema_grammar(x, &o2, "structured_outputs", out, e)) goto several;
        }
        if ((x = get(so, "regex"))) {
            if (n++ || !text_grammar(x, true, &o2, "structured_outputs", out, e)) goto several;
        }
        if ((x = get(so, "choice"))) {
            if (n++ || !choice_grammar(x, &o2, "structured_outputs", out, e)) goto several;
        }
        if ((x = get(so, "grammar"))) {
            if (n++ || !text_grammar(x, false, &o2, "structured_outputs", out, e)) goto several;
        }
        if ((x = get(so, "json_object"))) {
            if (!json_is_boolean(x))
                return bad(e, "structured_outputs", "'json_object' must be a boolean");
            if (json_is_true(x)) {
                cllm_error ce = {0};
                if (n++ ||
                    !compiled(cllm_gm_json_object(&o2, out, &ce), &ce, "structured_outputs", e))
                    goto several;
            }
        }
        *which = "structured_outputs";
    }
    static const char *const GUIDED[] = {"guided_json", "guided_regex", "guided_choice",
                                         "guided_grammar"};
    for (int i = 0; i < 4; i++) {
        json_t *x = get(body, GUIDED[i]);
        if (!x) continue;
        if (n++) goto several;
        bool ok = i == 0   ? schema_grammar(x, &o, GUIDED[i], out, e)
                  : i == 1 ? text_grammar(x, true, &o, GUIDED[i], out, e)
                  : i == 2 ? choice_grammar(x, &o, GUIDED[i], out, e)
                           : text_grammar(x, false, &o, GUIDED[i], out, e);
        if (!ok) return false;
        *which = GUIDED[i];
    }
    (void)s;
    (void)g;
    return true;
several:
    if (e->status) return false; /* a compile error was recorded first */
    cllm_gm_unref(*out);
    *out = NULL;
    return bad(e, *which ? *which : "structured_outputs",
               "only one structured-output constraint may be given per request");
}

static bool tool_grammar(cllm_server *s, json_t *body, srv_gen *g, cllm_gm **out, srv_err *e) {
    json_t *choice = get(body, "tool_choice");
    json_t *par = get(body, "parallel_tool_calls");
    if (par && !json_is_boolean(par))
        return bad(e, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    if (!choice) return true;
    const char *only = NULL;
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);
        if (!strcmp(c, "auto")) return true;
        if (!strcmp(c, "none")) {
            /* calls are not parsed (openai.c); also keep the model from starting one */
            int id = s->tok ? cllm_tok_token_id(s->tok, "<tool_call>", 11) : -1;
            if (id >= 0) {
                int *bi = realloc(g->bias_ids, ((size_t)g->n_bias + 1) * sizeof(int));
                if (bi) g->bias_ids = bi;
                float *bv = realloc(g->bias_vals, ((size_t)g->n_bias + 1) * sizeof(float));
                if (bv) g->bias_vals = bv;
                if (!bi || !bv) return bad(e, "tool_choice", "out of memory");
                g->bias_ids[g->n_bias] = id;
                g->bias_vals[g->n_bias] = -100.0f;
                g->n_bias++;
                g->s.logit_bias_ids = g->bias_ids;
                g->s.logit_bias_vals = g->bias_vals;
                g->s.n_logit_bias = g->n_bias;
            }
            return true;
        }
        if (strcmp(c, "required"))
            return bad(e, "tool_choice",
                       "'tool_choice' must be none, auto, required or a function");
    } else if (json_is_object(choice)) {
        json_t *fn = get(choice, "function");
        json_t *nm = get(fn, "name");
        if (!json_is_string(nm))
            return bad(e, "tool_choice", "'tool_choice.function.name' is required");
        only = json_string_value(nm);
    } else {
        return bad(e, "tool_choice", "'tool_choice' must be a string or an object");
    }
    if (!g->tools || !json_array_size(g->tools))
        return bad(e, "tool_choice", "'tool_choice' needs 'tools'");
    char *tj = json_dumps(g->tools, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!tj) return bad(e, "tool_choice", "out of memory");
    int max_calls = only || json_is_false(par) ? 1 : -1;
    cllm_error ce = {0};
    cllm_status st = cllm_gm_from_tools(tj, strlen(tj), only, 1, max_calls, NULL, out, &ce);
    free(tj);
    if (st != CLLM_OK) {
        srv_err_set(e, 400, "invalid_request_error", "tool_choice", "tool_choice: %s", ce.msg);
        return false;
    }
    g->parse_tools = true;
    return true;
}

bool srv_parse_structured(cllm_server *s, json_t *body, srv_gen *g, srv_err *e) {
    cllm_gm *gm = NULL;
    const char *which = NULL;
    memset(e, 0, sizeof(*e)); /* `several` tells a recorded compile error by e->status */
    if (!one_constraint(s, body, g, &gm, &which, e)) {
        cllm_gm_unref(gm);
        return false;
    }
    if (g->route == SRV_CHAT) {
        cllm_gm *tg = NULL;
        if (!tool_grammar(s, body, g, &tg, e)) {
            cllm_gm_unref(gm);
            return false;
        }
        if (tg && gm) {
            cllm_gm_unref(gm);
            cllm_gm_unref(tg);
            srv_err_set(e, 400, "invalid_request_error", "tool_choice",
                        "a forced tool_choice cannot be combined with %s", which);
            return false;
        }
        if (tg) gm = tg;
    }
    if (!gm) return true;
    if (!s->tok) {
        cllm_gm_unref(gm);
        return bad(e, which, "structured outputs need the model's tokenizer");
    }
    g->grammar = gm;
    g->s.grammar = gm;
    g->s.grammar_after = 0;
    if (g->route == SRV_CHAT && g->starts_in_reasoning) {
        int id = cllm_tok_token_id(s->tok, "</think>", 8);
        if (id > 0) g->s.grammar_after = id;
    }
    return true;
}
