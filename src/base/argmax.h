/* The greedy argmax of a float row, one definition for the engine's drafts, the evaluator and the
 * measurement tools. */
#ifndef CLLM_BASE_ARGMAX_H
#define CLLM_BASE_ARGMAX_H

/* Index of the largest of x[0..n), n >= 1: the lowest index on ties (the sampler's greedy rule);
 * a NaN is never the largest unless it is x[0]. */
static inline int cllm_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

#endif
