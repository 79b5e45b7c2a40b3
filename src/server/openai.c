/* Request parsing for the generation routes: OpenAI /v1/completions and /v1/chat/completions and
 * vLLM's demo /generate. Validates every field's type and range (400 with the field as `param`),
 * renders the chat template, tokenizes, applies the context-length check with vLLM's message
 * text, and fills a srv_gen that srv_req.c submits to the engine. Unknown fields are ignored.
 * Called from the MHD thread (server.c). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "server/srv_int.h"

void srv_gen_free(srv_gen *g) {
    for (int i = 0; i < g->n_stop; i++) free(g->stop[i]);
    free(g->stop);
    free(g->stop_ids);
    free(g->bias_ids);
    free(g->bias_vals);
    cllm_tok_ids_free(&g->prompt);
    free(g->prompt_text);
    for (int i = 0; i < g->n_batch; i++) {
        if (g->batch) cllm_tok_ids_free(&g->batch[i]);
        if (g->batch_text) free(g->batch_text[i]);
    }
    free(g->batch);
    free(g->batch_text);
    json_decref(g->tools);
    free(g->cache_salt);
    free(g->chat_echo);
    cllm_gm_unref(g->grammar);
    srv_image_free(g);
    memset(g, 0, sizeof(*g));
}

#define BAD(param, ...) srv_bad(e, param, __VA_ARGS__)

/* A present, non-null field. */
static json_t *field(json_t *body, const char *key) {
    json_t *v = json_object_get(body, key);
    return json_is_null(v) ? NULL : v;
}

static bool get_num(json_t *body, const char *key, double *out, double lo, double hi, srv_err *e) {
    json_t *v = field(body, key);
    if (!v) return true;
    if (!json_is_number(v)) return BAD(key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return BAD(key, "'%s' must be between %g and %g, got %g", key, lo, hi, x);
    *out = x;
    return true;
}

static bool get_int(json_t *body, const char *key, long long *out, long long lo, long long hi,
                    srv_err *e) {
    json_t *v = field(body, key);
    if (!v) return true;
    long long x;
    if (json_is_integer(v))
        x = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
             fabs(json_real_value(v)) < 9e15)
        x = (long long)json_real_value(v);
    else
        return BAD(key, "'%s' must be an integer", key);
    if (x < lo || x > hi)
        return BAD(key, "'%s' must be between %lld and %lld, got %lld", key, lo, hi, x);
    *out = x;
    return true;
}

static bool get_bool(json_t *body, const char *key, bool *out, srv_err *e) {
    json_t *v = field(body, key);
    if (!v) return true;
    if (!json_is_boolean(v)) return BAD(key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return true;
}

static bool parse_stop(json_t *body, srv_gen *g, srv_err *e) {
    json_t *v = field(body, "stop");
    if (v) {
        size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : (size_t)-1;
        if (n == (size_t)-1) return BAD("stop", "'stop' must be a string or an array of strings");
        if (n > 64) return BAD("stop", "'stop' has more than 64 entries");
        g->stop = calloc(n ? n : 1, sizeof(char *));
        if (!g->stop) return BAD("stop", "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *x = json_is_string(v) ? v : json_array_get(v, i);
            if (!json_is_string(x))
                return BAD("stop", "'stop' must be a string or an array of strings");
            if (json_string_length(x) == 0) continue;
            g->stop[g->n_stop] = strdup(json_string_value(x));
            if (!g->stop[g->n_stop]) return BAD("stop", "out of memory");
            g->n_stop++;
        }
    }
    v = field(body, "stop_token_ids");
    if (v) {
        if (!json_is_array(v) || json_array_size(v) > 1024)
            return BAD("stop_token_ids", "'stop_token_ids' must be an array of token ids");
        size_t n = json_array_size(v);
        g->stop_ids = calloc(n ? n : 1, sizeof(int));
        if (!g->stop_ids) return BAD("stop_token_ids", "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *x = json_array_get(v, i);
            if (!json_is_integer(x) || json_integer_value(x) < 0 ||
                json_integer_value(x) > 0x7fffffff)
                return BAD("stop_token_ids", "'stop_token_ids' must be an array of token ids");
            g->stop_ids[g->n_stop_ids++] = (int)json_integer_value(x);
        }
    }
    return true;
}

static bool parse_bias(json_t *body, srv_gen *g, int n_vocab, srv_err *e) {
    json_t *v = field(body, "logit_bias");
    if (!v) return true;
    if (!json_is_object(v))
        return BAD("logit_bias", "'logit_bias' must be an object of token id -> bias");
    size_t n = json_object_size(v);
    if (n > 4096) return BAD("logit_bias", "'logit_bias' has more than 4096 entries");
    g->bias_ids = calloc(n ? n : 1, sizeof(int));
    g->bias_vals = calloc(n ? n : 1, sizeof(float));
    if (!g->bias_ids || !g->bias_vals) return BAD("logit_bias", "out of memory");
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        char *end;
        long id = strtol(k, &end, 10);
        if (!*k || *end || id < 0 || (n_vocab > 0 && id >= n_vocab))
            return BAD("logit_bias", "token_id in logit_bias out of vocabulary range: %.40s", k);
        if (!json_is_number(x) || json_number_value(x) < -100 || json_number_value(x) > 100)
            return BAD("logit_bias", "logit_bias values must be numbers in [-100, 100]");
        g->bias_ids[g->n_bias] = (int)id;
        g->bias_vals[g->n_bias] = (float)json_number_value(x);
        g->n_bias++;
    }
    return true;
}

/* Sampling fields shared by all three routes (OpenAI names plus vLLM's extras at top level). */
static bool parse_sampling(cllm_server *s, json_t *body, srv_gen *g, srv_err *e) {
    cllm_sampling *sp = &g->s;
    memset(sp, 0, sizeof(*sp));
    sp->top_p = 1;
    sp->repetition_penalty = 1;
    sp->skip_special_tokens = true;
    sp->logprobs = -1;
    sp->n = 1;
    if (s->ops.sampling_defaults) s->ops.sampling_defaults(s->ops.ctx, sp);
    long long n = 1, top_k = sp->top_k, seed = 0, min_tokens = 0;
    if (!get_num(body, "temperature", &sp->temperature, 0, 100, e) ||
        !get_num(body, "top_p", &sp->top_p, 1e-9, 1, e) ||
        !get_int(body, "top_k", &top_k, -1, 1 << 30, e) ||
        !get_num(body, "min_p", &sp->min_p, 0, 1, e) ||
        !get_num(body, "repetition_penalty", &sp->repetition_penalty, 1e-6, 100, e) ||
        !get_num(body, "presence_penalty", &sp->presence_penalty, -2, 2, e) ||
        !get_num(body, "frequency_penalty", &sp->frequency_penalty, -2, 2, e) ||
        !get_int(body, "seed", &seed, -(1LL << 62), 1LL << 62, e) ||
        !get_int(body, "n", &n, 1, s->o.max_n, e) ||
        !get_int(body, "min_tokens", &min_tokens, 0, 1 << 30, e) ||
        !get_bool(body, "ignore_eos", &sp->ignore_eos, e) ||
        !get_bool(body, "include_stop_str_in_output", &sp->include_stop_str_in_output, e) ||
        !get_bool(body, "skip_special_tokens", &sp->skip_special_tokens, e))
        return false;
    json_t *bo = field(body, "best_of");
    if (bo && !(json_is_integer(bo) && json_integer_value(bo) == n))
        return BAD("best_of", "best_of is not supported; use n");
    sp->top_k = (int)top_k;
    if (field(body, "seed")) {
        sp->has_seed = true;
        sp->seed = (uint64_t)seed;
    } else if (s->o.has_default_seed) {
        /* --seed: a run of unseeded requests repeats from one server start to the next */
        sp->has_seed = true;
        sp->seed = s->o.default_seed + __atomic_fetch_add(&s->seed_ctr, 1, __ATOMIC_RELAXED);
    }
    sp->n = g->n = (int)n;
    sp->min_tokens = (int)min_tokens;
    if (!parse_stop(body, g, e)) return false;
    int n_vocab = s->tok ? cllm_tok_n_vocab(s->tok) : 0;
    if (!parse_bias(body, g, n_vocab, e)) return false;
    sp->stop = (const char *const *)g->stop;
    sp->n_stop = g->n_stop;
    sp->stop_token_ids = g->stop_ids;
    sp->n_stop_token_ids = g->n_stop_ids;
    sp->logit_bias_ids = g->bias_ids;
    sp->logit_bias_vals = g->bias_vals;
    sp->n_logit_bias = g->n_bias;
    json_t *salt = field(body, "cache_salt");
    if (salt) {
        if (!json_is_string(salt) || !json_string_length(salt))
            return BAD("cache_salt", "'cache_salt' must be a non-empty string");
        g->cache_salt = strdup(json_string_value(salt));
    }
    return true;
}

static bool need_tok(cllm_server *s, srv_err *e) {
    if (s->tok) return true;
    return BAD(NULL, "this model has no tokenizer; pass the prompt as token ids");
}

static bool encode(cllm_server *s, const char *text, size_t len, int flags, srv_gen *g,
                   srv_err *e) {
    if (!need_tok(s, e)) return false;
    cllm_error ce = {0};
    if (cllm_tok_encode(s->tok, text, len, flags, &g->prompt, &ce) != CLLM_OK)
        return BAD("prompt", "tokenization failed: %s", ce.msg);
    return true;
}

static bool take_ids(cllm_server *s, json_t *arr, srv_gen *g, srv_err *e) {
    size_t n = json_array_size(arr);
    int n_vocab = s->tok ? cllm_tok_n_vocab(s->tok) : 0x7fffffff;
    g->prompt.ids = malloc((n ? n : 1) * sizeof(int32_t));
    if (!g->prompt.ids) return BAD("prompt", "out of memory");
    g->prompt.cap = n ? n : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(arr, i);
        if (!json_is_integer(x)) return BAD("prompt", "'prompt' token ids must be integers");
        json_int_t id = json_integer_value(x);
        if (id < 0 || id >= n_vocab)
            return BAD("prompt", "token id %lld is out of vocabulary", (long long)id);
        g->prompt.ids[g->prompt.n++] = (int32_t)id;
    }
    return true;
}

#define SRV_MAX_BATCH 64

const char *srv_gen_prompt_text(const srv_gen *g, int idx) {
    if (!g->n_batch) return g->prompt_text;
    int b = g->s.n > 0 ? idx / g->s.n : 0;
    return b < g->n_batch ? g->batch_text[b] : NULL;
}

/* One prompt (a string or an array of token ids) into g->prompt / g->prompt_text. */
static bool parse_one_prompt(cllm_server *s, json_t *p, int flags, srv_gen *g, srv_err *e) {
    if (json_is_string(p)) {
        g->prompt_text = strdup(json_string_value(p));
        if (!g->prompt_text) return BAD("prompt", "out of memory");
        return encode(s, json_string_value(p), json_string_length(p), flags, g, e);
    }
    if (json_is_array(p)) {
        if (!take_ids(s, p, g, e)) return false;
        if (g->echo && s->tok) {
            /* echo shows the prompt as text, as vLLM decodes a prompt given as ids */
            size_t n;
            cllm_error ce = {0};
            if (cllm_tok_decode(s->tok, g->prompt.ids, g->prompt.n, false, &g->prompt_text, &n,
                                &ce) != CLLM_OK)
                return BAD("prompt", "echo: cannot decode the prompt: %s", ce.msg);
        }
        return true;
    }
    return BAD("prompt", "'prompt' must be a string, an array of token ids, or an array of those");
}

/* Several prompts: each parsed as one, then moved into g->batch. */
static bool parse_batch(cllm_server *s, json_t *p, int flags, srv_gen *g, srv_err *e) {
    size_t n = json_array_size(p);
    if (n > SRV_MAX_BATCH)
        return BAD("prompt", "more than %d prompts in one request", SRV_MAX_BATCH);
    g->batch = calloc(n, sizeof(cllm_tok_ids));
    g->batch_text = calloc(n, sizeof(char *));
    if (!g->batch || !g->batch_text) return BAD("prompt", "out of memory");
    bool strings = json_is_string(json_array_get(p, 0));
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(p, i);
        if (strings ? !json_is_string(x) : !json_is_array(x))
            return BAD("prompt", "prompt[%zu]: a batch is all strings or all token-id arrays", i);
        if (!parse_one_prompt(s, x, flags, g, e)) return false;
        g->batch[i] = g->prompt;
        g->batch_text[i] = g->prompt_text;
        memset(&g->prompt, 0, sizeof(g->prompt));
        g->prompt_text = NULL;
        g->n_batch = (int)i + 1;
    }
    return true;
}

/* prompt: "text" | [ids] | ["text", ...] | [[ids], ...]; several prompts make a batch (choices
 * with index prompt * n + sample, as vLLM). */
static bool parse_prompt(cllm_server *s, json_t *body, srv_gen *g, srv_err *e) {
    json_t *p = field(body, "prompt");
    if (!p) return BAD("prompt", "'prompt' is required");
    bool add_special = true;
    if (!get_bool(body, "add_special_tokens", &add_special, e)) return false;
    int flags = add_special ? CLLM_TOK_ADD_SPECIAL : 0;
    if (json_is_array(p) && json_array_size(p) >= 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0)))) {
        if (json_array_size(p) == 1) return parse_one_prompt(s, json_array_get(p, 0), flags, g, e);
        if (g->route != SRV_COMPLETIONS)
            return BAD("prompt", "several prompts in one request: use /v1/completions");
        return parse_batch(s, p, flags, g, e);
    }
    return parse_one_prompt(s, p, flags, g, e);
}

/* One message's role and required fields, as vLLM's request model checks them: the role is
 * one of the five OpenAI roles, system/developer/user/tool carry a content, a tool message names
 * the call it answers, tool_calls is an array. Fills e with the field as `param`. */
static bool check_message(json_t *m, size_t i, srv_err *e) {
    static const char *const roles[] = {"system", "developer", "user", "assistant", "tool"};
    char param[64];
    const char *role = json_string_value(json_object_get(m, "role"));
    bool known = false;
    for (size_t r = 0; r < sizeof(roles) / sizeof(roles[0]); r++) known |= !strcmp(role, roles[r]);
    if (!known) {
        snprintf(param, sizeof(param), "messages[%zu].role", i);
        return BAD(param,
                   "messages[%zu].role: '%.40s' is not a valid role (system, developer, user, "
                   "assistant, tool)",
                   i, role);
    }
    json_t *content = json_object_get(m, "content");
    if (strcmp(role, "assistant") && (!content || json_is_null(content))) {
        snprintf(param, sizeof(param), "messages[%zu].content", i);
        return BAD(param, "messages[%zu].content is required for role '%s'", i, role);
    }
    if (!strcmp(role, "tool") && !json_is_string(json_object_get(m, "tool_call_id"))) {
        snprintf(param, sizeof(param), "messages[%zu].tool_call_id", i);
        return BAD(param, "messages[%zu].tool_call_id (a string) is required for role 'tool'", i);
    }
    json_t *tcs = json_object_get(m, "tool_calls");
    if (tcs && !json_is_null(tcs) && !json_is_array(tcs)) {
        snprintf(param, sizeof(param), "messages[%zu].tool_calls", i);
        return BAD(param, "messages[%zu].tool_calls must be an array", i);
    }
    return true;
}

/* A message's content parts with images (srv_image.c loads each into g): for a template that
 * renders image parts itself the parts stay a list (images as {"type": "image"}); otherwise one
 * string, vLLM's way: a placeholder line per image, then the text parts joined by newlines. */
static json_t *content_with_images(cllm_server *s, json_t *content, size_t i, srv_gen *g,
                                   srv_err *e) {
    bool lists = s->tmpl_image_parts;
    json_t *out = lists ? json_array() : NULL;
    srv_buf ph = {0}, t = {0};
    size_t j;
    json_t *part;
    bool first = true;
    json_array_foreach(content, j, part) {
        const char *ty = json_string_value(json_object_get(part, "type"));
        json_t *tx = json_object_get(part, "text");
        if (ty && !strcmp(ty, "text") && json_is_string(tx)) {
            if (lists) {
                json_array_append_new(out, json_pack("{s:s, s:O}", "type", "text", "text", tx));
                continue;
            }
            if (!first) srv_buf_adds(&t, "\n");
            srv_buf_add(&t, json_string_value(tx), json_string_length(tx));
            first = false;
            continue;
        }
        if (!ty || !srv_image_part(s, part, i, g, e)) {
            if (!ty) BAD("messages", "messages[%zu].content[%zu] needs a type", i, j);
            json_decref(out);
            srv_buf_free(&ph);
            srv_buf_free(&t);
            return NULL;
        }
        if (lists)
            json_array_append_new(out, json_pack("{s:s}", "type", "image"));
        else
            srv_buf_adds(&ph, SRV_IMAGE_PLACEHOLDER "\n");
    }
    if (!lists) {
        srv_buf_add(&ph, t.p ? t.p : "", t.len);
        out = json_stringn(ph.p ? ph.p : "", ph.len);
    }
    srv_buf_free(&ph);
    srv_buf_free(&t);
    return out;
}

static bool has_image_part(json_t *content) {
    size_t j;
    json_t *part;
    json_array_foreach(content, j, part) {
        const char *ty = json_string_value(json_object_get(part, "type"));
        if (!ty || strcmp(ty, "text")) return true;
    }
    return false;
}

/* Copies messages into the shape templates expect: content parts joined into a string,
 * tool-call arguments given as JSON strings turned into objects (as vLLM does). */
static json_t *norm_messages(cllm_server *s, json_t *msgs, srv_gen *g, srv_err *e) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return BAD("messages", "'messages' must be a non-empty array"), NULL;
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m)) {
            json_decref(out);
            return BAD("messages", "messages[%zu] must be an object", i), NULL;
        }
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) {
            json_decref(out);
            return BAD("messages", "messages[%zu].role must be a string", i), NULL;
        }
        if (!check_message(m, i, e)) {
            json_decref(out);
            return NULL;
        }
        json_t *c = json_deep_copy(m);
        if (!c) break;
        json_t *content = json_object_get(m, "content");
        if (json_is_array(content) && has_image_part(content)) {
            json_t *nc = content_with_images(s, content, i, g, e);
            if (!nc) {
                json_decref(c);
                json_decref(out);
                return NULL;
            }
            json_object_set_new(c, "content", nc);
        } else if (json_is_array(content)) {
            srv_buf t = {0};
            size_t j;
            json_t *part;
            json_array_foreach(content, j, part) {
                json_t *ty = json_object_get(part, "type"), *tx = json_object_get(part, "text");
                if (!json_is_string(ty) || strcmp(json_string_value(ty), "text") ||
                    !json_is_string(tx)) {
                    srv_buf_free(&t);
                    json_decref(c);
                    json_decref(out);
                    return BAD("messages", "messages[%zu].content: only text parts are supported",
                               i),
                           NULL;
                }
                if (j) srv_buf_adds(&t, "\n");
                srv_buf_add(&t, json_string_value(tx), json_string_length(tx));
            }
            json_object_set_new(c, "content", json_stringn(t.p ? t.p : "", t.len));
            srv_buf_free(&t);
        } else if (content && !json_is_string(content) && !json_is_null(content)) {
            json_decref(c);
            json_decref(out);
            return BAD("messages", "messages[%zu].content must be a string or an array of parts",
                       i),
                   NULL;
        }
        json_t *tcs = json_object_get(c, "tool_calls");
        size_t k;
        json_t *tc;
        json_array_foreach(tcs, k, tc) {
            json_t *fn = json_object_get(tc, "function");
            json_t *args = json_object_get(fn, "arguments");
            if (json_is_string(args)) {
                json_t *parsed = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
                if (json_is_object(parsed))
                    json_object_set_new(fn, "arguments", parsed);
                else
                    json_decref(parsed);
            }
        }
        json_array_append_new(out, c);
    }
    return out;
}

static bool parse_chat(cllm_server *s, json_t *body, srv_gen *g, srv_err *e) {
    if (!need_tok(s, e)) return false;
    if (!s->tmpl) return BAD(NULL, "this model has no chat template; use /v1/completions");
    if (!srv_image_kwargs(s, body, g, e)) return false;
    json_t *msgs = norm_messages(s, json_object_get(body, "messages"), g, e);
    if (!msgs) return false;
    json_t *tools = field(body, "tools");
    if (tools && !json_is_array(tools)) {
        json_decref(msgs);
        return BAD("tools", "'tools' must be an array");
    }
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name"))) {
            json_decref(msgs);
            return BAD("tools", "tools[%zu].function.name is required", i);
        }
    }
    json_t *choice = field(body, "tool_choice");
    bool choice_none = json_is_string(choice) && !strcmp(json_string_value(choice), "none");
    if (choice && !json_is_string(choice) && !json_is_object(choice)) {
        json_decref(msgs);
        return BAD("tool_choice", "'tool_choice' must be a string or an object");
    }
    if (tools && json_array_size(tools)) {
        g->tools = json_incref(tools);
        g->parse_tools = !choice_none;
    }
    json_t *kw = json_object();
    if (s->default_kwargs) json_object_update(kw, s->default_kwargs);
    json_t *rkw = field(body, "chat_template_kwargs");
    if (rkw && !json_is_object(rkw)) {
        json_decref(kw);
        json_decref(msgs);
        return BAD("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    }
    if (rkw) json_object_update(kw, rkw);
    int thinking = -1;
    json_t *et = json_object_get(kw, "enable_thinking");
    if (json_is_boolean(et)) thinking = json_is_true(et);
    bool add_gen = true;
    if (!get_bool(body, "add_generation_prompt", &add_gen, e)) {
        json_decref(kw);
        json_decref(msgs);
        return false;
    }
    if (g->echo) {
        /* vLLM's chat echo: the last message's content, when it has the answer's role (the
         * assistant's with add_generation_prompt, else whatever role it has) */
        json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        const char *role = json_string_value(json_object_get(last, "role"));
        json_t *content = json_object_get(last, "content");
        if (role && (!add_gen || !strcmp(role, "assistant")) && json_is_string(content) &&
            json_string_length(content))
            g->chat_echo = strdup(json_string_value(content));
    }
    cllm_chat_opts co = {.tools = g->tools,
                         .add_generation_prompt = add_gen,
                         .enable_thinking = thinking,
                         .bos_token = cllm_tok_bos_token(s->tok),
                         .eos_token = cllm_tok_eos_token(s->tok),
                         .extra = kw};
    char *text = NULL;
    size_t len = 0;
    cllm_error ce = {0};
    cllm_status st = cllm_chat_render(s->tmpl, msgs, &co, &text, &len, &ce);
    json_decref(kw);
    json_decref(msgs);
    if (st != CLLM_OK) return BAD("messages", "chat template: %s", ce.msg);
    g->prompt_text = text;
    if (!encode(s, text, len, 0, g, e) || !srv_image_expand(s, g, e)) return false;
    const char *src = srv_chat_template_src(s);
    g->parse_reasoning = src && strstr(src, "<think>");
    if (g->parse_reasoning) {
        /* the prompt already opened <think> (Qwen3.5's default with thinking on) */
        const char *open = NULL;
        for (const char *p = text; (p = strstr(p, "<think>")); p++) open = p;
        g->starts_in_reasoning = open && !strstr(open, "</think>");
    }
    return true;
}

bool srv_parse_gen(cllm_server *s, srv_route route, json_t *body, srv_gen *g, srv_err *e) {
    memset(g, 0, sizeof(*g));
    g->route = route;
    g->logprobs = -1;
    if (!json_is_object(body)) return BAD(NULL, "the request body must be a JSON object");
    json_t *model = field(body, "model");
    if (model && !json_is_string(model)) return BAD("model", "'model' must be a string");
    if (model && route != SRV_GENERATE && !srv_model_known(s, json_string_value(model))) {
        srv_err_set(e, 404, "NotFoundError", "model", "The model `%.200s` does not exist.",
                    json_string_value(model));
        snprintf(e->code, sizeof(e->code), "model_not_found");
        return false;
    }
    if (route == SRV_CHAT && !field(body, "messages"))
        return BAD("messages", "'messages' is required");
    if (!get_bool(body, "stream", &g->stream, e)) return false;
    json_t *so = field(body, "stream_options");
    if (so) {
        if (!json_is_object(so)) return BAD("stream_options", "'stream_options' must be an object");
        if (!get_bool(so, "include_usage", &g->include_usage, e) ||
            !get_bool(so, "continuous_usage_stats", &g->continuous_usage, e))
            return false;
    }
    if (!parse_sampling(s, body, g, e)) return false;
    if (route == SRV_CHAT) {
        bool lp = false;
        long long top = 0;
        if (!get_bool(body, "logprobs", &lp, e) ||
            !get_int(body, "top_logprobs", &top, 0, s->o.max_logprobs, e))
            return false;
        if (field(body, "top_logprobs") && !lp)
            return BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        g->chat_logprobs = lp;
        g->logprobs = lp ? (int)top : -1;
        if (!get_bool(body, "echo", &g->echo, e)) return false;
    } else {
        long long lp = -1;
        json_t *v = field(body, "logprobs");
        if (v && json_is_boolean(v))
            lp = json_is_true(v) ? 0 : -1; /* vLLM /generate style */
        else if (!get_int(body, "logprobs", &lp, 0, s->o.max_logprobs, e))
            return false;
        g->logprobs = (int)lp;
        if (route == SRV_COMPLETIONS) {
            if (!get_bool(body, "echo", &g->echo, e)) return false;
            json_t *suf = field(body, "suffix");
            if (suf) return BAD("suffix", "suffix is not currently supported");
        }
    }
    g->s.logprobs = g->logprobs;
    if ((route == SRV_COMPLETIONS || route == SRV_CHAT) &&
        !srv_parse_prompt_logprobs(s, body, g, e))
        return false;
    long long max_tokens = -1;
    const char *mt_key = "max_tokens";
    if (route == SRV_CHAT && field(body, "max_completion_tokens")) mt_key = "max_completion_tokens";
    if (!get_int(body, mt_key, &max_tokens, 0, 1LL << 31, e)) return false;
    if (max_tokens == 0 && !(route == SRV_COMPLETIONS && g->echo))
        return BAD(mt_key,
                   "'%s' must be at least 1, got 0 (0 scores the prompt only with echo "
                   "on /v1/completions)",
                   mt_key);
    if (max_tokens == 0) {
        /* vLLM's echo without generation: one token is sampled and never shown */
        if (g->s.min_tokens > 0)
            return BAD("min_tokens", "min_tokens (%d) must be <= max_tokens (0)", g->s.min_tokens);
        g->score_only = true;
    }
    if (route == SRV_CHAT) {
        if (!parse_chat(s, body, g, e)) return false;
    } else if (!parse_prompt(s, body, g, e)) {
        return false;
    }
    /* response_format, structured_outputs, guided_*, forced tool_choice (srv_struct.c) */
    if (!srv_parse_structured(s, body, g, e)) return false;
    int nb = g->n_batch ? g->n_batch : 1, plen = 0;
    g->prompt_total = 0;
    for (int b = 0; b < nb; b++) {
        int l = (int)(g->n_batch ? g->batch[b].n : g->prompt.n);
        if (l == 0) return BAD("prompt", "The prompt cannot be empty.");
        if (l > plen) plen = l; /* the longest decides the limits */
        g->prompt_total += (size_t)l;
    }
    if (g->n_batch) {
        if ((long long)g->n * g->n_batch > s->o.max_n)
            return BAD("n", "%d prompts x n %d is over %d choices", g->n_batch, g->n, s->o.max_n);
        g->n *= g->n_batch; /* choices; g->s.n stays the samples per prompt */
    }
    int mml = s->max_model_len;
    if (mml > 0 && plen >= mml)
        return BAD(route == SRV_CHAT ? "messages" : "prompt",
                   "This model's maximum context length is %d tokens. However, your request has %d "
                   "input tokens. Please reduce the length of the input messages.",
                   mml, plen);
    if (max_tokens < 0) {
        /* vLLM: completions and /generate default to 16 (SamplingParams), chat to what remains */
        if (route == SRV_CHAT)
            max_tokens = mml > 0 ? mml - plen : 0;
        else
            max_tokens = 16;
        if (mml > 0 && max_tokens > mml - plen) max_tokens = mml - plen;
    } else if (mml > 0 && max_tokens + plen > mml) {
        return BAD(
            mt_key,
            "This model's maximum context length is %d tokens. However, you requested %lld "
            "output tokens and your prompt contains at least %d input tokens, for a total of "
            "at least %lld tokens. Please reduce the length of the input prompt or the number "
            "of requested output tokens.",
            mml, max_tokens, plen, max_tokens + plen);
    }
    g->s.max_tokens = g->score_only ? 1 : (int)max_tokens;
    return true;
}

bool srv_parse_tokenize(cllm_server *s, json_t *body, srv_gen *g, srv_err *e) {
    memset(g, 0, sizeof(*g));
    g->n = 1;
    if (!json_is_object(body)) return BAD(NULL, "the request body must be a JSON object");
    json_t *model = field(body, "model");
    if (model && !json_is_string(model)) return BAD("model", "'model' must be a string");
    if (model && !srv_model_known(s, json_string_value(model))) {
        srv_err_set(e, 404, "NotFoundError", "model", "The model `%.200s` does not exist.",
                    json_string_value(model));
        snprintf(e->code, sizeof(e->code), "model_not_found");
        return false;
    }
    if (field(body, "messages")) return parse_chat(s, body, g, e);
    json_t *p = field(body, "prompt");
    if (!json_is_string(p)) return BAD("prompt", "'prompt' (a string) or 'messages' is required");
    bool add_special = true;
    if (!get_bool(body, "add_special_tokens", &add_special, e)) return false;
    return encode(s, json_string_value(p), json_string_length(p),
                  add_special ? CLLM_TOK_ADD_SPECIAL : 0, g, e);
}
