/* See serve_tp.h. */
#include "cli/serve_tp.h"

#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "model/forward.h"

enum { OP_FORWARD = 1, OP_COPY_BLOCK, OP_COPY_STATE, OP_EXIT, OP_COMMIT_STATE };
enum {
    SEQ_INTS = 11
}; /* per sequence: n_tokens, start_pos, n_table, state_slot, logits, topk,
      scale bits, logits_n, state_fork, state_src, state_save */

typedef struct op_hdr {
    int32_t op, a, b;
    int32_t n_ints; /* payload int32s that follow (forward) */
    uint64_t seq;   /* operation number: followers check they saw every one */
} op_hdr;

static uint64_t g_seq;
static bool g_synced; /* the followers are past engine creation (they wait for operations) */
static int32_t *g_buf;
static size_t g_cap;

static cllm_status grow(size_t n) {
    if (n <= g_cap) return CLLM_OK;
    int32_t *p = realloc(g_buf, n * sizeof(int32_t));
    if (!p) return CLLM_ENOMEM;
    g_buf = p;
    g_cap = n;
    return CLLM_OK;
}

static cllm_status send_op(int op, int a, int b, const int32_t *payload, int n_ints) {
    op_hdr h = {op, a, b, n_ints, ++g_seq};
    cllm_status rc = cllm_dist_bcast(&h, sizeof(h), 0);
    if (rc == CLLM_OK && n_ints > 0)
        rc = cllm_dist_bcast((void *)payload, (size_t)n_ints * sizeof(int32_t), 0);
    return rc;
}

static cllm_status dist_err(cllm_status rc, cllm_error *err) {
    const char *f = cllm_dist_failure();
    return cllm_err_set(err, rc, "%s", f ? f : "tensor parallel: broadcast to the ranks failed");
}

static cllm_status lead_forward(void *user, const cllm_batch *b, cllm_error *err) {
    size_t n = 0;
    for (int i = 0; i < b->n_seqs; i++)
        n += SEQ_INTS + (size_t)b->seqs[i].n_tokens + (size_t)b->seqs[i].n_table;
    if (n > INT32_MAX || grow(n) != CLLM_OK)
        return cllm_err_set(err, CLLM_ENOMEM, "tensor parallel: out of memory for the batch");
    int32_t *p = g_buf;
    for (int i = 0; i < b->n_seqs; i++) {
        const cllm_seq_batch *q = &b->seqs[i];
        *p++ = q->n_tokens;
        *p++ = q->start_pos;
        *p++ = q->n_table;
        *p++ = q->state_slot;
        *p++ = (int32_t)q->logits;
        *p++ = q->logits_topk;
        *p = 0;
        if (q->logits_topk > 0) memcpy(p, &q->logits_scale, sizeof(float));
        p++;
        *p++ = q->logits_n;
        *p++ = q->state_fork;
        *p++ = q->state_src;
        *p++ = q->state_save;
    }
    for (int i = 0; i < b->n_seqs; i++) {
        memcpy(p, b->seqs[i].tokens, (size_t)b->seqs[i].n_tokens * sizeof(int32_t));
        p += b->seqs[i].n_tokens;
        memcpy(p, b->seqs[i].block_table, (size_t)b->seqs[i].n_table * sizeof(int32_t));
        p += b->seqs[i].n_table;
    }
    cllm_status rc = send_op(OP_FORWARD, b->n_seqs, 0, g_buf, (int)n);
    return rc != CLLM_OK ? dist_err(rc, err) : CLLM_OK;
}

/* A copy that cannot be told to the followers leaves the ranks' pools different; the failure
 * is declared by then, and every later forward fails with it. */
static void lead_copy_block(void *user, int dst, int src) {
    send_op(OP_COPY_BLOCK, dst, src, NULL, 0);
}

static void lead_copy_state(void *user, int dst, int src) {
    send_op(OP_COPY_STATE, dst, src, NULL, 0);
}

static void lead_commit_state(void *user, int seq, int n, int slot) {
    int32_t s = slot;
    send_op(OP_COMMIT_STATE, seq, n, &s, 1);
}

static void lead_close(void *user) {
    if (g_synced && !cllm_dist_failure()) send_op(OP_EXIT, 0, 0, NULL, 0);
    g_synced = false;
    free(g_buf);
    g_buf = NULL;
    g_cap = 0;
}

static cllm_status sync_sizes(void *user, uint64_t *n_blocks, int *max_len, int *n_live,
                              int *n_snap, cllm_error *err) {
    int64_t v[4] = {(int64_t)*n_blocks, *max_len, *n_live, *n_snap};
    /* every rank has loaded and prefaulted its slices (minutes apart, maybe): the start-up
     * timeout, with the late rank named; then the sizes, then rank 0's heartbeats start (the
     * followers' idle waits from here on are bounded by them) */
    if (cllm_dist_check_same_startup(0, "the engine start-up", err) != CLLM_OK) return CLLM_EIO;
    if (cllm_dist_bcast(v, sizeof(v), 0) != CLLM_OK) return dist_err(CLLM_EIO, err);
    cllm_dist_heartbeat_start();
    *n_blocks = (uint64_t)v[0];
    *max_len = (int)v[1];
    *n_live = (int)v[2];
    *n_snap = (int)v[3];
    g_synced = true;
    g_seq = 0; /* a new engine: the followers count its operations from 1 (bench makes several) */
    return CLLM_OK;
}

/* the forward's own message for a failed collective is only "EIO": say which rank and why */
static void explain(void *user, cllm_error *err) {
    const char *f = cllm_dist_failure();
    if (f) cllm_err_set(err, CLLM_EIO, "%s", f);
}

static const cllm_engine_mirror leader = {
    NULL,       sync_sizes, lead_forward,     lead_copy_block, lead_copy_state,
    lead_close, explain,    lead_commit_state};
static const cllm_engine_mirror follower = {NULL, sync_sizes, NULL, NULL, NULL, NULL, NULL};

const cllm_engine_mirror *serve_tp_mirror(void) {
    return cllm_dist_rank() == 0 ? &leader : &follower;
}

/* Rebuilds the batch from the payload, checking every count against its length (a corrupt
 * payload must not read out of bounds). */
static cllm_status unpack(const int32_t *p, int n_ints, int n_seqs, cllm_seq_batch *seqs,
                          cllm_error *err) {
    if (n_seqs < 1 || (int64_t)n_seqs * SEQ_INTS > n_ints)
        return cllm_err_set(err, CLLM_EINVAL, "tensor parallel: bad forward header");
    const int32_t *d = p + (size_t)n_seqs * SEQ_INTS, *end = p + n_ints;
    for (int i = 0; i < n_seqs; i++) {
        const int32_t *h = p + (size_t)i * SEQ_INTS;
        if (h[0] < 0 || h[2] < 0 || end - d < (int64_t)h[0] + h[2])
            return cllm_err_set(err, CLLM_EINVAL, "tensor parallel: bad forward payload");
        seqs[i] = (cllm_seq_batch){.tokens = d,
                                   .n_tokens = h[0],
                                   .start_pos = h[1],
                                   .block_table = d + h[0],
                                   .n_table = h[2],
                                   .state_slot = h[3],
                                   .logits = (cllm_logits_mode)h[4],
                                   .logits_topk = h[5],
                                   .logits_n = h[7],
                                   .state_fork = h[8] != 0,
                                   .state_src = h[9],
                                   .state_save = h[10] != 0};
        memcpy(&seqs[i].logits_scale, &h[6], sizeof(float));
        d += (size_t)h[0] + (size_t)h[2];
    }
    return CLLM_OK;
}

cllm_status serve_tp_follow(cllm_engine *e, cllm_error *err) {
    uint64_t expect = 0;
    cllm_seq_batch *seqs = NULL;
    int cap_seqs = 0;
    cllm_status rc = CLLM_OK;
    for (;;) {
        op_hdr h;
        if (cllm_dist_bcast_idle(&h, sizeof(h), 0) != CLLM_OK) {
            rc = dist_err(CLLM_EIO, err);
            break;
        }
        if (h.seq != ++expect) {
            rc = cllm_err_set(err, CLLM_EINVAL,
                              "tensor parallel: operation %llu from rank 0, expected %llu",
                              (unsigned long long)h.seq, (unsigned long long)expect);
            break;
        }
        if (h.op == OP_EXIT) break;
        if (h.op == OP_COPY_BLOCK) {
            cllm_engine_follow_copy_block(e, h.a, h.b);
            continue;
        }
        if (h.op == OP_COPY_STATE) {
            cllm_engine_follow_copy_state(e, h.a, h.b);
            continue;
        }
        if (h.op == OP_COMMIT_STATE) {
            int32_t slot;
            if (h.n_ints != 1 || cllm_dist_bcast(&slot, sizeof(slot), 0) != CLLM_OK) {
                rc = h.n_ints != 1 ? cllm_err_set(err, CLLM_EINVAL, "tensor parallel: bad commit")
                                   : dist_err(CLLM_EIO, err);
                break;
            }
            cllm_engine_follow_commit_state(e, h.a, h.b, slot);
            continue;
        }
        if (h.op != OP_FORWARD || h.n_ints < 0) {
            rc = cllm_err_set(err, CLLM_EINVAL, "tensor parallel: unknown operation %d", h.op);
            break;
        }
        if (grow((size_t)h.n_ints) != CLLM_OK) {
            rc = cllm_err_set(err, CLLM_ENOMEM, "tensor parallel: out of memory");
            break;
        }
        if (cllm_dist_bcast(g_buf, (size_t)h.n_ints * sizeof(int32_t), 0) != CLLM_OK) {
            rc = dist_err(CLLM_EIO, err);
            break;
        }
        if (h.a > cap_seqs) {
            cllm_seq_batch *ns = realloc(seqs, (size_t)h.a * sizeof(*ns));
            if (!ns) {
                rc = cllm_err_set(err, CLLM_ENOMEM, "tensor parallel: out of memory");
                break;
            }
            seqs = ns;
            cap_seqs = h.a;
        }
        if ((rc = unpack(g_buf, h.n_ints, h.a, seqs, err)) != CLLM_OK) break;
        cllm_batch b = {seqs, h.a};
        cllm_error ferr = {0};
        /* a failure that every rank makes alike (bad input, validated before any collective)
         * is rank 0's to report; one from the collectives ends the loop */
        if (cllm_engine_follow_forward(e, &b, &ferr) != CLLM_OK && cllm_dist_failure()) {
            rc = dist_err(CLLM_EIO, err);
            break;
        }
    }
    free(seqs);
    free(g_buf);
    g_buf = NULL;
    g_cap = 0;
    return rc;
}
