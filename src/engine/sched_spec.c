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
 * The times are kept relative to the host's pace (sched_spec_record), since only their ratios
 * decide. Called by sched.c on the engine thread. */
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
 * keeps the estimate to about the last 20 verifies (30-50 draft positions). At 0.9 (10 verifies)
 * the estimate swung 0.33-0.95 around a synthetic 0.65, and its dips turned drafting off where
 * it paid: quarter shape, tg512, alternated runs, at 0.5 33.86 / 36.55 / 33.63 tok/s against
 * 36.38 / 36.32 / 36.27 with 0.95; at 0.65 level (39.4-40.3 against 39.0-41.4). */
#define SPEC_PRIOR       0.5
#define SPEC_PRIOR_W     2.0
#define SPEC_DECAY       0.95
#define SPEC_PRIOR_DECAY 0.99 /* the engine's prior (prior()): about the last 100 verifies */
/* Steps without a draft after which a row drafts one token anyway, to measure again */
#define SPEC_PROBE_IDLE 32
/* Steps with drafts after which one step drafts nothing: the plain step's size, measured beside
 * the verifies at the same pace, is what they are judged against (sched_spec_record). Where the
 * chosen k is expected to gain g over plain steps, one plain step every N costs about
 * (1 - 1/g) / N of the throughput: N = SPEC_PLAIN_COST x (1 - 1/g) keeps that near 1%, within
 * [SPEC_PLAIN_EVERY, SPEC_PLAIN_MAX]. A simulation of this chooser (tools/sim/spec_chooser.py;
 * B 1, acceptance 0.9, a verify of 1.1 plain steps per token) gained 1.87 -> 1.89x plain. */
#define SPEC_PLAIN_EVERY 16
#define SPEC_PLAIN_MAX   64
#define SPEC_PLAIN_COST  100.0
/* A row alone whose one-draft rate is within this of the plain rate probes after SPEC_PROBE_NEAR
 * idle steps, not SPEC_PROBE_IDLE: near break-even a low estimate costs most and only a draft
 * can correct it (without this, a 0.65 workload on Zen 3, where a verify costs 1.37 plain steps,
 * sat at an estimate of 0.5 for whole requests after a few early rejections; simulated B 1,
 * 0.65: 1.036 -> 1.053x plain with the plain interval above, 0.3: 0.989 -> 0.986) */
#define SPEC_PROBE_NEAR 4
#define SPEC_NEAR       0.92

static bool spec_on(const sched *s) {
    return s->cfg.spec.method != CLLM_SPEC_NONE && s->cfg.spec.num_speculative_tokens > 0;
}

/* The prior of a row's acceptance: the engine's recent rows' (requests of one deployment accept
 * alike; with the fixed 0.5 each new request of a 0.65 workload drafted nothing until its probes
 * had taught it otherwise, a third of a 128-token answer on the quarter shape), itself starting
 * at SPEC_PRIOR. */
static double prior(const sched *s) {
    return (s->spec_hits + SPEC_PRIOR * SPEC_PRIOR_W) / (s->spec_trials + SPEC_PRIOR_W);
}

static double row_alpha(const sched *s, const eng_seq *e) {
    return (e->acc_hits + prior(s) * SPEC_PRIOR_W) / (e->acc_trials + SPEC_PRIOR_W);
}

double cllm_spec_expected_tokens(double a, int k) {
    double sum = 1.0, p = 1.0;
    for (int i = 0; i < k; i++) sum += (p *= a);
    return sum;
}

/* A step of T tokens in units (spec_cost): the measured median, else interpolated between the
 * nearest measured sizes, else extrapolated from the nearest: at a prior of 10% of a one-token
 * step per extra token, or at the slope between the two largest measured sizes below T where
 * that is steeper (a batch's steps: at B = 8 on the quarter shape each verified token and its
 * draft cost about 0.2 of a one-token step, and the prior alone took a 133 ms verify of 16
 * tokens for 84 ms). */
static double step_units(const sched *s, int T) {
    if (T < 1) T = 1;
    if (T > SPEC_COST_N) T = SPEC_COST_N;
    const double *t = s->cost.t;
    if (t[T] > 0) return t[T];
    int lo = T - 1, hi = T + 1;
    while (lo >= 1 && t[lo] <= 0) lo--;
    while (hi <= SPEC_COST_N && t[hi] <= 0) hi++;
    if (lo >= 1 && hi <= SPEC_COST_N)
        return t[lo] + (t[hi] - t[lo]) * (double)(T - lo) / (double)(hi - lo);
    if (lo >= 1) {
        double slope = t[lo] * 0.1 / (1.0 + 0.1 * (lo - 1));
        int l2 = lo - 1;
        while (l2 >= 1 && t[l2] <= 0) l2--;
        if (l2 >= 1 && (t[lo] - t[l2]) / (lo - l2) > slope) slope = (t[lo] - t[l2]) / (lo - l2);
        return t[lo] + slope * (T - lo);
    }
    if (hi <= SPEC_COST_N) return t[hi] * (1.0 + 0.1 * (T - 1)) / (1.0 + 0.1 * (hi - 1));
    return 1.0 + 0.1 * (T - 1);
}

/* Seconds per unit now (1 before any step was measured). */
static double pace(const sched *s) {
    return s->cost.pace > 0 ? s->cost.pace : 1.0;
}

/* Forward seconds for a step of T tokens at the current pace. */
static double step_time(const sched *s, int T) {
    return step_units(s, T) * pace(s);
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

/* One more sample x of a quantity kept as the median of its last SPEC_COST_R samples (ring r,
 * count n; *med updated). The noise here is one-sided and lumpy (a cold page on the first
 * verify, the first MTP call, another process), and a mean kept one 74 ms first sample of a
 * 29 ms verify long enough to switch drafting off for most of a bench (2026-12-05); a median
 * drops such a sample as soon as two normal ones follow. The first sample is the one that meets
 * cold pages and first allocations: not kept (the caller counts it). */
static void ring_add(double *r, int *n, double *med, double x) {
    int i = (*n)++ - 1, m = i + 1 < SPEC_COST_R ? i + 1 : SPEC_COST_R;
    if (i < 0) return;
    r[i % SPEC_COST_R] = x;
    double v[SPEC_COST_R];
    memcpy(v, r, (size_t)m * sizeof(double));
    for (int a = 1; a < m; a++) /* insertion sort of at most SPEC_COST_R values */
        for (int j = a; j > 0 && v[j - 1] > v[j]; j--) {
            double y = v[j];
            v[j] = v[j - 1];
            v[j - 1] = y;
        }
    *med = m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

/* The pace. A shared host's bandwidth swings: on the Zen 3 box of 2026-12-06 plain steps of the
 * quarter shape ran 17-22 ms for a second, then 35-44 ms, back and forth, and the old medians of
 * seconds per size compared a verify timed in a slow swing with a plain step timed in a fast
 * one (t(2) 62 ms against t(1) 22 ms, while a verify cost 1.3-1.5 plain steps at one pace), so
 * drafting went off and on with the host. Now each step is measured against the previous one: a
 * step of a size whose median is known sets the pace (seconds / its units), and the next step's
 * sample is its seconds / that pace. Only a step whose size differs from the one before is kept
 * as a sample (and a size's first two): steps of one size in a row tell the pace and nothing of
 * the ratio between sizes, and kept they froze whatever ratio the first verify had met (a T 2
 * median at 0.79 of T 1's, from a slow plain step before it). The ratios are taken where sizes
 * meet (a verify after a plain step, a probe, SPEC_PLAIN_EVERY), and the unit itself is
 * arbitrary (the first step's prior): only ratios decide. */
void sched_spec_record(sched *s, int step_tokens, double seconds, double draft_s, int passes) {
    if (!spec_on(s) || step_tokens < 1 || step_tokens > SPEC_COST_N || !(seconds > 0)) return;
    spec_cost *c = &s->cost;
    const int T = step_tokens;
    LOG_DEBUG("spec: step of %d tokens %.2f ms, head passes %d %.2f ms", T, 1e3 * seconds, passes,
              1e3 * draft_s);
    if (c->n[T] == 0) { /* cold: counted, not kept, and no pace from it */
        c->n[T]++;
        return;
    }
    const double known = c->t[T]; /* this size's units before this sample; 0 = none yet */
    if (c->pace <= 0) c->pace = seconds / step_units(s, T); /* the unit: this size's prior */
    if (T != c->prev_T || c->n[T] < 3) ring_add(c->r[T], &c->n[T], &c->t[T], seconds / c->pace);
    if (passes > 0 && draft_s > 0)
        ring_add(c->pass_r, &c->pass_n, &c->pass_t, draft_s / passes / c->pace);
    if (known > 0) c->pace = seconds / known;
    c->prev_T = T;
}

/* Seconds the drafts of a step with k drafts per row add: k head passes (MTP; until measured a
 * prior of 8% of a one-token step each, about the quarter shape's), nothing for the n-gram and
 * suffix drafters (a lookup in the plan). */
static double draft_time(const sched *s, int k) {
    if (s->cfg.spec.method != CLLM_SPEC_MTP || k <= 0) return 0.0;
    return k * pace(s) * (s->cost.pass_t > 0 ? s->cost.pass_t : 0.08 * step_units(s, 1));
}

/* Idle steps after which row e drafts one token to measure again, in a step of B decoding rows
 * whose probe would run T tokens: alone (B = 1) soon while that size has few samples and the
 * row's drafts were accepted often enough to be worth it (one odd sample must not decide for
 * long), rarely otherwise. In a batch the rows go idle together, so their probes fall in one
 * step that costs what a verify of every row costs (at B = 8 on the quarter shape 133 ms against
 * a 57 ms plain step): one every SPEC_PROBE_IDLE x B steps keeps that under 1%. */
static int probe_idle(const sched *s, const eng_seq *e, int B, int T) {
    if (T > SPEC_COST_N) T = SPEC_COST_N;
    if (B > 1) return SPEC_PROBE_IDLE * B;
    double a = row_alpha(s, e);
    if (s->cost.n[T] <= SPEC_COST_R && a >= 0.3) return SPEC_PROBE_NEAR;
    if (T >= 2 &&
        (1.0 + a) / (step_time(s, T) + draft_time(s, 1)) >= SPEC_NEAR / step_time(s, T - 1))
        return SPEC_PROBE_NEAR;
    return SPEC_PROBE_IDLE;
}

static bool decoding(const eng_seq *e) {
    return e->n_tokens > e->n_prompt && e->n_tokens - e->n_computed <= SPEC_MAX_PENDING;
}

/* A decoding row that may draft: not one of a no_speculation request's (engine.h), whose row
 * stays one token in every step. */
static bool may_draft(const eng_seq *e) {
    return decoding(e) && !e->req->sp.no_speculation;
}

/* The running rows that may draft (returned) and the other decoding rows (*plain); *alpha, when
 * not NULL, the sum of the drafting rows' acceptance. */
static int drafting_rows(const sched *s, int *plain, double *alpha) {
    int B = 0;
    *plain = 0;
    if (alpha) *alpha = 0;
    for (int i = 0; i < s->n_running; i++)
        if (may_draft(s->running[i])) {
            if (alpha) *alpha += row_alpha(s, s->running[i]);
            B++;
        } else {
            *plain += decoding(s->running[i]);
        }
    return B;
}

void sched_spec_begin_step(sched *s) {
    s->spec_k_step = 0;
    s->spec_one = NULL;
    if (!spec_on(s)) return;
    int K = s->cfg.spec.num_speculative_tokens, Bp;
    double a;
    int B = drafting_rows(s, &Bp, &a);
    if (B == 0) return;
    int off = s->cfg.spec.disable_by_batch_size;
    if (off > 0 && s->n_running >= off) return;
    if (s->cfg.spec.fixed_k) {
        s->spec_k_step = K;
        return;
    }
    if (s->spec_streak >= (s->spec_plain_every > 0 ? s->spec_plain_every : SPEC_PLAIN_EVERY)) {
        /* the plain step beside the verifies */
        s->spec_streak = 0;
        return;
    }
    /* the plain step of this batch is measured first (its first sample is dropped, so two
     * steps): a verify's time is judged against it, and without it the prior's guess stands
     * for it, which at B = 8 took a 57 ms step for 90 ms and kept a 133 ms verify chosen */
    if (s->cost.n[B + Bp < SPEC_COST_N ? B + Bp : SPEC_COST_N] < 2) return;
    a /= B;
    const double plain = (B + Bp) / step_time(s, B + Bp);
    double best = plain;
    for (int k = 1; k <= K; k++) {
        double r = (B * cllm_spec_expected_tokens(a, k) + Bp) /
                   (step_time(s, B * (1 + k) + Bp) + draft_time(s, k));
        if (r > best) {
            best = r;
            s->spec_k_step = k;
        }
    }
    if (s->spec_k_step > 0) {
        double n = SPEC_PLAIN_COST * (1.0 - plain / best);
        s->spec_plain_every = n < SPEC_PLAIN_EVERY ? SPEC_PLAIN_EVERY
                              : n > SPEC_PLAIN_MAX ? SPEC_PLAIN_MAX
                                                   : (int)n;
    }
    /* a batch would verify every row at a size never measured: one row drafts one token first
     * (a step of B + 1), so the slope from the plain step prices the bigger sizes (step_time)
     * before a whole batch pays for a verify that may not pay (at B = 8 the first two cost 5%
     * of a 128-token run) */
    if (B + Bp > 1 && s->spec_k_step > 0 && B + Bp + 1 <= SPEC_COST_N && s->cost.n[B + Bp + 1] < 2)
        for (int i = 0; i < s->n_running && !s->spec_one; i++)
            if (may_draft(s->running[i])) {
                s->spec_one = s->running[i];
                s->spec_k_step = 1;
            }
    /* what the choice saw (--log-level debug): B rows' mean acceptance, the step times it used
     * (B, 2B, 3B, 4B tokens; interpolated where not measured) and their sample counts; only
     * computed when the line is printed (every step runs this) */
    int sz[4];
    for (int i = 0; i < 4; i++) sz[i] = B * (i + 1) < SPEC_COST_N ? B * (i + 1) : SPEC_COST_N;
    if (cllm_log_enabled(CLLM_LOG_DEBUG))
        LOG_DEBUG("spec: B %d a %.3f t(B..4B) %.2f %.2f %.2f %.2f ms (n %d %d %d %d) pass %.2f ms "
                  "k %d",
                  B, a, 1e3 * step_time(s, sz[0]), 1e3 * step_time(s, sz[1]),
                  1e3 * step_time(s, sz[2]), 1e3 * step_time(s, sz[3]), s->cost.n[sz[0]],
                  s->cost.n[sz[1]], s->cost.n[sz[2]], s->cost.n[sz[3]], 1e3 * draft_time(s, 1),
                  s->spec_k_step);
    /* a row idle for long probes one draft (sched_spec_plan): the step must allow one */
    for (int i = 0; s->spec_k_step == 0 && i < s->n_running; i++)
        if (may_draft(s->running[i]) &&
            s->running[i]->spec_idle >= probe_idle(s, s->running[i], B, B + Bp + 1))
            s->spec_k_step = 1;
    s->spec_streak = s->spec_k_step > 0 ? s->spec_streak + 1 : 0;
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
    if (!spec_on(s) || !may_draft(e)) return 0;
    const cllm_spec_opts *o = &s->cfg.spec;
    eng_req *q = e->req;
    int P = e->n_tokens - e->n_computed;
    int n_out = e->n_tokens - e->n_prompt;
    /* this row's k: the step's, cut where its own acceptance stops paying */
    int k = s->spec_k_step;
    if (k == 0 || (s->spec_one && s->spec_one != e)) {
        row_idle(e);
        return 0;
    }
    if (!o->fixed_k && !s->spec_one) {
        int Bp, B = drafting_rows(s, &Bp, NULL); /* this row among the B */
        int base = (B - 1) * (1 + s->spec_k_step) + Bp;
        double a = row_alpha(s, e), best = 1.0 / step_time(s, base + P);
        int kk = 0;
        for (int j = 1; j <= k; j++) {
            /* in a batch the head's passes are the step's (every drafting row shares them) */
            double r = cllm_spec_expected_tokens(a, j) /
                       (step_time(s, base + P + j) + (B > 1 ? 0.0 : draft_time(s, j)) +
                        replay_time(s, a, j, base));
            if (r > best) {
                best = r;
                kk = j;
            }
        }
        /* the times of the sizes a row stopped drafting at are no longer measured: one probe
         * draft now and then keeps them current (a noisy or one-off sample otherwise keeps
         * drafting off for good) */
        k = kk == 0 && e->spec_idle >= probe_idle(s, e, B, base + P + 1) ? 1 : kk;
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
    s->spec_hits = SPEC_PRIOR_DECAY * s->spec_hits + j;
    s->spec_trials = SPEC_PRIOR_DECAY * s->spec_trials + j + (j < nd);
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
