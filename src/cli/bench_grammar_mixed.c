/* `cllm bench-grammar --mixed`: unconstrained decode throughput beside constrained neighbours.
 *
 * A batch of B rows: B/2 "measured" unconstrained requests (ignore_eos, N tokens each, all
 * submitted at once) and B/2 neighbour slots, each a stream of requests kept full by this thread.
 * In a mixed round every neighbour is a JSON-schema request compiled fresh from one of the files
 * (as the server compiles per request, on its own thread) and runs until its grammar ends or N
 * tokens; when one finishes the next is submitted into the same slot. In the paired baseline
 * round the neighbours are unconstrained requests with exactly the token counts the mixed
 * round's neighbours produced, in the same order, so both rounds have the same batch
 * composition, prompt lengths and neighbour churn; only the constraint differs. The figure is
 * the measured rows' decode throughput, sum of (tokens - 1) / (last - first token time).
 * A warm-up mixed round comes first (it builds the vocabulary trie once per engine).
 * On a loaded machine wall-clock rates swing by tens of percent between rounds, so each round
 * also reports the engine's CPU time per engine step (process CPU minus this thread's, which
 * compiles the schemas): the rows of a batch wait for the whole step, so its growth is what the
 * unconstrained rows lose when the cores are not contended. */
#include <pthread.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/mem.h"
#include "cli/cli.h"
#include "cli/bench_grammar.h"
#include "engine/engine.h"
#include "grammar/grammar.h"

enum { MAX_SLOTS = 64, MAX_NB = 1024 }; /* neighbour slots, requests per slot and round */

typedef struct bm_rec {
    double t_first, t_done;
    int n_out;
    cllm_finish fin;
    char err[160];
    bool done;
} bm_rec;

typedef struct bm_run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int measured_done, n_measured;
    int pending[MAX_SLOTS]; /* finished neighbour not yet handled: its record index + 1 */
} bm_run;

typedef struct bm_user {
    bm_run *run;
    bm_rec *rec;
    int slot; /* -1 = measured row */
    int index;
} bm_user;

static void bm_event(void *user, const cllm_event *ev) {
    bm_user *u = user;
    u->rec->n_out += ev->n_tokens;
    if (ev->finish == CLLM_FINISH_NONE) return;
    pthread_mutex_lock(&u->run->mu);
    u->rec->t_first = ev->t_first_token;
    u->rec->t_done = ev->t_finished;
    u->rec->fin = ev->finish;
    if (ev->error) snprintf(u->rec->err, sizeof(u->rec->err), "%s", ev->error);
    u->rec->done = true;
    if (u->slot < 0)
        u->run->measured_done++;
    else
        u->run->pending[u->slot] = u->index + 1;
    pthread_cond_broadcast(&u->run->cv);
    pthread_mutex_unlock(&u->run->mu);
}

static double load1(void) {
    FILE *f = fopen("/proc/loadavg", "r");
    double l = -1;
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

static double ru_s(int who) {
    struct rusage ru;
    if (getrusage(who, &ru)) return 0;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

typedef struct bm_snap {
    double cpu, wall, grammar; /* engine CPU (every thread but this one), wall, grammar work */
    double prep;               /* grammar preparation (helper thread) */
    uint64_t steps, masks;
} bm_snap;

static bm_snap snap(cllm_engine *e) {
    cllm_engine_stats st;
    cllm_engine_stats_get(e, &st);
    return (bm_snap){ru_s(RUSAGE_SELF) - ru_s(RUSAGE_THREAD),
                     cllm_time_s(),
                     st.grammar_s,
                     st.grammar_prep_s,
                     st.iter_steps,
                     st.grammar_masks};
}

typedef struct bm_ctx {
    const bgm_args *a;
    cllm_engine *e;
    cllm_sampling base;
    char **schema_text;
    size_t *schema_len;
    int32_t **prompts; /* [batch] */
    int next_schema;
    double compile_s;
    int n_compiled;
    cllm_gm_cache *cache; /* as the server's: a schema compiled (and prepared) once */
} bm_ctx;

/* Submits slot k's next neighbour (mixed: a fresh compile of the next schema). */
static bool nb_submit(bm_ctx *c, bm_run *run, bool mixed, int k, int (*lens)[MAX_NB],
                      const int *n_lens, bm_rec *nrec, bm_user *nu, uint64_t *nid, int *cnt) {
    const bgm_args *a = c->a;
    int M = a->batch / 2, j = cnt[k];
    if (j >= MAX_NB) return true;
    cllm_sampling sp = c->base;
    sp.seed = (uint64_t)a->seed * 7919u + (uint64_t)(k * MAX_NB + j);
    cllm_gm *g = NULL;
    cllm_error err = {0};
    if (mixed) {
        int si = c->next_schema++ % a->n_schemas;
        cllm_gm_opts o = {0};
        double t0 = cllm_time_s();
        g = cllm_gm_cache_get(c->cache, c->schema_text[si], c->schema_len[si]);
        if (!g) {
            if (cllm_gm_from_json_schema(c->schema_text[si], c->schema_len[si], &o, &g, &err) !=
                CLLM_OK) {
                fprintf(stderr, "cllm bench-grammar: %s: %s\n", a->schemas[si], err.msg);
                return false;
            }
            cllm_gm_cache_put(c->cache, c->schema_text[si], c->schema_len[si], g);
        }
        c->compile_s += cllm_time_s() - t0;
        c->n_compiled++;
        sp.grammar = g;
        sp.max_tokens = a->tokens;
    } else {
        sp.max_tokens = j < n_lens[k] && lens[k][j] > 0 ? lens[k][j] : a->tokens;
        sp.ignore_eos = true;
    }
    bm_user *u = &nu[k * MAX_NB + j];
    *u = (bm_user){run, &nrec[k * MAX_NB + j], k, j};
    cllm_request r = {c->prompts[M + k], a->prompt_len, sp, bm_event, u, NULL};
    cllm_status st = cllm_engine_submit(c->e, &r, &nid[k], &err);
    cllm_gm_unref(g); /* the engine holds its own reference */
    if (st != CLLM_OK) {
        fprintf(stderr, "cllm bench-grammar: submit: %s\n", err.msg);
        return false;
    }
    cnt[k]++;
    return true;
}

/* One round. mixed: neighbours constrained, their lengths written to lens (n_lens);
 * baseline: neighbours unconstrained with lens[slot][j] tokens. Returns the measured rows'
 * tok/s, < 0 on failure. Nothing is freed before every submitted request has ended. */
static double bm_round(bm_ctx *c, bool mixed, int (*lens)[MAX_NB], int *n_lens, int *n_nb,
                       double *nb_tokens) {
    const bgm_args *a = c->a;
    int M = a->batch / 2, S = a->batch - M, sent = 0;
    bm_run run = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, M, {0}};
    bm_rec *mrec = calloc((size_t)M, sizeof(bm_rec));
    bm_user *mu = calloc((size_t)M, sizeof(bm_user));
    uint64_t *mid = calloc((size_t)M, sizeof(uint64_t));
    bm_rec *nrec = calloc((size_t)S * MAX_NB, sizeof(bm_rec));
    bm_user *nu = calloc((size_t)S * MAX_NB, sizeof(bm_user));
    uint64_t *nid = calloc((size_t)S, sizeof(uint64_t));
    int *cnt = calloc((size_t)S, sizeof(int));
    bool live[MAX_SLOTS] = {0}, failed = false;
    double rate = -1;
    *n_nb = 0;
    *nb_tokens = 0;
    if (!mrec || !mu || !mid || !nrec || !nu || !nid || !cnt) goto out;
    for (int i = 0; i < M && !failed; i++) {
        cllm_sampling sp = c->base;
        sp.max_tokens = a->tokens;
        sp.ignore_eos = true;
        sp.seed = (uint64_t)a->seed * 1000003u + (uint64_t)i;
        mu[i] = (bm_user){&run, &mrec[i], -1, i};
        cllm_request r = {c->prompts[i], a->prompt_len, sp, bm_event, &mu[i], NULL};
        cllm_error err = {0};
        if (cllm_engine_submit(c->e, &r, &mid[i], &err) != CLLM_OK) {
            fprintf(stderr, "cllm bench-grammar: submit: %s\n", err.msg);
            failed = true;
        } else {
            sent++;
        }
    }
    for (int k = 0; k < S && !failed; k++) {
        if (!nb_submit(c, &run, mixed, k, lens, n_lens, nrec, nu, nid, cnt)) failed = true;
        live[k] = !failed;
    }
    /* keep the neighbour slots full until every measured row is done */
    pthread_mutex_lock(&run.mu);
    while (!failed) {
        int k = -1;
        for (int i = 0; i < S && k < 0; i++)
            if (run.pending[i]) k = i;
        if (k < 0 && run.measured_done == M) break;
        if (k < 0) {
            pthread_cond_wait(&run.cv, &run.mu);
            continue;
        }
        int idx = run.pending[k] - 1;
        run.pending[k] = 0;
        live[k] = false;
        bm_rec *r = &nrec[k * MAX_NB + idx];
        if (r->fin == CLLM_FINISH_ERROR) {
            fprintf(stderr, "cllm bench-grammar: neighbour failed: %s\n", r->err);
            failed = true;
            break;
        }
        if (mixed) lens[k][idx] = r->n_out, n_lens[k] = idx + 1;
        (*n_nb)++;
        *nb_tokens += r->n_out;
        if (run.measured_done == M || cnt[k] >= MAX_NB) continue;
        pthread_mutex_unlock(&run.mu);
        bool ok = nb_submit(c, &run, mixed, k, lens, n_lens, nrec, nu, nid, cnt);
        pthread_mutex_lock(&run.mu);
        if (!ok) failed = true;
        live[k] = ok;
    }
    /* end what still runs (the neighbours; on failure everything) and wait for it */
    for (int k = 0; k < S; k++)
        if (live[k]) cllm_engine_cancel(c->e, nid[k]);
    if (failed)
        for (int i = 0; i < sent; i++) cllm_engine_cancel(c->e, mid[i]);
    for (;;) {
        bool any = run.measured_done < sent;
        for (int k = 0; k < S; k++) {
            if (run.pending[k]) {
                run.pending[k] = 0;
                live[k] = false;
            }
            any |= live[k];
        }
        if (!any) break;
        pthread_cond_wait(&run.cv, &run.mu);
    }
    pthread_mutex_unlock(&run.mu);
    if (failed) goto out;
    rate = 0;
    for (int i = 0; i < M; i++) {
        double dt = mrec[i].t_done - mrec[i].t_first;
        if (mrec[i].fin == CLLM_FINISH_ERROR || dt <= 0) {
            fprintf(stderr, "cllm bench-grammar: measured row failed: %s\n", mrec[i].err);
            rate = -1;
            break;
        }
        rate += (mrec[i].n_out - 1) / dt;
    }
out:
    free(mrec);
    free(mu);
    free(mid);
    free(nrec);
    free(nu);
    free(nid);
    free(cnt);
    return rate;
}

/* One 1-token constrained request per schema, one at a time: each is admitted only once its
 * grammar is prepared, so after this the rounds measure prepared grammars (what a repeated
 * schema costs), and the preparation time is reported on its own. */
static bool warm_schemas(bm_ctx *c, double *prep_wall) {
    const bgm_args *a = c->a;
    double t0 = cllm_time_s();
    for (int i = 0; i < a->n_schemas; i++) {
        bm_run run = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 1, {0}};
        bm_rec rec = {0};
        bm_user u = {&run, &rec, -1, 0};
        cllm_gm_opts o = {0};
        cllm_error err = {0};
        cllm_gm *g = cllm_gm_cache_get(c->cache, c->schema_text[i], c->schema_len[i]);
        if (!g) {
            if (cllm_gm_from_json_schema(c->schema_text[i], c->schema_len[i], &o, &g, &err)) {
                fprintf(stderr, "cllm bench-grammar: %s: %s\n", a->schemas[i], err.msg);
                return false;
            }
            cllm_gm_cache_put(c->cache, c->schema_text[i], c->schema_len[i], g);
        }
        cllm_sampling sp = c->base;
        sp.grammar = g;
        sp.max_tokens = 1;
        cllm_request r = {c->prompts[0], a->prompt_len, sp, bm_event, &u, NULL};
        cllm_status st = cllm_engine_submit(c->e, &r, NULL, &err);
        cllm_gm_unref(g);
        if (st != CLLM_OK) {
            fprintf(stderr, "cllm bench-grammar: submit: %s\n", err.msg);
            return false;
        }
        pthread_mutex_lock(&run.mu);
        while (!run.measured_done) pthread_cond_wait(&run.cv, &run.mu);
        pthread_mutex_unlock(&run.mu);
        if (rec.fin == CLLM_FINISH_ERROR) {
            fprintf(stderr, "cllm bench-grammar: %s: %s\n", a->schemas[i], rec.err);
            return false;
        }
    }
    *prep_wall = cllm_time_s() - t0;
    return true;
}

int bench_grammar_mixed(const bgm_args *a) {
    if (a->batch < 2 || a->batch / 2 > MAX_SLOTS || a->n_schemas < 1) {
        fprintf(stderr, "cllm bench-grammar --mixed: needs 2 <= --batch <= %d and a schema\n",
                2 * MAX_SLOTS);
        return 2;
    }
    bm_ctx c = {.a = a, .cache = a->no_cache ? NULL : cllm_gm_cache_new(64)};
    int ret = 1, S = a->batch - a->batch / 2;
    int(*lens)[MAX_NB] = calloc((size_t)S, sizeof(*lens));
    int *n_lens = calloc((size_t)S, sizeof(int));
    c.schema_text = calloc((size_t)a->n_schemas, sizeof(char *));
    c.schema_len = calloc((size_t)a->n_schemas, sizeof(size_t));
    c.prompts = calloc((size_t)a->batch, sizeof(int32_t *));
    double *rm = calloc((size_t)a->rounds + 1, sizeof(double));
    double *rb = calloc((size_t)a->rounds + 1, sizeof(double));
    if (!lens || !n_lens || !c.schema_text || !c.schema_len || !c.prompts || !rm || !rb) goto out;
    for (int i = 0; i < a->n_schemas; i++) {
        cllm_error rerr = {0};
        c.schema_text[i] = cllm_read_file(a->schemas[i], 0, &c.schema_len[i], &rerr);
        if (!c.schema_text[i]) {
            fprintf(stderr, "cllm bench-grammar: cannot read schema: %s\n", rerr.msg);
            goto out;
        }
    }
    cllm_engine_opts o;
    cllm_engine_opts_defaults(&o);
    o.fwd = cli_fwd_opts(NULL);
    o.model_dir = a->model_dir;
    o.tokenizer_dir = a->tokenizer_dir;
    o.n_threads = a->threads;
    o.max_num_seqs = a->batch;
    o.max_model_len = a->prompt_len + a->tokens + 16;
    o.enable_prefix_caching = false; /* every round prefills the same prompts afresh */
    cllm_error err = {0};
    double l0 = load1();
    if (cllm_engine_create(&o, &c.e, &err) != CLLM_OK) {
        fprintf(stderr, "cllm bench-grammar: %s\n", err.msg);
        goto out;
    }
    cllm_sampling_defaults(c.e, &c.base);
    c.base.temperature = 1.0;
    c.base.top_p = 1;
    c.base.top_k = 0;
    c.base.min_p = 0;
    c.base.repetition_penalty = 1;
    c.base.presence_penalty = c.base.frequency_penalty = 0;
    c.base.has_seed = true;
    c.base.n = 1;
    c.base.logprobs = -1;
    uint64_t rng = (uint64_t)a->seed * 0x9e3779b97f4a7c15ull + 7;
    for (int i = 0; i < a->batch; i++) {
        c.prompts[i] = malloc((size_t)a->prompt_len * sizeof(int32_t));
        if (!c.prompts[i]) goto out;
        for (int k = 0; k < a->prompt_len; k++) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            c.prompts[i][k] = (int32_t)(rng % 1000) + 10; /* ordinary ids of any vocabulary */
        }
    }
    printf("mixed batch: %d rows = %d unconstrained x %d tokens + %d neighbour slots; prompt %d "
           "tokens; %d schema(s); load %.2f at start\n",
           a->batch, a->batch / 2, a->tokens, S, a->prompt_len, a->n_schemas, l0);
    int n_nb = 0;
    double nb_tok = 0, pw = 0;
    if (c.cache) {
        bm_snap p0 = snap(c.e);
        if (!warm_schemas(&c, &pw)) goto out;
        bm_snap p1 = snap(c.e);
        printf("schemas prepared: %.0f ms wall, of which %.0f ms preparing on the helper thread "
               "(token trie once + mask caches); the first request of each schema waited for it\n",
               pw * 1e3, (p1.prep - p0.prep) * 1e3);
    }
    double t0 = cllm_time_s();
    bm_snap w0 = snap(c.e);
    double wr = bm_round(&c, true, lens, n_lens, &n_nb, &nb_tok);
    if (wr < 0) goto out;
    bm_snap w1 = snap(c.e);
    printf("warm-up mixed round: unconstrained %.2f tok/s, %.1f s; grammar work on the engine "
           "thread %.0f ms, preparation on the helper thread %.0f ms (token trie + caches)\n",
           wr, cllm_time_s() - t0, (w1.grammar - w0.grammar) * 1e3, (w1.prep - w0.prep) * 1e3);
    double sm = 0, sb = 0, cm = 0, cb = 0, gw = 0, ww = 0;
    for (int r = 0; r < a->rounds; r++) {
        int nm = 0, nbn = 0;
        double tm = 0, tb = 0;
        memset(n_lens, 0, (size_t)S * sizeof(int));
        bm_snap s0 = snap(c.e);
        rm[r] = bm_round(&c, true, lens, n_lens, &nm, &tm);
        bm_snap s1 = snap(c.e);
        if (rm[r] < 0) goto out;
        rb[r] = bm_round(&c, false, lens, n_lens, &nbn, &tb);
        bm_snap s2 = snap(c.e);
        if (rb[r] < 0) goto out;
        double st1 = (double)(s1.steps - s0.steps ? s1.steps - s0.steps : 1),
               st2 = (double)(s2.steps - s1.steps ? s2.steps - s1.steps : 1);
        double pm = (s1.cpu - s0.cpu) / st1, pb = (s2.cpu - s1.cpu) / st2;
        double g = s1.grammar - s0.grammar, w = s1.wall - s0.wall;
        sm += rm[r];
        sb += rb[r];
        cm += pm;
        cb += pb;
        gw += g;
        ww += w;
        printf(
            "round %d: beside %d constrained requests (%.1f tokens each): %.2f tok/s, engine CPU "
            "%.2f ms/step, grammar work %.3f ms/step (%llu masks) = %.2f%% of the round, prep "
            "%.0f ms | "
            "beside %d unconstrained of the same lengths: %.2f tok/s, %.2f ms/step | tok/s "
            "%+.1f%%, CPU/step %+.1f%% (load %.2f)\n",
            r + 1, nm, nm ? tm / nm : 0, rm[r], pm * 1e3, g * 1e3 / st1,
            (unsigned long long)(s1.masks - s0.masks), 100.0 * g / w, (s1.prep - s0.prep) * 1e3,
            nbn, rb[r], pb * 1e3, 100.0 * (rm[r] - rb[r]) / rb[r], 100.0 * (pm - pb) / pb, load1());
    }
    printf("over %d rounds: grammar work on the engine thread = %.2f%% of the mixed rounds' wall "
           "time (what every row of the batch waits for; %s); measured unconstrained tok/s %+.1f%% "
           "(%.2f vs %.2f), engine CPU/step %+.1f%% (both noisy under load); schema compile %.2f "
           "ms per request on the submitting thread; load %.2f at end\n",
           a->rounds, 100.0 * gw / ww,
           a->no_cache ? "every request compiled and prepared afresh"
                       : "schemas compiled once, by source, as the server does",
           100.0 * (sm - sb) / sb, sm / a->rounds, sb / a->rounds, 100.0 * (cm - cb) / cb,
           c.n_compiled ? c.compile_s * 1e3 / c.n_compiled : 0, load1());
    ret = 0;
out:
    if (c.e) cllm_engine_free(c.e);
    cllm_gm_cache_free(c.cache);
    for (int i = 0; c.schema_text && i < a->n_schemas; i++) free(c.schema_text[i]);
    for (int i = 0; c.prompts && i < a->batch; i++) free(c.prompts[i]);
    free(c.schema_text);
    free(c.schema_len);
    free(c.prompts);
    free(lens);
    free(n_lens);
    free(rm);
    free(rb);
    return ret;
}
