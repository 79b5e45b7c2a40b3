/* The MTP head's forward (model/fwd_mtp.c, docs/model.md §2.7) and cllm_seq_batch.hidden_out,
 * on synthetic models from configs/tiny-mtp.json (hybrid GDN + gated attention + MoE with a
 * shared expert, one MTP layer):
 *  - against the float64 reference (tools/ref/ref_forward.py --mtp-tokens): the target's
 *    logits and final-normed hidden states (hidden_out), and the MTP logits and normed output
 *    of every row of two sequences, run as a one-row call, a chunk crossing a KV block
 *    boundary batched with the other sequence, a LAST (logits_n 3) + NONE batch, and two
 *    chained draft rows fed the MTP's own output; f32 weights on 1 thread with 16-position
 *    blocks, bf16 per-expert weights on 2 threads with 5-position blocks, and a variant with one
 *    KV head and the lm_head tied to the embedding; max |c - ref| <=
 *    2e-5 * max(1, max |ref|), the golden tests' bound;
 *  - the same rows in one call == those calls, bitwise (logits and hidden_out), also with
 *    hidden_out = hidden (in place);
 *  - the same against models/tiny (the shipped BF16 model and its trained MTP head);
 *  - the main forward's logits are bitwise the same with hidden_out set or NULL and on an
 *    MTP-extended pool or a plain one; NONE calls still fill hidden_out;
 *  - the screened int8 lm_head (a W4A16 copy, CLLM_LM_SCREEN=8): MTP rows with logits_topk 5
 *    have the exact row's 5 best ids and values, bitwise, and the screen did drop entries;
 *  - errors: no MTP head, a pool without the MTP layer, NULL hidden, a bad token, a short block
 *    table, logits_n past the rows (the pool untouched); two MTP layers (EUNSUPPORTED). Without
 * /usr/bin/python3 + numpy the reference part is skipped (the rest still runs). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "model/fwd_int.h"
#include "test.h"
#include "test_model.h"

#define NA  40 /* sequence A: crosses 16-position blocks twice */
#define NB  21
#define ND  2 /* chained draft rows after A's last position */
#define RA  (NA + ND)
#define TAB 64

static int32_t ta[NA], tb[NB], ma[RA], mb[NB]; /* target tokens; MTP row tokens */
static int H, V;
static int have_ref;
static cllm_fwd_opts g_fwd; /* how the model runs (the screened case sets lm_screen) */

static int sh(const char *cmd) {
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "command failed (%d): %s", rc, cmd);
    return rc;
}

static float *readf(const char *path, size_t want) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *b = malloc(want * sizeof(float) + 4);
    size_t n = fread(b, sizeof(float), want + 1, f);
    fclose(f);
    if (n != want) {
        fprintf(stderr, "%s: %zu floats, expected %zu\n", path, n, want);
        free(b);
        return NULL;
    }
    return b;
}

static void ids(char *out, size_t cap, const int32_t *t, int n) {
    size_t o = 0;
    for (int i = 0; i < n && o + 12 < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%d", i ? "," : "", t[i]);
}

/* max |c - r| over rows whose mask is set, against 2e-5 * max(1, max |r|) */
static void cmp_ref(const char *what, const float *c, const float *r, const unsigned char *mask,
                    int rows, int width) {
    double d = 0.0, mx = 0.0;
    int n = 0;
    for (int i = 0; i < rows; i++) {
        if (mask && !mask[i]) continue;
        n++;
        for (int k = 0; k < width; k++) {
            double e = fabs((double)c[(size_t)i * width + k] - r[(size_t)i * width + k]);
            double a = fabs((double)r[(size_t)i * width + k]);
            if (!(e <= d)) d = e; /* NaN counts as a failure */
            if (a > mx) mx = a;
        }
    }
    double tol = 2e-5 * (mx > 1.0 ? mx : 1.0);
    fprintf(stderr, "%s: %d rows, max abs err %.3g (max |ref| %.3g, tol %.3g)\n", what, n, d, mx,
            tol);
    CHECK_MSG(n > 0 && d <= tol, "%s: max abs err %.3g > tol %.3g", what, d, tol);
}

typedef struct rig {
    cllm_model *m;
    cllm_pool *pool;
    cllm_fwd_ctx *c;
    cllm_kv_pool kv, plain;
    cllm_state_pool st;
    int32_t tab[2][TAB];
} rig;

static int rig_open(rig *r, const char *dir, int threads, int block) {
    cllm_error err = {0};
    memset(r, 0, sizeof(*r));
    if (cllm_model_load(dir, &g_fwd, &r->m, &err) != CLLM_OK) {
        CHECK_MSG(0, "load %s: %s", dir, err.msg);
        return -1;
    }
    H = cllm_model_config(r->m)->hidden_size;
    V = cllm_model_config(r->m)->vocab_size;
    r->pool = threads > 1 ? cllm_pool_create(threads) : NULL;
    int per = (RA + block - 1) / block;
    if (cllm_fwd_ctx_create(r->m, r->pool, &r->c, &err) ||
        cllm_kv_pool_init_mtp(&r->kv, r->m, 2 * per, block, CLLM_KV_F32, &err) ||
        cllm_kv_pool_init(&r->plain, r->m, 2 * per, block, CLLM_KV_F32, &err) ||
        cllm_state_pool_init(&r->st, r->m, 4, CLLM_KV_F32, &err)) {
        CHECK_MSG(0, "rig %s: %s", dir, err.msg);
        return -1;
    }
    for (int i = 0; i < per; i++) r->tab[0][i] = 2 * i + 1, r->tab[1][i] = 2 * i; /* interleaved */
    return 0;
}

static void rig_close(rig *r) {
    cllm_fwd_ctx_free(r->c);
    cllm_kv_pool_free(&r->kv);
    cllm_kv_pool_free(&r->plain);
    cllm_state_pool_free(&r->st);
    if (r->pool) cllm_pool_free(r->pool);
    cllm_model_free(r->m);
}

/* Target forward of one whole sequence in one call: logits ALL, hidden_out when hid. */
static int target(rig *r, cllm_kv_pool *kv, int s, int slot, const int32_t *t, int n, float *lg,
                  float *hid) {
    cllm_seq_batch q = {t, n, 0, r->tab[s], TAB, slot, CLLM_LOGITS_ALL};
    q.hidden_out = hid;
    cllm_batch b = {&q, 1};
    cllm_error err = {0};
    cllm_status st = cllm_forward(r->c, &b, kv, &r->st, lg, &err);
    CHECK_MSG(st == CLLM_OK, "forward: %s", err.msg);
    return st == CLLM_OK ? 0 : -1;
}

/* One MTP sequence piece: rows [p0, p1) of sequence s reading hid rows [p0, p1). */
typedef struct piece {
    int s, p0, p1;
    cllm_logits_mode mode;
    int logits_n;
} piece;

/* Runs the pieces in one call; rows' logits land in lg[s][row] (got[s][row] = 1), their
 * MTP output in mh[s][row]. */
static int mtp_call(rig *r, const piece *p, int n, const float *hin[2], const int32_t *tok[2],
                    float *lg[2], unsigned char *got[2], float *mh[2]) {
    cllm_mtp_seq q[2];
    for (int i = 0; i < n; i++)
        q[i] = (cllm_mtp_seq){.hidden = hin[p[i].s] + (size_t)p[i].p0 * H,
                              .tokens = tok[p[i].s] + p[i].p0,
                              .n_tokens = p[i].p1 - p[i].p0,
                              .start_pos = p[i].p0,
                              .block_table = r->tab[p[i].s],
                              .n_table = TAB,
                              .logits = p[i].mode,
                              .logits_n = p[i].logits_n,
                              .hidden_out = mh[p[i].s] + (size_t)p[i].p0 * H};
    size_t rows = cllm_mtp_logit_rows(q, n);
    float *out = malloc((rows + 1) * (size_t)V * sizeof(float));
    cllm_error err = {0};
    cllm_status st = cllm_forward_mtp(r->c, q, n, &r->kv, out, &err);
    CHECK_MSG(st == CLLM_OK, "forward_mtp: %s", err.msg);
    size_t k = 0;
    for (int i = 0; st == CLLM_OK && i < n; i++) {
        int a = p[i].mode == CLLM_LOGITS_ALL    ? p[i].p0
                : p[i].mode == CLLM_LOGITS_LAST ? p[i].p1 - (p[i].logits_n > 1 ? p[i].logits_n : 1)
                                                : p[i].p1;
        for (int row = a; row < p[i].p1; row++, k++) {
            memcpy(lg[p[i].s] + (size_t)row * V, out + k * V, (size_t)V * sizeof(float));
            got[p[i].s][row] = 1;
        }
    }
    CHECK(st != CLLM_OK || k == rows);
    free(out);
    return st == CLLM_OK ? 0 : -1;
}

/* cfg: a config file, or NULL for configs/tiny-mtp.json; dtype NULL: models/tiny itself */
static void test_model(const char *tmp, const char *name, const char *cfg, const char *dtype,
                       const char *layout, int threads, int block) {
    char dir[512], cmd[8192], a[1024], b[1024], def[1024], out_dir[512];
    snprintf(dir, sizeof dir, "%s/test_mtp/%s", tmp, name);
    snprintf(out_dir, sizeof out_dir, "%s", dir);
    if (!dtype) { /* the shipped models/tiny and its trained MTP head: read in place */
        snprintf(dir, sizeof dir, "%s/models/tiny", test_src());
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", out_dir, out_dir);
    } else {
        snprintf(def, sizeof def, "%s/configs/tiny-mtp.json", test_src());
        snprintf(cmd, sizeof cmd,
                 "rm -rf '%s' && '%s' synth --config '%s' '%s' --seed 5 --dtype %s --experts %s "
                 "-q 2>/dev/null",
                 dir, getenv("CLLM_BIN"), cfg ? cfg : def, dir, dtype, layout);
    }
    if (sh(cmd)) return;
    rig r;
    if (rig_open(&r, dir, threads, block)) return;
    CHECK(cllm_model_has_mtp(r.m));
    CHECK(r.kv.n_layers == cllm_model_n_attn_layers(r.m) + 1);
    CHECK(cllm_kv_pool_block_bytes(&r.kv) > cllm_kv_pool_block_bytes(&r.plain));
    size_t nA = (size_t)NA, nB = (size_t)NB, rA = (size_t)RA;
    float *lgA = malloc(nA * V * 4), *hA = malloc((rA + 1) * H * 4), *lgB = malloc(nB * V * 4),
          *hB = malloc(nB * H * 4), *lg0 = malloc(nA * V * 4), *hA2 = malloc(nA * H * 4);
    float *mlA = calloc(rA * V, 4), *mlB = calloc(nB * V, 4), *mhA = calloc(rA * H, 4),
          *mhB = calloc(nB * H, 4);
    unsigned char gA[RA] = {0}, gB[NB] = {0};
    /* target: A on the MTP pool with hidden_out, B likewise; A again on the plain pool without */
    if (target(&r, &r.kv, 0, 0, ta, NA, lgA, hA) || target(&r, &r.kv, 1, 1, tb, NB, lgB, hB) ||
        target(&r, &r.plain, 0, 2, ta, NA, lg0, NULL))
        goto out;
    CHECK_MSG(!memcmp(lg0, lgA, nA * V * 4), "%s: target logits differ with hidden_out / MTP pool",
              name);
    { /* NONE with hidden_out: the same hidden bits, no logits */
        cllm_seq_batch q = {ta, NA, 0, r.tab[0], TAB, 3, CLLM_LOGITS_NONE};
        q.hidden_out = hA2;
        cllm_batch bb = {&q, 1};
        cllm_error err = {0};
        CHECK(cllm_forward(r.c, &bb, &r.plain, &r.st, NULL, &err) == CLLM_OK);
        CHECK_MSG(!memcmp(hA2, hA, nA * H * 4), "%s: hidden_out differs in NONE mode", name);
    }
    /* MTP rows; A's chained rows read the MTP's own output of the row before */
    const float *hin[2] = {hA, hB};
    const int32_t *tok[2] = {ma, mb};
    float *lg[2] = {mlA, mlB}, *mh[2] = {mhA, mhB};
    unsigned char *got[2] = {gA, gB};
    piece c1[] = {{0, 0, 1, CLLM_LOGITS_ALL, 0}};
    piece c2[] = {{0, 1, 25, CLLM_LOGITS_ALL, 0}, {1, 0, 10, CLLM_LOGITS_ALL, 0}};
    piece c3[] = {{0, 25, NA, CLLM_LOGITS_LAST, 3}, {1, 10, NB, CLLM_LOGITS_NONE, 0}};
    piece c4[] = {{0, NA, NA + 1, CLLM_LOGITS_ALL, 0}};
    piece c5[] = {{0, NA + 1, NA + 2, CLLM_LOGITS_LAST, 0}};
    if (mtp_call(&r, c1, 1, hin, tok, lg, got, mh) || mtp_call(&r, c2, 2, hin, tok, lg, got, mh) ||
        mtp_call(&r, c3, 2, hin, tok, lg, got, mh))
        goto out;
    memcpy(hA + nA * H, mhA + (nA - 1) * H, (size_t)H * 4); /* chained: row NA's hidden */
    if (mtp_call(&r, c4, 1, hin, tok, lg, got, mh)) goto out;
    float *hA3 = malloc(rA * H * 4); /* rows 0..RA-1's hidden inputs, for the one-call run */
    memcpy(hA3, hA, (nA + 1) * H * 4);
    memcpy(hA3 + (nA + 1) * H, mhA + nA * H, (size_t)H * 4);
    hin[0] = hA3;
    if (mtp_call(&r, c5, 1, hin, tok, lg, got, mh)) {
        free(hA3);
        goto out;
    }
    CHECK(gA[0] && gA[24] && !gA[25] && gA[NA - 3] && gA[NA - 1] && gA[NA] && gA[NA + 1]);
    CHECK(gB[9] && !gB[10]);
    /* the same rows in one call: bitwise */
    {
        float *ml1 = calloc(rA * V, 4), *mh1 = calloc(rA * H, 4);
        unsigned char g1[RA] = {0};
        float *lg1[2] = {ml1, NULL}, *mh1p[2] = {mh1, NULL};
        unsigned char *got1[2] = {g1, NULL};
        piece all[] = {{0, 0, RA, CLLM_LOGITS_ALL, 0}};
        if (!mtp_call(&r, all, 1, hin, tok, lg1, got1, mh1p)) {
            bool same = !memcmp(mh1, mhA, rA * H * 4);
            for (int i = 0; i < RA; i++)
                if (gA[i] && memcmp(ml1 + (size_t)i * V, mlA + (size_t)i * V, (size_t)V * 4))
                    same = false;
            CHECK_MSG(same, "%s: MTP rows in one call differ from the split calls", name);
        }
        free(ml1);
        free(mh1);
    }
    { /* hidden_out may be the hidden input itself */
        float *io = malloc(rA * H * 4);
        memcpy(io, hA3, rA * H * 4);
        cllm_mtp_seq q = {.hidden = io,
                          .tokens = ma,
                          .n_tokens = RA,
                          .block_table = r.tab[0],
                          .n_table = TAB,
                          .logits = CLLM_LOGITS_NONE,
                          .hidden_out = io};
        cllm_error err = {0};
        CHECK(cllm_forward_mtp(r.c, &q, 1, &r.kv, NULL, &err) == CLLM_OK);
        CHECK_MSG(!memcmp(io, mhA, rA * H * 4), "%s: MTP in place differs", name);
        free(io);
    }
    { /* kv_rows: the first rows only write the head's K/V, bitwise a whole pass's; the other
       * rows' logits and hidden_out are a whole pass's; with a second sequence in the call
       * that runs whole (kv_rows 0) */
        const cllm_kv_pool *kp = &r.kv;
        size_t row_b = (size_t)kp->kv_dim * kp->elem_size, out = 3;
        size_t pool = (size_t)kp->n_blocks * kp->n_layers * 2 * kp->block_size * row_b;
        float *lw = malloc((out + 1) * V * 4), *lk = malloc((out + 1) * V * 4);
        float *hw = malloc(rA * H * 4), *hk = malloc(rA * H * 4), *hbw = malloc(nB * H * 4),
              *hbk = malloc(nB * H * 4);
        unsigned char *kv0 = malloc(pool);
        cllm_mtp_seq q[2] = {{.hidden = hA3,
                              .tokens = ma,
                              .n_tokens = RA,
                              .block_table = r.tab[0],
                              .n_table = TAB,
                              .logits = CLLM_LOGITS_LAST,
                              .logits_n = (int)out,
                              .hidden_out = hw},
                             {.hidden = hB,
                              .tokens = mb,
                              .n_tokens = NB,
                              .block_table = r.tab[1],
                              .n_table = TAB,
                              .logits = CLLM_LOGITS_LAST,
                              .hidden_out = hbw}};
        cllm_error err = {0};
        CHECK(cllm_forward_mtp(r.c, q, 2, &r.kv, lw, &err) == CLLM_OK);
        memcpy(kv0, kp->data, pool);
        /* the MTP layer's K/V of both sequences overwritten: the second call must write it */
        for (int s2 = 0; s2 < 2; s2++)
            for (int p = 0; p < (s2 ? NB : RA); p++)
                for (int w = 0; w < 2; w++) {
                    size_t idx = (((size_t)r.tab[s2][p / kp->block_size] * kp->n_layers +
                                   (size_t)kp->n_layers - 1) *
                                      2 +
                                  (size_t)w) *
                                     kp->block_size +
                                 (size_t)(p % kp->block_size);
                    memset((char *)kp->data + idx * row_b, 0x55, row_b);
                }
        memset(hk, 0x33, rA * H * 4);
        q[0].hidden_out = hk;
        q[0].kv_rows = RA - (int)out;
        q[1].hidden_out = hbk;
        CHECK(cllm_forward_mtp(r.c, q, 2, &r.kv, lk, &err) == CLLM_OK);
        CHECK_MSG(!memcmp(lk, lw, (out + 1) * V * 4), "%s: kv_rows: logits differ", name);
        CHECK_MSG(!memcmp(hk + (RA - out) * H, hw + (RA - out) * H, out * H * 4) &&
                      !memcmp(hbk, hbw, nB * H * 4),
                  "%s: kv_rows: hidden_out differs", name);
        bool kept = true;
        for (size_t i = 0; i < (RA - out) * H * 4; i++) kept &= ((unsigned char *)hk)[i] == 0x33;
        CHECK_MSG(kept, "%s: kv_rows: a K/V-only row's hidden_out was written", name);
        CHECK_MSG(!memcmp(kp->data, kv0, pool), "%s: kv_rows: the pool differs from a whole pass",
                  name);
        /* refused: a K/V-only row asked for logits, no row left whole, a negative count */
        int bad[][3] = {{CLLM_LOGITS_ALL, 0, 1},
                        {CLLM_LOGITS_LAST, 2, RA - 1},
                        {CLLM_LOGITS_NONE, 0, RA},
                        {CLLM_LOGITS_NONE, 0, -1}};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
            cllm_mtp_seq b1 = q[0];
            b1.logits = (cllm_logits_mode)bad[i][0];
            b1.logits_n = bad[i][1];
            b1.kv_rows = bad[i][2];
            CHECK_MSG(cllm_forward_mtp(r.c, &b1, 1, &r.kv, lk, &err) == CLLM_EINVAL &&
                          strstr(err.msg, "kv_rows") != NULL,
                      "%s: kv_rows case %zu not refused (%s)", name, i, err.msg);
        }
        free(lw), free(lk), free(hw), free(hk), free(hbw), free(hbk), free(kv0);
    }
    { /* a draft vocabulary: the ids below vocab_rows bitwise as the whole row's, -inf after */
        float *lf = malloc(rA * V * 4), *lp = malloc(rA * V * 4);
        cllm_mtp_seq q = {.hidden = hA3,
                          .tokens = ma,
                          .n_tokens = RA,
                          .block_table = r.tab[0],
                          .n_table = TAB,
                          .logits = CLLM_LOGITS_ALL};
        cllm_error err = {0};
        CHECK(cllm_forward_mtp(r.c, &q, 1, &r.kv, lf, &err) == CLLM_OK);
        q.vocab_rows = V / 2;
        CHECK(cllm_forward_mtp(r.c, &q, 1, &r.kv, lp, &err) == CLLM_OK);
        int bad_lo = 0, bad_hi = 0;
        for (int i = 0; i < RA; i++)
            for (int v = 0; v < V; v++) {
                float x1 = lp[(size_t)i * V + v], x2 = lf[(size_t)i * V + v];
                if (v < V / 2 && memcmp(&x1, &x2, 4)) bad_lo++;
                if (v >= V / 2 && x1 != -INFINITY) bad_hi++;
            }
        CHECK_MSG(!bad_lo && !bad_hi, "%s: vocab_rows %d: %d entries differ below, %d not -inf",
                  name, V / 2, bad_lo, bad_hi);
        q.vocab_rows = V + 1;
        CHECK(cllm_forward_mtp(r.c, &q, 1, &r.kv, lp, &err) == CLLM_EINVAL &&
              strstr(err.msg, "vocab_rows") != NULL);
        free(lf);
        free(lp);
    }
    free(hA3);
    if (have_ref) {
        char ra[600], rb[600];
        snprintf(ra, sizeof ra, "%s/refA", out_dir);
        snprintf(rb, sizeof rb, "%s/refB", out_dir);
        static char ta_s[1024], ma_s[1024], tb_s[1024], mb_s[1024], rc[16384];
        ids(ta_s, sizeof ta_s, ta, NA);
        ids(ma_s, sizeof ma_s, ma, RA);
        ids(tb_s, sizeof tb_s, tb, NB);
        ids(mb_s, sizeof mb_s, mb, NB);
        const char *R = "/usr/bin/python3 '%s/tools/ref/ref_forward.py' '%s' --tokens %s --out "
                        "'%s.lg' --dump-hidden '%s.h' --mtp-tokens %s --mtp-out '%s.ml' "
                        "--mtp-hidden-out '%s.mh' 2>/dev/null";
        snprintf(rc, sizeof rc, R, test_src(), dir, ta_s, ra, ra, ma_s, ra, ra);
        int e1 = sh(rc);
        snprintf(rc, sizeof rc, R, test_src(), dir, tb_s, rb, rb, mb_s, rb, rb);
        if (e1 || sh(rc)) goto out;
        struct {
            const char *sfx;
            const float *c;
            const unsigned char *mask;
            int rows, width;
            const char *what;
        } cmp[] = {{"A.lg", lgA, NULL, NA, V, "target logits A"},
                   {"A.h/h_final_norm.f32", hA, NULL, NA, H, "hidden_out A"},
                   {"A.ml", mlA, gA, RA, V, "MTP logits A"},
                   {"A.mh", mhA, NULL, RA, H, "MTP hidden_out A"},
                   {"B.lg", lgB, NULL, NB, V, "target logits B"},
                   {"B.h/h_final_norm.f32", hB, NULL, NB, H, "hidden_out B"},
                   {"B.ml", mlB, gB, NB, V, "MTP logits B"},
                   {"B.mh", mhB, NULL, NB, H, "MTP hidden_out B"}};
        for (size_t i = 0; i < sizeof cmp / sizeof cmp[0]; i++) {
            snprintf(a, sizeof a, "%s/ref%s", out_dir, cmp[i].sfx);
            float *rf = readf(a, (size_t)cmp[i].rows * cmp[i].width);
            CHECK_MSG(rf, "%s: cannot read %s", name, a);
            if (!rf) continue;
            snprintf(b, sizeof b, "%s %s", name, cmp[i].what);
            cmp_ref(b, cmp[i].c, rf, cmp[i].mask, cmp[i].rows, cmp[i].width);
            free(rf);
        }
    }
out:
    free(lgA), free(hA), free(lgB), free(hB), free(lg0), free(hA2);
    free(mlA), free(mlB), free(mhA), free(mhB);
    rig_close(&r);
}

static void test_errors(const char *tmp) {
    char dir[512], cmd[4096];
    cllm_error err = {0};
    /* a model without the head */
    snprintf(dir, sizeof dir, "%s/test_mtp/nomtp", tmp);
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && '%s' synth --config '%s/configs/tiny.json' '%s' --seed 5 -q "
             "2>/dev/null",
             dir, getenv("CLLM_BIN"), test_src(), dir);
    if (sh(cmd)) return;
    rig r;
    memset(&r, 0, sizeof r);
    if (cllm_model_load(dir, &g_fwd, &r.m, &err) != CLLM_OK) {
        CHECK_MSG(0, "load: %s", err.msg);
        return;
    }
    H = cllm_model_config(r.m)->hidden_size;
    CHECK(!cllm_model_has_mtp(r.m));
    CHECK(cllm_kv_pool_init_mtp(&r.kv, r.m, 4, 16, CLLM_KV_F32, &err) == CLLM_EINVAL);
    CHECK(strstr(err.msg, "no MTP head") != NULL);
    CHECK(cllm_kv_pool_init(&r.plain, r.m, 4, 16, CLLM_KV_F32, &err) == CLLM_OK);
    CHECK(cllm_fwd_ctx_create(r.m, NULL, &r.c, &err) == CLLM_OK);
    float *hid = calloc((size_t)4 * H, 4), *lg = malloc((size_t)4 * 512 * 4);
    int32_t tab[4] = {0, 1, 2, 3}, tk[4] = {1, 2, 3, 4};
    cllm_mtp_seq q = {hid, tk, 2, 0, tab, 4, CLLM_LOGITS_ALL, 0, 0, 0.0f, NULL};
    err.msg[0] = 0;
    CHECK(cllm_forward_mtp(r.c, &q, 1, &r.plain, lg, &err) == CLLM_EINVAL);
    CHECK_MSG(strstr(err.msg, "no MTP head") != NULL, "message: %s", err.msg);
    cllm_fwd_ctx_free(r.c);
    cllm_kv_pool_free(&r.plain);
    cllm_model_free(r.m);
    /* the MTP model: bad pools and bad rows are refused before anything is written */
    snprintf(dir, sizeof dir, "%s/test_mtp/f32", tmp);
    if (rig_open(&r, dir, 1, 16)) return;
    free(hid), free(lg);
    hid = calloc((size_t)4 * H, 4), lg = malloc((size_t)4 * V * 4);
    q = (cllm_mtp_seq){hid, tk, 2, 0, r.tab[0], TAB, CLLM_LOGITS_ALL, 0, 0, 0.0f, NULL};
    CHECK(cllm_forward_mtp(r.c, &q, 1, &r.plain, lg, &err) == CLLM_EINVAL);
    CHECK_MSG(strstr(err.msg, "cllm_kv_pool_init_mtp") != NULL, "message: %s", err.msg);
    size_t bytes = cllm_kv_pool_block_bytes(&r.kv) * (size_t)r.kv.n_blocks;
    unsigned char *snap = malloc(bytes);
    memcpy(snap, r.kv.data, bytes);
    struct {
        cllm_mtp_seq q;
        int n;
        const char *msg;
    } bad[] = {
        {{NULL, tk, 2, 0, r.tab[0], TAB, CLLM_LOGITS_ALL, 0, 0, 0.0f, NULL}, 1, "no hidden"},
        {{hid, tk, 2, 0, r.tab[0], 0, CLLM_LOGITS_ALL, 0, 0, 0.0f, NULL}, 1, "block table"},
        {{hid, tk, 2, 0, r.tab[0], TAB, CLLM_LOGITS_LAST, 3, 0, 0.0f, NULL}, 1, "logits_n"},
        {{hid, tk, 0, 0, r.tab[0], TAB, CLLM_LOGITS_ALL, 0, 0, 0.0f, NULL}, 1, "empty"},
        {{hid, tk, 2, -1, r.tab[0], TAB, CLLM_LOGITS_ALL, 0, 0, 0.0f, NULL}, 1, "negative"},
        {{hid, tk, 2, 0, r.tab[0], TAB, CLLM_LOGITS_ALL, 0, 0, 0.0f, NULL}, 0, "empty batch"},
    };
    int32_t badtok[2] = {1, 99999};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = 0;
        CHECK(cllm_forward_mtp(r.c, &bad[i].q, bad[i].n, &r.kv, lg, &err) == CLLM_EINVAL);
        CHECK_MSG(strstr(err.msg, bad[i].msg) != NULL, "case %zu: message '%s' lacks '%s'", i,
                  err.msg, bad[i].msg);
    }
    q.tokens = badtok;
    CHECK(cllm_forward_mtp(r.c, &q, 1, &r.kv, lg, &err) == CLLM_EINVAL);
    CHECK_MSG(strstr(err.msg, "out of range") != NULL, "message: %s", err.msg);
    CHECK_MSG(!memcmp(snap, r.kv.data, bytes), "a refused MTP call wrote into the kv pool");
    free(snap);
    free(hid), free(lg);
    rig_close(&r);
    /* two MTP layers: vLLM runs layer (step % 2) per draft step, not both; refused by name */
    snprintf(dir, sizeof dir, "%s/test_mtp/mtp2", tmp);
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s' && mkdir -p '%s' && sed 's/\"mtp_num_hidden_layers\": 1/"
             "\"mtp_num_hidden_layers\": 2/' '%s/configs/tiny-mtp.json' > '%s/c.json' && '%s' "
             "synth --config '%s/c.json' '%s/m' --seed 5 -q 2>/dev/null",
             dir, dir, test_src(), dir, getenv("CLLM_BIN"), dir, dir);
    if (sh(cmd)) return;
    strncat(dir, "/m", sizeof dir - strlen(dir) - 1);
    if (rig_open(&r, dir, 1, 16)) return;
    CHECK(r.kv.n_layers == cllm_model_n_attn_layers(r.m) + 2);
    hid = calloc((size_t)4 * H, 4), lg = malloc((size_t)4 * V * 4);
    q = (cllm_mtp_seq){hid, tk, 2, 0, r.tab[0], TAB, CLLM_LOGITS_ALL, 0, 0, 0.0f, NULL};
    CHECK(cllm_forward_mtp(r.c, &q, 1, &r.kv, lg, &err) == CLLM_EUNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "mtp_num_hidden_layers 2") != NULL, "message: %s", err.msg);
    free(hid), free(lg);
    rig_close(&r);
}

/* ids of the 5 largest entries (ties: lower id), the sampler's order at scale 1 */
static void best5(const float *y, int *id) {
    for (int k = 0; k < 5; k++) {
        id[k] = -1;
        for (int v = 0; v < V; v++) {
            bool used = false;
            for (int j = 0; j < k; j++) used |= id[j] == v;
            if (!used && (id[k] < 0 || y[v] > y[id[k]])) id[k] = v;
        }
    }
}

/* The screened lm_head serves MTP rows with logits_topk as it serves the main forward's. */
static void test_screened(const char *tmp, int est_bits, int ncand) {
    char src[512], dir[512];
    snprintf(src, sizeof src, "%s/test_mtp/f32", tmp);
    snprintf(dir, sizeof dir, "%s/test_mtp/w4a16", tmp);
    cllm_error err = {0};
    if (tm_quantize_w4a16(src, dir, 32, 8, &err) != CLLM_OK) {
        CHECK_MSG(0, "quantize: %s", err.msg);
        return;
    }
    g_fwd.lm_screen = ncand;
    g_fwd.lm_est_bits = est_bits;
    rig r;
    int bad = rig_open(&r, dir, 1, 16);
    g_fwd.lm_screen = CLLM_LM_SCREEN_AUTO;
    g_fwd.lm_est_bits = 0;
    if (bad) return;
    CHECK_MSG(cllm_model_has_mtp(r.m), "the W4A16 copy lost its MTP head");
    if (!cllm_model_has_mtp(r.m)) {
        rig_close(&r);
        return;
    }
    float *lg = malloc((size_t)NA * V * 4), *hid = malloc((size_t)NA * H * 4);
    float *ex = malloc((size_t)4 * V * 4), *sc = malloc((size_t)4 * V * 4);
    if (!target(&r, &r.kv, 0, 0, ta, NA, lg, hid)) {
        cllm_mtp_seq q = {hid, ma, NA, 0, r.tab[0], TAB, CLLM_LOGITS_LAST, 4, 0, 1.0f, NULL};
        CHECK(cllm_forward_mtp(r.c, &q, 1, &r.kv, ex, &err) == CLLM_OK);
        q.logits_topk = 5;
        CHECK(cllm_forward_mtp(r.c, &q, 1, &r.kv, sc, &err) == CLLM_OK);
        int screened = 0;
        for (int row = 0; row < 4; row++) {
            const float *e = ex + (size_t)row * V, *s = sc + (size_t)row * V;
            int fin = 0, ok = 1, be[5], bs[5];
            best5(e, be);
            best5(s, bs);
            for (int v = 0; v < V; v++) fin += s[v] != -INFINITY;
            for (int k = 0; k < 5; k++)
                if (be[k] != bs[k] || memcmp(&e[be[k]], &s[bs[k]], 4)) ok = 0;
            CHECK_MSG(ok, "screened MTP row %d: its 5 best are not the exact row's", row);
            screened += fin < V;
        }
        CHECK_MSG(screened > 0, "the screen dropped nothing: not the screened path");
        /* a draft vocabulary on the screened head: the hi-plane estimate of the first ids; its
         * argmax is the exact prefix's in these rows (an int4-grade estimate: not guaranteed in
         * general, which is why drafts are verified), -inf after */
        q.logits_topk = 0;
        q.vocab_rows = V / 2;
        CHECK(cllm_forward_mtp(r.c, &q, 1, &r.kv, sc, &err) == CLLM_OK);
        int agree = 0, inf_ok = 1;
        for (int row = 0; row < 4; row++) {
            const float *e = ex + (size_t)row * V, *s = sc + (size_t)row * V;
            int be = 0, bs = 0;
            for (int v = 1; v < V / 2; v++) {
                if (e[v] > e[be]) be = v;
                if (s[v] > s[bs]) bs = v;
            }
            for (int v = V / 2; v < V; v++) inf_ok &= s[v] == -INFINITY;
            agree += be == bs;
        }
        CHECK_MSG(inf_ok && agree >= 3, "screened draft vocabulary: %d of 4 argmax agree (inf %d)",
                  agree, inf_ok);
        /* loaded to draft (the engine's load for method mtp, cllm_fwd_opts.mtp_panels): the
         * head's matrices are repacked into panels too */
        rig r2;
        g_fwd.mtp_panels = true;
        bad = rig_open(&r2, dir, 1, 16);
        g_fwd.mtp_panels = false;
        if (!bad) {
            CHECK_MSG(r2.m->mtp_fc.panel && r2.m->mtp_layers[0].attn.q.panel &&
                          !r.m->mtp_fc.panel && !r.m->mtp_layers[0].attn.q.panel,
                      "MTP panels: fc %d / %d, q_proj %d / %d (loaded to draft / not)",
                      r2.m->mtp_fc.panel, r.m->mtp_fc.panel, r2.m->mtp_layers[0].attn.q.panel,
                      r.m->mtp_layers[0].attn.q.panel);
            if (!target(&r2, &r2.kv, 0, 0, ta, NA, lg, hid)) {
                cllm_mtp_seq q2 = {hid, ma, NA,   0,   r2.tab[0], TAB, CLLM_LOGITS_LAST,
                                   4,   0,  1.0f, NULL};
                CHECK(cllm_forward_mtp(r2.c, &q2, 1, &r2.kv, sc, &err) == CLLM_OK);
                /* within rounding (the small model's paneled head rounds otherwise), the same best
                 */
                double dm = 0, am = 0;
                int same = 0;
                for (int row = 0; row < 4; row++) {
                    const float *e = ex + (size_t)row * V, *p = sc + (size_t)row * V;
                    int be = 0, bp = 0;
                    for (int v = 0; v < V; v++) {
                        double d = fabs((double)e[v] - p[v]);
                        dm = d > dm ? d : dm;
                        am = fabs(e[v]) > am ? fabs(e[v]) : am;
                        be = e[v] > e[be] ? v : be;
                        bp = p[v] > p[bp] ? v : bp;
                    }
                    same += be == bp;
                }
                CHECK_MSG(dm <= 1e-5 * am && same == 4,
                          "MTP rows on panels: max |diff| %g of %g from the GPTQ layout's, %d of 4 "
                          "argmax the same",
                          dm, am, same);
            }
            rig_close(&r2);
        }
    }
    free(lg), free(hid), free(ex), free(sc);
    rig_close(&r);
}

int main(void) {
    const char *tmp = test_tmp();
    if (!getenv("CLLM_BIN")) {
        fprintf(stderr, "SKIP: CLLM_BIN unset\n");
        return 0;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/test_mtp'", tmp);
    if (sh(cmd)) return test_report("test_mtp");
    have_ref = system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") == 0;
    if (!have_ref) fprintf(stderr, "SKIP reference comparison: no /usr/bin/python3 + numpy\n");
    for (int i = 0; i < NA; i++) ta[i] = (i * 37 + 5) % 500;
    for (int i = 0; i < NB; i++) tb[i] = (i * 53 + 11) % 500;
    /* MTP row p: the token at p + 1 (teacher-forced), then the "sampled" and drafted ones */
    for (int i = 0; i + 1 < NA; i++) ma[i] = ta[i + 1];
    ma[NA - 1] = 77, ma[NA] = 123, ma[NA + 1] = 301;
    for (int i = 0; i + 1 < NB; i++) mb[i] = tb[i + 1];
    mb[NB - 1] = 9;
    test_model(tmp, "f32", NULL, "f32", "fused", 1, 16);
    test_model(tmp, "bf16", NULL, "bf16", "per-expert", 2, 5);
    /* one KV head for four query heads, lm_head tied to the embedding (the MTP shares both) */
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "%s/test_mtp/tied.json", tmp);
    const char *from[] = {"\"num_key_value_heads\": 2", "\"tie_word_embeddings\": false",
                          "\"tie_word_embeddings\": false"};
    const char *to[] = {"\"num_key_value_heads\": 1", "\"tie_word_embeddings\": true",
                        "\"tie_word_embeddings\": true"};
    CHECK(tm_write_config(test_src(), "tiny-mtp.json", cfg, from, to, 3) == 0);
    test_model(tmp, "tied", cfg, "f32", "fused", 2, 16);
    /* models/tiny with its trained head (tools/train/train_mtp.py), BF16 as shipped */
    test_model(tmp, "tiny", NULL, NULL, NULL, 2, 16);
    test_errors(tmp);
    test_screened(tmp, 4, 8);
    test_screened(tmp, 2, 24);
    return test_report("test_mtp");
}
