/* Engine: the public API of engine.h. Loads the model and tokenizer, sizes the KV pool and the
 * state slots from the memory budget, and runs the scheduler (sched.c) on its own thread.
 *
 * Threads: submit/cancel/drain/stats take e->mu briefly and hand work to the step thread through
 * two queues (new requests, cancelled ids); the step thread owns the scheduler, the pools and the
 * forward context, and calls the request callbacks without holding e->mu (a callback may call
 * cllm_engine_cancel). */
#include "engine/engine.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/mem.h"
#include "base/threadpool.h"
#include "engine/sched.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/vision.h"
#include "tokenizer/tokenizer.h"

struct cllm_engine {
    cllm_engine_opts o;
    cllm_model *m;
    cllm_pool *pool;
    cllm_fwd_ctx *fctx;
    cllm_kv_pool kv;
    cllm_state_pool st;
    size_t block_bytes;
    cllm_tok *tok;
    cllm_gen_config gen;
    sched_cfg scfg;
    sched *s;

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, draining;
    eng_req **in; /* submitted, not yet handed to the scheduler */
    int n_in, cap_in;
    uint64_t *cancels;
    int n_cancel, cap_cancel;
    cllm_engine_stats stats; /* snapshot after the last step */
    uint64_t rejections;
    bool reset_cache;
    double t_forward; /* copies of the scheduler's counters, for cllm_engine_forward_time */
    uint64_t tokens_forward;
    atomic_uint_fast64_t next_id;
    float *follow_logits; /* tensor-parallel follower: logits scratch */
    size_t follow_cap;
};

void cllm_engine_opts_defaults(cllm_engine_opts *o) {
    memset(o, 0, sizeof(*o));
    o->max_num_seqs = 256;
    o->max_num_batched_tokens = CLLM_MAX_NUM_BATCHED_TOKENS_DEFAULT;
    o->block_size = 16;
    o->memory_utilization = 0.5;
    o->enable_prefix_caching = true;
    o->state_snapshot_interval = 1;
}

void cllm_sampling_defaults(const cllm_engine *e, cllm_sampling *s) {
    memset(s, 0, sizeof(*s));
    s->top_p = 1;
    s->repetition_penalty = 1;
    s->logprobs = -1;
    s->n = 1;
    s->skip_special_tokens = true;
    if (e && e->gen.present && e->gen.do_sample) {
        s->temperature = e->gen.temperature;
        s->top_p = e->gen.top_p;
        s->top_k = e->gen.top_k;
        s->min_p = e->gen.min_p;
        s->repetition_penalty = e->gen.repetition_penalty > 0 ? e->gen.repetition_penalty : 1;
        s->presence_penalty = e->gen.presence_penalty;
    }
}

/* ---- model ops over the real forward pass ---- */

static cllm_status real_forward(void *ctx, const cllm_batch *b, float *logits, cllm_error *err) {
    cllm_engine *e = ctx;
    return cllm_forward(e->fctx, b, &e->kv, &e->st, logits, err);
}

static void real_copy_block(void *ctx, int dst, int src) {
    cllm_engine *e = ctx;
    if (!e->kv.data || dst == src) return;
    memcpy((char *)e->kv.data + (size_t)dst * e->block_bytes,
           (char *)e->kv.data + (size_t)src * e->block_bytes, e->block_bytes);
}

static void real_copy_state(void *ctx, int dst, int src) {
    cllm_engine *e = ctx;
    cllm_state_slot_copy(&e->st, dst, src);
}

static cllm_status real_mtp(void *ctx, const cllm_mtp_seq *seqs, int n_seqs, float *logits,
                            cllm_error *err) {
    cllm_engine *e = ctx;
    return cllm_forward_mtp(e->fctx, seqs, n_seqs, &e->kv, logits, err);
}

static void *real_image_start(void *ctx, const float *pixels, const int grid[3], int *units,
                              cllm_error *err) {
    cllm_engine *e = ctx;
    cllm_vision_job *j = NULL;
    if (cllm_vision_job_start(e->fctx, pixels, grid[0], grid[1], grid[2], &j, err) != CLLM_OK)
        return NULL;
    *units = cllm_vision_job_units(j);
    return j;
}

static cllm_status real_image_run(void *ctx, void *job, int n_units, float *out, bool *done,
                                  cllm_error *err) {
    cllm_engine *e = ctx;
    return cllm_vision_job_run(e->fctx, job, n_units, out, done, err);
}

static void real_image_free(void *ctx, void *job) {
    (void)ctx;
    cllm_vision_job_free(job);
}

static bool real_commit_state(void *ctx, int seq, int n, int slot) {
    cllm_engine *e = ctx;
    cllm_error err = {0};
    if (cllm_forward_state_commit(e->fctx, &e->st, seq, n, slot, &err) == CLLM_OK) return true;
    LOG_WARN("state commit: %s (the positions are recomputed instead)", err.msg);
    return false;
}

static const eng_model_ops real_ops = {real_forward,    real_copy_block,  real_copy_state,
                                       real_mtp,        real_image_start, real_image_run,
                                       real_image_free, real_commit_state};

/* Tensor parallel rank 0: each operation is told to the other ranks first (o.mirror). */
static cllm_status mirror_forward(void *ctx, const cllm_batch *b, float *logits, cllm_error *err) {
    cllm_engine *e = ctx;
    cllm_status rc = e->o.mirror->forward(e->o.mirror->user, b, err);
    if (rc == CLLM_OK) rc = real_forward(ctx, b, logits, err);
    if (rc != CLLM_OK && e->o.mirror->explain) e->o.mirror->explain(e->o.mirror->user, err);
    return rc;
}

static void mirror_copy_block(void *ctx, int dst, int src) {
    cllm_engine *e = ctx;
    e->o.mirror->copy_block(e->o.mirror->user, dst, src);
    real_copy_block(ctx, dst, src);
}

static void mirror_copy_state(void *ctx, int dst, int src) {
    cllm_engine *e = ctx;
    e->o.mirror->copy_state(e->o.mirror->user, dst, src);
    real_copy_state(ctx, dst, src);
}

/* every rank saved the same row's inputs in its forward, so a commit that works here works on
 * each rank (its own heads): the others are told only once it did */
static bool mirror_commit_state(void *ctx, int seq, int n, int slot) {
    cllm_engine *e = ctx;
    if (!e->o.mirror->commit_state || !real_commit_state(ctx, seq, n, slot)) return false;
    e->o.mirror->commit_state(e->o.mirror->user, seq, n, slot);
    return true;
}

static const eng_model_ops mirror_ops = {.forward = mirror_forward,
                                         .copy_block = mirror_copy_block,
                                         .copy_state = mirror_copy_state,
                                         .commit_state = mirror_commit_state};

cllm_status cllm_engine_follow_forward(cllm_engine *e, const cllm_batch *b, cllm_error *err) {
    size_t need = cllm_batch_logit_rows(b) * (size_t)cllm_model_config(e->m)->vocab_size;
    if (need > e->follow_cap) {
        cllm_free_aligned(e->follow_logits);
        e->follow_logits = cllm_alloc_aligned((need ? need : 1) * sizeof(float));
        e->follow_cap = e->follow_logits ? need : 0;
        if (!e->follow_logits)
            return cllm_err_set(err, CLLM_ENOMEM, "engine: out of memory for %zu logits", need);
    }
    return real_forward(e, b, e->follow_logits, err);
}

void cllm_engine_follow_copy_block(cllm_engine *e, int dst, int src) {
    real_copy_block(e, dst, src);
}

void cllm_engine_follow_copy_state(cllm_engine *e, int dst, int src) {
    real_copy_state(e, dst, src);
}

void cllm_engine_follow_commit_state(cllm_engine *e, int seq, int n, int slot) {
    real_commit_state(e, seq, n, slot);
}

/* ---- sizing ---- */

/* Spare live state slots for speculative verifies (at most SPEC_VERIFY_ROWS verify a step). */
static int spec_spares(const cllm_engine_opts *o, int n_gdn) {
    if (!n_gdn || o->spec.method == CLLM_SPEC_NONE || o->spec.num_speculative_tokens < 1) return 0;
    return o->max_num_seqs < 16 ? o->max_num_seqs : 16;
}

static uint64_t weights_bytes(const char *dir) {
    uint64_t sum = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        bool st = n >= 12 && !strcmp(de->d_name + n - 12, ".safetensors");
        if (!st && !(n >= 5 && !strcmp(de->d_name + n - 5, ".gguf"))) continue; /* GGUF: links */
        char p[4096];
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        struct stat sb;
        if (stat(p, &sb) == 0) sum += (uint64_t)sb.st_size;
    }
    closedir(d);
    return sum;
}

static bool file_exists(const char *dir, const char *name) {
    char p[4096];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* ---- step thread ---- */

static void *step_main(void *arg) {
    cllm_engine *e = arg;
    eng_req **in = NULL;
    uint64_t *cancels = NULL;
    int cap_in = 0, cap_c = 0;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->stop && e->n_in == 0 && e->n_cancel == 0 && !e->reset_cache &&
               !sched_has_work(e->s))
            pthread_cond_wait(&e->cv, &e->mu);
        if (e->stop) break;
        /* swap the queues out */
        eng_req **tin = e->in;
        int n_in = e->n_in, tcap = e->cap_in;
        e->in = in;
        e->cap_in = cap_in;
        e->n_in = 0;
        in = tin;
        cap_in = tcap;
        uint64_t *tc = e->cancels;
        int n_c = e->n_cancel, tcc = e->cap_cancel;
        e->cancels = cancels;
        e->cap_cancel = cap_c;
        e->n_cancel = 0;
        cancels = tc;
        cap_c = tcc;
        bool reset = e->reset_cache;
        e->reset_cache = false;
        pthread_mutex_unlock(&e->mu);

        if (reset) sched_reset_prefix_cache(e->s);

        for (int i = 0; i < n_in; i++) sched_add(e->s, in[i]);
        for (int i = 0; i < n_c; i++) sched_cancel(e->s, cancels[i]);
        sched_step(e->s);
        cllm_engine_stats st;
        sched_stats(e->s, &st);
        double tf;
        uint64_t tk;
        sched_timing(e->s, &tf, &tk);

        pthread_mutex_lock(&e->mu);
        e->t_forward = tf;
        e->tokens_forward = tk;
        st.admission_rejections = e->rejections;
        st.waiting += e->n_in;
        e->stats = st;
    }
    pthread_mutex_unlock(&e->mu);
    free(in);
    free(cancels);
    return NULL;
}

/* ---- create / free ---- */

/* Defaults for the options left 0. */
static void engine_defaults(cllm_engine_opts *op) {
    cllm_engine_opts o = *op;
    if (o.max_num_seqs <= 0) o.max_num_seqs = 256;
    if (o.max_num_batched_tokens <= 0)
        o.max_num_batched_tokens = CLLM_MAX_NUM_BATCHED_TOKENS_DEFAULT;
    if (o.block_size <= 0) o.block_size = 16;
    if (o.memory_utilization <= 0 || o.memory_utilization > 1) o.memory_utilization = 0.5;
    if (o.state_snapshot_interval <= 0) o.state_snapshot_interval = 1;
    *op = o;
}

/* The model, its tokenizer (unless skipped or absent) and generation_config.json. */
static cllm_status load_model(cllm_engine *e, cllm_error *err) {
    const cllm_engine_opts o = e->o;
    cllm_status rc;
    cllm_fwd_opts fo = o.fwd;
    fo.mtp_panels = o.spec.method == CLLM_SPEC_MTP;
    if ((rc = cllm_model_load(o.model_dir, &fo, &e->m, err)) != CLLM_OK) return rc;
    if (!o.no_prefault) {
        double t0 = cllm_time_s();
        uint64_t nb = cllm_model_prefault(e->m);
        LOG_INFO("weights: %.2f GB paged in %.2f s", (double)nb / 1e9, cllm_time_s() - t0);
    }
    const char *tok_dir = o.tokenizer_dir ? o.tokenizer_dir : o.model_dir;
    if (!o.skip_tokenizer_init && file_exists(tok_dir, "tokenizer.json") &&
        (rc = cllm_tok_load(tok_dir, &e->tok, err)) != CLLM_OK)
        return rc;
    const char *gc = o.generation_config;
    bool neutral = gc && !strcmp(gc, "vllm");
    const char *gdir = gc && !neutral && strcmp(gc, "auto") ? gc : o.model_dir;
    if ((rc = cllm_gen_config_load(gdir, &e->gen, err)) != CLLM_OK) return rc;
    if (neutral) cllm_gen_config_neutral(&e->gen);
    if (o.override_generation_config &&
        (rc = cllm_gen_config_override(&e->gen, o.override_generation_config, err)) != CLLM_OK)
        return rc;
    return CLLM_OK;
}

/* Speculative method mtp needs the checkpoint's MTP head, in one process. */
static cllm_status check_mtp(cllm_engine *e, cllm_error *err) {
    if (e->o.spec.method != CLLM_SPEC_MTP) return CLLM_OK;
    if (!cllm_model_has_mtp(e->m))
        return cllm_err_set(err, CLLM_EINVAL,
                            "engine: --speculative-config method mtp needs the checkpoint's MTP "
                            "head (mtp.* tensors, mtp_num_hidden_layers in config.json); %s has "
                            "none: use \"ngram\" or \"suffix\"",
                            e->o.model_dir);
    if (cllm_model_config(e->m)->mtp_num_hidden_layers != 1)
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "engine: --speculative-config method mtp runs one MTP layer; this "
                            "checkpoint has mtp_num_hidden_layers %d",
                            cllm_model_config(e->m)->mtp_num_hidden_layers);
    if (e->o.mirror)
        return cllm_err_set(err, CLLM_EUNSUPPORTED,
                            "engine: --speculative-config method mtp does not run under tensor "
                            "parallel yet (the MTP head is not sharded); use \"ngram\" or "
                            "\"suffix\"");
    return CLLM_OK;
}

/* How the KV blocks and state slots are sized: from the budget (--kv-cache-memory, or a share of
 * RAM minus the weights and the live state slots), capped at what max_num_seqs sequences of full
 * length could use twice over; snapshots for prefix caching on hybrid models. */
typedef struct pool_plan {
    uint64_t n_blocks, kv_budget;
    size_t block_bytes, slot_bytes;
    int max_len, n_live, n_snap;
} pool_plan;

static cllm_status plan_pools(cllm_engine *e, pool_plan *pp, cllm_error *err) {
    const cllm_engine_opts o = e->o;
    const cllm_config *cf = cllm_model_config(e->m);
    cllm_status rc;
    int bs = o.block_size;
    int n_attn = cllm_model_n_attn_layers(e->m), n_gdn = cllm_model_n_gdn_layers(e->m);
    if (o.spec.method == CLLM_SPEC_MTP) n_attn += cf->mtp_num_hidden_layers; /* its KV too */
    size_t kv_elem = o.kv_cache_bf16 ? 2 : 4;
    size_t block_bytes =
        (size_t)n_attn * 2 * (size_t)bs * (size_t)cf->n_kv_heads * (size_t)cf->head_dim * kv_elem;
    size_t conv_ch =
        (size_t)2 * cf->lin_n_k_heads * cf->lin_k_dim + (size_t)cf->lin_n_v_heads * cf->lin_v_dim;
    size_t rec_elem = o.ssm_state_bf16 ? 2 : 4;
    if (o.ssm_state_bf16 && !n_gdn)
        LOG_INFO("bf16 recurrent state (--mamba-ssm-cache-dtype): no effect, the model has no "
                 "Gated DeltaNet layers");
    size_t slot_bytes =
        n_gdn
            ? (size_t)n_gdn * (conv_ch * (size_t)(cf->lin_conv_kernel - 1) * 4 +
                               (size_t)cf->lin_n_v_heads * cf->lin_k_dim * cf->lin_v_dim * rec_elem)
            : 0;
    uint64_t kv_budget = o.kv_cache_bytes;
    if (!kv_budget) {
        uint64_t total = (uint64_t)(o.memory_utilization * (double)cllm_mem_total());
        uint64_t w = weights_bytes(o.model_dir),
                 live = (uint64_t)slot_bytes * (uint64_t)(o.max_num_seqs + spec_spares(&o, n_gdn));
        kv_budget = total > w + live ? total - w - live : 0;
    }
    int want_len = o.max_model_len > 0 ? o.max_model_len : cf->max_position_embeddings;
    uint64_t n_blocks = block_bytes ? kv_budget / block_bytes : 0;
    /* more than every sequence at full length (plus as much again for the prefix cache) is waste */
    uint64_t useful = 2ull * (uint64_t)o.max_num_seqs * (uint64_t)((want_len + bs - 1) / bs);
    if (n_blocks > useful) n_blocks = useful;
    if (!block_bytes)
        n_blocks = useful > (1u << 20) ? (1u << 20) : useful; /* no attention layers */
    if (n_blocks > (1u << 24)) n_blocks = 1u << 24;
    if (n_blocks < 1) {
        rc = cllm_err_set(err, CLLM_ENOMEM,
                          "engine: the KV budget (%llu bytes) holds no %zu-byte block (the "
                          "budget is --memory-utilization %.2f of %.1f GB RAM minus %.1f GB of "
                          "weights and the live state slots; raise --memory-utilization or set "
                          "--kv-cache-memory)",
                          (unsigned long long)kv_budget, block_bytes, o.memory_utilization,
                          (double)cllm_mem_total() / 1e9, (double)weights_bytes(o.model_dir) / 1e9);
        return rc;
    }
    int max_len = o.max_model_len > 0 ? o.max_model_len : cf->max_position_embeddings;
    if ((uint64_t)max_len > n_blocks * (uint64_t)bs) {
        if (o.max_model_len > 0) {
            rc = cllm_err_set(
                err, CLLM_EINVAL,
                "engine: --max-model-len %d needs %d KV blocks but the budget holds %llu; lower it "
                "or raise --kv-cache-memory",
                o.max_model_len, (o.max_model_len + bs - 1) / bs, (unsigned long long)n_blocks);
            return rc;
        }
        max_len = (int)(n_blocks * (uint64_t)bs);
    }
    /* a hybrid model's verify writes its state to a spare live slot (sched_spec.c): without
     * spares an engine whose every slot runs a sequence never speculates (--max-num-seqs 1:
     * never at all); admission stops at max_num_seqs, so these stay free for verifies */
    int n_live = o.max_num_seqs + spec_spares(&o, n_gdn);
    int n_snap = 0;
    if (n_gdn && o.enable_prefix_caching) {
        uint64_t sb = o.state_snapshot_bytes ? o.state_snapshot_bytes : kv_budget / 4;
        uint64_t k = sb / slot_bytes;
        /* auto: at least ~3 per running sequence (prompt end, last decode boundary, exact end) up
         * to 64, so multi-turn resumes are not evicted by their own neighbours */
        uint64_t floor_k = 3ull * (uint64_t)o.max_num_seqs + 4;
        if (floor_k > 64) floor_k = 64;
        if (!o.state_snapshot_bytes && k < floor_k) k = floor_k;
        if (k > 4096) k = 4096;
        n_snap = (int)k;
    }
    /* The state slots' pages are touched as sequences take them, so a plan beyond the RAM left
     * after the weights only fails under load (the full 35B-A3B shape on 24 GiB: 256 live slots +
     * 64 snapshots of 62.8 MiB beside 19 GB of weights). Cut it to 90% of what is available now
     * (the model is loaded), snapshots to a quarter of it at most, and say so. */
    uint64_t avail = cllm_mem_available(), kv = n_blocks * (uint64_t)block_bytes;
    uint64_t fit = slot_bytes && avail > kv ? (avail - kv) / 10 * 9 / slot_bytes : 0;
    if (avail && slot_bytes && (uint64_t)n_live + (uint64_t)n_snap > fit) {
        int snap = n_snap < (int)(fit / 4) ? n_snap : (int)(fit / 4);
        int live = (uint64_t)n_live < fit - (uint64_t)snap ? n_live : (int)(fit - (uint64_t)snap);
        if (live < 1)
            return cllm_err_set(
                err, CLLM_ENOMEM,
                "engine: one %.1f MiB state slot does not fit beside %.2f GB of KV cache in "
                "the %.2f GB of RAM available after loading the weights; lower "
                "--kv-cache-memory",
                (double)slot_bytes / 1048576.0, (double)kv / 1e9, (double)avail / 1e9);
        LOG_WARN("engine: %d live state slots + %d snapshots (%.1f MiB each) do not fit beside "
                 "%.2f GB of KV cache in the %.2f GB of RAM available after loading the weights: "
                 "using %d + %d (at most %d sequences run at once; --max-num-seqs and "
                 "--kv-cache-memory set the balance)",
                 n_live, n_snap, (double)slot_bytes / 1048576.0, (double)kv / 1e9,
                 (double)avail / 1e9, live, snap, live);
        n_live = live;
        n_snap = snap;
    }
    *pp = (pool_plan){n_blocks, kv_budget, block_bytes, slot_bytes, max_len, n_live, n_snap};
    return CLLM_OK;
}

/* KV pool, state slots (live + snapshots), the thread pool and the forward context. */
static cllm_status create_pools(cllm_engine *e, const pool_plan *pp, cllm_error *err) {
    const cllm_engine_opts o = e->o;
    cllm_status rc;
    cllm_kv_dtype kvt = o.kv_cache_bf16 ? CLLM_KV_BF16 : CLLM_KV_F32;
    if ((rc = o.spec.method == CLLM_SPEC_MTP
                  ? cllm_kv_pool_init_mtp(&e->kv, e->m, (int)pp->n_blocks, o.block_size, kvt, err)
                  : cllm_kv_pool_init(&e->kv, e->m, (int)pp->n_blocks, o.block_size, kvt, err)) !=
        CLLM_OK)
        return rc;
    if ((rc = cllm_state_pool_init(&e->st, e->m, pp->n_live + pp->n_snap,
                                   o.ssm_state_bf16 ? CLLM_KV_BF16 : CLLM_KV_F32, err)) != CLLM_OK)
        return rc;
    e->block_bytes = cllm_kv_pool_block_bytes(&e->kv);
    e->pool = cllm_pool_create(o.n_threads);
    if (!e->pool) {
        rc = cllm_err_set(err, CLLM_ENOMEM, "engine: cannot create the thread pool");
        return rc;
    }
    if ((rc = cllm_fwd_ctx_create(e->m, e->pool, &e->fctx, err)) != CLLM_OK) return rc;
    cllm_fwd_ctx_set_gdn_prefill(e->fctx, (cllm_gdn_prefill)o.gdn_prefill);
    return CLLM_OK;
}

static void add_eos(sched_cfg *c, int id) {
    for (int k = 0; k < c->n_eos; k++)
        if (c->eos_ids[k] == id) return;
    if (c->n_eos < CLLM_MAX_EOS) c->eos_ids[c->n_eos++] = id;
}

/* The scheduler's configuration; end tokens from config.json, generation_config.json and the
 * tokenizer, without duplicates. */
static void fill_sched_cfg(cllm_engine *e, const pool_plan *pp) {
    const cllm_engine_opts o = e->o;
    const cllm_config *cf = cllm_model_config(e->m);
    sched_cfg *c = &e->scfg;
    c->vocab_size = cf->vocab_size;
    c->hidden_size = cf->hidden_size;
    c->has_state = cllm_model_n_gdn_layers(e->m) > 0;
    c->n_blocks = (int)pp->n_blocks;
    c->block_size = o.block_size;
    c->n_live_slots = pp->n_live;
    c->n_snap_slots = pp->n_snap;
    c->max_num_seqs = o.max_num_seqs;
    c->max_num_batched_tokens = o.max_num_batched_tokens;
    c->max_model_len = pp->max_len;
    c->prefix_caching = o.enable_prefix_caching;
    c->snapshot_interval = o.state_snapshot_interval;
    c->tok = e->tok;
    c->spec = o.spec;
    cllm_vision_info vi;
    cllm_engine_vision(e, &vi);
    if (vi.present) {
        c->vision_merge = vi.merge_size;
        c->vision_patch_dim =
            vi.in_channels * vi.temporal_patch_size * vi.patch_size * vi.patch_size;
        c->image_token_id = vi.image_token_id;
    }
    c->vision_refused = vi.why_not;
    for (int i = 0; i < cf->n_eos && c->n_eos < CLLM_MAX_EOS; i++)
        c->eos_ids[c->n_eos++] = cf->eos_ids[i];
    for (int i = 0; i < e->gen.n_eos; i++) add_eos(c, e->gen.eos_ids[i]);
    if (e->tok && cllm_tok_eos_id(e->tok) >= 0) add_eos(c, cllm_tok_eos_id(e->tok));
}

cllm_status cllm_engine_create(const cllm_engine_opts *opts, cllm_engine **out, cllm_error *err) {
    *out = NULL;
    cllm_engine_opts o = *opts;
    if (!o.model_dir) return cllm_err_set(err, CLLM_EINVAL, "engine: no model directory");
    if (o.spec.method != CLLM_SPEC_NONE &&
        (o.spec.num_speculative_tokens < 1 || o.spec.num_speculative_tokens > CLLM_SPEC_MAX_K ||
         (o.spec.method == CLLM_SPEC_NGRAM &&
          (o.spec.prompt_lookup_min < 1 || o.spec.prompt_lookup_max < o.spec.prompt_lookup_min)) ||
         (o.spec.method == CLLM_SPEC_SUFFIX &&
          (o.spec.suffix_max_depth < 1 || o.spec.suffix_max_cached_requests < 1 ||
           !(o.spec.suffix_max_spec_factor > 0))) ||
         o.spec.synthetic_acceptance < 0 || o.spec.synthetic_acceptance > 1))
        return cllm_err_set(err, CLLM_EINVAL,
                            "engine: speculative decoding needs 1 <= num_speculative_tokens <= %d, "
                            "1 <= prompt_lookup_min <= prompt_lookup_max (ngram) and positive "
                            "suffix limits (suffix)",
                            CLLM_SPEC_MAX_K);
    engine_defaults(&o);
    cllm_engine *e = calloc(1, sizeof(*e));
    if (!e) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    e->o = o;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    atomic_init(&e->next_id, 1);
    pool_plan pp = {0};
    cllm_status rc;
    if ((rc = load_model(e, err)) || (rc = check_mtp(e, err)) || (rc = plan_pools(e, &pp, err)) ||
        (o.mirror && o.mirror->sizes &&
         (rc = o.mirror->sizes(o.mirror->user, &pp.n_blocks, &pp.max_len, &pp.n_live, &pp.n_snap,
                               err))) ||
        (rc = create_pools(e, &pp, err)))
        goto fail;
    fill_sched_cfg(e, &pp);
    if ((rc = sched_create(&e->scfg, o.mirror && o.mirror->forward ? &mirror_ops : &real_ops, e,
                           &e->s, err)) != CLLM_OK)
        goto fail;
    sched_stats(e->s, &e->stats);
    LOG_INFO(
        "KV: %llu blocks = %llu tokens (%.1f MiB, %s); state slots: %d live + %d snapshots "
        "(%.1f MiB each, recurrent state %s); "
        "max_model_len %d, prefix caching %s",
        (unsigned long long)pp.n_blocks, (unsigned long long)pp.n_blocks * (uint64_t)o.block_size,
        (double)pp.n_blocks * (double)e->block_bytes / 1048576.0, o.kv_cache_bf16 ? "bf16" : "fp32",
        pp.n_live, pp.n_snap, (double)pp.slot_bytes / 1048576.0, o.ssm_state_bf16 ? "bf16" : "fp32",
        pp.max_len, o.enable_prefix_caching ? "on" : "off");
    if (pthread_create(&e->thread, NULL, step_main, e) != 0) {
        rc = cllm_err_set(err, CLLM_ENOMEM, "engine: cannot start the step thread");
        goto fail;
    }
    e->thread_started = true;
    *out = e;
    return CLLM_OK;
fail:
    cllm_engine_free(e);
    return rc;
}

void cllm_engine_free(cllm_engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    if (e->s) {
        for (int i = 0; i < e->n_in; i++) sched_add(e->s, e->in[i]);
        e->n_in = 0;
        sched_free(e->s); /* running and queued requests end with ABORT */
    }
    for (int i = 0; i < e->n_in; i++) sched_req_free(e->in[i]);
    if (e->o.mirror && e->o.mirror->close) e->o.mirror->close(e->o.mirror->user);
    cllm_free_aligned(e->follow_logits);
    free(e->in);
    free(e->cancels);
    cllm_fwd_ctx_free(e->fctx);
    cllm_pool_free(e->pool);
    cllm_kv_pool_free(&e->kv);
    cllm_state_pool_free(&e->st);
    cllm_tok_free(e->tok);
    cllm_model_free(e->m);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* ---- API ---- */

cllm_status cllm_engine_submit(cllm_engine *e, const cllm_request *r, uint64_t *id,
                               cllm_error *err) {
    if (!r || !r->on_event) return cllm_err_set(err, CLLM_EINVAL, "request has no event callback");
    uint64_t rid = atomic_fetch_add(&e->next_id, 1);
    eng_req *q;
    cllm_status rc = sched_req_new(&e->scfg, r, rid, cllm_time_s(), &q, err);
    if (rc != CLLM_OK) {
        pthread_mutex_lock(&e->mu);
        e->rejections++;
        pthread_mutex_unlock(&e->mu);
        return rc;
    }
    pthread_mutex_lock(&e->mu);
    if (e->draining || e->stop) {
        e->rejections++;
        pthread_mutex_unlock(&e->mu);
        sched_req_free(q);
        return cllm_err_set(err, CLLM_EBUSY, "the engine is draining and accepts no new requests");
    }
    if (e->o.max_queued_requests > 0 && e->stats.waiting + e->n_in >= e->o.max_queued_requests) {
        e->rejections++;
        pthread_mutex_unlock(&e->mu);
        sched_req_free(q);
        return cllm_err_set(err, CLLM_EBUSY, "too many queued requests (%d); try again later",
                            e->o.max_queued_requests);
    }
    if (e->n_in + 1 > e->cap_in) {
        int nc = e->cap_in ? e->cap_in * 2 : 16;
        eng_req **p = realloc(e->in, (size_t)nc * sizeof(*p));
        if (!p) {
            pthread_mutex_unlock(&e->mu);
            sched_req_free(q);
            return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        }
        e->in = p;
        e->cap_in = nc;
    }
    e->in[e->n_in++] = q;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (id) *id = rid;
    return CLLM_OK;
}

void cllm_engine_cancel(cllm_engine *e, uint64_t id) {
    pthread_mutex_lock(&e->mu);
    if (e->n_cancel + 1 > e->cap_cancel) {
        int nc = e->cap_cancel ? e->cap_cancel * 2 : 16;
        uint64_t *p = realloc(e->cancels, (size_t)nc * sizeof(*p));
        if (!p) {
            pthread_mutex_unlock(&e->mu);
            return;
        }
        e->cancels = p;
        e->cap_cancel = nc;
    }
    e->cancels[e->n_cancel++] = id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void cllm_engine_drain(cllm_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->draining = true;
    pthread_mutex_unlock(&e->mu);
}

void cllm_engine_stats_get(cllm_engine *e, cllm_engine_stats *s) {
    pthread_mutex_lock(&e->mu);
    *s = e->stats;
    s->admission_rejections = e->rejections;
    s->waiting = e->stats.waiting;
    pthread_mutex_unlock(&e->mu);
}

void cllm_engine_vision(const cllm_engine *e, cllm_vision_info *vi) {
    const cllm_config *cf = cllm_model_config(e->m);
    const cllm_vision_config *v = &cf->vision;
    memset(vi, 0, sizeof(*vi));
    vi->patch_size = v->patch_size;
    vi->temporal_patch_size = v->temporal_patch_size;
    vi->merge_size = v->spatial_merge_size;
    vi->in_channels = v->in_channels;
    vi->image_token_id = cf->image_token_id;
    vi->vision_start_token_id = cf->vision_start_token_id;
    vi->vision_end_token_id = cf->vision_end_token_id;
    if (!cllm_model_has_vision(e->m)) return;
    if (e->o.mirror || cllm_model_tp_size(e->m) > 1)
        vi->why_not = "image input is not supported under tensor parallel";
    else if (cf->image_token_id < 0 || cf->image_token_id >= cf->vocab_size)
        vi->why_not = "the model's config.json has no usable image_token_id";
    else
        vi->present = true;
}

const struct cllm_tok *cllm_engine_tokenizer(const cllm_engine *e) {
    return e->tok;
}

void cllm_engine_reset_prefix_cache(cllm_engine *e) {
    pthread_mutex_lock(&e->mu);
    e->reset_cache = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void cllm_engine_forward_time(cllm_engine *e, double *seconds, uint64_t *tokens) {
    pthread_mutex_lock(&e->mu);
    *seconds = e->t_forward;
    *tokens = e->tokens_forward;
    pthread_mutex_unlock(&e->mu);
}
