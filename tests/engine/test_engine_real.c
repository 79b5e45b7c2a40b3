/* Engine tests through the public API (engine.h, step thread) on synthetic tiny models with the
 * real forward pass: concurrent == alone bitwise (greedy), preempted + resumed == uninterrupted,
 * prefix-cache hit == cold run on the hybrid model (multi-turn), cancel frees everything, text
 * deltas == decode of the ids, over-length rejection, cllm_engine_reset_prefix_cache. */
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test.h"
#include "test_model.h"
#include "base/mem.h"
#include "engine/engine.h"
#include "model/config.h"
#include "model/synth.h"
#include "tokenizer/tokenizer.h"

typedef struct out {
    int32_t toks[1024];
    int n;
    char text[8192];
    size_t text_len;
    cllm_finish fin;
    int cached;
} out;

typedef struct coll {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    out *o; /* [n_outs] indexed by user slot */
} coll;

typedef struct slot_user {
    coll *c;
    out *o;
} slot_user;

static void on_ev(void *user, const cllm_event *ev) {
    slot_user *u = user;
    out *o = u->o + ev->index;
    pthread_mutex_lock(&u->c->mu);
    for (int i = 0; i < ev->n_tokens && o->n < 1024; i++) o->toks[o->n++] = ev->token_ids[i];
    if (ev->text_len && o->text_len + ev->text_len < sizeof(o->text)) {
        memcpy(o->text + o->text_len, ev->text, ev->text_len);
        o->text_len += ev->text_len;
    }
    if (ev->finish != CLLM_FINISH_NONE) {
        o->fin = ev->finish;
        o->cached = ev->cached_prompt_tokens;
        u->c->done++;
        pthread_cond_broadcast(&u->c->cv);
    }
    pthread_mutex_unlock(&u->c->mu);
}

static void wait_done(coll *c, int n) {
    pthread_mutex_lock(&c->mu);
    while (c->done < n) pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

static bool g_bf16;

static cllm_engine *open_engine(const char *dir, int n_blocks_tokens, int budget, int max_seqs,
                                bool caching) {
    cllm_engine_opts o;
    cllm_engine_opts_defaults(&o);
    o.kv_cache_bf16 = g_bf16;
    o.model_dir = dir;
    o.n_threads = 2;
    o.max_num_seqs = max_seqs;
    o.max_num_batched_tokens = budget;
    o.block_size = 16;
    o.enable_prefix_caching = caching;
    o.max_model_len = n_blocks_tokens < 256 ? n_blocks_tokens : 256;
    cllm_config cf;
    cllm_error err = {0};
    if (cllm_config_load(dir, &cf, &err) != CLLM_OK) {
        CHECK_MSG(0, "%s", err.msg);
        return NULL;
    }
    uint64_t block_bytes = (uint64_t)cllm_config_count_layers(&cf, CLLM_LAYER_FULL_ATTN) * 2 * 16 *
                           (uint64_t)cf.n_kv_heads * (uint64_t)cf.head_dim * 4;
    cllm_config_free(&cf);
    o.kv_cache_bytes = block_bytes * (uint64_t)(n_blocks_tokens / 16);
    cllm_engine *e = NULL;
    if (cllm_engine_create(&o, &e, &err) != CLLM_OK) e = NULL;
    CHECK_MSG(e != NULL, "engine create: %s", err.msg);
    return e;
}

static cllm_sampling greedy(const cllm_engine *e, int max_tokens) {
    cllm_sampling s;
    cllm_sampling_defaults(e, &s);
    s.temperature = 0;
    s.max_tokens = max_tokens;
    s.ignore_eos = true;
    return s;
}

/* Runs the requests (all submitted at once) and waits. */
static void run(cllm_engine *e, int n, int32_t **prompts, const int *lens, const cllm_sampling *sp,
                out *outs) {
    coll c = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, outs};
    slot_user *u = calloc((size_t)n, sizeof(*u));
    int total = 0;
    for (int i = 0; i < n; i++) {
        u[i].c = &c;
        u[i].o = &outs[total];
        memset(&outs[total], 0, sizeof(out) * (size_t)sp[i].n);
        cllm_request r = {(const int *)prompts[i], lens[i], sp[i], on_ev, &u[i], NULL};
        uint64_t id;
        cllm_error err = {0};
        CHECK_MSG(cllm_engine_submit(e, &r, &id, &err) == CLLM_OK, "%s", err.msg);
        total += sp[i].n;
    }
    wait_done(&c, total);
    free(u);
}

static uint64_t rs = 99;
static int32_t rtok(int V) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (int32_t)((rs >> 33) % (uint64_t)(V - 8));
}

static bool same(const out *a, const out *b) {
    return a->n == b->n && memcmp(a->toks, b->toks, (size_t)a->n * sizeof(int32_t)) == 0;
}

static void wait_idle(cllm_engine *e) {
    for (int i = 0; i < 2000; i++) {
        cllm_engine_stats st;
        cllm_engine_stats_get(e, &st);
        if (st.running == 0 && st.waiting == 0) return;
        usleep(1000);
    }
}

static void test_model(const char *dir, bool hybrid, const cllm_tok *tok) {
    enum { N = 5 };
    int V = 512;
    static int32_t pbuf[N][200];
    int32_t *prompts[N];
    int lens[N] = {7, 33, 50, 16, 70};
    int maxt[N] = {20, 12, 30, 17, 25};
    cllm_sampling sp[N];
    for (int i = 0; i < N; i++) {
        prompts[i] = pbuf[i];
        for (int k = 0; k < lens[i]; k++) pbuf[i][k] = rtok(V);
    }
    static out alone[N], conc[N], pre[N];
    /* alone, one at a time, caching off */
    cllm_engine *e = open_engine(dir, 4096, 64, 8, false);
    if (!e) return;
    for (int i = 0; i < N; i++) sp[i] = greedy(e, maxt[i]);
    for (int i = 0; i < N; i++) run(e, 1, &prompts[i], &lens[i], &sp[i], &alone[i]);
    for (int i = 0; i < N; i++) CHECK(alone[i].n == maxt[i] && alone[i].fin == CLLM_FINISH_LENGTH);
    /* text deltas == decode of the ids */
    if (tok) {
        char *txt;
        size_t tl;
        cllm_error err = {0};
        CHECK(cllm_tok_decode(tok, alone[0].toks, (size_t)alone[0].n, true, &txt, &tl, &err) ==
              CLLM_OK);
        CHECK_MSG(tl == alone[0].text_len && memcmp(txt, alone[0].text, tl) == 0,
                  "streamed text differs from decode");
        free(txt);
    }
    /* concurrent, small token budget (chunked prefill mixed with decodes) */
    run(e, N, prompts, lens, sp, conc);
    for (int i = 0; i < N; i++)
        CHECK_MSG(same(&alone[i], &conc[i]), "%s: request %d concurrent != alone", dir, i);
    /* n = 2 greedy: both forked samples (shared full blocks, copied partial block and state)
     * continue exactly like the request alone */
    for (int i = 1; i < 3; i++) {
        cllm_sampling s2 = sp[i];
        s2.n = 2;
        out o2[2];
        run(e, 1, &prompts[i], &lens[i], &s2, o2);
        CHECK_MSG(same(&o2[0], &alone[i]) && same(&o2[1], &alone[i]),
                  "%s: n=2 greedy request %d differs", dir, i);
    }
    wait_idle(e);
    cllm_engine_stats st;
    cllm_engine_stats_get(e, &st);
    CHECK(st.kv_blocks_used == 0 && st.state_slots_used == 0);
    cllm_engine_free(e);

    /* preemption: 10 blocks (160 tokens) for requests of up to 95 tokens each */
    e = open_engine(dir, 160, 48, 8, true);
    if (!e) return;
    run(e, N, prompts, lens, sp, pre);
    cllm_engine_stats_get(e, &st);
    fprintf(stderr, "%s: %llu preemptions, prefix hits %llu of %llu tokens\n", dir,
            (unsigned long long)st.preemptions, (unsigned long long)st.prefix_hits_tokens,
            (unsigned long long)st.prefix_queries_tokens);
    CHECK(st.preemptions > 0);
    for (int i = 0; i < N; i++)
        CHECK_MSG(same(&alone[i], &pre[i]), "%s: request %d preempted != alone", dir, i);
    cllm_engine_free(e);

    /* multi-turn: turn 2 = turn 1 prompt + answer + new tokens; hit == cold */
    e = open_engine(dir, 4096, 64, 8, true);
    cllm_engine *cold = open_engine(dir, 4096, 64, 8, false);
    if (!e || !cold) return;
    static int32_t conv[400];
    int n = 40;
    for (int k = 0; k < n; k++) conv[k] = rtok(V);
    int32_t *pc = conv;
    for (int t = 0; t < 3; t++) {
        out hot, cl;
        cllm_sampling s1 = greedy(e, 20);
        run(e, 1, &pc, &n, &s1, &hot);
        run(cold, 1, &pc, &n, &s1, &cl);
        CHECK_MSG(same(&hot, &cl), "%s: turn %d prefix-cache hit != cold run", dir, t);
        if (t > 0) {
            int shared = n - 9; /* previous prompt + answer */
            CHECK_MSG(hot.cached >= shared - 16 && hot.cached > 0, "%s: turn %d reused %d of %d",
                      dir, t, hot.cached, shared);
        }
        memcpy(conv + n, hot.toks, (size_t)hot.n * sizeof(int32_t));
        n += hot.n;
        for (int k = 0; k < 9; k++) conv[n++] = rtok(V);
    }
    /* cllm_engine_reset_prefix_cache: the last prompt again reuses its cached prefix; after the
     * reset (applied before the next submission is queued) nothing is cached and the tokens are
     * the cold engine's */
    {
        out warm, reset, cl;
        cllm_sampling s1 = greedy(e, 8);
        run(e, 1, &pc, &n, &s1, &warm);
        cllm_engine_reset_prefix_cache(e);
        run(e, 1, &pc, &n, &s1, &reset);
        run(cold, 1, &pc, &n, &s1, &cl);
        CHECK_MSG(warm.cached > 0, "%s: the repeated prompt reused nothing", dir);
        CHECK_MSG(reset.cached == 0, "%s: %d tokens reused after the reset", dir, reset.cached);
        CHECK_MSG(same(&warm, &cl) && same(&reset, &cl), "%s: reset-cache run != cold", dir);
    }
    /* n = 3 with a seed: same samples alone and with the prefix warm */
    cllm_sampling s3 = greedy(e, 10);
    s3.temperature = 0.9;
    s3.n = 3;
    s3.seed = 5;
    s3.has_seed = true;
    out o3a[3], o3b[3];
    run(cold, 1, &prompts[2], &lens[2], &s3, o3a);
    run(e, 1, &prompts[2], &lens[2], &s3, o3b);
    for (int k = 0; k < 3; k++)
        CHECK_MSG(same(&o3a[k], &o3b[k]) && o3a[k].n == 10, "n=3 sample %d differs", k);
    cllm_engine_free(cold);

    /* cancel frees everything */
    coll c = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL};
    static out co[4];
    memset(co, 0, sizeof(co));
    slot_user u[4];
    uint64_t ids[4];
    for (int i = 0; i < 4; i++) {
        u[i].c = &c;
        u[i].o = &co[i];
        cllm_sampling s = greedy(e, 150);
        cllm_request r = {(const int *)prompts[i], lens[i], s, on_ev, &u[i], NULL};
        CHECK(cllm_engine_submit(e, &r, &ids[i], NULL) == CLLM_OK);
    }
    /* Cancel mid-generation: wait for the first request's first token (it then has ~149 steps to
     * go) instead of sleeping a fixed 20 ms, which the tiny model could outrun (flaky abort). */
    for (int spin = 0; spin < 200000; spin++) {
        pthread_mutex_lock(&c.mu);
        int started = co[0].n > 0 || co[0].fin != CLLM_FINISH_NONE;
        pthread_mutex_unlock(&c.mu);
        if (started) break;
        usleep(50);
    }
    for (int i = 0; i < 4; i++) cllm_engine_cancel(e, ids[i]);
    wait_done(&c, 4);
    for (int i = 0; i < 4; i++)
        CHECK(co[i].fin == CLLM_FINISH_ABORT || co[i].fin == CLLM_FINISH_LENGTH);
    wait_idle(e);
    cllm_engine_stats_get(e, &st);
    CHECK_MSG(st.kv_blocks_used == 0 && st.state_slots_used == 0 && st.running == 0,
              "after cancel: %llu blocks, %d slots", (unsigned long long)st.kv_blocks_used,
              st.state_slots_used);
    CHECK(st.requests_finished[CLLM_FINISH_ABORT] >= 1);

    /* bf16 KV: concurrent == alone too (bitwise, within the dtype) */
    g_bf16 = true;
    cllm_engine *eb = open_engine(dir, 4096, 40, 8, true);
    g_bf16 = false;
    if (eb) {
        static out ab[N], cb[N];
        for (int i = 0; i < N; i++) run(eb, 1, &prompts[i], &lens[i], &sp[i], &ab[i]);
        run(eb, N, prompts, lens, sp, cb);
        for (int i = 0; i < N; i++)
            CHECK_MSG(same(&ab[i], &cb[i]), "%s: bf16 KV request %d concurrent != alone", dir, i);
        cllm_engine_free(eb);
    }

    /* over-length: vLLM's words */
    cllm_sampling s = greedy(e, 100);
    static int32_t longp[200];
    cllm_request r = {(const int *)longp, 200, s, on_ev, &u[0], NULL};
    cllm_error err = {0};
    CHECK(cllm_engine_submit(e, &r, NULL, &err) == CLLM_EINVAL);
    CHECK(strstr(
              err.msg,
              "maximum context length is 256 tokens. However, you requested 300 tokens (200 in the "
              "messages, 100 in the completion)") != NULL);
    (void)hybrid;
    cllm_engine_free(e);
}

int main(void) {
    const char *tmp = test_tmp();
    const char *src = test_src();
    mkdir(tmp, 0755);
    char dir[1024];
    const char *cfgs[2] = {"tiny.json", "tiny-qwen3.json"};
    for (int k = 0; k < 2; k++) {
        snprintf(dir, sizeof(dir), "%s/engine_real_%s", tmp, cfgs[k]);
        bool have_tok;
        cllm_error err = {0};
        if (tm_synth_f32(src, cfgs[k], dir, &have_tok, &err) != CLLM_OK) {
            CHECK_MSG(0, "synth %s: %s", cfgs[k], err.msg);
            continue;
        }
        cllm_tok *tok = NULL;
        if (have_tok && cllm_tok_load(dir, &tok, &err) != CLLM_OK) tok = NULL;
        test_model(dir, k == 0, tok);
        cllm_tok_free(tok);
    }
    return test_report("test_engine_real");
}
