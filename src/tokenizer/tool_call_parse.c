/* Parses the body of one <tool_call>...</tool_call> into {"name", "arguments"}: Qwen3.5 XML
 * (<function=NAME><parameter=P>\nVALUE\n</parameter></function>, typed by the tool schema) or
 * Qwen3 hermes JSON ({"name": ..., "arguments": {...}}). Used by output_parser.c. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/output_parser.h"

json_t *outp_parse_tool_call(const char *s, size_t len, json_t *tools);

static const char *skip_ws(const char *s, const char *e) {
    while (s < e && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) s++;
    return s;
}

static json_t *param_schema(json_t *tools, const char *fn, const char *param) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *f = json_object_get(t, "function");
        if (!f) f = t;
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || strcmp(name, fn)) continue;
        return json_object_get(json_object_get(json_object_get(f, "parameters"), "properties"),
                               param);
    }
    return NULL;
}

/* A parameter value typed by its schema: strings stay strings; numbers, booleans, objects and
 * arrays are read as JSON when they parse, else kept as the raw string. */
static json_t *typed_value(const char *v, size_t n, json_t *schema) {
    const char *type = json_string_value(json_object_get(schema, "type"));
    if (type && strcmp(type, "string")) {
        json_t *j = json_loadb(v, n, JSON_DECODE_ANY, NULL);
        if (j && !strcmp(type, "boolean") && !json_is_boolean(j)) json_decref(j), j = NULL;
        if (j && (!strcmp(type, "integer") || !strcmp(type, "number")) && !json_is_number(j))
            json_decref(j), j = NULL;
        if (j) return j;
        if (!strcmp(type, "boolean") && (n == 4 || n == 5)) {
            if (!strncmp(v, "True", 4)) return json_true();
            if (!strncmp(v, "False", 5)) return json_false();
        }
    }
    return json_stringn(v, n);
}

static json_t *parse_xml(const char *s, const char *e, json_t *tools) {
    static const char F[] = "<function=", P[] = "<parameter=", PE[] = "</parameter>",
                      FE[] = "</function>";
    if ((size_t)(e - s) < sizeof(F) - 1 || memcmp(s, F, sizeof(F) - 1)) return NULL;
    s += sizeof(F) - 1;
    const char *gt = memchr(s, '>', (size_t)(e - s));
    if (!gt || gt == s) return NULL;
    char *name = strndup(s, (size_t)(gt - s));
    json_t *args = json_object();
    s = gt + 1;
    for (;;) {
        s = skip_ws(s, e);
        if ((size_t)(e - s) >= sizeof(FE) - 1 && !memcmp(s, FE, sizeof(FE) - 1)) {
            s = skip_ws(s + sizeof(FE) - 1, e);
            break;
        }
        if ((size_t)(e - s) < sizeof(P) - 1 || memcmp(s, P, sizeof(P) - 1)) goto bad;
        s += sizeof(P) - 1;
        gt = memchr(s, '>', (size_t)(e - s));
        if (!gt || gt == s) goto bad;
        char *pname = strndup(s, (size_t)(gt - s));
        const char *v = gt + 1;
        const char *ve = memmem(v, (size_t)(e - v), PE, sizeof(PE) - 1);
        if (!ve) {
            free(pname);
            goto bad;
        }
        s = ve + sizeof(PE) - 1;
        if (v < ve && *v == '\n') v++;
        if (ve > v && ve[-1] == '\n') ve--;
        json_object_set_new(args, pname,
                            typed_value(v, (size_t)(ve - v), param_schema(tools, name, pname)));
        free(pname);
    }
    if (s != e) goto bad;
    char *a = json_dumps(args, JSON_ENCODE_ANY);
    json_t *call = json_pack("{s:s, s:s}", "name", name, "arguments", a ? a : "{}");
    free(a);
    free(name);
    json_decref(args);
    return call;
bad:
    free(name);
    json_decref(args);
    return NULL;
}

static json_t *parse_json(const char *s, const char *e) {
    json_t *j = json_loadb(s, (size_t)(e - s), 0, NULL);
    const char *name = json_string_value(json_object_get(j, "name"));
    json_t *args = json_object_get(j, "arguments");
    if (!args) args = json_object_get(j, "parameters");
    if (!name || (args && !json_is_object(args) && !json_is_string(args))) {
        json_decref(j);
        return NULL;
    }
    char *a = !args                  ? strdup("{}")
              : json_is_string(args) ? strdup(json_string_value(args))
                                     : json_dumps(args, 0);
    json_t *call = json_pack("{s:s, s:s}", "name", name, "arguments", a ? a : "{}");
    free(a);
    json_decref(j);
    return call;
}

json_t *outp_parse_tool_call(const char *s, size_t len, json_t *tools) {
    const char *e = s + len;
    s = skip_ws(s, e);
    while (e > s && (e[-1] == ' ' || e[-1] == '\n' || e[-1] == '\r' || e[-1] == '\t')) e--;
    if (s < e && *s == '{') return parse_json(s, e);
    return parse_xml(s, e, tools);
}
