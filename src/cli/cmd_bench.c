/* `cllm bench MODEL [-p 64,512 -n 32,128 -t 1,2 -r 3 -b 1,2,4,8 --json --multi-turn]`: offline
 * benchmarks through the engine (engine.h), the same path the server takes:
 *  - a llama-bench style table (lists as llama-bench takes them: one row per value of -p / -n,
 *    one engine per -t value): ppP (prefill of P random tokens, one request) and tgN (decode of
 *    N tokens after a 1-token prompt), mean ± stddev over -r runs after one untimed warmup run
 *    per test (--no-warmup: none; llama-bench's habit), with llama-bench's size and
 *    params columns and the decode GB/s achieved (weight bytes per decoded token x tok/s);
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
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/mem.h"
#include "engine/engine.h"
#include "model/forward.h"
#include "model/verify.h"
#include "cli/cli.h"
#include "cli/cli_spec.h"
#include "cli/commands.h"
#include "cli/serve_tp.h"
#include "dist/dist.h"
#include "loadgen/metrics.h"

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

/* Submits B requests at once and waits for all; returns the submit time or < 0 on failure.
 * `plain`: the requests draft nothing on a speculative engine (cllm_sampling.no_speculation). */
static double run_batch(cllm_engine *e, int B, int32_t **prompts, const int *lens, int max_tokens,
                        bool plain, bres *res) {
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
    sp.no_speculation = plain;
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

static int parse_list(const char *s, int *out, int max, long hi) {
    int n = 0;
    while (s && *s && n < max) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > hi) return -1;
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
        double t0 = run_batch(e, C, conv, len, answer_len, true, res);
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

typedef struct bench_args {
    const char *model, *plist, *nlist, *tlist, *blist, *act16, *spec_json;
    cllm_spec_opts spec; /* --speculative-config: tg rows and the sweep run with and without */
    long reps, block, seed, budget;
    long mt_conv, mt_turns, mt_first, mt_msg, mt_answer;
    bool json, mt, no_table, no_sweep, kv_bf16, ssm_bf16, no_prefault, no_warmup;
    uint64_t kv_bytes;
    int p[16], n[16], t[16], b[64];
    int np, nn, nt, nb;
    int maxP, maxN, maxB;
} bench_args;

/* What the rows print about the model. */
typedef struct bench_model {
    int V, n_layers, max_pos;
    char mtype[32];
    uint64_t decode_bytes, file_bytes, params;
    size_t block_bytes_f32; /* KV bytes per block in fp32 */
} bench_model;

/* ---- phase 1: flags ---- */

/* the budget's floor is the engine's default (engine/engine.h) */
#define BUDGET_FLOOR CLI_STR_OF(CLLM_MAX_NUM_BATCHED_TOKENS_DEFAULT)
#define BUDGET_HELP  "token budget per step (default max(" BUDGET_FLOOR ", PP*B))"

static int bench_parse(int argc, char **argv, bench_args *a) {
    *a = (bench_args){.plist = "512",
                      .nlist = "128",
                      .tlist = "0",
                      .blist = "1,2,4,8",
                      .reps = 3,
                      .block = 16,
                      .seed = 1,
                      .mt_conv = 4,
                      .mt_turns = 4,
                      .mt_first = 256,
                      .mt_msg = 32,
                      .mt_answer = 64};
    const cli_opt opts[] = {
        {"--n-prompt", "-p", CLI_STR, &a->plist,
         "prompt tokens, a list like 64,512 (pp tests; PP of the sweep)"},
        {"--n-gen", "-n", CLI_STR, &a->nlist,
         "generated tokens, a list like 32,128 (tg tests; TG of the sweep)"},
        {"--repetitions", "-r", CLI_INT, &a->reps, "runs per llama-bench test", NULL, 1, 1000},
        {"--batch", "-b", CLI_STR, &a->blist, "parallel sequences for the sweep, e.g. 1,2,4,8"},
        {"--threads", "-t", CLI_STR, &a->tlist, "threads, a list like 1,2 (0 = all CPUs)"},
        {"--block-size", NULL, CLI_INT, &a->block, "KV block size", NULL, 1, 4096},
        {"--kv-cache-memory", NULL, CLI_SIZE, &a->kv_bytes,
         "KV cache bytes (default: what the runs need)"},
        {"--max-num-batched-tokens", NULL, CLI_INT, &a->budget, BUDGET_HELP, NULL, 0, 1e8},
        {"--seed", "-s", CLI_INT, &a->seed, "seed for the random prompts", NULL, 0, 9e18},
        {"--kv-bf16", NULL, CLI_FLAG, &a->kv_bf16, "KV cache in bf16"},
        {"--ssm-bf16", NULL, CLI_FLAG, &a->ssm_bf16,
         "Gated DeltaNet recurrent state in bf16 (serve: --mamba-ssm-cache-dtype bfloat16)"},
        {"--no-prefault", NULL, CLI_FLAG, &a->no_prefault,
         "do not page in every weight before the runs (cold pages are then timed)"},
        {"--no-warmup", NULL, CLI_FLAG, &a->no_warmup,
         "skip each table test's untimed warmup run (llama-bench's flag of the same name)"},
        {"--act16", NULL, CLI_CHOICE, &a->act16, CLI_ACT16_HELP, CLI_ACT16_CHOICES},
        {"--speculative-config", NULL, CLI_STR, &a->spec_json,
         "also run the tg rows and the sweep with speculative decoding, alternated with runs "
         "without it on one engine (vLLM's JSON; bench also "
         "takes \"synthetic_acceptance\": 0.65 and \"fixed_k\": true)"},
        {"--json", NULL, CLI_FLAG, &a->json, "JSON output"},
        {"--no-table", NULL, CLI_FLAG, &a->no_table, "skip the llama-bench table"},
        {"--no-sweep", NULL, CLI_FLAG, &a->no_sweep, "skip the batched sweep"},
        {"--multi-turn", NULL, CLI_FLAG, &a->mt, "run the multi-turn prefix-cache workload"},
        {"--mt-conversations", NULL, CLI_INT, &a->mt_conv, "multi-turn: conversations run together",
         NULL, 1, 256},
        {"--mt-turns", NULL, CLI_INT, &a->mt_turns, "multi-turn: turns per conversation", NULL, 2,
         1000},
        {"--mt-first", NULL, CLI_INT, &a->mt_first, "multi-turn: first prompt tokens", NULL, 1,
         1e6},
        {"--mt-message", NULL, CLI_INT, &a->mt_msg, "multi-turn: new message tokens per turn", NULL,
         1, 1e6},
        {"--mt-answer", NULL, CLI_INT, &a->mt_answer, "multi-turn: answer tokens per turn", NULL, 1,
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
    if (rc) return rc < 0 ? -1 : rc;
    a->model = pos[0];
    struct {
        const char *flag, *s;
        int *out, *n, max;
        long hi;
    } lists[] = {{"-p", a->plist, a->p, &a->np, 16, 1000000},
                 {"-n", a->nlist, a->n, &a->nn, 16, 1000000},
                 {"-t", a->tlist, a->t, &a->nt, 16, 4096},
                 {"-b", a->blist, a->b, &a->nb, 64, 4096}};
    for (int i = 0; i < 4; i++) {
        bool zero_ok = i == 2 && !strcmp(lists[i].s, "0"); /* -t 0: all CPUs */
        *lists[i].n = zero_ok ? 1 : parse_list(lists[i].s, lists[i].out, lists[i].max, lists[i].hi);
        if (zero_ok) lists[i].out[0] = 0;
        if (*lists[i].n < 1) {
            fprintf(stderr,
                    "cllm bench: %s expects a list of positive integers like 1,2,4, got '%s'\n",
                    lists[i].flag, lists[i].s);
            return 2;
        }
    }
    a->maxP = a->maxN = a->maxB = 1;
    for (int i = 0; i < a->np; i++) a->maxP = a->p[i] > a->maxP ? a->p[i] : a->maxP;
    for (int i = 0; i < a->nn; i++) a->maxN = a->n[i] > a->maxN ? a->n[i] : a->maxN;
    for (int i = 0; i < a->nb; i++) a->maxB = a->b[i] > a->maxB ? a->b[i] : a->maxB;
    return 0;
}

/* ---- phase 2: the model's facts (size, params) and the engine options ---- */

static uint64_t files_bytes(const char *dir) {
    uint64_t sum = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    for (struct dirent *de; (de = readdir(d));) {
        /* a GGUF is run through a private folder of links to its file(s) (cli_model.c) */
        size_t n = strlen(de->d_name);
        bool st = n >= 12 && !strcmp(de->d_name + n - 12, ".safetensors"),
             gg = n >= 5 && !strcmp(de->d_name + n - 5, ".gguf");
        if (!st && !gg) continue;
        char p[4096];
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        struct stat sb;
        if (stat(p, &sb) == 0) sum += (uint64_t)sb.st_size;
    }
    closedir(d);
    return sum;
}

static int bench_model_info(const bench_args *a, bench_model *bm) {
    cllm_error err = {0};
    cllm_model *m = NULL;
    cllm_fwd_opts fwd = cli_fwd_opts(a->act16);
    if (cllm_model_load(a->model, &fwd, &m, &err) != CLLM_OK) {
        fprintf(stderr, "cllm bench: %s\n", err.msg);
        return 1;
    }
    const cllm_config *cf = cllm_model_config(m);
    bm->V = cf->vocab_size;
    bm->n_layers = cf->n_layers;
    bm->max_pos = cf->max_position_embeddings;
    snprintf(bm->mtype, sizeof(bm->mtype), "%s", cf->model_type);
    bm->decode_bytes = cllm_model_decode_bytes(m);
    bm->block_bytes_f32 = (size_t)cllm_model_n_attn_layers(m) * 2 * (size_t)a->block *
                          (size_t)cf->n_kv_heads * (size_t)cf->head_dim * 4;
    cllm_model_free(m);
    bm->file_bytes = files_bytes(a->model);
    /* parameters as `cllm verify --config-only` counts them (text model + MTP + vision) */
    FILE *nul = fopen("/dev/null", "w");
    cllm_verify_opts vo = {.config_only = true};
    cllm_verify_result vr;
    memset(&vr, 0, sizeof(vr));
    if (nul && cllm_verify(a->model, &vo, nul, &vr, &err) == CLLM_OK) bm->params = vr.params_total;
    if (nul) fclose(nul);
    return 0;
}

static void bench_engine_opts(const bench_args *a, const bench_model *bm, int threads, bool prefix,
                              bool spec, cllm_engine_opts *o) {
    long seq_len = a->maxP + a->maxN;
    long mt_len = a->mt_first + a->mt_turns * (a->mt_msg + a->mt_answer);
    long max_len = (a->mt && mt_len > seq_len ? mt_len : seq_len) + a->block;
    cllm_engine_opts_defaults(o);
    o->fwd = cli_fwd_opts(a->act16);
    o->model_dir = a->model;
    o->n_threads = threads;
    o->block_size = (int)a->block;
    o->max_num_seqs = a->maxB > a->mt_conv ? a->maxB : (int)a->mt_conv;
    o->max_model_len = (int)(max_len > bm->max_pos ? bm->max_pos : max_len);
    long need_budget = (long)a->maxP * a->maxB;
    long floor_budget = CLLM_MAX_NUM_BATCHED_TOKENS_DEFAULT;
    o->max_num_batched_tokens =
        a->budget > 0 ? (int)a->budget
                      : (int)(need_budget > floor_budget ? need_budget : floor_budget);
    o->kv_cache_bf16 = a->kv_bf16;
    o->ssm_state_bf16 = a->ssm_bf16;
    o->no_prefault = a->no_prefault;
    uint64_t kv = a->kv_bytes;
    if (!kv) {
        size_t bb = a->kv_bf16 ? bm->block_bytes_f32 / 2 : bm->block_bytes_f32;
        uint64_t blocks =
            (uint64_t)o->max_num_seqs * (uint64_t)((max_len + a->block - 1) / a->block) * 2 + 16;
        kv = blocks * (bb ? bb : 1);
    }
    o->kv_cache_bytes = kv;
    o->enable_prefix_caching = prefix;
    if (spec) o->spec = a->spec;
    if (cllm_dist_active()) o->mirror = serve_tp_mirror();
}

/* Tensor parallel: only rank 0 schedules (as `serve` does, cli/serve_tp.h). Each engine rank 0
 * creates is announced to the followers first (1; 0 when the run is over); they create their own
 * engine and run rank 0's operations on it until rank 0 frees it. Before this, every rank ran its
 * own scheduler, and with several sequences in flight the ranks could batch them differently
 * (the per-call batch hash then stopped the run: "forward batch differs between ranks"). */
static void tp_announce(int more) {
    if (cllm_dist_active() && cllm_dist_rank() == 0) cllm_dist_bcast_idle(&more, sizeof(more), 0);
}

static cllm_status bench_engine_create(const cllm_engine_opts *o, cllm_engine **e,
                                       cllm_error *err) {
    tp_announce(1);
    return cllm_engine_create(o, e, err);
}

static int bench_follow(const bench_args *a, const bench_model *bm) {
    for (;;) {
        int more = 0;
        if (cllm_dist_bcast_idle(&more, sizeof(more), 0) != CLLM_OK) return 1;
        if (!more) return 0;
        cllm_engine_opts o;
        bench_engine_opts(a, bm, a->t[0], false, false, &o);
        o.skip_tokenizer_init = true;
        cllm_engine *e = NULL;
        cllm_error err = {0};
        if (cllm_engine_create(&o, &e, &err) != CLLM_OK || serve_tp_follow(e, &err) != CLLM_OK) {
            fprintf(stderr, "cllm bench: rank %d: %s\n", cllm_dist_rank(), err.msg);
            cllm_engine_free(e);
            return 1;
        }
        cllm_engine_free(e);
    }
}

/* ---- phase 3: the runs ---- */

typedef struct bench_bufs {
    int32_t **prompts;
    int *lens;
    bres *res;
    uint64_t rng;
} bench_bufs;

/* ppP and tgN for every P and N of the lists, -r runs each; rows printed as measured. */
/* What a speculative run's row adds: drafts accepted since `st0`, as tokens per verify and the
 * accepted share of draft positions. */
static void spec_note(cllm_engine *e, const cllm_engine_stats *st0, char *out, size_t cap) {
    cllm_engine_stats st;
    cllm_engine_stats_get(e, &st);
    double d = (double)(st.spec_drafts - st0->spec_drafts);
    double dt = (double)(st.spec_draft_tokens - st0->spec_draft_tokens);
    double acc = (double)(st.spec_accepted_tokens - st0->spec_accepted_tokens);
    int n =
        snprintf(out, cap, "%.0f verifies, %.2f drafts and %.2f tokens per verify, %.1f%% accepted",
                 d, d > 0 ? dt / d : 0, d > 0 ? 1 + acc / d : 0, dt > 0 ? 100 * acc / dt : 0);
    /* hybrid models: verifies not accepted whole whose state was committed (no recompute) */
    uint64_t cm = st.spec_commits - st0->spec_commits;
    if (cm > 0 && n > 0 && (size_t)n < cap)
        snprintf(out + n, cap - (size_t)n, ", %llu state commits", (unsigned long long)cm);
}

/* One timed run of test L (a prompt of L, or 1 token then L generated); tok/s, < 0 on failure. */
static double bench_run(cllm_engine *e, const bench_model *bm, bench_bufs *w, bool is_pp, int L,
                        bool plain) {
    w->lens[0] = is_pp ? L : 1;
    rand_tokens(w->prompts[0], w->lens[0], bm->V, &w->rng);
    double t0 = run_batch(e, 1, w->prompts, w->lens, is_pp ? 1 : L + 1, plain, w->res);
    if (t0 < 0) return -1;
    return is_pp ? L / (w->res[0].t_first - t0) : L / (w->res[0].t_done - w->res[0].t_first);
}

static void table_row(const bench_args *a, const bench_model *bm, int nthreads, bool is_pp, int L,
                      bool spec, const double *x, int reps, const char *note, double ratio,
                      bool *first_json) {
    char size[32], params[32];
    snprintf(size, sizeof(size), "%.2f MiB", bm->file_bytes / 1048576.0);
    if (bm->params >= 1000000000ull)
        snprintf(params, sizeof(params), "%.2f B", bm->params / 1e9);
    else
        snprintf(params, sizeof(params), "%.2f M", bm->params / 1e6);
    double mean, sd;
    mean_sd(x, reps, &mean, &sd);
    double gbps = is_pp ? 0 : mean * bm->decode_bytes / 1e9;
    if (a->json) {
        printf("%s\n  {\"test\": \"%s%d\", \"%s\": %d, \"threads\": %d, \"avg_ts\": %.3f, "
               "\"stddev_ts\": %.3f, \"model_size\": %llu, \"model_n_params\": %llu",
               *first_json ? "" : ",", is_pp ? "pp" : "tg", L, is_pp ? "n_prompt" : "n_gen", L,
               nthreads, mean, sd, (unsigned long long)bm->file_bytes,
               (unsigned long long)bm->params);
        if (!is_pp) printf(", \"decode_gbps\": %.3f", gbps);
        if (spec) printf(", \"speculative\": \"%s\"", note);
        if (spec && ratio > 0) printf(", \"spec_vs_plain\": %.4f", ratio);
        printf("}");
        *first_json = false;
    } else if (is_pp) {
        printf("| %s | %s | %s | %d | pp%d | %.2f ± %.2f | | |\n", bm->mtype, size, params,
               nthreads, L, mean, sd);
    } else {
        char rs[96] = "";
        if (spec && ratio > 0)
            snprintf(rs, sizeof(rs), "%.3fx plain (median of %d alternated pairs), ", ratio, reps);
        /* with speculation "decode GB/s" is the weight bytes of the tokens emitted: past the
         * roofline is the point */
        printf("| %s | %s | %s | %d | tg%d%s | %.2f ± %.2f | %.2f | %s%s |\n", bm->mtype, size,
               params, nthreads, L, spec ? " spec" : "", mean, sd, gbps, rs, note);
    }
}

/* ppP and tgN for every P and N of the lists, -r runs each; rows printed as measured. On a
 * speculative engine (`spec`) each tg run without speculation (cllm_sampling.no_speculation) is
 * paired with one with it, in alternating order, and both rows printed: a noisy host's swings
 * fall on both alike, and the spec row gives the median of the pairs' ratios. */
static int bench_table(cllm_engine *e, const bench_args *a, const bench_model *bm, int nthreads,
                       bool spec, bench_bufs *w, bool *first_json) {
    double x[1000], xs[1000], rt[1000];
    int reps = (int)(a->reps < 1000 ? a->reps : 1000);
    for (int k = 0; k < a->np + a->nn; k++) {
        bool is_pp = k < a->np, pair = spec && !is_pp;
        cllm_engine_stats st0;
        cllm_engine_stats_get(e, &st0);
        int L = is_pp ? a->p[k] : a->n[k - a->np];
        /* llama-bench warms each test up untimed: a prompt run of the test's full length (so the
         * first timed run does not pay for growing the step buffers and first-touch page faults
         * at that size) or one generated token; the same here, so the two tables compare alike */
        for (int i = 0; !a->no_warmup && i < 1 + pair; i++) {
            w->lens[0] = is_pp ? L : 1;
            rand_tokens(w->prompts[0], w->lens[0], bm->V, &w->rng);
            if (run_batch(e, 1, w->prompts, w->lens, is_pp ? 1 : 2, i == 0, w->res) < 0) return 1;
        }
        for (int r = 0; r < reps; r++) {
            if (!pair) {
                if ((x[r] = bench_run(e, bm, w, is_pp, L, true)) < 0) return 1;
                continue;
            }
            for (int j = 0; j < 2; j++) { /* plain first in even pairs, second in odd ones */
                bool plain = (j == 0) == (r % 2 == 0);
                double v = bench_run(e, bm, w, false, L, plain);
                if (v < 0) return 1;
                *(plain ? &x[r] : &xs[r]) = v;
            }
            rt[r] = xs[r] / x[r];
        }
        table_row(a, bm, nthreads, is_pp, L, false, x, reps, "", 0, first_json);
        if (!pair) continue;
        char note[160] = "";
        spec_note(e, &st0, note, sizeof(note));
        table_row(a, bm, nthreads, false, L, true, xs, reps, note, lg_median(rt, reps), first_json);
    }
    return 0;
}

/* One llama-batched-bench row: PP x TG x B. */
typedef struct sweep_row {
    long P, N, nkv;
    int B;
    double tpp, spp, ttg, stg, tend, st;
} sweep_row;

static int sweep_run(cllm_engine *e, const bench_model *bm, bench_bufs *w, long P, long N, int B,
                     bool plain, sweep_row *o) {
    for (int i = 0; i < B; i++) {
        w->lens[i] = (int)P;
        rand_tokens(w->prompts[i], w->lens[i], bm->V, &w->rng);
    }
    double t0 = run_batch(e, B, w->prompts, w->lens, (int)N, plain, w->res);
    if (t0 < 0) return 1;
    double tpp = 0, tend = 0;
    for (int i = 0; i < B; i++) {
        if (w->res[i].t_first - t0 > tpp) tpp = w->res[i].t_first - t0;
        if (w->res[i].t_done - t0 > tend) tend = w->res[i].t_done - t0;
    }
    double ttg = tend - tpp;
    long nkv = (long)B * (P + N);
    /* the first token comes with the prefill; TG counts the remaining N - 1 steps */
    *o = (sweep_row){
        P, N, nkv, B, tpp, B * P / tpp, ttg, ttg > 0 ? B * (N - 1) / ttg : 0, tend, nkv / tend};
    return 0;
}

static void sweep_print(const bench_args *a, const sweep_row *r, bool spec, bool *first_json) {
    if (a->json)
        printf("%s\n  {\"pp\": %ld, \"tg\": %ld, \"pl\": %d, \"n_kv\": %ld, \"t_pp\": %.4f, "
               "\"speed_pp\": %.3f, \"t_tg\": %.4f, \"speed_tg\": %.3f, \"t\": %.4f, \"speed\": "
               "%.3f%s}",
               *first_json ? "" : ",", r->P, r->N, r->B, r->nkv, r->tpp, r->spp, r->ttg, r->stg,
               r->tend, r->st, spec ? ", \"speculative\": true" : "");
    else
        printf("| %5ld | %6ld | %4d | %6ld | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n",
               r->P, r->N, r->B, r->nkv, r->tpp, r->spp, r->ttg, r->stg, r->tend, r->st);
    *first_json = false;
}

/* llama-batched-bench rows for every PP x TG x B. On a speculative engine every row is run
 * without speculation (cllm_sampling.no_speculation) and with it, in alternating order; the rows
 * without come first, then those with it under their own heading. */
static int bench_sweep(cllm_engine *e, const bench_args *a, const bench_model *bm, bench_bufs *w,
                       bool spec, bool *first_json) {
    int n = a->np * a->nn * a->nb, i = 0;
    sweep_row *rs = spec ? calloc((size_t)n, sizeof(*rs)) : NULL;
    if (spec && !rs) {
        fprintf(stderr, "cllm bench: out of memory\n");
        return 1;
    }
    for (int pi = 0; pi < a->np; pi++)
        for (int ni = 0; ni < a->nn; ni++)
            for (int bi = 0; bi < a->nb; bi++, i++) {
                long P = a->p[pi], N = a->n[ni];
                int B = a->b[bi];
                sweep_row r;
                for (int j = 0; j < 1 + spec; j++) { /* plain first in even rows */
                    bool plain = !spec || (j == 0) == (i % 2 == 0);
                    if (sweep_run(e, bm, w, P, N, B, plain, plain ? &r : &rs[i])) {
                        free(rs);
                        return 1;
                    }
                }
                sweep_print(a, &r, false, first_json);
            }
    if (spec && !a->json) printf("with --speculative-config:\n");
    for (i = 0; spec && i < n; i++) sweep_print(a, &rs[i], true, first_json);
    free(rs);
    return 0;
}

/* Multi-turn with prefix caching on, then off: reuse share and prefill time saved. */
static int bench_multi_turn(const bench_args *a, const bench_model *bm, int threads) {
    mt_res on, off;
    cllm_engine_opts o;
    cllm_error err = {0};
    cllm_engine *e = NULL;
    cllm_engine_stats st;
    for (int pass = 0; pass < 2; pass++) {
        bench_engine_opts(a, bm, threads, pass == 0, false, &o);
        if (bench_engine_create(&o, &e, &err) != CLLM_OK) {
            fprintf(stderr, "cllm bench: %s\n", err.msg);
            return 1;
        }
        int rc = multi_turn(e, bm->V, (int)a->mt_conv, (int)a->mt_turns, (int)a->mt_first,
                            (int)a->mt_msg, (int)a->mt_answer, (uint64_t)a->seed,
                            pass == 0 ? &on : &off);
        if (pass == 0) cllm_engine_stats_get(e, &st);
        cllm_engine_free(e);
        if (rc) return 1;
    }
    double share = on.shared ? (double)on.reused / (double)on.shared : 0;
    double saved = off.t_prefill > 0 ? 1 - on.t_prefill / off.t_prefill : 0;
    if (a->json)
        printf(",\n \"multi_turn\": {\"conversations\": %ld, \"turns\": %ld, \"first\": %ld, "
               "\"message\": %ld, \"answer\": %ld, \"block_size\": %ld, "
               "\"shared_prefix_tokens\": %llu, \"reused_tokens\": %llu, \"reuse_share\": %.4f, "
               "\"ttft_sum_cached_s\": %.4f, \"ttft_sum_cold_s\": %.4f, "
               "\"prefill_time_saved\": %.4f, \"forward_s_cached\": %.4f, "
               "\"forward_s_cold\": %.4f, \"prefix_hits_tokens\": %llu, "
               "\"prefix_queries_tokens\": %llu}",
               a->mt_conv, a->mt_turns, a->mt_first, a->mt_msg, a->mt_answer, a->block,
               (unsigned long long)on.shared, (unsigned long long)on.reused, share, on.t_prefill,
               off.t_prefill, saved, on.t_forward, off.t_forward,
               (unsigned long long)st.prefix_hits_tokens,
               (unsigned long long)st.prefix_queries_tokens);
    else
        printf("\nmulti-turn: %ld conversations x %ld turns (first %ld tokens, +%ld answer "
               "+%ld message per turn), block %ld\n"
               "  shared-prefix tokens reused: %llu of %llu = %.1f%%\n"
               "  time to first token, summed: %.3f s cached vs %.3f s cold = %.1f%% prefill "
               "time saved\n"
               "  forward time of the whole run: %.3f s cached vs %.3f s cold; engine prefix "
               "hits %llu of %llu queried tokens\n",
               a->mt_conv, a->mt_turns, a->mt_first, a->mt_answer, a->mt_msg, a->block,
               (unsigned long long)on.reused, (unsigned long long)on.shared, 100 * share,
               on.t_prefill, off.t_prefill, 100 * saved, on.t_forward, off.t_forward,
               (unsigned long long)st.prefix_hits_tokens,
               (unsigned long long)st.prefix_queries_tokens);
    return 0;
}

/* An engine with `threads`, warmed up (the weights touched once). NULL on error (printed). */
static cllm_engine *bench_engine(const bench_args *a, const bench_model *bm, int threads, bool spec,
                                 bench_bufs *w) {
    cllm_engine_opts o;
    bench_engine_opts(a, bm, threads, false, spec, &o);
    cllm_error err = {0};
    cllm_engine *e = NULL;
    if (bench_engine_create(&o, &e, &err) != CLLM_OK) {
        fprintf(stderr, "cllm bench: %s\n", err.msg);
        return NULL;
    }
    w->lens[0] = a->p[0] < 16 ? a->p[0] : 16;
    rand_tokens(w->prompts[0], w->lens[0], bm->V, &w->rng);
    if (run_batch(e, 1, w->prompts, w->lens, 2, false, w->res) < 0) {
        cllm_engine_free(e);
        return NULL;
    }
    return e;
}

/* The table: one engine per thread count (speculative when --speculative-config is given), rows
 * for every -p and -n value. */
static int bench_tables(const bench_args *a, const bench_model *bm, bench_bufs *w) {
    if (a->json)
        printf(",\n \"tests\": [");
    else
        printf("\n| model | size | params | threads | test | t/s | decode GB/s | speculative |\n"
               "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n");
    bool first = true;
    for (int ti = 0; ti < a->nt; ti++) {
        int nthreads = a->t[ti] > 0 ? a->t[ti] : (int)sysconf(_SC_NPROCESSORS_ONLN);
        bool spec = a->spec.method != CLLM_SPEC_NONE;
        cllm_engine *e = bench_engine(a, bm, a->t[ti], spec, w);
        if (!e) return 1;
        int rc = bench_table(e, a, bm, nthreads, spec, w, &first);
        cllm_engine_free(e);
        if (rc) return 1;
    }
    if (a->json) printf("]");
    return 0;
}

/* The batched sweep with the first thread count. */
static int bench_sweeps(const bench_args *a, const bench_model *bm, bench_bufs *w) {
    if (a->json)
        printf(",\n \"batched\": [");
    else
        printf("\n|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |"
               "      T s |    S t/s |\n"
               "|-------|--------|------|--------|----------|----------|----------|----------|--"
               "--------|----------|\n");
    bool first = true, spec = a->spec.method != CLLM_SPEC_NONE;
    cllm_engine *e = bench_engine(a, bm, a->t[0], spec, w);
    if (!e) return 1;
    int rc = bench_sweep(e, a, bm, w, spec, &first);
    cllm_engine_free(e);
    if (a->json) printf("]");
    return rc;
}

int cmd_bench(int argc, char **argv) {
    bench_args a;
    int rc = bench_parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    if (cli_check_model_dir("bench", &a.model)) return 1;
    char smsg[256];
    if (cli_spec_parse(a.spec_json, true, &a.spec, smsg, sizeof(smsg)) != 0) {
        fprintf(stderr, "cllm bench: %s\n", smsg);
        return 2;
    }
    bench_model bm;
    memset(&bm, 0, sizeof(bm));
    if (bench_model_info(&a, &bm)) return 1;
    if (cllm_dist_active() && cllm_dist_rank() > 0) return bench_follow(&a, &bm);
    setvbuf(stdout, NULL, _IOLBF, 0); /* rows appear as they are measured */
    int maxL = a.maxP > 16 ? a.maxP : 16;
    bench_bufs w = {calloc((size_t)a.maxB, sizeof(int32_t *)), calloc((size_t)a.maxB, sizeof(int)),
                    calloc((size_t)a.maxB, sizeof(bres)),
                    (uint64_t)a.seed * 0x9e3779b97f4a7c15ull + 1};
    int ret = !w.prompts || !w.lens || !w.res;
    for (int i = 0; !ret && i < a.maxB; i++)
        if (!(w.prompts[i] = malloc((size_t)maxL * sizeof(int32_t)))) ret = 1;
    if (ret) fprintf(stderr, "cllm bench: out of memory\n");
    if (!ret) {
        if (a.json)
            printf("{\"model\": \"%s\", \"model_type\": \"%s\", \"layers\": %d, \"threads\": %d, "
                   "\"model_size\": %llu, \"model_n_params\": %llu",
                   a.model, bm.mtype, bm.n_layers,
                   a.t[0] > 0 ? a.t[0] : (int)sysconf(_SC_NPROCESSORS_ONLN),
                   (unsigned long long)bm.file_bytes, (unsigned long long)bm.params);
        else
            printf("model %s (%s, %d layers, %.2f MiB, %.2f M params), decode reads %.3f GB of "
                   "weights per token\n",
                   a.model, bm.mtype, bm.n_layers, bm.file_bytes / 1048576.0, bm.params / 1e6,
                   bm.decode_bytes / 1e9);
        if (!a.no_table) ret = bench_tables(&a, &bm, &w);
        if (!ret && !a.no_sweep) ret = bench_sweeps(&a, &bm, &w);
        if (!ret && a.mt) ret = bench_multi_turn(&a, &bm, a.t[0]);
        if (a.json) printf("\n}\n");
    }
    tp_announce(0);
    for (int i = 0; w.prompts && i < a.maxB; i++) free(w.prompts[i]);
    free(w.prompts);
    free(w.lens);
    free(w.res);
    return ret;
}
