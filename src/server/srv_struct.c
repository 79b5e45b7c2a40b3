/* Structured-output request fields -> a compiled grammar on the parsed request (grammar/).
 *
 * Accepted: OpenAI `response_format` {type: text | json_object | json_schema {name, schema,
 * strict, description}}; vLLM `structured_outputs` {json, regex, choice, grammar, json_object,
 * disable_any_whitespace, whitespace_pattern} and the older top-level `guided_json`,
 * `guided_regex`, `guided_choice`, `guided_grammar`, `guided_whitespace_pattern`,
 * `guided_decoding_backend` (cllm has one backend: the name is accepted, not used); chat
 * `tool_choice` "required" / {"type":"function","function":{"name"}} (forced Qwen3.5 XML tool
 * calls, one when `parallel_tool_calls` is false) and "none" (the answer may not contain the
 * text "<tool_call>", by a grammar, unless another constraint is given; calls are not parsed).
 * Compiled grammars are kept in a process-wide LRU by source (GM_CACHE_CAP). At most one constraint
 * per request; a schema, regex or grammar that does not compile is a 400 naming the field and, for
 * schemas, the keyword and its JSON pointer. With reasoning on, the constraint starts after
 * </think>. Called by openai.c on the MHD thread after the prompt is parsed. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "server/srv_int.h"

/* Compiled grammars by source, process-wide: a pipeline that sends the same schema over and over
 * compiles it once and its mask caches are filled once (by the engine's preparation thread). */
enum { GM_CACHE_CAP = 16 }; /* each keeps its mask caches: a few MB to tens of MB at 248k tokens */
static cllm_gm_cache *gm_cache;
static pthread_once_t gm_cache_once = PTHREAD_ONCE_INIT;
static void gm_cache_init(void) {
    gm_cache = cllm_gm_cache_new(GM_CACHE_CAP);
}

typedef cllm_status (*gm_compile_fn)(const char *src, size_t n, const cllm_gm_opts *o,
                                     cllm_gm **out, cllm_error *err);

/* key = kind, options, source; a hit returns the cached grammar (a new reference). */
static cllm_status cached(char kind, const char *src, size_t n, const cllm_gm_opts *o,
                          gm_compile_fn fn, cllm_gm **out, cllm_error *err) {
    pthread_once(&gm_cache_once, gm_cache_init);
    const char *ws = o && o->ws_pattern ? o->ws_pattern : "";
    size_t wl = strlen(ws), kl = 4 + wl + 1 + n;
    char *key = malloc(kl);
    if (key) {
        key[0] = kind;
        key[1] = o && o->any_whitespace ? '1' : '0';
        key[2] = o && o->raw_strings ? '1' : '0';
        key[3] = 0x1f;
        memcpy(key + 4, ws, wl);
        key[4 + wl] = 0x1f;
        if (n) memcpy(key + 5 + wl, src, n);
        if ((*out = cllm_gm_cache_get(gm_cache, key, kl))) {
            free(key);
            return CLLM_OK;
        }
    }
    cllm_status st = fn(src, n, o, out, err);
    if (st == CLLM_OK && key) cllm_gm_cache_put(gm_cache, key, kl, *out);
    free(key);
    return st;
}

static cllm_status json_object_fn(const char *src, size_t n, const cllm_gm_opts *o, cllm_gm **out,
                                  cllm_error *err) {
    (void)src, (void)n;
    return cllm_gm_json_object(o, out, err);
}

/* choices as one source: each choice's length (8 bytes) then its bytes */
static cllm_status choice_fn(const char *src, size_t n, const cllm_gm_opts *o, cllm_gm **out,
                             cllm_error *err) {
    int k = 0;
    for (size_t i = 0; i + 8 <= n; k++) {
        uint64_t l;
        memcpy(&l, src + i, 8);
        i += 8 + l;
    }
    const char **s = calloc((size_t)k + 1, sizeof(char *));
    size_t *l = calloc((size_t)k + 1, sizeof(size_t));
    if (!s || !l) {
        free(s), free(l);
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    size_t i = 0;
    for (int j = 0; j < k; j++) {
        uint64_t x;
        memcpy(&x, src + i, 8);
        s[j] = src + i + 8;
        l[j] = (size_t)x;
        i += 8 + x;
    }
    cllm_status st = cllm_gm_from_choice(s, l, k, o, out, err);
    free(s), free(l);
    return st;
}

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
    cllm_status st = cached('S', text, strlen(text), o, cllm_gm_from_json_schema, g, &ce);
    free(text);
    return compiled(st, &ce, param, e);
}

static bool choice_grammar(json_t *ch, const cllm_gm_opts *o, const char *param, cllm_gm **g,
                           srv_err *e) {
    size_t n = json_array_size(ch);
    if (!json_is_array(ch) || n == 0)
        return bad(e, param, "the choice must be a non-empty array of strings");
    if (n > CLLM_GM_MAX_CHOICES) {
        srv_err_set(e, 400, "invalid_request_error", param,
                    "%s: %zu choices, more than the limit of %d", param, n, CLLM_GM_MAX_CHOICES);
        return false;
    }
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(ch, i);
        if (!json_is_string(x))
            return bad(e, param, "the choice must be a non-empty array of strings");
        total += 8 + json_string_length(x);
    }
    char *src = malloc(total ? total : 1);
    if (!src) return bad(e, param, "out of memory");
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(ch, i);
        uint64_t l = json_string_length(x);
        memcpy(src + off, &l, 8);
        memcpy(src + off + 8, json_string_value(x), (size_t)l);
        off += 8 + (size_t)l;
    }
    cllm_error ce = {0};
    cllm_status st = cached('C', src, total, o, choice_fn, g, &ce);
    free(src);
    return compiled(st, &ce, param, e);
}

static bool text_grammar(json_t *v, bool regex, const cllm_gm_opts *o, const char *param,
                         cllm_gm **g, srv_err *e) {
    if (!json_is_string(v))
        return bad(e, param, regex ? "the regex must be a string" : "the grammar must be a string");
    cllm_error ce = {0};
    cllm_status st = cached(regex ? 'R' : 'G', json_string_value(v), json_string_length(v), o,
                            regex ? cllm_gm_from_regex : cllm_gm_from_gbnf, g, &ce);
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
            if (!compiled(cached('O', "", 0, &o, json_object_fn, out, &ce), &ce, "response_format",
                          e))
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
                if (n++ || !compiled(cached('O', "", 0, &o2, json_object_fn, out, &ce), &ce,
                                     "structured_outputs", e))
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

static bool tool_grammar(cllm_server *s, json_t *body, srv_gen *g, cllm_gm **out, bool *none,
                         srv_err *e) {
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
            /* calls are not parsed (openai.c), and the answer may not contain "<tool_call>"
             * however the tokens spell it (a grammar, not a bias on the one token) */
            cllm_error ce = {0};
            cllm_status st = cached('N', "<tool_call>", 11, NULL, cllm_gm_excluding, out, &ce);
            if (st != CLLM_OK) {
                srv_err_set(e, 500, "internal_error", "tool_choice", "tool_choice: %s", ce.msg);
                return false;
            }
            *none = true;
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
    pthread_once(&gm_cache_once, gm_cache_init);
    size_t tl = strlen(tj), ol = only ? strlen(only) : 0, kl = 3 + ol + 1 + tl;
    char *key = malloc(kl);
    cllm_status st = CLLM_OK;
    *out = NULL;
    if (key) {
        key[0] = 'T';
        key[1] = only ? '1' : '0';
        key[2] = max_calls == 1 ? '1' : '*';
        if (ol) memcpy(key + 3, only, ol);
        key[3 + ol] = 0x1f;
        memcpy(key + 4 + ol, tj, tl);
        *out = cllm_gm_cache_get(gm_cache, key, kl);
    }
    if (!*out) {
        st = cllm_gm_from_tools(tj, tl, only, 1, max_calls, NULL, out, &ce);
        if (st == CLLM_OK && key) cllm_gm_cache_put(gm_cache, key, kl, *out);
    }
    free(key);
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
        bool none = false;
        if (!tool_grammar(s, body, g, &tg, &none, e)) {
            cllm_gm_unref(gm);
            return false;
        }
        if (none && gm) { /* the explicit format decides; calls are still not parsed */
            cllm_gm_unref(tg);
            tg = NULL;
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
