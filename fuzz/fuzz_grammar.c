/* libFuzzer target: the structured-output compilers on arbitrary input. The first byte picks the
 * front end (JSON Schema, regex, GBNF, tools, choice) and the whitespace option; the rest is the
 * source. A compiled grammar is then driven over a small synthetic vocabulary: masks (cached
 * path) must equal the brute-force masks, and a few allowed tokens are accepted. Must never
 * crash, leak or hang; errors are fine. Caps are kept small so one input stays fast.
 * CLLM_FUZZ_FRONT=0..4 pins the front end (so each compiler gets a whole run of its own); the
 * first byte then still picks the options. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

static cllm_gm_vocab *vocab(void) {
    static cllm_gm_vocab *v;
    if (v) return v;
    static const char *toks[] = {
        "{",   "}",        "[",    "]",     "\"",   ",",  ":",           " ",
        "\n",  "a",        "b",    "ab",    "0",    "1",  "12",          "-",
        ".",   "e",        "true", "false", "null", "\\", "\"a\"",       "{\"",
        "\":", "\xc3\xa9", "\xc3", "\xa9",  "x\"",  "<",  "<tool_call>", "</tool_call>",
        "=",   ">",        "fun",  "\"}"};
    int n = (int)(sizeof(toks) / sizeof(*toks));
    size_t lens[64];
    for (int i = 0; i < n; i++) lens[i] = strlen(toks[i]);
    int eos = n; /* one extra id: EOS */
    const char *b[64];
    memcpy(b, toks, sizeof(toks));
    b[n] = NULL;
    lens[n] = 0;
    cllm_gm_vocab_new(b, lens, NULL, n + 1, &eos, 1, &v, NULL);
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    cllm_gm_opts o = {.any_whitespace = data[0] & 8,
                      .max_nodes = 20000,
                      .max_schema_nodes = 500,
                      .max_schema_depth = 16,
                      .max_source = 4096};
    cllm_gm *g = NULL;
    cllm_error e = {0};
    static int front = -2;
    if (front == -2) {
        const char *f = getenv("CLLM_FUZZ_FRONT");
        front = f && *f >= '0' && *f <= '4' ? *f - '0' : -1;
    }
    switch (front >= 0 ? front : data[0] % 5) {
    case 0:
        cllm_gm_from_json_schema(s, n, &o, &g, &e);
        break;
    case 1:
        cllm_gm_from_regex(s, n, &o, &g, &e);
        break;
    case 2:
        cllm_gm_from_gbnf(s, n, &o, &g, &e);
        break;
    case 3:
        cllm_gm_from_tools(s, n, data[0] & 16 ? "f" : NULL, 1, data[0] & 32 ? 1 : -1, &o, &g, &e);
        break;
    default: {
        const char *ch[4];
        size_t l[4];
        int k = 0;
        size_t st = 0;
        for (size_t i = 0; i <= n && k < 4; i++)
            if (i == n || s[i] == '|') ch[k] = s + st, l[k++] = i - st, st = i + 1;
        cllm_gm_from_choice(ch, l, k, &o, &g, &e);
    }
    }
    if (!g) return 0;
    cllm_gm_vocab *v = vocab();
    cllm_gm_matcher *m = v ? cllm_gm_matcher_new(g, v) : NULL;
    uint32_t a[4], b[4];
    for (int step = 0; m && step < 8; step++) {
        int c1 = cllm_gm_matcher_mask(m, a), c2 = cllm_gm_matcher_mask_slow(m, b);
        if (c1 != c2 ||
            memcmp(a, b, sizeof(uint32_t) * (size_t)((cllm_gm_vocab_size(v) + 31) / 32))) {
            /* the cached mask must be exact, unless the brute force hit a stack cap (it steps the
             * whole state; the caches were built one stack at a time) */
            if (cllm_gm_matcher_hit_cap(m)) break;
            abort();
        }
        if (c1 <= 0) break;
        int pick = (int)(data[step % size] % (unsigned)c1), t = 0;
        for (t = 0; t < cllm_gm_vocab_size(v); t++)
            if (a[t >> 5] >> (t & 31) & 1 && pick-- == 0) break;
        if (!cllm_gm_matcher_accept_token(m, t) && !cllm_gm_matcher_hit_cap(m))
            abort(); /* an allowed token must advance (unless a cap refused it) */
    }
    cllm_gm_matcher_free(m);
    cllm_gm_unref(g);
    return 0;
}
