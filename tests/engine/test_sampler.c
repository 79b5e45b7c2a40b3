/* Sampler unit tests (greedy, bias, forbid, top-k/p, min-p, penalties, seeded draws match the
 * distribution, logprobs) and stop conditions through the scheduler with the fake model and the
 * tiny model's tokenizer (stop strings across token boundaries, include_stop_str_in_output, stop
 * ids, min_tokens against EOS, max_tokens). */
#include <math.h>
#include <string.h>

#include "test.h"
#include "test_engine_fake.h"
#include "engine/sampler.h"
#include "tokenizer/tokenizer.h"

static cllm_sampling base(void) {
    cllm_sampling p;
    memset(&p, 0, sizeof(p));
    p.top_p = 1;
    p.repetition_penalty = 1;
    p.logprobs = -1;
    p.n = 1;
    return p;
}

static int draw(smp_scratch *s, const cllm_sampling *p, const float *lg, uint64_t seed, int step) {
    smp_input in = {.logits = lg, .seed = seed, .step = step};
    return smp_sample(s, p, &in, NULL);
}

static void test_basic(void) {
    smp_scratch s;
    CHECK(smp_init(&s, 6) == 0);
    float lg[6] = {1.0f, 3.0f, 3.0f, 2.5f, -1.0f, 0.0f};
    cllm_sampling p = base();
    CHECK(draw(&s, &p, lg, 1, 0) == 1); /* tie -> lowest id */
    int bias_id = 4;
    float bias_v = 10;
    p.logit_bias_ids = &bias_id;
    p.logit_bias_vals = &bias_v;
    p.n_logit_bias = 1;
    CHECK(draw(&s, &p, lg, 1, 0) == 4);
    p = base();
    int forbid[2] = {1, 2};
    smp_input in = {.logits = lg, .forbid = forbid, .n_forbid = 2};
    CHECK(smp_sample(&s, &p, &in, NULL) == 3);
    /* top_k = 1, tiny top_p, min_p = 1 all reduce to the argmax at any temperature */
    for (int k = 0; k < 3; k++) {
        p = base();
        p.temperature = 1.5;
        if (k == 0) p.top_k = 1;
        if (k == 1) p.top_p = 0.01;
        if (k == 2) p.min_p = 1.0;
        bool ok = true;
        float lg2[6] = {1.0f, 3.0f, 2.9f, 2.5f, -1.0f, 0.0f};
        for (int t = 0; t < 200; t++) ok &= draw(&s, &p, lg2, 7, t) == 1;
        CHECK_MSG(ok, "filter %d did not reduce to the argmax", k);
    }
    /* repetition penalty: prompt has token 1 and 2 -> 3 wins */
    p = base();
    p.repetition_penalty = 1.5;
    int32_t prompt[2] = {1, 2};
    smp_input in2 = {.logits = lg, .prompt = prompt, .n_prompt = 2};
    CHECK(smp_sample(&s, &p, &in2, NULL) == 3);
    /* frequency penalty: token 1 generated twice (-0.6), token 2 once (-0.3 + presence 0.5) */
    p = base();
    p.frequency_penalty = 0.3;
    p.presence_penalty = 0.5;
    int32_t outs[3] = {1, 1, 2};
    smp_input in3 = {.logits = lg, .out = outs, .n_out = 3};
    CHECK(smp_sample(&s, &p, &in3, NULL) == 3);
    /* scratch stays clean: same call again gives the same */
    CHECK(smp_sample(&s, &p, &in3, NULL) == 3);
    p = base();
    CHECK(draw(&s, &p, lg, 1, 0) == 1);
    smp_free(&s);
}

static void test_distribution(void) {
    smp_scratch s;
    smp_init(&s, 4);
    float lg[4] = {0.0f, 1.0f, 2.0f, 0.5f};
    double z = 0, pr[4];
    for (int i = 0; i < 4; i++) z += exp(lg[i]);
    for (int i = 0; i < 4; i++) pr[i] = exp(lg[i]) / z;
    cllm_sampling p = base();
    p.temperature = 1.0;
    int cnt[4] = {0};
    int N = 40000;
    for (int t = 0; t < N; t++) cnt[draw(&s, &p, lg, 99, t)]++;
    for (int i = 0; i < 4; i++)
        CHECK_MSG(fabs(cnt[i] / (double)N - pr[i]) < 0.01, "token %d: %.4f vs %.4f", i,
                  cnt[i] / (double)N, pr[i]);
    /* top_k = 2 renormalises over {2, 1} */
    p.top_k = 2;
    memset(cnt, 0, sizeof(cnt));
    for (int t = 0; t < N; t++) cnt[draw(&s, &p, lg, 5, t)]++;
    double p2 = exp(2.0) / (exp(2.0) + exp(1.0));
    CHECK(cnt[0] == 0 && cnt[3] == 0);
    CHECK_MSG(fabs(cnt[2] / (double)N - p2) < 0.01, "top_k=2: %.4f vs %.4f", cnt[2] / (double)N,
              p2);
    /* same (seed, index, step) -> same token; draws do not depend on call order */
    int a = draw(&s, &p, lg, 5, 17), b = draw(&s, &p, lg, 5, 17);
    CHECK(a == b);
    CHECK(smp_uniform(1, 0, 0) != smp_uniform(1, 1, 0) &&
          smp_uniform(1, 0, 0) != smp_uniform(2, 0, 0));
    /* logprobs: chosen first, then the top ones sorted, log-softmax of the raw logits */
    p = base();
    p.logprobs = 3;
    cllm_token_logprob lp[4];
    smp_input in = {.logits = lg};
    int tok = smp_sample(&s, &p, &in, lp);
    CHECK(tok == 2 && lp[0].token == 2 && fabs(lp[0].logprob - log(pr[2])) < 1e-5);
    CHECK(lp[1].token == 2 && lp[2].token == 1 && lp[3].token == 3);
    CHECK(fabs(lp[2].logprob - log(pr[1])) < 1e-5);
    smp_free(&s);
}

/* ---- stop conditions through the scheduler ---- */

typedef struct run_res {
    fake_out o;
} run_res;

static void run_one(const cllm_tok *tok, int V, const int32_t *prompt, int n, cllm_sampling sp,
                    int eos, fake_out *o) {
    fake_model f;
    fake_init(&f, V, 64, 16, 2 + 8, true);
    sched_cfg c = fake_cfg(V, 64, 16, 2, 64, true, true);
    c.tok = tok;
    if (eos >= 0) {
        c.eos_ids[0] = eos;
        c.n_eos = 1;
    }
    sched *s;
    CHECK(sched_create(&c, &fake_ops, &f, &s, NULL) == CLLM_OK);
    eng_req *q;
    cllm_request r = {(const int *)prompt, n, sp, fake_collect, o, NULL};
    memset(o, 0, sizeof(*o));
    cllm_error err = {0};
    CHECK_MSG(sched_req_new(&c, &r, 1, 0, &q, &err) == CLLM_OK, "%s", err.msg);
    sched_add(s, q);
    while (sched_has_work(s)) {
        sched_step(s);
        CHECK(sched_check(s) == NULL);
    }
    CHECK(f.errors == 0);
    sched_free(s);
    fake_free(&f);
}

static void test_stops(void) {
    const char *src = test_src();
    char dir[1024];
    snprintf(dir, sizeof(dir), "%s/models/tiny", src);
    cllm_tok *tok = NULL;
    cllm_error err = {0};
    if (cllm_tok_load(dir, &tok, &err) != CLLM_OK) {
        fprintf(stderr, "no tokenizer at %s (%s): stop-string tests skipped\n", dir, err.msg);
        return;
    }
    int V = cllm_tok_n_vocab(tok);
    int32_t prompt[20];
    for (int i = 0; i < 20; i++) prompt[i] = (int32_t)((i * 131 + 7) % 3000);
    int32_t exp[40];
    fake_expected(V, prompt, 20, 40, exp);
    char *full;
    size_t full_len;
    CHECK(cllm_tok_decode(tok, exp, 40, false, &full, &full_len, &err) == CLLM_OK);
    /* a stop string spanning the boundary between tokens 9 and 10 */
    char *pre;
    size_t pre_len;
    cllm_tok_decode(tok, exp, 10, false, &pre, &pre_len, &err);
    size_t a = pre_len >= 2 ? pre_len - 2 : 0;
    char stop[8] = {0};
    size_t sl = full_len - a >= 4 ? 4 : full_len - a;
    memcpy(stop, full + a, sl);
    const char *pos = memmem(full, full_len, stop, sl);
    size_t at = (size_t)(pos - full);

    cllm_sampling sp = base();
    sp.max_tokens = 40;
    sp.ignore_eos = true;
    const char *stops[2] = {"\x01never", stop};
    sp.stop = stops;
    sp.n_stop = 2;
    fake_out o;
    run_one(tok, V, prompt, 20, sp, -1, &o);
    CHECK_MSG(o.fin == CLLM_FINISH_STOP && o.text_len == at && memcmp(o.text, full, at) == 0,
              "stop string: fin %d, %zu bytes, expected %zu", o.fin, o.text_len, at);
    CHECK(o.n <= 12 && memcmp(o.toks, exp, (size_t)o.n * sizeof(int32_t)) == 0);
    sp.include_stop_str_in_output = true;
    run_one(tok, V, prompt, 20, sp, -1, &o);
    CHECK_MSG(o.fin == CLLM_FINISH_STOP && o.text_len == at + sl &&
                  memcmp(o.text, full, at + sl) == 0,
              "include_stop_str_in_output: %zu bytes", o.text_len);
    /* no stop: the streamed text is the decode of the ids */
    sp = base();
    sp.max_tokens = 40;
    sp.ignore_eos = true;
    run_one(tok, V, prompt, 20, sp, -1, &o);
    CHECK(o.fin == CLLM_FINISH_LENGTH && o.n == 40 && o.text_len == full_len &&
          memcmp(o.text, full, full_len) == 0);
    /* stop token id: the first occurrence of exp[7] ends the output, no text for it */
    int sid = exp[7], first = 7;
    for (int i = 0; i < 7; i++)
        if (exp[i] == sid) {
            first = i;
            break;
        }
    sp.stop_token_ids = &sid;
    sp.n_stop_token_ids = 1;
    run_one(tok, V, prompt, 20, sp, -1, &o);
    CHECK(o.fin == CLLM_FINISH_STOP && o.n == first + 1);
    /* EOS = exp[3], min_tokens 6: no EOS among the first 6 tokens */
    sp = base();
    sp.max_tokens = 30;
    sp.min_tokens = 6;
    run_one(tok, V, prompt, 20, sp, exp[3], &o);
    CHECK(o.n >= 6);
    for (int i = 0; i < 5 && i < o.n; i++) CHECK(o.toks[i] != exp[3]);
    sp.min_tokens = 0;
    run_one(tok, V, prompt, 20, sp, exp[3], &o);
    int fe = 3;
    for (int i = 0; i < 3; i++)
        if (exp[i] == exp[3]) {
            fe = i;
            break;
        }
    CHECK(o.fin == CLLM_FINISH_STOP && o.n == fe + 1);
    sp.ignore_eos = true;
    run_one(tok, V, prompt, 20, sp, exp[3], &o);
    CHECK(o.fin == CLLM_FINISH_LENGTH && o.n == 30);
    /* logprobs reach the events */
    sp.logprobs = 2;
    sp.max_tokens = 3;
    run_one(tok, V, prompt, 20, sp, -1, &o);
    CHECK(o.got_lp && o.lp0 <= 0);
    free(full);
    free(pre);
    cllm_tok_free(tok);
}

static int cmp_desc(const void *a, const void *b) {
    const smp_pair *p = a, *q = b;
    if (p->x != q->x) return p->x < q->x ? 1 : -1;
    return p->id - q->id;
}

/* top_k through quickselect + sort == a plain full sort, draw for draw, on a larger vocabulary */
static void test_topk_matches_full_sort(void) {
    enum { V = 3000 };
    static float lg[V];
    static smp_pair ref[V];
    uint64_t st = 3;
    for (int i = 0; i < V; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        lg[i] = (float)((st >> 40) % 1000) / 100.0f; /* many ties */
    }
    smp_scratch s;
    smp_init(&s, V);
    int mism = 0;
    for (int k = 1; k <= 400; k *= 3) {
        cllm_sampling p = base();
        p.temperature = 0.7;
        p.top_k = k;
        p.top_p = 0.9;
        for (int t = 0; t < 300; t++) {
            int got = draw(&s, &p, lg, 11, t);
            for (int i = 0; i < V; i++) ref[i] = (smp_pair){lg[i] * (float)(1.0 / 0.7), i};
            float mx = ref[0].x;
            for (int i = 0; i < V; i++) mx = ref[i].x > mx ? ref[i].x : mx;
            qsort(ref, V, sizeof(smp_pair), cmp_desc);
            int n = k;
            double sum = 0;
            for (int i = 0; i < n; i++) {
                ref[i].x = (float)exp((double)ref[i].x - mx);
                sum += ref[i].x;
            }
            double cum = 0, lim = 0.9 * sum;
            for (int i = 0; i < n; i++) {
                cum += ref[i].x;
                if (cum >= lim) {
                    n = i + 1;
                    break;
                }
            }
            sum = 0;
            for (int i = 0; i < n; i++) sum += ref[i].x;
            double u = smp_uniform(11, 0, t) * sum;
            int want = ref[n - 1].id;
            cum = 0;
            for (int i = 0; i < n; i++) {
                cum += ref[i].x;
                if (u < cum) {
                    want = ref[i].id;
                    break;
                }
            }
            mism += got != want;
        }
    }
    CHECK_MSG(mism == 0, "%d draws differ from the full-sort reference", mism);
    smp_free(&s);
}

int main(void) {
    test_topk_matches_full_sort();
    test_basic();
    test_distribution();
    test_stops();
    return test_report("test_sampler");
}
