/* Forward-pass invariance and bad-input tests on synthetic tiny models (no reference needed;
 * tests/forward_golden.sh compares with tools/ref):
 *  - prefill in pieces (1, 7, 64-token calls) == one call, bitwise;
 *  - the same sequences inside mixed prefill + decode batches, 2 and 3 threads, another KV block
 *    size and a shared pool with interleaved blocks == each sequence alone on 1 thread, bitwise;
 *  - bad batches are rejected with a status, nothing crashes. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/forward.h"
#include "model/synth.h"
#include "test.h"

#define NSEQ 3
static const int seq_len[NSEQ] = {73, 7, 1}; /* A crosses 64 and several blocks */
static int32_t toks[NSEQ][73];

typedef struct rig {
    cllm_model *m;
    cllm_pool *pool;
    cllm_fwd_ctx *ctx;
    cllm_kv_pool kv;
    cllm_state_pool st;
    int32_t table[NSEQ][80];
    int V;
} rig;

/* the recurrent state's element type of every rig (one_model runs its checks in both) */
static cllm_kv_dtype g_ssm = CLLM_KV_F32;

static int rig_open(rig *r, cllm_model *m, int threads, int block, int interleave) {
    cllm_error err;
    memset(r, 0, sizeof(*r));
    r->m = m;
    r->V = cllm_model_config(m)->vocab_size;
    r->pool = threads > 1 ? cllm_pool_create(threads) : NULL;
    int per = (80 + block - 1) / block;
    if (cllm_fwd_ctx_create(m, r->pool, &r->ctx, &err) ||
        cllm_kv_pool_init(&r->kv, m, per * NSEQ, block, CLLM_KV_F32, &err) ||
        cllm_state_pool_init(&r->st, m, NSEQ + 2, g_ssm, &err)) {
        fprintf(stderr, "rig: %s\n", err.msg);
        return -1;
    }
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < per; i++)
            r->table[s][i] = interleave ? i * NSEQ + (NSEQ - 1 - s) : s * per + i;
    return 0;
}

static void rig_close(rig *r) {
    cllm_fwd_ctx_free(r->ctx);
    cllm_kv_pool_free(&r->kv);
    cllm_state_pool_free(&r->st);
    if (r->pool) cllm_pool_free(r->pool);
}

typedef struct piece {
    int seq, begin, end;
    cllm_logits_mode mode;
} piece;

/* Runs one batch of pieces; copies returned rows into out[seq][pos]. */
static int run_batch(rig *r, const piece *p, int n, float *out[NSEQ]) {
    cllm_seq_batch sb[NSEQ];
    cllm_batch b = {sb, n};
    for (int i = 0; i < n; i++)
        sb[i] = (cllm_seq_batch){toks[p[i].seq] + p[i].begin,
                                 p[i].end - p[i].begin,
                                 p[i].begin,
                                 r->table[p[i].seq],
                                 80,
                                 p[i].seq + 1,
                                 p[i].mode};
    size_t rows = cllm_batch_logit_rows(&b);
    float *lg = malloc((rows ? rows : 1) * (size_t)r->V * sizeof(float));
    cllm_error err;
    if (cllm_forward(r->ctx, &b, &r->kv, &r->st, lg, &err) != CLLM_OK) {
        fprintf(stderr, "forward: %s\n", err.msg);
        free(lg);
        return -1;
    }
    size_t row = 0;
    for (int i = 0; i < n; i++) {
        if (p[i].mode == CLLM_LOGITS_ALL)
            for (int q = p[i].begin; q < p[i].end; q++)
                memcpy(out[p[i].seq] + (size_t)q * r->V, lg + (row++) * r->V, r->V * sizeof(float));
        else if (p[i].mode == CLLM_LOGITS_LAST)
            memcpy(out[p[i].seq] + (size_t)(p[i].end - 1) * r->V, lg + (row++) * r->V,
                   r->V * sizeof(float));
    }
    free(lg);
    return 0;
}

static int same_rows(float *a[NSEQ], float *b[NSEQ], int V, const char *what) {
    int bad = 0;
    for (int s = 0; s < NSEQ; s++)
        for (int q = 0; q < seq_len[s]; q++)
            if (memcmp(a[s] + (size_t)q * V, b[s] + (size_t)q * V, V * sizeof(float))) {
                if (!bad) fprintf(stderr, "%s: seq %d pos %d differs\n", what, s, q);
                bad++;
            }
    return bad;
}

/* max |got - want| over n values (NaN if got holds one, which fails any bound), and *mx the
 * largest |want| */
static double max_err(const float *got, const float *want, size_t n, double *mx) {
    double e = 0;
    *mx = 0;
    for (size_t i = 0; i < n; i++) {
        /* not fmax: it drops a NaN, so a NaN logit would pass (and GCC 12.2 -O3 on
         * aarch64 dies vectorizing fmax(e, fabs(float)) loops) */
        double d = fabs(got[i] - want[i]), a = fabs(want[i]);
        if (!(d <= e)) e = d;
        if (a > *mx) *mx = a;
    }
    return e;
}

static void alloc_rows(float *o[NSEQ], int V) {
    for (int s = 0; s < NSEQ; s++) o[s] = calloc((size_t)seq_len[s] * V, sizeof(float));
}
static void free_rows(float *o[NSEQ]) {
    for (int s = 0; s < NSEQ; s++) free(o[s]);
}

static void bad_input(cllm_model *m) {
    rig r;
    if (rig_open(&r, m, 1, 16, 0)) return;
    const cllm_config *cf = cllm_model_config(m);
    float *lg = malloc((size_t)80 * r.V * sizeof(float));
    cllm_error err;
    int32_t t2[2] = {1, 2}, bigtok[1] = {cf->vocab_size}, neg[1] = {-1};
    cllm_seq_batch sb[2] = {{t2, 2, 0, r.table[0], 80, 0, CLLM_LOGITS_LAST},
                            {t2, 2, 0, r.table[1], 80, 1, CLLM_LOGITS_LAST}};
    cllm_batch b = {sb, 1};
    CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg, &err) == CLLM_OK);
    sb[0].n_tokens = 0;
    CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg, &err) == CLLM_EINVAL);
    sb[0].n_tokens = 1, sb[0].tokens = bigtok;
    CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg, &err) == CLLM_EINVAL);
    sb[0].tokens = neg;
    CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg, &err) == CLLM_EINVAL);
    sb[0].tokens = t2, sb[0].start_pos = cf->max_position_embeddings - 1, sb[0].n_tokens = 2;
    CHECK_MSG(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg, &err) == CLLM_ERANGE, "%s", err.msg);
    sb[0].start_pos =
        78; /* needs table entries beyond what the pool has blocks for? table ok, 80 pos */
    sb[0].n_table = 2;
    CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg, &err) == CLLM_EINVAL);
    sb[0].start_pos = 0, sb[0].n_table = 80;
    b.n_seqs = 2;
    sb[1].state_slot = 0; /* same slot twice */
    cllm_status want = cllm_model_n_gdn_layers(m) > 0 ? CLLM_EINVAL : CLLM_OK;
    CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg, &err) == want);
    sb[1].state_slot = 99;
    CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg, &err) == want);
    b.n_seqs = 0;
    CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg, &err) == CLLM_EINVAL);
    free(lg);
    rig_close(&r);
}

/* A forked row (cllm_seq_batch.state_fork): bitwise what copying the source slot and running on
 * the copy gives (logits and the state written), and the source slot is left as it was. Three
 * tokens after a 12-token prompt, 2 threads (the conv runs per channel block there). */
static void fork_state(cllm_model *m, const char *cfg) {
    rig r;
    if (rig_open(&r, m, 2, 16, 0)) return;
    const cllm_state_pool *st = &r.st;
    /* rec: bytes of a slot's recurrent state (float32 or bf16), R the pool's */
    size_t conv = (size_t)st->n_layers * st->conv_ch * st->conv_k1,
           rec = (size_t)st->n_layers * st->n_v_heads * st->dk * st->dv *
                 (st->rec16 ? sizeof(uint16_t) : sizeof(float));
    char *R = st->rec16 ? (char *)st->rec16 : (char *)st->rec;
    float *lg = malloc((size_t)3 * 2 * r.V * sizeof(float));
    char *keep = NULL;
    cllm_error err;
    cllm_seq_batch sb = {toks[0], 12, 0, r.table[0], 80, 0, CLLM_LOGITS_LAST};
    cllm_batch b = {&sb, 1};
    CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg, &err) == CLLM_OK);
    if (rec > 0) {
        keep = malloc(conv * sizeof(float) + rec);
        memcpy(keep, st->conv, conv * sizeof(float));
        memcpy(keep + conv * sizeof(float), R, rec);
    }
    /* the copy way: slot 0 -> NSEQ, then three tokens on NSEQ */
    cllm_state_slot_copy(&r.st, NSEQ, 0);
    sb = (cllm_seq_batch){toks[0] + 12, 3, 12, r.table[0], 80, NSEQ, CLLM_LOGITS_LAST};
    sb.logits_n = 3;
    CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg, &err) == CLLM_OK);
    /* the fork: slot 0 read, NSEQ + 1 written (its old contents garbage) */
    if (rec > 0) {
        for (size_t i = 0; i < conv; i++) st->conv[(NSEQ + 1) * conv + i] = 1e30f;
        memset(R + (NSEQ + 1) * rec, 0xc7, rec); /* -1e30f-ish garbage in either type */
    }
    sb.state_slot = NSEQ + 1, sb.state_fork = true, sb.state_src = 0;
    float *lg2 = lg + (size_t)3 * r.V;
    CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg2, &err) == CLLM_OK);
    CHECK_MSG(!memcmp(lg, lg2, (size_t)3 * r.V * sizeof(float)), "%s: fork logits != copy's", cfg);
    if (rec > 0) {
        CHECK_MSG(
            !memcmp(st->conv + NSEQ * conv, st->conv + (NSEQ + 1) * conv, conv * sizeof(float)) &&
                !memcmp(R + NSEQ * rec, R + (NSEQ + 1) * rec, rec),
            "%s: fork state != copy's", cfg);
        CHECK_MSG(!memcmp(keep, st->conv, conv * sizeof(float)) &&
                      !memcmp(keep + conv * sizeof(float), R, rec),
                  "%s: the fork's source slot changed", cfg);
        /* commit: a forked 3-token row saved with state_save, then slot 0's state moved past
         * its first n tokens == the state of a call of those n tokens alone */
        size_t cb = conv * sizeof(float), rb = rec;
        for (int n = 1; n <= 3; n++) {
            cllm_state_slot_copy(&r.st, 2, 0);
            cllm_seq_batch one = {toks[0] + 12, n, 12, r.table[0], 80, 2, CLLM_LOGITS_LAST};
            cllm_batch b1 = {&one, 1};
            CHECK(cllm_forward(r.ctx, &b1, &r.kv, &r.st, lg2, &err) == CLLM_OK);
            sb.state_src = 0, sb.state_save = true;
            CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg2, &err) == CLLM_OK);
            cllm_state_slot_copy(&r.st, 1, 0);
            CHECK_MSG(cllm_forward_state_commit(r.ctx, &r.st, 0, n, 1, &err) == CLLM_OK, "%s",
                      err.msg);
            CHECK_MSG(!memcmp(st->conv + 1 * conv, st->conv + 2 * conv, cb) &&
                          !memcmp(R + 1 * rec, R + 2 * rec, rb),
                      "%s: state committed past %d of 3 tokens != a call of %d", cfg, n, n);
        }
        CHECK(cllm_forward_state_commit(r.ctx, &r.st, 0, 4, 1, &err) == CLLM_EINVAL);
        CHECK(cllm_forward_state_commit(r.ctx, &r.st, 1, 1, 1, &err) == CLLM_EINVAL);
        sb.state_save = false;
        CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg2, &err) == CLLM_OK);
        CHECK_MSG(cllm_forward_state_commit(r.ctx, &r.st, 0, 1, 1, &err) == CLLM_EINVAL,
                  "%s: a commit without saved inputs was accepted", cfg);
        /* refused: a source out of range, or one another row of the batch writes */
        sb.state_src = 99;
        CHECK(cllm_forward(r.ctx, &b, &r.kv, &r.st, lg2, &err) == CLLM_EINVAL);
        cllm_seq_batch two[2] = {sb, {toks[1], 2, 0, r.table[1], 80, 0, CLLM_LOGITS_LAST}};
        two[0].state_src = 0;
        cllm_batch b2 = {two, 2};
        CHECK_MSG(cllm_forward(r.ctx, &b2, &r.kv, &r.st, lg2, &err) == CLLM_EINVAL,
                  "%s: a fork from a slot the batch writes was accepted", cfg);
    }
    free(keep);
    free(lg);
    rig_close(&r);
}

/* Steps 1-3 of one_model with g_ssm's state: each sequence alone in one call (into alone), then
 * the same positions in pieces and in mixed batches at 2 and 3 threads, bitwise equal to it. */
static void invariance(cllm_model *m, const char *cfg, float *alone[NSEQ], float *got[NSEQ],
                       int V) {
    const char *sd = g_ssm == CLLM_KV_BF16 ? "bf16 state" : "f32 state";
    rig r;
    /* 1. each sequence alone, one call, 1 thread, block 16 */
    CHECK(rig_open(&r, m, 1, 16, 0) == 0);
    for (int s = 0; s < NSEQ; s++) {
        piece p = {s, 0, seq_len[s], CLLM_LOGITS_ALL};
        CHECK(run_batch(&r, &p, 1, alone) == 0);
    }
    rig_close(&r);
    /* 2. pieces of 1, 7, 64, ... (alone, 1 thread) */
    CHECK(rig_open(&r, m, 1, 16, 0) == 0);
    int sizes[] = {1, 7, 64, 1};
    for (int s = 0; s < NSEQ; s++)
        for (int b = 0, k = 0; b < seq_len[s]; k++) {
            int e = b + sizes[k % 4] < seq_len[s] ? b + sizes[k % 4] : seq_len[s];
            piece p = {s, b, e, CLLM_LOGITS_ALL};
            CHECK(run_batch(&r, &p, 1, got) == 0);
            b = e;
        }
    CHECK_MSG(same_rows(alone, got, V, "pieces") == 0, "%s, %s: prefill in pieces != one call", cfg,
              sd);
    rig_close(&r);
    /* 3. mixed batches, shared pool with interleaved blocks of 5, 2 and 3 threads */
    for (int th = 2; th <= 3; th++) {
        CHECK(rig_open(&r, m, th, th == 2 ? 5 : 16, 1) == 0);
        for (int s = 0; s < NSEQ; s++) memset(got[s], 0, (size_t)seq_len[s] * V * sizeof(float));
        piece s1[] = {{0, 0, 40, CLLM_LOGITS_ALL}, {1, 0, 5, CLLM_LOGITS_ALL}};
        piece s2[] = {
            {2, 0, 1, CLLM_LOGITS_ALL}, {0, 40, 70, CLLM_LOGITS_ALL}, {1, 5, 6, CLLM_LOGITS_LAST}};
        piece s3[] = {{1, 6, 7, CLLM_LOGITS_LAST}, {0, 70, 71, CLLM_LOGITS_LAST}};
        piece s4[] = {{0, 71, 73, CLLM_LOGITS_ALL}};
        CHECK(run_batch(&r, s1, 2, got) == 0);
        CHECK(run_batch(&r, s2, 3, got) == 0);
        CHECK(run_batch(&r, s3, 2, got) == 0);
        CHECK(run_batch(&r, s4, 1, got) == 0);
        CHECK_MSG(same_rows(alone, got, V, "mixed") == 0,
                  "%s, %s: mixed batch, %d threads != alone", cfg, sd, th);
        rig_close(&r);
    }
}

static void one_model(const char *src, const char *cfg, cllm_dtype dt, const char *tmp) {
    char cpath[1024], dir[1024];
    snprintf(cpath, sizeof(cpath), "%s/configs/%s.json", src, cfg);
    snprintf(dir, sizeof(dir), "%s/fwd-%s-%d", tmp, cfg, (int)dt);
    cllm_error err;
    cllm_synth_opts so = {.config_path = cpath,
                          .out_dir = dir,
                          .seed = 7,
                          .dtype = dt,
                          .layout = CLLM_EXPERTS_FUSED,
                          .include_mtp = true};
    if (cllm_synth(&so, &err) != CLLM_OK) {
        CHECK_MSG(0, "synth %s: %s", cfg, err.msg);
        return;
    }
    cllm_model *m;
    if (cllm_model_load(dir, NULL, &m, &err) != CLLM_OK) {
        CHECK_MSG(0, "load %s: %s", cfg, err.msg);
        return;
    }
    int V = cllm_model_config(m)->vocab_size;
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < seq_len[s]; i++) toks[s][i] = (int32_t)((i * 131 + s * 17 + 3) % V);
    float *alone[NSEQ], *got[NSEQ], *alone16[NSEQ];
    alloc_rows(alone, V);
    alloc_rows(alone16, V);
    alloc_rows(got, V);
    for (int pass = 1; pass >= 0; pass--) { /* bf16 state first: alone keeps the f32 rows */
        g_ssm = pass ? CLLM_KV_BF16 : CLLM_KV_F32;
        invariance(m, cfg, pass ? alone16 : alone, got, V);
        fork_state(m, cfg);
    }
    /* the bf16 state: close to the f32 state's logits (not bitwise) */
    for (int s = 0; s < NSEQ; s++) {
        double mx, e = max_err(alone16[s], alone[s], (size_t)seq_len[s] * V, &mx);
        CHECK_MSG(e < 0.05 * mx, "%s: bf16 state error %g (max %g), sequence %d", cfg, e, mx, s);
    }
    /* 4. bf16 KV: close to f32 KV (not bitwise) */
    {
        cllm_fwd_ctx *ctx;
        cllm_kv_pool kv;
        cllm_state_pool st;
        int32_t table[16];
        for (int i = 0; i < 16; i++) table[i] = i;
        float *lg = malloc((size_t)73 * V * sizeof(float));
        CHECK(cllm_fwd_ctx_create(m, NULL, &ctx, &err) == CLLM_OK);
        CHECK(cllm_kv_pool_init(&kv, m, 16, 8, CLLM_KV_BF16, &err) == CLLM_OK);
        CHECK(cllm_state_pool_init(&st, m, 1, CLLM_KV_F32, &err) == CLLM_OK);
        cllm_seq_batch sb = {toks[0], 73, 0, table, 16, 0, CLLM_LOGITS_ALL};
        cllm_batch b = {&sb, 1};
        CHECK(cllm_forward(ctx, &b, &kv, &st, lg, &err) == CLLM_OK);
        double mx, e = max_err(lg, alone[0], (size_t)73 * V, &mx);
        CHECK_MSG(e < 0.05 * mx, "%s: bf16 KV error %g (max %g)", cfg, e, mx);
        free(lg);
        cllm_fwd_ctx_free(ctx);
        cllm_kv_pool_free(&kv);
        cllm_state_pool_free(&st);
    }
    bad_input(m);
    free_rows(alone);
    free_rows(alone16);
    free_rows(got);
    cllm_model_free(m);
}

int main(void) {
    const char *src = getenv("CLLM_SRC"), *tmp = getenv("CLLM_TMP");
    if (!src) src = ".";
    if (!tmp) tmp = "/tmp";
    mkdir(tmp, 0755);
    one_model(src, "tiny", CLLM_DT_BF16, tmp);
    one_model(src, "tiny-gqa", CLLM_DT_F32, tmp);
    one_model(src, "tiny-moe", CLLM_DT_BF16, tmp);
    one_model(src, "tiny-qwen3", CLLM_DT_F16, tmp);
    one_model(src, "tiny-qwen3-moe", CLLM_DT_BF16, tmp);
    one_model(src, "tiny-qwen2", CLLM_DT_BF16, tmp);
    return test_report("test_forward");
}
