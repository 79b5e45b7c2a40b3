/* Scheduler tests over the fake model (test_engine_fake.h): concurrent == alone == the known
 * greedy continuation, preemption and resume, prefix-cache hits on the hybrid path (state
 * snapshots) including multi-turn, n > 1 forks, cancel, and a randomized stress run with the
 * invariant check after every step. */
#include <string.h>

#include "test.h"
#include "test_engine_fake.h"
#include "engine/sched_int.h"

static uint64_t rng_state = 12345;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static int rnd_in(int lo, int hi) {
    return lo + (int)(rnd() % (uint32_t)(hi - lo + 1));
}

static cllm_sampling greedy(int max_tokens) {
    return fake_greedy(max_tokens);
}

static uint64_t next_id = 1;

static bool submit(sched *s, const sched_cfg *c, const int32_t *prompt, int n, cllm_sampling sp,
                   fake_out *o, const char *salt) {
    cllm_request r = {(const int *)prompt, n, sp, fake_collect, o, salt};
    eng_req *q;
    cllm_error err = {0};
    if (sched_req_new(c, &r, next_id++, 0, &q, &err) != CLLM_OK) {
        fprintf(stderr, "submit: %s\n", err.msg);
        return false;
    }
    sched_add(s, q);
    return true;
}

static int bad_checks;
static int run_all(sched *s, int max_steps) {
    int steps = 0;
    while (sched_has_work(s) && steps < max_steps) {
        sched_step(s);
        steps++;
        const char *bad = sched_check(s);
        if (bad) {
            if (bad_checks++ < 5) fprintf(stderr, "invariant after step %d: %s\n", steps, bad);
        }
    }
    return steps;
}

static void rand_prompt(int32_t *p, int n, int V) {
    for (int i = 0; i < n; i++) p[i] = (int32_t)(rnd() % (uint32_t)(V - 1));
}

static bool same(const int32_t *a, const int32_t *b, int n) {
    return memcmp(a, b, (size_t)n * sizeof(int32_t)) == 0;
}

/* N requests at once (queued beyond max_num_seqs, chunked prefill) == each alone == expected. */
static void test_concurrent(bool has_state, bool caching) {
    enum { N = 8, V = 200 };
    int32_t prompts[N][80], lens[N], maxt[N];
    for (int i = 0; i < N; i++) {
        lens[i] = rnd_in(3, 75);
        maxt[i] = rnd_in(1, 40);
        rand_prompt(prompts[i], lens[i], V);
    }
    fake_model f;
    fake_init(&f, V, 256, 4, 4 + 32, has_state);
    sched_cfg c = fake_cfg(V, 256, 4, 4, 32, has_state, caching);
    sched *s;
    CHECK(sched_create(&c, &fake_ops, &f, &s, NULL) == CLLM_OK);
    static fake_out outs[N];
    memset(outs, 0, sizeof(outs));
    for (int i = 0; i < N; i++)
        CHECK(submit(s, &c, prompts[i], lens[i], greedy(maxt[i]), &outs[i], NULL));
    run_all(s, 10000);
    CHECK(f.max_seqs_in_batch > 1);
    for (int i = 0; i < N; i++) {
        int32_t exp[64];
        fake_expected(V, prompts[i], lens[i], maxt[i], exp);
        CHECK_MSG(outs[i].n == maxt[i] && same(outs[i].toks, exp, maxt[i]), "request %d: %d tokens",
                  i, outs[i].n);
        CHECK(outs[i].fin == CLLM_FINISH_LENGTH);
        CHECK(outs[i].completion_tokens == maxt[i] && outs[i].prompt_tokens == lens[i]);
    }
    /* alone, in a fresh scheduler */
    for (int i = 0; i < 2; i++) {
        sched *s1;
        fake_model f1;
        fake_init(&f1, V, 256, 4, 4 + 32, has_state);
        CHECK(sched_create(&c, &fake_ops, &f1, &s1, NULL) == CLLM_OK);
        fake_out o;
        memset(&o, 0, sizeof(o));
        submit(s1, &c, prompts[i], lens[i], greedy(maxt[i]), &o, NULL);
        run_all(s1, 10000);
        CHECK(o.n == outs[i].n && same(o.toks, outs[i].toks, o.n));
        CHECK(f1.errors == 0);
        sched_free(s1);
        fake_free(&f1);
    }
    CHECK_MSG(f.errors == 0, "fake model: %s", f.last_error);
    cllm_engine_stats st;
    sched_stats(s, &st);
    CHECK(st.kv_blocks_used == 0 && st.state_slots_used == 0 && st.running == 0 && st.waiting == 0);
    sched_free(s);
    fake_free(&f);
}

/* A pool too small for everyone: preemptions happen, outputs stay exact. */
static void test_preempt(bool has_state, bool caching) {
    enum { N = 6, V = 150 };
    int32_t prompts[N][40], lens[N];
    for (int i = 0; i < N; i++) {
        lens[i] = rnd_in(10, 30);
        rand_prompt(prompts[i], lens[i], V);
    }
    int nb = 30, bs = 4; /* 120 tokens; each request needs up to 30 + 40 = 70 */
    fake_model f;
    fake_init(&f, V, nb, bs, 6 + 32, has_state);
    sched_cfg c = fake_cfg(V, nb, bs, 6, 64, has_state, caching);
    sched *s;
    CHECK(sched_create(&c, &fake_ops, &f, &s, NULL) == CLLM_OK);
    static fake_out outs[N];
    memset(outs, 0, sizeof(outs));
    for (int i = 0; i < N; i++) submit(s, &c, prompts[i], lens[i], greedy(40), &outs[i], NULL);
    run_all(s, 20000);
    cllm_engine_stats st;
    sched_stats(s, &st);
    CHECK_MSG(st.preemptions > 0, "no preemption happened");
    for (int i = 0; i < N; i++) {
        int32_t exp[40];
        fake_expected(V, prompts[i], lens[i], 40, exp);
        CHECK_MSG(outs[i].n == 40 && same(outs[i].toks, exp, 40),
                  "preempt: request %d differs (%d tokens)", i, outs[i].n);
    }
    CHECK_MSG(f.errors == 0, "fake model: %s", f.last_error);
    CHECK(st.kv_blocks_used == 0);
    sched_free(s);
    fake_free(&f);
}

/* Multi-turn chat on the hybrid path: turn N+1 = turn N prompt + answer + new message. */
static void test_prefix_multiturn(void) {
    enum { V = 300, TURNS = 5 };
    int bs = 4;
    fake_model f;
    fake_init(&f, V, 512, bs, 4 + 32, true);
    sched_cfg c = fake_cfg(V, 512, bs, 4, 64, true, true);
    sched *s;
    CHECK(sched_create(&c, &fake_ops, &f, &s, NULL) == CLLM_OK);
    int32_t conv[1024];
    int n = rnd_in(20, 40);
    rand_prompt(conv, n, V);
    uint64_t shared = 0, reused = 0;
    for (int t = 0; t < TURNS; t++) {
        fake_out o;
        memset(&o, 0, sizeof(o));
        int mt = rnd_in(5, 25);
        submit(s, &c, conv, n, greedy(mt), &o, NULL);
        run_all(s, 10000);
        int32_t exp[32];
        fake_expected(V, conv, n, mt, exp);
        CHECK_MSG(o.n == mt && same(o.toks, exp, mt), "turn %d output differs from the cold run",
                  t);
        if (t > 0) reused += (uint64_t)o.cached;
        /* a cache_salt isolates: same prompt, other salt, no hit */
        if (t == TURNS - 1) {
            fake_out o2;
            memset(&o2, 0, sizeof(o2));
            submit(s, &c, conv, n, greedy(mt), &o2, "tenant-b");
            run_all(s, 10000);
            CHECK(o2.cached == 0 && same(o2.toks, exp, mt));
        }
        memcpy(conv + n, o.toks, (size_t)o.n * sizeof(int32_t));
        int prev = n + o.n;
        if (t < TURNS - 1) shared += (uint64_t)prev;
        int add = rnd_in(3, 15);
        rand_prompt(conv + prev, add, V);
        n = prev + add;
    }
    double share = (double)reused / (double)shared;
    fprintf(stderr,
            "multi-turn (fake, block 4): reused %llu of %llu shared-prefix tokens = %.1f%%\n",
            (unsigned long long)reused, (unsigned long long)shared, 100 * share);
    CHECK_MSG(share >= 0.95, "reuse share %.3f", share);
    CHECK_MSG(f.errors == 0, "fake model: %s", f.last_error);
    /* identical prompt again: hit up to the last block boundary before its final token */
    fake_out o;
    for (int rep = 0; rep < 2; rep++) {
        memset(&o, 0, sizeof(o));
        submit(s, &c, conv, n, greedy(3), &o, NULL);
        run_all(s, 10000);
    }
    CHECK_MSG(o.cached >= ((n - 1) / bs) * bs, "repeat prompt: cached %d of %d", o.cached, n);
    sched_free(s);
    fake_free(&f);
}

/* n > 1: samples share the prompt; seeded sampling is the same alone or in a crowd. */
static void test_n_and_seed(void) {
    enum { V = 100 };
    int32_t prompt[30];
    rand_prompt(prompt, 30, V);
    cllm_sampling sp = greedy(12);
    sp.temperature = 1.0;
    sp.top_k = 50;
    sp.top_p = 0.95;
    sp.seed = 42;
    sp.has_seed = true;
    sp.n = 3;
    fake_out alone[3], crowd[3];
    memset(alone, 0, sizeof(alone));
    memset(crowd, 0, sizeof(crowd));
    {
        fake_model f;
        fake_init(&f, V, 128, 4, 8 + 32, true);
        sched_cfg c = fake_cfg(V, 128, 4, 8, 64, true, true);
        sched *s;
        sched_create(&c, &fake_ops, &f, &s, NULL);
        submit(s, &c, prompt, 30, sp, alone, NULL);
        run_all(s, 1000);
        CHECK(f.errors == 0);
        sched_free(s);
        fake_free(&f);
    }
    {
        fake_model f;
        fake_init(&f, V, 28, 4, 4 + 32, true);
        sched_cfg c = fake_cfg(V, 28, 4, 4, 16, true, true);
        sched *s;
        sched_create(&c, &fake_ops, &f, &s, NULL);
        static fake_out other[5];
        memset(other, 0, sizeof(other));
        int32_t op[5][30];
        for (int i = 0; i < 5; i++) {
            rand_prompt(op[i], 25, V);
            submit(s, &c, op[i], 25, greedy(12), &other[i], NULL);
        }
        submit(s, &c, prompt, 30, sp, crowd, NULL);
        run_all(s, 10000);
        cllm_engine_stats st;
        sched_stats(s, &st);
        fprintf(stderr, "seeded n=3 in a crowd: %llu preemptions\n",
                (unsigned long long)st.preemptions);
        CHECK(f.errors == 0);
        CHECK(st.preemptions > 0);
        sched_free(s);
        fake_free(&f);
    }
    bool differ = false;
    for (int k = 0; k < 3; k++) {
        CHECK_MSG(alone[k].n == 12 && crowd[k].n == 12 && same(alone[k].toks, crowd[k].toks, 12),
                  "sample %d differs alone vs crowd", k);
        if (k && !same(alone[k].toks, alone[0].toks, 12)) differ = true;
    }
    CHECK_MSG(differ, "the n samples should differ at temperature 1");
}

/* n > 1 with no room to fork (max_num_seqs 1): the other samples queue and prefill on their own,
 * hitting the prefix cache; greedy samples all equal the known continuation. */
static void test_fork_fallback(void) {
    enum { V = 90 };
    int32_t prompt[23];
    rand_prompt(prompt, 23, V);
    int32_t exp[15];
    fake_expected(V, prompt, 23, 15, exp);
    for (int caching = 0; caching < 2; caching++) {
        fake_model f;
        fake_init(&f, V, 64, 4, 1 + 32, true);
        sched_cfg c = fake_cfg(V, 64, 4, 1, 64, true, caching);
        c.n_live_slots = 1;
        sched *s;
        sched_create(&c, &fake_ops, &f, &s, NULL);
        fake_out o[3];
        memset(o, 0, sizeof(o));
        cllm_sampling sp = greedy(15);
        sp.n = 3;
        submit(s, &c, prompt, 23, sp, o, NULL);
        run_all(s, 1000);
        for (int k = 0; k < 3; k++)
            CHECK_MSG(o[k].n == 15 && same(o[k].toks, exp, 15), "fallback sample %d (caching %d)",
                      k, caching);
        if (caching) CHECK(o[1].cached > 0 && o[2].cached > 0);
        CHECK(f.errors == 0 && f.max_seqs_in_batch == 1);
        sched_free(s);
        fake_free(&f);
    }
}

/* cancel frees every block and slot, whatever state the requests are in. */
static void test_cancel(void) {
    enum { V = 100, N = 6 };
    fake_model f;
    fake_init(&f, V, 64, 4, 3 + 32, true);
    sched_cfg c = fake_cfg(V, 64, 4, 3, 16, true, true);
    sched *s;
    sched_create(&c, &fake_ops, &f, &s, NULL);
    static fake_out outs[N][2];
    memset(outs, 0, sizeof(outs));
    int32_t p[N][40];
    uint64_t first = next_id;
    for (int i = 0; i < N; i++) {
        rand_prompt(p[i], 37, V);
        cllm_sampling sp = greedy(50);
        sp.n = i == 0 ? 2 : 1;
        submit(s, &c, p[i], 37, sp, outs[i], NULL);
    }
    for (int k = 0; k < 5; k++) sched_step(s);
    CHECK(sched_check(s) == NULL);
    sched_cancel(s, first + 2); /* probably running */
    sched_cancel(s, first + 5); /* probably waiting */
    sched_cancel(s, first + 5); /* idempotent */
    sched_cancel(s, 999999);    /* unknown */
    CHECK(sched_check(s) == NULL);
    CHECK(outs[2][0].fin == CLLM_FINISH_ABORT && outs[5][0].fin == CLLM_FINISH_ABORT);
    for (int i = 0; i < N; i++) sched_cancel(s, first + (uint64_t)i);
    CHECK(sched_check(s) == NULL);
    cllm_engine_stats st;
    sched_stats(s, &st);
    CHECK_MSG(st.kv_blocks_used == 0 && st.state_slots_used == 0 && !sched_has_work(s),
              "after cancel: %llu blocks, %d slots used", (unsigned long long)st.kv_blocks_used,
              st.state_slots_used);
    for (int i = 0; i < N; i++) CHECK(outs[i][0].fin == CLLM_FINISH_ABORT);
    CHECK(outs[0][1].fin == CLLM_FINISH_ABORT); /* the second sample of n=2 too */
    CHECK(f.errors == 0);
    sched_free(s);
    fake_free(&f);
}

static void test_validation(void) {
    sched_cfg c = fake_cfg(100, 16, 4, 4, 16, true, true); /* max_model_len 64 */
    int32_t p[70] = {0};
    cllm_request r = {(const int *)p, 60, greedy(10), fake_collect, NULL, NULL};
    eng_req *q;
    cllm_error err = {0};
    CHECK(sched_req_new(&c, &r, 1, 0, &q, &err) == CLLM_EINVAL);
    CHECK_MSG(
        strcmp(err.msg,
               "This model's maximum context length is 64 tokens. However, you requested 70 tokens "
               "(60 in the messages, 10 in the completion). Please reduce the length of the "
               "messages or completion.") == 0,
        "%s", err.msg);
    r.n_prompt = 0;
    CHECK(sched_req_new(&c, &r, 1, 0, &q, &err) == CLLM_EINVAL);
    r.n_prompt = 5;
    p[2] = 100;
    CHECK(sched_req_new(&c, &r, 1, 0, &q, &err) == CLLM_EINVAL);
    p[2] = 1;
    r.sampling.top_p = 0;
    CHECK(sched_req_new(&c, &r, 1, 0, &q, &err) == CLLM_EINVAL);
    r.sampling = greedy(10);
    CHECK(sched_req_new(&c, &r, 1, 0, &q, &err) == CLLM_OK);
    sched_req_free(q);
}

/* Thousands of steps of random arrivals, cancels, n > 1, shared prefixes and a small pool. */
static void test_stress(bool has_state, bool caching, int steps) {
    enum { V = 120, MAXR = 400 };
    int bs = 4, nb = 48;
    fake_model f;
    fake_init(&f, V, nb, bs, 6 + 12, has_state);
    sched_cfg c = fake_cfg(V, nb, bs, 6, 24, has_state, caching);
    c.n_snap_slots = 12;
    c.eos_ids[0] = V - 1;
    c.n_eos = 1;
    sched *s;
    CHECK(sched_create(&c, &fake_ops, &f, &s, NULL) == CLLM_OK);
    static fake_out outs[MAXR][3];
    static int32_t prompts[MAXR][64];
    static int lens[MAXR], maxt[MAXR], nsamp[MAXR];
    static bool greedy_req[MAXR], cancelled[MAXR], ign[MAXR];
    memset(outs, 0, sizeof(outs));
    int32_t bases[4][40];
    for (int i = 0; i < 4; i++) rand_prompt(bases[i], 40, V);
    int nr = 0;
    uint64_t id0 = next_id;
    int bad_before = bad_checks;
    for (int t = 0; t < steps; t++) {
        if (nr < MAXR && rnd() % 100 < 25) {
            int i = nr++;
            int pre = rnd() % 2 ? rnd_in(0, 40) : 0;
            lens[i] = pre + rnd_in(1, 20);
            memcpy(prompts[i], bases[rnd() % 4], (size_t)pre * sizeof(int32_t));
            rand_prompt(prompts[i] + pre, lens[i] - pre, V);
            maxt[i] = rnd_in(1, 30);
            nsamp[i] = rnd() % 5 == 0 ? rnd_in(2, 3) : 1;
            cllm_sampling sp = greedy(maxt[i]);
            sp.n = nsamp[i];
            ign[i] = rnd() % 2;
            sp.ignore_eos = ign[i];
            greedy_req[i] = rnd() % 3 != 0;
            if (!greedy_req[i]) {
                sp.temperature = 0.8;
                sp.seed = rnd();
                sp.has_seed = true;
            }
            submit(s, &c, prompts[i], lens[i], sp, outs[i], NULL);
        }
        if (nr > 0 && rnd() % 100 < 4) {
            int i = (int)(rnd() % (uint32_t)nr);
            cancelled[i] = true;
            sched_cancel(s, id0 + (uint64_t)i);
        }
        sched_step(s);
        const char *bad = sched_check(s);
        if (bad && bad_checks++ < 5) fprintf(stderr, "stress step %d: %s\n", t, bad);
    }
    run_all(s, 100000);
    CHECK_MSG(bad_checks == bad_before, "invariant violations in stress");
    int checked = 0, finished = 0;
    for (int i = 0; i < nr; i++) {
        for (int k = 0; k < nsamp[i]; k++) {
            CHECK_MSG(outs[i][k].fin != CLLM_FINISH_NONE, "request %d sample %d never finished", i,
                      k);
            finished++;
        }
        if (cancelled[i] || !greedy_req[i]) continue;
        int32_t exp[32];
        fake_expected(V, prompts[i], lens[i], maxt[i], exp);
        int ne = maxt[i];
        if (!ign[i])
            for (int k = 0; k < maxt[i]; k++)
                if (exp[k] == V - 1) {
                    ne = k + 1;
                    break;
                }
        for (int k = 0; k < nsamp[i]; k++) {
            CHECK_MSG(outs[i][k].n == ne && same(outs[i][k].toks, exp, ne),
                      "stress request %d sample %d differs", i, k);
            checked++;
        }
    }
    cllm_engine_stats st;
    sched_stats(s, &st);
    fprintf(stderr,
            "stress(state=%d, caching=%d): %d requests, %d samples ended, %d greedy checked, %llu "
            "preemptions, "
            "prefix hits %llu/%llu tokens, %llu fake calls\n",
            has_state, caching, nr, finished, checked, (unsigned long long)st.preemptions,
            (unsigned long long)st.prefix_hits_tokens, (unsigned long long)st.prefix_queries_tokens,
            (unsigned long long)f.calls);
    CHECK(st.preemptions > 0);
    if (caching) CHECK(st.prefix_hits_tokens > 0);
    CHECK(st.kv_blocks_used == 0 && st.state_slots_used == 0);
    CHECK_MSG(f.errors == 0, "fake model: %d errors, first: %s", f.errors, f.last_error);
    sched_free(s);
    fake_free(&f);
}

/* A sequence as long as the whole cache whose last block is cached partly: reusing that block
 * pins its source while copying it, one block more than the cache holds. The request waited
 * forever on an idle engine (found by a speculative-vs-plain serve fuzz: MTP's own KV halved
 * the tokens a small --kv-cache-memory held); it now takes the full blocks alone. */
static void test_partial_fills_cache(bool has_state) {
    enum { V = 100, NB = 3, BS = 4 };
    fake_model f;
    fake_init(&f, V, NB, BS, 2 + 32, has_state);
    sched_cfg c = fake_cfg(V, NB, BS, 2, 64, has_state, true);
    sched *s;
    CHECK(sched_create(&c, &fake_ops, &f, &s, NULL) == CLLM_OK);
    int32_t p[NB * BS];
    rand_prompt(p, NB * BS, V);
    fake_out a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    /* 6 tokens: it ends at 6 computed positions, leaving block 1's 2 rows cached partly */
    submit(s, &c, p, 6, greedy(1), &a, NULL);
    run_all(s, 100);
    CHECK(a.n == 1);
    /* 11 tokens: 3 blocks with block 0 and 2 rows of block 1 cached */
    submit(s, &c, p, NB * BS - 1, greedy(1), &b, NULL);
    int steps = run_all(s, 100);
    CHECK_MSG(b.n == 1 && !sched_has_work(s), "the long request waits forever (%d steps)", steps);
    int32_t exp[1];
    fake_expected(V, p, NB * BS - 1, 1, exp);
    CHECK(b.n == 1 && b.toks[0] == exp[0]);
    cllm_engine_stats st;
    sched_stats(s, &st);
    CHECK(st.prefix_hits_tokens >= BS); /* its full block still came from the cache */
    CHECK_MSG(f.errors == 0, "fake model: %s", f.last_error);
    sched_free(s);
    fake_free(&f);
}

int main(void) {
    test_validation();
    test_concurrent(false, false);
    test_concurrent(true, true);
    test_concurrent(false, true);
    test_preempt(false, false);
    test_preempt(true, true);
    test_prefix_multiturn();
    test_n_and_seed();
    test_cancel();
    test_fork_fallback();
    test_partial_fills_cache(false);
    test_partial_fills_cache(true);
    test_stress(true, true, 3000);
    test_stress(false, true, 1500);
    test_stress(true, false, 1500);
    return test_report("test_engine_sched");
}
