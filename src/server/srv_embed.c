/* POST /v1/embeddings from the generative model, as vLLM's pooling runner gives it for a causal
 * LM (`--runner pooling`, the `as_embedding_model` adapter): the final hidden state (after the
 * final norm) of each input's last token, L2-normalised unless `normalize: false`. Each input
 * is one engine request with sampling.embed (no sampling; engine/sched_out.c), so embeddings
 * share the batch, the admission control, the drain and the metrics of generation. Parsing runs
 * from server.c's route_generate, the answer from oai_fmt.c's srv_fmt_final; MHD thread. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_int.h"

#define EMBED_MAX_INPUTS 2048 /* vLLM takes any number; this caps the engine requests of one */

/* One input (a string or an array of token ids) into *out. */
static bool one_input(cllm_server *s, json_t *x, int flags, cllm_tok_ids *out, srv_err *e) {
    if (json_is_string(x)) {
        if (!s->tok)
            return srv_bad(e, "input", "%s", "this model has no tokenizer; send token ids");
        cllm_error ce = {0};
        if (cllm_tok_encode(s->tok, json_string_value(x), json_string_length(x), flags, out, &ce) !=
            CLLM_OK) {
            srv_err_set(e, 400, "invalid_request_error", "input", "tokenization failed: %s",
                        ce.msg);
            return false;
        }
        return true;
    }
    size_t n = json_array_size(x);
    int n_vocab = s->tok ? cllm_tok_n_vocab(s->tok) : 0x7fffffff;
    out->ids = malloc((n ? n : 1) * sizeof(int32_t));
    if (!out->ids) return srv_bad(e, "input", "%s", "out of memory");
    out->cap = n ? n : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(x, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= n_vocab)
            return srv_bad(e, "input", "%s",
                           "'input' token ids must be integers in the vocabulary");
        out->ids[out->n++] = (int32_t)json_integer_value(t);
    }
    return true;
}

static bool parse_inputs(cllm_server *s, json_t *in, int flags, srv_gen *g, srv_err *e) {
    /* "text" | ["text", ...] | [id, ...] | [[id, ...], ...] */
    bool many = json_is_array(in) && json_array_size(in) > 0 &&
                (json_is_string(json_array_get(in, 0)) || json_is_array(json_array_get(in, 0)));
    if (!json_is_string(in) && !json_is_array(in))
        return srv_bad(e, "input", "%s",
                       "'input' must be a string, an array of strings, an array of token "
                       "ids or an array of those");
    size_t n = many ? json_array_size(in) : 1;
    if (n > EMBED_MAX_INPUTS)
        return srv_bad(e, "input", "%s", "more than 2048 inputs in one request");
    g->batch = calloc(n, sizeof(cllm_tok_ids));
    g->batch_text = calloc(n, sizeof(char *));
    if (!g->batch || !g->batch_text) return srv_bad(e, "input", "%s", "out of memory");
    bool strings = many && json_is_string(json_array_get(in, 0));
    for (size_t i = 0; i < n; i++) {
        json_t *x = many ? json_array_get(in, i) : in;
        if (many && (strings ? !json_is_string(x) : !json_is_array(x)))
            return srv_bad(e, "input", "%s",
                           "'input': a list is all strings or all token-id arrays");
        g->n_batch = (int)i + 1;
        if (!one_input(s, x, flags, &g->batch[i], e)) return false;
    }
    return true;
}

bool srv_parse_embed(cllm_server *s, json_t *body, srv_gen *g, srv_err *e) {
    memset(g, 0, sizeof(*g));
    g->route = SRV_EMBEDDINGS;
    g->logprobs = -1;
    if (!json_is_object(body))
        return srv_bad(e, NULL, "%s", "the request body must be a JSON object");
    json_t *model = json_object_get(body, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) return srv_bad(e, "model", "%s", "'model' must be a string");
        if (!srv_model_known(s, json_string_value(model))) {
            srv_err_set(e, 404, "NotFoundError", "model", "The model `%.200s` does not exist.",
                        json_string_value(model));
            snprintf(e->code, sizeof(e->code), "model_not_found");
            return false;
        }
    }
    if (json_object_get(body, "messages"))
        return srv_bad(e, "messages", "%s",
                       "chat-style embedding requests (messages) are not supported; "
                       "send the text as 'input'");
    json_t *dims = json_object_get(body, "dimensions");
    if (dims && !json_is_null(dims))
        return srv_bad(e, "dimensions", "%s",
                       "Model does not support matryoshka representation, changing output "
                       "dimensions will lead to poor results.");
    json_t *fmt = json_object_get(body, "encoding_format");
    if (fmt && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (!f || (strcmp(f, "float") && strcmp(f, "base64")))
            return srv_bad(e, "encoding_format", "%s",
                           "'encoding_format' must be 'float' or 'base64'");
        g->embed_base64 = !strcmp(f, "base64");
    }
    g->embed_normalize = true;
    json_t *v = json_object_get(body, "normalize");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v))
            return srv_bad(e, "normalize", "%s", "'normalize' must be a boolean");
        g->embed_normalize = json_is_true(v);
    }
    bool add_special = true;
    v = json_object_get(body, "add_special_tokens");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v))
            return srv_bad(e, "add_special_tokens", "%s", "'add_special_tokens' must be a boolean");
        add_special = json_is_true(v);
    }
    long long trunc = 0; /* vLLM's truncate_prompt_tokens: keep the last k (-1: max_model_len) */
    v = json_object_get(body, "truncate_prompt_tokens");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || (json_integer_value(v) < 1 && json_integer_value(v) != -1))
            return srv_bad(e, "truncate_prompt_tokens", "%s",
                           "'truncate_prompt_tokens' must be -1 or a positive integer");
        trunc = json_integer_value(v) == -1 ? s->max_model_len : json_integer_value(v);
    }
    json_t *in = json_object_get(body, "input");
    if (!in || json_is_null(in)) return srv_bad(e, "input", "%s", "'input' is required");
    if (!parse_inputs(s, in, add_special ? CLLM_TOK_ADD_SPECIAL : 0, g, e)) return false;
    int mml = s->max_model_len;
    for (int b = 0; b < g->n_batch; b++) {
        cllm_tok_ids *t = &g->batch[b];
        if (trunc > 0 && t->n > (size_t)trunc) {
            memmove(t->ids, t->ids + (t->n - (size_t)trunc), (size_t)trunc * sizeof(int32_t));
            t->n = (size_t)trunc;
        }
        if (t->n == 0) return srv_bad(e, "input", "%s", "an input is empty (no tokens)");
        /* the engine keeps one position for the (never sampled) next token */
        if (mml > 0 && (long long)t->n >= mml) {
            srv_err_set(e, 400, "invalid_request_error", "input",
                        "This model's maximum context length is %d tokens. However, you "
                        "requested %zu tokens in the input for embedding generation. Please "
                        "reduce the length of the input.",
                        mml - 1, t->n);
            return false;
        }
        g->prompt_total += t->n;
    }
    g->n = g->n_batch;
    cllm_sampling *sp = &g->s;
    sp->top_p = 1;
    sp->repetition_penalty = 1;
    sp->logprobs = -1;
    sp->n = 1;
    sp->max_tokens = 1;
    sp->embed = true;
    return true;
}

void srv_embed_take(srv_choice *c, srv_ev *ev) {
    if (!ev->emb) return;
    free(c->emb);
    c->emb = ev->emb;
    c->n_emb = ev->n_emb;
    ev->emb = NULL;
}

static json_t *base64_floats(const float *x, int n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t nb = (size_t)n * 4, no = (nb + 2) / 3 * 4;
    unsigned char *b = malloc(nb ? nb : 1);
    char *o = malloc(no + 1);
    json_t *out = NULL;
    if (b && o) {
        for (int i = 0; i < n; i++) { /* little-endian float32, as numpy's frombuffer reads it */
            uint32_t u;
            memcpy(&u, &x[i], 4);
            for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)(u >> (8 * k));
        }
        size_t j = 0;
        for (size_t i = 0; i < nb; i += 3) {
            uint32_t w = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) |
                         (i + 2 < nb ? b[i + 2] : 0);
            o[j++] = tab[w >> 18 & 63];
            o[j++] = tab[w >> 12 & 63];
            o[j++] = i + 1 < nb ? tab[w >> 6 & 63] : '=';
            o[j++] = i + 2 < nb ? tab[w & 63] : '=';
        }
        o[j] = 0;
        out = json_stringn(o, j);
    }
    free(b);
    free(o);
    return out;
}

json_t *srv_embed_final(srv_req *r, srv_err *e) {
    json_t *data = json_array();
    for (int i = 0; i < r->gen.n; i++) {
        srv_choice *c = &r->choices[i];
        if (!c->emb) {
            json_decref(data);
            srv_err_set(e, 500, "InternalServerError", NULL, "embedding %d did not come back", i);
            return NULL;
        }
        if (r->gen.embed_normalize) { /* vLLM's default for embed: F.normalize(p=2) */
            double ss = 0;
            for (int k = 0; k < c->n_emb; k++) ss += (double)c->emb[k] * c->emb[k];
            double inv = ss > 0 ? 1.0 / sqrt(ss) : 0;
            for (int k = 0; k < c->n_emb; k++) c->emb[k] = (float)(c->emb[k] * inv);
        }
        json_t *vec;
        if (r->gen.embed_base64) {
            vec = base64_floats(c->emb, c->n_emb);
        } else {
            vec = json_array();
            for (int k = 0; k < c->n_emb; k++) json_array_append_new(vec, json_real(c->emb[k]));
        }
        json_array_append_new(data, json_pack("{s:i, s:s, s:o}", "index", i, "object", "embedding",
                                              "embedding", vec ? vec : json_null()));
    }
    return json_pack("{s:s, s:s, s:i, s:s, s:o, s:{s:i, s:i, s:i, s:n}}", "id", r->id, "object",
                     "list", "created", (json_int_t)r->created, "model", r->srv->model_name, "data",
                     data, "usage", "prompt_tokens", r->prompt_tokens, "total_tokens",
                     r->prompt_tokens, "completion_tokens", 0, "prompt_tokens_details");
}
