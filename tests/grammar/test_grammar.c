/* Grammar engine: mask exactness (cached/walked mask == brute force over every token's bytes) on
 * random states of JSON Schema, regex, GBNF, choice and tool-call grammars, over the tiny
 * model's byte-level vocabulary and a synthetic one; regex outputs checked by PCRE2 (an
 * independent matcher); refusals name the keyword; caps give errors. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

static cllm_gm_vocab *V_tiny, *V_syn;
static int n_vocab_tiny;
static const cllm_tok *TOK;
static int EOS_TINY = -1;

/* Generates one output by sampling uniformly among allowed tokens; checks every step's mask
 * against brute force. Returns the bytes (malloc'd) and whether the output ended accepted. */
static char *gen(cllm_gm *g, cllm_gm_vocab *v, int max_steps, bool check, size_t *len,
                 bool *ended) {
    cllm_gm_matcher *m = cllm_gm_matcher_new(g, v);
    int V = cllm_gm_vocab_size(v), W = (V + 31) / 32;
    uint32_t *a = calloc((size_t)W, 4), *b = calloc((size_t)W, 4);
    char *out = malloc(1);
    size_t n = 0;
    *ended = false;
    for (int step = 0; step < max_steps; step++) {
        int cnt = cllm_gm_matcher_mask(m, a);
        if (check) {
            int cnt2 = cllm_gm_matcher_mask_slow(m, b);
            bool same = cnt == cnt2 && !memcmp(a, b, (size_t)W * 4);
            CHECK_MSG(same, "mask differs at step %d (%d vs %d allowed) after '%.*s'", step, cnt,
                      cnt2, (int)n, out);
            if (!same) {
                for (int t = 0; t < V; t++) {
                    bool x = a[t >> 5] >> (t & 31) & 1, y = b[t >> 5] >> (t & 31) & 1;
                    if (x != y) {
                        fprintf(stderr, "  token %d fast=%d slow=%d\n", t, x, y);
                        break;
                    }
                }
            }
        }
        if (cnt <= 0) break; /* -1: past the caps */
        int pick = test_irand(cnt), t = 0;
        for (t = 0; t < V; t++)
            if (a[t >> 5] >> (t & 31) & 1 && pick-- == 0) break;
        /* prefer ending sometimes when allowed: eos is the last bits usually */
        if (cllm_gm_matcher_is_accepting(m) && test_irand(4) == 0) {
            *ended = true;
            break;
        }
        size_t tl = 0;
        const char *tb = NULL;
        if (TOK && v == V_tiny) tb = cllm_tok_token_bytes(TOK, t, &tl);
        bool ok = cllm_gm_matcher_accept_token(m, t);
        CHECK_MSG(ok, "allowed token %d rejected", t);
        if (!ok) break;
        if (t == EOS_TINY && v == V_tiny) {
            *ended = true;
            break;
        }
        if (tb) {
            out = realloc(out, n + tl + 1);
            memcpy(out + n, tb, tl);
            n += tl;
        } else if (v == V_syn) {
            /* synthetic tokens: the vocab keeps their bytes */
        }
        if (cllm_gm_matcher_is_done(m)) {
            *ended = true;
            break;
        }
    }
    out[n] = 0;
    *len = n;
    free(a), free(b);
    cllm_gm_matcher_free(m);
    return out;
}

static bool pcre_full(const char *re, const char *s, size_t n) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_ALT_BSUX | PCRE2_ANCHORED | PCRE2_ENDANCHORED,
                                  &ec, &eo, NULL);
    if (!c) return false;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = pcre2_match(c, (PCRE2_SPTR)s, n, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(c);
    return rc >= 0;
}

static void t_regex(void) {
    static const char *res[] = {
        "[a-z]{2,5}-[0-9]+",
        "(yes|no|maybe)",
        "\\d{3}-\\d{4}",
        "[A-Z][a-z]*( [A-Z][a-z]*){0,3}",
        "(0|[1-9][0-9]*)(\\.[0-9]{1,3})?",
        "[^a-c\\s]{1,4}x",
        "(ab|a)(bc|c)?d*",
        "[\\u00e0-\\u00ff]{1,3}z",
        "\\w+@\\w+\\.(com|org)",
        "a.{0,5}b",
    };
    for (size_t i = 0; i < sizeof(res) / sizeof(*res); i++) {
        cllm_gm *g = NULL;
        cllm_error e = {0};
        cllm_status st = cllm_gm_from_regex(res[i], strlen(res[i]), NULL, &g, &e);
        CHECK_MSG(st == CLLM_OK, "regex %s: %s", res[i], e.msg);
        if (st) continue;
        for (int rep = 0; rep < 6; rep++) {
            size_t n;
            bool ended;
            char *o = gen(g, V_tiny, 40, rep < 3, &n, &ended);
            if (ended)
                CHECK_MSG(pcre_full(res[i], o, n), "regex %s: output '%s' fails PCRE2", res[i], o);
            free(o);
        }
        cllm_gm_unref(g);
    }
}

static void t_schema_masks(void) {
    static const char *schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
        "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},\"tags\":{\"type\":\"array\","
        "\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":3}},\"required\":[\"name\",\"age\"]"
        "}",
        "{\"type\":\"array\",\"items\":{\"type\":\"number\"}}",
        "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
        "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/n\"},{\"type\":\"null\"}]}},\"required\":[\"v\","
        "\"next\"]}},\"$ref\":\"#/$defs/n\"}",
        "{\"type\":\"string\",\"format\":\"date-time\"}",
        "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"boolean\"},\"properties\":{"
        "\"id\":{\"type\":\"string\",\"format\":\"uuid\"}}}",
        "{}",
        "{\"type\":[\"string\",\"null\",\"boolean\"]}",
    };
    for (size_t i = 0; i < sizeof(schemas) / sizeof(*schemas); i++) {
        for (int ws = 0; ws < 2; ws++) {
            cllm_gm *g = NULL;
            cllm_error e = {0};
            cllm_gm_opts o = {.any_whitespace = ws};
            cllm_status st = cllm_gm_from_json_schema(schemas[i], strlen(schemas[i]), &o, &g, &e);
            CHECK_MSG(st == CLLM_OK, "schema %zu: %s", i, e.msg);
            if (st) continue;
            for (int rep = 0; rep < 3; rep++) {
                size_t n;
                bool ended;
                char *out = gen(g, V_tiny, 60, true, &n, &ended);
                free(out);
            }
            for (int rep = 0; rep < 2; rep++) {
                size_t n;
                bool ended;
                char *out = gen(g, V_syn, 40, true, &n, &ended);
                free(out);
            }
            cllm_gm_unref(g);
        }
    }
}

/* A dense vocabulary: every string of up to 3 bytes over a JSON alphabet plus random longer
 * ones, so whatever can follow a rule's end (",", "]}", "\",\"", "1e", ".1") is some token, and
 * a mask cache that rejects a token one or two bytes past an end (gm_analyze.c's follow sets)
 * or shares a cache between nodes that differ (its classes) shows up against brute force. */
static void t_dense_vocab(void) {
    const char alpha[] = "\"{}[],:1a.e ";
    int A = (int)sizeof(alpha) - 1, n = 0, N = A + A * A + A * A * A + 3000 + 1;
    char **b = malloc((size_t)N * sizeof(char *));
    size_t *l = malloc((size_t)N * sizeof(size_t));
    for (int len = 1; len <= 3; len++) {
        int cnt = len == 1 ? A : len == 2 ? A * A : A * A * A;
        for (int k = 0; k < cnt; k++, n++) {
            l[n] = (size_t)len;
            b[n] = malloc(4);
            for (int j = 0, x = k; j < len; j++, x /= A) b[n][j] = alpha[x % A];
        }
    }
    for (; n < N - 1; n++) {
        l[n] = 4 + (size_t)test_irand(3);
        b[n] = malloc(l[n]);
        for (size_t j = 0; j < l[n]; j++) b[n][j] = alpha[test_irand(A)];
    }
    b[n] = malloc(1), l[n] = 1, b[n][0] = 'X'; /* eos */
    int eos = n++;
    cllm_gm_vocab *v = NULL;
    cllm_error e = {0};
    CHECK(cllm_gm_vocab_new((const char *const *)b, l, NULL, N, &eos, 1, &v, &e) == CLLM_OK);
    static const char *schemas[] = {
        "{}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"},\"e\":{\"type\":"
        "\"array\",\"items\":{\"type\":\"string\"}}},\"required\":[\"a\"]}",
        "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":"
        "\"string\",\"maxLength\":2},{\"type\":\"array\",\"items\":{\"type\":\"number\"}}]},"
        "\"maxItems\":4}",
        "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
        "\"e\":{\"anyOf\":[{\"$ref\":\"#/$defs/n\"},{\"type\":\"null\"}]}},\"required\":[\"a\","
        "\"e\"]}},\"$ref\":\"#/$defs/n\"}",
    };
    for (size_t i = 0; v && i < sizeof(schemas) / sizeof(*schemas); i++)
        for (int ws = 0; ws < 2; ws++) {
            cllm_gm *g = NULL;
            cllm_gm_opts o = {.any_whitespace = ws};
            cllm_status st = cllm_gm_from_json_schema(schemas[i], strlen(schemas[i]), &o, &g, &e);
            CHECK_MSG(st == CLLM_OK, "dense schema %zu: %s", i, e.msg);
            for (int rep = 0; g && rep < 4; rep++) {
                size_t len;
                bool ended;
                free(gen(g, v, 40, true, &len, &ended));
            }
            cllm_gm_unref(g);
        }
    cllm_gm_vocab_free(v);
    for (int i = 0; i < N; i++) free(b[i]);
    free(b), free(l);
}

static void t_gbnf_choice_tools(void) {
    const char *gr = "root ::= greeting \" \" name (\"!\" | \".\")\n"
                     "greeting ::= \"hello\" | \"hi\"  # comment\n"
                     "name ::= [A-Z] [a-z]{1,6}\n";
    cllm_gm *g = NULL;
    cllm_error e = {0};
    CHECK_MSG(cllm_gm_from_gbnf(gr, strlen(gr), NULL, &g, &e) == CLLM_OK, "%s", e.msg);
    if (g) {
        for (int rep = 0; rep < 5; rep++) {
            size_t n;
            bool ended;
            char *o = gen(g, V_tiny, 30, true, &n, &ended);
            if (ended)
                CHECK_MSG(pcre_full("(hello|hi) [A-Z][a-z]{1,6}[!.]", o, n), "gbnf out '%s'", o);
            free(o);
        }
        cllm_gm_unref(g);
    }
    /* 40 nullable calls in a row: a step's closure visits 80+ (node, parent) pairs, past the
     * linear search into gm_match.c's hash set */
    char big[400] = "root ::=";
    for (int i = 0; i < 40; i++) strcat(big, " s");
    strcat(big, " \"x\"\ns ::= \"a\"?\n");
    cllm_gm *gb = NULL;
    CHECK_MSG(cllm_gm_from_gbnf(big, strlen(big), NULL, &gb, &e) == CLLM_OK, "%s", e.msg);
    for (int rep = 0; gb && rep < 4; rep++) {
        size_t n;
        bool ended;
        char *o = gen(gb, V_tiny, 30, true, &n, &ended);
        if (ended) CHECK_MSG(pcre_full("a{0,40}x", o, n), "nullable-calls out '%s'", o);
        free(o);
    }
    cllm_gm_unref(gb);
    const char *bad[] = {"root ::= \"a\" b\n", "root ::= root \"a\"\n", "root ::= (\"a\"\n",
                         "x ::= \"a\"\n", "root ::= [b-a]\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        cllm_gm *g2 = NULL;
        cllm_error e2 = {0};
        CHECK_MSG(cllm_gm_from_gbnf(bad[i], strlen(bad[i]), NULL, &g2, &e2) != CLLM_OK && e2.msg[0],
                  "bad grammar %zu accepted", i);
        cllm_gm_unref(g2);
    }
    const char *ch[] = {"positive", "negative", "neutral"};
    size_t cl[] = {8, 8, 7};
    CHECK(cllm_gm_from_choice(ch, cl, 3, NULL, &g, &e) == CLLM_OK);
    for (int rep = 0; rep < 5 && g; rep++) {
        size_t n;
        bool ended;
        char *o = gen(g, V_tiny, 30, true, &n, &ended);
        CHECK_MSG(!ended || !strcmp(o, "positive") || !strcmp(o, "negative") ||
                      !strcmp(o, "neutral"),
                  "choice out '%s'", o);
        free(o);
    }
    cllm_gm_unref(g);
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
                        "\"string\"},\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}},"
                        "\"required\":[\"city\"]}}},{\"type\":\"function\",\"function\":{\"name\":"
                        "\"noop\"}}]";
    g = NULL;
    CHECK_MSG(cllm_gm_from_tools(tools, strlen(tools), NULL, 1, 2, NULL, &g, &e) == CLLM_OK, "%s",
              e.msg);
    for (int rep = 0; rep < 4 && g; rep++) {
        size_t n;
        bool ended;
        char *o = gen(g, V_tiny, 80, true, &n, &ended);
        if (ended) CHECK_MSG(strstr(o, "<tool_call>\n<function=") == o, "tools out '%s'", o);
        free(o);
    }
    cllm_gm_unref(g);
}

/* tool_choice "none": no output may contain "<tool_call>", whichever tokens spell it. */
static void t_excluding(void) {
    cllm_gm *g = NULL;
    cllm_error e = {0};
    CHECK_MSG(cllm_gm_excluding("<tool_call>", 11, NULL, &g, &e) == CLLM_OK, "%s", e.msg);
    if (!g) return;
    static const struct {
        const char *s;
        bool ok;
    } cases[] = {
        {"", true},
        {"hello <tool_cal", true},
        {"<tool_call", true},
        {"<tool_callx> <<tool_cal>", true},
        {"a <b> </tool_call> <tool_call_>", true},
        {"<tool_call>", false},
        {"x<tool_call>", false},
        {"<<tool_call>", false},
        {"<tool_<tool_call>", false},
        {"<tool_call> trailing", false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        cllm_gm_matcher *m = cllm_gm_matcher_new(g, V_tiny);
        bool ok = cllm_gm_matcher_accept_bytes(m, cases[i].s, strlen(cases[i].s)) &&
                  cllm_gm_matcher_is_accepting(m);
        CHECK_MSG(ok == cases[i].ok, "excluding: '%s' %s", cases[i].s,
                  ok ? "accepted" : "rejected");
        cllm_gm_matcher_free(m);
    }
    /* masks == brute force on both vocabularies; the tiny tokenizer's <tool_call> token (an added,
     * non-special token with those bytes) is never allowed, and no output contains the text */
    int tc = TOK ? cllm_tok_token_id(TOK, "<tool_call>", 11) : -1;
    for (int rep = 0; rep < 6; rep++) {
        size_t n;
        bool ended;
        char *o = gen(g, rep & 1 ? V_syn : V_tiny, 40, true, &n, &ended);
        CHECK_MSG(!memmem(o, n, "<tool_call>", 11), "excluding out '%s'", o);
        free(o);
    }
    if (tc >= 0) {
        cllm_gm_matcher *m = cllm_gm_matcher_new(g, V_tiny);
        uint32_t *mask = calloc((size_t)(cllm_gm_vocab_size(V_tiny) + 31) / 32, 4);
        cllm_gm_matcher_mask(m, mask);
        CHECK_MSG(!(mask[tc >> 5] >> (tc & 31) & 1), "<tool_call> token %d allowed", tc);
        CHECK(cllm_gm_matcher_accept_bytes(m, "<tool_ca", 8));
        cllm_gm_matcher_mask(m, mask);
        int l = cllm_tok_token_id(TOK, "l", 1);
        if (l >= 0) CHECK_MSG(mask[l >> 5] >> (l & 31) & 1, "'l' after '<tool_ca' refused");
        free(mask);
        cllm_gm_matcher_free(m);
    }
    cllm_gm_unref(g);
    cllm_gm *g2 = NULL;
    CHECK(cllm_gm_excluding("abca", 4, NULL, &g2, &e) == CLLM_EINVAL && !g2);
    /* stacked quantifiers are ECMAScript's "nothing to repeat" (fuzz: a*+++... compiled for
     * seconds); a lazy ? after one quantifier stays allowed */
    static const char *const stacked[] = {"a**", "a*+", "_*++++++++", "a{2}*", "a+??"};
    for (size_t i = 0; i < sizeof(stacked) / sizeof(*stacked); i++) {
        cllm_gm *gs = NULL;
        cllm_status st = cllm_gm_from_regex(stacked[i], strlen(stacked[i]), NULL, &gs, &e);
        CHECK_MSG(st == CLLM_EINVAL && strstr(e.msg, "nothing to repeat"), "'%s': %d %s",
                  stacked[i], st, e.msg);
        cllm_gm_unref(gs);
    }
    cllm_gm *gl = NULL;
    CHECK(cllm_gm_from_regex("a+?b*?c{1,2}?", 13, NULL, &gl, &e) == CLLM_OK);
    cllm_gm_unref(gl);
    /* the compile cache: a hit is the same grammar, the least recently used goes first */
    cllm_gm_cache *c = cllm_gm_cache_new(2);
    cllm_gm *a = NULL, *b = NULL, *x = NULL;
    CHECK(cllm_gm_from_regex("a+", 2, NULL, &a, &e) == CLLM_OK);
    CHECK(cllm_gm_from_regex("b+", 2, NULL, &b, &e) == CLLM_OK);
    cllm_gm_cache_put(c, "ka", 2, a);
    cllm_gm_cache_put(c, "kb", 2, b);
    x = cllm_gm_cache_get(c, "ka", 2);
    CHECK(x == a);
    cllm_gm_unref(x);
    cllm_gm_cache_put(c, "kc", 2, a); /* evicts kb, used least recently */
    x = cllm_gm_cache_get(c, "kb", 2);
    CHECK(x == NULL);
    x = cllm_gm_cache_get(c, "kc", 2);
    CHECK(x == a);
    cllm_gm_unref(x);
    uint64_t hits = 0, misses = 0;
    cllm_gm_cache_stats(c, &hits, &misses);
    CHECK(hits == 2 && misses == 1);
    cllm_gm_unref(a);
    cllm_gm_unref(b);
    cllm_gm_cache_free(c);
}

static void t_refusals(void) {
    static const char *cases[][2] = {
        {"{\"type\":\"string\",\"not\":{\"const\":\"a\"}}", "'not' at #"},
        {"{\"properties\":{\"a\":{\"type\":\"integer\",\"multipleOf\":3}}}",
         "'multipleOf' at #/properties/a"},
        {"{\"type\":\"array\",\"items\":{\"type\":\"string\",\"format\":\"ipv6\"}}", "ipv6"},
        {"{\"type\":\"object\",\"patternProperties\":{\"^a\":{}}}", "'patternProperties' at #"},
        {"{\"$ref\":\"http://example.com/s.json\"}", "'$ref' at #"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreference"},
        {"{\"type\":\"object\",\"if\":{},\"then\":{}}", "'if' at #"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems' at #"},
        {"not json", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        cllm_gm *g = NULL;
        cllm_error e = {0};
        cllm_status st = cllm_gm_from_json_schema(cases[i][0], strlen(cases[i][0]), NULL, &g, &e);
        CHECK_MSG(st != CLLM_OK && strstr(e.msg, cases[i][1]), "schema %zu: st=%d msg='%s'", i, st,
                  e.msg);
        cllm_gm_unref(g);
    }
    /* depth cap */
    char deep[4000] = "";
    for (int i = 0; i < 100; i++) strcat(deep, "{\"type\":\"array\",\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 100; i++) strcat(deep, "}");
    cllm_gm *g = NULL;
    cllm_error e = {0};
    CHECK(cllm_gm_from_json_schema(deep, strlen(deep), NULL, &g, &e) == CLLM_ERANGE);
    /* size cap */
    const char *big = "{\"type\":\"string\",\"pattern\":\"^(((a{1000}){1000}){1000})$\"}";
    CHECK(cllm_gm_from_json_schema(big, strlen(big), NULL, &g, &e) == CLLM_ERANGE);
    CHECK(cllm_gm_from_regex("(a{5000}){5000}", 15, NULL, &g, &e) == CLLM_ERANGE);
}

int main(void) {
    const char *src = getenv("CLLM_SRC");
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/models/tiny", src ? src : ".");
    cllm_tok *tok = NULL;
    cllm_error e = {0};
    if (cllm_tok_load(dir, &tok, &e) != CLLM_OK) {
        fprintf(stderr, "tokenizer: %s\n", e.msg);
        return 1;
    }
    TOK = tok;
    int eos = cllm_tok_token_id(tok, "<|im_end|>", 10);
    n_vocab_tiny = cllm_tok_n_vocab(tok);
    EOS_TINY = eos;
    CHECK(cllm_gm_vocab_from_tok(tok, &eos, 1, &V_tiny, &e) == CLLM_OK);
    /* synthetic vocabulary: random short byte strings incl. UTF-8 pieces and JSON punctuation */
    int NS = 3000;
    char **b = malloc((size_t)NS * sizeof(char *));
    size_t *l = malloc((size_t)NS * sizeof(size_t));
    const char alpha[] = "{}[]\",:0123456789.-+eE abcdefnrtul\\/\xc3\xa9\xe2\x82\xac\n";
    for (int i = 0; i < NS; i++) {
        l[i] = 1 + (size_t)test_irand(i < 256 ? 1 : 5);
        b[i] = malloc(l[i]);
        for (size_t k = 0; k < l[i]; k++)
            b[i][k] = i < 256 && k == 0 ? (char)i : alpha[test_irand((int)sizeof(alpha) - 1)];
    }
    int seos = NS - 1;
    CHECK(cllm_gm_vocab_new((const char *const *)b, l, NULL, NS, &seos, 1, &V_syn, &e) == CLLM_OK);
    t_regex();
    t_schema_masks();
    t_dense_vocab();
    t_gbnf_choice_tools();
    t_refusals();
    t_excluding();
    for (int i = 0; i < NS; i++) free(b[i]);
    free(b), free(l);
    cllm_gm_vocab_free(V_tiny);
    cllm_gm_vocab_free(V_syn);
    cllm_tok_free(tok);
    return test_report("test_grammar");
}
