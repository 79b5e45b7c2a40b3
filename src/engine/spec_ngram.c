/* See spec_ngram.h. Prompt lookup: text that quotes its prompt (extraction, summaries of a
 * report, code edits) repeats long runs of it, so the tokens after the latest earlier occurrence
 * of the current suffix are likely next. */
#include "engine/spec_ngram.h"

#include <string.h>

int spec_ngram_propose(const int32_t *toks, int n_toks, int nmin, int nmax, int k, int32_t *out) {
    if (k <= 0 || nmin < 1 || nmax < nmin) return 0;
    for (int n = nmax; n >= nmin; n--) {
        if (n >= n_toks) continue; /* the suffix needs an earlier occurrence */
        const int32_t *suf = toks + n_toks - n;
        /* latest start strictly before the suffix itself, whose n tokens equal it */
        for (int i = n_toks - n - 1; i >= 0; i--) {
            if (toks[i] != suf[0] || memcmp(toks + i, suf, (size_t)n * sizeof(int32_t)) != 0)
                continue;
            int avail = n_toks - (i + n);
            int m = avail < k ? avail : k;
            memcpy(out, toks + i + n, (size_t)m * sizeof(int32_t));
            return m;
        }
    }
    return 0;
}
