/* JSON Schema -> grammar. Every keyword is either compiled, accepted as an annotation, or
 * refused naming the keyword and its JSON pointer (never silently dropped).
 *
 * What is compiled: type (incl. unions), enum, const, properties / required /
 * additionalProperties (absent = no extra properties, as OpenAI's strict mode and xgrammar do;
 * true or a schema = extra keys that differ from the named ones), items / prefixItems /
 * additionalItems (draft-4 tuples too), minItems / maxItems, minLength / maxLength, pattern,
 * format (gm_schema_num.c), minimum / maximum / exclusive* (integers and bounded decimals
 * exactly, gm_schema_num.c), anyOf / oneOf (as anyOf),
 * allOf by merging (a branch's additionalProperties applies to the other branches' keys), $ref to
 * local JSON pointers (recursion through rules), nullable, and boolean
 * schemas. Properties come out in schema order. Objects and arrays compile to dedicated rules. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_json_int.h"

enum { PTR_MAX = 300 };

static const char *const ANNOTATIONS[] = {
    "$schema",         "$id",         "id",        "title",
    "description",     "default",     "examples",  "$comment",
    "deprecated",      "readOnly",    "writeOnly", "contentMediaType",
    "contentEncoding", "definitions", "$defs",     "discriminator",
    "example",         "strict",      NULL};
static const char *const SUPPORTED[] = {"type",
                                        "properties",
                                        "required",
                                        "additionalProperties",
                                        "enum",
                                        "const",
                                        "items",
                                        "prefixItems",
                                        "additionalItems",
                                        "minItems",
                                        "maxItems",
                                        "minLength",
                                        "maxLength",
                                        "pattern",
                                        "format",
                                        "minimum",
                                        "maximum",
                                        "exclusiveMinimum",
                                        "exclusiveMaximum",
                                        "anyOf",
                                        "oneOf",
                                        "allOf",
                                        "$ref",
                                        "nullable",
                                        "uniqueItems",
                                        NULL};

static bool in_list(const char *const *l, const char *k) {
    for (; *l; l++)
        if (!strcmp(*l, k)) return true;
    return false;
}

/* ptr + "/" + key, with ~ and / escaped (RFC 6901). */
static void ptr_join(char *dst, const char *ptr, const char *key) {
    size_t n = (size_t)snprintf(dst, PTR_MAX, "%s/", ptr);
    for (const char *k = key; *k && n + 3 < PTR_MAX; k++) {
        if (*k == '~')
            dst[n++] = '~', dst[n++] = '0';
        else if (*k == '/')
            dst[n++] = '~', dst[n++] = '1';
        else
            dst[n++] = *k;
    }
    dst[n < PTR_MAX ? n : PTR_MAX - 1] = 0;
}

static void ptr_idx(char *dst, const char *ptr, const char *key, size_t i) {
    snprintf(dst, PTR_MAX, "%s/%s/%zu", ptr, key, i);
}

static bool unsupported(gm_sc *c, const char *kw, const char *ptr, const char *why) {
    return gb_error(c->b, CLLM_EUNSUPPORTED, "unsupported JSON Schema keyword '%s' at %s%s%s", kw,
                    ptr, why ? ": " : "", why ? why : "");
}

static bool invalid(gm_sc *c, const char *kw, const char *ptr, const char *why) {
    return gb_error(c->b, CLLM_EINVAL, "invalid schema: '%s' at %s %s", kw, ptr, why);
}

/* ---- $ref ---- */

static json_t *resolve_ptr(gm_sc *c, const char *ref) {
    if (ref[0] != '#') return NULL;
    json_t *cur = c->root;
    const char *p = ref + 1;
    if (!*p) return cur;
    if (*p != '/') return NULL;
    while (*p == '/' && cur) {
        p++;
        char key[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof(key)) {
            if (p[0] == '~' && p[1] == '0')
                key[n++] = '~', p += 2;
            else if (p[0] == '~' && p[1] == '1')
                key[n++] = '/', p += 2;
            else if (p[0] == '%' && p[1] && p[2]) { /* percent-encoded (URI fragment) */
                char h[3] = {p[1], p[2], 0};
                key[n++] = (char)strtol(h, NULL, 16);
                p += 3;
            } else
                key[n++] = *p++;
        }
        key[n] = 0;
        if (json_is_object(cur))
            cur = json_object_get(cur, key);
        else if (json_is_array(cur)) {
            char *end;
            long i = strtol(key, &end, 10);
            cur = *end || i < 0 ? NULL : json_array_get(cur, (size_t)i);
        } else
            cur = NULL;
    }
    return *p ? NULL : cur;
}

/* The error for a $ref that resolve_ptr could not follow: a remote reference is unsupported, a
 * local pointer to nothing is an invalid schema (naming the pointer, not the feature). */
static bool ref_missing(gm_sc *c, json_t *ref, const char *ptr) {
    const char *r = json_string_value(ref);
    if (!r) return invalid(c, "$ref", ptr, "must be a string");
    if (r[0] != '#')
        return unsupported(c, "$ref", ptr, "only local JSON pointers (#/...) are supported");
    return gb_error(c->b, CLLM_EINVAL,
                    "invalid schema: '$ref' at %s: '%.120s' does not exist in the schema", ptr, r);
}

/* ---- allOf merging ---- */

static json_t *merge(gm_sc *c, json_t *a, json_t *b, const char *ptr, int depth);
static bool merge_members(gm_sc *c, json_t *a, json_t *b, json_t *out, const char *ptr);

static json_t *type_set(json_t *t) {
    json_t *a = json_array();
    if (json_is_string(t))
        json_array_append(a, t);
    else if (json_is_array(t)) {
        size_t i;
        json_t *x;
        json_array_foreach(t, i, x) json_array_append(a, x);
    }
    return a;
}

static bool type_has(json_t *set, const char *t) {
    size_t i;
    json_t *x;
    json_array_foreach(set, i, x) {
        const char *s = json_string_value(x);
        if (s && (!strcmp(s, t) || (!strcmp(t, "integer") && !strcmp(s, "number")))) return true;
    }
    return false;
}

/* Flattens {"$ref"} and {"allOf"} at the top of s into one object (a new reference). */
static json_t *flatten(gm_sc *c, json_t *s, const char *ptr, int depth) {
    if (depth > c->b->o.max_schema_depth) {
        gb_error(c->b, CLLM_ERANGE, "schema nested deeper than %d at %s", c->b->o.max_schema_depth,
                 ptr);
        return NULL;
    }
    if (json_is_true(s)) return json_object();
    if (json_is_false(s)) return json_pack("{s:b}", "not", 1); /* marker: unsatisfiable */
    if (!json_is_object(s)) {
        invalid(c, "(schema)", ptr, "is not an object or boolean");
        return NULL;
    }
    json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
    if (!ref && !all) return json_incref(s);
    json_t *base = json_deep_copy(s);
    json_object_del(base, "$ref");
    json_object_del(base, "allOf");
    json_t *acc = base;
    if (ref) {
        json_t *t = json_is_string(ref) ? resolve_ptr(c, json_string_value(ref)) : NULL;
        if (!t) {
            json_decref(acc);
            ref_missing(c, ref, ptr);
            return NULL;
        }
        json_t *ft = flatten(c, t, ptr, depth + 1);
        json_t *m = ft ? merge(c, acc, ft, ptr, depth + 1) : NULL;
        json_decref(ft);
        json_decref(acc);
        acc = m;
    }
    if (all && acc) {
        if (!c->b->empty_hint[0])
            snprintf(c->b->empty_hint, sizeof(c->b->empty_hint),
                     "(allOf at %.80s: its subschemas may have no instance in common)", ptr);
        if (!json_is_array(all) || !json_array_size(all)) {
            json_decref(acc);
            invalid(c, "allOf", ptr, "must be a non-empty array");
            return NULL;
        }
        size_t i;
        json_t *x;
        json_array_foreach(all, i, x) {
            char p2[PTR_MAX];
            ptr_idx(p2, ptr, "allOf", i);
            json_t *fx = flatten(c, x, p2, depth + 1);
            json_t *m = fx ? merge(c, acc, fx, p2, depth + 1) : NULL;
            json_decref(fx);
            json_decref(acc);
            acc = m;
            if (!acc) break;
        }
    }
    return acc;
}

static json_t *merge(gm_sc *c, json_t *a, json_t *b, const char *ptr, int depth) {
    json_t *fb = flatten(c, b, ptr, depth);
    if (!fb) return NULL;
    json_t *out = json_deep_copy(a);
    const char *k;
    json_t *vb;
    json_object_foreach(fb, k, vb) {
        json_t *va = json_object_get(out, k);
        if (!va) {
            json_object_set(out, k, vb);
            continue;
        }
        if (json_equal(va, vb) || in_list(ANNOTATIONS, k)) continue;
        if (!strcmp(k, "properties") || !strcmp(k, "additionalProperties")) continue; /* below */
        if (!strcmp(k, "type")) {
            json_t *sa = type_set(va), *sb = type_set(vb), *r = json_array();
            size_t i;
            json_t *x;
            json_array_foreach(sa, i, x) {
                const char *t = json_string_value(x);
                if (t && type_has(sb, t))
                    json_array_append(r, x);
                else if (t && !strcmp(t, "number") && type_has(sb, "integer"))
                    json_array_append_new(r, json_string("integer"));
            }
            json_decref(sa), json_decref(sb);
            json_object_set_new(out, k, r);
        } else if (!strcmp(k, "required") && json_is_array(va) && json_is_array(vb)) {
            json_t *r = json_deep_copy(va);
            size_t i, j;
            json_t *x, *y;
            json_array_foreach(vb, i, x) {
                bool dup = false;
                json_array_foreach(va, j, y) dup |= json_equal(x, y);
                if (!dup) json_array_append(r, x);
            }
            json_object_set_new(out, k, r);
        } else if ((!strcmp(k, "minimum") || !strcmp(k, "minLength") || !strcmp(k, "minItems")) &&
                   json_is_number(va) && json_is_number(vb)) {
            if (json_number_value(vb) > json_number_value(va)) json_object_set(out, k, vb);
        } else if ((!strcmp(k, "maximum") || !strcmp(k, "maxLength") || !strcmp(k, "maxItems")) &&
                   json_is_number(va) && json_is_number(vb)) {
            if (json_number_value(vb) < json_number_value(va)) json_object_set(out, k, vb);
        } else if (!strcmp(k, "enum") && json_is_array(va) && json_is_array(vb)) {
            json_t *r = json_array();
            size_t i, j;
            json_t *x, *y;
            json_array_foreach(va, i, x) {
                bool in = false;
                json_array_foreach(vb, j, y) in |= json_equal(x, y);
                if (in) json_array_append(r, x);
            }
            json_object_set_new(out, k, r);
        } else if (!strcmp(k, "items") && json_is_object(va) && json_is_object(vb)) {
            json_object_set_new(out, k, json_pack("{s:[O,O]}", "allOf", va, vb));
        } else if (!strcmp(k, "nullable")) {
            json_object_set_new(out, k, json_boolean(json_is_true(va) && json_is_true(vb)));
        } else if (!strcmp(k, "anyOf") || !strcmp(k, "oneOf")) {
            /* distribute: a's alternatives each merged with b's later, at compile time */
            json_t *both = json_pack("[{s:O},{s:O}]", k, va, k, vb);
            json_t *prev = json_object_get(out, "allOf");
            if (prev) {
                json_decref(both);
                json_decref(out);
                json_decref(fb);
                unsupported(c, "allOf", ptr, "cannot merge several anyOf/oneOf");
                return NULL;
            }
            json_object_del(out, k);
            json_object_set_new(out, "anyOf", json_pack("[{s:o}]", "allOf", both));
        } else {
            json_decref(out);
            json_decref(fb);
            unsupported(c, "allOf", ptr, "cannot merge the subschemas' values of this keyword");
            if (c->b->err) {
                size_t n = strlen(c->b->err->msg);
                snprintf(c->b->err->msg + n, sizeof(c->b->err->msg) - n, " ('%s')", k);
            }
            return NULL;
        }
    }
    if (!merge_members(c, a, fb, out, ptr)) {
        json_decref(out);
        out = NULL;
    }
    json_decref(fb);
    return out;
}

/* Both schemas, or false when either is false (allOf of two property schemas). */
static json_t *both(json_t *x, json_t *y) {
    if (!x) return json_incref(y);
    if (!y || json_equal(x, y)) return json_incref(x);
    if (json_is_false(x) || json_is_false(y)) return json_false();
    if (json_is_true(x)) return json_incref(y);
    if (json_is_true(y)) return json_incref(x);
    return json_pack("{s:[O,O]}", "allOf", x, y);
}

/* properties and additionalProperties of allOf branches a and b into out, with JSON Schema's
 * meaning: a branch's additionalProperties (when it states one) applies to every key outside
 * its own properties, the other branch's keys too, so {"properties": {"a"}, "additionalProperties":
 * false} in one branch forbids the other branch's "b" (a required "b" then makes the object
 * impossible). A branch without the keyword constrains nothing; the merged object then has the
 * stated ones' intersection, or none (this compiler's default: no keys beyond the properties). */
static bool merge_members(gm_sc *c, json_t *a, json_t *b, json_t *out, const char *ptr) {
    json_t *ap = json_object_get(a, "properties"), *bp = json_object_get(b, "properties");
    json_t *aa = json_object_get(a, "additionalProperties");
    json_t *ba = json_object_get(b, "additionalProperties");
    if ((ap && !json_is_object(ap)) || (bp && !json_is_object(bp)))
        return invalid(c, "properties", ptr, "must be an object");
    if (!ap && !bp && !aa && !ba) return true;
    json_t *m = json_object();
    for (int side = 0; side < 2; side++) {
        json_t *mine = side ? bp : ap;
        const char *k;
        json_t *v;
        json_object_foreach(mine, k, v) {
            if (json_object_get(m, k)) continue;
            json_t *x = json_object_get(ap, k), *y = json_object_get(bp, k);
            if (!x) x = aa; /* NULL: branch a says nothing of k */
            if (!y) y = ba;
            json_object_set_new(m, k, both(x, y));
        }
    }
    if (json_object_size(m))
        json_object_set_new(out, "properties", m);
    else
        json_decref(m), json_object_del(out, "properties");
    if (aa || ba) json_object_set_new(out, "additionalProperties", both(aa, ba));
    if (json_is_false(aa) || json_is_false(ba))
        snprintf(c->b->empty_hint, sizeof(c->b->empty_hint),
                 "(allOf at %s: a branch's additionalProperties false forbids the keys the other "
                 "branches name, which may leave no instance)",
                 ptr);
    return true;
}

/* ---- objects ---- */

typedef struct key_trie {
    int child[128];
    bool end;
} key_trie;

/* A JSON string (with quotes) made of printable ASCII without escapes that is none of the keys:
 * one rule per trie node. */
static int not_in_keys(gm_sc *c, key_trie *t, int node, int depth) {
    gm_builder *b = c->b;
    key_trie *n = &t[node];
    gm_cpset other = {0};
    cps_add(&other, 0x20, 0x7E);
    cps_sub(&other, '"', '"');
    cps_sub(&other, '\\', '\\');
    int alts[130], na = 0;
    if (!n->end) alts[na++] = gb_lits(b, "\"");
    for (int ch = 0; ch < 128; ch++) {
        if (!n->child[ch]) continue;
        cps_sub(&other, (uint32_t)ch, (uint32_t)ch);
        char s[2] = {(char)ch, 0};
        alts[na++] = gb_seq2(b, gb_lits(b, s), not_in_keys(c, t, n->child[ch], depth + 1));
    }
    if (other.n) {
        gm_cpset ok = {0};
        cps_add(&ok, 0x20, 0x7E);
        cps_sub(&ok, '"', '"');
        cps_sub(&ok, '\\', '\\');
        alts[na++] = gb_seq3(b, gb_cps(b, other.r, other.n),
                             gb_rep(b, gb_cps(b, ok.r, ok.n), 0, -1), gb_lits(b, "\""));
        cps_free(&ok);
    }
    cps_free(&other);
    return gb_alt(b, alts, na);
}

static int extra_key(gm_sc *c, json_t *props, json_t *required) {
    gm_builder *b = c->b;
    size_t cap = 1 + 64;
    const char *k;
    json_t *v;
    json_object_foreach(props, k, v) cap += strlen(k) + 1;
    size_t i;
    json_array_foreach(required, i, v) cap += json_string_length(v) + 1;
    key_trie *t = calloc(cap, sizeof(key_trie));
    if (!t) return gb_error(b, CLLM_ENOMEM, "out of memory"), -1;
    int n = 1;
    for (int pass = 0; pass < 2; pass++) {
        void *it = pass ? NULL : json_object_iter(props);
        size_t ri = 0;
        for (;;) {
            const char *key;
            if (!pass) {
                if (!it) break;
                key = json_object_iter_key(it);
                it = json_object_iter_next(props, it);
            } else {
                if (ri >= json_array_size(required)) break;
                key = json_string_value(json_array_get(required, ri++));
                if (!key) continue;
            }
            int node = 0;
            bool ascii = true;
            for (const char *p = key; *p; p++) ascii &= (unsigned char)*p < 128;
            if (!ascii) continue; /* extras are ASCII-only, so never equal to these */
            for (const char *p = key; *p; p++) {
                int ch = (unsigned char)*p;
                if (!t[node].child[ch]) t[node].child[ch] = n++;
                node = t[node].child[ch];
            }
            t[node].end = true;
        }
    }
    int x = gb_seq2(b, gb_lits(b, "\""), not_in_keys(c, t, 0, 0));
    free(t);
    return x;
}

typedef struct member {
    const char *key;
    json_t *schema;
    bool required;
    char ptr[PTR_MAX];
} member;

static int many_members(gm_sc *c, const member *m, int n, bool extras, int extra_kv, int depth) {
    gm_builder *b = c->b;
    char **keys = calloc((size_t)n, sizeof(char *));
    size_t *klen = malloc((size_t)n * sizeof(size_t));
    bool *req = malloc((size_t)n * sizeof(bool));
    int *val = malloc((size_t)n * sizeof(int));
    int x = -1;
    if (!keys || !klen || !req || !val) {
        gb_error(b, CLLM_ENOMEM, "out of memory");
        goto out;
    }
    for (int j = 0; j < n && !b->failed; j++) {
        json_t *ks = json_string(m[j].key);
        keys[j] = ks ? json_dumps(ks, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        json_decref(ks);
        if (!keys[j]) {
            gb_error(b, CLLM_ENOMEM, "out of memory");
            goto out;
        }
        klen[j] = strlen(keys[j]);
        req[j] = m[j].required;
        val[j] = m[j].schema ? sc_schema(c, m[j].schema, m[j].ptr, depth + 1, false) : sc_any(c);
    }
    int tail[2];
    for (int s2 = 0; s2 < 2; s2++) {
        if (extras) {
            int more = gb_rep(b, gb_seq2(b, sc_sep(c, ','), extra_kv), 0, -1);
            tail[s2] = s2 ? more : gb_opt(b, gb_seq2(b, extra_kv, more));
        } else {
            tail[s2] = gb_empty(b);
        }
    }
    if (!b->failed)
        x = sc_object_members(c, n, (const char *const *)keys, klen, req, val, tail[0], tail[1],
                              true);
out:
    for (int j = 0; keys && j < n; j++) free(keys[j]);
    free(keys), free(klen), free(req), free(val);
    return x;
}

static int compile_object(gm_sc *c, json_t *s, const char *ptr, int depth) {
    gm_builder *b = c->b;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return invalid(c, "properties", ptr, "must be an object"), -1;
    if (req && !json_is_array(req))
        return unsupported(c, "required", ptr, "must be an array of names"), -1;
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return invalid(c, "additionalProperties", ptr, "must be a boolean or a schema"), -1;
    size_t nmax = json_object_size(props) + json_array_size(req);
    member *m = calloc(nmax + 1, sizeof(member));
    if (!m) return gb_error(b, CLLM_ENOMEM, "out of memory"), -1;
    int n = 0;
    const char *k;
    json_t *v;
    json_object_foreach(props, k, v) {
        bool r = false;
        size_t i;
        json_t *x;
        json_array_foreach(req, i, x) r |= json_is_string(x) && !strcmp(json_string_value(x), k);
        if (json_is_false(v)) {
            if (r) {
                free(m);
                return gb_fail(b);
            }
            continue;
        }
        m[n].key = k;
        m[n].schema = v;
        m[n].required = r;
        char pp[PTR_MAX];
        ptr_join(pp, ptr, "properties");
        ptr_join(m[n].ptr, pp, k);
        n++;
    }
    size_t i;
    json_array_foreach(req, i, v) {
        if (!json_is_string(v)) {
            free(m);
            return invalid(c, "required", ptr, "must list strings"), -1;
        }
        if (props && json_object_get(props, json_string_value(v))) continue;
        bool dup = false;
        for (int j = 0; j < n; j++) dup |= !strcmp(m[j].key, json_string_value(v));
        if (dup) continue;
        if (json_is_false(addl)) {
            free(m);
            return gb_fail(b);
        }
        m[n].key = json_string_value(v);
        m[n].schema = json_is_object(addl) ? addl : NULL;
        m[n].required = true;
        snprintf(m[n].ptr, PTR_MAX, "%s/additionalProperties", ptr);
        n++;
    }
    bool extras = json_is_true(addl) || json_is_object(addl);
    int extra_kv = -1;
    if (extras) {
        char pp[PTR_MAX];
        snprintf(pp, PTR_MAX, "%s/additionalProperties", ptr);
        int val = json_is_object(addl) ? sc_schema(c, addl, pp, depth + 1, false) : sc_any(c);
        extra_kv = gb_seq3(b, extra_key(c, props, req), sc_sep(c, ':'), val);
    }
    /* many members: gm_schema_keys.c's form (the chain below keeps one stack per optional
     * member at a key's start, which gets slow and then past the matcher's cap) */
    if (n >= SC_MANY_MEMBERS) {
        int body = many_members(c, m, n, extras, extra_kv, depth);
        free(m);
        return gb_seq(b, (int[]){gb_lits(b, "{"), sc_ws(c), body, sc_ws(c), gb_lits(b, "}")}, 5);
    }
    /* rules A[i][s]: members i.. given s (something was already written) */
    int *A = malloc((size_t)(n + 1) * 2 * sizeof(int));
    if (!A) {
        free(m);
        return gb_error(b, CLLM_ENOMEM, "out of memory"), -1;
    }
    for (int j = 0; j <= n; j++) A[2 * j] = gb_rule(b, NULL), A[2 * j + 1] = gb_rule(b, NULL);
    for (int s2 = 0; s2 < 2; s2++) {
        int tail;
        if (extras) {
            int more = gb_rep(b, gb_seq2(b, sc_sep(c, ','), extra_kv), 0, -1);
            tail = s2 ? more : gb_opt(b, gb_seq2(b, extra_kv, more));
        } else {
            tail = gb_empty(b);
        }
        gb_rule_set(b, A[2 * n + s2], tail);
    }
    for (int j = n - 1; j >= 0; j--) {
        int val = m[j].schema ? sc_schema(c, m[j].schema, m[j].ptr, depth + 1, false) : sc_any(c);
        json_t *ks = json_string(m[j].key);
        int key = sc_literal(c, ks, false);
        json_decref(ks);
        int kv = gb_seq3(b, key, sc_sep(c, ':'), val);
        for (int s2 = 0; s2 < 2; s2++) {
            int with =
                gb_seq3(b, s2 ? sc_sep(c, ',') : gb_empty(b), kv, gb_ref(b, A[2 * (j + 1) + 1]));
            int x = m[j].required ? with : gb_alt2(b, with, gb_ref(b, A[2 * (j + 1) + s2]));
            gb_rule_set(b, A[2 * j + s2], x);
        }
    }
    int body = gb_ref(b, A[0]);
    free(A);
    free(m);
    return gb_seq(b, (int[]){gb_lits(b, "{"), sc_ws(c), body, sc_ws(c), gb_lits(b, "}")}, 5);
}

/* ---- arrays ---- */

static bool get_count(gm_sc *c, json_t *s, const char *kw, const char *ptr, long long *out) {
    json_t *v = json_object_get(s, kw);
    if (!v) return true;
    double d = json_number_value(v);
    if (!json_is_number(v) || d < 0 || d != floor(d))
        return invalid(c, kw, ptr, "must be a non-negative integer");
    *out = d > 1e9 ? 1000000000LL : (long long)d;
    return true;
}

static int compile_array(gm_sc *c, json_t *s, const char *ptr, int depth) {
    gm_builder *b = c->b;
    long long mn = 0, mx = -1;
    if (!get_count(c, s, "minItems", ptr, &mn) || !get_count(c, s, "maxItems", ptr, &mx)) return -1;
    json_t *uniq = json_object_get(s, "uniqueItems");
    if (json_is_true(uniq)) return unsupported(c, "uniqueItems", ptr, NULL), -1;
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *addi = json_object_get(s, "additionalItems");
    json_t *tuple = NULL, *rest = NULL; /* rest NULL: any; json false: none */
    const char *rest_kw = "items";
    if (prefix) {
        if (!json_is_array(prefix)) return invalid(c, "prefixItems", ptr, "must be an array"), -1;
        tuple = prefix;
        rest = items;
    } else if (json_is_array(items)) {
        tuple = items;
        rest = addi;
        rest_kw = "additionalItems";
    } else {
        rest = items;
    }
    int k = (int)json_array_size(tuple);
    if (mx >= 0 && mx < mn) return gb_fail(b);
    bool rest_none = json_is_false(rest);
    if (rest_none && mn > k) return gb_fail(b);
    if (mn > 10000 || (mx > 10000))
        return gb_error(b, CLLM_ERANGE, "minItems/maxItems over 10000 at %s", ptr), -1;
    int rest_x = -1;
    if (!rest_none) {
        char pp[PTR_MAX];
        snprintf(pp, PTR_MAX, "%s/%s", ptr, rest_kw);
        int r = gb_rule(b, NULL);
        gb_rule_set(b, r, rest ? sc_schema(c, rest, pp, depth + 1, false) : sc_any(c));
        rest_x = r;
    }
    /* tail after the tuple: (sep R){rmin, rmax} */
    int tail;
    long long rmin = mn > k ? mn - k : 0, rmax = mx < 0 ? -1 : (mx > k ? mx - k : 0);
    if (rest_none || rmax == 0) {
        tail = gb_empty(b);
    } else if (k > 0) {
        tail = gb_rep(b, gb_seq2(b, sc_sep(c, ','), gb_ref(b, rest_x)), (int)rmin, (int)rmax);
    } else {
        /* no tuple: R (sep R){rmin-1, rmax-1}, optional when rmin == 0 */
        int more = gb_rep(b, gb_seq2(b, sc_sep(c, ','), gb_ref(b, rest_x)),
                          rmin > 0 ? (int)rmin - 1 : 0, rmax < 0 ? -1 : (int)rmax - 1);
        tail = gb_seq2(b, gb_ref(b, rest_x), more);
        if (rmin == 0) tail = gb_opt(b, tail);
    }
    int kk = mx >= 0 && mx < k ? (int)mx : k;
    for (int i = kk - 1; i >= 0; i--) {
        char pp[PTR_MAX];
        ptr_idx(pp, ptr, prefix ? "prefixItems" : "items", (size_t)i);
        int el = sc_schema(c, json_array_get(tuple, (size_t)i), pp, depth + 1, false);
        int part = gb_seq3(b, i ? sc_sep(c, ',') : gb_empty(b), el, tail);
        tail = i >= mn ? gb_opt(b, part) : part;
    }
    return gb_seq(b, (int[]){gb_lits(b, "["), sc_ws(c), tail, sc_ws(c), gb_lits(b, "]")}, 5);
}

/* ---- strings and numbers ---- */

static int compile_string(gm_sc *c, json_t *s, const char *ptr, bool raw) {
    gm_builder *b = c->b;
    long long mn = 0, mx = -1;
    if (!get_count(c, s, "minLength", ptr, &mn) || !get_count(c, s, "maxLength", ptr, &mx))
        return -1;
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    bool lens = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if (mx >= 0 && mx < mn) return gb_fail(b);
    /* String characters are expanded inline (not a rule call like array items), so the
     * compile time grows with the square of the bound: 1000 compiles in ~20 ms, 10000 took
     * 4.9 s (and minutes under load) on the request thread, found by fuzz_http_body. */
    if (mn > 1000 || mx > 1000)
        return gb_error(b, CLLM_ERANGE, "minLength/maxLength over 1000 at %s", ptr), -1;
    int body;
    if (pat) {
        if (!json_is_string(pat)) return invalid(c, "pattern", ptr, "must be a string"), -1;
        if (lens || fmt)
            return unsupported(c, "pattern", ptr, "together with minLength/maxLength/format"), -1;
        body = gm_regex_expr(b, json_string_value(pat), json_string_length(pat),
                             raw ? GRX_RAW_STR : GRX_JSON_STR, true);
        if (body < 0 && b->err && b->err->code == CLLM_EINVAL) {
            size_t n = strlen(b->err->msg);
            snprintf(b->err->msg + n, sizeof(b->err->msg) - n, " (pattern at %s)", ptr);
        }
    } else if (fmt) {
        if (!json_is_string(fmt)) return invalid(c, "format", ptr, "must be a string"), -1;
        if (lens) return unsupported(c, "format", ptr, "together with minLength/maxLength"), -1;
        body = sc_format(c, json_string_value(fmt), ptr);
    } else {
        body = gb_rep(b, sc_str_char(c, raw), (int)mn, (int)mx);
    }
    if (raw) return body;
    return gb_seq3(b, gb_lits(b, "\""), body, gb_lits(b, "\""));
}

static bool num_kw(gm_sc *c, json_t *s, const char *kw, const char *ptr, bool *has, double *v) {
    json_t *x = json_object_get(s, kw);
    if (!x || json_is_boolean(x)) return true;
    if (!json_is_number(x)) return invalid(c, kw, ptr, "must be a number");
    *has = true;
    *v = json_number_value(x);
    return true;
}

static int compile_number(gm_sc *c, json_t *s, const char *ptr, bool integer) {
    gm_builder *b = c->b;
    if (json_object_get(s, "multipleOf")) return unsupported(c, "multipleOf", ptr, NULL), -1;
    bool hl = false, hh = false, hxl = false, hxh = false;
    double lo = 0, hi = 0, xl = 0, xh = 0;
    if (!num_kw(c, s, "minimum", ptr, &hl, &lo) || !num_kw(c, s, "maximum", ptr, &hh, &hi) ||
        !num_kw(c, s, "exclusiveMinimum", ptr, &hxl, &xl) ||
        !num_kw(c, s, "exclusiveMaximum", ptr, &hxh, &xh))
        return -1;
    /* draft-4 boolean exclusives modify minimum/maximum */
    bool bxl = json_is_true(json_object_get(s, "exclusiveMinimum"));
    bool bxh = json_is_true(json_object_get(s, "exclusiveMaximum"));
    if (!hl && !hh && !hxl && !hxh) return integer ? sc_integer_generic(c) : sc_number_generic(c);
    /* the smallest / largest integer strictly allowed */
    long long ilo = 0, ihi = 0;
    bool has_lo = false, has_hi = false;
    double L = -INFINITY, H = INFINITY;
    bool Lx = false, Hx = false;
    if (hl) L = lo, Lx = bxl;
    if (hxl && (xl > L || (xl == L && !Lx))) L = xl, Lx = true;
    if (hh) H = hi, Hx = bxh;
    if (hxh && (xh < H || (xh == H && !Hx))) H = xh, Hx = true;
    if (fabs(L) > 9e15 && L != -INFINITY)
        return gb_error(b, CLLM_ERANGE, "minimum too large at %s", ptr), -1;
    if (fabs(H) > 9e15 && H != INFINITY)
        return gb_error(b, CLLM_ERANGE, "maximum too large at %s", ptr), -1;
    if (L != -INFINITY) {
        double f = ceil(L);
        if (Lx && f == L) f += 1;
        ilo = (long long)f, has_lo = true;
    }
    if (H != INFINITY) {
        double f = floor(H);
        if (Hx && f == H) f -= 1;
        ihi = (long long)f, has_hi = true;
    }
    if (integer) return sc_int_range(b, has_lo, ilo, has_hi, ihi);
    return sc_decimal_range(b, L != -INFINITY, L, Lx, H != INFINITY, H, Hx, ptr);
}

/* ---- schemas ---- */

static const char *const OBJ_KW[] = {"properties", "required", "additionalProperties", NULL};
static const char *const ARR_KW[] = {
    "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems", NULL};
static const char *const STR_KW[] = {"minLength", "maxLength", "pattern", "format", NULL};
static const char *const NUM_KW[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                     NULL};

static bool has_any(json_t *s, const char *const *kws) {
    for (; *kws; kws++)
        if (json_object_get(s, *kws)) return true;
    return false;
}

static int compile_type(gm_sc *c, json_t *s, const char *t, const char *ptr, int depth, bool raw) {
    gm_builder *b = c->b;
    if (!strcmp(t, "object")) {
        int r = gb_rule(b, NULL);
        gb_rule_set(b, r, compile_object(c, s, ptr, depth));
        return gb_ref(b, r);
    }
    if (!strcmp(t, "array")) {
        int r = gb_rule(b, NULL);
        gb_rule_set(b, r, compile_array(c, s, ptr, depth));
        return gb_ref(b, r);
    }
    if (!strcmp(t, "string")) return compile_string(c, s, ptr, raw);
    if (!strcmp(t, "number")) return compile_number(c, s, ptr, false);
    if (!strcmp(t, "integer")) return compile_number(c, s, ptr, true);
    if (!strcmp(t, "boolean")) return gb_alt2(b, gb_lits(b, "true"), gb_lits(b, "false"));
    if (!strcmp(t, "null")) return gb_lits(b, "null");
    return invalid(c, "type", ptr, "names an unknown type"), -1;
}

static bool value_has_type(json_t *v, json_t *types) {
    if (!types) return true;
    const char *t = json_is_object(v)    ? "object"
                    : json_is_array(v)   ? "array"
                    : json_is_string(v)  ? "string"
                    : json_is_integer(v) ? "integer"
                    : json_is_real(v)    ? "number"
                    : json_is_boolean(v) ? "boolean"
                                         : "null";
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
        type_has(types, "integer"))
        return true;
    return type_has(types, t);
}

static int compile_enum(gm_sc *c, json_t *s, const char *ptr, bool raw) {
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    json_t *types = json_object_get(s, "type") ? type_set(json_object_get(s, "type")) : NULL;
    if (types && json_is_true(json_object_get(s, "nullable")))
        json_array_append_new(types, json_string("null"));
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (in_list(ANNOTATIONS, k) || !strcmp(k, "enum") || !strcmp(k, "const") ||
            !strcmp(k, "type") || !strcmp(k, "nullable") || !strncmp(k, "x-", 2))
            continue;
        json_decref(types);
        return unsupported(c, k, ptr, "together with enum/const"), -1;
    }
    if (en && !json_is_array(en)) {
        json_decref(types);
        return invalid(c, "enum", ptr, "must be an array"), -1;
    }
    json_t *vals = json_array();
    if (cn) json_array_append(vals, cn);
    size_t i;
    json_array_foreach(en, i, v) {
        bool ok = true;
        if (cn) ok = json_equal(v, cn);
        if (ok && !cn) json_array_append(vals, v);
    }
    if (cn && en) {
        bool in = false;
        json_array_foreach(en, i, v) in |= json_equal(v, cn);
        if (!in) json_array_clear(vals);
    }
    int cap = (int)json_array_size(vals), n = 0;
    int *xs = malloc(((size_t)cap + 1) * sizeof(int));
    if (!xs) {
        json_decref(vals), json_decref(types);
        return gb_error(c->b, CLLM_ENOMEM, "out of memory"), -1;
    }
    json_array_foreach(vals, i, v) {
        if (!value_has_type(v, types)) continue;
        xs[n++] = sc_literal(c, v, raw);
    }
    int x = gb_alt(c->b, xs, n);
    free(xs);
    json_decref(vals);
    json_decref(types);
    return x;
}

static int compile_flat(gm_sc *c, json_t *s, const char *ptr, int depth, bool raw);

static int ref_rule(gm_sc *c, const char *ref, const char *ptr, int depth) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ptr, ref)) return gb_ref(c->b, c->refs[i].rule);
    json_t *t = resolve_ptr(c, ref);
    if (!t) {
        json_t *r = json_string(ref);
        ref_missing(c, r, ptr);
        json_decref(r);
        return -1;
    }
    if (c->n_refs == c->cap_refs) {
        int nc = c->cap_refs ? c->cap_refs * 2 : 8;
        struct sc_ref *r = realloc(c->refs, (size_t)nc * sizeof(*r));
        if (!r) return gb_error(c->b, CLLM_ENOMEM, "out of memory"), -1;
        c->refs = r;
        c->cap_refs = nc;
    }
    int rule = gb_rule(c->b, NULL);
    c->refs[c->n_refs].ptr = strdup(ref);
    c->refs[c->n_refs].rule = rule;
    c->n_refs++;
    gb_rule_set(c->b, rule, sc_schema(c, t, ref, depth + 1, false));
    return gb_ref(c->b, rule);
}

int sc_schema(gm_sc *c, json_t *s, const char *ptr, int depth, bool raw) {
    gm_builder *b = c->b;
    if (b->failed) return -1;
    if (depth > b->o.max_schema_depth)
        return gb_error(b, CLLM_ERANGE, "schema nested deeper than %d at %s", b->o.max_schema_depth,
                        ptr),
               -1;
    if (++c->n_visits > b->o.max_schema_nodes)
        return gb_error(b, CLLM_ERANGE, "schema has more than %d subschemas",
                        b->o.max_schema_nodes),
               -1;
    if (json_is_true(s)) return sc_any(c);
    if (json_is_false(s)) return gb_fail(b);
    if (!json_is_object(s)) return invalid(c, "(schema)", ptr, "is not an object or boolean"), -1;
    /* a bare $ref keeps recursion as a rule reference; with siblings or allOf it is merged */
    json_t *ref = json_object_get(s, "$ref");
    if (ref && json_is_string(ref)) {
        bool alone = true;
        const char *k;
        json_t *v;
        json_object_foreach(s, k, v) if (strcmp(k, "$ref") && !in_list(ANNOTATIONS, k)) alone =
            false;
        if (alone) return ref_rule(c, json_string_value(ref), ptr, depth);
    }
    if (ref || json_object_get(s, "allOf")) {
        json_t *f = flatten(c, s, ptr, depth);
        if (!f) return -1;
        json_array_append_new(c->keep, f);
        if (json_object_get(f, "not") && json_object_size(f) == 1) return gb_fail(b);
        return compile_flat(c, f, ptr, depth, raw);
    }
    return compile_flat(c, s, ptr, depth, raw);
}

static int compile_flat(gm_sc *c, json_t *s, const char *ptr, int depth, bool raw) {
    gm_builder *b = c->b;
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (in_list(ANNOTATIONS, k) || in_list(SUPPORTED, k) || !strncmp(k, "x-", 2)) continue;
        return unsupported(c, k, ptr, NULL), -1;
    }
    json_t *any = json_object_get(s, "anyOf");
    const char *any_kw = "anyOf";
    if (!any) any = json_object_get(s, "oneOf"), any_kw = "oneOf";
    if (any) {
        if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf"))
            return unsupported(c, "oneOf", ptr, "together with anyOf"), -1;
        if (!json_is_array(any) || !json_array_size(any))
            return invalid(c, any_kw, ptr, "must be a non-empty array"), -1;
        json_t *base = json_deep_copy(s);
        json_object_del(base, any_kw);
        bool bare = true;
        json_object_foreach(base, k, v) if (!in_list(ANNOTATIONS, k)) bare = false;
        int n = (int)json_array_size(any);
        int *xs = malloc((size_t)n * sizeof(int));
        if (!xs) {
            json_decref(base);
            return gb_error(b, CLLM_ENOMEM, "out of memory"), -1;
        }
        size_t i;
        json_array_foreach(any, i, v) {
            char pp[PTR_MAX];
            ptr_idx(pp, ptr, any_kw, i);
            if (bare) {
                xs[i] = sc_schema(c, v, pp, depth + 1, raw);
            } else {
                json_t *m = merge(c, base, v, pp, depth + 1);
                if (!m) {
                    xs[i] = -1;
                    break;
                }
                json_array_append_new(c->keep, m);
                xs[i] = sc_schema(c, m, pp, depth + 1, raw);
            }
        }
        int x = gb_alt(b, xs, n);
        free(xs);
        json_decref(base);
        return x;
    }
    if (json_object_get(s, "enum") || json_object_get(s, "const"))
        return compile_enum(c, s, ptr, raw);
    json_t *type = json_object_get(s, "type");
    json_t *types;
    if (type) {
        if (!json_is_string(type) && !json_is_array(type))
            return unsupported(c, "type", ptr, "must be a string or an array of strings"), -1;
        types = type_set(type);
        size_t i;
        json_array_foreach(types, i, v) if (!json_is_string(v)) {
            json_decref(types);
            return unsupported(c, "type", ptr, "must list type names"), -1;
        }
    } else {
        types = json_array();
        if (has_any(s, OBJ_KW)) json_array_append_new(types, json_string("object"));
        if (has_any(s, ARR_KW)) json_array_append_new(types, json_string("array"));
        if (has_any(s, STR_KW)) json_array_append_new(types, json_string("string"));
        if (has_any(s, NUM_KW)) json_array_append_new(types, json_string("number"));
        if (!json_array_size(types)) {
            json_decref(types);
            return sc_any(c);
        }
    }
    if (json_is_true(json_object_get(s, "nullable")) && !type_has(types, "null"))
        json_array_append_new(types, json_string("null"));
    int n = (int)json_array_size(types);
    int *xs = malloc(((size_t)n + 1) * sizeof(int));
    if (!xs) {
        json_decref(types);
        return gb_error(b, CLLM_ENOMEM, "out of memory"), -1;
    }
    int k2 = 0;
    size_t i;
    json_array_foreach(types, i, v) {
        const char *t = json_string_value(v);
        /* "integer" next to "number" adds nothing */
        if (!strcmp(t, "integer")) {
            bool num = false;
            size_t j;
            json_t *w;
            json_array_foreach(types, j, w) num |= !strcmp(json_string_value(w), "number");
            if (num) continue;
        }
        xs[k2++] = compile_type(c, s, t, ptr, depth, raw && n == 1);
    }
    int x = gb_alt(b, xs, k2);
    free(xs);
    json_decref(types);
    return x;
}

static int gm_json_schema_expr(gm_builder *b, const char *schema, size_t len, bool raw_top) {
    (void)raw_top;
    json_error_t je;
    json_t *root = json_loadb(schema, len, JSON_DECODE_ANY, &je);
    if (!root) return gb_error(b, CLLM_EINVAL, "schema is not valid JSON: %s", je.text), -1;
    gm_sc c;
    sc_init(&c, b, root);
    int x = sc_schema(&c, root, "#", 0, false);
    sc_free(&c);
    json_decref(root);
    return x;
}

cllm_status cllm_gm_from_json_schema(const char *schema, size_t len, const cllm_gm_opts *opts,
                                     cllm_gm **out, cllm_error *err) {
    gm_builder b;
    gb_init(&b, opts, err);
    *out = NULL;
    if ((long)len > b.o.max_source) {
        int cap = b.o.max_source; /* read before gb_free clears the options */
        gb_free(&b);
        return cllm_err_set(err, CLLM_ERANGE, "schema longer than %d bytes", cap);
    }
    int root = gb_rule(&b, "root");
    gb_rule_set(&b, root, gm_json_schema_expr(&b, schema, len, false));
    cllm_status st = gb_finish(&b, out);
    gb_free(&b);
    return st;
}
