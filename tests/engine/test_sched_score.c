/* Scoring requests in the scheduler over the fake model. Prompt logprobs (src/engine/
 * sched_score.c): every row equals an independent computation from the fake logits
 * (log-softmax, rank, top N); chunked prefill, a cached prefix, preemption, concurrent scoring
 * requests beyond the step's row budget and n > 1 give the same rows, delivered once; the
 * generated tokens do not change. Embeddings (sampling.embed, sched_out.c): one final event
 * with the last token's hidden row, beside generating requests, cold or from the cache. */
#include <string.h>

#include "test.h"
#include "test_engine_fake.h"
#include "engine/sched_int.h"

typedef struct score_out {
    fake_out o[2];
    cllm_prompt_logprob *plp;
    int n_plp, top, deliveries;
    float emb[64];
    int n_emb, emb_events;
} score_out;

static void score_collect(void *user, const cllm_event *ev) {
    score_out *so = user;
    if (ev->prompt_lp || ev->n_prompt_lp) {
        so->deliveries++;
        size_t n = (size_t)ev->n_prompt_lp * (size_t)(ev->n_prompt_top + 1);
        free(so->plp);
        so->plp = malloc((n ? n : 1) * sizeof(cllm_prompt_logprob));
        memcpy(so->plp, ev->prompt_lp, n * sizeof(cllm_prompt_logprob));
        so->n_plp = ev->n_prompt_lp;
        so->top = ev->n_prompt_top;
    }
    if (ev->embedding) {
        so->emb_events++;
        so->n_emb = ev->n_embedding < 64 ? ev->n_embedding : 64;
        memcpy(so->emb, ev->embedding, (size_t)so->n_emb * sizeof(float));
    }
    fake_collect(so->o, ev);
}

static cllm_sampling greedy(int max_tokens, int prompt_top) {
    cllm_sampling p = fake_greedy(max_tokens);
    p.has_prompt_logprobs = prompt_top >= 0;
    p.prompt_logprobs = prompt_top >= 0 ? prompt_top : 0;
    return p;
}

static uint64_t next_id = 1;
static void submit(sched *s, const sched_cfg *c, const int32_t *prompt, int n, cllm_sampling sp,
                   score_out *o) {
    cllm_request r = {(const int *)prompt, n, sp, score_collect, o, NULL};
    eng_req *q;
    cllm_error err = {0};
    CHECK_MSG(sched_req_new(c, &r, next_id++, 0, &q, &err) == CLLM_OK, "%s", err.msg);
    sched_add(s, q);
}

static int run_all(sched *s) {
    int steps = 0, bad = 0;
    while (sched_has_work(s) && steps < 100000) {
        sched_step(s);
        steps++;
        const char *b = sched_check(s);
        if (b && bad++ < 3) fprintf(stderr, "invariant after step %d: %s\n", steps, b);
    }
    CHECK(bad == 0);
    return steps;
}

/* The expected entry of prompt token j (j >= 1): from the fake logits after tokens 0..j-1. */
static void expect_row(int V, const int32_t *prompt, int j, int top, cllm_prompt_logprob *out) {
    uint64_t h = 0;
    for (int i = 0; i < j; i++) h = fake_fold(h, prompt[i]);
    float *x = malloc((size_t)V * sizeof(float));
    fake_logits(V, h, x);
    double mx = x[0], sum = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > mx) mx = x[i];
    for (int i = 0; i < V; i++) sum += exp(x[i] - mx);
    double lse = mx + log(sum);
    int tok = prompt[j], rank = 0;
    for (int i = 0; i < V; i++) rank += x[i] >= x[tok];
    out[0] = (cllm_prompt_logprob){tok, rank, x[tok] - lse};
    /* top N by repeated selection: the best not yet taken, lowest id on ties */
    char *taken = calloc((size_t)V, 1);
    for (int k = 0; k < top && k < V; k++) {
        int b = -1;
        for (int i = 0; i < V; i++)
            if (!taken[i] && (b < 0 || x[i] > x[b])) b = i;
        taken[b] = 1;
        out[1 + k] = (cllm_prompt_logprob){b, k + 1, x[b] - lse};
    }
    free(taken);
    free(x);
}

static int rows_differ(int V, const int32_t *prompt, int n, int top, const score_out *so) {
    if (so->deliveries != 1 || so->n_plp != n - 1 || so->top != top) return -2;
    cllm_prompt_logprob *want = malloc((size_t)(top + 1) * sizeof(*want));
    int bad = -1;
    for (int j = 1; j < n && bad < 0; j++) {
        expect_row(V, prompt, j, top, want);
        const cllm_prompt_logprob *got = so->plp + (size_t)(j - 1) * (size_t)(top + 1);
        for (int k = 0; k <= top; k++)
            if (got[k].token != want[k].token || got[k].rank != want[k].rank ||
                got[k].logprob != want[k].logprob)
                bad = j;
    }
    free(want);
    return bad;
}

static void fill(int32_t *p, int n, int V, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (int32_t)((seed >> 8) % (uint32_t)V);
    }
}

/* One request alone, whole-prompt and 8-token chunks, hybrid or not, top 0 and top 5; the
 * generated tokens equal those of the same request without prompt logprobs. */
static void test_alone(void) {
    int V = 97;
    int32_t prompt[45];
    fill(prompt, 45, V, 7);
    int budgets[] = {2048, 8};
    for (int hs = 0; hs < 2; hs++)
        for (int bi = 0; bi < 2; bi++)
            for (int top = 0; top <= 5; top += 5) {
                fake_model f;
                fake_init(&f, V, 64, 4, 4 + 32, hs);
                sched_cfg c = fake_cfg(V, 64, 4, 4, budgets[bi], hs, true);
                sched *s;
                CHECK(sched_create(&c, &fake_ops, &f, &s, NULL) == CLLM_OK);
                score_out so = {0}, plain = {0};
                submit(s, &c, prompt, 45, greedy(6, top), &so);
                run_all(s);
                submit(s, &c, prompt, 45, greedy(6, -1), &plain);
                run_all(s);
                int d = rows_differ(V, prompt, 45, top, &so);
                CHECK_MSG(d == -1, "state %d budget %d top %d: row %d", hs, budgets[bi], top, d);
                CHECK(so.o[0].n == 6 && plain.o[0].n == 6 &&
                      !memcmp(so.o[0].toks, plain.o[0].toks, 6 * sizeof(int32_t)));
                CHECK(f.all_rows >= 45 && f.errors == 0);
                CHECK(plain.deliveries == 0 && plain.o[0].cached > 0); /* its blocks were kept */
                free(so.plp);
                sched_free(s);
                fake_free(&f);
            }
}

/* A prompt whose prefix is cached still gets every row (the scoring request computes it all). */
static void test_cached_prefix(void) {
    int V = 61;
    int32_t prompt[40];
    fill(prompt, 40, V, 11);
    fake_model f;
    fake_init(&f, V, 64, 4, 4 + 32, true);
    sched_cfg c = fake_cfg(V, 64, 4, 4, 2048, true, true);
    sched *s;
    CHECK(sched_create(&c, &fake_ops, &f, &s, NULL) == CLLM_OK);
    score_out warm = {0}, so = {0};
    submit(s, &c, prompt, 40, greedy(2, -1), &warm);
    run_all(s);
    submit(s, &c, prompt, 40, greedy(1, 3), &so);
    run_all(s);
    CHECK_MSG(rows_differ(V, prompt, 40, 3, &so) == -1, "rows after a cached prefix");
    CHECK(so.o[0].cached == 0 && so.o[0].n == 1);
    free(so.plp);
    sched_free(s);
    fake_free(&f);
}

/* Several scoring requests at once on a vocabulary whose rows fill the step's row budget
 * (64 MiB / 4 bytes / 2^18 = 64 rows), in a KV pool small enough to preempt, with n = 2. */
static void test_crowd(void) {
    int V = 1 << 18, N = 4, L = 50;
    int32_t prompts[4][50];
    for (int i = 0; i < N; i++) fill(prompts[i], L, V, 100 + (uint32_t)i);
    fake_model f;
    fake_init(&f, V, 40, 4, 4 + 32, true);
    sched_cfg c = fake_cfg(V, 40, 4, 4, 256, true, true);
    sched *s;
    CHECK(sched_create(&c, &fake_ops, &f, &s, NULL) == CLLM_OK);
    score_out so[4];
    memset(so, 0, sizeof(so));
    for (int i = 0; i < N; i++) {
        cllm_sampling sp = greedy(12, 2);
        if (i == 1) sp.n = 2;
        submit(s, &c, prompts[i], L, sp, &so[i]);
    }
    run_all(s);
    cllm_engine_stats st;
    sched_stats(s, &st);
    CHECK_MSG(s->score_rows == 64, "score rows %d", s->score_rows);
    for (int i = 0; i < N; i++) {
        int d = rows_differ(V, prompts[i], L, 2, &so[i]);
        CHECK_MSG(d == -1, "crowd request %d: row %d", i, d);
        int32_t exp[12];
        fake_expected(V, prompts[i], L, 12, exp);
        for (int k = 0; k < (i == 1 ? 2 : 1); k++)
            CHECK(so[i].o[k].n == 12 && !memcmp(so[i].o[k].toks, exp, sizeof(exp)));
        free(so[i].plp);
    }
    CHECK_MSG(f.errors == 0, "fake model: %s", f.last_error);
    CHECK(st.kv_blocks_used == 0);
    fprintf(stderr, "crowd: %llu preemptions\n", (unsigned long long)st.preemptions);
    sched_free(s);
    fake_free(&f);
}

/* A one-token prompt has nothing to score: the event says so (no rows) once. */
static void test_one_token(void) {
    fake_model f;
    fake_init(&f, 31, 16, 4, 2 + 32, false);
    sched_cfg c = fake_cfg(31, 16, 4, 2, 64, false, true);
    sched *s;
    CHECK(sched_create(&c, &fake_ops, &f, &s, NULL) == CLLM_OK);
    int32_t p[1] = {5};
    score_out so = {0};
    submit(s, &c, p, 1, greedy(3, 4), &so);
    run_all(s);
    CHECK(so.n_plp == 0 && so.o[0].n == 3 && f.all_rows == 0); /* no rows asked for */
    free(so.plp);
    sched_free(s);
    fake_free(&f);
}

static void test_validation(void) {
    sched_cfg c = fake_cfg(31, 16, 4, 2, 64, false, true);
    int32_t p[3] = {1, 2, 3};
    cllm_request r = {(const int *)p, 3, greedy(1, 32), score_collect, NULL, NULL};
    eng_req *q = NULL;
    cllm_error err = {0};
    CHECK(sched_req_new(&c, &r, 1, 0, &q, &err) == CLLM_EINVAL && strstr(err.msg, "prompt_logp"));
    r.sampling.prompt_logprobs = -1;
    CHECK(sched_req_new(&c, &r, 1, 0, &q, &err) == CLLM_EINVAL);
}

/* Embedding requests between generating ones: the vector is the fake hidden row after the
 * prompt (cold and with the prefix cached), nothing is sampled, the generation is unchanged. */
static void test_embed(void) {
    int V = 53, H = 16;
    fake_model f;
    fake_init(&f, V, 64, 4, 4 + 32, true);
    sched_cfg c = fake_cfg(V, 64, 4, 4, 16, true, true);
    c.hidden_size = H;
    sched *s;
    CHECK(sched_create(&c, &fake_ops, &f, &s, NULL) == CLLM_OK);
    int32_t p[30], q[12];
    fill(p, 30, V, 5);
    fill(q, 12, V, 6);
    for (int round = 0; round < 2; round++) { /* the second finds the prompt cached */
        score_out e = {0}, g = {0};
        cllm_sampling sp = greedy(1, -1);
        sp.embed = true;
        submit(s, &c, q, 12, greedy(8, -1), &g);
        submit(s, &c, p, 30, sp, &e);
        run_all(s);
        uint64_t h = 0;
        for (int i = 0; i < 30; i++) h = fake_fold(h, p[i]);
        float want[53];
        fake_logits(V, h, want);
        CHECK_MSG(e.emb_events == 1 && e.n_emb == H && !memcmp(e.emb, want, (size_t)H * 4),
                  "round %d: %d events, %d floats", round, e.emb_events, e.n_emb);
        CHECK(e.o[0].n == 0 && e.o[0].fin == CLLM_FINISH_STOP && e.o[0].prompt_tokens == 30);
        CHECK(round == 0 || e.o[0].cached > 0);
        int32_t exp[8];
        fake_expected(V, q, 12, 8, exp);
        CHECK(g.o[0].n == 8 && !memcmp(g.o[0].toks, exp, sizeof(exp)));
    }
    CHECK_MSG(f.errors == 0, "fake model: %s", f.last_error);
    cllm_request r = {(const int *)p, 30, greedy(1, -1), score_collect, NULL, NULL};
    r.sampling.embed = true;
    r.sampling.n = 2;
    eng_req *rq = NULL;
    cllm_error err = {0};
    CHECK(sched_req_new(&c, &r, 99, 0, &rq, &err) == CLLM_EINVAL); /* one sample only */
    sched_free(s);
    fake_free(&f);
}

int main(void) {
    test_embed();
    test_alone();
    test_cached_prefix();
    test_crowd();
    test_one_token();
    test_validation();
    return test_report("test_sched_score");
}
