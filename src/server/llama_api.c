/* llama-server's native API for llama.cpp users: POST /completion (and /completions), GET /props
 * and GET /slots, in llama-server's request and response shapes (tools/server/README.md of
 * llama.cpp). A /completion body is checked field by field and translated into a
 * /v1/completions request, so it runs through the same parser, engine and limits; only the
 * output differs: `content`, `stop`, `tokens_predicted`, `stop_type`, `timings`..., streamed as
 * SSE `data:` objects with no [DONE]. Called from server.c (routes) and oai_fmt.c (events, final
 * body) on the MHD threads. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_int.h"

/* ---- request ---- */

/* What a llama-server field becomes here. */
typedef enum lf_kind {
    LF_PASS,    /* same name and meaning in /v1/completions */
    LF_NEUTRAL, /* accepted at its neutral value only (a sampler cllm does not have) */
    LF_INERT,   /* any value: it only acts when a field that must be neutral is on */
    LF_NOOP,    /* accepted, no effect (why) */
    LF_OWN,     /* translated in parse_own */
    LF_REFUSE,  /* refused (why) */
} lf_kind;

typedef struct lfield {
    const char *name;
    lf_kind kind;
    double neutral; /* LF_NEUTRAL: the one value accepted (booleans: 0 = false) */
    const char *why;
} lfield;

static const lfield FIELDS[] = {
    {"prompt", LF_OWN, 0, NULL},
    {"n_predict", LF_OWN, 0, NULL},
    {"repeat_penalty", LF_OWN, 0, NULL},
    {"repeat_last_n", LF_OWN, 0, NULL},
    {"n_probs", LF_OWN, 0, NULL},
    {"logit_bias", LF_OWN, 0, NULL},
    {"grammar", LF_OWN, 0, NULL},
    {"json_schema", LF_OWN, 0, NULL},
    {"return_tokens", LF_OWN, 0, NULL},
    {"timings_per_token", LF_OWN, 0, NULL},
    {"id_slot", LF_OWN, 0, NULL},
    {"temperature", LF_OWN, 0, NULL},
    {"seed", LF_OWN, 0, NULL},
    {"top_k", LF_PASS, 0, NULL},
    {"top_p", LF_PASS, 0, NULL},
    {"min_p", LF_PASS, 0, NULL},
    {"stream", LF_PASS, 0, NULL},
    {"stop", LF_PASS, 0, NULL},
    {"presence_penalty", LF_PASS, 0, NULL},
    {"frequency_penalty", LF_PASS, 0, NULL},
    {"ignore_eos", LF_PASS, 0, NULL},
    {"cache_prompt", LF_NOOP, 0,
     "prompt prefixes are cached server-wide (--enable-prefix-caching), and greedy results do "
     "not depend on a cache hit"},
    {"n_keep", LF_NOOP, 0,
     "the context is never shifted: generation ends at the context length (stop_type limit)"},
    {"model", LF_NOOP, 0, "one model is served, as by a single-model llama-server"},
    {"typical_p", LF_NEUTRAL, 1, "locally typical sampling is not implemented"},
    {"tfs_z", LF_NEUTRAL, 1, "tail-free sampling is not implemented"},
    {"dynatemp_range", LF_NEUTRAL, 0, "dynamic temperature is not implemented"},
    {"dynatemp_exponent", LF_INERT, 0, "only acts with dynatemp_range"},
    {"mirostat", LF_NEUTRAL, 0, "Mirostat sampling is not implemented"},
    {"mirostat_tau", LF_INERT, 0, "only acts with mirostat"},
    {"mirostat_eta", LF_INERT, 0, "only acts with mirostat"},
    {"dry_multiplier", LF_NEUTRAL, 0, "DRY repetition penalty is not implemented"},
    {"dry_base", LF_INERT, 0, "only acts with dry_multiplier"},
    {"dry_allowed_length", LF_INERT, 0, "only acts with dry_multiplier"},
    {"dry_penalty_last_n", LF_INERT, 0, "only acts with dry_multiplier"},
    {"dry_sequence_breakers", LF_INERT, 0, "only acts with dry_multiplier"},
    {"xtc_probability", LF_NEUTRAL, 0, "the XTC sampler is not implemented"},
    {"xtc_threshold", LF_INERT, 0, "only acts with xtc_probability"},
    {"top_n_sigma", LF_NEUTRAL, -1, "top-n-sigma sampling is not implemented"},
    {"min_keep", LF_NEUTRAL, 0, "min_keep is not implemented"},
    {"n_indent", LF_NEUTRAL, 0, "indentation-based stopping is not implemented"},
    {"t_max_predict_ms", LF_NEUTRAL, 0, "a prediction time limit is not implemented"},
    {"n_cmpl", LF_NEUTRAL, 1, "several completions per prompt: use /v1/completions with n"},
    {"n_cache_reuse", LF_NEUTRAL, 0, "KV shifting for cache reuse is not implemented"},
    {"n_discard", LF_NEUTRAL, 0, "the context is never shifted"},
    {"penalize_nl", LF_NEUTRAL, 0, "newline penalties are not implemented"},
    {"post_sampling_probs", LF_NEUTRAL, 0, "n_probs are the model's log-softmax only"},
    {"return_progress", LF_NEUTRAL, 0, "prompt progress events are not implemented"},
    {"samplers", LF_REFUSE, 0,
     "the sampler order is fixed (penalties, temperature, top_k, top_p, min_p)"},
    {"response_fields", LF_REFUSE, 0, "response field selection is not implemented"},
    {"lora", LF_REFUSE, 0, "LoRA adapters are not supported"},
    {"image_data", LF_REFUSE, 0, "this server is text-only"},
    {"multimodal_data", LF_REFUSE, 0, "this server is text-only"},
    {"sse_ping_interval", LF_REFUSE, 0, "SSE pings are not implemented"},
    {"id_task", LF_REFUSE, 0, "tasks cannot be named"},
};

static const lfield *find_field(const char *k) {
    for (size_t i = 0; i < sizeof(FIELDS) / sizeof(FIELDS[0]); i++)
        if (!strcmp(FIELDS[i].name, k)) return &FIELDS[i];
    return NULL;
}

/* The neutral value of an LF_NEUTRAL field (a number, a boolean, or an empty array). */
static bool is_neutral(const lfield *f, json_t *v) {
    if (json_is_null(v)) return true;
    if (json_is_boolean(v)) return json_is_true(v) == (f->neutral != 0);
    if (json_is_number(v)) return json_number_value(v) == f->neutral;
    return json_is_array(v) && json_array_size(v) == 0;
}

/* llama-server's logit_bias: [[id, bias], [id, false], ...] or {"id": bias}; false bans the token.
 * String keys (text to tokenize) are refused: they would need their own tokenization rules. */
static bool take_bias(json_t *v, json_t *out, srv_err *e) {
    json_t *obj = json_object();
    json_object_set_new(out, "logit_bias", obj);
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            json_object_set_new(obj, k, json_is_false(x) ? json_real(-100) : json_deep_copy(x));
        }
        return true;
    }
    if (!json_is_array(v))
        return srv_bad(e, "logit_bias",
                       "'logit_bias' must be [[token_id, bias], ...] or an object");
    size_t i;
    json_t *p;
    json_array_foreach(v, i, p) {
        json_t *id = json_array_get(p, 0), *b = json_array_get(p, 1);
        if (!json_is_array(p) || json_array_size(p) != 2 || !json_is_integer(id) ||
            !(json_is_number(b) || json_is_false(b)))
            return srv_bad(e, "logit_bias",
                           "logit_bias[%zu]: want [token_id, bias] or [token_id, false] (text keys "
                           "are not supported)",
                           i);
        char key[32];
        snprintf(key, sizeof(key), "%lld", (long long)json_integer_value(id));
        json_object_set_new(obj, key, json_is_false(b) ? json_real(-100) : json_deep_copy(b));
    }
    return true;
}

/* The fields that are not passed through as they are. */
static bool parse_own(cllm_server *s, const char *k, json_t *v, json_t *out, srv_gen_llama *L,
                      srv_err *e) {
    if (!strcmp(k, "prompt")) {
        bool ids = json_is_array(v);
        for (size_t i = 0; ids && i < json_array_size(v); i++)
            if (!json_is_integer(json_array_get(v, i))) ids = false;
        if (!json_is_string(v) && !ids)
            return srv_bad(
                e, "prompt",
                "'prompt' must be a string or an array of token ids (several prompts, mixed "
                "arrays and multimodal objects: use /v1/completions)");
        json_object_set(out, "prompt", v);
    } else if (!strcmp(k, "n_predict")) {
        if (!json_is_integer(v) || json_integer_value(v) < -1)
            return srv_bad(e, "n_predict", "'n_predict' must be an integer >= -1 (-1: no limit)");
        if (json_integer_value(v) == 0)
            return srv_bad(
                e, "n_predict",
                "'n_predict' 0 (evaluate the prompt only) is not supported; use 1 or more");
        L->n_predict = (long long)json_integer_value(v);
    } else if (!strcmp(k, "repeat_penalty")) {
        if (!json_is_number(v) || json_number_value(v) <= 0)
            return srv_bad(e, "repeat_penalty", "'repeat_penalty' must be a number > 0");
        json_object_set(out, "repetition_penalty", v);
    } else if (!strcmp(k, "repeat_last_n")) {
        if (!json_is_integer(v) || json_integer_value(v) < -1)
            return srv_bad(e, "repeat_last_n", "'repeat_last_n' must be an integer >= -1");
        L->repeat_last_n = (int)json_integer_value(v);
    } else if (!strcmp(k, "n_probs")) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) > s->o.max_logprobs)
            return srv_bad(e, "n_probs", "'n_probs' must be an integer in [0, %d] (--max-logprobs)",
                           s->o.max_logprobs);
        L->n_probs = (int)json_integer_value(v);
        if (L->n_probs > 0) json_object_set_new(out, "logprobs", json_integer(L->n_probs));
    } else if (!strcmp(k, "logit_bias")) {
        return take_bias(v, out, e);
    } else if (!strcmp(k, "grammar")) {
        if (!json_is_string(v)) return srv_bad(e, "grammar", "'grammar' must be a GBNF string");
        if (json_string_length(v)) json_object_set(out, "guided_grammar", v);
    } else if (!strcmp(k, "json_schema")) {
        if (!json_is_object(v)) return srv_bad(e, "json_schema", "'json_schema' must be an object");
        json_object_set(out, "guided_json", v);
    } else if (!strcmp(k, "return_tokens") || !strcmp(k, "timings_per_token")) {
        if (!json_is_boolean(v)) return srv_bad(e, k, "'%s' must be a boolean", k);
        if (k[0] == 'r')
            L->return_tokens = json_is_true(v);
        else
            L->timings_per_token = json_is_true(v);
    } else if (!strcmp(k, "id_slot")) {
        if (!json_is_integer(v) || json_integer_value(v) != -1)
            return srv_bad(e, "id_slot",
                           "'id_slot': only -1 (any slot); the scheduler places sequences itself");
    } else if (!strcmp(k, "temperature")) {
        if (!json_is_number(v)) return srv_bad(e, "temperature", "'temperature' must be a number");
        /* llama-server: a negative temperature is greedy */
        json_object_set_new(out, "temperature",
                            json_real(json_number_value(v) < 0 ? 0 : json_number_value(v)));
    } else if (!strcmp(k, "seed")) {
        if (!json_is_integer(v)) return srv_bad(e, "seed", "'seed' must be an integer");
        /* -1 and 0xFFFFFFFF are llama-server's "random seed" */
        json_int_t sd = json_integer_value(v);
        if (sd != -1 && sd != 0xFFFFFFFFLL) json_object_set(out, "seed", v);
    }
    return true;
}

bool srv_llama_parse(cllm_server *s, json_t *body, srv_gen *g, srv_err *e) {
    memset(g, 0, sizeof(*g));
    if (!json_is_object(body)) return srv_bad(e, NULL, "the request body must be a JSON object");
    srv_gen_llama L = {.n_predict = -1, .repeat_last_n = -1};
    json_t *out = json_object();
    if (!out) return srv_bad(e, NULL, "out of memory");
    const char *k;
    json_t *v;
    bool ok = true;
    json_object_foreach(body, k, v) {
        const lfield *f = find_field(k);
        if (!f) {
            ok = srv_bad(
                e, k,
                "unknown field '%.60s' for /completion (llama-server's fields are listed in "
                "the README, \"llama-server compatibility\")",
                k);
        } else if (f->kind == LF_PASS) {
            json_object_set(out, k, v);
        } else if (f->kind == LF_OWN) {
            ok = parse_own(s, k, v, out, &L, e);
        } else if (f->kind == LF_NEUTRAL && !is_neutral(f, v)) {
            ok = srv_bad(e, k, "'%s' is not supported here: %s (leave it out)", k, f->why);
        } else if (f->kind == LF_REFUSE && !json_is_null(v) &&
                   !(json_is_array(v) && !json_array_size(v))) {
            ok = srv_bad(e, k, "'%s' is not supported here: %s", k, f->why);
        }
        if (!ok) break;
    }
    if (ok && !json_object_get(out, "prompt")) ok = srv_bad(e, "prompt", "'prompt' is required");
    /* the penalty here covers the whole prompt and output (vLLM's repetition_penalty): a window
     * of the last N tokens cannot be honoured, 0 turns it off */
    json_t *rp = json_object_get(out, "repetition_penalty");
    if (ok && L.repeat_last_n == 0) json_object_del(out, "repetition_penalty");
    if (ok && L.repeat_last_n > 0 && rp && json_number_value(rp) != 1.0)
        ok = srv_bad(e, "repeat_last_n",
                     "'repeat_last_n' %d: the repetition penalty here covers the whole prompt and "
                     "output; send -1 (all) or 0 (off)",
                     L.repeat_last_n);
    if (ok) ok = srv_parse_gen(s, SRV_COMPLETIONS, out, g, e);
    json_decref(out);
    if (!ok) return false;
    g->route = SRV_LLAMA;
    g->llama = L;
    /* n_predict -1: until an end token or the context is full, as llama-server */
    int room = s->max_model_len > 0 ? s->max_model_len - (int)g->prompt.n : 1 << 20;
    g->s.max_tokens = L.n_predict < 0 || L.n_predict > room ? room : (int)L.n_predict;
    return true;
}

/* ---- response ---- */

static json_t *text_json(const char *p, size_t n) {
    json_t *v = json_stringn(p ? p : "", p ? n : 0);
    if (v) return v;
    char *t = cllm_tok_utf8_sanitize(p, n, &n);
    v = t ? json_stringn(t, n) : json_string("");
    free(t);
    return v;
}

static json_t *token_json(const srv_req *r, int id, float logprob) {
    size_t n = 0;
    const char *b = r->srv->tok ? cllm_tok_token_bytes(r->srv->tok, id, &n) : NULL;
    json_t *bytes = json_array();
    for (size_t i = 0; b && i < n; i++)
        json_array_append_new(bytes, json_integer((unsigned char)b[i]));
    return json_pack("{s:i, s:o, s:o, s:f}", "id", id, "token", text_json(b, b ? n : 0), "bytes",
                     bytes, "logprob", (double)logprob);
}

/* completion_probabilities entries for the event's tokens. */
static void add_probs(const srv_req *r, const srv_ev *ev, json_t *arr) {
    if (!ev->lp) return;
    int stride = 1 + ev->n_top;
    for (int t = 0; t < ev->n_tokens; t++) {
        const cllm_token_logprob *row = ev->lp + (size_t)t * (size_t)stride;
        json_t *o = token_json(r, row[0].token, row[0].logprob);
        json_t *tops = json_array();
        for (int k = 1; k <= ev->n_top && k <= r->gen.llama.n_probs; k++)
            json_array_append_new(tops, token_json(r, row[k].token, row[k].logprob));
        json_object_set_new(o, "top_logprobs", tops);
        json_array_append_new(arr, o);
    }
}

static const char *stop_type(const srv_choice *c) {
    if (c->finish == CLLM_FINISH_LENGTH) return "limit";
    if (c->finish == CLLM_FINISH_STOP) return c->stop_str ? "word" : "eos";
    return "none";
}

/* Timings as seen at the HTTP layer: prompt_ms is arrival to first token (queueing included). */
static json_t *timings(srv_req *r, const srv_choice *c, int prompt_n, int cached) {
    pthread_mutex_lock(&r->mu);
    double t1 = r->first_token_seen ? r->t_first_token : srv_now();
    pthread_mutex_unlock(&r->mu);
    double pm = (t1 - r->t_arrival) * 1e3, gm = (srv_now() - t1) * 1e3;
    int pn = prompt_n - cached, gn = c->completion_tokens;
    return json_pack("{s:i, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}", "cache_n", cached, "prompt_n",
                     pn, "prompt_ms", pm, "prompt_per_token_ms", pn ? pm / pn : 0.0,
                     "prompt_per_second", pm > 0 ? pn * 1e3 / pm : 0.0, "predicted_n", gn,
                     "predicted_ms", gm, "predicted_per_token_ms", gn ? gm / gn : 0.0,
                     "predicted_per_second", gm > 0 ? gn * 1e3 / gm : 0.0);
}

static json_t *settings(const srv_req *r) {
    const cllm_sampling *p = &r->gen.s;
    json_t *stop = json_array();
    for (int i = 0; i < r->gen.n_stop; i++)
        json_array_append_new(stop, json_string(r->gen.stop[i]));
    return json_pack("{s:I, s:I, s:f, s:i, s:f, s:f, s:f, s:f, s:f, s:o, s:I, s:b, s:b, s:i, "
                     "s:i, s:s}",
                     "n_predict", (json_int_t)r->gen.llama.n_predict, "seed",
                     p->has_seed ? (json_int_t)p->seed : (json_int_t)0xFFFFFFFFLL, "temperature",
                     p->temperature, "top_k", p->top_k, "top_p", p->top_p, "min_p", p->min_p,
                     "repeat_penalty", p->repetition_penalty, "presence_penalty",
                     p->presence_penalty, "frequency_penalty", p->frequency_penalty, "stop", stop,
                     "max_tokens", (json_int_t)r->gen.llama.n_predict, "ignore_eos", p->ignore_eos,
                     "stream", r->gen.stream, "n_probs", r->gen.llama.n_probs, "n_ctx",
                     r->srv->max_model_len, "model", r->srv->model_name);
}

/* The last object of a completion (llama-server's final result). In a stream content and tokens
 * went out already. */
static json_t *final_obj(srv_req *r, srv_choice *c, int prompt_n, int cached) {
    bool st = r->gen.stream;
    json_t *acc = c->lp; /* {"tokens": [...], "probs": [...]} accumulated (non-stream) */
    json_t *toks = !st && r->gen.llama.return_tokens && json_object_get(acc, "tokens")
                       ? json_incref(json_object_get(acc, "tokens"))
                       : json_array();
    const char *txt = c->text.p ? c->text.p : "";
    json_t *o = json_pack(
        "{s:i, s:o, s:o, s:i, s:b, s:s, s:i, s:i, s:o, s:o, s:b, s:b, s:s, s:o, s:i, s:o}", "index",
        0, "content", st ? json_string("") : text_json(txt, c->text.len), "tokens", toks, "id_slot",
        -1, "stop", 1, "model", r->srv->model_name, "tokens_predicted", c->completion_tokens,
        "tokens_evaluated", prompt_n, "generation_settings", settings(r), "prompt",
        text_json(r->gen.prompt_text ? r->gen.prompt_text : "",
                  r->gen.prompt_text ? strlen(r->gen.prompt_text) : 0),
        "has_new_line", memchr(txt, '\n', c->text.len) != NULL, "truncated", 0, "stop_type",
        stop_type(c), "stopping_word", c->stop_str ? json_string(c->stop_str) : json_string(""),
        "tokens_cached", cached, "timings", timings(r, c, prompt_n, cached));
    if (o && !st && r->gen.llama.n_probs > 0)
        json_object_set_new(o, "completion_probabilities",
                            json_object_get(acc, "probs")
                                ? json_incref(json_object_get(acc, "probs"))
                                : json_array());
    return o;
}

static void emit(srv_req *r, json_t *o) {
    char *t = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!t) {
        r->out.oom = true;
        return;
    }
    srv_buf_adds(&r->out, "data: ");
    srv_buf_adds(&r->out, t);
    srv_buf_adds(&r->out, "\n\n");
    free(t);
}

void srv_llama_events(srv_req *r, srv_choice *c, const srv_ev *ev) {
    srv_buf_add(&c->text, ev->text, ev->text_len);
    c->started = true;
    json_t *ids = json_array();
    for (int i = 0; i < ev->n_tokens; i++) json_array_append_new(ids, json_integer(ev->tokens[i]));
    json_t *probs = json_array();
    if (r->gen.llama.n_probs > 0) add_probs(r, ev, probs);
    int prompt_n = (int)r->gen.prompt.n;
    if (!r->gen.stream) { /* kept for the final body */
        if (!c->lp) c->lp = json_pack("{s:[], s:[]}", "tokens", "probs");
        json_array_extend(json_object_get(c->lp, "tokens"), ids);
        json_array_extend(json_object_get(c->lp, "probs"), probs);
        json_decref(ids);
        json_decref(probs);
        return;
    }
    if (ev->text_len || ev->n_tokens) {
        json_t *o =
            json_pack("{s:i, s:o, s:O, s:b, s:i, s:i, s:i}", "index", 0, "content",
                      text_json(ev->text, ev->text_len), "tokens", ids, "stop", 0, "id_slot", -1,
                      "tokens_predicted", c->completion_tokens, "tokens_evaluated", prompt_n);
        if (o && r->gen.llama.n_probs > 0) json_object_set(o, "completion_probabilities", probs);
        if (o && r->gen.llama.timings_per_token)
            json_object_set_new(o, "timings", timings(r, c, prompt_n, 0));
        emit(r, o);
    }
    json_decref(ids);
    json_decref(probs);
    if (ev->finish != CLLM_FINISH_NONE && ev->finish != CLLM_FINISH_ERROR)
        emit(r, final_obj(r, c, ev->prompt_tokens ? ev->prompt_tokens : prompt_n,
                          ev->cached_prompt_tokens));
}

json_t *srv_llama_final(srv_req *r, srv_err *e) {
    (void)e; /* failed samples were answered by srv_fmt_final already */
    return final_obj(r, &r->choices[0], r->prompt_tokens ? r->prompt_tokens : (int)r->gen.prompt.n,
                     r->cached_tokens);
}

/* ---- /props and /slots ---- */

static json_t *default_params(cllm_server *s) {
    cllm_sampling d;
    memset(&d, 0, sizeof(d));
    d.top_p = 1;
    d.repetition_penalty = 1;
    if (s->ops.sampling_defaults) s->ops.sampling_defaults(s->ops.ctx, &d);
    return json_pack("{s:i, s:I, s:f, s:i, s:f, s:f, s:f, s:f, s:f, s:[], s:i, s:b, s:b, s:i}",
                     "n_predict", -1, "seed", (json_int_t)0xFFFFFFFFLL, "temperature",
                     d.temperature, "top_k", d.top_k, "top_p", d.top_p, "min_p", d.min_p,
                     "repeat_penalty", d.repetition_penalty, "presence_penalty", d.presence_penalty,
                     "frequency_penalty", d.frequency_penalty, "stop", "max_tokens", -1,
                     "ignore_eos", 0, "stream", 0, "n_probs", 0);
}

static int total_slots(const cllm_server *s) {
    return s->o.max_num_seqs > 0 ? s->o.max_num_seqs : 1;
}

json_t *srv_llama_props(cllm_server *s) {
    const char *tmpl = srv_chat_template_src(s);
    json_t *dgs = json_pack("{s:i, s:i, s:i, s:b, s:b, s:o, s:s}", "id", 0, "id_task", -1, "n_ctx",
                            s->max_model_len, "speculative", 0, "is_processing", 0, "params",
                            default_params(s), "prompt", "");
    char build[64];
    snprintf(build, sizeof(build), "cllm %s", CLLM_VERSION);
    return json_pack("{s:o, s:i, s:s, s:s, s:s, s:{s:b, s:b}, s:s, s:b}",
                     "default_generation_settings", dgs, "total_slots", total_slots(s),
                     "model_path", s->o.model_dir ? s->o.model_dir : s->model_name, "model_alias",
                     s->model_name, "chat_template", tmpl ? tmpl : "", "modalities", "vision", 0,
                     "audio", 0, "build_info", build, "is_sleeping", 0);
}

/* One entry per --max-num-seqs place: the running requests first (their sampling parameters),
 * then idle places. *free_slots: how many are idle. */
json_t *srv_llama_slots(cllm_server *s, int *free_slots) {
    json_t *arr = json_array();
    int n = total_slots(s), used = 0;
    pthread_mutex_lock(&s->mu);
    for (srv_req *q = s->reg_head; q && used < n; q = q->reg_next) {
        /* a request whose finals the engine has all sent holds no place, even while its
         * connection still drains (the client may already have read the whole answer) */
        pthread_mutex_lock(&q->mu);
        bool engine_done = q->n_finished_engine >= q->gen.n;
        pthread_mutex_unlock(&q->mu);
        if (engine_done) continue;
        for (int k = 0; k < q->n_subs && used < n; k++) {
            if (!q->subs[k].submitted) continue;
            const cllm_sampling *p = &q->gen.s;
            json_t *params = json_pack(
                "{s:i, s:I, s:f, s:i, s:f, s:f, s:f, s:b}", "n_predict", p->max_tokens, "seed",
                p->has_seed ? (json_int_t)p->seed : (json_int_t)0xFFFFFFFFLL, "temperature",
                p->temperature, "top_k", p->top_k, "top_p", p->top_p, "min_p", p->min_p,
                "repeat_penalty", p->repetition_penalty, "stream", q->gen.stream);
            json_array_append_new(arr, json_pack("{s:i, s:I, s:i, s:b, s:b, s:o}", "id", used,
                                                 "id_task", (json_int_t)q->subs[k].id, "n_ctx",
                                                 s->max_model_len, "speculative", 0,
                                                 "is_processing", 1, "params", params));
            used++;
        }
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = used; i < n; i++)
        json_array_append_new(arr, json_pack("{s:i, s:i, s:i, s:b, s:b}", "id", i, "id_task", -1,
                                             "n_ctx", s->max_model_len, "speculative", 0,
                                             "is_processing", 0));
    *free_slots = n - used;
    return arr;
}
