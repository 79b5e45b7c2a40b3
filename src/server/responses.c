/* The OpenAI Responses API (POST /v1/responses, GET /v1/responses/{id}) over the chat pipeline.
 *
 * A request is translated into a chat body (instructions -> system message, `input` text or items
 * -> messages, function_call / function_call_output items -> assistant tool_calls / tool
 * messages, previous_response_id -> the stored conversation in front, tools -> chat tools,
 * max_output_tokens -> max_tokens) and parsed by openai.c as a chat request, so templates,
 * reasoning and tool-call parsing are the chat route's. The output is formatted here: reasoning,
 * message and function_call items, and for stream: true the typed events (response.created,
 * response.output_item.added, response.output_text.delta, ... response.completed) as OpenAI
 * sends them. Finished responses (store: true, the default) go to a process-local store capped at
 * SRV_RESP_STORE entries (oldest dropped first) for previous_response_id and GET. One sample only
 * (no n). Runs on the MHD thread, like oai_fmt.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv_int.h"

#define SRV_RESP_STORE 256

/* ---- the store ---- */

typedef struct resp_entry {
    char id[48];
    json_t *messages; /* the conversation up to and including this response (no instructions) */
    json_t *response; /* the response object */
} resp_entry;

struct srv_resp_store {
    pthread_mutex_t mu;
    resp_entry e[SRV_RESP_STORE];
    int next, n;
};

static struct srv_resp_store *store_get(cllm_server *s) {
    pthread_mutex_lock(&s->mu);
    if (!s->resp_store) {
        s->resp_store = calloc(1, sizeof(*s->resp_store));
        if (s->resp_store) pthread_mutex_init(&s->resp_store->mu, NULL);
    }
    struct srv_resp_store *st = s->resp_store;
    pthread_mutex_unlock(&s->mu);
    return st;
}

void srv_resp_store_free(struct srv_resp_store *st) {
    if (!st) return;
    for (int i = 0; i < SRV_RESP_STORE; i++) {
        json_decref(st->e[i].messages);
        json_decref(st->e[i].response);
    }
    pthread_mutex_destroy(&st->mu);
    free(st);
}

static void store_put(cllm_server *s, const char *id, json_t *messages, json_t *response) {
    struct srv_resp_store *st = store_get(s);
    if (!st) return;
    pthread_mutex_lock(&st->mu);
    resp_entry *e = &st->e[st->next];
    json_decref(e->messages);
    json_decref(e->response);
    snprintf(e->id, sizeof(e->id), "%s", id);
    e->messages = json_incref(messages);
    e->response = json_incref(response);
    st->next = (st->next + 1) % SRV_RESP_STORE;
    if (st->n < SRV_RESP_STORE) st->n++;
    pthread_mutex_unlock(&st->mu);
}

/* New references to a stored entry's parts (NULL when unknown or evicted). */
static bool store_find(cllm_server *s, const char *id, json_t **messages, json_t **response) {
    struct srv_resp_store *st = store_get(s);
    if (!st) return false;
    bool found = false;
    pthread_mutex_lock(&st->mu);
    for (int i = 0; i < SRV_RESP_STORE && !found; i++)
        if (st->e[i].response && !strcmp(st->e[i].id, id)) {
            if (messages) *messages = json_incref(st->e[i].messages);
            if (response) *response = json_incref(st->e[i].response);
            found = true;
        }
    pthread_mutex_unlock(&st->mu);
    return found;
}

json_t *srv_resp_lookup(cllm_server *s, const char *id) {
    json_t *r = NULL;
    return store_find(s, id, NULL, &r) ? r : NULL;
}

json_t *srv_resp_cancel(cllm_server *s, const char *tail, srv_err *e) {
    char id[128];
    size_t n = strlen(tail) - 7;
    memset(e, 0, sizeof(*e));
    if (n >= sizeof(id) || memchr(tail, '/', n)) {
        srv_err_set(e, 404, "invalid_request_error", NULL, "Response with id '%.*s' not found.",
                    (int)(n < 60 ? n : 60), tail);
        return NULL;
    }
    memcpy(id, tail, n);
    id[n] = 0;
    json_t *o = srv_resp_lookup(s, id);
    if (!o) {
        srv_err_set(e, 404, "invalid_request_error", NULL, "Response with id '%.60s' not found.",
                    id);
        return NULL;
    }
    json_decref(o);
    /* vLLM's exact words (clients match them); 'background' itself is refused at creation */
    srv_err_set(e, 400, "invalid_request_error", NULL, "Cannot cancel a synchronous response.");
    return NULL;
}

/* ---- request: Responses body -> chat body ---- */

static bool bad(srv_err *e, const char *param, const char *msg) {
    srv_err_set(e, 400, "invalid_request_error", param, "%s", msg);
    return false;
}

/* content with input_image parts -> chat parts: text parts as text, images as image_url
 * (srv_image.c loads them when the chat body is parsed). */
static json_t *content_parts(json_t *c, srv_err *e) {
    json_t *out = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        const char *ty = json_string_value(json_object_get(p, "type"));
        json_t *tx = json_object_get(p, "text"), *url = json_object_get(p, "image_url");
        if (ty && strcmp(ty, "input_image") && json_is_string(tx)) {
            json_array_append_new(out, json_pack("{s:s, s:O}", "type", "text", "text", tx));
        } else if (ty && !strcmp(ty, "input_image") && json_is_string(url)) {
            json_array_append_new(
                out, json_pack("{s:s, s:{s:O}}", "type", "image_url", "image_url", "url", url));
        } else {
            json_decref(out);
            return bad(e, "input",
                       "content parts must be input_text, output_text or input_image with an "
                       "image_url (file_id is not supported)"),
                   NULL;
        }
    }
    return out;
}

/* content: a string or [{type: input_text|output_text|text, text}] -> a string; with
 * input_image parts, chat content parts. */
static json_t *content_text(json_t *c, srv_err *e) {
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c))
        return bad(e, "input", "input content must be a string or an array of parts"), NULL;
    srv_buf t = {0};
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        const char *pt = json_string_value(json_object_get(p, "type"));
        if (pt && !strcmp(pt, "input_image")) return content_parts(c, e);
    }
    json_array_foreach(c, i, p) {
        const char *ty = json_string_value(json_object_get(p, "type"));
        json_t *tx = json_object_get(p, "text");
        if (!ty || (strcmp(ty, "input_text") && strcmp(ty, "output_text") && strcmp(ty, "text")) ||
            !json_is_string(tx)) {
            srv_buf_free(&t);
            return bad(e, "input",
                       "only text content parts (input_text, output_text) are supported"),
                   NULL;
        }
        srv_buf_add(&t, json_string_value(tx), json_string_length(tx));
    }
    json_t *s = json_stringn(t.p ? t.p : "", t.len);
    srv_buf_free(&t);
    return s;
}

/* Appends the chat messages of one input item. */
static bool add_item(json_t *msgs, json_t *it, srv_err *e) {
    const char *ty = json_string_value(json_object_get(it, "type"));
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!ty || !strcmp(ty, "message")) {
        if (!role) return bad(e, "input", "an input message needs a role");
        json_t *c = content_text(json_object_get(it, "content"), e);
        if (!c) return false;
        json_array_append_new(msgs, json_pack("{s:s, s:o}", "role", role, "content", c));
        return true;
    }
    if (!strcmp(ty, "function_call")) {
        json_t *name = json_object_get(it, "name"), *args = json_object_get(it, "arguments"),
               *cid = json_object_get(it, "call_id");
        if (!json_is_string(name) || !json_is_string(args) || !json_is_string(cid))
            return bad(e, "input", "a function_call item needs name, arguments and call_id");
        json_t *tc = json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", cid, "type", "function",
                               "function", "name", name, "arguments", args);
        json_array_append_new(msgs, json_pack("{s:s, s:s, s:[o]}", "role", "assistant", "content",
                                              "", "tool_calls", tc));
        return true;
    }
    if (!strcmp(ty, "function_call_output")) {
        json_t *cid = json_object_get(it, "call_id"), *out = json_object_get(it, "output");
        if (!json_is_string(cid) || !json_is_string(out))
            return bad(e, "input", "a function_call_output item needs call_id and output strings");
        json_array_append_new(msgs, json_pack("{s:s, s:O, s:O}", "role", "tool", "tool_call_id",
                                              cid, "content", out));
        return true;
    }
    if (!strcmp(ty, "reasoning")) return true; /* earlier reasoning is not replayed (as chat) */
    srv_err_set(e, 400, "invalid_request_error", "input",
                "input item type '%.40s' is not supported", ty);
    return false;
}

/* Responses tools [{type: function, name, description, parameters}] -> chat tools. */
static json_t *chat_tools(json_t *tools, srv_err *e) {
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *ty = json_string_value(json_object_get(t, "type"));
        if (!ty || strcmp(ty, "function") || !json_is_string(json_object_get(t, "name"))) {
            json_decref(out);
            return bad(e, "tools", "only function tools with a name are supported"), NULL;
        }
        json_t *fn = json_pack("{s:O}", "name", json_object_get(t, "name"));
        if (json_object_get(t, "description"))
            json_object_set(fn, "description", json_object_get(t, "description"));
        if (json_object_get(t, "parameters"))
            json_object_set(fn, "parameters", json_object_get(t, "parameters"));
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", fn));
    }
    return out;
}

/* Fields cllm cannot honour are refused, never dropped. */
static bool refuse_unsupported(json_t *body, srv_err *e) {
    if (json_is_true(json_object_get(body, "background")))
        return bad(e, "background", "background responses are not supported");
    json_t *n = json_object_get(body, "n");
    if (n && !(json_is_integer(n) && json_integer_value(n) == 1))
        return bad(e, "n", "the Responses API returns one output (n = 1)");
    json_t *fmt = json_object_get(json_object_get(body, "text"), "format");
    const char *ft = json_string_value(json_object_get(fmt, "type"));
    if (fmt &&
        (!ft || (strcmp(ft, "text") && strcmp(ft, "json_object") && strcmp(ft, "json_schema"))))
        return bad(e, "text", "text.format must be text, json_object or json_schema");
    return true;
}

/* Builds the chat body; *history (new ref) is the messages without instructions. */
static json_t *chat_body(cllm_server *s, json_t *body, json_t **history, srv_err *e) {
    *history = NULL;
    if (!json_is_object(body)) return bad(e, NULL, "the request body must be a JSON object"), NULL;
    if (!refuse_unsupported(body, e)) return NULL;
    json_t *msgs = NULL;
    json_t *prev = json_object_get(body, "previous_response_id");
    if (prev && !json_is_null(prev)) {
        if (!json_is_string(prev)) return bad(e, "previous_response_id", "must be a string"), NULL;
        json_t *old = NULL;
        if (!store_find(s, json_string_value(prev), &old, NULL)) {
            srv_err_set(e, 404, "invalid_request_error", "previous_response_id",
                        "Previous response with id '%.60s' not found.", json_string_value(prev));
            return NULL;
        }
        msgs = json_deep_copy(old);
        json_decref(old);
    }
    if (!msgs) msgs = json_array();
    json_t *in = json_object_get(body, "input");
    if (json_is_string(in)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", in));
    } else if (json_is_array(in)) {
        size_t i;
        json_t *it;
        json_array_foreach(in, i, it) if (!add_item(msgs, it, e)) {
            json_decref(msgs);
            return NULL;
        }
    } else {
        json_decref(msgs);
        return bad(e, "input", "'input' (a string or an array of items) is required"), NULL;
    }
    json_t *chat = json_object();
    json_t *all = json_array();
    json_t *ins = json_object_get(body, "instructions");
    if (json_is_string(ins))
        json_array_append_new(all, json_pack("{s:s, s:O}", "role", "system", "content", ins));
    json_array_extend(all, msgs);
    json_object_set_new(chat, "messages", all);
    *history = msgs;
    static const char *const copy[] = {
        "model",       "temperature",          "top_p", "stream", "seed",
        "tool_choice", "chat_template_kwargs", "top_k", "min_p",  "repetition_penalty",
        "stop"};
    for (size_t k = 0; k < sizeof(copy) / sizeof(*copy); k++) {
        json_t *v = json_object_get(body, copy[k]);
        if (v) json_object_set(chat, copy[k], v);
    }
    json_t *tc = json_object_get(chat, "tool_choice");
    if (json_is_object(tc) && json_is_string(json_object_get(tc, "name")))
        json_object_set_new(chat, "tool_choice",
                            json_pack("{s:s, s:{s:O}}", "type", "function", "function", "name",
                                      json_object_get(tc, "name")));
    /* text.format -> the chat route's response_format (structured outputs, srv_struct.c) */
    json_t *fmt = json_object_get(json_object_get(body, "text"), "format");
    const char *ft = json_string_value(json_object_get(fmt, "type"));
    if (ft && !strcmp(ft, "json_object"))
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
    if (ft && !strcmp(ft, "json_schema")) {
        json_t *js = json_object();
        static const char *const keys[] = {"name", "schema", "strict", "description"};
        for (size_t k = 0; k < 4; k++)
            if (json_object_get(fmt, keys[k]))
                json_object_set(js, keys[k], json_object_get(fmt, keys[k]));
        json_object_set_new(chat, "response_format",
                            json_pack("{s:s, s:o}", "type", "json_schema", "json_schema", js));
    }
    json_t *mot = json_object_get(body, "max_output_tokens");
    if (mot && !json_is_null(mot)) json_object_set(chat, "max_tokens", mot);
    json_t *tools = json_object_get(body, "tools");
    if (json_is_array(tools) && json_array_size(tools)) {
        json_t *ct = chat_tools(tools, e);
        if (!ct) {
            json_decref(chat);
            json_decref(*history);
            *history = NULL;
            return NULL;
        }
        json_object_set_new(chat, "tools", ct);
    }
    return chat;
}

/* ---- output ---- */

typedef enum { ITEM_NONE, ITEM_REASONING, ITEM_MESSAGE } item_kind;

struct srv_resp_state {
    json_t *request;  /* the original body (echoed fields) */
    json_t *history;  /* messages without instructions */
    json_t *output;   /* finished items */
    item_kind open;   /* the item being streamed */
    char item_id[48]; /* its id */
    srv_buf text;     /* its text so far */
    int seq;          /* sequence_number of the next event */
    bool created, store;
};

void srv_resp_state_free(struct srv_resp_state *st) {
    if (!st) return;
    json_decref(st->request);
    json_decref(st->history);
    json_decref(st->output);
    srv_buf_free(&st->text);
    free(st);
}

static void new_id(char *out, size_t cap, const char *prefix) {
    static unsigned long long ctr;
    unsigned long long x = __atomic_add_fetch(&ctr, 1, __ATOMIC_RELAXED) * 0x9E3779B97F4A7C15ULL ^
                           (unsigned long long)(srv_now() * 1e9);
    snprintf(out, cap, "%s_%016llx", prefix, x);
}

static void event(srv_req *r, const char *type, json_t *o) {
    struct srv_resp_state *st = r->resp;
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "sequence_number", json_integer(st->seq++));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!s) {
        r->out.oom = true;
        return;
    }
    srv_buf_printf(&r->out, "event: %s\ndata: %s\n\n", type, s);
    free(s);
}

static json_t *jtext(const char *p, size_t n) {
    json_t *v = json_stringn(p ? p : "", n);
    if (v) return v;
    size_t m;
    char *t = cllm_tok_utf8_sanitize(p, n, &m);
    v = t ? json_stringn(t, m) : json_string("");
    free(t);
    return v;
}

/* status: "completed", or "incomplete" for the item max_output_tokens cut (as OpenAI's) */
static json_t *item_json(struct srv_resp_state *st, const char *status) {
    json_t *t = jtext(st->text.p, st->text.len);
    if (st->open == ITEM_REASONING)
        return json_pack("{s:s, s:s, s:[], s:[{s:s, s:o}], s:s}", "type", "reasoning", "id",
                         st->item_id, "summary", "content", "type", "reasoning_text", "text", t,
                         "status", status);
    return json_pack("{s:s, s:s, s:s, s:s, s:[{s:s, s:o, s:[], s:[]}]}", "type", "message", "id",
                     st->item_id, "status", status, "role", "assistant", "content", "type",
                     "output_text", "text", t, "annotations", "logprobs");
}

static void close_item(srv_req *r, const char *status) {
    struct srv_resp_state *st = r->resp;
    if (st->open == ITEM_NONE) return;
    int idx = (int)json_array_size(st->output);
    json_t *item = item_json(st, status);
    if (r->gen.stream) {
        json_t *t = jtext(st->text.p, st->text.len);
        if (st->open == ITEM_MESSAGE) {
            event(r, "response.output_text.done",
                  json_pack("{s:s, s:i, s:i, s:O, s:[]}", "item_id", st->item_id, "output_index",
                            idx, "content_index", 0, "text", t, "logprobs"));
            event(r, "response.content_part.done",
                  json_pack("{s:s, s:i, s:i, s:{s:s, s:O, s:[]}}", "item_id", st->item_id,
                            "output_index", idx, "content_index", 0, "part", "type", "output_text",
                            "text", t, "annotations"));
        } else {
            event(r, "response.reasoning_text.done",
                  json_pack("{s:s, s:i, s:i, s:O}", "item_id", st->item_id, "output_index", idx,
                            "content_index", 0, "text", t));
        }
        json_decref(t);
        event(r, "response.output_item.done",
              json_pack("{s:i, s:O}", "output_index", idx, "item", item));
    }
    json_array_append_new(st->output, item);
    st->open = ITEM_NONE;
    st->text.len = 0;
}

/* Text of kind k: opens an item of that kind when needed, then a delta. */
static void add_text(srv_req *r, item_kind k, const char *p, size_t n) {
    struct srv_resp_state *st = r->resp;
    if (!n) return;
    if (st->open != k) {
        close_item(r, "completed");
        st->open = k;
        new_id(st->item_id, sizeof(st->item_id), k == ITEM_MESSAGE ? "msg" : "rs");
        if (r->gen.stream) {
            int idx = (int)json_array_size(st->output);
            json_t *item =
                k == ITEM_MESSAGE
                    ? json_pack("{s:s, s:s, s:s, s:s, s:[]}", "type", "message", "id", st->item_id,
                                "status", "in_progress", "role", "assistant", "content")
                    : json_pack("{s:s, s:s, s:[], s:[]}", "type", "reasoning", "id", st->item_id,
                                "summary", "content");
            event(r, "response.output_item.added",
                  json_pack("{s:i, s:o}", "output_index", idx, "item", item));
            if (k == ITEM_MESSAGE)
                event(r, "response.content_part.added",
                      json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", st->item_id,
                                "output_index", idx, "content_index", 0, "part", "type",
                                "output_text", "text", "", "annotations"));
        }
    }
    srv_buf_add(&st->text, p, n);
    if (r->gen.stream) {
        int idx = (int)json_array_size(st->output);
        event(r, k == ITEM_MESSAGE ? "response.output_text.delta" : "response.reasoning_text.delta",
              k == ITEM_MESSAGE
                  ? json_pack("{s:s, s:i, s:i, s:o, s:[]}", "item_id", st->item_id, "output_index",
                              idx, "content_index", 0, "delta", jtext(p, n), "logprobs")
                  : json_pack("{s:s, s:i, s:i, s:o}", "item_id", st->item_id, "output_index", idx,
                              "content_index", 0, "delta", jtext(p, n)));
    }
}

static void add_tool_calls(srv_req *r, json_t *tcs) {
    struct srv_resp_state *st = r->resp;
    size_t i;
    json_t *tc;
    json_array_foreach(tcs, i, tc) {
        close_item(r, "completed");
        char id[48], cid[48];
        new_id(id, sizeof(id), "fc");
        new_id(cid, sizeof(cid), "call");
        json_t *args = json_object_get(tc, "arguments");
        char *a = json_is_string(args) ? strdup(json_string_value(args))
                                       : json_dumps(args ? args : json_object(), JSON_COMPACT);
        json_t *item = json_pack("{s:s, s:s, s:s, s:O, s:s, s:s}", "type", "function_call", "id",
                                 id, "call_id", cid, "name", json_object_get(tc, "name"),
                                 "arguments", a ? a : "{}", "status", "completed");
        int idx = (int)json_array_size(st->output);
        if (r->gen.stream) {
            json_t *added = json_deep_copy(item);
            json_object_set_new(added, "arguments", json_string(""));
            json_object_set_new(added, "status", json_string("in_progress"));
            event(r, "response.output_item.added",
                  json_pack("{s:i, s:o}", "output_index", idx, "item", added));
            event(r, "response.function_call_arguments.delta",
                  json_pack("{s:s, s:i, s:s}", "item_id", id, "output_index", idx, "delta",
                            a ? a : "{}"));
            event(r, "response.function_call_arguments.done",
                  json_pack("{s:s, s:i, s:s}", "item_id", id, "output_index", idx, "arguments",
                            a ? a : "{}"));
            event(r, "response.output_item.done",
                  json_pack("{s:i, s:O}", "output_index", idx, "item", item));
        }
        free(a);
        json_array_append_new(st->output, item);
    }
}

static void feed_delta(srv_req *r, cllm_outp_delta *d) {
    add_text(r, ITEM_REASONING, d->reasoning, d->reasoning_len);
    add_text(r, ITEM_MESSAGE, d->content, d->content_len);
    if (d->tool_calls) {
        add_tool_calls(r, d->tool_calls);
        json_decref(d->tool_calls);
        d->tool_calls = NULL;
    }
}

/* The response object; status from the choice (in_progress while it runs). */
static json_t *response_json(srv_req *r, const char *status) {
    struct srv_resp_state *st = r->resp;
    srv_choice *c = &r->choices[0];
    json_t *q = st->request;
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:O}", "id", r->id, "object", "response",
                          "created_at", (json_int_t)r->created, "status", status, "model",
                          r->srv->model_name, "output", st->output);
    bool incomplete = !strcmp(status, "incomplete");
    json_object_set_new(o, "incomplete_details",
                        incomplete ? json_pack("{s:s}", "reason", "max_output_tokens")
                                   : json_null());
    json_object_set_new(o, "error", json_null());
    static const char *const echo[] = {"instructions", "previous_response_id", "temperature",
                                       "top_p",        "max_output_tokens",    "tool_choice",
                                       "metadata"};
    for (size_t k = 0; k < sizeof(echo) / sizeof(*echo); k++) {
        json_t *v = json_object_get(q, echo[k]);
        json_object_set(o, echo[k], v ? v : json_null());
    }
    if (!json_object_get(q, "tool_choice"))
        json_object_set_new(o, "tool_choice", json_string("auto"));
    if (!json_object_get(q, "metadata")) json_object_set_new(o, "metadata", json_object());
    json_t *tools = json_object_get(q, "tools");
    json_object_set_new(o, "tools", tools ? json_incref(tools) : json_array());
    json_object_set_new(o, "parallel_tool_calls", json_true());
    json_object_set_new(o, "text", json_pack("{s:{s:s}}", "format", "type", "text"));
    json_object_set_new(o, "store", json_boolean(st->store));
    if (strcmp(status, "in_progress")) {
        int in = r->prompt_tokens, out = c->completion_tokens;
        json_object_set_new(o, "usage",
                            json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", in,
                                      "input_tokens_details", "cached_tokens", r->cached_tokens,
                                      "output_tokens", out, "output_tokens_details",
                                      "reasoning_tokens", 0, "total_tokens", in + out));
    } else {
        json_object_set_new(o, "usage", json_null());
    }
    return o;
}

/* The conversation to store: history + this response's output as chat messages. */
static json_t *stored_messages(struct srv_resp_state *st) {
    json_t *m = json_deep_copy(st->history);
    srv_buf content = {0};
    json_t *tcs = json_array();
    size_t i;
    json_t *it;
    json_array_foreach(st->output, i, it) {
        const char *ty = json_string_value(json_object_get(it, "type"));
        if (!strcmp(ty, "message")) {
            json_t *t = json_object_get(json_array_get(json_object_get(it, "content"), 0), "text");
            srv_buf_add(&content, json_string_value(t), json_string_length(t));
        } else if (!strcmp(ty, "function_call")) {
            json_array_append_new(tcs, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id",
                                                 json_object_get(it, "call_id"), "type", "function",
                                                 "function", "name", json_object_get(it, "name"),
                                                 "arguments", json_object_get(it, "arguments")));
        }
    }
    json_t *a = json_pack("{s:s, s:o}", "role", "assistant", "content",
                          json_stringn(content.p ? content.p : "", content.len));
    if (json_array_size(tcs)) json_object_set(a, "tool_calls", tcs);
    json_decref(tcs);
    json_array_append_new(m, a);
    srv_buf_free(&content);
    return m;
}

static const char *final_status(const srv_choice *c) {
    return c->finish == CLLM_FINISH_LENGTH ? "incomplete"
           : c->finish == CLLM_FINISH_STOP ? "completed"
                                           : "failed";
}

static void finish(srv_req *r) {
    struct srv_resp_state *st = r->resp;
    srv_choice *c = &r->choices[0];
    close_item(r, c->finish == CLLM_FINISH_LENGTH ? "incomplete" : "completed");
    if (c->finish == CLLM_FINISH_ERROR || c->finish == CLLM_FINISH_ABORT) return;
    json_t *resp = response_json(r, final_status(c));
    if (st->store) {
        json_t *m = stored_messages(st);
        store_put(r->srv, r->id, m, resp);
        json_decref(m);
    }
    if (r->gen.stream)
        event(r, c->finish == CLLM_FINISH_LENGTH ? "response.incomplete" : "response.completed",
              json_pack("{s:o}", "response", resp));
    else
        json_decref(resp);
}

void srv_resp_events(srv_req *r, srv_choice *c, srv_ev *ev) {
    struct srv_resp_state *st = r->resp;
    if (r->gen.stream && !st->created) {
        st->created = true;
        event(r, "response.created",
              json_pack("{s:o}", "response", response_json(r, "in_progress")));
        event(r, "response.in_progress",
              json_pack("{s:o}", "response", response_json(r, "in_progress")));
    }
    cllm_outp_delta d;
    memset(&d, 0, sizeof(d));
    if (ev->text_len) cllm_outp_feed(c->parser, ev->text, ev->text_len, &d);
    feed_delta(r, &d);
    if (ev->finish == CLLM_FINISH_NONE) return;
    memset(&d, 0, sizeof(d));
    if (ev->finish == CLLM_FINISH_LENGTH)
        cllm_outp_finish_cut(c->parser, &d); /* an open tool call stays text, as generated */
    else
        cllm_outp_finish(c->parser, &d);
    feed_delta(r, &d);
    finish(r);
}

json_t *srv_resp_final(srv_req *r, srv_err *e) {
    srv_choice *c = &r->choices[0];
    if (c->finish == CLLM_FINISH_ERROR || c->finish == CLLM_FINISH_ABORT) {
        srv_err_set(e, 500, "InternalServerError", NULL, "%s",
                    c->error ? c->error : "generation failed");
        return NULL;
    }
    return response_json(r, final_status(c));
}

bool srv_resp_parse(cllm_server *s, json_t *body, srv_gen *g, struct srv_resp_state **out,
                    srv_err *e) {
    *out = NULL;
    memset(g, 0, sizeof(*g));
    json_t *history = NULL;
    json_t *chat = chat_body(s, body, &history, e);
    if (!chat) return false;
    bool ok = srv_parse_gen(s, SRV_CHAT, chat, g, e);
    json_decref(chat);
    if (!ok) {
        json_decref(history);
        return false;
    }
    g->route = SRV_RESPONSES;
    struct srv_resp_state *st = calloc(1, sizeof(*st));
    if (!st) {
        json_decref(history);
        srv_err_set(e, 500, "InternalServerError", NULL, "out of memory");
        return false;
    }
    st->request = json_incref(body);
    st->history = history;
    st->output = json_array();
    json_t *store = json_object_get(body, "store");
    st->store = !json_is_false(store);
    *out = st;
    return true;
}
