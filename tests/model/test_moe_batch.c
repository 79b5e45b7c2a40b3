/* MoE batch invariance on a W4A16 (GPTQ int4) model with few experts, so that many tokens of a
 * batch share every expert: the expert-grouped path (counting sort, one gate/up and one down
 * region for all experts, work-balanced split, prefill GEMM tiles over each expert's tokens) must
 * give every token the bytes it gets alone.
 *  - 6 sequences (37..1 tokens) each alone, one call, 1 thread: the reference logits;
 *  - all of them in one prefill batch (106 tokens, ~53 per expert) on 2 and 3 threads;
 *  - prefixes in one batch, then all last tokens together (a decode-like batch of 6), 2 threads;
 * each == alone, bitwise; with the default int16 activation codes and under CLLM_ACT16=int8. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/threadpool.h"
#include "model/forward.h"
#include "model/synth.h"
#include "test.h"
#include "test_model.h"

#define NSEQ 6
#define MAXL 37
#define NTAB 8 /* blocks of 16 per sequence */
static const int seq_len[NSEQ] = {37, 29, 21, 13, 5, 1};
static int32_t toks[NSEQ][MAXL];

typedef struct piece {
    int seq, begin, end;
} piece;

typedef struct rig {
    cllm_pool *pool;
    cllm_fwd_ctx *ctx;
    cllm_kv_pool kv;
    cllm_state_pool st;
    int32_t table[NSEQ][NTAB];
    int V;
} rig;

static int rig_open(rig *r, cllm_model *m, int threads) {
    cllm_error err;
    memset(r, 0, sizeof(*r));
    r->V = cllm_model_config(m)->vocab_size;
    r->pool = threads > 1 ? cllm_pool_create(threads) : NULL;
    if (cllm_fwd_ctx_create(m, r->pool, &r->ctx, &err) ||
        cllm_kv_pool_init(&r->kv, m, NTAB * NSEQ, 16, CLLM_KV_F32, &err) ||
        cllm_state_pool_init(&r->st, m, NSEQ, CLLM_KV_F32, &err)) {
        fprintf(stderr, "rig: %s\n", err.msg);
        return -1;
    }
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < NTAB; i++) r->table[s][i] = s * NTAB + i;
    return 0;
}

static void rig_close(rig *r) {
    cllm_fwd_ctx_free(r->ctx);
    cllm_kv_pool_free(&r->kv);
    cllm_state_pool_free(&r->st);
    if (r->pool) cllm_pool_free(r->pool);
}

/* One batch; every position's logits into out[seq][pos]. */
static int run_batch(rig *r, const piece *p, int n, float *out[NSEQ]) {
    cllm_seq_batch sb[NSEQ];
    cllm_batch b = {sb, n};
    for (int i = 0; i < n; i++)
        sb[i] = (cllm_seq_batch){toks[p[i].seq] + p[i].begin,
                                 p[i].end - p[i].begin,
                                 p[i].begin,
                                 r->table[p[i].seq],
                                 NTAB,
                                 p[i].seq,
                                 CLLM_LOGITS_ALL};
    size_t rows = cllm_batch_logit_rows(&b);
    float *lg = malloc(rows * (size_t)r->V * sizeof(float));
    cllm_error err;
    if (!lg || cllm_forward(r->ctx, &b, &r->kv, &r->st, lg, &err) != CLLM_OK) {
        fprintf(stderr, "forward: %s\n", lg ? err.msg : "out of memory");
        free(lg);
        return -1;
    }
    size_t row = 0;
    for (int i = 0; i < n; i++)
        for (int q = p[i].begin; q < p[i].end; q++)
            memcpy(out[p[i].seq] + (size_t)q * r->V, lg + (row++) * r->V, r->V * sizeof(float));
    free(lg);
    return 0;
}

static int differs(float *a[NSEQ], float *b[NSEQ], int V, bool say) {
    int bad = 0;
    for (int s = 0; s < NSEQ; s++)
        for (int q = 0; q < seq_len[s]; q++)
            if (memcmp(a[s] + (size_t)q * V, b[s] + (size_t)q * V, V * sizeof(float))) {
                if (!bad && say) fprintf(stderr, "seq %d pos %d differs\n", s, q);
                bad++;
            }
    return bad;
}

int main(void) {
    const char *src = getenv("CLLM_SRC"), *tmp = getenv("CLLM_TMP");
    if (!src) src = ".";
    if (!tmp) tmp = "/tmp";
    mkdir(tmp, 0755);
    char cfg[1024], bf[1024], q4[1024];
    snprintf(cfg, sizeof(cfg), "%s/moe4.json", tmp);
    snprintf(bf, sizeof(bf), "%s/moe4-bf16", tmp);
    snprintf(q4, sizeof(q4), "%s/moe4-w4", tmp);
    /* configs/tiny-moe.json with 4 experts, top-2 and widths the int4 groups of 32 divide */
    static const char *const from[] = {"\"num_experts\": 64", "\"num_experts_per_tok\": 8",
                                       "\"moe_intermediate_size\": 16",
                                       "\"shared_expert_intermediate_size\": 16"};
    static const char *const to[] = {"\"num_experts\": 4", "\"num_experts_per_tok\": 2",
                                     "\"moe_intermediate_size\": 64",
                                     "\"shared_expert_intermediate_size\": 32"};
    CHECK(tm_write_config(src, "tiny-moe.json", cfg, from, to, 4) == 0);
    cllm_error err;
    cllm_synth_opts so = {.config_path = cfg,
                          .out_dir = bf,
                          .seed = 11,
                          .dtype = CLLM_DT_BF16,
                          .layout = CLLM_EXPERTS_FUSED};
    CHECK_MSG(cllm_synth(&so, &err) == CLLM_OK, "synth: %s", err.msg);
    CHECK_MSG(tm_quantize_w4a16(bf, q4, 32, 16, &err) == CLLM_OK, "quantize: %s", err.msg);
    /* the default int16 codes (this model), then act16 int8 (W4A8's kernels; a second load) */
    cllm_model *m;
    if (cllm_model_load(q4, NULL, &m, &err) != CLLM_OK) {
        CHECK_MSG(0, "load: %s", err.msg);
        return test_report("test_moe_batch");
    }
    int V = cllm_model_config(m)->vocab_size;
    for (int s = 0; s < NSEQ; s++)
        for (int i = 0; i < seq_len[s]; i++) toks[s][i] = (int32_t)((i * 97 + s * 31 + 5) % V);
    float *alone[NSEQ], *got[NSEQ], *a16[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        alone[s] = calloc((size_t)seq_len[s] * V, sizeof(float));
        got[s] = calloc((size_t)seq_len[s] * V, sizeof(float));
        a16[s] = calloc((size_t)seq_len[s] * V, sizeof(float));
    }
    for (int mode = 0; mode < 2; mode++) {
        if (mode) {
            cllm_model_free(m);
            const cllm_fwd_opts int8 = {.act16 = CLLM_ACT16_INT8};
            if (cllm_model_load(q4, &int8, &m, &err) != CLLM_OK) {
                CHECK_MSG(0, "load (act16 int8): %s", err.msg);
                m = NULL;
                break;
            }
        }
        const char *mname = mode ? "int8" : "int16";
        rig r;
        CHECK(rig_open(&r, m, 1) == 0);
        for (int s = 0; s < NSEQ; s++) {
            piece p = {s, 0, seq_len[s]};
            CHECK(run_batch(&r, &p, 1, alone) == 0);
        }
        rig_close(&r);
        piece all[NSEQ], pre[NSEQ], last[NSEQ];
        int npre = 0;
        for (int s = 0; s < NSEQ; s++) {
            all[s] = (piece){s, 0, seq_len[s]};
            last[s] = (piece){s, seq_len[s] - 1, seq_len[s]};
            if (seq_len[s] > 1) pre[npre++] = (piece){s, 0, seq_len[s] - 1};
        }
        for (int th = 2; th <= 3; th++) {
            CHECK(rig_open(&r, m, th) == 0);
            CHECK(run_batch(&r, all, NSEQ, got) == 0);
            CHECK_MSG(differs(alone, got, V, true) == 0,
                      "%s: one prefill batch on %d threads != alone", mname, th);
            rig_close(&r);
        }
        CHECK(rig_open(&r, m, 2) == 0);
        for (int s = 0; s < NSEQ; s++) memset(got[s], 0, (size_t)seq_len[s] * V * sizeof(float));
        CHECK(run_batch(&r, pre, npre, got) == 0);
        CHECK(run_batch(&r, last, NSEQ, got) == 0);
        CHECK_MSG(differs(alone, got, V, true) == 0, "%s: prefix batch + decode batch != alone",
                  mname);
        rig_close(&r);
        if (!mode)
            for (int s = 0; s < NSEQ; s++)
                memcpy(a16[s], alone[s], (size_t)seq_len[s] * V * sizeof(float));
        else /* the knob took effect: some logit moved */
            CHECK_MSG(differs(a16, alone, V, false) > 0, "act16 int8 gave the int16 logits");
    }
    for (int s = 0; s < NSEQ; s++) free(alone[s]), free(got[s]), free(a16[s]);
    cllm_model_free(m);
    return test_report("test_moe_batch");
}
