/* `cllm bench-forward MODEL [-p 512 -n 32 --threads N]`: prefill and decode tok/s of one
 * sequence with random token ids, printed beside the decode roofline: weight bytes read per
 * decoded token (cllm_model_decode_bytes) over the memory read bandwidth this command measures
 * with a multi-threaded streaming read of a buffer far larger than the caches, on huge pages as
 * the weight panels are. The prefault line says how much of the process is on huge pages.
 *
 * With --speculative-config: the verify-cost curve after the decode, i.e. what one forward of
 * 1..k+1 positions costs at the sequence's end, run as the engine runs a verify (a forked state,
 * logits for every position), and with synthetic_acceptance a the tok/s each k would give with
 * free drafts, from that curve. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/threadpool.h"
#include "cli/cli.h"
#include "cli/cli_spec.h"
#include "cli/commands.h"
#include "loadgen/metrics.h"
#include "model/seq_runner.h"

typedef struct bw_job {
    const uint64_t *buf;
    uint64_t *sums;
} bw_job;

static void bw_worker(void *vj, size_t b, size_t e, int tid) {
    bw_job *j = vj;
    uint64_t s = 0; /* integer sum: vectorises, so the loop is bound by memory, not adds */
    for (size_t i = b; i < e; i++) s += j->buf[i];
    j->sums[tid] += s;
}

/* Best of 5 passes over a 1 GiB buffer, bytes/s; huge: on transparent huge pages, as the weight
 * panels are (cllm_alloc_huge). Both are measured because they differ: on a 2-core Xeon VM this
 * sweep read 28-30 GB/s on 2 MiB pages and 20-27 GB/s on 4 KiB ones (llama.cpp's bw.c, which
 * the peer tables use, reads on 4 KiB pages), so a roofline from the 4 KiB figure flatters. */
static double measure_bandwidth(cllm_pool *pool, bool huge) {
    size_t n = (1u << 30) / sizeof(uint64_t);
    uint64_t *buf =
        huge ? cllm_alloc_huge(n * sizeof(uint64_t)) : cllm_alloc_aligned(n * sizeof(uint64_t));
    if (!buf) return 0.0;
    for (size_t i = 0; i < n; i++) buf[i] = i & 7;
    uint64_t sums[1024] = {0};
    double best = 0.0;
    bw_job j = {buf, sums};
    for (int rep = 0; rep < 5; rep++) {
        double t0 = cllm_time_s();
        cllm_pool_for_grain(pool, n, 4096, bw_worker, &j);
        double dt = cllm_time_s() - t0;
        if (n * sizeof(uint64_t) / dt > best) best = n * sizeof(uint64_t) / dt;
    }
    if (sums[0] == 12345) printf(" "); /* keep the reads */
    cllm_free_aligned(buf);
    return best;
}

#define CURVE_MAX_REPS 64
/* The verify-cost curve: forwards of T = 1..K+1 positions after the runner's tokens, each on a
 * state forked from the live one (so the sequence does not grow; the rows written past it are
 * overwritten by the next trial) with logits for every position as a verify asks, and (T 0)
 * the plain step as the engine runs it: one position, its state updated in place. Rounds of
 * T = 0..K+1 in turn after a warm-up round, so a noisy host's swings fall on every size alike
 * (in blocks of one size each, T 3 came out at 1.52x and 2.35x one position in two runs of
 * one hour, Zen 3): t[T] is the median of the rounds' times in seconds, x[T] the median of
 * their ratios t/t(1) within a round, p[T] of t/t(0). */
static cllm_status verify_curve(cllm_seq_runner *r, int K, int reps, uint64_t seed, double *t,
                                double *x, double *p, cllm_error *err) {
    const cllm_config *cf = cllm_model_config(r->m);
    int V = cf->vocab_size;
    cllm_state_pool st;
    /* the runner has one slot: a two-slot pool holding its state as slot 0 */
    cllm_status s =
        cllm_state_pool_init(&st, r->m, 2, r->st.rec16 ? CLLM_KV_BF16 : CLLM_KV_F32, err);
    if (s != CLLM_OK) return s;
    if (st.conv) {
        size_t nc = (size_t)st.n_layers * st.conv_ch * st.conv_k1,
               nr = (size_t)st.n_layers * st.n_v_heads * st.dk * st.dv;
        memcpy(st.conv, r->st.conv, nc * sizeof(float));
        if (st.rec16)
            memcpy(st.rec16, r->st.rec16, nr * sizeof(uint16_t));
        else
            memcpy(st.rec, r->st.rec, nr * sizeof(float));
    }
    float *lg = malloc((size_t)(K + 1) * V * sizeof(float));
    int32_t toks[CLLM_SPEC_MAX_K + 1];
    for (int i = 0; i <= K; i++) toks[i] = (int32_t)((seed + 7919u * (uint64_t)i) % (uint64_t)V);
    if (reps > CURVE_MAX_REPS) reps = CURVE_MAX_REPS;
    double ts[CLLM_SPEC_MAX_K + 2][CURVE_MAX_REPS], rs[CLLM_SPEC_MAX_K + 2][CURVE_MAX_REPS],
        ps[CLLM_SPEC_MAX_K + 2][CURVE_MAX_REPS];
    for (int i = 0; lg && i <= reps && s == CLLM_OK; i++)
        for (int T = 0; s == CLLM_OK && T <= K + 1; T++) {
            /* T 0: the plain step, in place on slot 0 (the copy of the runner's state) */
            cllm_seq_batch q = {toks,       T ? T : 1, r->pos,          r->table,
                                r->n_table, T ? 1 : 0, CLLM_LOGITS_LAST};
            q.logits_n = T ? T : 1;
            q.logits_topk = 1;
            q.logits_scale = 1.0f;
            q.state_fork = T > 0;
            q.state_src = 0;
            cllm_batch b = {&q, 1};
            double t0 = cllm_time_s();
            s = cllm_forward(r->ctx, &b, &r->kv, &st, lg, err);
            if (i == 0) continue; /* the warm-up round */
            ts[T][i - 1] = cllm_time_s() - t0;
            ps[T][i - 1] = ts[T][i - 1] / ts[0][i - 1];
            if (T) rs[T][i - 1] = ts[T][i - 1] / ts[1][i - 1];
        }
    for (int T = 0; lg && s == CLLM_OK && T <= K + 1; T++) {
        t[T] = lg_median(ts[T], reps);
        p[T] = lg_median(ps[T], reps);
        if (T) x[T] = lg_median(rs[T], reps);
    }
    if (!lg) s = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    free(lg);
    cllm_state_pool_free(&st);
    return s;
}

static void print_curve(const double *t, const double *x, const double *p, int K, int reps,
                        double a) {
    printf("verify cost (one forward of T positions at the sequence's end, forked state, "
           "logits for each; medians of %d rounds of the plain step and T = 1..%d in turn, the "
           "ratios within each round):\n",
           reps, K + 1);
    printf("  plain: %8.3f ms (one position, its state updated in place, as a decode step)\n",
           1e3 * t[0]);
    for (int T = 1; T <= K + 1; T++)
        printf("  T %2d: %8.3f ms = %.3f x one forked position = %.3f x the plain step\n", T,
               1e3 * t[T], x[T], p[T]);
    if (a <= 0) return;
    printf("at synthetic acceptance %.2f with free drafts (an estimate from the curve against "
           "the plain step, no drafter's cost):\n",
           a);
    for (int k = 1; k <= K; k++)
        printf("  k %2d: %.2f tokens per verify, %.2f tok/s = %.2fx plain (%.2f tok/s)\n", k,
               cllm_spec_expected_tokens(a, k), cllm_spec_expected_tokens(a, k) / t[k + 1],
               cllm_spec_expected_tokens(a, k) / p[k + 1], 1.0 / t[0]);
}

int cmd_bench_forward(int argc, char **argv) {
    long n_prompt = 512, n_gen = 32, threads = 0, seed = 1, block = 16, chunk = 0;
    bool no_prefault = false;
    const char *gdn_mode = "recurrent", *act16 = NULL, *spec_json = NULL, *ssmd = "f32";
    const cli_opt opts[] = {
        {"--n-prompt", "-p", CLI_INT, &n_prompt, "prompt tokens (prefill)", NULL, 1, 1e7},
        {"--n-gen", "-n", CLI_INT, &n_gen, "decoded tokens", NULL, 0, 1e7},
        {"--threads", "-t", CLI_INT, &threads, "threads (0 = all CPUs)", NULL, 0, 1024},
        {"--speculative-config", NULL, CLI_STR, &spec_json,
         "also print the verify-cost curve for 1..num_speculative_tokens+1 positions (and, with "
         "synthetic_acceptance, tok/s per k from it)"},
        {"--prefill-chunk", NULL, CLI_INT, &chunk, "prefill in calls of N tokens (0 = one call)",
         NULL, 0, 1e9},
        {"--block-size", NULL, CLI_INT, &block, "KV block size", NULL, 1, 65536},
        {"--seed", "-s", CLI_INT, &seed, "seed for the random prompt", NULL, 0, 9.2e18},
        {"--no-prefault", NULL, CLI_FLAG, &no_prefault,
         "do not touch every weight page before timing"},
        CLI_GDN_PREFILL_ROW(&gdn_mode),
        {"--act16", NULL, CLI_CHOICE, &act16, CLI_ACT16_HELP, CLI_ACT16_CHOICES},
        CLI_SSM_DTYPE_ROW(&ssmd, ""),
        {0}};
    const cli_spec spec = {
        "bench-forward",
        "MODEL [options]",
        "Prefill and decode tok/s on one sequence beside the bandwidth roofline.",
        opts,
        1,
        1};
    const char *pos[1];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    cllm_spec_opts so;
    char smsg[256];
    if (cli_spec_parse(spec_json, true, &so, smsg, sizeof(smsg)) != 0) {
        fprintf(stderr, "cllm bench-forward: %s\n", smsg);
        return 2;
    }
    if (cli_check_model_dir("bench-forward", &pos[0])) return 1;
    const cllm_fwd_opts fwd = cli_fwd_opts(act16);
    cllm_error err = {0};
    cllm_seq_runner r;
    double tl = cllm_time_s();
    int K = so.num_speculative_tokens; /* 0 without --speculative-config */
    if (cllm_seq_runner_open(&r, pos[0], &fwd, (int)threads, (int)(n_prompt + n_gen) + K + 1,
                             (int)block, CLLM_KV_F32, &err)) {
        fprintf(stderr, "cllm bench-forward: %s\n", err.msg);
        return 1;
    }
    if (!strcmp(ssmd, "bf16") && cllm_seq_runner_set_state_dtype(&r, CLLM_KV_BF16, &err)) {
        fprintf(stderr, "cllm bench-forward: %s\n", err.msg);
        cllm_seq_runner_close(&r);
        return 1;
    }
    cllm_fwd_ctx_set_gdn_prefill(r.ctx, (cllm_gdn_prefill)cllm_gdn_prefill_parse(gdn_mode));
    const cllm_config *cf = cllm_model_config(r.m);
    int V = cf->vocab_size, ret = 0;
    int32_t *ids = malloc((size_t)n_prompt * sizeof(int32_t));
    /* decode is greedy (the argmax below): only the best logit is needed (forward.h) */
    r.logits_topk = 1;
    r.logits_scale = 1.0f;
    float *logits = malloc((size_t)V * sizeof(float));
    if (!ids || !logits) {
        fprintf(stderr, "cllm bench-forward: out of memory\n");
        ret = 1;
        goto done;
    }
    uint64_t s = (uint64_t)seed * 0x9e3779b97f4a7c15ull + 1;
    for (long i = 0; i < n_prompt; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        ids[i] = (int32_t)(s % (uint64_t)V);
    }
    printf("model %s: %s, %d layers, load %.2f s, threads %d\n", pos[0], cf->model_type,
           cf->n_layers, cllm_time_s() - tl, r.pool ? cllm_pool_size(r.pool) : 1);
    if (!no_prefault) {
        double tp = cllm_time_s();
        uint64_t nb = cllm_model_prefault(r.m);
        printf("prefault: %.2f GB of weights mapped in %.2f s (%.2f GB on huge pages)\n", nb / 1e9,
               cllm_time_s() - tp, cllm_mem_anon_huge() / 1e9);
    }
    double t0 = cllm_time_s();
    int step = chunk > 0 ? (int)chunk : (int)n_prompt;
    for (long i = 0; i < n_prompt; i += step) {
        int m = n_prompt - i < step ? (int)(n_prompt - i) : step;
        if (cllm_seq_runner_step(&r, ids + i, m,
                                 i + m == n_prompt ? CLLM_LOGITS_LAST : CLLM_LOGITS_NONE, logits,
                                 &err)) {
            fprintf(stderr, "cllm bench-forward: %s\n", err.msg);
            ret = 1;
            goto done;
        }
    }
    double t1 = cllm_time_s();
    for (long i = 0; i < n_gen; i++) {
        int32_t tok = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[tok]) tok = v;
        if (cllm_seq_runner_step(&r, &tok, 1, CLLM_LOGITS_LAST, logits, &err)) {
            fprintf(stderr, "cllm bench-forward: %s\n", err.msg);
            ret = 1;
            goto done;
        }
    }
    double t2 = cllm_time_s();
    double bw4 = measure_bandwidth(r.pool, false), bw = measure_bandwidth(r.pool, true);
    if (bw4 > bw) bw = bw4; /* THP off: both sweeps ran on 4 KiB pages */
    uint64_t bpt = cllm_model_decode_bytes(r.m);
    double pp = n_prompt / (t1 - t0), tg = n_gen > 0 ? n_gen / (t2 - t1) : 0.0;
    double roof = bw > 0 ? bw / (double)bpt : 0.0;
    printf("prefill: %ld tokens in %.2f s = %.2f tok/s\n", n_prompt, t1 - t0, pp);
    printf("decode:  %ld tokens in %.2f s = %.2f tok/s\n", n_gen, t2 - t1, tg);
    printf("roofline: %.3f GB weights/token, measured read bandwidth %.2f GB/s (on 2 MiB pages; "
           "%.2f on 4 KiB) -> %.2f tok/s; decode at %.1f%% of roofline (%.2f GB/s effective)\n",
           bpt / 1e9, bw / 1e9, bw4 / 1e9, roof, roof > 0 ? 100.0 * tg / roof : 0.0,
           tg * bpt / 1e9);
    if (K > 0) {
        double t[CLLM_SPEC_MAX_K + 2], x[CLLM_SPEC_MAX_K + 2], p[CLLM_SPEC_MAX_K + 2];
        int reps = n_gen > 8 ? 16 : 3;
        if (verify_curve(&r, K, reps, (uint64_t)seed, t, x, p, &err) != CLLM_OK) {
            fprintf(stderr, "cllm bench-forward: verify curve: %s\n", err.msg);
            ret = 1;
            goto done;
        }
        print_curve(t, x, p, K, reps, so.synthetic_acceptance);
    }
done:
    free(ids);
    free(logits);
    cllm_seq_runner_close(&r);
    return ret;
}
