/* See seq_runner.h. */
#include "model/seq_runner.h"

#include "base/file.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cllm_parse_token_list(const char *arg, int32_t **out, cllm_error *err) {
    *out = NULL;
    char *owned = NULL;
    const char *s = arg;
    if (arg[0] == '@') {
        owned = cllm_read_file(arg + 1, 0, NULL, err);
        if (!owned) return -1;
        s = owned;
    }
    size_t cap = 64, n = 0;
    int32_t *v = malloc(cap * sizeof(*v));
    while (v) {
        while (*s && (isspace((unsigned char)*s) || *s == ',')) s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x < 0 || x > INT32_MAX) {
            cllm_err_set(err, CLLM_EINVAL, "bad token id near '%.20s'", s);
            free(v);
            free(owned);
            return -1;
        }
        if (n == cap) {
            int32_t *nv = realloc(v, 2 * cap * sizeof(*v));
            if (!nv) {
                free(v);
                v = NULL;
                break;
            }
            v = nv;
            cap *= 2;
        }
        v[n++] = (int32_t)x;
        s = end;
    }
    free(owned);
    if (!v) {
        cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        return -1;
    }
    if (n == 0) {
        free(v);
        cllm_err_set(err, CLLM_EINVAL, "empty prompt (no token ids)");
        return -1;
    }
    *out = v;
    return (int)n;
}

cllm_status cllm_seq_runner_open(cllm_seq_runner *r, const char *model_dir,
                                 const cllm_fwd_opts *fwd, int threads, int max_tokens,
                                 int block_size, cllm_kv_dtype kv_dtype, cllm_error *err) {
    memset(r, 0, sizeof(*r));
    cllm_status s = cllm_model_load(model_dir, fwd, &r->m, err);
    if (s != CLLM_OK) return s;
    int maxp = cllm_model_config(r->m)->max_position_embeddings;
    if (max_tokens > maxp) max_tokens = maxp;
    if (max_tokens < 1) max_tokens = 1;
    if (threads != 1) {
        r->pool = cllm_pool_create(threads);
        if (!r->pool) {
            cllm_seq_runner_close(r);
            return cllm_err_set(err, CLLM_ENOMEM, "cannot start threads");
        }
    }
    r->n_table = (max_tokens + block_size - 1) / block_size;
    r->table = malloc((size_t)r->n_table * sizeof(int32_t));
    if (!r->table) {
        cllm_seq_runner_close(r);
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    /* blocks handed out in reverse so the table is a real indirection, not the identity */
    for (int i = 0; i < r->n_table; i++) r->table[i] = r->n_table - 1 - i;
    if ((s = cllm_fwd_ctx_create(r->m, r->pool, &r->ctx, err)) != CLLM_OK ||
        (s = cllm_kv_pool_init(&r->kv, r->m, r->n_table, block_size, kv_dtype, err)) != CLLM_OK ||
        (s = cllm_state_pool_init(&r->st, r->m, 1, CLLM_KV_F32, err)) != CLLM_OK) {
        cllm_seq_runner_close(r);
        return s;
    }
    return CLLM_OK;
}

cllm_status cllm_seq_runner_set_state_dtype(cllm_seq_runner *r, cllm_kv_dtype dtype,
                                            cllm_error *err) {
    if (r->pos != 0)
        return cllm_err_set(err, CLLM_EINVAL, "state dtype: the sequence has started already");
    cllm_state_pool_free(&r->st);
    return cllm_state_pool_init(&r->st, r->m, 1, dtype, err);
}

void cllm_seq_runner_close(cllm_seq_runner *r) {
    cllm_fwd_ctx_free(r->ctx);
    cllm_kv_pool_free(&r->kv);
    cllm_state_pool_free(&r->st);
    free(r->table);
    if (r->pool) cllm_pool_free(r->pool);
    cllm_model_free(r->m);
    memset(r, 0, sizeof(*r));
}

cllm_status cllm_seq_runner_step(cllm_seq_runner *r, const int32_t *toks, int n,
                                 cllm_logits_mode mode, float *logits, cllm_error *err) {
    cllm_seq_batch sq = {toks, n, r->pos, r->table, r->n_table, 0, mode};
    if (mode == CLLM_LOGITS_LAST && r->logits_topk > 0) {
        sq.logits_topk = r->logits_topk;
        sq.logits_scale = r->logits_scale;
    }
    cllm_batch b = {&sq, 1};
    cllm_status s = cllm_forward(r->ctx, &b, &r->kv, &r->st, logits, err);
    if (s == CLLM_OK) r->pos += n;
    return s;
}
