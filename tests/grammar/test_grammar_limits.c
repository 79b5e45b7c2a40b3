/* Grammar engine at and past its limits (issue 32, items 7 and 10):
 *  - many alternatives (guided_choice, JSON Schema enum, GBNF alternation at 4,097 and 20,000)
 *    and many optional properties (5,000, as JSON object members and as forced tool-call
 *    parameters) compile, keep a handful of parse stacks, give masks
 *    equal to brute force, and every output they allow is one of the alternatives / a valid
 *    object with its keys in schema order;
 *  - a grammar whose state cannot be held is refused at compile time when its start shows it,
 *    and otherwise the mask reports -1 (an error), never "nothing may follow" (read as complete);
 *  - error messages name the limit or the missing $ref target.
 * Vocabulary: every single byte plus multi-byte pieces of the keys and values, so tokens cross
 * the trie's branch points. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "test.h"

static cllm_gm_vocab *V;
static int NV, EOS;
static char **VB;
static size_t *VL;

static void vocab_init(void) {
    static const char *pieces[] = {"opt_", "city_", "field_", "\":", "\",\"", ",\"", "{\"",
                                   "\"}",  "12",    "345",    "_1",  "9\"",   "0",   "}"};
    int np = (int)(sizeof(pieces) / sizeof(*pieces)), nr = 400;
    NV = 255 + np + nr + 1;
    VB = malloc((size_t)NV * sizeof(char *));
    VL = malloc((size_t)NV * sizeof(size_t));
    int n = 0;
    for (int c = 1; c < 256; c++, n++) VB[n] = malloc(1), VB[n][0] = (char)c, VL[n] = 1;
    for (int i = 0; i < np; i++, n++) VB[n] = strdup(pieces[i]), VL[n] = strlen(pieces[i]);
    const char alpha[] = "opt_cityfield0123456789\":,{}";
    for (int i = 0; i < nr; i++, n++) {
        VL[n] = 2 + (size_t)test_irand(4);
        VB[n] = malloc(VL[n]);
        for (size_t k = 0; k < VL[n]; k++) VB[n][k] = alpha[test_irand((int)sizeof(alpha) - 1)];
    }
    VB[n] = strdup("<eos>"), VL[n] = 5;
    EOS = n++;
    cllm_error e = {0};
    CHECK(cllm_gm_vocab_new((const char *const *)VB, VL, NULL, NV, &EOS, 1, &V, &e) == CLLM_OK);
}

static void vocab_free(void) {
    cllm_gm_vocab_free(V);
    for (int i = 0; i < NV; i++) free(VB[i]);
    free(VB), free(VL);
}

/* A random walk inside g: uniform among allowed tokens, the first check_steps masks compared
 * with brute force, the state's stack count bounded by max_heads. Returns the output (malloc'd,
 * NUL-terminated) when it ended accepted, else NULL. */
static char *walk(cllm_gm *g, int steps, int check_steps, int max_heads) {
    cllm_gm_matcher *m = cllm_gm_matcher_new(g, V);
    int W = (NV + 31) / 32;
    uint32_t *a = calloc((size_t)W, 4), *b = calloc((size_t)W, 4);
    size_t n = 0, cap = 256;
    char *out = malloc(cap);
    bool ended = false;
    for (int step = 0; m && step < steps && !ended; step++) {
        int cnt = cllm_gm_matcher_mask(m, a);
        CHECK_MSG(cnt > 0, "mask %d at step %d after '%.*s'", cnt, step, (int)n, out);
        if (cnt <= 0) break;
        if (step < check_steps) {
            int c2 = cllm_gm_matcher_mask_slow(m, b);
            CHECK_MSG(c2 == cnt && !memcmp(a, b, (size_t)W * 4),
                      "mask != brute force at step %d (%d vs %d) after '%.*s'", step, cnt, c2,
                      (int)n, out);
        }
        CHECK_MSG(cllm_gm_matcher_n_heads(m) <= max_heads, "%d stacks after '%.*s'",
                  cllm_gm_matcher_n_heads(m), (int)n, out);
        int pick = test_irand(cnt), t = 0;
        for (t = 0; t < NV; t++)
            if (a[t >> 5] >> (t & 31) & 1 && pick-- == 0) break;
        /* end when allowed, one time in three, so walks also reach deep states */
        if (cllm_gm_matcher_is_accepting(m) && (test_irand(3) == 0 || t == EOS)) {
            ended = true;
            break;
        }
        CHECK_MSG(cllm_gm_matcher_accept_token(m, t), "allowed token %d refused", t);
        if (n + VL[t] + 1 > cap) out = realloc(out, cap = 2 * (n + VL[t] + 1));
        memcpy(out + n, VB[t], VL[t]);
        n += VL[t];
        ended = cllm_gm_matcher_is_done(m);
    }
    out[n] = 0;
    free(a), free(b);
    cllm_gm_matcher_free(m);
    if (!ended) free(out);
    return ended ? out : NULL;
}

static char **numbered(const char *fmt, int n, size_t **lens) {
    char **s = malloc((size_t)n * sizeof(char *));
    *lens = malloc((size_t)n * sizeof(size_t));
    for (int i = 0; i < n; i++) {
        char buf[64];
        snprintf(buf, sizeof(buf), fmt, i);
        s[i] = strdup(buf);
        (*lens)[i] = strlen(buf);
    }
    return s;
}

static void free_strs(char **s, size_t *l, int n) {
    for (int i = 0; i < n; i++) free(s[i]);
    free(s), free(l);
}

/* Index of s in "prefix<i>" form with 0 <= i < n, else -1. */
static int index_of(const char *s, const char *prefix, int n) {
    size_t pl = strlen(prefix);
    if (strncmp(s, prefix, pl) || !s[pl]) return -1;
    char *end;
    long i = strtol(s + pl, &end, 10);
    if (*end || i < 0 || i >= n) return -1;
    char back[64];
    snprintf(back, sizeof(back), "%s%ld", prefix, i); /* no leading zeros or signs */
    return strcmp(back, s) ? -1 : (int)i;
}

static void t_choice(void) {
    int ns[] = {4097, CLLM_GM_MAX_CHOICES};
    for (int k = 0; k < 2; k++) {
        int n = ns[k];
        size_t *l;
        char **s = numbered("opt_%d", n, &l);
        cllm_gm *g = NULL;
        cllm_error e = {0};
        cllm_status st = cllm_gm_from_choice((const char *const *)s, l, n, NULL, &g, &e);
        CHECK_MSG(st == CLLM_OK, "choice of %d: %s", n, e.msg);
        for (int rep = 0; g && rep < 12; rep++) {
            char *o = walk(g, 40, 12, 2);
            if (o) CHECK_MSG(index_of(o, "opt_", n) >= 0, "choice output '%s'", o);
            free(o);
        }
        /* every choice is accepted whole, none of their prefixes or extensions */
        for (int i = 0; g && i < n; i += 97) {
            cllm_gm_matcher *m = cllm_gm_matcher_new(g, V);
            CHECK(cllm_gm_matcher_accept_bytes(m, s[i], l[i]) && cllm_gm_matcher_is_accepting(m));
            CHECK(!cllm_gm_matcher_can_accept_bytes(m, "x", 1));
            cllm_gm_matcher_free(m);
        }
        cllm_gm_unref(g);
        free_strs(s, l, n);
    }
    /* the empty string, duplicates, a choice that is a prefix of another */
    const char *odd[] = {"", "ab", "a", "ab", "abc"};
    size_t ol[] = {0, 2, 1, 2, 3};
    cllm_gm *go = NULL;
    cllm_error eo = {0};
    CHECK(cllm_gm_from_choice(odd, ol, 5, NULL, &go, &eo) == CLLM_OK);
    static const struct {
        const char *s;
        bool ok;
    } oc[] = {{"", true}, {"a", true}, {"ab", true}, {"abc", true}, {"b", false}, {"abcd", false}};
    for (size_t i = 0; go && i < sizeof(oc) / sizeof(*oc); i++) {
        cllm_gm_matcher *m = cllm_gm_matcher_new(go, V);
        bool ok = cllm_gm_matcher_accept_bytes(m, oc[i].s, strlen(oc[i].s)) &&
                  cllm_gm_matcher_is_accepting(m);
        CHECK_MSG(ok == oc[i].ok, "choice {'', a, ab, abc}: '%s' %d", oc[i].s, ok);
        cllm_gm_matcher_free(m);
    }
    cllm_gm_unref(go);
    /* 3,000 choices, each a prefix of the next ("a", "aa", ...): a trie 3,000 branch points
     * deep (nested rules every few dozen levels keep the expressions shallow) */
    {
        int nd = 3000;
        char **ds = malloc((size_t)nd * sizeof(char *));
        size_t *dl = malloc((size_t)nd * sizeof(size_t));
        char *as = malloc((size_t)nd + 1);
        memset(as, 'a', (size_t)nd);
        for (int i = 0; i < nd; i++) ds[i] = as, dl[i] = (size_t)i + 1;
        CHECK(cllm_gm_from_choice((const char *const *)ds, dl, nd, NULL, &go, &eo) == CLLM_OK);
        if (go) {
            cllm_gm_matcher *m = cllm_gm_matcher_new(go, V);
            CHECK(cllm_gm_matcher_accept_bytes(m, as, 1234) && cllm_gm_matcher_is_accepting(m));
            CHECK(cllm_gm_matcher_accept_bytes(m, as, (size_t)nd - 1234));
            CHECK(cllm_gm_matcher_is_done(m) && !cllm_gm_matcher_can_accept_bytes(m, "a", 1));
            cllm_gm_matcher_free(m);
            for (int rep = 0; rep < 4; rep++) free(walk(go, 50, 10, 2));
        }
        cllm_gm_unref(go);
        free(as), free(ds), free(dl);
    }
    /* an alternation of 20 words and a class: the words merge into a trie beside the class */
    char re[512] = "(";
    for (int i = 0; i < 20; i++) snprintf(re + strlen(re), sizeof(re) - strlen(re), "w%d|", i);
    strcat(re, "[0-9]+)");
    CHECK(cllm_gm_from_regex(re, strlen(re), NULL, &go, &eo) == CLLM_OK);
    static const struct {
        const char *s;
        bool ok;
    } rc[] = {{"w0", true}, {"w19", true},  {"w1", true},   {"123", true},
              {"w", false}, {"w20", false}, {"w0x", false}, {"", false}};
    for (size_t i = 0; go && i < sizeof(rc) / sizeof(*rc); i++) {
        cllm_gm_matcher *m = cllm_gm_matcher_new(go, V);
        bool ok = cllm_gm_matcher_accept_bytes(m, rc[i].s, strlen(rc[i].s)) &&
                  cllm_gm_matcher_is_accepting(m);
        CHECK_MSG(ok == rc[i].ok, "regex %s: '%s' %d", re, rc[i].s, ok);
        cllm_gm_matcher_free(m);
    }
    for (int rep = 0; go && rep < 8; rep++) {
        char *o = walk(go, 20, 20, 3);
        free(o);
    }
    cllm_gm_unref(go);
    /* past the limit: refused, naming it (item 10) */
    size_t *l;
    char **s = numbered("opt_%d", 20000, &l);
    cllm_gm *g = NULL;
    cllm_error e = {0};
    cllm_status st = cllm_gm_from_choice((const char *const *)s, l, 20000, NULL, &g, &e);
    CHECK_MSG(st == CLLM_ERANGE && strstr(e.msg, "10000"), "choice of 20000: %d '%s'", st, e.msg);
    cllm_gm_unref(g);
    free_strs(s, l, 20000);
}

/* {"city": one of n strings} through JSON Schema and the same strings as a GBNF alternation. */
static void t_enum_gbnf(void) {
    int ns[] = {4097, 20000};
    for (int k = 0; k < 2; k++) {
        int n = ns[k];
        json_t *en = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(en, json_sprintf("city_%d", i));
        json_t *sch = json_pack("{s:s,s:{s:{s:o}},s:[s]}", "type", "object", "properties", "city",
                                "enum", en, "required", "city");
        char *text = json_dumps(sch, JSON_COMPACT);
        json_decref(sch);
        cllm_gm *g = NULL;
        cllm_error e = {0};
        cllm_status st = cllm_gm_from_json_schema(text, strlen(text), NULL, &g, &e);
        CHECK_MSG(st == CLLM_OK, "enum of %d: %s", n, e.msg);
        free(text);
        for (int rep = 0; g && rep < 10; rep++) {
            char *o = walk(g, 60, 16, 2);
            if (o) {
                json_t *j = json_loads(o, 0, NULL);
                const char *c = json_string_value(json_object_get(j, "city"));
                CHECK_MSG(json_object_size(j) == 1 && c && index_of(c, "city_", n) >= 0,
                          "enum output '%s'", o);
                json_decref(j);
            }
            free(o);
        }
        cllm_gm_unref(g);
        /* root ::= "city_0" | "city_1" | ... */
        size_t cap = (size_t)n * 24 + 16, len = 0;
        char *gb = malloc(cap);
        len += (size_t)snprintf(gb, cap, "root ::=");
        for (int i = 0; i < n; i++)
            len += (size_t)snprintf(gb + len, cap - len, "%s \"city_%d\"", i ? " |" : "", i);
        g = NULL;
        st = cllm_gm_from_gbnf(gb, len, NULL, &g, &e);
        CHECK_MSG(st == CLLM_OK, "gbnf of %d: %s", n, e.msg);
        free(gb);
        for (int rep = 0; g && rep < 10; rep++) {
            char *o = walk(g, 40, 12, 2);
            if (o) CHECK_MSG(index_of(o, "city_", n) >= 0, "gbnf output '%s'", o);
            free(o);
        }
        cllm_gm_unref(g);
    }
}

/* Checks an object output: valid JSON, no duplicate keys, keys field_<i> in increasing i, the
 * required ones present, integer values. */
static void check_object(const char *o, int n, int req_every) {
    json_error_t je;
    json_t *j = json_loads(o, JSON_REJECT_DUPLICATES, &je);
    CHECK_MSG(json_is_object(j), "object output '%.200s': %s", o, je.text);
    /* jansson keeps insertion order when iterating (JSON_PRESERVE_ORDER is for dumps) */
    int last = -1;
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v) {
        int i = index_of(k, "field_", n);
        CHECK_MSG(i > last, "key '%s' out of order in '%.200s'", k, o);
        CHECK_MSG(json_is_integer(v), "value of '%s' in '%.200s'", k, o);
        last = i > last ? i : last;
    }
    for (int i = 0; req_every && i < n; i += req_every) {
        char key[32];
        snprintf(key, sizeof(key), "field_%d", i);
        CHECK_MSG(json_object_get(j, key), "required '%s' missing in '%.200s'", key, o);
    }
    json_decref(j);
}

static void t_properties(void) {
    static const struct {
        int n, req_every; /* every req_every-th member required (0: none) */
        bool ws;
    } cases[] = {
        {40, 0, false}, {40, 7, true}, {100, 33, false}, {5000, 0, false}, {5000, 1250, false}};
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(*cases); ci++) {
        int n = cases[ci].n, re = cases[ci].req_every;
        json_t *props = json_object(), *req = json_array();
        for (int i = 0; i < n; i++) {
            char key[32];
            snprintf(key, sizeof(key), "field_%d", i);
            json_object_set_new(props, key, json_pack("{s:s}", "type", "integer"));
            if (re && i % re == 0) json_array_append_new(req, json_string(key));
        }
        json_t *sch =
            json_pack("{s:s,s:o,s:o}", "type", "object", "properties", props, "required", req);
        char *text = json_dumps(sch, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(sch);
        cllm_gm *g = NULL;
        cllm_error e = {0};
        cllm_gm_opts o = {.any_whitespace = cases[ci].ws};
        cllm_status st = cllm_gm_from_json_schema(text, strlen(text), &o, &g, &e);
        CHECK_MSG(st == CLLM_OK, "%d properties: %s", n, e.msg);
        free(text);
        int ended = 0;
        for (int rep = 0; g && rep < 16; rep++) {
            char *out = walk(g, re ? 600 : 200, n > 1000 ? 10 : 60, 200);
            if (out) check_object(out, n, re), ended++;
            free(out);
        }
        CHECK_MSG(!g || ended > 0, "no walk of %d properties ended", n);
        /* a given object is accepted exactly when it follows the schema */
        if (g && !re) {
            cllm_gm_matcher *m = cllm_gm_matcher_new(g, V);
            char ok1[64];
            snprintf(ok1, sizeof(ok1), "{\"field_3\":1,\"field_%d\":2}", n - 1);
            CHECK(cllm_gm_matcher_can_accept_bytes(m, ok1, strlen(ok1)));
            CHECK(!cllm_gm_matcher_can_accept_bytes(m, "{\"field_3\":1,\"field_3\"", 22));
            CHECK(!cllm_gm_matcher_can_accept_bytes(m, "{\"field_3\":1,\"field_2\"", 22));
            CHECK(!cllm_gm_matcher_can_accept_bytes(m, "{\"field_x\"", 10));
            cllm_gm_matcher_free(m);
        }
        cllm_gm_unref(g);
    }
    /* 20,000 properties: past the subschema cap, refused with the cap named */
    json_t *props = json_object();
    for (int i = 0; i < 20000; i++) {
        char key[32];
        snprintf(key, sizeof(key), "field_%d", i);
        json_object_set_new(props, key, json_pack("{s:s}", "type", "integer"));
    }
    json_t *sch = json_pack("{s:s,s:o}", "type", "object", "properties", props);
    char *text = json_dumps(sch, JSON_COMPACT);
    json_decref(sch);
    cllm_gm *g = NULL;
    cllm_error e = {0};
    cllm_status st = cllm_gm_from_json_schema(text, strlen(text), NULL, &g, &e);
    CHECK_MSG(st == CLLM_ERANGE && strstr(e.msg, "20000"), "20000 properties: %d '%s'", st, e.msg);
    cllm_gm_unref(g);
    free(text);
}

/* A forced tool call with 5,000 optional parameters: the blocks come in schema order. */
static void t_tool_params(void) {
    int n = 5000;
    json_t *props = json_object();
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof(key), "field_%d", i);
        json_object_set_new(props, key, json_pack("{s:s}", "type", "integer"));
    }
    json_t *tools = json_pack("[{s:s,s:{s:s,s:{s:s,s:o}}}]", "type", "function", "function", "name",
                              "f", "parameters", "type", "object", "properties", props);
    char *text = json_dumps(tools, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(tools);
    cllm_gm *g = NULL;
    cllm_error e = {0};
    cllm_status st = cllm_gm_from_tools(text, strlen(text), NULL, 1, 1, NULL, &g, &e);
    CHECK_MSG(st == CLLM_OK, "tools with %d parameters: %s", n, e.msg);
    free(text);
    int ended = 0;
    for (int rep = 0; g && rep < 12; rep++) {
        char *o = walk(g, 300, 8, 200);
        if (!o) continue;
        ended++;
        const char *head = "<tool_call>\n<function=f>\n", *tail = "</function>\n</tool_call>";
        size_t ol = strlen(o), tl = strlen(tail);
        CHECK_MSG(!strncmp(o, head, strlen(head)) && ol >= tl && !strcmp(o + ol - tl, tail),
                  "tool call '%.200s'", o);
        int last = -1;
        for (const char *p = strstr(o, "<parameter="); p; p = strstr(p + 1, "<parameter=")) {
            char name[32] = "";
            sscanf(p, "<parameter=%31[^>]>", name);
            int i = index_of(name, "field_", n);
            CHECK_MSG(i > last, "parameter '%s' out of order in '%.200s'", name, o);
            last = i > last ? i : last;
        }
        free(o);
    }
    CHECK_MSG(!g || ended > 0, "no tool-call walk ended");
    cllm_gm_unref(g);
}

/* Alternatives that are not plain strings and share a prefix stay one stack each: at the start
 * that is known when compiling (a 400), deeper in the output the mask says -1. */
static void t_ambiguous(void) {
    int n = 5000;
    size_t cap = (size_t)n * 32 + 16, len = 0;
    char *gb = malloc(cap);
    len += (size_t)snprintf(gb, cap, "root ::=");
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(gb + len, cap - len, "%s \"x\" [ab] \"%d\"", i ? " |" : "", i);
    cllm_gm *g = NULL;
    cllm_error e = {0};
    cllm_status st = cllm_gm_from_gbnf(gb, len, NULL, &g, &e);
    CHECK_MSG(st == CLLM_ERANGE && strstr(e.msg, "4096"), "ambiguous gbnf: %d '%s'", st, e.msg);
    cllm_gm_unref(g);
    free(gb);
    /* {"a": [ {one of 5000 object shapes}, ... ]} with at least one item: at '{"a":' the "["
     * makes every shape a stack of its own (their "{"). The compile-time probe walks there (a
     * 400); behind an 80-byte constant, past the probe's walk, the mask says -1 at run time */
    for (int hidden = 0; hidden < 2; hidden++) {
        json_t *any = json_array();
        for (int i = 0; i < n; i++) {
            char key[32];
            snprintf(key, sizeof(key), "k%d", i);
            json_array_append_new(any,
                                  json_pack("{s:s,s:{s:{s:s}},s:[s]}", "type", "object",
                                            "properties", key, "type", "integer", "required", key));
        }
        json_t *arr =
            json_pack("{s:s,s:{s:o},s:i}", "type", "array", "items", "anyOf", any, "minItems", 1);
        char pad[81];
        memset(pad, 'x', 80);
        pad[80] = 0;
        json_t *sch =
            hidden ? json_pack("{s:s,s:{s:{s:s},s:o},s:[s,s]}", "type", "object", "properties", "s",
                               "const", pad, "a", arr, "required", "s", "a")
                   : json_pack("{s:s,s:{s:o},s:[s]}", "type", "object", "properties", "a", arr,
                               "required", "a");
        char *text = json_dumps(sch, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(sch);
        st = cllm_gm_from_json_schema(text, strlen(text), NULL, &g, &e);
        free(text);
        if (!hidden) {
            CHECK_MSG(st == CLLM_ERANGE && strstr(e.msg, "4096"), "anyOf of %d objects: %d '%s'", n,
                      st, e.msg);
            cllm_gm_unref(g);
            continue;
        }
        CHECK_MSG(st == CLLM_OK, "anyOf of %d objects behind a constant: %s", n, e.msg);
        if (!g) continue;
        cllm_gm_matcher *m = cllm_gm_matcher_new(g, V);
        uint32_t *mask = calloc((size_t)(NV + 31) / 32, 4);
        char pre[128];
        snprintf(pre, sizeof(pre), "{\"s\":\"%s\",\"a\":", pad);
        CHECK(cllm_gm_matcher_accept_bytes(m, pre, strlen(pre)));
        int cnt = cllm_gm_matcher_mask(m, mask);
        CHECK_MSG(cnt == -1, "mask past the cap: %d (want -1, not a complete output)", cnt);
        CHECK(cllm_gm_matcher_hit_cap(m));
        free(mask);
        cllm_gm_matcher_free(m);
        cllm_gm_unref(g);
    }
}

/* Item 10: messages name the limit and the missing target. */
static void t_messages(void) {
    size_t big = (1u << 20) + 10;
    char *s = malloc(big + 1);
    memset(s, ' ', big);
    s[big] = 0;
    cllm_gm *g = NULL;
    cllm_error e = {0};
    cllm_status st = cllm_gm_from_json_schema(s, big, NULL, &g, &e);
    CHECK_MSG(st == CLLM_ERANGE && strstr(e.msg, "longer than 1048576 bytes"), "schema: '%s'",
              e.msg);
    st = cllm_gm_from_gbnf(s, big, NULL, &g, &e);
    CHECK_MSG(st == CLLM_ERANGE && strstr(e.msg, "longer than 1048576 bytes"), "gbnf: '%s'", e.msg);
    st = cllm_gm_from_regex(s, big, NULL, &g, &e);
    CHECK_MSG(st == CLLM_ERANGE && strstr(e.msg, "longer than 1048576 bytes"), "regex: '%s'",
              e.msg);
    free(s);
    static const char *dangling[] = {
        "{\"$ref\":\"#/$defs/nope\",\"$defs\":{\"yes\":{}}}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/nope\",\"title\":\"t\"}}}",
        "{\"allOf\":[{\"$ref\":\"#/definitions/x\"}]}",
    };
    for (size_t i = 0; i < sizeof(dangling) / sizeof(*dangling); i++) {
        st = cllm_gm_from_json_schema(dangling[i], strlen(dangling[i]), NULL, &g, &e);
        CHECK_MSG(st == CLLM_EINVAL && strstr(e.msg, "does not exist") && strstr(e.msg, "#/"),
                  "dangling $ref %zu: %d '%s'", i, st, e.msg);
    }
    const char *remote = "{\"$ref\":\"https://example.com/s.json\"}";
    st = cllm_gm_from_json_schema(remote, strlen(remote), NULL, &g, &e);
    CHECK_MSG(st == CLLM_EUNSUPPORTED && strstr(e.msg, "only local JSON pointers"), "remote: '%s'",
              e.msg);
}

int main(void) {
    vocab_init();
    t_messages();
    t_choice();
    t_enum_gbnf();
    t_properties();
    t_tool_params();
    t_ambiguous();
    vocab_free();
    return test_report("test_grammar_limits");
}
