/* See spec_suffix.h. Matching is a linear scan (the history is bounded: a few tens of thousands
 * of tokens scan in tens of microseconds, against a decode step's tens of milliseconds); vLLM's
 * suffix trees answer the same question in time independent of the history's size. Among equal
 * matches the most recent continuation is taken (vLLM ranks continuations by frequency). */
#include "engine/spec_suffix.h"

#include <stdlib.h>
#include <string.h>

int spec_hist_init(spec_hist *h, int max_requests, int max_tokens) {
    memset(h, 0, sizeof(*h));
    if (max_requests < 1 || max_tokens < 2) return 0;
    h->tok = malloc((size_t)max_tokens * sizeof(int32_t));
    h->starts = malloc((size_t)max_requests * sizeof(uint64_t));
    if (!h->tok || !h->starts) {
        spec_hist_free(h);
        return -1;
    }
    h->cap = max_tokens;
    h->max_req = max_requests;
    return 0;
}

void spec_hist_free(spec_hist *h) {
    free(h->tok);
    free(h->starts);
    memset(h, 0, sizeof(*h));
}

static void put(spec_hist *h, int32_t t) {
    h->tok[h->head] = t;
    h->head = h->head + 1 == h->cap ? 0 : h->head + 1;
    if (h->len < h->cap) h->len++;
    h->written++;
}

void spec_hist_add(spec_hist *h, const int32_t *toks, int n) {
    if (!h->cap || n <= 0) return;
    if (n > h->cap - 1) { /* keep the tail of a very long output */
        toks += n - (h->cap - 1);
        n = h->cap - 1;
    }
    if (h->n_req == h->max_req) {
        /* forget the oldest request: blank what of it the ring still holds */
        uint64_t s0 = h->starts[h->req_head];
        uint64_t s1 = h->n_req > 1 ? h->starts[(h->req_head + 1) % h->max_req] : h->written;
        uint64_t lo = h->written - (uint64_t)h->len;
        for (uint64_t a = s0 > lo ? s0 : lo; a < s1; a++) h->tok[a % (uint64_t)h->cap] = -1;
        h->req_head = (h->req_head + 1) % h->max_req;
        h->n_req--;
    }
    h->starts[(h->req_head + h->n_req) % h->max_req] = h->written;
    h->n_req++;
    for (int i = 0; i < n; i++) put(h, toks[i]);
    put(h, -1);
}

/* Length of the common suffix of a[0, na) and b[0, nb), up to max (b may hold -1 separators,
 * which never match a token). */
static int common_suffix(const int32_t *a, int na, const int32_t *b, int nb, int max) {
    int l = 0;
    while (l < max && l < na && l < nb && a[na - 1 - l] == b[nb - 1 - l]) l++;
    return l;
}

int spec_suffix_propose(const spec_hist *h, const int32_t *toks, int n, int max_depth,
                        double spec_factor, int k, int32_t *out) {
    if (k <= 0 || n < 1 || max_depth < 1) return 0;
    int best = 0, src = 0; /* src 1: toks, 2: history */
    int at = -1;           /* index after the match: in toks, or linear in the history */
    int start = h->len ? ((h->head - h->len) % h->cap + h->cap) % h->cap : 0;
    /* own context: occurrences ending before the last token */
    for (int e = n - 1; e >= 1; e--) {
        if (toks[e - 1] != toks[n - 1]) continue;
        int l = common_suffix(toks, n, toks, e, max_depth);
        if (l > best) {
            best = l;
            src = 1;
            at = e;
            if (l == max_depth) break;
        }
    }
    /* history: walk it oldest to newest as one linear array (two pieces of the ring) */
    if (h->len > 1 && best < max_depth) {
        int32_t last = toks[n - 1];
        for (int i = h->len - 2; i >= 0; i--) { /* i: linear index of a match's last token */
            int ri = (start + i) % h->cap;
            if (h->tok[ri] != last) continue;
            int l = 1;
            while (l < max_depth && l < n && i - l >= 0) {
                int32_t t = h->tok[(start + i - l) % h->cap];
                if (t != toks[n - 1 - l]) break;
                l++;
            }
            if (l > best) {
                best = l;
                src = 2;
                at = i + 1;
                if (l == max_depth) break;
            }
        }
    }
    if (!best) return 0;
    int m = (int)(spec_factor * best);
    if (m < 1) m = 1;
    if (m > k) m = k;
    int w = 0;
    if (src == 1) {
        for (int i = at; i < n && w < m; i++) out[w++] = toks[i];
    } else {
        for (int i = at; i < h->len && w < m; i++) {
            int32_t t = h->tok[(start + i) % h->cap];
            if (t < 0) break;
            out[w++] = t;
        }
    }
    return w;
}
