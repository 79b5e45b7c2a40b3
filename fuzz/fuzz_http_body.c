/* libFuzzer target: a generation request body as the server receives it -> srv_parse_gen (the
 * JSON body -> srv_gen request struct of openai.c: sampling fields, stop, logit_bias, prompt as
 * text or ids, chat messages -> template -> tokens, context-length checks) and srv_parse_tokenize.
 * The first byte picks the route. Must never crash or leak; on success the struct must satisfy
 * what srv_req.c relies on (1 <= n <= max_n, 0 < prompt < max_model_len, prompt + max_tokens <=
 * max_model_len, stop strings non-empty); on failure the error must be a 4xx with a message
 * whose JSON object renders and parses. Uses models/tiny's tokenizer and chat template
 * ($CLLM_FUZZ_MODEL to change). Build: CC=clang cmake -S . -B build-fuzz -DCLLM_FUZZ=ON. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_int.h"

static cllm_server S;
static cllm_tok *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *dir = getenv("CLLM_FUZZ_MODEL");
    if (!dir) dir = "models/tiny";
    cllm_error err = {0};
    if (cllm_tok_load(dir, &tok, &err)) {
        fprintf(stderr, "fuzz_http_body: %s (set CLLM_FUZZ_MODEL)\n", err.msg);
        abort();
    }
    cllm_server_opts_defaults(&S.o);
    S.tok = tok;
    S.model_name = "tiny";
    S.max_model_len = 256;
    const char *src = cllm_tok_chat_template(tok);
    if (!src || cllm_jinja_compile(src, strlen(src), &S.tmpl, &err)) {
        fprintf(stderr, "fuzz_http_body: chat template: %s\n", err.msg);
        abort();
    }
    return 0;
}

static void check_err(const srv_err *e) {
    if (e->status < 400 || e->status > 499 || !e->msg[0]) abort();
    char *js = srv_fmt_error_json(e);
    if (!js) abort();
    json_t *o = json_loads(js, 0, NULL);
    if (!json_is_object(json_object_get(o, "error"))) abort();
    json_decref(o);
    free(js);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    json_t *body = json_loadb((const char *)data + 1, size - 1, 0, NULL);
    if (!body) return 0;
    srv_gen g;
    srv_err e;
    memset(&e, 0, sizeof(e));
    int route = data[0] % 4;
    if (route == 3) {
        if (srv_parse_tokenize(&S, body, &g, &e)) {
            if (g.prompt.n && !g.prompt.ids) abort();
        } else {
            check_err(&e);
        }
    } else if (srv_parse_gen(&S, (srv_route)route, body, &g, &e)) {
        /* batched /v1/completions prompts: n = n_batch * s.n and each prompt is in batch[] */
        int np = g.n_batch > 0 ? g.n_batch : 1;
        if (g.n < 1 || g.n > S.o.max_n || g.n % np) abort();
        for (int k = 0; k < np; k++) {
            const cllm_tok_ids *pr = g.n_batch > 0 ? &g.batch[k] : &g.prompt;
            if (pr->n < 1 || (int)pr->n >= S.max_model_len) abort();
            if (g.s.max_tokens < 1 || (long)g.s.max_tokens + (long)pr->n > S.max_model_len) abort();
            for (size_t i = 0; i < pr->n; i++)
                if (pr->ids[i] < 0 || pr->ids[i] >= cllm_tok_n_vocab(tok)) abort();
        }
        for (int i = 0; i < g.n_stop; i++)
            if (!g.stop[i] || !g.stop[i][0]) abort();
    } else {
        check_err(&e);
    }
    srv_gen_free(&g);
    json_decref(body);
    return 0;
}
