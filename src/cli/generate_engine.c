/* `cllm generate --speculative-config ...`: the one sequence runs through the engine (which
 * drafts, verifies and rolls back) instead of the forward pass directly. The request carries
 * the same sampling fields and seed as the direct path, and the engine's sampler draws every
 * position exactly as without speculation, so greedy and seeded output is the same tokens. */
#include "cli/generate_engine.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

typedef struct gen_wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done, print_ids;
    int made;
    cllm_finish fin;
    char err[256];
    double t_arrival, t_first, t_done;
} gen_wait;

static void on_event(void *user, const cllm_event *ev) {
    gen_wait *w = user;
    for (int i = 0; w->print_ids && i < ev->n_tokens; i++)
        printf("%s%d", w->made + i > 0 ? " " : "", ev->token_ids[i]);
    if (!w->print_ids && ev->text_len) fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
    w->made += ev->n_tokens;
    if (ev->finish == CLLM_FINISH_NONE) return;
    pthread_mutex_lock(&w->mu);
    w->fin = ev->finish;
    if (ev->error) snprintf(w->err, sizeof(w->err), "%s", ev->error);
    w->t_arrival = ev->t_arrival;
    w->t_first = ev->t_first_token;
    w->t_done = ev->t_finished;
    w->done = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

int generate_engine(const gen_engine_args *a) {
    cllm_engine_opts o;
    cllm_engine_opts_defaults(&o);
    o.model_dir = a->model_dir;
    o.n_threads = a->threads;
    o.max_num_seqs = 1;
    o.block_size = a->block_size;
    /* room for the prompt, the answer and a last verify's drafts */
    o.max_model_len = a->n_prompt + a->n_gen + a->spec.num_speculative_tokens + 2;
    o.memory_utilization = 0.95; /* one short sequence: the weights are what counts */
    o.enable_prefix_caching = false;
    o.kv_cache_bf16 = a->kv_bf16;
    o.ssm_state_bf16 = a->ssm_bf16;
    o.gdn_prefill = a->gdn_prefill;
    o.spec = a->spec;
    o.fwd = a->fwd;
    o.skip_tokenizer_init = a->print_ids;
    cllm_engine *e = NULL;
    cllm_error err = {0};
    if (cllm_engine_create(&o, &e, &err) != CLLM_OK) {
        fprintf(stderr, "cllm generate: %s\n", err.msg);
        return 1;
    }
    gen_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, a->print_ids};
    cllm_engine_stats s0;
    cllm_engine_stats_get(e, &s0);
    cllm_request r = {a->prompt, a->n_prompt, a->sampling, on_event, &w, NULL, NULL, 0};
    int ret = 0;
    if (cllm_engine_submit(e, &r, NULL, &err) != CLLM_OK) {
        fprintf(stderr, "cllm generate: %s\n", err.msg);
        ret = 2;
        goto out;
    }
    pthread_mutex_lock(&w.mu);
    while (!w.done) pthread_cond_wait(&w.cv, &w.mu);
    pthread_mutex_unlock(&w.mu);
    printf("\n");
    if (w.fin == CLLM_FINISH_ERROR) {
        fprintf(stderr, "cllm generate: %s\n", w.err);
        ret = 1;
        goto out;
    }
    cllm_engine_stats st;
    cllm_engine_stats_get(e, &st);
    double d = (double)(st.spec_drafts - s0.spec_drafts),
           dt = (double)(st.spec_draft_tokens - s0.spec_draft_tokens),
           acc = (double)(st.spec_accepted_tokens - s0.spec_accepted_tokens);
    /* decode: the tokens after the first (sampled from the prefill's logits) */
    int dsteps = w.made > 0 ? w.made - 1 : 0;
    double tp = w.t_first - w.t_arrival, td = w.t_done - w.t_first;
    fprintf(
        stderr,
        "prefill: %d tokens in %.3f s (%.2f tok/s); decode: %d tokens in %.3f s (%.2f tok/s); "
        "speculative: %.0f verifies, %.2f tokens per verify, %.1f%% of %.0f drafts accepted%s\n",
        a->n_prompt, tp, tp > 0 ? a->n_prompt / tp : 0.0, dsteps, td,
        dsteps > 0 && td > 0 ? dsteps / td : 0.0, d, d > 0 ? 1 + acc / d : 0.0,
        dt > 0 ? 100 * acc / dt : 0.0, dt,
        a->spec.synthetic_acceptance > 0 ? " (synthetic acceptance: not the model's output)" : "");
out:
    cllm_engine_free(e);
    return ret;
}
