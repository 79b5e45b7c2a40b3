/* Response formatting: engine events -> OpenAI SSE chunks (completions, chat), vLLM /generate
 * NDJSON lines, and the final JSON bodies of non-streaming requests. Chat text goes through the
 * streaming output parser (tokenizer/output_parser.h) so reasoning_content and tool_calls come
 * out the same whether streamed or not. Runs on the MHD thread only (state in srv_req). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_int.h"

/* vLLM's stop_reason: the stop string or stop token id that ended the choice, else null. */
static json_t *stop_reason(const srv_choice *c) {
    if (c->stop_str) return json_string(c->stop_str);
    if (c->has_stop_token) return json_integer(c->stop_token);
    return json_null();
}

static const char *finish_str(const srv_req *r, const srv_choice *c) {
    switch (c->finish) {
    case CLLM_FINISH_STOP:
        return r->route == SRV_CHAT && c->n_tool_calls ? "tool_calls" : "stop";
    case CLLM_FINISH_LENGTH:
        return "length";
    case CLLM_FINISH_ABORT:
        return "abort";
    case CLLM_FINISH_ERROR:
        return "error";
    default:
        return NULL;
    }
}

/* A JSON string from bytes that may not be valid UTF-8 (token pieces). */
static json_t *jstr(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);
    if (v) return v;
    size_t m;
    char *t = cllm_tok_utf8_sanitize(s, n, &m);
    v = t ? json_stringn(t, m) : json_string("");
    free(t);
    return v;
}

json_t *srv_fmt_tok_str(const srv_req *r, int id) {
    size_t n = 0;
    const char *b = r->srv->tok ? cllm_tok_token_bytes(r->srv->tok, id, &n) : NULL;
    if (!b) {
        char tmp[32];
        snprintf(tmp, sizeof(tmp), "token_id:%d", id);
        return json_string(tmp);
    }
    return jstr(b, n);
}

static json_t *tok_bytes(const srv_req *r, int id) {
    size_t n = 0;
    const char *b = r->srv->tok ? cllm_tok_token_bytes(r->srv->tok, id, &n) : NULL;
    json_t *a = json_array();
    for (size_t i = 0; b && i < n; i++) json_array_append_new(a, json_integer((unsigned char)b[i]));
    return a;
}

/* Adds this event's tokens to a logprobs object (completions or chat layout). */
static void lp_add(srv_req *r, srv_choice *c, json_t *lp, const srv_ev *ev) {
    if (!ev->lp) return;
    int stride = 1 + ev->n_top;
    for (int t = 0; t < ev->n_tokens; t++) {
        const cllm_token_logprob *row = ev->lp + (size_t)t * (size_t)stride;
        if (srv_fmt_of(r->route)->lp == SRV_LP_CHAT) {
            json_t *tops = json_array();
            for (int k = 1; k <= ev->n_top && k - 1 < r->gen.logprobs; k++)
                json_array_append_new(tops, json_pack("{s:o, s:f, s:o}", "token",
                                                      srv_fmt_tok_str(r, row[k].token), "logprob",
                                                      (double)row[k].logprob, "bytes",
                                                      tok_bytes(r, row[k].token)));
            json_array_append_new(json_object_get(lp, "content"),
                                  json_pack("{s:o, s:f, s:o, s:o}", "token",
                                            srv_fmt_tok_str(r, row[0].token), "logprob",
                                            (double)row[0].logprob, "bytes",
                                            tok_bytes(r, row[0].token), "top_logprobs", tops));
        } else {
            json_t *ts = srv_fmt_tok_str(r, row[0].token);
            size_t tl = json_string_length(ts);
            json_array_append_new(json_object_get(lp, "tokens"), ts);
            json_array_append_new(json_object_get(lp, "token_logprobs"), json_real(row[0].logprob));
            json_array_append_new(json_object_get(lp, "text_offset"), json_integer(c->text_offset));
            c->text_offset += (int)tl;
            json_t *tops = json_object();
            for (int k = 0; k <= ev->n_top && k <= r->gen.logprobs; k++) {
                json_t *k_s = srv_fmt_tok_str(r, row[k].token);
                json_object_set_new(tops, json_string_value(k_s), json_real(row[k].logprob));
                json_decref(k_s);
            }
            json_array_append_new(json_object_get(lp, "top_logprobs"), tops);
        }
    }
}

static json_t *lp_new(const srv_req *r) {
    if (srv_fmt_of(r->route)->lp == SRV_LP_CHAT) return json_pack("{s:[]}", "content");
    return json_pack("{s:[], s:[], s:[], s:[]}", "text_offset", "token_logprobs", "tokens",
                     "top_logprobs");
}

static bool want_lp(const srv_req *r) {
    switch (srv_fmt_of(r->route)->lp) {
    case SRV_LP_CHAT:
        return r->gen.chat_logprobs;
    case SRV_LP_COMPLETIONS:
        return r->gen.logprobs >= 0;
    default:
        return false;
    }
}

static json_t *usage_json(const srv_req *r) {
    int comp = 0;
    for (int i = 0; i < r->gen.n; i++) comp += r->choices[i].completion_tokens;
    json_t *u = json_pack("{s:i, s:i, s:i}", "prompt_tokens", r->prompt_tokens, "total_tokens",
                          r->prompt_tokens + comp, "completion_tokens", comp);
    json_object_set_new(u, "prompt_tokens_details",
                        json_pack("{s:i}", "cached_tokens", r->cached_tokens));
    return u;
}

static void emit(srv_req *r, json_t *chunk) {
    char *s = chunk ? json_dumps(chunk, JSON_COMPACT) : NULL;
    json_decref(chunk);
    if (!s) {
        r->out.oom = true;
        return;
    }
    if (srv_fmt_of(r->route)->ndjson) {
        srv_buf_adds(&r->out, s);
        srv_buf_adds(&r->out, "\n");
    } else {
        srv_buf_adds(&r->out, "data: ");
        srv_buf_adds(&r->out, s);
        srv_buf_adds(&r->out, "\n\n");
    }
    free(s);
}

static json_t *chunk_head(srv_req *r) {
    return json_pack("{s:s, s:s, s:i, s:s, s:[]}", "id", r->id, "object",
                     srv_fmt_of(r->route)->chunk_object, "created", (json_int_t)r->created, "model",
                     r->srv->model_name, "choices");
}

/* include_usage: "usage": null on every chunk (OpenAI); with vLLM's continuous_usage_stats the
 * running totals instead. */
static void add_usage_if(srv_req *r, json_t *o) {
    if (!r->gen.include_usage) return;
    if (!r->gen.continuous_usage) {
        json_object_set_new(o, "usage", json_null());
        return;
    }
    int comp = 0, prompt = r->prompt_tokens ? r->prompt_tokens : (int)r->gen.prompt_total;
    for (int i = 0; i < r->gen.n; i++) comp += r->choices[i].completion_tokens;
    json_object_set_new(o, "usage",
                        json_pack("{s:i, s:i, s:i}", "prompt_tokens", prompt, "total_tokens",
                                  prompt + comp, "completion_tokens", comp));
}

/* Chat's role chunk of choice i. It goes out with the choice's first event (the first generated
 * token), right before that token's chunk, as vLLM sends it: a role chunk written before the
 * prompt is processed makes every client that stamps TTFT at the first chunk report ~0. */
static void role_chunk(srv_req *r, int i) {
    json_t *o = chunk_head(r);
    json_array_append_new(json_object_get(o, "choices"),
                          json_pack("{s:i, s:{s:s, s:s}, s:n, s:n}", "index", i, "delta", "role",
                                    "assistant", "content", "", "logprobs", "finish_reason"));
    add_usage_if(r, o);
    emit(r, o);
    r->choices[i].started = true;
    if (r->gen.chat_echo) { /* vLLM sends the echoed message as its own chunk */
        o = chunk_head(r);
        json_array_append_new(json_object_get(o, "choices"),
                              json_pack("{s:i, s:{s:s}, s:n, s:n}", "index", i, "delta", "content",
                                        r->gen.chat_echo, "logprobs", "finish_reason"));
        add_usage_if(r, o);
        emit(r, o);
    }
}

static void stream_error(srv_req *r, const char *msg) {
    srv_err e;
    bool down = __atomic_load_n(&r->srv->failed, __ATOMIC_ACQUIRE) == 1; /* set_failed */
    srv_err_set(&e, down ? 503 : 500, down ? "service_unavailable" : "InternalServerError", NULL,
                "%s", msg ? msg : "generation failed");
    char *s = srv_fmt_error_json(&e);
    if (!s) return;
    srv_buf_adds(&r->out, "data: ");
    srv_buf_adds(&r->out, s);
    srv_buf_adds(&r->out, "\n\n");
    free(s);
}

static void next_tool_id(srv_req *r, char *out, size_t cap) {
    static unsigned long long ctr;
    unsigned long long x = __atomic_add_fetch(&ctr, 1, __ATOMIC_RELAXED) * 0x9E3779B97F4A7C15ULL ^
                           (unsigned long long)(srv_now() * 1e9);
    snprintf(out, cap, "chatcmpl-tool-%016llx", x);
}

/* Chat: run the parser, emit or accumulate the deltas. */
static void chat_text(srv_req *r, int idx, srv_choice *c, const srv_ev *ev, json_t *lp) {
    cllm_outp_delta d;
    memset(&d, 0, sizeof(d));
    if (ev->text_len) cllm_outp_feed(c->parser, ev->text, ev->text_len, &d);
    json_t *delta = json_object();
    if (d.reasoning_len)
        json_object_set_new(delta, "reasoning_content", jstr(d.reasoning, d.reasoning_len));
    if (d.content_len) json_object_set_new(delta, "content", jstr(d.content, d.content_len));
    json_t *tcs = d.tool_calls;
    if (ev->finish != CLLM_FINISH_NONE) {
        cllm_outp_delta f;
        memset(&f, 0, sizeof(f));
        /* cut by max_tokens: an open tool call is unfinished and stays text, as generated */
        if (ev->finish == CLLM_FINISH_LENGTH)
            cllm_outp_finish_cut(c->parser, &f);
        else
            cllm_outp_finish(c->parser, &f);
        if (f.reasoning_len) {
            json_t *prev = json_object_get(delta, "reasoning_content");
            srv_buf t = {0};
            if (prev) srv_buf_adds(&t, json_string_value(prev));
            srv_buf_add(&t, f.reasoning, f.reasoning_len);
            json_object_set_new(delta, "reasoning_content", jstr(t.p ? t.p : "", t.len));
            srv_buf_free(&t);
        }
        if (f.content_len) {
            json_t *prev = json_object_get(delta, "content");
            srv_buf t = {0};
            if (prev) srv_buf_adds(&t, json_string_value(prev));
            srv_buf_add(&t, f.content, f.content_len);
            json_object_set_new(delta, "content", jstr(t.p ? t.p : "", t.len));
            srv_buf_free(&t);
        }
        if (f.tool_calls) {
            if (!tcs) tcs = json_array();
            json_array_extend(tcs, f.tool_calls);
            json_decref(f.tool_calls);
        }
    }
    json_t *rc = json_object_get(delta, "reasoning_content");
    if (rc) json_object_set(delta, "reasoning", rc); /* vLLM's newer name */
    size_t k;
    json_t *tc;
    json_t *out_tcs = json_array();
    json_array_foreach(tcs, k, tc) {
        char id[48];
        next_tool_id(r, id, sizeof(id));
        json_t *fn = json_pack("{s:O, s:O}", "name", json_object_get(tc, "name"), "arguments",
                               json_object_get(tc, "arguments"));
        json_array_append_new(out_tcs, json_pack("{s:i, s:s, s:s, s:o}", "index", c->n_tool_calls,
                                                 "id", id, "type", "function", "function", fn));
        c->n_tool_calls++;
    }
    json_decref(tcs);
    if (!r->gen.stream) {
        /* non-stream: cllm_outp_content/_reasoning hold the totals; keep tool calls with ids */
        if (!c->tool_calls) c->tool_calls = json_array();
        json_array_foreach(out_tcs, k, tc) {
            json_object_del(tc, "index");
            json_array_append(c->tool_calls, tc);
        }
        json_decref(out_tcs);
        json_decref(delta);
        json_decref(lp);
        return;
    }
    if (json_array_size(out_tcs)) json_object_set(delta, "tool_calls", out_tcs);
    json_decref(out_tcs);
    bool fin = ev->finish != CLLM_FINISH_NONE && ev->finish != CLLM_FINISH_ERROR;
    if (json_object_size(delta) || lp) {
        json_t *o = chunk_head(r);
        json_array_append_new(json_object_get(o, "choices"),
                              json_pack("{s:i, s:O, s:o, s:n}", "index", idx, "delta", delta,
                                        "logprobs", lp ? lp : json_null(), "finish_reason"));
        add_usage_if(r, o);
        emit(r, o);
    } else {
        json_decref(lp);
    }
    json_decref(delta);
    if (fin) {
        json_t *o = chunk_head(r);
        json_array_append_new(json_object_get(o, "choices"),
                              json_pack("{s:i, s:{}, s:n, s:s, s:o}", "index", idx, "delta",
                                        "logprobs", "finish_reason", finish_str(r, c),
                                        "stop_reason", stop_reason(c)));
        add_usage_if(r, o);
        emit(r, o);
    }
}

/* ---- per-route event formatters (srv_fmt.events) ---- */

static void chat_events(srv_req *r, int idx, srv_choice *c, srv_ev *ev, json_t *lp) {
    if (r->gen.stream && !c->started) role_chunk(r, idx);
    chat_text(r, idx, c, ev, lp);
}

static void completion_events(srv_req *r, int idx, srv_choice *c, srv_ev *ev, json_t *lp) {
    const char *ptext = srv_gen_prompt_text(&r->gen, idx);
    bool echo_now = r->gen.echo && !c->started && ptext;
    if (echo_now) srv_buf_adds(&c->text, ptext);
    size_t before = c->text.len;
    srv_buf_add(&c->text, ev->text, ev->text_len);
    c->started = true;
    bool fin = ev->finish != CLLM_FINISH_NONE && ev->finish != CLLM_FINISH_ERROR;
    if (r->gen.stream && (ev->text_len || echo_now || fin || lp)) {
        json_t *o = chunk_head(r);
        const char *t = echo_now ? c->text.p : c->text.p ? c->text.p + before : "";
        size_t tl = echo_now ? c->text.len : c->text.len - before;
        json_t *ch = json_pack("{s:i, s:o, s:o, s:o, s:o}", "index", idx, "text",
                               jstr(t ? t : "", tl), "logprobs", lp ? lp : json_null(),
                               "finish_reason", fin ? json_string(finish_str(r, c)) : json_null(),
                               "stop_reason", fin ? stop_reason(c) : json_null());
        lp = NULL;
        json_array_append_new(json_object_get(o, "choices"), ch);
        add_usage_if(r, o);
        emit(r, o);
    }
    json_decref(lp);
}

/* vLLM's /generate: the prompt leads the text; each line carries every choice's text so far */
static void generate_events(srv_req *r, int idx, srv_choice *c, srv_ev *ev, json_t *lp) {
    (void)idx;
    if (!c->started && r->gen.prompt_text) srv_buf_adds(&c->text, r->gen.prompt_text);
    srv_buf_add(&c->text, ev->text, ev->text_len);
    c->started = true;
    if (r->gen.stream && (ev->text_len || ev->finish)) {
        json_t *arr = json_array();
        for (int i = 0; i < r->gen.n; i++) {
            const srv_choice *ci = &r->choices[i];
            json_array_append_new(
                arr, jstr(ci->text.p ? ci->text.p : (r->gen.prompt_text ? r->gen.prompt_text : ""),
                          ci->text.p ? ci->text.len
                                     : (r->gen.prompt_text ? strlen(r->gen.prompt_text) : 0)));
        }
        emit(r, json_pack("{s:o}", "text", arr));
    }
    json_decref(lp);
}

static void responses_events(srv_req *r, int idx, srv_choice *c, srv_ev *ev, json_t *lp) {
    (void)idx;
    json_decref(lp);
    srv_resp_events(r, c, ev);
}

static void llama_events(srv_req *r, int idx, srv_choice *c, srv_ev *ev, json_t *lp) {
    (void)idx;
    json_decref(lp);
    srv_llama_events(r, c, ev);
}

static void embed_events(srv_req *r, int idx, srv_choice *c, srv_ev *ev, json_t *lp) {
    (void)r, (void)idx;
    json_decref(lp);
    srv_embed_take(c, ev);
}

void srv_fmt_events(srv_req *r, srv_ev *list) {
    for (srv_ev *ev = list; ev; ev = ev->next) {
        int idx = ev->index;
        srv_choice *c = &r->choices[idx];
        if (c->finish != CLLM_FINISH_NONE) continue; /* nothing after a final */
        srv_plp_take(r, idx, ev);
        if (r->gen.score_only) {
            /* max_tokens 0: the one sampled token is not part of the answer */
            ev->text_len = 0;
            ev->n_tokens = 0;
            ev->completion_tokens = 0;
            if (ev->finish == CLLM_FINISH_STOP) ev->finish = CLLM_FINISH_LENGTH;
            free(ev->stop_str);
            ev->stop_str = NULL;
            ev->has_stop_token = false;
        }
        if (ev->finish != CLLM_FINISH_NONE) {
            c->finish = ev->finish;
            c->completion_tokens = ev->completion_tokens;
            if (!r->gen.n_batch) {
                if (ev->prompt_tokens) r->prompt_tokens = ev->prompt_tokens;
                if (ev->cached_prompt_tokens) r->cached_tokens = ev->cached_prompt_tokens;
            } else if (idx % r->gen.s.n == 0) { /* a batch: each prompt counted once */
                r->prompt_tokens += ev->prompt_tokens;
                r->cached_tokens += ev->cached_prompt_tokens;
            }
            if (ev->error) c->error = strdup(ev->error);
            c->stop_str = ev->stop_str;
            ev->stop_str = NULL;
            c->has_stop_token = ev->has_stop_token;
            c->stop_token = ev->stop_token;
        } else {
            c->completion_tokens += ev->n_tokens;
        }
        const srv_fmt *f = srv_fmt_of(r->route);
        json_t *lp = NULL;
        /* echo with logprobs: the prompt's tokens come first (oai_score.c) */
        bool echo_lp = r->route == SRV_COMPLETIONS && r->gen.echo && !c->started && want_lp(r);
        bool gen_lp = want_lp(r) && ev->lp && ev->n_tokens > 0;
        if (echo_lp || gen_lp) {
            json_t *dst = r->gen.stream ? (lp = lp_new(r)) : (c->lp ? c->lp : (c->lp = lp_new(r)));
            if (echo_lp) srv_plp_echo(r, c, idx, dst);
            if (gen_lp) lp_add(r, c, dst, ev);
        }
        f->events(r, idx, c, ev, lp);
        if (r->gen.stream && ev->finish == CLLM_FINISH_ERROR && !f->ndjson)
            stream_error(r, ev->error);
    }
}

void srv_fmt_trailer(srv_req *r) {
    if (!srv_fmt_of(r->route)->usage_chunks) return; /* no [DONE] there */
    if (r->gen.include_usage) {
        json_t *o = chunk_head(r);
        json_object_set_new(o, "usage", usage_json(r));
        emit(r, o);
    }
    srv_buf_adds(&r->out, "data: [DONE]\n\n");
}

/* Non-stream bodies. Returns NULL with e set when a sample failed. */
json_t *srv_fmt_final(srv_req *r, srv_err *e) {
    for (int i = 0; i < r->gen.n; i++)
        if (r->choices[i].finish == CLLM_FINISH_ERROR) {
            bool down = __atomic_load_n(&r->srv->failed, __ATOMIC_ACQUIRE) == 1; /* set_failed */
            srv_err_set(e, down ? 503 : 500, down ? "service_unavailable" : "InternalServerError",
                        NULL, "%s",
                        r->choices[i].error ? r->choices[i].error : "generation failed");
            return NULL;
        }
    return srv_fmt_of(r->route)->final(r, e);
}

static json_t *generate_final(srv_req *r, srv_err *e) {
    (void)e;
    json_t *arr = json_array();
    for (int i = 0; i < r->gen.n; i++) {
        srv_choice *c = &r->choices[i];
        if (!c->started && r->gen.prompt_text) srv_buf_adds(&c->text, r->gen.prompt_text);
        json_array_append_new(arr, jstr(c->text.p ? c->text.p : "", c->text.len));
    }
    return json_pack("{s:o}", "text", arr);
}

/* completions and chat */
static json_t *openai_final(srv_req *r, srv_err *e) {
    (void)e;
    json_t *o =
        json_pack("{s:s, s:s, s:i, s:s, s:[]}", "id", r->id, "object", srv_fmt_of(r->route)->object,
                  "created", (json_int_t)r->created, "model", r->srv->model_name, "choices");
    json_t *choices = json_object_get(o, "choices");
    for (int i = 0; i < r->gen.n; i++) {
        srv_choice *c = &r->choices[i];
        json_t *lp = c->lp ? json_incref(c->lp) : (want_lp(r) ? lp_new(r) : json_null());
        if (r->route == SRV_CHAT) {
            const char *content = cllm_outp_content(c->parser);
            const char *reasoning = cllm_outp_reasoning(c->parser);
            json_t *msg = json_pack("{s:s}", "role", "assistant");
            json_t *cj = content && (*content || !c->n_tool_calls) ? jstr(content, strlen(content))
                                                                   : json_null();
            if (r->gen.chat_echo) { /* vLLM: the last message's content, then the answer's */
                srv_buf t = {0};
                srv_buf_adds(&t, r->gen.chat_echo);
                if (json_is_string(cj)) srv_buf_adds(&t, json_string_value(cj));
                json_decref(cj);
                cj = jstr(t.p ? t.p : "", t.len);
                srv_buf_free(&t);
            }
            json_object_set_new(msg, "content", cj);
            /* an empty think block is no reasoning: null, as vLLM sends */
            json_t *rs = reasoning && *reasoning ? jstr(reasoning, strlen(reasoning)) : json_null();
            json_object_set(msg, "reasoning_content", rs);
            json_object_set_new(msg, "reasoning", rs);
            json_object_set_new(msg, "tool_calls",
                                c->tool_calls ? json_incref(c->tool_calls) : json_array());
            json_array_append_new(choices,
                                  json_pack("{s:i, s:o, s:o, s:s, s:o}", "index", i, "message", msg,
                                            "logprobs", lp, "finish_reason", finish_str(r, c),
                                            "stop_reason", stop_reason(c)));
        } else {
            if (!c->started && r->gen.echo && srv_gen_prompt_text(&r->gen, i))
                srv_buf_adds(&c->text, srv_gen_prompt_text(&r->gen, i));
            json_t *ch =
                json_pack("{s:i, s:o, s:o, s:s, s:o}", "index", i, "text",
                          jstr(c->text.p ? c->text.p : "", c->text.len), "logprobs", lp,
                          "finish_reason", finish_str(r, c), "stop_reason", stop_reason(c));
            if (r->gen.show_prompt_lp)
                json_object_set_new(ch, "prompt_logprobs", srv_plp_json(r, i));
            json_array_append_new(choices, ch);
        }
    }
    /* chat: vLLM puts them beside the choices (one prompt) */
    if (r->route == SRV_CHAT && r->gen.show_prompt_lp)
        json_object_set_new(o, "prompt_logprobs", srv_plp_json(r, 0));
    json_object_set_new(o, "usage", usage_json(r));
    return o;
}

static const srv_fmt fmts[] = {
    [SRV_COMPLETIONS] = {.id_prefix = "cmpl-",
                         .object = "text_completion",
                         .chunk_object = "text_completion",
                         .usage_chunks = true,
                         .lp = SRV_LP_COMPLETIONS,
                         .events = completion_events,
                         .final = openai_final},
    [SRV_CHAT] = {.id_prefix = "chatcmpl-",
                  .object = "chat.completion",
                  .chunk_object = "chat.completion.chunk",
                  .usage_chunks = true,
                  .lp = SRV_LP_CHAT,
                  .events = chat_events,
                  .final = openai_final},
    [SRV_GENERATE] = {.id_prefix = "cmpl-",
                      .ndjson = true,
                      .lp = SRV_LP_COMPLETIONS,
                      .events = generate_events,
                      .final = generate_final},
    [SRV_RESPONSES] = {.id_prefix = "resp_",
                       .lp = SRV_LP_COMPLETIONS,
                       .events = responses_events,
                       .final = srv_resp_final},
    /* nothing is sampled, so no logprobs; never streamed */
    [SRV_EMBEDDINGS] = {.id_prefix = "embd-",
                        .lp = SRV_LP_NONE,
                        .events = embed_events,
                        .final = srv_embed_final},
    /* its logprobs are llama_api.c's completion_probabilities */
    [SRV_LLAMA] = {.id_prefix = "cmpl-",
                   .lp = SRV_LP_NONE,
                   .events = llama_events,
                   .final = srv_llama_final},
};

const srv_fmt *srv_fmt_of(srv_route route) {
    return &fmts[route];
}
