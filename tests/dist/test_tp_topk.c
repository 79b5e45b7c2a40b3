/* The per-rank top-k reduction of the vocabulary-split lm_head (model/forward_tp.c) against the
 * whole row, without MPI: a row is cut into N uneven slices, each slice gives its best k
 * (fwd_tp_best_k), the candidates go into a row that is -inf elsewhere (fwd_tp_put_k), and the
 * sampler must pick bitwise the same token from that row as from the whole one, for greedy and
 * seeded top-k (+ top-p / min-p) sampling, with many ties (few distinct values, and neighbouring
 * floats that scaling by 1 / temperature rounds to one value). Also: the slice's pairs are its
 * true best k; smp_reduce_k refuses what needs the whole row; a NaN is flagged. */
#include <string.h>

#include "engine/sampler.h"
#include "model/fwd_int.h"
#include "test.h"

static float g_base; /* the cluster's value in this row */
static float value(int mode) {
    switch (mode) {
    case 0:
        return test_frand() * 8.0f; /* distinct */
    case 1:
        return (float)(test_irand(6) - 3) * 0.5f; /* a few values: many ties */
    case 2: /* a small cluster of neighbouring floats on top: ties only after scaling */
        if (test_irand(20)) return test_frand() * 4.0f - 4.0f;
        float x = g_base; /* in [6, 8): times 1 / 0.7 a step of 1.43 ulp becomes 0.71 ulp */
        for (int i = test_irand(4); i > 0; i--) x = nextafterf(x, 6.0f);
        return x;
    default:
        return test_irand(10) == 0 ? -INFINITY : (float)test_irand(4);
    }
}

/* Descending key, ascending id: the order the reduction must reproduce. */
static float g_scale;
static int by_key(const void *a, const void *b) {
    const fwd_tp_pair *p = a, *q = b;
    float x = p->x * g_scale, y = q->x * g_scale;
    if (x != y) return x < y ? 1 : -1;
    return p->id - q->id;
}

int main(void) {
    enum { VMAX = 700 };
    static float row[VMAX], sparse[VMAX];
    static fwd_tp_pair pairs[CLLM_LOGITS_TOPK_MAX], ref[VMAX];
    smp_scratch s;
    CHECK(smp_init(&s, VMAX) == 0);
    const double temps[] = {0.0, 0.3, 0.7, 1.0, 1.3, 2.9};
    const int topks[] = {1, 2, 5, 20, 40, 256};
    int n_same = 0, n_runs = 0, mism = 0;
    for (int trial = 0; trial < 3000; trial++) {
        int V = 50 + test_irand(VMAX - 50), N = 2 + test_irand(3), mode = test_irand(4);
        s.V = V;
        g_base = 7.0f + test_frand();
        for (int i = 0; i < V; i++) row[i] = value(mode);
        cllm_sampling p = {.temperature = temps[test_irand(6)],
                           .top_k = topks[test_irand(6)],
                           .top_p = test_irand(3) == 0 ? 0.9
                                    : test_irand(2)    ? 1.0
                                                       : 0.5,
                           .min_p = test_irand(4) == 0 ? 0.1 : 0.0,
                           .repetition_penalty = 1.0,
                           .logprobs = -1,
                           .n = 1};
        float scale;
        int k = smp_reduce_k(&p, V, false, false, &scale);
        if (p.top_k >= V && p.temperature >= 1e-5) {
            CHECK(k == 0);
            continue;
        }
        CHECK_MSG(k == (p.temperature < 1e-5 ? 1 : p.top_k), "k %d", k);
        if (k <= 0) continue;
        /* uneven cut points, as the shard plan's (first ranks get more) or random */
        int cut[6] = {0};
        for (int r = 1; r < N; r++) cut[r] = cut[r - 1] + 1 + test_irand(V / N);
        cut[N] = V;
        for (int i = 0; i < V; i++) sparse[i] = -INFINITY;
        g_scale = scale;
        for (int r = 0; r < N; r++) {
            int v0 = cut[r], nv = cut[r + 1] - cut[r];
            fwd_tp_best_k(row + v0, nv, v0, scale, k, pairs);
            CHECK(!fwd_tp_put_k(sparse, V, pairs, k));
            for (int i = 0; i < nv; i++) ref[i] = (fwd_tp_pair){row[v0 + i], v0 + i};
            qsort(ref, (size_t)nv, sizeof(ref[0]), by_key);
            for (int i = 0; i < k; i++) {
                bool ok =
                    i < nv ? pairs[i].id == ref[i].id && pairs[i].x == ref[i].x : pairs[i].id == -1;
                if (!ok) mism++;
            }
        }
        for (int step = 0; step < 4; step++) {
            smp_input in = {.logits = row, .seed = (uint64_t)trial * 7919u, .step = step};
            int a = smp_sample(&s, &p, &in, NULL);
            in.logits = sparse;
            int b = smp_sample(&s, &p, &in, NULL);
            n_runs++;
            n_same += a == b;
            if (a != b)
                fprintf(stderr, "trial %d V %d N %d mode %d t %g k %d p %g: %d vs %d\n", trial, V,
                        N, mode, p.temperature, k, p.top_p, a, b);
        }
    }
    CHECK_MSG(mism == 0, "%d pairs differ from the slice's best k", mism);
    CHECK_MSG(n_same == n_runs, "%d of %d samples differ", n_runs - n_same, n_runs);
    fprintf(stderr, "%d samples compared (whole row vs reduced row)\n", n_runs);

    /* what needs the whole row */
    float sc;
    cllm_sampling g = {.temperature = 0, .repetition_penalty = 1.0, .logprobs = -1, .n = 1};
    CHECK(smp_reduce_k(&g, 1000, false, false, &sc) == 1 && sc == 1.0f);
    CHECK(smp_reduce_k(&g, 1000, true, false, &sc) == 0); /* EOS forbidden before min_tokens */
    CHECK(smp_reduce_k(&g, 1000, false, true, &sc) == 0); /* grammar mask */
    cllm_sampling t = g;
    t.logprobs = 0;
    CHECK(smp_reduce_k(&t, 1000, false, false, &sc) == 0);
    t = g;
    int bid = 3;
    float bval = 1;
    t.logit_bias_ids = &bid, t.logit_bias_vals = &bval, t.n_logit_bias = 1;
    CHECK(smp_reduce_k(&t, 1000, false, false, &sc) == 0);
    t = g;
    t.repetition_penalty = 1.1;
    CHECK(smp_reduce_k(&t, 1000, false, false, &sc) == 0);
    t = g;
    t.presence_penalty = 0.5;
    CHECK(smp_reduce_k(&t, 1000, false, false, &sc) == 0);
    t = g;
    t.frequency_penalty = -0.5;
    CHECK(smp_reduce_k(&t, 1000, false, false, &sc) == 0);
    t = g;
    t.temperature = 0.8; /* sampling over every token */
    CHECK(smp_reduce_k(&t, 1000, false, false, &sc) == 0);
    t.top_k = CLLM_LOGITS_TOPK_MAX + 1;
    CHECK(smp_reduce_k(&t, 1000, false, false, &sc) == 0);
    t.top_k = 20;
    CHECK(smp_reduce_k(&t, 1000, false, false, &sc) == 20 && sc == (float)(1.0 / 0.8));
    t.top_p = 0.5, t.min_p = 0.2; /* act on the best k only */
    CHECK(smp_reduce_k(&t, 1000, false, false, &sc) == 20);

    /* a NaN is flagged (the row is then gathered whole) and never taken as a candidate */
    for (int i = 0; i < 10; i++) row[i] = (float)i;
    row[4] = NAN;
    fwd_tp_best_k(row, 10, 100, 1.0f, 3, pairs);
    CHECK(pairs[0].id == -2 && pairs[1].id == 108 && pairs[2].id == 107);
    for (int i = 0; i < 10; i++) sparse[i] = -INFINITY;
    CHECK(fwd_tp_put_k(sparse, 200, pairs, 3));
    /* fewer entries than k: padding */
    fwd_tp_best_k(row, 2, 0, 1.0f, 3, pairs);
    CHECK(pairs[0].id == 1 && pairs[1].id == 0 && pairs[2].id == -1);
    s.V = VMAX;
    smp_free(&s);
    return test_report("test_tp_topk");
}
