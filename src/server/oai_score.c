/* Scoring on the OpenAI routes, in vLLM's shapes: the prompt_logprobs field (checked with vLLM's
 * refusals), the prompt's rows kept per prompt as the engine hands them over, the
 * `prompt_logprobs` list of an answer and the prompt tokens that echo + logprobs puts first in
 * a completion's logprobs (null for the first token; lm-eval-harness's loglikelihood reads
 * those). Parsing runs in openai.c's srv_parse_gen, the rest in oai_fmt.c's formatting; all on
 * the MHD thread. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_int.h"

bool srv_parse_prompt_logprobs(cllm_server *s, json_t *body, srv_gen *g, srv_err *e) {
    json_t *v = json_object_get(body, "prompt_logprobs");
    if (v && !json_is_null(v)) {
        double x = json_number_value(v);
        if (!json_is_number(v) || x != floor(x) || fabs(x) > 1e9) {
            srv_err_set(e, 400, "invalid_request_error", "prompt_logprobs",
                        "`prompt_logprobs` must be an integer.");
            return false;
        }
        long long n = (long long)x;
        if (g->stream && (n > 0 || n == -1)) {
            srv_err_set(e, 400, "invalid_request_error", "prompt_logprobs",
                        "`prompt_logprobs` are not available when `stream=True`.");
            return false;
        }
        if (n < 0 && n != -1) {
            srv_err_set(e, 400, "invalid_request_error", "prompt_logprobs",
                        "`prompt_logprobs` must be a positive value or -1.");
            return false;
        }
        if (n == -1) n = s->tok ? cllm_tok_n_vocab(s->tok) : 1LL << 31; /* the whole vocabulary */
        if (n > s->o.max_logprobs) {
            srv_err_set(e, 400, "invalid_request_error", "prompt_logprobs",
                        "Requested prompt logprobs of %lld, which is greater than max allowed: %d",
                        n, s->o.max_logprobs);
            return false;
        }
        /* vLLM accepts prompt_logprobs 0 on a stream and shows it nowhere but in echo's
         * logprobs; the same here */
        g->s.has_prompt_logprobs = true;
        g->s.prompt_logprobs = (int)n;
        g->show_prompt_lp = !g->stream;
    } else if (g->echo && g->route == SRV_COMPLETIONS && g->logprobs >= 0) {
        /* vLLM: echo with logprobs scores the prompt at the same depth */
        g->s.has_prompt_logprobs = true;
        g->s.prompt_logprobs = g->logprobs;
        g->show_prompt_lp = !g->stream;
    }
    return true;
}

/* The token ids of prompt b (a batch's, or the only one). */
static const cllm_tok_ids *srv_gen_prompt_ids(const srv_gen *g, int b) {
    if (!g->n_batch) return &g->prompt;
    return b < g->n_batch ? &g->batch[b] : NULL;
}

static int prompt_of(const srv_req *r, int choice) {
    return r->gen.n_batch && r->gen.s.n > 0 ? choice / r->gen.s.n : 0;
}

void srv_plp_take(srv_req *r, int choice, srv_ev *ev) {
    int b = prompt_of(r, choice);
    if (!ev->plp || !r->plp || b >= r->n_subs) return;
    srv_plp *p = &r->plp[b];
    free(p->rows);
    p->rows = ev->plp;
    p->n = ev->n_plp;
    p->top = ev->plp_top;
    ev->plp = NULL;
}

void srv_plp_free(srv_req *r) {
    for (int i = 0; r->plp && i < r->n_subs; i++) free(r->plp[i].rows);
    free(r->plp);
    r->plp = NULL;
}

/* A logprob as vLLM writes it: -inf (and anything not finite) clamped to -9999. */
static double clamp_lp(double x) {
    return isfinite(x) && x > -9999.0 ? x : -9999.0;
}

/* The rows of choice's prompt, NULL when they are missing (a prompt of one token has none). */
static const srv_plp *rows_of(srv_req *r, int choice, const cllm_tok_ids **ids) {
    int b = prompt_of(r, choice);
    *ids = srv_gen_prompt_ids(&r->gen, b);
    if (!*ids || !r->plp || b >= r->n_subs) return NULL;
    const srv_plp *p = &r->plp[b];
    return p->rows && p->n == (int)(*ids)->n - 1 ? p : NULL;
}

json_t *srv_plp_json(srv_req *r, int choice) {
    const cllm_tok_ids *ids;
    const srv_plp *p = rows_of(r, choice, &ids);
    if (!ids || (!p && ids->n > 1)) return json_null();
    json_t *out = json_array();
    json_array_append_new(out, json_null());
    for (int j = 0; p && j < p->n; j++) {
        const cllm_prompt_logprob *row = p->rows + (size_t)j * (size_t)(p->top + 1);
        json_t *pos = json_object();
        for (int k = 0; k <= p->top; k++) {
            char key[16];
            snprintf(key, sizeof(key), "%d", row[k].token);
            if (json_object_get(pos, key)) continue; /* the prompt token is among the top */
            json_object_set_new(pos, key,
                                json_pack("{s:f, s:i, s:o}", "logprob", clamp_lp(row[k].logprob),
                                          "rank", row[k].rank, "decoded_token",
                                          srv_fmt_tok_str(r, row[k].token)));
        }
        json_array_append_new(out, pos);
    }
    return out;
}

void srv_plp_echo(srv_req *r, srv_choice *c, int choice, json_t *lp) {
    const cllm_tok_ids *ids;
    const srv_plp *p = rows_of(r, choice, &ids);
    if (!ids) return;
    int want = r->gen.logprobs; /* top_logprobs: the token and up to `logprobs` more, as vLLM */
    for (size_t i = 0; i < ids->n; i++) {
        json_t *ts = srv_fmt_tok_str(r, ids->ids[i]);
        size_t tl = json_string_length(ts);
        json_array_append_new(json_object_get(lp, "tokens"), ts);
        json_array_append_new(json_object_get(lp, "text_offset"), json_integer(c->text_offset));
        c->text_offset += (int)tl;
        if (i == 0 || !p) {
            json_array_append_new(json_object_get(lp, "token_logprobs"), json_null());
            json_array_append_new(json_object_get(lp, "top_logprobs"), json_null());
            continue;
        }
        const cllm_prompt_logprob *row = p->rows + (i - 1) * (size_t)(p->top + 1);
        json_array_append_new(json_object_get(lp, "token_logprobs"),
                              json_real(clamp_lp(row[0].logprob)));
        json_t *tops = json_object();
        for (int k = 0; k <= p->top && (int)json_object_size(tops) <= want; k++) {
            json_t *ks = srv_fmt_tok_str(r, row[k].token);
            if (!json_object_get(tops, json_string_value(ks)))
                json_object_set_new(tops, json_string_value(ks),
                                    json_real(clamp_lp(row[k].logprob)));
            json_decref(ks);
        }
        json_array_append_new(json_object_get(lp, "top_logprobs"), tops);
    }
}
