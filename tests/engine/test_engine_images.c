/* Image input through the scheduler (sched_img.c) over the fake model: the forward call folds,
 * for each position, a value made of what enters there (the token, or the image row's first
 * float) and its rotary position triple, so the output depends on the image's rows, on where
 * they sit and on the M-RoPE positions. The expected output is worked out here independently
 * (Qwen3-VL's position rule written again, the fake encoder's rows). Checks: output equal to
 * that expectation alone, in chunks that cut an image, beside other requests, after
 * preemption; the same image twice hits the prefix cache and a different image behind the same
 * text does not; an image is encoded once per request; bad requests are refused by name. */
#include <string.h>

#include "test.h"
#include "test_engine_fake.h"
#include "engine/sched_int.h"

enum { V = 97, H = 4, MERGE = 2, PDIM = 3, IMG_TOK = 96 };

typedef struct img_model {
    fake_model f;
    int encodes, runs, frees;
} img_model;

static uint32_t fbits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return u;
}

/* What the fake folds at a position: the token as it is for plain text at t = h = w = p,
 * otherwise a mix of what entered (token or row) and the triple. */
static int32_t enter_value(int32_t tok, const float *row, const int32_t tr[3], int p) {
    if (!row && tr[0] == p && tr[1] == p && tr[2] == p) return tok;
    uint64_t z = row ? 0x51ed27ull ^ fbits(row[0]) : (uint64_t)tok;
    for (int c = 0; c < 3; c++) z = fake_mix(z * 1000003ull + (uint64_t)(uint32_t)tr[c]);
    return (int32_t)(z % (V - 1));
}

static cllm_status img_forward(void *ctx, const cllm_batch *b, float *logits, cllm_error *err) {
    img_model *m = ctx;
    int T = 0;
    for (int i = 0; i < b->n_seqs; i++) T += b->seqs[i].n_tokens;
    cllm_seq_batch *sb = malloc((size_t)b->n_seqs * sizeof(*sb));
    int32_t *vals = malloc((size_t)T * sizeof(int32_t));
    for (int i = 0, t = 0; i < b->n_seqs; i++) {
        const cllm_seq_batch *s = &b->seqs[i];
        sb[i] = *s;
        sb[i].tokens = vals + t;
        for (int k = 0; k < s->n_tokens; k++, t++) {
            int p = s->start_pos + k;
            int32_t tr[3] = {p + s->rope_delta, p + s->rope_delta, p + s->rope_delta};
            if (s->mrope_pos) memcpy(tr, s->mrope_pos + 3 * k, sizeof(tr));
            const float *row = s->embeds ? s->embeds[k] : NULL;
            if (row && s->tokens[k] != IMG_TOK) fake_err(&m->f, "a row on a text token");
            /* (a pad without its row shows as an output off the expectation; a generated
             * token may be the pad id and rightly has no row) */
            vals[t] = enter_value(s->tokens[k], row, tr, p);
        }
    }
    cllm_batch nb = {sb, b->n_seqs};
    cllm_status rc = fake_forward(&m->f, &nb, logits, err);
    free(sb);
    free(vals);
    return rc;
}

static void img_copy_block(void *ctx, int dst, int src) {
    fake_copy_block(&((img_model *)ctx)->f, dst, src);
}
static void img_copy_state(void *ctx, int dst, int src) {
    fake_copy_state(&((img_model *)ctx)->f, dst, src);
}

/* The fake tower: row k of an image is a function of its pixels and k. */
static void fake_rows(const float *pixels, const int grid[3], float *out) {
    int np = grid[0] * grid[1] * grid[2], n = np / (MERGE * MERGE);
    uint64_t h = 77;
    for (int i = 0; i < np * PDIM; i++) h = fake_mix(h ^ fbits(pixels[i]));
    for (int k = 0; k < n; k++)
        for (int j = 0; j < H; j++)
            out[k * H + j] = (float)(fake_mix(h + (uint64_t)k * 131 + (uint64_t)j) >> 40);
}

/* The fake tower in FAKE_UNITS work units; the rows appear with the last. */
enum { FAKE_UNITS = 5 };
typedef struct fake_job {
    const float *pixels;
    int grid[3], left;
} fake_job;

static void *img_start(void *ctx, const float *pixels, const int grid[3], int *units,
                       cllm_error *err) {
    (void)err;
    ((img_model *)ctx)->encodes++;
    fake_job *j = calloc(1, sizeof(*j));
    j->pixels = pixels;
    memcpy(j->grid, grid, sizeof(j->grid));
    j->left = *units = FAKE_UNITS;
    return j;
}

static cllm_status img_run(void *ctx, void *job, int n, float *out, bool *done, cllm_error *err) {
    (void)err;
    img_model *m = ctx;
    fake_job *j = job;
    if (n < 1 || n > j->left) fake_err(&m->f, "image_run: units out of range");
    m->runs++;
    j->left -= n;
    if ((*done = j->left <= 0)) fake_rows(j->pixels, j->grid, out);
    return CLLM_OK;
}

static void img_free(void *ctx, void *job) {
    ((img_model *)ctx)->frees++;
    free(job);
}

static const eng_model_ops img_ops = {img_forward, img_copy_block, img_copy_state, NULL,
                                      img_start,   img_run,        img_free};

typedef struct tcase {
    int32_t prompt[256];
    int n;
    cllm_image_input im[3];
    float *px[3];
    int n_im;
} tcase;

/* text, then for each image: a vision-start token, its pads, an end token; then text */
static void make_case(tcase *c, int pre, const int (*grids)[3], const int *seeds, int n_im,
                      int post, int text_seed) {
    memset(c, 0, sizeof(*c));
    uint64_t r = (uint64_t)text_seed;
    for (int i = 0; i < pre; i++) c->prompt[c->n++] = (int32_t)((r = fake_mix(r + 1)) % 90);
    for (int k = 0; k < n_im; k++) {
        c->prompt[c->n++] = 91;
        int np = grids[k][0] * grids[k][1] * grids[k][2];
        c->im[k].grid[0] = grids[k][0];
        c->im[k].grid[1] = grids[k][1];
        c->im[k].grid[2] = grids[k][2];
        c->im[k].pos = c->n;
        c->px[k] = malloc((size_t)np * PDIM * sizeof(float));
        for (int i = 0; i < np * PDIM; i++)
            c->px[k][i] = (float)(fake_mix((uint64_t)seeds[k] * 7919 + (uint64_t)i) % 1000);
        c->im[k].pixels = c->px[k];
        for (int i = 0; i < np / (MERGE * MERGE); i++) c->prompt[c->n++] = IMG_TOK;
        c->prompt[c->n++] = 92;
    }
    for (int i = 0; i < post; i++) c->prompt[c->n++] = (int32_t)((r = fake_mix(r + 1)) % 90);
    c->n_im = n_im;
}

static void free_case(tcase *c) {
    for (int k = 0; k < c->n_im; k++) free(c->px[k]);
}

/* The output worked out without the engine: Qwen3-VL positions, the fake rows, greedy. */
static void expected(const tcase *c, int n_out, int32_t *out) {
    int32_t tr[256][3];
    const float *rows[256] = {0};
    float emb[3][64 * H];
    int next = 0, at = 0;
    for (int k = 0; k <= c->n_im; k++) {
        int end = k < c->n_im ? c->im[k].pos : c->n;
        for (; at < end; at++, next++) tr[at][0] = tr[at][1] = tr[at][2] = next;
        if (k == c->n_im) break;
        const int *g = c->im[k].grid;
        fake_rows(c->px[k], g, emb[k]);
        int gh = g[1] / MERGE, gw = g[2] / MERGE, i = 0;
        for (int t = 0; t < g[0]; t++)
            for (int y = 0; y < gh; y++)
                for (int x = 0; x < gw; x++, at++, i++) {
                    tr[at][0] = next + t;
                    tr[at][1] = next + y;
                    tr[at][2] = next + x;
                    rows[at] = emb[k] + i * H;
                }
        next += gh > gw ? gh : gw; /* HF: max(grid_h, grid_w) / merge */
    }
    int delta = next - c->n;
    uint64_t h = 0;
    for (int p = 0; p < c->n; p++) h = fake_fold(h, enter_value(c->prompt[p], rows[p], tr[p], p));
    for (int i = 0; i < n_out; i++) {
        out[i] = fake_argmax(V, h);
        int p = c->n + i, q = p + delta;
        int32_t t3[3] = {q, q, q};
        h = fake_fold(h, enter_value(out[i], NULL, t3, p));
    }
}

static uint64_t next_id = 1;

static cllm_status submit(sched *s, const sched_cfg *cfg, const tcase *c, int max_tokens,
                          fake_out *o, cllm_error *err) {
    cllm_request r = {(const int *)c->prompt, c->n, fake_greedy(max_tokens), fake_collect, o, NULL};
    r.images = c->im;
    r.n_images = c->n_im;
    eng_req *q;
    cllm_status rc = sched_req_new(cfg, &r, next_id++, 0, &q, err);
    if (rc == CLLM_OK) sched_add(s, q);
    return rc;
}

static sched_cfg img_cfg(int n_blocks, int bs, int max_seqs, int budget, bool has_state) {
    sched_cfg c = fake_cfg(V, n_blocks, bs, max_seqs, budget, has_state, true);
    c.hidden_size = H;
    c.vision_merge = MERGE;
    c.vision_patch_dim = PDIM;
    c.image_token_id = IMG_TOK;
    return c;
}

static void run(sched *s) {
    for (int i = 0; i < 10000 && sched_has_work(s); i++) {
        sched_step(s);
        const char *bad = sched_check(s);
        CHECK_MSG(!bad, "invariant: %s", bad ? bad : "");
        if (bad) break;
    }
}

static const int G1[3][3] = {{1, 4, 6}, {1, 2, 2}, {1, 6, 4}};

/* one request alone, in several budgets (chunks cutting the image), hybrid and not */
static void test_alone(void) {
    int budgets[] = {1000, 5, 3, 1};
    for (int hs = 0; hs < 2; hs++)
        for (size_t bi = 0; bi < sizeof(budgets) / sizeof(budgets[0]); bi++) {
            tcase c;
            int seeds[] = {1, 2, 3};
            make_case(&c, 5, G1, seeds, 3, 7, 11);
            img_model m = {0};
            fake_init(&m.f, V, 64, 4, 4 + 32, hs);
            sched_cfg cfg = img_cfg(64, 4, 4, budgets[bi], hs);
            sched *s;
            CHECK(sched_create(&cfg, &img_ops, &m, &s, NULL) == CLLM_OK);
            fake_out o[1] = {0};
            cllm_error err = {0};
            CHECK(submit(s, &cfg, &c, 12, o, &err) == CLLM_OK);
            run(s);
            int32_t want[12];
            expected(&c, 12, want);
            CHECK_MSG(o[0].n == 12 && !memcmp(o[0].toks, want, sizeof(want)),
                      "budget %d state %d: output differs from the expectation", budgets[bi], hs);
            CHECK_MSG(m.encodes == 3 && m.frees == 3, "encodes %d, frees %d, want 3", m.encodes,
                      m.frees);
            /* a budget of 1000 encodes each image in one call; a small one spreads it */
            CHECK_MSG(budgets[bi] >= 1000 ? m.runs == 3 : m.runs > 3,
                      "budget %d: %d image_run calls", budgets[bi], m.runs);
            CHECK_MSG(!m.f.errors, "fake: %s", m.f.last_error);
            cllm_engine_stats st;
            sched_stats(s, &st);
            CHECK(st.images_encoded == 3 && st.image_tokens == (6 + 1 + 6));
            sched_free(s);
            fake_free(&m.f);
            free_case(&c);
        }
}

/* same text, same image: a hit; same text, another image: no hit past the image, and the
 * output is that image's own */
static void test_cache(bool hybrid) {
    img_model m = {0};
    fake_init(&m.f, V, 128, 4, 4 + 32, hybrid);
    sched_cfg cfg = img_cfg(128, 4, 4, 1000, hybrid);
    sched *s;
    CHECK(sched_create(&cfg, &img_ops, &m, &s, NULL) == CLLM_OK);
    const int g[1][3] = {{1, 4, 4}};
    int sa[] = {5}, sb[] = {6};
    tcase a, a2, b;
    make_case(&a, 8, g, sa, 1, 9, 3);
    make_case(&a2, 8, g, sa, 1, 9, 3);
    make_case(&b, 8, g, sb, 1, 9, 3);
    int32_t wa[10], wb[10];
    expected(&a, 10, wa);
    expected(&b, 10, wb);
    CHECK_MSG(memcmp(wa, wb, sizeof(wa)), "the two images give the same expectation");
    fake_out oa[1] = {0}, oa2[1] = {0}, ob[1] = {0};
    cllm_error err = {0};
    CHECK(submit(s, &cfg, &a, 10, oa, &err) == CLLM_OK);
    run(s);
    CHECK(submit(s, &cfg, &b, 10, ob, &err) == CLLM_OK);
    run(s);
    CHECK(submit(s, &cfg, &a2, 10, oa2, &err) == CLLM_OK);
    run(s);
    CHECK_MSG(!memcmp(oa[0].toks, wa, sizeof(wa)), "image a");
    CHECK_MSG(!memcmp(ob[0].toks, wb, sizeof(wb)), "image b behind the same text");
    CHECK_MSG(!memcmp(oa2[0].toks, wa, sizeof(wa)), "image a again");
    /* b shares the text before the image: 8 + 1 tokens, two full blocks of 4 at most */
    CHECK_MSG(ob[0].cached <= 8, "b took %d cached tokens (the image's blocks are a's)",
              ob[0].cached);
    CHECK_MSG(oa2[0].cached >= 16, "a again took only %d cached tokens", oa2[0].cached);
    CHECK_MSG(m.encodes == 2, "encodes %d: a again must not encode (all cached)", m.encodes);
    CHECK_MSG(!m.f.errors, "fake: %s", m.f.last_error);
    sched_free(s);
    fake_free(&m.f);
    free_case(&a);
    free_case(&a2);
    free_case(&b);
}

/* several image requests with text-only ones, few blocks (preemption) */
static void test_mixed_preempt(void) {
    img_model m = {0};
    fake_init(&m.f, V, 24, 4, 6 + 32, true);
    sched_cfg cfg = img_cfg(24, 4, 6, 7, true);
    sched *s;
    CHECK(sched_create(&cfg, &img_ops, &m, &s, NULL) == CLLM_OK);
    enum { N = 5 };
    tcase c[N];
    fake_out o[N];
    memset(o, 0, sizeof(o));
    cllm_error err = {0};
    for (int i = 0; i < N; i++) {
        int seeds[] = {10 + i, 20 + i};
        const int g[2][3] = {{1, 2, 4}, {1, 4, 2}};
        make_case(&c[i], 2 + i, g, seeds, i % 3 == 2 ? 0 : 1 + i % 2, 3, 40 + i);
        CHECK(submit(s, &cfg, &c[i], 30, &o[i], &err) == CLLM_OK);
    }
    run(s);
    cllm_engine_stats st;
    sched_stats(s, &st);
    CHECK_MSG(st.preemptions > 0, "no preemption happened (the test needs one)");
    int images = 0;
    for (int i = 0; i < N; i++) {
        int32_t want[30];
        expected(&c[i], 30, want);
        CHECK_MSG(o[i].n == 30 && !memcmp(o[i].toks, want, sizeof(want)), "request %d", i);
        images += c[i].n_im;
    }
    CHECK_MSG(m.encodes <= images, "encodes %d for %d images (preemption re-encoded)", m.encodes,
              images);
    CHECK_MSG(!m.f.errors, "fake: %s", m.f.last_error);
    sched_free(s);
    fake_free(&m.f);
    for (int i = 0; i < N; i++) free_case(&c[i]);
}

/* cancelled while its image is half encoded: the job is dropped, nothing leaks (ASan), and a
 * text request queued behind it is served */
static void test_cancel_mid_encode(void) {
    img_model m = {0};
    fake_init(&m.f, V, 32, 4, 2 + 32, false);
    sched_cfg cfg = img_cfg(32, 4, 2, 1, false);
    sched *s;
    CHECK(sched_create(&cfg, &img_ops, &m, &s, NULL) == CLLM_OK);
    const int g[1][3] = {{1, 4, 4}};
    int sd[] = {3};
    tcase c, t;
    make_case(&c, 2, g, sd, 1, 2, 5);
    make_case(&t, 6, g, sd, 0, 0, 6);
    fake_out o[2];
    memset(o, 0, sizeof(o));
    cllm_error err = {0};
    CHECK(submit(s, &cfg, &c, 4, &o[0], &err) == CLLM_OK);
    uint64_t id = next_id - 1;
    CHECK(submit(s, &cfg, &t, 4, &o[1], &err) == CLLM_OK);
    sched_step(s);
    sched_step(s);
    CHECK_MSG(m.runs == 2 && m.frees == 0, "runs %d frees %d after two steps", m.runs, m.frees);
    CHECK_MSG(o[1].n == 0, "the text request went ahead of the image one");
    sched_cancel(s, id);
    CHECK_MSG(m.frees == 1, "the cancelled request's job was not freed");
    run(s);
    int32_t want[4];
    expected(&t, 4, want);
    CHECK_MSG(o[1].n == 4 && !memcmp(o[1].toks, want, sizeof(want)), "the text request");
    CHECK(o[0].fin == CLLM_FINISH_ABORT);
    sched_free(s);
    fake_free(&m.f);
    free_case(&c);
    free_case(&t);
}

/* beside a decoding request the image takes one unit per step whatever the budget (a unit is
 * far dearer than its tokens' worth of prefill); alone it takes what the budget allows */
static void test_unit_per_step(void) {
    img_model m = {0};
    fake_init(&m.f, V, 64, 4, 4 + 32, true);
    sched_cfg cfg = img_cfg(64, 4, 4, 1000, true);
    sched *s;
    CHECK(sched_create(&cfg, &img_ops, &m, &s, NULL) == CLLM_OK);
    const int g[1][3] = {{1, 4, 4}};
    int sd[] = {9};
    tcase t, c;
    make_case(&t, 5, g, sd, 0, 0, 8);
    make_case(&c, 3, g, sd, 1, 2, 9);
    fake_out o[2];
    memset(o, 0, sizeof(o));
    cllm_error err = {0};
    CHECK(submit(s, &cfg, &t, 30, &o[0], &err) == CLLM_OK);
    sched_step(s);
    sched_step(s);
    CHECK(submit(s, &cfg, &c, 4, &o[1], &err) == CLLM_OK);
    for (int k = 1; k <= 3; k++) {
        sched_step(s);
        CHECK_MSG(m.runs == k, "step %d beside a decode: %d image_run calls", k, m.runs);
    }
    run(s);
    int32_t want[4];
    expected(&c, 4, want);
    CHECK_MSG(o[1].n == 4 && !memcmp(o[1].toks, want, sizeof(want)), "the image request");
    sched_free(s);
    fake_free(&m.f);
    free_case(&t);
    free_case(&c);
}

static void test_refusals(void) {
    img_model m = {0};
    fake_init(&m.f, V, 32, 4, 2 + 32, false);
    sched_cfg cfg = img_cfg(32, 4, 2, 100, false);
    sched *s;
    CHECK(sched_create(&cfg, &img_ops, &m, &s, NULL) == CLLM_OK);
    const int g[1][3] = {{1, 4, 4}};
    int sd[] = {1};
    tcase c;
    fake_out o[1] = {0};
    cllm_error err = {0};
    make_case(&c, 3, g, sd, 1, 3, 1);
    c.prompt[c.im[0].pos + 1] = 5; /* a pad replaced */
    CHECK(submit(s, &cfg, &c, 3, o, &err) == CLLM_EINVAL && strstr(err.msg, "image pad"));
    free_case(&c);
    make_case(&c, 3, g, sd, 1, 3, 1);
    c.prompt[1] = IMG_TOK; /* a pad no image accounts for */
    CHECK(submit(s, &cfg, &c, 3, o, &err) == CLLM_EINVAL &&
          strstr(err.msg, "image pad tokens but its images give"));
    free_case(&c);
    make_case(&c, 3, g, sd, 1, 3, 1);
    c.im[0].grid[2] = 3; /* not a multiple of the merge size */
    CHECK(submit(s, &cfg, &c, 3, o, &err) == CLLM_EINVAL && strstr(err.msg, "merge size"));
    c.im[0].grid[2] = 4;
    c.im[0].pos = c.n - 2; /* past the prompt */
    CHECK(submit(s, &cfg, &c, 3, o, &err) == CLLM_EINVAL && strstr(err.msg, "run past"));
    free_case(&c);
    sched_cfg nov = cfg;
    nov.vision_merge = 0;
    make_case(&c, 3, g, sd, 1, 3, 1);
    CHECK(submit(s, &nov, &c, 3, o, &err) == CLLM_EINVAL && strstr(err.msg, "no vision tower"));
    free_case(&c);
    sched_free(s);
    fake_free(&m.f);
}

int main(void) {
    test_alone();
    test_cache(false);
    test_cache(true);
    test_mixed_preempt();
    test_cancel_mid_encode();
    test_unit_per_step();
    test_refusals();
    return test_report("test_engine_images");
}
