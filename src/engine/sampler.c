/* Sampler (see sampler.h for the order of processing and the reproducibility rule). */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"

int smp_init(smp_scratch *s, int vocab_size) {
    memset(s, 0, sizeof(*s));
    s->V = vocab_size;
    s->x = malloc((size_t)vocab_size * sizeof(float));
    s->pair = malloc((size_t)vocab_size * sizeof(smp_pair));
    s->cnt = calloc((size_t)vocab_size, sizeof(int));
    s->seen = calloc((size_t)vocab_size, 1);
    s->ids = malloc((size_t)vocab_size * sizeof(int32_t));
    if (!s->x || !s->pair || !s->cnt || !s->seen || !s->ids) {
        smp_free(s);
        return -1;
    }
    return 0;
}

void smp_free(smp_scratch *s) {
    free(s->x);
    free(s->pair);
    free(s->cnt);
    free(s->seen);
    free(s->ids);
    memset(s, 0, sizeof(*s));
}

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double smp_uniform(uint64_t seed, int index, int step) {
    uint64_t z = mix64(seed + 0x9e3779b97f4a7c15ull);
    z = mix64(z ^ ((uint64_t)(uint32_t)index * 0xd1342543de82ef95ull));
    z = mix64(z ^ ((uint64_t)(uint32_t)step + 0x632be59bd9b4e019ull));
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

/* Descending x, ties by ascending id: a total order, so the result never depends on qsort. */
static int pair_desc(const void *a, const void *b) {
    const smp_pair *p = a, *q = b;
    if (p->x != q->x) return p->x < q->x ? 1 : -1;
    return p->id - q->id;
}

/* Quickselect: moves the k best pairs (pair_desc order) to c[0..k). O(n) expected. */
static void select_top(smp_pair *c, int n, int k) {
    int lo = 0, hi = n - 1;
    uint32_t r = 2463534242u;
    while (lo < hi) {
        r ^= r << 13, r ^= r >> 17, r ^= r << 5;
        smp_pair piv = c[lo + (int)(r % (uint32_t)(hi - lo + 1))];
        int i = lo, j = hi;
        while (i <= j) {
            while (pair_desc(&c[i], &piv) < 0) i++;
            while (pair_desc(&c[j], &piv) > 0) j--;
            if (i <= j) {
                smp_pair t = c[i];
                c[i] = c[j];
                c[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

static void fill_logprobs(smp_scratch *s, const float *logits, int chosen, int top,
                          cllm_token_logprob *lp) {
    int V = s->V;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    lp[0].token = chosen;
    lp[0].logprob = (float)(logits[chosen] - lse);
    if (top <= 0) return;
    if (top > V) top = V;
    /* Partial selection: keep the best `top` in a small sorted array. */
    smp_pair *best = s->pair;
    int n = 0;
    for (int i = 0; i < V; i++) {
        smp_pair c = {logits[i], i};
        if (n == top && pair_desc(&c, &best[n - 1]) >= 0) continue;
        int j = n < top ? n++ : n - 1;
        while (j > 0 && pair_desc(&c, &best[j - 1]) < 0) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = c;
    }
    for (int k = 0; k < n; k++) {
        lp[1 + k].token = best[k].id;
        lp[1 + k].logprob = (float)(best[k].x - lse);
    }
}

/* Grammar mask: the allowed ids in ascending order (bits of allow, lowest first). A structured
 * output usually allows a few hundred of 248k tokens, so the passes below touch only those
 * instead of writing -inf over the whole vocabulary and then scanning it. Returns the count. */
static int allowed_ids(const uint32_t *allow, int V, int32_t *ids) {
    int n = 0;
    for (int w = 0; w * 32 < V; w++) {
        uint32_t m = allow[w];
        while (m) {
            int i = w * 32 + __builtin_ctz(m);
            m &= m - 1;
            if (i < V) ids[n++] = i;
        }
    }
    return n;
}

/* The raw argmax among allowed tokens (all when allow is NULL): the fallback when penalties or
 * forbidden ids left nothing, which must still respect the grammar. */
static int raw_argmax(const float *logits, int V, const uint32_t *allow) {
    int tok = -1;
    for (int i = 0; i < V; i++) {
        if (allow && !(allow[i >> 5] >> (i & 31) & 1)) continue;
        if (tok < 0 || logits[i] > logits[tok]) tok = i;
    }
    return tok < 0 ? 0 : tok;
}

int smp_sample(smp_scratch *s, const cllm_sampling *p, const smp_input *in,
               cllm_token_logprob *lp) {
    int V = s->V;
    float *x = s->x;
    memcpy(x, in->logits, (size_t)V * sizeof(float));
    for (int i = 0; i < p->n_logit_bias; i++) {
        int id = p->logit_bias_ids[i];
        if (id >= 0 && id < V) x[id] += p->logit_bias_vals[i];
    }
    for (int i = 0; i < in->n_forbid; i++)
        if (in->forbid[i] >= 0 && in->forbid[i] < V) x[in->forbid[i]] = -INFINITY;
    int n_allow = in->allow ? allowed_ids(in->allow, V, s->ids) : 0;

    bool rep = p->repetition_penalty > 0 && p->repetition_penalty != 1.0;
    bool freq = p->frequency_penalty != 0.0 || p->presence_penalty != 0.0;
    if (rep) {
        float r = (float)p->repetition_penalty;
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *t = pass ? in->out : in->prompt;
            int n = pass ? in->n_out : in->n_prompt;
            for (int i = 0; i < n; i++) {
                int id = t[i];
                if (id < 0 || id >= V || s->seen[id]) continue;
                s->seen[id] = 1;
                x[id] = x[id] > 0 ? x[id] / r : x[id] * r;
            }
        }
        for (int pass = 0; pass < 2; pass++) {
            const int32_t *t = pass ? in->out : in->prompt;
            int n = pass ? in->n_out : in->n_prompt;
            for (int i = 0; i < n; i++)
                if (t[i] >= 0 && t[i] < V) s->seen[t[i]] = 0;
        }
    }
    if (freq) {
        for (int i = 0; i < in->n_out; i++)
            if (in->out[i] >= 0 && in->out[i] < V) s->cnt[in->out[i]]++;
        for (int i = 0; i < in->n_out; i++) {
            int id = in->out[i];
            if (id < 0 || id >= V || s->cnt[id] == 0) continue;
            x[id] -= (float)(p->frequency_penalty * s->cnt[id] + p->presence_penalty);
            s->cnt[id] = 0;
        }
    }

    int tok = 0;
    if (p->temperature < 1e-5) {
        if (in->allow) {
            tok = n_allow ? s->ids[0] : 0;
            for (int k = 1; k < n_allow; k++)
                if (x[s->ids[k]] > x[tok]) tok = s->ids[k];
            if (!n_allow || x[tok] == -INFINITY) tok = raw_argmax(in->logits, V, in->allow);
        } else {
            for (int i = 1; i < V; i++)
                if (x[i] > x[tok]) tok = i;
            if (x[tok] == -INFINITY) tok = raw_argmax(in->logits, V, in->allow);
        }
    } else {
        float inv_t = (float)(1.0 / p->temperature);
        float mx = -INFINITY;
        if (in->allow) {
            for (int k = 0; k < n_allow; k++) {
                int i = s->ids[k];
                x[i] *= inv_t;
                if (x[i] > mx) mx = x[i];
            }
        } else {
            for (int i = 0; i < V; i++) {
                x[i] *= inv_t;
                if (x[i] > mx) mx = x[i];
            }
        }
        int top_k = p->top_k > 0 && p->top_k < V ? p->top_k : V;
        bool sorted = top_k < V || (p->top_p > 0 && p->top_p < 1.0) || p->min_p > 0;
        smp_pair *c = s->pair;
        int n = 0;
        /* Tokens more than 30 nats below the best (relative probability < 1e-13, all of them
         * together < V * 1e-13) are dropped before sorting: with a 248k vocabulary this keeps the
         * sort to the few plausible tokens. */
        float floor_x = sorted ? mx - 30.0f : -INFINITY;
        if (in->allow) {
            for (int k = 0; k < n_allow; k++) {
                int i = s->ids[k];
                if (x[i] > -INFINITY && x[i] >= floor_x) c[n++] = (smp_pair){x[i], i};
            }
        } else {
            for (int i = 0; i < V; i++)
                if (x[i] > -INFINITY && x[i] >= floor_x) c[n++] = (smp_pair){x[i], i};
        }
        if (n == 0) { /* everything forbidden: fall back to the raw argmax */
            tok = raw_argmax(in->logits, V, in->allow);
            goto done;
        }
        if (sorted && top_k < n) {
            select_top(c, n, top_k); /* the best top_k first, in any order */
            n = top_k;
        }
        if (sorted) qsort(c, (size_t)n, sizeof(smp_pair), pair_desc);
        if (n > top_k) n = top_k;
        double sum = 0.0;
        for (int i = 0; i < n; i++) {
            c[i].x = (float)exp((double)c[i].x - mx); /* now unnormalised probabilities */
            sum += c[i].x;
        }
        if (p->top_p > 0 && p->top_p < 1.0) {
            double cum = 0.0, lim = p->top_p * sum;
            for (int i = 0; i < n; i++) {
                cum += c[i].x;
                if (cum >= lim) {
                    n = i + 1;
                    break;
                }
            }
        }
        if (p->min_p > 0) {
            double pmax = c[0].x, lim = p->min_p * pmax;
            int k = 1;
            while (k < n && c[k].x >= lim) k++;
            n = k;
        }
        sum = 0.0;
        for (int i = 0; i < n; i++) sum += c[i].x;
        double u = smp_uniform(in->seed, in->index, in->step) * sum, cum = 0.0;
        tok = c[n - 1].id;
        for (int i = 0; i < n; i++) {
            cum += c[i].x;
            if (u < cum) {
                tok = c[i].id;
                break;
            }
        }
    }
done:
    if (lp && p->logprobs >= 0) fill_logprobs(s, in->logits, tok, p->logprobs, lp);
    return tok;
}

int smp_reduce_k(const cllm_sampling *p, int vocab_size, bool forbid, bool mask, float *scale) {
    *scale = 1.0f;
    if (p->logprobs >= 0 || p->n_logit_bias > 0 || forbid || mask) return 0;
    if ((p->repetition_penalty > 0 && p->repetition_penalty != 1.0) ||
        p->frequency_penalty != 0.0 || p->presence_penalty != 0.0)
        return 0;
    if (p->temperature < 1e-5) return 1; /* smp_sample's greedy test */
    if (p->top_k <= 0 || p->top_k >= vocab_size || p->top_k > CLLM_LOGITS_TOPK_MAX) return 0;
    *scale = (float)(1.0 / p->temperature); /* smp_sample's inv_t */
    return p->top_k;
}
