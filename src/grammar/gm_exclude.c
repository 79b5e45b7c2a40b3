/* "Anything but this string": every byte sequence that does not contain pat (tool_choice "none":
 * no "<tool_call>", however the tokens spell it).
 *
 * With pat = p0 p1 .. p(m-1) and p0 occurring nowhere else in pat, the matching automaton's
 * state k (k bytes of pat matched) goes to k+1 on p_k, to 1 on p0 and to 0 on anything else, so
 * the language is  X* ( p0 R* E X* )* ( p0 R* T )?  with X = any byte but p0, and from state 1:
 * R = p1..p(k-1) p0 (back to state 1), E = p1..p(k-1) d, d not p_k or p0 (back to state 0),
 * T = p1..p(k-1) (the output ends there), for k = 1 .. m-1. State m (a full match) is never
 * reached. The output is not held to UTF-8: unconstrained text is not either. */
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_int.h"

/* any byte except x and y (y < 0: only x) */
static int bytes_but(gm_builder *b, int x, int y) {
    bool out[256] = {false};
    out[x] = true;
    if (y >= 0) out[y] = true;
    int xs[3], n = 0;
    for (int lo = 0; lo < 256;) {
        if (out[lo]) {
            lo++;
            continue;
        }
        int hi = lo;
        while (hi + 1 < 256 && !out[hi + 1]) hi++;
        xs[n++] = gb_range(b, lo, hi);
        lo = hi + 1;
    }
    return gb_alt(b, xs, n);
}

cllm_status cllm_gm_excluding(const char *pat, size_t m, const cllm_gm_opts *opts, cllm_gm **out,
                              cllm_error *err) {
    if (m < 2 || m > 256 || memchr(pat + 1, pat[0], m - 1))
        return cllm_err_set(err, CLLM_EINVAL,
                            "excluded string: 2..256 bytes whose first byte does not recur");
    gm_builder b;
    gb_init(&b, opts, err);
    int root = gb_rule(&b, "root");
    const unsigned char *p = (const unsigned char *)pat;
    int n = (int)m - 1;
    int *r = malloc((size_t)n * sizeof(int)), *e = malloc((size_t)n * sizeof(int)),
        *t = malloc((size_t)n * sizeof(int));
    if (!r || !e || !t) {
        free(r), free(e), free(t);
        gb_free(&b);
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    for (int k = 1; k <= n; k++) {
        size_t pl = (size_t)k - 1; /* p1 .. p(k-1) */
        r[k - 1] = gb_seq2(&b, gb_lit(&b, pat + 1, pl), gb_range(&b, p[0], p[0]));
        e[k - 1] = gb_seq2(&b, gb_lit(&b, pat + 1, pl), bytes_but(&b, p[k], p[0]));
        t[k - 1] = gb_lit(&b, pat + 1, pl);
    }
    int block = gb_seq(&b,
                       (int[]){gb_range(&b, p[0], p[0]), gb_rep(&b, gb_alt(&b, r, n), 0, -1),
                               gb_alt(&b, e, n), gb_rep(&b, bytes_but(&b, p[0], -1), 0, -1)},
                       4);
    int tail = gb_opt(&b, gb_seq3(&b, gb_range(&b, p[0], p[0]), gb_rep(&b, gb_alt(&b, r, n), 0, -1),
                                  gb_alt(&b, t, n)));
    gb_rule_set(
        &b, root,
        gb_seq3(&b, gb_rep(&b, bytes_but(&b, p[0], -1), 0, -1), gb_rep(&b, block, 0, -1), tail));
    free(r), free(e), free(t);
    cllm_status st = gb_finish(&b, out);
    gb_free(&b);
    return st;
}
