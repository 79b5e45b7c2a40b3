/* Speculative decoding in the scheduler over the fake model (test_engine_fake.h), whose every
 * forward call checks the state slot against the hash of the KV history: a GDN state that was not
 * rolled back exactly to the last accepted token, or a KV row left from a rejected draft and read
 * as history, is a counted error. With the invariant check after every step:
 *  - Markov fake (greedy cycles, n-gram drafts accepted): outputs with k = 1..4 equal the
 *    outputs without speculation (greedy, seeded sampling, n = 2, mixed lengths), with and without
 *    state, with a pool small enough to preempt, prefix caching on;
 *  - synthetic acceptance 0.5 at k = 4: rejections at every draft position, the state always the
 *    accepted history's, nothing leaked when everything ends;
 *  - cancel in the middle of speculating frees the verify slot;
 *  - verify rows after a scoring request grew the logits buffer (a large vocabulary);
 *  - suffix drafts: a request that repeats an earlier one's answer drafts from the history of
 *    finished outputs; outputs equal to no speculation;
 *  - distribution: 20000 seeded samples of the first three tokens at temperature 1 through verify
 *    rows match the target's exact joint distribution (chi-square over the 512 cells);
 *  - the choice of k (sched_spec_begin_step) from given step times: the plain step measured
 *    first, a batch's one-row probe before a whole batch verifies, a dear verify (8 rows) or
 *    dear head passes turning drafting off, a cheap verify turning it on. */
#include <math.h>
#include <string.h>

#include "test.h"
#include "test_engine_fake.h"
#include "engine/sched_int.h"

static uint64_t rs = 4242;
static uint32_t rnd(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rs >> 33);
}

static cllm_sampling sp_greedy(int max_tokens) {
    return fake_greedy(max_tokens);
}

/* The n-gram drafter with cap k over lookups of 1..lookup_max tokens; fixed: k every step. */
static void ngram_spec(sched_cfg *c, int k, int lookup_max, bool fixed) {
    c->spec.method = CLLM_SPEC_NGRAM;
    c->spec.num_speculative_tokens = k;
    c->spec.prompt_lookup_min = 1;
    c->spec.prompt_lookup_max = lookup_max;
    c->spec.fixed_k = fixed;
}

static uint64_t next_id = 1;
static int bad_invariants;

static void submit(sched *s, const sched_cfg *c, const int32_t *prompt, int n, cllm_sampling sp,
                   fake_out *o) {
    cllm_request r = {(const int *)prompt, n, sp, fake_collect, o, NULL};
    eng_req *q;
    cllm_error err = {0};
    if (sched_req_new(c, &r, next_id++, 0, &q, &err) != CLLM_OK) {
        CHECK_MSG(0, "submit: %s", err.msg);
        return;
    }
    sched_add(s, q);
}

static void run_all(sched *s) {
    for (int steps = 0; sched_has_work(s) && steps < 100000; steps++) {
        sched_step(s);
        const char *bad = sched_check(s);
        if (bad && bad_invariants++ < 5)
            fprintf(stderr, "invariant after step %d: %s\n", steps, bad);
    }
}

#define NJ 6
typedef struct jobset {
    int32_t prompt[NJ][80];
    int len[NJ];
    cllm_sampling sp[NJ];
} jobset;

static void make_jobs(jobset *j, int V) {
    for (int i = 0; i < NJ; i++) {
        j->len[i] = 1 + (int)(rnd() % 70);
        for (int t = 0; t < j->len[i]; t++) j->prompt[i][t] = (int32_t)(rnd() % (uint32_t)V);
        j->sp[i] = sp_greedy(20 + (int)(rnd() % 60));
    }
    j->sp[1].temperature = 0.9;
    j->sp[1].seed = 17;
    j->sp[1].has_seed = true;
    j->sp[1].top_k = 8;
    j->sp[2].n = 2;
    j->sp[2].temperature = 1.0;
    j->sp[2].seed = 5;
    j->sp[2].has_seed = true;
    j->sp[3].max_tokens = 3; /* ends inside the first draft window */
}

typedef struct run_cfg {
    bool has_state, small_pool;
    int k;
    double synth;
    bool no_commit; /* the model offers no commit_state: partial accepts recompute */
} run_cfg;

/* Runs the jobs at once; outs[job * 2 + sample]; returns the scheduler's stats. */
static cllm_engine_stats run_jobs(const jobset *j, int V, const run_cfg *rc, fake_out *outs) {
    cllm_engine_stats st;
    memset(&st, 0, sizeof(st));
    int nb = rc->small_pool ? 40 : 400;
    fake_model f;
    /* synthetic runs: a spare live slot per row, so every verify can fork its state */
    int live = rc->synth > 0 ? 8 : 4;
    fake_init(&f, V, nb, 4, live + 32, rc->has_state); /* live + snapshot slots */
    f.markov = true;
    f.no_commit = rc->no_commit;
    sched_cfg c = fake_cfg(V, nb, 4, 4, 24, rc->has_state, true);
    c.n_live_slots = live;
    c.max_model_len = 160;
    if (rc->k) {
        ngram_spec(&c, rc->k, 3, true);
        c.spec.synthetic_acceptance = rc->synth;
    }
    sched *s = NULL;
    cllm_error err = {0};
    CHECK(sched_create(&c, &fake_ops, &f, &s, &err) == CLLM_OK);
    if (!s) {
        fake_free(&f);
        return st;
    }
    memset(outs, 0, sizeof(fake_out) * NJ * 2);
    for (int i = 0; i < NJ; i++) submit(s, &c, j->prompt[i], j->len[i], j->sp[i], &outs[i * 2]);
    run_all(s);
    sched_stats(s, &st);
    CHECK_MSG(f.errors == 0, "fake model: %d errors, first: %s", f.errors, f.last_error);
    /* a hybrid row's verify forks the live state (no copy before the call): one fork per verify;
     * a verify whose drafts were not all accepted commits its accepted positions (or, without
     * the op, recomputes them) */
    if (rc->has_state) {
        CHECK_MSG(f.forks == st.spec_drafts, "%llu forked rows for %llu verifies",
                  (unsigned long long)f.forks, (unsigned long long)st.spec_drafts);
        CHECK_MSG(f.commits == st.spec_commits, "fake model saw %llu commits, scheduler %llu",
                  (unsigned long long)f.commits, (unsigned long long)st.spec_commits);
        if (rc->k && !rc->no_commit)
            CHECK_MSG(st.spec_commits > 0, "no state commit in %llu verifies",
                      (unsigned long long)st.spec_drafts);
        if (rc->no_commit) CHECK(st.spec_commits == 0);
    }
    CHECK_MSG(blk_used(&s->blocks) == 0 || c.prefix_caching, "blocks left in use");
    CHECK_MSG(slot_live_used(&s->slots) == 0, "%d live slots left in use",
              slot_live_used(&s->slots));
    sched_free(s);
    fake_free(&f);
    return st;
}

static bool same_out(const fake_out *a, const fake_out *b) {
    return a->n == b->n && a->fin == b->fin &&
           !memcmp(a->toks, b->toks, (size_t)a->n * sizeof(int32_t));
}

static void test_equal(bool has_state, bool small_pool) {
    enum { V = 48 };
    static jobset j;
    static fake_out want[NJ * 2], got[NJ * 2];
    make_jobs(&j, V);
    run_cfg base = {has_state, small_pool, 0, 0};
    run_jobs(&j, V, &base, want);
    for (int k = 1; k <= 5; k++) {
        run_cfg rc = base;
        rc.k = k <= 4 ? k : 3;
        rc.no_commit = k == 5; /* k 3 once more, recomputing instead of committing */
        cllm_engine_stats st = run_jobs(&j, V, &rc, got);
        for (int i = 0; i < NJ; i++)
            for (int n = 0; n < j.sp[i].n; n++)
                CHECK_MSG(same_out(&want[i * 2 + n], &got[i * 2 + n]),
                          "state %d small %d k %d: job %d sample %d differs (%d vs %d tokens)",
                          has_state, small_pool, k, i, n, got[i * 2 + n].n, want[i * 2 + n].n);
        CHECK_MSG(st.spec_accepted_tokens > 0 && st.spec_accepted_tokens < st.spec_draft_tokens,
                  "state %d small %d k %d: %llu of %llu drafts accepted (want some, not all)",
                  has_state, small_pool, k, (unsigned long long)st.spec_accepted_tokens,
                  (unsigned long long)st.spec_draft_tokens);
        if (small_pool) CHECK_MSG(st.preemptions > 0, "small pool: no preemption (k %d)", k);
    }
}

/* Synthetic acceptance: rejections at every position, the state exact after each. The draws
 * follow each request's seed, so every job gets one: the run is the same every time (with a
 * clock seed a run in ten fell outside the old fixed window). */
static void test_synthetic(bool has_state) {
    enum { V = 64 };
    static jobset j;
    static fake_out got[NJ * 2];
    make_jobs(&j, V);
    for (int i = 0; i < NJ; i++) {
        j.sp[i].max_tokens = 70;
        j.sp[i].seed = 1000 + (uint64_t)i;
        j.sp[i].has_seed = true;
    }
    run_cfg rc = {has_state, false, 4, 0.5};
    cllm_engine_stats st = run_jobs(&j, V, &rc, got);
    for (int i = 0; i < NJ; i++) CHECK(got[i * 2].n == 70 && got[i * 2].fin == CLLM_FINISH_LENGTH);
    double n = (double)st.spec_drafts;
    CHECK_MSG(n > 150, "synthetic 0.5 (state %d): only %.0f verifies", has_state, n);
    /* every verify draws at its first position: a Bernoulli(0.5) per verify, 4 sd of room */
    double p0 = (double)st.spec_accepted_per_pos[0] / n, sd0 = sqrt(0.25 / n);
    CHECK_MSG(
        fabs(p0 - 0.5) < 4 * sd0,
        "synthetic 0.5, k 4 (state %d): first position accepted %.3f of %.0f (want 0.5 +- %.3f)",
        has_state, p0, n, 4 * sd0);
    /* per position 0.5, stop at the first reject: 0.5 + 0.25 + 0.125 + 0.0625 of 4 drafts (k is
     * cut only in the last steps of a request); accepted per verify has sd 1.2 */
    double share = (double)st.spec_accepted_tokens / (double)st.spec_draft_tokens;
    double sd = 1.2 / (4 * sqrt(n));
    CHECK_MSG(
        fabs(share - 0.234) < 4 * sd + 0.01,
        "synthetic 0.5, k 4 (state %d): %.0f verifies, accepted share %.3f (want 0.234 +- %.3f)",
        has_state, n, share, 4 * sd + 0.01);
    /* verifies reaching position p: accepted at p-1; rejections at p: reaching - accepted(p) */
    uint64_t reach = st.spec_drafts;
    for (int p = 0; p < 4; p++) {
        uint64_t acc = st.spec_accepted_per_pos[p];
        CHECK_MSG(acc > 0 && acc < reach, "position %d: %llu accepted of %llu reaching it", p,
                  (unsigned long long)acc, (unsigned long long)reach);
        reach = acc;
    }
}

/* Verify rows and scoring rows share the logits buffer: with a large vocabulary the scoring
 * room (64 MiB of rows: 32 at 2^19 entries) is smaller than the verify rows' room (6 drafts for
 * up to 8 rows), so a buffer regrown for scoring alone is overrun by the verify rows that follow
 * (ASan; the fake model writes every row). Synthetic acceptance: every step drafts the cap. */
static void test_with_scoring(void) {
    enum { V = 1 << 19, NS = 8 };
    static fake_out o[NS + 1];
    fake_model f;
    fake_init(&f, V, 400, 4, NS + 32, true);
    sched_cfg c = fake_cfg(V, 400, 4, NS, 64, true, false);
    c.max_model_len = 200;
    ngram_spec(&c, 6, 2, true);
    c.spec.synthetic_acceptance = 0.5;
    c.n_live_slots = 2 * NS;
    sched *s = NULL;
    cllm_error err = {0};
    CHECK(sched_create(&c, &fake_ops, &f, &s, &err) == CLLM_OK);
    if (!s) return;
    memset(o, 0, sizeof(o));
    int32_t ps[6] = {9, 8, 7, 6, 5, 4};
    cllm_sampling sc = sp_greedy(2);
    sc.has_prompt_logprobs = true;
    sc.prompt_logprobs = 1;
    submit(s, &c, ps, 6, sc, &o[NS]); /* grows the buffer for its scoring rows */
    run_all(s);
    int32_t pd[4] = {1, 2, 1, 2};
    for (int i = 0; i < NS; i++) submit(s, &c, pd, 4, sp_greedy(12), &o[i]);
    run_all(s);
    for (int i = 0; i < NS; i++) CHECK(o[i].n == 12);
    CHECK_MSG(s->stats.spec_draft_tokens >= 6 * NS, "scoring mix: %llu draft tokens",
              (unsigned long long)s->stats.spec_draft_tokens);
    CHECK_MSG(f.errors == 0, "scoring mix: fake model: %s", f.last_error);
    sched_free(s);
    fake_free(&f);
}

/* Cancel while rows are speculating: the verify slot and blocks come back. */
static void test_cancel(void) {
    enum { V = 48 };
    fake_model f;
    fake_init(&f, V, 200, 4, 4 + 32, true);
    f.markov = true;
    sched_cfg c = fake_cfg(V, 200, 4, 4, 24, true, false);
    ngram_spec(&c, 3, 2, true);
    c.spec.synthetic_acceptance = 0.5;
    sched *s = NULL;
    cllm_error err = {0};
    CHECK(sched_create(&c, &fake_ops, &f, &s, &err) == CLLM_OK);
    if (!s) return;
    static fake_out o[4];
    int32_t p[8] = {1, 2, 3, 1, 2, 3, 1, 2};
    uint64_t first = next_id;
    for (int i = 0; i < 3; i++) submit(s, &c, p, 8, sp_greedy(200), &o[i]);
    for (int i = 0; i < 12; i++) sched_step(s);
    for (uint64_t id = first; id < first + 3; id++) sched_cancel(s, id);
    CHECK(sched_check(s) == NULL);
    CHECK(blk_used(&s->blocks) == 0);
    CHECK(slot_live_used(&s->slots) == 0);
    CHECK(o[0].fin == CLLM_FINISH_ABORT);
    CHECK(s->stats.spec_drafts > 0);
    sched_free(s);
    fake_free(&f);
}

/* Temperature-1 samples (t0, t1, t2) after a fixed prompt on a Markov fake of 8 tokens, with
 * n-gram drafts (the prompt holds every token, so each decode step verifies drafts): chi-square
 * against p(t0 | last) p(t1 | t0) p(t2 | t1), p = softmax of the fake's logits. */
static void test_distribution(bool spec) {
    enum { V = 8, N = 20032 }; /* 313 rounds of 64 */
    fake_model f;
    fake_init(&f, V, 400, 4, 4 + 32, true);
    f.markov = true;
    sched_cfg c = fake_cfg(V, 400, 4, 4, 64, true, false);
    c.n_live_slots = 8; /* a hybrid row verifies on a spare live slot */
    if (spec) {
        ngram_spec(&c, 2, 1, true);
    }
    sched *s = NULL;
    cllm_error err = {0};
    CHECK(sched_create(&c, &fake_ops, &f, &s, &err) == CLLM_OK);
    if (!s) return;
    int32_t prompt[10] = {0, 1, 2, 3, 4, 5, 6, 7, 2, 5};
    static fake_out o[64];
    static double cnt[V * V * V];
    memset(cnt, 0, sizeof(cnt));
    for (int done = 0; done < N; done += 64) {
        for (int i = 0; i < 64; i++) {
            cllm_sampling sp = sp_greedy(3);
            sp.temperature = 1.0;
            sp.seed = (uint64_t)(done + i) * 7919 + 1;
            sp.has_seed = true;
            memset(&o[i], 0, sizeof(o[i]));
            submit(s, &c, prompt, 10, sp, &o[i]);
        }
        run_all(s);
        for (int i = 0; i < 64; i++)
            if (o[i].n == 3) cnt[(o[i].toks[0] * V + o[i].toks[1]) * V + o[i].toks[2]] += 1;
    }
    double p[V][V];
    for (int y = 0; y < V; y++) {
        float lg[V];
        fake_logits(V, fake_fold(0, y), lg);
        double mx = -1e30, sum = 0;
        for (int v = 0; v < V; v++) mx = lg[v] > mx ? lg[v] : mx;
        for (int v = 0; v < V; v++) sum += exp(lg[v] - mx);
        for (int v = 0; v < V; v++) p[y][v] = exp(lg[v] - mx) / sum;
    }
    double chi = 0, total = 0;
    for (int a = 0; a < V; a++)
        for (int b = 0; b < V; b++)
            for (int d = 0; d < V; d++) {
                double e = N * p[5][a] * p[a][b] * p[b][d];
                double x = cnt[(a * V + b) * V + d];
                total += x;
                chi += (x - e) * (x - e) / e;
            }
    fprintf(stderr, "distribution (spec %d): chi-square %.1f, 511 degrees of freedom\n", spec, chi);
    /* 511 degrees of freedom: the 0.999 quantile is about 611 */
    CHECK_MSG(total == N && chi < 611, "spec %d: chi-square %.1f over 512 cells (%g samples)", spec,
              chi, total);
    if (spec)
        CHECK_MSG(s->stats.spec_drafts > N / 2 && s->stats.spec_accepted_tokens > 0,
                  "distribution test: %llu verifies, %llu accepted",
                  (unsigned long long)s->stats.spec_drafts,
                  (unsigned long long)s->stats.spec_accepted_tokens);
    sched_free(s);
    fake_free(&f);
}

/* Suffix method: the same prompt twice in a row (the second answer is the first's, drafted from
 * the history), then other prompts; everything equal to no speculation. */
static void test_suffix(bool has_state) {
    enum { V = 4096 };
    static fake_out want[6], got[6];
    int32_t pa[20], pb[20];
    for (int i = 0; i < 20; i++) {
        pa[i] = (int32_t)(rnd() % V);
        pb[i] = (int32_t)(rnd() % V);
    }
    uint64_t accepted = 0, drafted = 0;
    for (int spec = 0; spec < 2; spec++) {
        fake_model f;
        fake_init(&f, V, 400, 4, 8 + 32, has_state);
        /* not Markov: with 4096 tokens a greedy answer barely repeats itself, so the drafts that
         * get accepted come from the earlier answer */
        sched_cfg c = fake_cfg(V, 400, 4, 4, 64, has_state, true);
        c.n_live_slots = 8;
        if (spec) {
            c.spec.method = CLLM_SPEC_SUFFIX;
            c.spec.num_speculative_tokens = 4;
            c.spec.suffix_max_depth = 24;
            c.spec.suffix_max_cached_requests = 100;
            c.spec.suffix_max_spec_factor = 2.0;
            c.spec.fixed_k = true;
        }
        sched *s = NULL;
        cllm_error err = {0};
        CHECK(sched_create(&c, &fake_ops, &f, &s, &err) == CLLM_OK);
        if (!s) return;
        fake_out *o = spec ? got : want;
        memset(o, 0, sizeof(fake_out) * 6);
        const int32_t *ps[6] = {pa, pa, pb, pa, pb, pb};
        for (int i = 0; i < 6; i++) { /* one after the other: each sees the earlier answers */
            submit(s, &c, ps[i], 20, sp_greedy(50), &o[i]);
            run_all(s);
        }
        if (spec) {
            accepted = s->stats.spec_accepted_tokens;
            drafted = s->stats.spec_draft_tokens;
        }
        CHECK_MSG(f.errors == 0, "suffix: fake model: %s", f.last_error);
        sched_free(s);
        fake_free(&f);
    }
    for (int i = 0; i < 6; i++)
        CHECK_MSG(same_out(&want[i], &got[i]), "suffix (state %d): request %d differs", has_state,
                  i);
    /* requests 1, 3, 4, 5 repeat an earlier answer: most of their 4 x 49 decode tokens */
    CHECK_MSG(accepted > 100, "suffix (state %d): %llu of %llu drafts accepted", has_state,
              (unsigned long long)accepted, (unsigned long long)drafted);
}

/* A scheduler with B requests decoding (n-gram drafter, cap 3, the cost model on) whose step
 * times are then set by hand; NULL when it could not be built. */
static sched *cost_sched(fake_model *f, int B) {
    enum { V = 64 };
    fake_init(f, V, 400, 4, 64, false);
    sched_cfg c = fake_cfg(V, 400, 4, 8, 64, false, false);
    ngram_spec(&c, 3, 3, false);
    sched *s = NULL;
    cllm_error err = {0};
    CHECK(sched_create(&c, &fake_ops, f, &s, &err) == CLLM_OK);
    if (!s) return NULL;
    static fake_out out[8];
    for (int i = 0; i < B; i++) {
        int32_t prompt[4] = {1 + i, 2, 3, 4};
        submit(s, &c, prompt, 4, sp_greedy(200), &out[i]);
    }
    for (int i = 0; i < 4; i++) sched_step(s); /* prefill, then decoding */
    CHECK(s->n_running == B);
    return s;
}

/* Step times in ms for sizes 1..n (0: not measured), each recorded 3 times (the first of a size
 * is dropped), every row's acceptance a; then the step's choice. */
static void cost_set(sched *s, const double *ms, int n, double pass_ms, double a) {
    memset(&s->cost, 0, sizeof(s->cost));
    for (int T = 1; T <= n; T++)
        for (int r = 0; ms[T - 1] > 0 && r < 3; r++)
            sched_spec_record(s, T, ms[T - 1] * 1e-3, pass_ms * 1e-3, pass_ms > 0);
    for (int i = 0; i < s->n_running; i++) {
        s->running[i]->acc_hits = 100 * a;
        s->running[i]->acc_trials = 100;
        s->running[i]->spec_idle = 0;
    }
    sched_spec_begin_step(s);
}

/* Steps of sizes T[i] taking ms[i], in that order, from an empty cost model; then the choice. */
static void cost_seq(sched *s, const int *T, const double *ms, int n, double a) {
    memset(&s->cost, 0, sizeof(s->cost));
    s->spec_streak = 0;
    for (int i = 0; i < n; i++) sched_spec_record(s, T[i], ms[i] * 1e-3, 0, 0);
    for (int i = 0; i < s->n_running; i++) {
        s->running[i]->acc_hits = 100 * a;
        s->running[i]->acc_trials = 100;
        s->running[i]->spec_idle = 0;
    }
    sched_spec_begin_step(s);
}

/* The host's pace (sched_spec_record): a verify that costs 1.2 plain steps stays chosen when
 * the host then runs at half speed for many verifies in a row (a median of seconds took them for
 * 2.4 plain steps and turned drafting off); a verify that costs 2.5 plain steps at one pace is
 * seen as dear however the pace moves between the pairs; and after SPEC_PLAIN_EVERY steps with
 * drafts one step drafts nothing. */
static void test_cost_pace(void) {
    fake_model f;
    sched *s = cost_sched(&f, 1);
    if (s) {
        int T[32];
        double ms[32];
        int n = 0;
        for (int i = 0; i < 4; i++) T[n] = 1, ms[n++] = 20;
        for (int i = 0; i < 3; i++) T[n] = 2, ms[n++] = 24;
        for (int i = 0; i < 10; i++) T[n] = 2, ms[n++] = 48; /* the host at half speed */
        cost_seq(s, T, ms, n, 0.65);
        CHECK_MSG(s->spec_k_step >= 1, "pace: a slower host turned drafting off (k %d)",
                  s->spec_k_step);
        n = 0;
        for (int i = 0; i < 8; i++) { /* pairs at paces from 16 to 44 ms per plain step */
            double p = 16 + 4 * i;
            T[n] = 1, ms[n++] = p;
            T[n] = 2, ms[n++] = 2.5 * p;
        }
        cost_seq(s, T, ms, n, 0.65);
        CHECK_MSG(s->spec_k_step == 0, "pace: a verify of 2.5 plain steps chosen (k %d)",
                  s->spec_k_step);
        /* verifies of 1.45 plain steps (k 1 gains 1.14x at 0.65): drafting, with a plain step
         * after SPEC_PLAIN_EVERY (16) steps with drafts */
        n = 0;
        for (int i = 0; i < 4; i++) T[n] = 1, ms[n++] = 20;
        for (int i = 0; i < 4; i++) T[n] = 2, ms[n++] = 29;
        cost_seq(s, T, ms, n, 0.65);
        int plain = 0;
        for (int i = 0; i < 3 * 17; i++) { /* 16 steps with drafts, then a plain one */
            plain += s->spec_k_step == 0;
            sched_spec_begin_step(s);
        }
        CHECK_MSG(plain == 3, "pace: %d plain steps in 51 (want one every 17)", plain);
        /* cheap verifies (1.1 plain steps, k 3 expected to gain 1.8x): the plain step every
         * 100 x (1 - 1 / 1.8) = 44 steps with drafts, so that it costs about 1% */
        n = 0;
        for (int i = 0; i < 4; i++) T[n] = 1, ms[n++] = 20;
        for (int i = 0; i < 4; i++) T[n] = 2, ms[n++] = 22;
        cost_seq(s, T, ms, n, 0.65);
        plain = 0;
        for (int i = 0; i < 3 * 45; i++) {
            plain += s->spec_k_step == 0;
            sched_spec_begin_step(s);
        }
        CHECK_MSG(plain == 3 && s->spec_plain_every == 44,
                  "pace: %d plain steps in 135 (want one every 45; interval %d)", plain,
                  s->spec_plain_every);
        /* a row that has not drafted yet takes the engine's recent acceptance as its prior: a
         * verify of 1.5 plain steps does not pay at the first request's 0.5, at 0.9 it does */
        n = 0;
        for (int i = 0; i < 4; i++) T[n] = 1, ms[n++] = 20, T[n] = 2, ms[n++] = 30;
        cost_seq(s, T, ms, n, 0);
        s->running[0]->acc_hits = s->running[0]->acc_trials = 0;
        s->spec_hits = s->spec_trials = 0;
        sched_spec_begin_step(s);
        CHECK_MSG(s->spec_k_step == 0, "prior: k %d at the first request's 0.5", s->spec_k_step);
        s->spec_hits = 90;
        s->spec_trials = 100;
        sched_spec_begin_step(s);
        CHECK_MSG(s->spec_k_step >= 1, "prior: k %d at the engine's 0.9", s->spec_k_step);
        /* a row alone just below break-even (0.5 against 1.5 plain steps: 0.5 below it) probes
         * a draft after 4 idle steps, one far below (0.2) only after 32: near break-even only a
         * draft corrects an estimate that came out low (8 pairs: past the few-samples probes) */
        n = 0;
        for (int i = 0; i < 8; i++) T[n] = 1, ms[n++] = 20, T[n] = 2, ms[n++] = 30;
        cost_seq(s, T, ms, n, 0);
        s->spec_hits = s->spec_trials = 0;
        const double rate[2] = {0.5, 0.2};
        const int want[2] = {4, 32};
        for (int c = 0; c < 2; c++) {
            s->running[0]->acc_hits = 100 * rate[c];
            s->running[0]->acc_trials = 100;
            int first = -1;
            for (int idle = 0; idle <= 40 && first < 0; idle++) {
                s->running[0]->spec_idle = idle;
                s->spec_streak = 0;
                sched_spec_begin_step(s);
                if (s->spec_k_step > 0) first = idle;
            }
            CHECK_MSG(first == want[c], "probe at %.1f: first after %d idle steps (want %d)",
                      rate[c], first, want[c]);
        }
        sched_free(s);
    }
    fake_free(&f);
}

static void test_cost_model(void) {
    fake_model f;
    sched *s = cost_sched(&f, 8);
    if (s) {
        double t[16] = {0};
        /* the plain step of 8 rows not measured yet: no drafts, whatever the acceptance */
        t[0] = 27;
        cost_set(s, t, 16, 0, 0.9);
        CHECK_MSG(s->spec_k_step == 0, "B 8, plain step unmeasured: k %d", s->spec_k_step);
        /* measured, 9 tokens not: the prior finds a verify worth it, one row probes first */
        t[7] = 57;
        cost_set(s, t, 16, 0, 0.65);
        CHECK_MSG(s->spec_k_step == 1 && s->spec_one != NULL, "B 8 probe: k %d one %d",
                  s->spec_k_step, s->spec_one != NULL);
        /* the probe found 7 ms per token (batched decode is compute-bound at 8 rows): 16 tokens
         * would cost ~113 ms for 8 x 1.65 tokens, less than 8 plain tokens per 57 ms */
        t[8] = 64;
        cost_set(s, t, 16, 0, 0.65);
        CHECK_MSG(s->spec_k_step == 0 && !s->spec_one, "B 8 dear verify: k %d", s->spec_k_step);
        /* a cheap verify (1 ms per token): drafting pays, for every row */
        t[8] = 58;
        cost_set(s, t, 16, 0, 0.65);
        CHECK_MSG(s->spec_k_step >= 1 && !s->spec_one, "B 8 cheap verify: k %d one %d",
                  s->spec_k_step, s->spec_one != NULL);
        sched_free(s);
    }
    fake_free(&f);
    s = cost_sched(&f, 1);
    if (s) {
        double t[4] = {27, 30, 0, 0};
        /* one row, verify 3 ms per token: drafting pays at 0.65 ... */
        cost_set(s, t, 4, 0, 0.65);
        CHECK_MSG(s->spec_k_step >= 1, "B 1: k %d", s->spec_k_step);
        /* ... unless each head pass (priced only for MTP) costs more than it brings */
        s->cfg.spec.method = CLLM_SPEC_MTP;
        cost_set(s, t, 4, 3.3, 0.65);
        CHECK_MSG(s->spec_k_step >= 1, "B 1, 3.3 ms passes: k %d", s->spec_k_step);
        cost_set(s, t, 4, 15, 0.65);
        CHECK_MSG(s->spec_k_step == 0, "B 1, 15 ms passes: k %d", s->spec_k_step);
        s->cfg.spec.method = CLLM_SPEC_NGRAM;
        sched_free(s);
    }
    fake_free(&f);
}

/* A verify's state commits are charged to the step that made them (sched_step records after
 * its rows): none is left over for the next step, whose size may differ (a plain step after a
 * verify read dearer by the commit, a verify after a plain step cheaper). */
static void test_commit_charged(void) {
    enum { V = 64 };
    fake_model f;
    fake_init(&f, V, 400, 4, 40, true);
    f.markov = true;
    sched_cfg c = fake_cfg(V, 400, 4, 4, 24, true, true);
    c.n_live_slots = 8;
    ngram_spec(&c, 2, 3, true);
    sched *s = NULL;
    cllm_error err = {0};
    CHECK(sched_create(&c, &fake_ops, &f, &s, &err) == CLLM_OK);
    if (!s) {
        fake_free(&f);
        return;
    }
    fake_out out;
    memset(&out, 0, sizeof(out));
    int32_t prompt[6] = {3, 9, 3, 9, 3, 9};
    submit(s, &c, prompt, 6, sp_greedy(60), &out);
    int left = 0, steps = 0;
    for (; sched_has_work(s) && steps < 1000; steps++) {
        sched_step(s);
        left += s->commit_s != 0;
    }
    CHECK_MSG(f.commits > 0, "no state commit in %d steps", steps);
    CHECK_MSG(left == 0, "%d of %d steps left commit time to the next step", left, steps);
    CHECK(f.errors == 0);
    sched_free(s);
    fake_free(&f);
}

/* The MTP draft vocabulary: the default on a large vocabulary, the whole of a small one, a key
 * rounded up to whole 64-row tiles, and a key of the vocabulary's size or more reading it all. */
static void test_mtp_vocab_rows(void) {
    CHECK(sched_mtp_vocab_rows(0, 248320) == CLLM_SPEC_DRAFT_VOCAB_DEFAULT);
    CHECK(CLLM_SPEC_DRAFT_VOCAB_DEFAULT == 65536);
    CHECK(sched_mtp_vocab_rows(0, 4096) == 0);
    CHECK(sched_mtp_vocab_rows(32768, 248320) == 32768);
    CHECK(sched_mtp_vocab_rows(100, 248320) == 128);
    CHECK(sched_mtp_vocab_rows(248320, 248320) == 0);
    CHECK(sched_mtp_vocab_rows(1 << 24, 248320) == 0);
    CHECK(sched_mtp_vocab_rows(4000, 4096) == 4032);
    CHECK(sched_mtp_vocab_rows(4090, 4096) == 0);
}

int main(void) {
    test_mtp_vocab_rows();
    test_commit_charged();
    test_cost_model();
    test_cost_pace();
    test_suffix(false);
    test_suffix(true);
    test_distribution(false);
    test_distribution(true);
    for (int st = 0; st < 2; st++) {
        test_equal(st, false);
        test_equal(st, true);
        test_synthetic(st);
    }
    test_cancel();
    test_with_scoring();
    CHECK_MSG(bad_invariants == 0, "%d invariant violations", bad_invariants);
    return test_report("test_engine_sched_spec");
}
