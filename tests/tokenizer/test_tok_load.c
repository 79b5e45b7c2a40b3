/* Tokenizer loading and pipeline pieces on small hand-written tokenizer.json files (no npm
 * needed): merges in both forms, ignore_merges, added-token flags (lstrip/rstrip/single_word,
 * special vs not), split behaviours, TemplateProcessing, and malformed or unsupported files
 * failing with a status instead of crashing. */
#include "test.h"
#include "test_tok_common.h"

/* Byte-level vocab: single bytes a,b,c,space(Ġ) + merges. */
static const char *TOK_FMT =
    "{\"added_tokens\":[{\"id\":10,\"content\":\"<s>\",\"special\":true,\"normalized\":false},"
    "{\"id\":11,\"content\":\"<x>\",\"special\":false,\"normalized\":false,\"lstrip\":true,"
    "\"rstrip\":true},"
    "{\"id\":12,\"content\":\"ab\",\"special\":false,\"normalized\":false,\"single_word\":true}],"
    "\"normalizer\":{\"type\":\"NFC\"},"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{"
    "\"Regex\":\"%s\"},"
    "\"behavior\":\"%s\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
    "\"use_regex\":false}]},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<"
    "s>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\","
    "\"ids\":[10],\"tokens\":[\"<s>\"]}}},"
    "\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"model\":{\"type\":\"BPE\",\"ignore_merges\":%s,\"vocab\":{\"a\":0,\"b\":1,\"c\":2,"
    "\"\\u0120\":3,\"ab\":4,\"abc\":5,"
    "\"\\u0120a\":6,\"ca\":7,\"cab\":8},\"merges\":[\"a b\",[\"ab\",\"c\"],\"\\u0120 a\",\"c "
    "a\"]}}";

static cllm_tok *mk(const char *regex, const char *behavior, const char *ignore) {
    char buf[4096];
    snprintf(buf, sizeof(buf), TOK_FMT, regex, behavior, ignore);
    cllm_tok *tok = NULL;
    cllm_error err = {0};
    if (cllm_tok_load_mem(buf, strlen(buf), NULL, 0, &tok, &err))
        fprintf(stderr, "load: %s\n", err.msg);
    return tok;
}

static int enc(cllm_tok *tok, const char *s, int flags, int32_t *out, int cap) {
    cllm_tok_ids v = {0};
    if (cllm_tok_encode(tok, s, strlen(s), flags, &v, NULL)) return -1;
    int n = (int)v.n < cap ? (int)v.n : cap;
    memcpy(out, v.ids, (size_t)n * sizeof(int32_t));
    cllm_tok_ids_free(&v);
    return n;
}

#define EXPECT_IDS(tok, s, flags, ...)                                                             \
    do {                                                                                           \
        int32_t want[] = {__VA_ARGS__}, got[64];                                                   \
        int n = enc(tok, s, flags, got, 64), nw = (int)(sizeof(want) / sizeof(*want));             \
        bool same = n == nw && !memcmp(got, want, sizeof(want));                                   \
        CHECK_MSG(same, "encode [%s]: got %d ids, first %d", s, n, n > 0 ? got[0] : -1);           \
    } while (0)

int main(void) {
    cllm_tok *t = mk(" ?[a-z]+", "Isolated", "false");
    CHECK(t != NULL);
    if (t) {
        EXPECT_IDS(t, "abc", 0, 5);    /* a b -> ab, ab c -> abc */
        EXPECT_IDS(t, "cab", 0, 2, 4); /* a b (rank 0) wins over c a (rank 3) */
        EXPECT_IDS(t, "abc", CLLM_TOK_ADD_SPECIAL, 10, 5);
        EXPECT_IDS(t, "c<s>c", 0, 2, 10, 2);                  /* added special token inside text */
        EXPECT_IDS(t, "c<s>c", CLLM_TOK_SPLIT_SPECIAL, 2, 2); /* '<','s','>' are not in the vocab */
        EXPECT_IDS(t, "c  <x>  c", 0, 2, 11, 2);              /* lstrip/rstrip swallow the spaces */
        EXPECT_IDS(t, "c ab c", 0, 2, 3, 12, 3, 2);           /* single_word: ab matches alone */
        EXPECT_IDS(t, "cabc", 0, 2, 5); /* ...but not inside a word: plain BPE */
        CHECK(cllm_tok_token_id(t, "<x>", 3) == 11 && cllm_tok_token_id(t, " a", 2) == 6);
        CHECK(cllm_tok_is_special(t, 10) && !cllm_tok_is_special(t, 11) &&
              cllm_tok_is_added(t, 11));
        char *s;
        size_t sl;
        int32_t ids[] = {10, 6, 11, 5};
        CHECK(cllm_tok_decode(t, ids, 4, true, &s, &sl, NULL) == CLLM_OK && !strcmp(s, " a<x>abc"));
        free(s);
        CHECK(cllm_tok_decode(t, (int32_t[]){99}, 1, false, &s, &sl, NULL) == CLLM_ERANGE);
        cllm_tok_free(t);
    }
    t = mk(" ?[a-z]+", "Isolated", "true");
    if (t) {
        EXPECT_IDS(t, "cab", 0, 8); /* ignore_merges: a word in the vocab is taken whole */
        cllm_tok_free(t);
    }
    /* Split behaviours on "a-b-c" with pattern "-" */
    t = mk("-", "Removed", "false");
    if (t) {
        EXPECT_IDS(t, "a-b", 0, 0, 1);
        cllm_tok_free(t);
    }
    /* Malformed and unsupported files fail with a status. */
    const char *bad[] = {
        "",
        "{",
        "[]",
        "{\"model\":{}}",
        "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[\"a b\"]}}",
        "{\"model\":{\"type\":\"Unigram\",\"vocab\":[]}}",
        "{\"model\":{\"vocab\":{\"a\":-5},\"merges\":[]}}",
        "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"pre_tokenizer\":{\"type\":\"Split\","
        "\"pattern\":{\"Regex\":\"(\"}}}",
        "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"normalizer\":{\"type\":\"Precompiled\"}}",
        "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},\"added_tokens\":[{\"id\":1}]}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        cllm_tok *b = NULL;
        cllm_error err = {0};
        cllm_status st = cllm_tok_load_mem(bad[i], strlen(bad[i]), NULL, 0, &b, &err);
        CHECK_MSG(st != CLLM_OK && b == NULL && err.msg[0], "bad[%zu] loaded", i);
    }
    cllm_tok *b = NULL;
    cllm_error err = {0};
    CHECK(cllm_tok_load("/nonexistent-dir", &b, &err) == CLLM_ENOTFOUND &&
          strstr(err.msg, "tokenizer.json"));
    return test_report("test_tok_load");
}
