/* Exactness of encode against the HF Rust tokenizer on the committed corpus.
 *
 * Reference ids come from tools/tokref/gen_tok_ref.js (npm @anush008/tokenizers) and are stored
 * as per-document counts and hashes in tests/data/tokenizer/ref/{qwen3,qwen35}/. The tokenizer
 * itself is read from node_modules (npm ci); without it this test fails and says so.
 * Also: decode(encode(x)) == NFC(x) on every document, and decode of random id sequences
 * (with and without skip_special) equals HF's decode byte for byte. */
#include <jansson.h>
#include <utf8proc.h>

#include "test.h"
#include "test_tok_common.h"

static const char *CORPORA[] = {"kjv", "fortunes_zh", "code", "synth"};

static void check_corpus(cllm_tok *tok, const char *tname, const char *corpus, size_t *n_docs,
                         size_t *n_tokens, size_t *n_bad, size_t *n_rt_bad) {
    char rel[256];
    snprintf(rel, sizeof(rel), "tests/data/tokenizer/corpus/%s.txt", corpus);
    size_t len = 0;
    char *text = tt_read(tt_path(rel), &len);
    snprintf(rel, sizeof(rel), "tests/data/tokenizer/ref/%s/%s.ref", tname, corpus);
    char *ref = tt_read(tt_path(rel), NULL);
    CHECK_MSG(text && ref, "missing corpus or ref for %s/%s", tname, corpus);
    if (!text || !ref) {
        free(text);
        free(ref);
        return;
    }
    size_t pos = 0, doc = 0, shown = 0;
    char *rp = ref;
    while (pos < len) {
        size_t start = pos, dl = tt_next_doc(text, len, &pos);
        unsigned long long want_n = strtoull(rp, &rp, 10), want_h = strtoull(rp, &rp, 16);
        cllm_tok_ids ids = {0};
        cllm_error err = {0};
        CHECK(cllm_tok_encode(tok, text + start, dl, 0, &ids, &err) == CLLM_OK);
        uint64_t h = tt_fnv64(ids.ids, ids.n);
        if (ids.n != want_n || h != want_h) {
            (*n_bad)++;
            if (shown++ < 3) {
                fprintf(stderr,
                        "MISMATCH %s/%s doc %zu (want %llu ids, got %zu): [%.*s]\n  ours:", tname,
                        corpus, doc, want_n, ids.n, (int)(dl > 300 ? 300 : dl), text + start);
                for (size_t i = 0; i < ids.n && i < 60; i++) fprintf(stderr, " %d", ids.ids[i]);
                fprintf(stderr, "\n");
            }
        }
        /* Round trip: decoding gives back the NFC form of the (sanitized) text. */
        size_t sl;
        char *san = cllm_tok_utf8_sanitize(text + start, dl, &sl);
        utf8proc_uint8_t *nfc = NULL;
        utf8proc_ssize_t nl = utf8proc_map((const utf8proc_uint8_t *)san, (utf8proc_ssize_t)sl,
                                           &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        char *back = NULL;
        size_t bl = 0;
        cllm_tok_decode(tok, ids.ids, ids.n, false, &back, &bl, &err);
        if (nl < 0 || !back || bl != (size_t)nl || memcmp(back, nfc, bl)) (*n_rt_bad)++;
        free(san);
        free(nfc);
        free(back);
        *n_tokens += ids.n;
        cllm_tok_ids_free(&ids);
        doc++;
    }
    *n_docs += doc;
    free(text);
    free(ref);
}

static void check_decode(cllm_tok *tok) {
    json_error_t je;
    json_t *root = NULL;
    FILE *f = fopen(tt_path("tests/data/tokenizer/ref/qwen3/decode.jsonl"), "rb");
    CHECK_MSG(f != NULL, "missing decode.jsonl");
    if (!f) return;
    char line[65536];
    int n = 0, bad = 0, stream_bad = 0;
    while (fgets(line, sizeof(line), f)) {
        root = json_loads(line, 0, &je);
        if (!root) continue;
        json_t *ja = json_object_get(root, "ids");
        bool skip = json_is_true(json_object_get(root, "skip"));
        const char *want = json_string_value(json_object_get(root, "text"));
        size_t wl = json_string_length(json_object_get(root, "text"));
        int32_t ids[64];
        size_t k = 0;
        for (; k < json_array_size(ja) && k < 64; k++)
            ids[k] = (int32_t)json_integer_value(json_array_get(ja, k));
        char *got = NULL;
        size_t gl = 0;
        cllm_error err = {0};
        cllm_tok_decode(tok, ids, k, skip, &got, &gl, &err);
        if (!got || gl != wl || memcmp(got, want, wl)) {
            if (bad++ < 3)
                fprintf(stderr, "DECODE MISMATCH %s: want [%s] got [%s]\n", line, want,
                        got ? got : "(null)");
        }
        /* The streaming detokenizer must produce the same text. */
        cllm_tok_stream st;
        cllm_tok_stream_init(&st, tok, skip);
        char acc[8192];
        size_t al = 0, pl;
        for (size_t i = 0; i < k; i++) {
            const char *p = cllm_tok_stream_push(&st, ids[i], &pl, &err);
            if (p && al + pl < sizeof(acc)) memcpy(acc + al, p, pl), al += pl;
        }
        const char *p = cllm_tok_stream_flush(&st, &pl);
        memcpy(acc + al, p, pl), al += pl;
        if (al != wl || memcmp(acc, want, wl)) stream_bad++;
        cllm_tok_stream_free(&st);
        free(got);
        json_decref(root);
        n++;
    }
    fclose(f);
    fprintf(stderr, "decode: %d cases, %d mismatches, %d stream mismatches\n", n, bad, stream_bad);
    CHECK(n >= 1000);
    CHECK(bad == 0);
    CHECK(stream_bad == 0);
}

int main(void) {
    for (int q = 0; q < 2; q++) {
        const char *tname = q ? "qwen35" : "qwen3";
        cllm_tok *tok = tt_load_qwen(q);
        CHECK_MSG(tok != NULL, "cannot load the %s tokenizer", tname);
        if (!tok) continue;
        size_t docs = 0, toks = 0, bad = 0, rt = 0;
        for (size_t c = 0; c < sizeof(CORPORA) / sizeof(*CORPORA); c++)
            check_corpus(tok, tname, CORPORA[c], &docs, &toks, &bad, &rt);
        /* One-off larger runs: put NAME.txt in the corpus dir, run gen_tok_ref.js, set this. */
        if (getenv("CLLM_TOK_EXTRA_CORPUS"))
            check_corpus(tok, tname, getenv("CLLM_TOK_EXTRA_CORPUS"), &docs, &toks, &bad, &rt);
        fprintf(stderr,
                "%s: %zu documents, %zu tokens, %zu encode mismatches, %zu round-trip mismatches\n",
                tname, docs, toks, bad, rt);
        CHECK(docs > 10000);
        CHECK(bad == 0);
        CHECK(rt == 0);
        if (!q) check_decode(tok);
        /* Fuzzer finds: inputs that once crashed encode must now round-trip. */
        size_t fl = 0;
        char *fz = tt_read(tt_path("tests/data/tokenizer/fuzz-regress/bpe-heap-overflow.bin"), &fl);
        CHECK(fz != NULL);
        if (fz) {
            cllm_tok_ids ids = {0};
            CHECK(cllm_tok_encode(tok, fz, fl, 0, &ids, NULL) == CLLM_OK && ids.n > 0);
            cllm_tok_ids_free(&ids);
            free(fz);
        }
        cllm_tok_free(tok);
    }
    return test_report("test_tok_exact");
}
