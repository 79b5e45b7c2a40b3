/* The screened int8 lm_head (model/fwd_lmhead.c) against the plain one, on a quantized tiny
 * model (per-group scales), twice, with CLLM_LM_SCREEN=8: the hi-plane estimate (CLLM_LM_EST=4)
 * on vocabulary 1000 (31 panels of 32 + one of 8), and the 2-bit estimate (CLLM_LM_EST=2, about
 * 4x the hi plane's error) on vocabulary 8200 (256 panels + one of 8), where 8 candidates alone
 * miss the argmax in 4 of the 40 greedy rows and the settle margin (LM_MARGIN_Z RMS errors of
 * the row's own rescored estimates) brings them all back:
 *  - rows that need every logit (eval's LOGITS_ALL, logits_topk 0) are the plain rows up to
 *    float rounding (the planes' per-group float ops), argmax the same;
 *  - greedy rows (logits_topk 1): every finite entry is bitwise the same model's exact row's,
 *    the screen did drop entries to -inf, and the argmax is the plain one's over 40 steps;
 *  - top-k rows (k 5): the 5 best ids are the plain row's, their values the exact row's;
 *  - 1 and 2 threads give the same bytes (-inf pattern included);
 *  - batch and thread invariance: each row of batches that mix row kinds (greedy, top-k 5, 20
 *    and 256 with more candidates than the 32 panels, logits_n 2, exact LAST and ALL rows, a
 *    NONE chunk) and sizes is bitwise its sequence's row alone, at 1 and 2 threads, repeated
 *    (a top-k row's candidate list once overran into the next row's, a race at 2 threads, and
 *    into the earlier rows' counts and thresholds past the last row's);
 *  - CLLM_LM_SCREEN=abc is refused with a message naming it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/options.h"
#include "model/seq_runner.h"
#include "model/synth.h"
#include "test.h"
#include "test_model.h"

#define NP 13 /* prompt tokens */
#define NG 40 /* decode steps */

static const char *g_est; /* the case's CLLM_LM_EST */

/* screen: a CLLM_LM_SCREEN value, parsed by the CLI's option table */
static int open_runner(cllm_seq_runner *r, const char *dir, const char *screen, int threads) {
    cllm_opts o;
    cllm_error err = {0};
    cllm_status s = cllm_opts_from_env(&o, &err);
    if (s == CLLM_OK) s = cllm_opts_set(&o, "CLLM_LM_SCREEN", screen, NULL, &err);
    if (s == CLLM_OK) s = cllm_opts_set(&o, "CLLM_LM_EST", g_est, NULL, &err);
    if (s == CLLM_OK)
        s = cllm_seq_runner_open(r, dir, &o.fwd, threads, NP + NG + 8, 16, CLLM_KV_F32, &err);
    CHECK_MSG(s == CLLM_OK, "open (CLLM_LM_SCREEN=%s): %s", screen, err.msg);
    return s == CLLM_OK ? 0 : -1;
}

static int step(cllm_seq_runner *r, const int32_t *t, int n, cllm_logits_mode mode, float *y) {
    cllm_error err = {0};
    cllm_status s = cllm_seq_runner_step(r, t, n, mode, y, &err);
    CHECK_MSG(s == CLLM_OK, "step: %s", err.msg);
    return s == CLLM_OK ? 0 : -1;
}

static int argmax(const float *y, int V) {
    int a = 0;
    for (int v = 1; v < V; v++)
        if (y[v] > y[a]) a = v;
    return a;
}

/* The k best of y (value descending, then lowest id) into ids. */
static void topk(const float *y, int V, int k, int *ids) {
    for (int i = 0; i < k; i++) {
        int b = -1;
        for (int v = 0; v < V; v++) {
            int used = 0;
            for (int q = 0; q < i; q++) used |= ids[q] == v;
            if (!used && (b < 0 || y[v] > y[b])) b = v;
        }
        ids[i] = b;
    }
}

/* One sequence of a batch-invariance case: kind g (greedy), f/t/T (top-k 5/20/256), v (greedy,
 * logits_n 2), e (exact LAST), a (ALL), n (NONE); n_tok prompt tokens from position 0. */
typedef struct inv_seq {
    char kind;
    int n_tok;
} inv_seq;

static cllm_seq_batch inv_batch_of(inv_seq q, const int32_t *tok, const int32_t *table, int slot) {
    cllm_seq_batch b = {.tokens = tok,
                        .n_tokens = q.n_tok,
                        .block_table = table,
                        .n_table = 1,
                        .state_slot = slot,
                        .logits = CLLM_LOGITS_LAST,
                        .logits_scale = 1.0f};
    switch (q.kind) {
    case 'g':
        b.logits_topk = 1;
        break;
    case 'f':
        b.logits_topk = 5;
        break;
    case 't':
        b.logits_topk = 20;
        break;
    case 'T':
        b.logits_topk = CLLM_LOGITS_TOPK_MAX;
        break;
    case 'v':
        b.logits_topk = 1, b.logits_n = 2;
        break;
    case 'a':
        b.logits = CLLM_LOGITS_ALL;
        break;
    case 'n':
        b.logits = CLLM_LOGITS_NONE;
        break;
    default:
        break; /* e: the exact row */
    }
    return b;
}

/* Runs seqs [0, n) as one batch from position 0 (fresh state slots) into y. */
static int inv_run(cllm_fwd_ctx *c, cllm_kv_pool *kv, cllm_state_pool *st, const inv_seq *q, int n,
                   const int32_t (*tok)[8], float *y) {
    cllm_seq_batch sb[16];
    static const int32_t tables[16] = {3, 7, 1, 12, 5, 0, 9, 14, 2, 11, 6, 15, 4, 10, 8, 13};
    for (int i = 0; i < n; i++) {
        cllm_state_slot_clear(st, i);
        sb[i] = inv_batch_of(q[i], tok[i], &tables[i], i);
    }
    cllm_batch b = {sb, n};
    cllm_error err = {0};
    cllm_status s = cllm_forward(c, &b, kv, st, y, &err);
    CHECK_MSG(s == CLLM_OK, "forward: %s", err.msg);
    return s == CLLM_OK ? 0 : -1;
}

/* Rows a sequence returns (cllm_batch_logit_rows of it alone). */
static int inv_rows(inv_seq q) {
    return q.kind == 'n' ? 0 : q.kind == 'a' ? q.n_tok : q.kind == 'v' ? 2 : 1;
}

static void batch_invariance(const char *dir, int ncand) {
    static const char *const cases[] = {"gtg",  "gT",       "Tgg",     "agtnTfe", "vtTg",
                                        "eTtf", "ggggTtgg", "tgtgtgt", "nfTgav"};
    const cllm_fwd_opts screen8 = {.lm_screen = ncand, .lm_est_bits = atoi(g_est)};
    cllm_model *m = NULL;
    cllm_error err = {0};
    cllm_status s = cllm_model_load(dir, &screen8, &m, &err);
    CHECK_MSG(s == CLLM_OK, "load: %s", err.msg);
    if (s != CLLM_OK) return;
    const int V = cllm_model_config(m)->vocab_size;
    cllm_pool *pool = cllm_pool_create(2);
    cllm_fwd_ctx *c1 = NULL, *c2 = NULL;
    cllm_kv_pool kv = {0};
    cllm_state_pool st = {0};
    float *y = malloc((size_t)48 * V * sizeof(float)), *y1 = malloc((size_t)8 * V * sizeof(float));
    float *ex = malloc((size_t)8 * V * sizeof(float));
    CHECK(pool && y && y1 && ex);
    if (!pool || !y || !y1 || !ex || cllm_fwd_ctx_create(m, NULL, &c1, &err) != CLLM_OK ||
        cllm_fwd_ctx_create(m, pool, &c2, &err) != CLLM_OK ||
        cllm_kv_pool_init(&kv, m, 16, 16, CLLM_KV_F32, &err) != CLLM_OK ||
        cllm_state_pool_init(&st, m, 16, CLLM_KV_F32, &err) != CLLM_OK) {
        CHECK_MSG(0, "setup: %s", err.msg);
        goto out;
    }
    int rows_ok = 0, rows_all = 0, screened = 0, exact_ok = 0, exact_all = 0;
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(*cases); ci++) {
        const int n = (int)strlen(cases[ci]);
        inv_seq q[16];
        int32_t tok[16][8];
        for (int i = 0; i < n; i++) {
            q[i] = (inv_seq){cases[ci][i], 1 + (int)((ci * 7 + (size_t)i * 3) % 5)};
            if (q[i].kind == 'v' && q[i].n_tok < 2) q[i].n_tok = 2;
            for (int p = 0; p < q[i].n_tok; p++)
                tok[i][p] = (int32_t)((ci * 131 + (size_t)i * 389 + (size_t)p * 97 + 11) % V);
        }
        for (int rep = 0; rep < 6; rep++) {
            cllm_fwd_ctx *cb = rep % 3 ? c2 : c1; /* the batch at 1 thread once in three */
            if (inv_run(cb, &kv, &st, q, n, tok, y)) goto out;
            size_t at = 0;
            for (int i = 0; i < n; i++) {
                const int nr = inv_rows(q[i]);
                /* alone at the other thread count than the batch, and its exact row */
                if (nr && inv_run(cb == c1 ? c2 : c1, &kv, &st, &q[i], 1, &tok[i], y1)) goto out;
                bool scr = strchr("gftTv", q[i].kind) != NULL;
                if (nr && scr && rep == 0) {
                    inv_seq qx = {'e', q[i].n_tok};
                    if (q[i].kind == 'v') qx.kind = 'a';
                    if (inv_run(c1, &kv, &st, &qx, 1, &tok[i], ex)) goto out;
                    const float *exr = q[i].kind == 'v' ? ex + (size_t)(q[i].n_tok - 2) * V : ex;
                    for (int r = 0; r < nr; r++) {
                        int fin = 0, eq = 1;
                        for (int v = 0; v < V; v++)
                            if (y1[(size_t)r * V + v] > -INFINITY) {
                                fin++;
                                eq &=
                                    memcmp(&y1[(size_t)r * V + v], &exr[(size_t)r * V + v], 4) == 0;
                            }
                        exact_ok += eq && fin >= 32;
                        exact_all++;
                        screened += fin < V;
                    }
                }
                for (int r = 0; r < nr; r++, at++) {
                    int same = !memcmp(y + at * V, y1 + (size_t)r * V, (size_t)V * sizeof(float));
                    rows_ok += same;
                    rows_all++;
                    if (!same)
                        fprintf(stderr,
                                "case %s rep %d (%d threads): seq %d (%c) row %d differs "
                                "from alone\n",
                                cases[ci], rep, cb == c1 ? 1 : 2, i, q[i].kind, r);
                }
            }
        }
    }
    CHECK_MSG(rows_all > 0 && rows_ok == rows_all, "batched rows: %d of %d bitwise alone's",
              rows_ok, rows_all);
    CHECK_MSG(exact_all > 0 && exact_ok == exact_all,
              "screened rows alone: %d of %d with every finite entry the exact row's", exact_ok,
              exact_all);
    CHECK_MSG(screened > 0, "no screened row had entries at -inf");
out:
    cllm_kv_pool_free(&kv);
    cllm_state_pool_free(&st);
    cllm_fwd_ctx_free(c1);
    cllm_fwd_ctx_free(c2);
    cllm_pool_free(pool);
    cllm_model_free(m);
    free(y);
    free(y1);
    free(ex);
}

/* One estimate plane: est (CLLM_LM_EST) on a vocabulary of vocab with ncand candidates. */
static int run_case(const char *est, int vocab, int ncand) {
    const char *src = test_src(), *tmp = test_tmp();
    mkdir(tmp, 0755);
    char cfg[1024], bf[1024], q8[1024], nc[16], vs[64];
    g_est = est;
    snprintf(nc, sizeof(nc), "%d", ncand);
    snprintf(vs, sizeof(vs), "\"vocab_size\": %d", vocab);
    snprintf(cfg, sizeof(cfg), "%s/lmscreen-%d.json", tmp, vocab);
    snprintf(bf, sizeof(bf), "%s/lmscreen-%d-bf16", tmp, vocab);
    snprintf(q8, sizeof(q8), "%s/lmscreen-%d-w4", tmp, vocab);
    const char *const from[] = {"\"vocab_size\": 512"}, *const to[] = {vs};
    CHECK(tm_write_config(src, "tiny.json", cfg, from, to, 1) == 0);
    cllm_error err;
    cllm_synth_opts so = {.config_path = cfg, .out_dir = bf, .seed = 21, .dtype = CLLM_DT_BF16};
    CHECK_MSG(cllm_synth(&so, &err) == CLLM_OK, "synth: %s", err.msg);
    CHECK_MSG(tm_quantize_w4a16(bf, q8, 32, 8, &err) == CLLM_OK, "quantize: %s", err.msg);

    cllm_seq_runner plain, exa, scr, scr1;
    if (open_runner(&plain, q8, "0", 2) || open_runner(&exa, q8, nc, 2) ||
        open_runner(&scr, q8, nc, 2) || open_runner(&scr1, q8, nc, 1))
        return -1;
    const int V = cllm_model_config(plain.m)->vocab_size;
    CHECK(V == vocab);
    int32_t prompt[NP];
    for (int i = 0; i < NP; i++) prompt[i] = (int32_t)((i * 389 + 17) % V);
    float *ya = malloc((size_t)NP * V * sizeof(float)),
          *yb = malloc((size_t)NP * V * sizeof(float));
    float *yc = malloc((size_t)V * sizeof(float)), *ye = malloc((size_t)NP * V * sizeof(float));
    if (!ya || !yb || !yc || !ye) return 1;

    /* exact rows: the whole prompt's logits */
    if (step(&plain, prompt, NP, CLLM_LOGITS_ALL, ya) ||
        step(&exa, prompt, NP, CLLM_LOGITS_ALL, ye) ||
        step(&scr, prompt, NP, CLLM_LOGITS_ALL, yb) ||
        step(&scr1, prompt, NP, CLLM_LOGITS_NONE, NULL))
        return -1;
    CHECK_MSG(memcmp(ye, yb, (size_t)NP * V * sizeof(float)) == 0,
              "LOGITS_ALL rows differ between runs");
    double dmax = 0, amax = 0;
    int same_all = 0;
    for (int t = 0; t < NP; t++) {
        const float *a = ya + (size_t)t * V, *e = ye + (size_t)t * V;
        for (int v = 0; v < V; v++) {
            dmax = fabs(a[v] - e[v]) > dmax ? fabs(a[v] - e[v]) : dmax;
            amax = fabs(a[v]) > amax ? fabs(a[v]) : amax;
        }
        same_all += argmax(a, V) == argmax(e, V);
    }
    CHECK_MSG(dmax > 0 || amax > 0, "no logits");
    CHECK_MSG(dmax <= 1e-5 * amax, "exact rows: max |diff| %g vs max |logit| %g", dmax, amax);
    CHECK_MSG(same_all == NP, "exact rows: argmax the plain one's in %d of %d", same_all, NP);

    /* greedy rows */
    scr.logits_topk = scr1.logits_topk = 1;
    scr.logits_scale = scr1.logits_scale = 1.0f;
    int32_t tok = (int32_t)argmax(ya + (size_t)(NP - 1) * V, V);
    int same_arg = 0, finite_ok = 0, dropped = 0, thr_same = 0;
    for (int g = 0; g < NG; g++) {
        if (step(&plain, &tok, 1, CLLM_LOGITS_LAST, ya) ||
            step(&exa, &tok, 1, CLLM_LOGITS_LAST, ye) ||
            step(&scr, &tok, 1, CLLM_LOGITS_LAST, yb) || step(&scr1, &tok, 1, CLLM_LOGITS_LAST, yc))
            return -1;
        int fin = 0, eq = 1;
        for (int v = 0; v < V; v++)
            if (yb[v] > -INFINITY) {
                fin++;
                eq &= memcmp(&yb[v], &ye[v], sizeof(float)) == 0;
            }
        finite_ok += eq && fin >= 32;
        dropped += fin < V;
        same_arg += argmax(ya, V) == argmax(yb, V);
        thr_same += memcmp(yb, yc, (size_t)V * sizeof(float)) == 0;
        tok = (int32_t)argmax(ya, V);
    }
    CHECK_MSG(finite_ok == NG, "greedy rows: %d of %d with every finite entry exact", finite_ok,
              NG);
    CHECK_MSG(dropped == NG, "greedy rows: %d of %d screened (entries at -inf)", dropped, NG);
    CHECK_MSG(same_arg == NG, "greedy rows: argmax the plain one's in %d of %d", same_arg, NG);
    CHECK_MSG(thr_same == NG, "greedy rows: 1 and 2 threads the same in %d of %d", thr_same, NG);

    /* a top-k row */
    scr.logits_topk = 5;
    scr.logits_scale = 1.0f / 0.7f;
    if (step(&plain, &tok, 1, CLLM_LOGITS_LAST, ya) || step(&exa, &tok, 1, CLLM_LOGITS_LAST, ye) ||
        step(&scr, &tok, 1, CLLM_LOGITS_LAST, yb))
        return -1;
    int ia[5], ib[5], same = 1;
    topk(ya, V, 5, ia);
    topk(yb, V, 5, ib);
    for (int i = 0; i < 5; i++) same &= ia[i] == ib[i] && memcmp(&ye[ib[i]], &yb[ib[i]], 4) == 0;
    CHECK_MSG(same, "top-5 row: ids %d %d %d %d %d vs %d %d %d %d %d", ia[0], ia[1], ia[2], ia[3],
              ia[4], ib[0], ib[1], ib[2], ib[3], ib[4]);
    cllm_seq_runner_close(&plain);
    cllm_seq_runner_close(&exa);
    cllm_seq_runner_close(&scr);
    cllm_seq_runner_close(&scr1);

    batch_invariance(q8, ncand);

    free(ya);
    free(yb);
    free(yc);
    free(ye);
    return 0;
}

int main(void) {
    run_case("4", 1000, 8);
    run_case("2", 8200, 8);
    const char *tmp = test_tmp();
    char q8[1024];
    cllm_error err;
    snprintf(q8, sizeof(q8), "%s/lmscreen-1000-w4", tmp);
    /* refusal: by the option table, reading the environment; and by the model, out of range */
    cllm_opts o;
    setenv("CLLM_LM_SCREEN", "abc", 1);
    memset(&err, 0, sizeof(err));
    cllm_status s = cllm_opts_from_env(&o, &err);
    unsetenv("CLLM_LM_SCREEN");
    CHECK_MSG(s == CLLM_EINVAL && strstr(err.msg, "CLLM_LM_SCREEN=abc"),
              "CLLM_LM_SCREEN=abc: %d %s", (int)s, err.msg);
    cllm_seq_runner bad;
    const cllm_fwd_opts big = {.lm_screen = CLLM_LM_SCREEN_MAX + 1};
    s = cllm_seq_runner_open(&bad, q8, &big, 1, 8, 16, CLLM_KV_F32, &err);
    CHECK_MSG(s == CLLM_EINVAL, "lm_screen %d: %d %s", big.lm_screen, (int)s, err.msg);
    if (s == CLLM_OK) cllm_seq_runner_close(&bad);
    setenv("CLLM_LM_EST", "3", 1);
    memset(&err, 0, sizeof(err));
    s = cllm_opts_from_env(&o, &err);
    unsetenv("CLLM_LM_EST");
    CHECK_MSG(s == CLLM_EINVAL && strstr(err.msg, "CLLM_LM_EST=3"), "CLLM_LM_EST=3: %d %s", (int)s,
              err.msg);
    return test_report("test_lm_screen");
}