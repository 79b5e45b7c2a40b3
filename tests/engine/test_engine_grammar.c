/* Structured outputs in the scheduler (fake model, the tiny model's tokenizer): every sample's
 * text is in the grammar and ends with STOP; n > 1 samples, seeds, preemption by recompute (a
 * KV pool too small for the batch) and prefix caching give the same text as a run alone; a
 * max_tokens budget that ends mid-structure gives LENGTH with a valid prefix; the constraint
 * starts after grammar_after (</think>) and the thinking part stays free. */
#include <jansson.h>
#include <string.h>

#include "engine/sched_int.h"
#include "grammar/grammar.h"
#include "test.h"
#include "test_engine_fake.h"

static uint64_t next_id = 1;
static const cllm_tok *TOK;

static cllm_sampling sampling(cllm_gm *g, int max_tokens, int n, uint64_t seed) {
    cllm_sampling p;
    memset(&p, 0, sizeof(p));
    p.temperature = 1.0;
    p.top_p = 1;
    p.repetition_penalty = 1;
    p.max_tokens = max_tokens;
    p.logprobs = -1;
    p.n = n;
    p.seed = seed;
    p.has_seed = true;
    p.skip_special_tokens = true;
    p.grammar = g;
    return p;
}

static void submit(sched *s, const sched_cfg *c, const int32_t *prompt, int n, cllm_sampling sp,
                   fake_out *o) {
    cllm_request r = {(const int *)prompt, n, sp, fake_collect, o, NULL};
    eng_req *q;
    cllm_error err = {0};
    CHECK_MSG(sched_req_new(c, &r, next_id++, 0, &q, &err) == CLLM_OK, "%s", err.msg);
    if (q) sched_add(s, q);
}

static void run_all(sched *s) {
    for (int steps = 0; sched_has_work(s) && steps < 20000; steps++) {
        sched_step(s);
        const char *bad = sched_check(s);
        CHECK_MSG(!bad, "invariant: %s", bad ? bad : "");
        if (bad) break;
    }
}

/* text is a complete sentence of g (or, for LENGTH, a prefix of one) */
static bool in_grammar(cllm_gm *g, const char *text, size_t n, bool complete) {
    cllm_gm_matcher *m = cllm_gm_matcher_new(g, NULL);
    bool ok =
        cllm_gm_matcher_accept_bytes(m, text, n) && (!complete || cllm_gm_matcher_is_accepting(m));
    cllm_gm_matcher_free(m);
    return ok;
}

static void test_schema(int eos, int V) {
    const char *schema =
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},"
        "\"n\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":500},\"ok\":{\"type\":\"boolean\"}}"
        ","
        "\"required\":[\"name\",\"n\",\"ok\"]}";
    cllm_gm *g = NULL;
    cllm_error e = {0};
    CHECK(cllm_gm_from_json_schema(schema, strlen(schema), NULL, &g, &e) == CLLM_OK);
    if (!g) return;
    int32_t prompt[40];
    for (int i = 0; i < 40; i++) prompt[i] = (int32_t)((i * 37 + 11) % 3000);
    enum { R = 6, N = 3 };
    static fake_out alone[R][N], busy[R][N];
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: each request alone, roomy pool; pass 1: all at once in a pool that preempts */
        int nb = pass ? 48 : 512;
        fake_model f;
        fake_init(&f, V, nb, 4, 16 + 32, true);
        sched_cfg c = fake_cfg(V, nb, 4, 16, 64, true, true);
        c.max_model_len = 192;
        c.tok = TOK;
        c.eos_ids[0] = eos;
        c.n_eos = 1;
        sched *s = NULL;
        CHECK(sched_create(&c, &fake_ops, &f, &s, &e) == CLLM_OK);
        if (!s) return;
        fake_out(*out)[N] = pass ? busy : alone;
        memset(out, 0, sizeof(fake_out) * R * N);
        for (int r = 0; r < R; r++) {
            submit(s, &c, prompt, 20 + r, sampling(g, 150, N, 1000 + (uint64_t)r), out[r]);
            if (!pass) run_all(s);
        }
        run_all(s);
        if (pass) CHECK(s->stats.preemptions > 0);
        sched_free(s);
        fake_free(&f);
    }
    int stops = 0;
    for (int r = 0; r < R; r++)
        for (int k = 0; k < N; k++) {
            fake_out *a = &alone[r][k], *b = &busy[r][k];
            CHECK_MSG(a->text_len == b->text_len && !memcmp(a->text, b->text, a->text_len),
                      "request %d sample %d: alone '%s' vs busy '%s'", r, k, a->text, b->text);
            bool complete = a->fin == CLLM_FINISH_STOP;
            stops += complete;
            CHECK_MSG(complete || a->fin == CLLM_FINISH_LENGTH, "fin %d", a->fin);
            CHECK_MSG(in_grammar(g, a->text, a->text_len, complete), "'%s' not in grammar",
                      a->text);
            json_error_t je;
            if (complete) {
                json_t *j = json_loads(a->text, 0, &je);
                CHECK_MSG(json_is_object(j) && json_is_string(json_object_get(j, "name")) &&
                              json_is_integer(json_object_get(j, "n")) &&
                              json_integer_value(json_object_get(j, "n")) >= -5 &&
                              json_integer_value(json_object_get(j, "n")) <= 500,
                          "bad output %s", a->text);
                json_decref(j);
            }
        }
    CHECK(stops > 0);
    /* mid-structure budget: LENGTH and a valid prefix */
    fake_model f;
    fake_init(&f, V, 256, 4, 4 + 32, true);
    sched_cfg c = fake_cfg(V, 256, 4, 4, 64, true, true);
    c.tok = TOK;
    c.eos_ids[0] = eos;
    c.n_eos = 1;
    sched *s = NULL;
    sched_create(&c, &fake_ops, &f, &s, &e);
    static fake_out o[1];
    memset(o, 0, sizeof(o));
    submit(s, &c, prompt, 10, sampling(g, 3, 1, 7), o);
    run_all(s);
    CHECK(o[0].fin == CLLM_FINISH_LENGTH && in_grammar(g, o[0].text, o[0].text_len, false));
    sched_free(s);
    fake_free(&f);
    cllm_gm_unref(g);
}

/* Preparation takes its jobs in turn (issue 32, item 11): a small grammar queued behind a large
 * one is prepared, and its request admitted and finished, while the large one is still being
 * prepared (a FIFO thread prepared the small one only after the large one). The large one's
 * request then finishes too. */
static void test_prep_fair(int eos, int V) {
    json_t *props = json_object();
    for (int i = 0; i < 4000; i++) {
        char key[32];
        snprintf(key, sizeof(key), "field_%d", i);
        json_object_set_new(props, key, json_pack("{s:s}", "type", "integer"));
    }
    json_t *sch = json_pack("{s:s,s:o}", "type", "object", "properties", props);
    char *text = json_dumps(sch, JSON_COMPACT);
    json_decref(sch);
    cllm_gm *big = NULL, *small = NULL;
    cllm_error e = {0};
    CHECK_MSG(cllm_gm_from_json_schema(text, strlen(text), NULL, &big, &e) == CLLM_OK, "%s", e.msg);
    free(text);
    CHECK(cllm_gm_from_regex("(yes|no)", 8, NULL, &small, &e) == CLLM_OK);
    if (!big || !small) {
        cllm_gm_unref(big), cllm_gm_unref(small);
        return;
    }
    fake_model f;
    fake_init(&f, V, 256, 4, 16 + 32, true);
    sched_cfg c = fake_cfg(V, 256, 4, 16, 64, true, true);
    c.tok = TOK;
    c.eos_ids[0] = eos;
    c.n_eos = 1;
    sched *s = NULL;
    CHECK(sched_create(&c, &fake_ops, &f, &s, &e) == CLLM_OK);
    if (!s) return;
    int32_t prompt[8] = {11, 12, 13, 14, 15, 16, 17, 18};
    static fake_out ob[1], os[1];
    memset(ob, 0, sizeof(ob));
    memset(os, 0, sizeof(os));
    submit(s, &c, prompt, 8, sampling(big, 40, 1, 3), ob);
    submit(s, &c, prompt, 8, sampling(small, 10, 1, 4), os);
    bool big_first = false;
    for (int steps = 0; sched_has_work(s) && steps < 200000 && !os[0].fin; steps++) {
        sched_step(s);
        if (!sched_has_work(s)) break;
        if (!os[0].fin && !s->n_running) sched_gm_idle_wait(s, 0.005);
    }
    const cllm_gm_vocab *v = sched_gm_vocab(s);
    big_first = v && cllm_gm_is_prepared(big, v);
    CHECK_MSG(os[0].fin == CLLM_FINISH_STOP, "small request fin %d", os[0].fin);
    CHECK_MSG(!big_first, "the small grammar waited for the large one's whole preparation");
    CHECK_MSG(in_grammar(small, os[0].text, os[0].text_len, true), "'%s'", os[0].text);
    for (int steps = 0; sched_has_work(s) && steps < 200000; steps++) {
        sched_step(s);
        if (!s->n_running) sched_gm_idle_wait(s, 0.005);
    }
    CHECK_MSG(ob[0].fin == CLLM_FINISH_STOP || ob[0].fin == CLLM_FINISH_LENGTH, "big fin %d",
              ob[0].fin);
    CHECK_MSG(in_grammar(big, ob[0].text, ob[0].text_len, ob[0].fin == CLLM_FINISH_STOP), "'%s'",
              ob[0].text);
    sched_free(s);
    fake_free(&f);
    cllm_gm_unref(big);
    cllm_gm_unref(small);
}

/* A state past the matcher's caps ends the request with an error (issue 32, item 7): after
 * '{"s":"xxx...","a":' the array of 5,000 object shapes makes one stack per shape; the mask then
 * allows nothing, which used to read as "the structure is complete" and stop there. */
static void test_cap_error(int eos, int V) {
    json_t *any = json_array();
    for (int i = 0; i < 5000; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i);
        json_array_append_new(any,
                              json_pack("{s:s,s:{s:{s:s}},s:[s]}", "type", "object", "properties",
                                        key, "type", "integer", "required", key));
    }
    json_t *arr =
        json_pack("{s:s,s:{s:o},s:i}", "type", "array", "items", "anyOf", any, "minItems", 1);
    char pad[81]; /* a constant longer than the compile-time probe's walk (gm_match.c) */
    memset(pad, 'x', 80);
    pad[80] = 0;
    json_t *sch = json_pack("{s:s,s:{s:{s:s},s:o},s:[s,s]}", "type", "object", "properties", "s",
                            "const", pad, "a", arr, "required", "s", "a");
    char *text = json_dumps(sch, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(sch);
    cllm_gm *g = NULL;
    cllm_error e = {0};
    CHECK_MSG(cllm_gm_from_json_schema(text, strlen(text), NULL, &g, &e) == CLLM_OK, "%s", e.msg);
    free(text);
    if (!g) return;
    fake_model f;
    fake_init(&f, V, 256, 4, 16 + 32, true);
    sched_cfg c = fake_cfg(V, 256, 4, 16, 64, true, true);
    c.tok = TOK;
    c.eos_ids[0] = eos;
    c.n_eos = 1;
    sched *s = NULL;
    CHECK(sched_create(&c, &fake_ops, &f, &s, &e) == CLLM_OK);
    if (!s) return;
    int32_t prompt[8] = {21, 22, 23, 24, 25, 26, 27, 28};
    static fake_out o[1];
    memset(o, 0, sizeof(o));
    submit(s, &c, prompt, 8, sampling(g, 200, 1, 5), o);
    for (int steps = 0; sched_has_work(s) && steps < 200000; steps++) {
        sched_step(s);
        if (!s->n_running) sched_gm_idle_wait(s, 0.005);
    }
    CHECK_MSG(o[0].fin == CLLM_FINISH_ERROR && strstr(o[0].text, "\"a\":"),
              "fin %d after '%s' (want an error after '\"a\":', not a stop)", o[0].fin, o[0].text);
    sched_free(s);
    fake_free(&f);
    cllm_gm_unref(g);
}

/* The constraint starts after grammar_after: the free part is whatever the model says. */
static void test_after(int eos, int V) {
    const char *ch[] = {"yes", "no"};
    size_t cl[] = {3, 2};
    cllm_gm *g = NULL;
    cllm_error e = {0};
    CHECK(cllm_gm_from_choice(ch, cl, 2, NULL, &g, &e) == CLLM_OK);
    fake_model f;
    fake_init(&f, V, 256, 4, 4 + 32, true);
    sched_cfg c = fake_cfg(V, 256, 4, 4, 64, true, true);
    c.tok = TOK;
    c.eos_ids[0] = eos;
    c.n_eos = 1;
    sched *s = NULL;
    sched_create(&c, &fake_ops, &f, &s, &e);
    int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static fake_out o[1];
    int hits = 0;
    for (int seed = 0; seed < 40; seed++) {
        memset(o, 0, sizeof(o));
        cllm_sampling sp = sampling(g, 12, 1, (uint64_t)seed);
        /* a frequent token of the fake model's output as the "</think>" marker */
        sp.grammar_after = 0;
        submit(s, &c, prompt, 8, sp, o);
        run_all(s);
        CHECK(o[0].fin == CLLM_FINISH_STOP);
        CHECK_MSG(!strcmp(o[0].text, "yes") || !strcmp(o[0].text, "no"), "'%s'", o[0].text);
        /* now with a marker: tokens before it are free */
        memset(o, 0, sizeof(o));
        sp.grammar_after = 1 + seed % 50;
        sp.temperature = 0; /* greedy, so the free part is the fake's fixed continuation */
        submit(s, &c, prompt, 8, sp, o);
        run_all(s);
        int at = -1;
        for (int i = 0; i < o[0].n; i++)
            if (o[0].toks[i] == sp.grammar_after) {
                at = i;
                break;
            }
        if (at >= 0) {
            hits++;
            size_t tl = 0;
            char tail[64] = "";
            for (int i = at + 1; i < o[0].n; i++) {
                size_t l;
                const char *b = cllm_tok_token_bytes(TOK, o[0].toks[i], &l);
                if (o[0].toks[i] != eos && b && tl + l < sizeof(tail))
                    memcpy(tail + tl, b, l), tl += l;
            }
            tail[tl] = 0;
            CHECK_MSG(!strcmp(tail, "yes") || !strcmp(tail, "no"), "after marker: '%s'", tail);
        }
    }
    (void)hits;
    sched_free(s);
    fake_free(&f);
    cllm_gm_unref(g);
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
    int eos = cllm_tok_token_id(tok, "<|im_end|>", 10), V = cllm_tok_n_vocab(tok);
    test_schema(eos, V);
    test_after(eos, V);
    test_prep_fair(eos, V);
    test_cap_error(eos, V);
    cllm_tok_free(tok);
    return test_report("test_engine_grammar");
}
