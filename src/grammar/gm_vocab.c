/* The vocabulary as a byte trie in DFS preorder (gm_int.h), built once per tokenizer: tokens
 * sorted by their bytes, each contributing the nodes past its common prefix with the previous
 * one. A subtree is a contiguous node range and its tokens a contiguous slice, so a mask walk
 * skips a dead prefix in O(1). */
#include <stdlib.h>
#include <string.h>

#include "grammar/gm_int.h"
#include "tokenizer/tokenizer.h"

static const cllm_gm_vocab *sort_v;

static int cmp_tok(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    uint32_t lx = sort_v->len[x], ly = sort_v->len[y];
    int c = memcmp(sort_v->bytes[x], sort_v->bytes[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x - y;
}

void cllm_gm_vocab_free(cllm_gm_vocab *v) {
    if (!v) return;
    for (int i = 0; v->bytes && i < v->V; i++) free(v->bytes[i]);
    free(v->bytes);
    free(v->len);
    free(v->byte);
    free(v->end);
    free(v->tok0);
    free(v->tok);
    free(v->tsub);
    free(v->depth);
    free(v->eos);
    free(v->valid);
    free(v);
}

int cllm_gm_vocab_size(const cllm_gm_vocab *v) {
    return v->V;
}

cllm_status cllm_gm_vocab_new(const char *const *bytes, const size_t *lens, const bool *exclude,
                              int n_vocab, const int *eos, int n_eos, cllm_gm_vocab **out,
                              cllm_error *err) {
    *out = NULL;
    cllm_gm_vocab *v = calloc(1, sizeof(*v));
    if (!v) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    v->V = n_vocab;
    v->bytes = calloc((size_t)n_vocab, sizeof(char *));
    v->len = calloc((size_t)n_vocab, sizeof(uint32_t));
    v->eos = malloc(((size_t)n_eos + 1) * sizeof(int));
    v->valid = calloc((size_t)(n_vocab + 31) / 32, sizeof(uint32_t));
    int *ids = malloc(((size_t)n_vocab + 1) * sizeof(int));
    if (!v->bytes || !v->len || !v->eos || !v->valid || !ids) goto oom;
    v->n_eos = n_eos;
    if (n_eos) memcpy(v->eos, eos, (size_t)n_eos * sizeof(int));
    int n = 0;
    size_t total = 0;
    for (int i = 0; i < n_vocab; i++) {
        bool is_eos = false;
        for (int k = 0; k < n_eos; k++) is_eos |= eos[k] == i;
        if (is_eos || !bytes[i] || !lens[i] || lens[i] > 0xFFFF || (exclude && exclude[i]))
            continue;
        v->bytes[i] = malloc(lens[i]);
        if (!v->bytes[i]) goto oom;
        memcpy(v->bytes[i], bytes[i], lens[i]);
        v->len[i] = (uint32_t)lens[i];
        v->valid[i >> 5] |= 1u << (i & 31);
        ids[n++] = i;
        v->n_valid = n;
        total += lens[i];
    }
    sort_v = v; /* qsort has no context argument in C11; callers build vocabularies serially */
    qsort(ids, (size_t)n, sizeof(int), cmp_tok);
    size_t cap = total + 1;
    v->byte = malloc(cap);
    v->end = malloc(cap * sizeof(int32_t));
    v->tok0 = malloc((cap + 1) * sizeof(int32_t));
    v->tsub = malloc(cap * sizeof(int32_t));
    v->depth = malloc(cap * sizeof(uint16_t));
    v->tok = malloc(((size_t)n + 1) * sizeof(int32_t));
    int *open = malloc((size_t)(0x10000 + 2) * sizeof(int)); /* open node per depth */
    if (!v->byte || !v->end || !v->tok0 || !v->tsub || !v->depth || !v->tok || !open) {
        free(open);
        goto oom;
    }
    int nn = 1, nt = 0, prev = -1, maxd = 0;
    v->byte[0] = 0;
    v->depth[0] = 0;
    v->tok0[0] = 0;
    open[0] = 0;
    for (int k = 0; k < n; k++) {
        int t = ids[k];
        uint32_t l = v->len[t], lcp = 0;
        if (prev >= 0) {
            uint32_t lp = v->len[prev];
            while (lcp < l && lcp < lp && v->bytes[prev][lcp] == v->bytes[t][lcp]) lcp++;
            /* close the nodes deeper than the common prefix */
            for (uint32_t d = lp; d > lcp; d--) v->end[open[d]] = nn;
        }
        for (uint32_t d = lcp + 1; d <= l; d++) {
            v->byte[nn] = (uint8_t)v->bytes[t][d - 1];
            v->depth[nn] = (uint16_t)d;
            v->tok0[nn] = nt;
            open[d] = nn++;
        }
        if ((int)l > maxd) maxd = (int)l;
        v->tok[nt++] = t;
        prev = t;
    }
    if (prev >= 0)
        for (uint32_t d = v->len[prev]; d > 0; d--) v->end[open[d]] = nn;
    v->end[0] = nn;
    v->tok0[nn] = nt;
    free(open);
    v->n_nodes = nn;
    v->max_depth = maxd;
    for (int i = 0; i < nn; i++) v->tsub[i] = v->tok0[v->end[i]];
    free(ids);
    *out = v;
    return CLLM_OK;
oom:
    free(ids);
    cllm_gm_vocab_free(v);
    return cllm_err_set(err, CLLM_ENOMEM, "out of memory building the token trie");
}

cllm_status cllm_gm_vocab_from_tok(const struct cllm_tok *tok, const int *eos, int n_eos,
                                   cllm_gm_vocab **out, cllm_error *err) {
    int V = cllm_tok_n_vocab(tok);
    const char **b = calloc((size_t)V, sizeof(char *));
    size_t *l = calloc((size_t)V, sizeof(size_t));
    bool *ex = calloc((size_t)V, sizeof(bool));
    if (!b || !l || !ex) {
        free(b), free(l), free(ex);
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    for (int i = 0; i < V; i++) {
        b[i] = cllm_tok_token_bytes(tok, i, &l[i]);
        /* special tokens are dropped from the text (skip_special_tokens) and never part of a
         * structure; other added tokens (<think>, <tool_call>) are text like any other */
        ex[i] = cllm_tok_is_special(tok, i);
    }
    cllm_status st = cllm_gm_vocab_new(b, l, ex, V, eos, n_eos, out, err);
    free(b), free(l), free(ex);
    return st;
}
