/* `cllm bench MODEL [-p 512 -n 128 -r 3 -b 1,2,4,8 --json --multi-turn]`: offline benchmarks
 * through the engine (engine.h), the same path the server takes:
 *  - a llama-bench style table: ppP (prefill of P random tokens, one request) and tgN (decode of
 *    N tokens after a 1-token prompt), mean ± stddev over -r runs, with the decode GB/s achieved
 *    (weight bytes per decoded token x tok/s);
 *  - a llama-batched-bench style sweep over B parallel sequences of PP prompt + TG generated
 * tokens: PP TG B N_KV T_PP S_PP T_TG S_TG T S (T_PP = until every sequence has its first token);
 *  - with --multi-turn: C conversations x T turns (turn k+1 = turn k prompt + answer + M new
 *    tokens), run with prefix caching on and off: share of shared-prefix tokens reused and the
 *    prefill time saved. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/mem.h"
#include "engine/engine.h"
#include "model/forward.h"
#include "cli/cli.h"
#include "cli/commands.h"

typedef struct bres {
    double t_first, t_done;
    int n_out, cached;
    int32_t *toks; /* optional capture of generated ids */
    int cap;
    cllm_finish fin;
    char err[256];
} bres;

typedef struct bwait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} bwait;

typedef struct buser {
    bwait *w;
    bres *r;
} buser;

static void bench_ev(void *user, const cllm_event *ev) {
    buser *u = user;
    bres *r = u->r;
    for (int i = 0; i < ev->n_tokens; i++) {
        if (r->toks && r->n_out < r->cap) r->toks[r->n_out] = ev->token_ids[i];
        r->n_out++;
    }
    if (ev->finish == CLLM_FINISH_NONE) return;
    r->t_first = ev->t_first_token;
    r->t_done = ev->t_finished;
    r->cached = ev->cached_prompt_tokens;
    r->fin = ev->finish;
    if (ev->error) snprintf(r->err, sizeof(r->err), "%s", ev->error);
    pthread_mutex_lock(&u->w->mu);
    u->w->done++;
    pthread_cond_signal(&u->w->cv);
    pthread_mutex_unlock(&u->w->mu);
}

/* Submits B requests at once and waits for all; returns the submit time or < 0 on failure. */
static double run_batch(cllm_engine *e, int B, int32_t **prompts, const int *lens, int max_tokens,
                        bres *res) {
    bwait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    buser *u = calloc((size_t)B, sizeof(*u));
    if (!u) return -1;
    cllm_sampling sp;
    cllm_sampling_defaults(e, &sp);
    sp.temperature = 0;
    sp.top_p = 1;
    sp.top_k = 0;
    sp.min_p = 0;
    sp.repetition_penalty = 1;
    sp.presence_penalty = 0;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = true;
    double t0 = cllm_time_s();
    int sent = 0;
    for (int i = 0; i < B; i++) {
        u[i].w = &w;
        u[i].r = &res[i];
        res[i].n_out = 0;
        cllm_request r = {(const int *)prompts[i], lens[i], sp, bench_ev, &u[i], NULL};
        cllm_error err = {0};
        if (cllm_engine_submit(e, &r, NULL, &err) != CLLM_OK) {
            fprintf(stderr, "cllm bench: submit: %s\n", err.msg);
            break;
        }
        sent++;
    }
    pthread_mutex_lock(&w.mu);
    while (w.done < sent) pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    free(u);
    for (int i = 0; i < sent; i++)
        if (res[i].fin == CLLM_FINISH_ERROR) {
            fprintf(stderr, "cllm bench: request failed: %s\n", res[i].err);
            return -1;
        }
    return sent == B ? t0 : -1;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void rand_tokens(int32_t *t, int n, int V, uint64_t *s) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(rng_next(s) % (uint64_t)V);
}

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (s && *s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 4096) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static void mean_sd(const double *x, int n, double *m, double *sd) {
    double s = 0, q = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *m = s / n;
    for (int i = 0; i < n; i++) q += (x[i] - *m) * (x[i] - *m);
    *sd = n > 1 ? sqrt(q / (n - 1)) : 0;
}

typedef struct mt_res {
    uint64_t shared, reused, prompt_tokens;
    double t_prefill; /* sum over turns of time to first token */
    double t_forward; /* forward time of the whole run */
    double t_total;
} mt_res;

/* C conversations x T turns, conversations interleaved turn by turn. */
static int multi_turn(cllm_engine *e, int V, int C, int T, int first_len, int msg_len,
                      int answer_len, uint64_t seed, mt_res *out) {
    memset(out, 0, sizeof(*out));
    int cap = first_len + T * (answer_len + msg_len) + 8;
    int32_t **conv = calloc((size_t)C, sizeof(int32_t *));
    int *len = calloc((size_t)C, sizeof(int)), *prev = calloc((size_t)C, sizeof(int));
    bres *res = calloc((size_t)C, sizeof(bres));
    int32_t **ans = calloc((size_t)C, sizeof(int32_t *));
    if (!conv || !len || !prev || !res || !ans) return -1;
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7;
    for (int c = 0; c < C; c++) {
        conv[c] = malloc((size_t)cap * sizeof(int32_t));
        ans[c] = malloc((size_t)answer_len * sizeof(int32_t));
        rand_tokens(conv[c], first_len, V, &s);
        len[c] = first_len;
    }
    double tf0;
    uint64_t tk0;
    cllm_engine_forward_time(e, &tf0, &tk0);
    double t_start = cllm_time_s();
    int rc = 0;
    for (int t = 0; t < T && !rc; t++) {
        for (int c = 0; c < C; c++) {
            res[c].toks = ans[c];
            res[c].cap = answer_len;
        }
        double t0 = run_batch(e, C, conv, len, answer_len, res);
        if (t0 < 0) {
            rc = -1;
            break;
        }
        for (int c = 0; c < C; c++) {
            out->t_prefill += res[c].t_first - t0;
            out->prompt_tokens += (uint64_t)len[c];
            if (t > 0) {
                out->shared += (uint64_t)prev[c];
                out->reused += (uint64_t)(res[c].cached < prev[c] ? res[c].cached : prev[c]);
            }
            int n = res[c].n_out < answer_len ? res[c].n_out : answer_len;
            memcpy(conv[c] + len[c], ans[c], (size_t)n * sizeof(int32_t));
            len[c] += n;
            prev[c] = len[c];
            rand_tokens(conv[c] + len[c], msg_len, V, &s);
            len[c] += msg_len;
        }
    }
    out->t_total = cllm_time_s() - t_start;
    double tf1;
    uint64_t tk1;
    cllm_engine_forward_time(e, &tf1, &tk1);
    out->t_forward = tf1 - tf0;
    for (int c = 0; c < C; c++) {
        free(conv[c]);
        free(ans[c]);
    }
    free(conv);
    free(ans);
    free(len);
    free(prev);
    free(res);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    long n_prompt = 512, n_gen = 128, reps = 3, threads = 0, block = 16, seed = 1, budget = 0;
    long mt_conv = 4, mt_turns = 4, mt_first = 256, mt_msg = 32, mt_answer = 64;
    const char *blist = "1,2,4,8";
    bool json = false, mt = false, no_table = false, no_sweep = false, kv_bf16 = false;
    uint64_t kv_bytes = 0;
    const cli_opt opts[] = {
        {"--n-prompt", "-p", CLI_INT, &n_prompt, "prompt tokens (pp test; PP of the sweep)", NULL,
         1, 1e6},
        {"--n-gen", "-n", CLI_INT, &n_gen, "generated tokens (tg test; TG of the sweep)", NULL, 1,
         1e6},
        {"--repetitions", "-r", CLI_INT, &reps, "runs per llama-bench test", NULL, 1, 1000},
        {"--batch", "-b", CLI_STR, &blist, "parallel sequences for the sweep, e.g. 1,2,4,8", NULL,
         0, 0},
        {"--threads", "-t", CLI_INT, &threads, "threads (0 = all CPUs)", NULL, 0, 1024},
        {"--block-size", NULL, CLI_INT, &block, "KV block size", NULL, 1, 4096},
        {"--kv-cache-memory", NULL, CLI_SIZE, &kv_bytes,
         "KV cache bytes (default: what the runs need)", NULL, 0, 0},
        {"--max-num-batched-tokens", NULL, CLI_INT, &budget,
         "token budget per step (default max(2048, PP*B))", NULL, 0, 1e8},
        {"--seed", "-s", CLI_INT, &seed, "seed for the random prompts", NULL, 0, 9e18},
        {"--kv-bf16", NULL, CLI_FLAG, &kv_bf16, "KV cache in bf16", NULL, 0, 0},
        {"--json", NULL, CLI_FLAG, &json, "JSON output", NULL, 0, 0},
        {"--no-table", NULL, CLI_FLAG, &no_table, "skip the llama-bench table", NULL, 0, 0},
        {"--no-sweep", NULL, CLI_FLAG, &no_sweep, "skip the batched sweep", NULL, 0, 0},
        {"--multi-turn", NULL, CLI_FLAG, &mt, "run the multi-turn prefix-cache workload", NULL, 0,
         0},
        {"--mt-conversations", NULL, CLI_INT, &mt_conv, "multi-turn: conversations run together",
         NULL, 1, 256},
        {"--mt-turns", NULL, CLI_INT, &mt_turns, "multi-turn: turns per conversation", NULL, 2,
         1000},
        {"--mt-first", NULL, CLI_INT, &mt_first, "multi-turn: first prompt tokens", NULL, 1, 1e6},
        {"--mt-message", NULL, CLI_INT, &mt_msg, "multi-turn: new message tokens per turn", NULL, 1,
         1e6},
        {"--mt-answer", NULL, CLI_INT, &mt_answer, "multi-turn: answer tokens per turn", NULL, 1,
         1e6},
        {0}};
    const cli_spec spec = {
        "bench",
        "MODEL [options]",
        "Offline benchmarks through the engine: llama-bench table, batched sweep, multi-turn "
        "prefix reuse.",
        opts,
        1,
        1};
    const char *pos[1];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    int bs_list[64];
    int nb = parse_list(blist, bs_list, 64);
    if (nb < 1) {
        fprintf(stderr, "cllm bench: bad --batch list '%s'\n", blist);
        return 2;
    }
    int maxB = 1;
    for (int i = 0; i < nb; i++)
        if (bs_list[i] > maxB) maxB = bs_list[i];
    cllm_error err = {0};
    cllm_model *m = NULL;
    if (cllm_model_load(pos[0], &m, &err) != CLLM_OK) {
        fprintf(stderr, "cllm bench: %s\n", err.msg);
        return 1;
    }
    const cllm_config *cf = cllm_model_config(m);
    int V = cf->vocab_size;
    uint64_t decode_bytes = cllm_model_decode_bytes(m);
    char mtype[32];
    snprintf(mtype, sizeof(mtype), "%s", cf->model_type);
    int n_layers = cf->n_layers;

    long seq_len = n_prompt + n_gen;
    long mt_len = mt_first + mt_turns * (mt_msg + mt_answer);
    long max_len = seq_len > mt_len && !mt ? seq_len : (seq_len > mt_len ? seq_len : mt_len);
    max_len += block;
    cllm_engine_opts o;
    cllm_engine_opts_defaults(&o);
    o.model_dir = pos[0];
    o.n_threads = (int)threads;
    o.block_size = (int)block;
    o.max_num_seqs = maxB > mt_conv ? maxB : (int)mt_conv;
    o.max_model_len = (int)max_len;
    if (o.max_model_len > cf->max_position_embeddings)
        o.max_model_len = cf->max_position_embeddings;
    long need_budget = n_prompt * maxB;
    o.max_num_batched_tokens =
        budget > 0 ? (int)budget : (int)(need_budget > 2048 ? need_budget : 2048);
    size_t block_bytes = (size_t)cllm_model_n_attn_layers(m) * 2 * (size_t)block *
                         (size_t)cf->n_kv_heads * (size_t)cf->head_dim * (kv_bf16 ? 2 : 4);
    o.kv_cache_bf16 = kv_bf16;
    if (!kv_bytes) {
        uint64_t blocks =
            (uint64_t)o.max_num_seqs * (uint64_t)((max_len + block - 1) / block) * 2 + 16;
        kv_bytes = blocks * (block_bytes ? block_bytes : 1);
    }
    o.kv_cache_bytes = kv_bytes;
    o.enable_prefix_caching = false;
    cllm_model_free(m);

    cllm_engine *e = NULL;
    if (cllm_engine_create(&o, &e, &err) != CLLM_OK) {
        fprintf(stderr, "cllm bench: %s\n", err.msg);
        return 1;
    }
    int nthreads = threads > 0 ? (int)threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows appear as they are measured */
    uint64_t s = (uint64_t)seed * 0x9e3779b97f4a7c15ull + 1;
    int ret = 0;
    int32_t **prompts = calloc((size_t)maxB, sizeof(int32_t *));
    int *lens = calloc((size_t)maxB, sizeof(int));
    bres *res = calloc((size_t)maxB, sizeof(bres));
    for (int i = 0; i < maxB; i++) prompts[i] = malloc((size_t)n_prompt * sizeof(int32_t));
    if (json)
        printf("{\"model\": \"%s\", \"model_type\": \"%s\", \"layers\": %d, \"threads\": %d",
               pos[0], mtype, n_layers, nthreads);
    else
        printf("model %s (%s, %d layers), decode reads %.3f GB of weights per token\n", pos[0],
               mtype, n_layers, decode_bytes / 1e9);

    /* warm-up: touch the weights once */
    lens[0] = n_prompt < 16 ? (int)n_prompt : 16;
    rand_tokens(prompts[0], lens[0], V, &s);
    if (run_batch(e, 1, prompts, lens, 2, res) < 0) {
        ret = 1;
        goto done;
    }

    if (!no_table) {
        double *pp = calloc((size_t)reps, sizeof(double)),
               *tg = calloc((size_t)reps, sizeof(double));
        for (int r = 0; r < reps && !ret; r++) {
            lens[0] = (int)n_prompt;
            rand_tokens(prompts[0], lens[0], V, &s);
            double t0 = run_batch(e, 1, prompts, lens, 1, res);
            if (t0 < 0)
                ret = 1;
            else
                pp[r] = n_prompt / (res[0].t_first - t0);
            lens[0] = 1;
            rand_tokens(prompts[0], 1, V, &s);
            t0 = run_batch(e, 1, prompts, lens, (int)n_gen + 1, res);
            if (t0 < 0)
                ret = 1;
            else
                tg[r] = n_gen / (res[0].t_done - res[0].t_first);
        }
        double pm, psd, tm, tsd;
        mean_sd(pp, (int)reps, &pm, &psd);
        mean_sd(tg, (int)reps, &tm, &tsd);
        if (json) {
            printf(",\n \"tests\": [{\"test\": \"pp%ld\", \"n_prompt\": %ld, \"avg_ts\": %.3f, "
                   "\"stddev_ts\": %.3f},"
                   " {\"test\": \"tg%ld\", \"n_gen\": %ld, \"avg_ts\": %.3f, \"stddev_ts\": %.3f, "
                   "\"decode_gbps\": %.3f}]",
                   n_prompt, n_prompt, pm, psd, n_gen, n_gen, tm, tsd, tm * decode_bytes / 1e9);
        } else {
            printf("\n| model | threads | test | t/s | decode GB/s |\n| --- | ---: | ---: | ---: | "
                   "---: |\n");
            printf("| %s | %d | pp%ld | %.2f ± %.2f | |\n", mtype, nthreads, n_prompt, pm, psd);
            printf("| %s | %d | tg%ld | %.2f ± %.2f | %.2f |\n", mtype, nthreads, n_gen, tm, tsd,
                   tm * decode_bytes / 1e9);
        }
        free(pp);
        free(tg);
    }

    if (!no_sweep && !ret) {
        if (json)
            printf(",\n \"batched\": [");
        else
            printf("\n|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s "
                   "|      T s |    S t/s |\n"
                   "|-------|--------|------|--------|----------|----------|----------|----------|-"
                   "---------|----------|\n");
        for (int bi = 0; bi < nb && !ret; bi++) {
            int B = bs_list[bi];
            for (int i = 0; i < B; i++) {
                lens[i] = (int)n_prompt;
                rand_tokens(prompts[i], lens[i], V, &s);
            }
            double t0 = run_batch(e, B, prompts, lens, (int)n_gen, res);
            if (t0 < 0) {
                ret = 1;
                break;
            }
            double tpp = 0, tend = 0;
            for (int i = 0; i < B; i++) {
                if (res[i].t_first - t0 > tpp) tpp = res[i].t_first - t0;
                if (res[i].t_done - t0 > tend) tend = res[i].t_done - t0;
            }
            double ttg = tend - tpp;
            long nkv = (long)B * (n_prompt + n_gen);
            /* the first token comes with the prefill; TG counts the remaining n_gen - 1 steps */
            double spp = B * n_prompt / tpp, stg = ttg > 0 ? B * (n_gen - 1) / ttg : 0,
                   st = nkv / tend;
            if (json)
                printf("%s\n  {\"pp\": %ld, \"tg\": %ld, \"pl\": %d, \"n_kv\": %ld, \"t_pp\": "
                       "%.4f, \"speed_pp\": %.3f, "
                       "\"t_tg\": %.4f, \"speed_tg\": %.3f, \"t\": %.4f, \"speed\": %.3f}",
                       bi ? "," : "", n_prompt, n_gen, B, nkv, tpp, spp, ttg, stg, tend, st);
            else
                printf("| %5ld | %6ld | %4d | %6ld | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f "
                       "|\n",
                       n_prompt, n_gen, B, nkv, tpp, spp, ttg, stg, tend, st);
        }
        if (json) printf("]");
    }

    if (mt && !ret) {
        mt_res on, off;
        cllm_engine_free(e);
        e = NULL;
        o.enable_prefix_caching = true;
        if (cllm_engine_create(&o, &e, &err) != CLLM_OK) {
            fprintf(stderr, "cllm bench: %s\n", err.msg);
            ret = 1;
            goto done;
        }
        if (multi_turn(e, V, (int)mt_conv, (int)mt_turns, (int)mt_first, (int)mt_msg,
                       (int)mt_answer, (uint64_t)seed, &on) != 0) {
            ret = 1;
            goto done;
        }
        cllm_engine_stats st;
        cllm_engine_stats_get(e, &st);
        cllm_engine_free(e);
        o.enable_prefix_caching = false;
        e = NULL;
        if (cllm_engine_create(&o, &e, &err) != CLLM_OK ||
            multi_turn(e, V, (int)mt_conv, (int)mt_turns, (int)mt_first, (int)mt_msg,
                       (int)mt_answer, (uint64_t)seed, &off) != 0) {
            ret = 1;
            goto done;
        }
        double share = on.shared ? (double)on.reused / (double)on.shared : 0;
        double saved = off.t_prefill > 0 ? 1 - on.t_prefill / off.t_prefill : 0;
        if (json)
            printf(",\n \"multi_turn\": {\"conversations\": %ld, \"turns\": %ld, \"first\": %ld, "
                   "\"message\": %ld, "
                   "\"answer\": %ld, \"block_size\": %ld, \"shared_prefix_tokens\": %llu, "
                   "\"reused_tokens\": %llu, "
                   "\"reuse_share\": %.4f, \"ttft_sum_cached_s\": %.4f, \"ttft_sum_cold_s\": %.4f, "
                   "\"prefill_time_saved\": %.4f, \"forward_s_cached\": %.4f, \"forward_s_cold\": "
                   "%.4f, "
                   "\"prefix_hits_tokens\": %llu, \"prefix_queries_tokens\": %llu}",
                   mt_conv, mt_turns, mt_first, mt_msg, mt_answer, block,
                   (unsigned long long)on.shared, (unsigned long long)on.reused, share,
                   on.t_prefill, off.t_prefill, saved, on.t_forward, off.t_forward,
                   (unsigned long long)st.prefix_hits_tokens,
                   (unsigned long long)st.prefix_queries_tokens);
        else
            printf("\nmulti-turn: %ld conversations x %ld turns (first %ld tokens, +%ld answer "
                   "+%ld message per turn), "
                   "block %ld\n"
                   "  shared-prefix tokens reused: %llu of %llu = %.1f%%\n"
                   "  time to first token, summed: %.3f s cached vs %.3f s cold = %.1f%% prefill "
                   "time saved\n"
                   "  forward time of the whole run: %.3f s cached vs %.3f s cold; engine prefix "
                   "hits %llu of %llu "
                   "queried tokens\n",
                   mt_conv, mt_turns, mt_first, mt_answer, mt_msg, block,
                   (unsigned long long)on.reused, (unsigned long long)on.shared, 100 * share,
                   on.t_prefill, off.t_prefill, 100 * saved, on.t_forward, off.t_forward,
                   (unsigned long long)st.prefix_hits_tokens,
                   (unsigned long long)st.prefix_queries_tokens);
    }
    if (json) printf("\n}\n");
done:
    cllm_engine_free(e);
    for (int i = 0; i < maxB; i++) free(prompts[i]);
    free(prompts);
    free(lens);
    free(res);
    return ret;
}
