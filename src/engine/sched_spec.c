/* Speculative decoding in the scheduler (engine.h, docs/internals/spec.md): a decoding sequence's
 * row may carry k draft tokens after its pending ones; one forward computes the k + 1 positions
 * (the chunked-prefill path, batch-invariant kernels: each row's logits are bitwise the ones k + 1
 * single steps would give), and the sampler draws position after position exactly as without
 * speculation, stopping at the first draw that differs from the draft. So greedy and seeded
 * sampling give the same tokens, logprobs and events as without speculation, and the output
 * distribution is the target's (the drafts are deterministic: a draw that equals the draft is
 * the acceptance, a draw that does not is the residual sample).
 *
 * Rollback. Attention KV rows of rejected drafts are simply overwritten later. Gated DeltaNet
 * state cannot be rewound, so a hybrid model's verify reads the live slot and writes its state
 * to a spare one (e->spec_slot, a forked row: forward.h state_fork); when every draft is
 * accepted the spare becomes the live slot, otherwise it is
 * dropped and the accepted tokens stay pending: the next step's row recomputes them in front of
 * its own drafts (a few more positions in one forward, no extra weight pass).
 *
 * Choosing k: per step, from the measured forward time by tokens in the step (spec_cost) and each
 * row's decayed acceptance rate, the k that maximises expected tokens per second; rows whose
 * acceptance does not pay, and large batches where a verify costs what it brings, draft nothing.
 * Called by sched.c on the engine thread. */
#include <math.h>
#include <string.h>

#include "base/log.h"
#include "base/mem.h"
#include "engine/sched_int.h"
#include "engine/spec_ngram.h"
#include "engine/spec_suffix.h"

/* Pending tokens beyond which a row is replayed plainly first: after many rejections in a row the
 * pending run would make the verify a prefill. */
#define SPEC_MAX_PENDING (2 * CLLM_SPEC_MAX_K + 1)
/* Prior acceptance (weight 2 positions) for a row that has not drafted yet; the decay per verify
 * keeps the estimate to about the last 10 draft positions. */
#define SPEC_PRIOR   0.5
#define SPEC_PRIOR_W 2.0
#define SPEC_DECAY   0.9
/* Steps without a draft after which a row drafts one token anyway, to measure again */
#define SPEC_PROBE_IDLE 32

static bool spec_on(const sched *s) {
    return s->cfg.spec.method != CLLM_SPEC_NONE && s->cfg.spec.num_speculative_tokens > 0;
}

static double row_alpha(const eng_seq *e) {
    return (e->acc_hits + SPEC_PRIOR * SPEC_PRIOR_W) / (e->acc_trials + SPEC_PRIOR_W);
}

double cllm_spec_expected_tokens(double a, int k) {
    double sum = 1.0, p = 1.0;
    for (int i = 0; i < k; i++) sum += (p *= a);
    return sum;
}

/* Forward seconds for a step of T tokens: the measured mean, else interpolated between the
 * nearest measured sizes, else a prior of 10% of a one-token step per extra token (about the
 * quarter shape's verify curve) scaled from the smallest measured size. */
static double step_time(const sched *s, int T) {
    if (T < 1) T = 1;
    if (T > SPEC_COST_N) T = SPEC_COST_N;
    const double *t = s->cost.t;
    if (t[T] > 0) return t[T];
    int lo = T - 1, hi = T + 1;
    while (lo >= 1 && t[lo] <= 0) lo--;
    while (hi <= SPEC_COST_N && t[hi] <= 0) hi++;
    if (lo >= 1 && hi <= SPEC_COST_N)
        return t[lo] + (t[hi] - t[lo]) * (double)(T - lo) / (double)(hi - lo);
    if (lo >= 1) return t[lo] * (1.0 + 0.1 * (T - 1)) / (1.0 + 0.1 * (lo - 1));
    if (hi <= SPEC_COST_N) return t[hi] * (1.0 + 0.1 * (T - 1)) / (1.0 + 0.1 * (hi - 1));
    return 1.0 + 0.1 * (T - 1);
}

/* A hybrid row whose verify is not accepted whole recomputes its accepted drafts in the next
 * step (the state rolls back): the expected extra time of that step, at i accepted with
 * probability a^i (1 - a) for i < k. Attention-only rows keep their accepted KV: none. */
static double replay_time(const sched *s, double a, int k, int base) {
    /* a model that commits (eng_model_ops.commit_state) replays nothing; the commit's time is
     * in the measured step times */
    if (!s->cfg.has_state || s->ops.commit_state) return 0.0;
    double extra = 0.0, p = a, one = step_time(s, base + 1);
    for (int i = 1; i < k; i++, p *= a) extra += p * (1.0 - a) * (step_time(s, base + 1 + i) - one);
    return extra;
}

void sched_spec_record(sched *s, int step_tokens, double seconds) {
    if (!spec_on(s) || step_tokens < 1 || step_tokens > SPEC_COST_N || !(seconds > 0)) return;
    /* the median of a size's last few samples: the noise here is one-sided and lumpy (a cold
     * page on the first verify, the first MTP call, another process), and a mean kept one
     * 74 ms first sample of a 29 ms verify long enough to switch drafting off for most of a
     * bench (2026-12-05); a median drops such a sample as soon as two normal ones follow */
    spec_cost *c = &s->cost;
    /* a size's first step is the one that meets cold pages and first allocations: not kept */
    int n = c->n[step_tokens]++ - 1, m = n + 1 < SPEC_COST_R ? n + 1 : SPEC_COST_R;
    if (n < 0) return;
    c->r[step_tokens][n % SPEC_COST_R] = seconds;
    double v[SPEC_COST_R];
    memcpy(v, c->r[step_tokens], (size_t)m * sizeof(double));
    for (int i = 1; i < m; i++) /* insertion sort of at most SPEC_COST_R values */
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double x = v[j];
            v[j] = v[j - 1];
            v[j - 1] = x;
        }
    c->t[step_tokens] = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

/* Idle steps after which row e drafts one token to measure again: soon while the size it would
 * run at (T tokens) has few samples and its drafts were accepted often enough to be worth it
 * (one odd sample must not decide for long), rarely otherwise (a large batch or rejected drafts:
 * every probe there is a step made dearer). */
static int probe_idle(const sched *s, const eng_seq *e, int T) {
    if (T > SPEC_COST_N) T = SPEC_COST_N;
    return s->cost.n[T] <= SPEC_COST_R && row_alpha(e) >= 0.3 ? 4 : SPEC_PROBE_IDLE;
}

static bool decoding(const eng_seq *e) {
    return e->n_tokens > e->n_prompt && e->n_tokens - e->n_computed <= SPEC_MAX_PENDING;
}

void sched_spec_begin_step(sched *s) {
    s->spec_k_step = 0;
    if (!spec_on(s)) return;
    int K = s->cfg.spec.num_speculative_tokens, B = 0;
    double a = 0;
    for (int i = 0; i < s->n_running; i++)
        if (decoding(s->running[i])) {
            a += row_alpha(s->running[i]);
            B++;
        }
    if (B == 0) return;
    int off = s->cfg.spec.disable_by_batch_size;
    if (off > 0 && s->n_running >= off) return;
    if (s->cfg.spec.fixed_k) {
        s->spec_k_step = K;
        return;
    }
    a /= B;
    double best = B / step_time(s, B);
    for (int k = 1; k <= K; k++) {
        double r = B * cllm_spec_expected_tokens(a, k) / step_time(s, B * (1 + k));
        if (r > best) {
            best = r;
            s->spec_k_step = k;
        }
    }
    /* what the choice saw (--log-level debug): B rows' mean acceptance, step times by size */
    LOG_DEBUG("spec: B %d a %.3f t1 %.2f t2 %.2f t3 %.2f t4 %.2f ms (n %d %d %d %d) k %d", B, a,
              1e3 * s->cost.t[1], 1e3 * s->cost.t[2], 1e3 * s->cost.t[3], 1e3 * s->cost.t[4],
              s->cost.n[1], s->cost.n[2], s->cost.n[3], s->cost.n[4], s->spec_k_step);
    /* a row idle for long probes one draft (sched_spec_plan): the step must allow one */
    for (int i = 0; s->spec_k_step == 0 && i < s->n_running; i++)
        if (decoding(s->running[i]) &&
            s->running[i]->spec_idle >= probe_idle(s, s->running[i], B + 1))
            s->spec_k_step = 1;
}

/* A row that drafts nothing this step: its history fades slowly (so a row that stopped paying
 * is retried once the prior weighs again) and its idle count grows toward a probe. */
static void row_idle(eng_seq *e) {
    e->acc_hits *= 0.97;
    e->acc_trials *= 0.97;
    e->spec_idle++;
}

int sched_spec_plan(sched *s, eng_seq *e, int budget) {
    e->n_draft = 0;
    e->spec_slot = -1;
    if (!spec_on(s) || !decoding(e)) return 0;
    const cllm_spec_opts *o = &s->cfg.spec;
    eng_req *q = e->req;
    int P = e->n_tokens - e->n_computed;
    int n_out = e->n_tokens - e->n_prompt;
    /* this row's k: the step's, cut where its own acceptance stops paying */
    int k = s->spec_k_step;
    if (k == 0) {
        row_idle(e);
        return 0;
    }
    if (!o->fixed_k) {
        int B = 0;
        for (int i = 0; i < s->n_running; i++) B += decoding(s->running[i]);
        int base = (B - 1) * (1 + s->spec_k_step);
        double a = row_alpha(e), best = 1.0 / step_time(s, base + P);
        int kk = 0;
        for (int j = 1; j <= k; j++) {
            double r = cllm_spec_expected_tokens(a, j) /
                       (step_time(s, base + P + j) + replay_time(s, a, j, base));
            if (r > best) {
                best = r;
                kk = j;
            }
        }
        /* the times of the sizes a row stopped drafting at are no longer measured: one probe
         * draft now and then keeps them current (a noisy or one-off sample otherwise keeps
         * drafting off for good) */
        k = kk == 0 && e->spec_idle >= probe_idle(s, e, base + P + 1) ? 1 : kk;
        /* a size above the chosen one with few samples may be dear only by a cold first
         * measure: every fourth verify tries it until it has its samples */
        if (kk > 0 && kk < s->spec_k_step && base + P + kk + 1 <= SPEC_COST_N &&
            s->cost.n[base + P + kk + 1] <= SPEC_COST_R && ++e->spec_explore >= 4) {
            k = kk + 1;
            e->spec_explore = 0;
        }
    }
    /* no drafts past what the request can still emit (the last token is the sampler's own) */
    if (k > q->max_out - n_out - 1) k = q->max_out - n_out - 1;
    if (k > s->cfg.max_model_len - e->n_tokens - 1) k = s->cfg.max_model_len - e->n_tokens - 1;
    if (k > budget - P) k = budget - P;
    if (k > s->logit_rows_extra) k = s->logit_rows_extra;
    if (k <= 0) {
        row_idle(e);
        return 0;
    }
    int nd = 0;
    if (o->method == CLLM_SPEC_NGRAM)
        nd = spec_ngram_propose(e->tokens, e->n_tokens, o->prompt_lookup_min, o->prompt_lookup_max,
                                k, e->draft);
    else if (o->method == CLLM_SPEC_SUFFIX)
        nd = spec_suffix_propose(&s->hist, e->tokens, e->n_tokens, o->suffix_max_depth,
                                 o->suffix_max_spec_factor, k, e->draft);
    /* benchmarks: always k drafts, the real verify work. MTP: k placeholders, drafted for all
     * rows at once after planning (sched_mtp_draft_all; any token verifies exactly, so a failed
     * head costs acceptance, never correctness), at most SPEC_VERIFY_ROWS rows a step */
    bool mtp = o->method == CLLM_SPEC_MTP;
    if (mtp ? !s->mtp_failed && s->mtp_rows < SPEC_VERIFY_ROWS && sched_mtp_ready(e)
            : o->synthetic_acceptance > 0)
        while (nd < k) {
            e->draft[nd] = e->tokens[e->n_tokens - 1];
            nd++;
        }
    if (nd == 0) {
        e->spec_idle++;
        return 0;
    }
    /* room: blocks without preempting anyone, the token array, a slot for the state copy */
    int bs = s->cfg.block_size;
    while (nd > 0 &&
           (e->n_computed + P + nd + bs - 1) / bs - e->n_table > blk_available(&s->blocks))
        nd--;
    if (nd == 0 ||
        sched_grow((void **)&e->tokens, &e->cap_tokens, e->n_tokens + nd + 1, sizeof(int32_t)))
        return 0;
    int need = (e->n_computed + P + nd + bs - 1) / bs;
    if (sched_grow((void **)&e->table, &e->cap_table, need, sizeof(int32_t))) return 0;
    if (s->cfg.has_state) { /* the verify forks the live state into it (batch_add_verify) */
        int sl = slot_live_alloc(&s->slots);
        if (sl < 0) return 0;
        e->spec_slot = sl;
    }
    while (e->n_table < need) {
        int b = blk_alloc(&s->blocks);
        CLLM_ASSERT(b >= 0);
        e->table[e->n_table++] = b;
    }
    if (mtp) s->mtp_rows++;
    memcpy(e->tokens + e->n_tokens, e->draft, (size_t)nd * sizeof(int32_t));
    s->logit_rows_extra -= nd;
    e->n_draft = nd;
    e->spec_idle = 0;
    return nd;
}

void sched_spec_seq_done(sched *s, const eng_seq *e) {
    s->stats.spec_draft_hash += e->spec_hash; /* a sum: sequences may interleave any way */
    if (s->cfg.spec.method == CLLM_SPEC_SUFFIX && e->n_tokens > e->n_prompt)
        spec_hist_add(&s->hist, e->tokens + e->n_prompt, e->n_tokens - e->n_prompt);
}

void sched_spec_release(sched *s, eng_seq *e) {
    if (e->spec_slot >= 0) slot_live_release(&s->slots, e->spec_slot);
    e->spec_slot = -1;
    e->n_draft = 0;
}

static bool commit(sched *s, int row, int n, int slot) {
    if (!s->ops.commit_state) return false;
    double t0 = cllm_time_s();
    bool ok = s->ops.commit_state(s->mctx, row, n, slot);
    s->commit_s += cllm_time_s() - t0;
    return ok;
}

void sched_spec_accept(sched *s, const sched_ent *t, const float *rows) {
    eng_seq *e = t->seq;
    eng_req *q = e->req;
    const cllm_spec_opts *o = &s->cfg.spec;
    int nd = t->n_draft, P = t->n_new - nd, V = s->cfg.vocab_size;
    bool st = s->cfg.has_state;
    s->stats.spec_drafts++;
    s->stats.spec_draft_tokens += (uint64_t)nd;
    for (int i = 0; i < nd; i++)
        e->spec_hash = (e->spec_hash ^ (uint64_t)(e->draft[i] + 1)) * 0x100000001b3ull;
    /* attention-only: the pending tokens' KV is final now; each accepted draft's follows */
    if (!st) sched_after_compute(s, e, P, true);
    int j = 0;
    for (int i = 0; i <= nd; i++) {
        int forced = -1;
        if (o->synthetic_acceptance > 0 && i < nd) {
            double u = smp_uniform(q->seed ^ 0x5bd1e995ull, e->index, e->n_tokens - e->n_prompt);
            if (u < o->synthetic_acceptance) forced = e->draft[i];
        }
        if (!sched_sample_tok(s, e, rows + (size_t)i * V, forced)) {
            /* the sequence ended (released with its cache at the accepted tokens) */
            s->stats.spec_accepted_tokens += (uint64_t)j;
            return;
        }
        if (i == nd) break;
        int tok = e->tokens[e->n_tokens - 1];
        if (o->synthetic_acceptance > 0 ? forced < 0 : tok != e->draft[i]) break;
        s->stats.spec_accepted_per_pos[i]++;
        j++;
        if (!st) sched_after_compute(s, e, 1, true);
    }
    s->stats.spec_accepted_tokens += (uint64_t)j;
    sched_mtp_keep(e, e->n_tokens - 1); /* the rows after the first rejected draft are wrong */
    e->acc_hits = SPEC_DECAY * e->acc_hits + j;
    e->acc_trials = SPEC_DECAY * e->acc_trials + j + (j < nd);
    if (st) {
        if (j == nd) { /* the verify's state is exact at the last draft: it becomes the live one */
            slot_live_release(&s->slots, e->slot);
            e->slot = e->spec_slot;
            e->spec_slot = -1;
            sched_after_compute(s, e, P + nd, true);
        } else if (commit(s, (int)(t - s->bent), P + j, e->slot)) {
            /* the live slot moved past the accepted positions from the verify's saved inputs */
            sched_spec_release(s, e);
            sched_after_compute(s, e, P + j, true);
            s->stats.spec_commits++;
        } else {
            sched_spec_release(s, e); /* rolled back: the accepted tokens stay pending */
        }
    }
    e->n_draft = 0;
}
