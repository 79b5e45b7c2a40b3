/* The tokenizer of a GGUF file against the HF tokenizer it was converted from.
 *
 * tools/ref/gguf_vocab.py writes vocab-only GGUFs from the Qwen3 tokenizer the tokenizer tests use
 * (pre "qwen2"), and from its Qwen3.5-regex variant with the Qwen3.5 chat template (pre "qwen35"),
 * both with vocab_size 151936 so the ids past the tokenizer are "[PAD<id>]" fillers as in real
 * files. Each is opened with cllm_gguf_open, turned into JSON by cllm_gguf_tokenizer_json and
 * loaded by cllm_tok_load_mem; then: encode equals the tokenizer.json-loaded tokenizer's on the
 * whole tokenizer corpus token for token (and the HF reference hashes), decode and the token table
 * agree, and the chat template renders as HF's (cases.json). Also: files with bad tokenizer
 * metadata (written here) are refused naming the key. */
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/gguf.h"
#include "model/gguf_tok.h"
#include "test.h"
#include "test_tok_common.h"
#include "tokenizer/chat_template.h"

#define VOCAB_SIZE 151936 /* Qwen3's config.json vocab_size: 267 ids past the tokenizer's */

static const char *CORPORA[] = {"kjv", "fortunes_zh", "code", "synth"};

static char tmpdir[512];

static bool write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

/* Opens a GGUF and builds its tokenizer; NULL with the message in err on failure. */
static cllm_tok *gguf_tok(const char *path, cllm_status *st, cllm_error *err) {
    cllm_gguf *g = NULL;
    cllm_tok *tok = NULL;
    char *tj = NULL, *cj = NULL;
    *st = cllm_gguf_open(path, &g, err);
    if (!*st) *st = cllm_gguf_tokenizer_json(g, &tj, &cj, err);
    if (!*st) *st = cllm_tok_load_mem(tj, strlen(tj), cj, strlen(cj), &tok, err);
    free(tj);
    free(cj);
    cllm_gguf_close(g);
    return tok;
}

static bool ids_equal(const cllm_tok_ids *a, const cllm_tok_ids *b) {
    return a->n == b->n && !memcmp(a->ids, b->ids, a->n * sizeof(*a->ids));
}

/* Every document of the corpus: the GGUF tokenizer's ids equal the HF-loaded one's and the HF
 * reference hash; decode of them equals too. */
static void check_corpus(cllm_tok *tg, cllm_tok *th, const char *tname, const char *corpus,
                         size_t *docs, size_t *bad) {
    char rel[256];
    snprintf(rel, sizeof(rel), "tests/data/tokenizer/corpus/%s.txt", corpus);
    size_t len = 0, pos = 0, shown = 0;
    char *text = tt_read(tt_path(rel), &len);
    snprintf(rel, sizeof(rel), "tests/data/tokenizer/ref/%s/%s.ref", tname, corpus);
    char *ref = tt_read(tt_path(rel), NULL), *rp = ref;
    CHECK_MSG(text && ref, "missing corpus or ref for %s/%s", tname, corpus);
    while (text && ref && pos < len) {
        size_t start = pos, dl = tt_next_doc(text, len, &pos);
        unsigned long long want_n = strtoull(rp, &rp, 10), want_h = strtoull(rp, &rp, 16);
        cllm_tok_ids a = {0}, b = {0};
        CHECK(cllm_tok_encode(tg, text + start, dl, 0, &a, NULL) == CLLM_OK);
        CHECK(cllm_tok_encode(th, text + start, dl, 0, &b, NULL) == CLLM_OK);
        char *da = NULL, *db = NULL;
        size_t la = 0, lb = 0;
        cllm_tok_decode(tg, a.ids, a.n, false, &da, &la, NULL);
        cllm_tok_decode(th, b.ids, b.n, false, &db, &lb, NULL);
        bool ok = ids_equal(&a, &b) && a.n == want_n && tt_fnv64(a.ids, a.n) == want_h && da &&
                  db && la == lb && !memcmp(da, db, la);
        if (!ok && shown++ < 3)
            fprintf(stderr, "MISMATCH %s/%s doc %zu: gguf %zu ids, HF %zu, ref %llu: [%.*s]\n",
                    tname, corpus, *docs, a.n, b.n, want_n, (int)(dl > 200 ? 200 : dl),
                    text + start);
        *bad += !ok;
        (*docs)++;
        free(da);
        free(db);
        cllm_tok_ids_free(&a);
        cllm_tok_ids_free(&b);
    }
    free(text);
    free(ref);
}

/* Ids, token bytes, added/special flags and the special token ids. The converter marks added
 * tokens that look special ("<|fim_prefix|>") CONTROL although HF has them special: false, so
 * only those may differ in is_special. */
static void check_table(cllm_tok *tg, cllm_tok *th) {
    int32_t nh = cllm_tok_n_vocab(th);
    CHECK(cllm_tok_n_vocab(tg) == nh); /* the [PAD<id>] fillers are not tokens, as in HF */
    int bytes_bad = 0, flag_bad = 0;
    for (int32_t id = 0; id < nh; id++) {
        size_t la = 0, lb = 0;
        const char *a = cllm_tok_token_bytes(tg, id, &la), *b = cllm_tok_token_bytes(th, id, &lb);
        if (!a || !b || la != lb || memcmp(a, b, la)) bytes_bad++;
        bool looks = lb > 4 && !memcmp(b, "<|", 2) && !memcmp(b + lb - 2, "|>", 2);
        if (cllm_tok_is_added(tg, id) != cllm_tok_is_added(th, id) ||
            (cllm_tok_is_special(tg, id) != cllm_tok_is_special(th, id) &&
             !(looks && cllm_tok_is_special(tg, id))))
            flag_bad++;
    }
    CHECK_MSG(bytes_bad == 0 && flag_bad == 0, "%d token byte, %d flag mismatches", bytes_bad,
              flag_bad);
    for (int32_t id = nh; id < VOCAB_SIZE; id++) { /* fillers: no text, as HF's missing ids */
        size_t l = 0;
        CHECK(!cllm_tok_token_bytes(tg, id, &l) && !cllm_tok_token_bytes(th, id, &l));
    }
    CHECK(cllm_tok_eos_id(tg) == cllm_tok_eos_id(th) && cllm_tok_eos_id(th) == 151645);
    CHECK(cllm_tok_pad_id(tg) == cllm_tok_pad_id(th) && cllm_tok_pad_id(th) == 151643);
    CHECK(cllm_tok_bos_id(tg) == -1 && cllm_tok_bos_id(th) == -1);
    /* added tokens inside text, as a rendered chat prompt has them */
    const char *chat = "<|im_start|>user\nWhat's 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n"
                       "four</think>\n\n<tool_call>{\"a\": 1}</tool_call><|fim_prefix|>x<|im_end|>";
    cllm_tok_ids a = {0}, b = {0};
    cllm_tok_encode(tg, chat, strlen(chat), 0, &a, NULL);
    cllm_tok_encode(th, chat, strlen(chat), 0, &b, NULL);
    CHECK(a.n > 10 && ids_equal(&a, &b));
    cllm_tok_ids_free(&a);
    cllm_tok_ids_free(&b);
}

/* The template text is the file's, and renders each cases.json case of it as HF's Jinja2 did. */
static void check_template(cllm_tok *tg, cllm_tok *th, const char *tname, const char *want_src) {
    const char *src = cllm_tok_chat_template(tg);
    CHECK_MSG(src && !strcmp(src, want_src), "%s: chat template differs from the file's", tname);
    if (!src) return;
    cllm_jinja *t = NULL;
    cllm_error err = {0};
    CHECK(cllm_jinja_compile(src, strlen(src), &t, &err) == CLLM_OK);
    json_t *root = json_load_file(tt_path("tests/data/tokenizer/templates/cases.json"), 0, NULL);
    json_t *c;
    size_t i;
    int n = 0, bad = 0;
    json_array_foreach(json_object_get(root, "cases"), i, c) {
        const char *py = json_string_value(json_object_get(c, "py"));
        if (!t || !py || strcmp(json_string_value(json_object_get(c, "template")), tname)) continue;
        char *out = NULL;
        size_t ol = 0;
        cllm_status st = cllm_jinja_render(t, json_object_get(c, "ctx"), NULL, &out, &ol, &err);
        bad += st || ol != strlen(py) || memcmp(out, py, ol);
        n++;
        free(out);
    }
    fprintf(stderr, "%s: %d template cases, %d mismatches\n", tname, n, bad);
    CHECK(n >= 20 && bad == 0);
    /* the chat path, with each tokenizer's own bos/eos names */
    json_t *msgs = json_loads("[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                              "{\"role\":\"user\",\"content\":\"Hi\"}]",
                              0, NULL);
    char *oa = NULL, *ob = NULL;
    size_t la = 0, lb = 0;
    cllm_chat_opts oga = {.add_generation_prompt = true,
                          .enable_thinking = -1,
                          .bos_token = cllm_tok_bos_token(tg),
                          .eos_token = cllm_tok_eos_token(tg)};
    cllm_chat_opts ogb = oga;
    ogb.bos_token = cllm_tok_bos_token(th), ogb.eos_token = cllm_tok_eos_token(th);
    cllm_jinja *th_t = NULL;
    CHECK(cllm_jinja_compile(want_src, strlen(want_src), &th_t, &err) == CLLM_OK);
    CHECK(t && cllm_chat_render(t, msgs, &oga, &oa, &la, &err) == CLLM_OK);
    CHECK(th_t && cllm_chat_render(th_t, msgs, &ogb, &ob, &lb, &err) == CLLM_OK);
    CHECK(oa && ob && la == lb && !memcmp(oa, ob, la));
    free(oa);
    free(ob);
    json_decref(msgs);
    json_decref(root);
    cllm_jinja_free(t);
    cllm_jinja_free(th_t);
}

/* One HF tokenizer -> GGUF -> cllm tokenizer round, for pre "qwen2" (q = 0) or "qwen35". */
static void check_qwen(int q) {
    const char *tname = q ? "qwen35" : "qwen3", *pre = q ? "qwen35" : "qwen2";
    char *j = NULL, *c = NULL, dir[600], path[700], cmd[2048];
    size_t jl = 0, cl = 0;
    CHECK(tt_read_qwen(q, &j, &jl, &c, &cl));
    if (!j) return;
    /* The chat template of cases.json's references (the Qwen3.5 one for the Qwen3.5 variant). */
    char rel[128];
    snprintf(rel, sizeof(rel), "tests/data/tokenizer/templates/%s.jinja", tname);
    char *tmpl_src = tt_read(tt_path(rel), NULL);
    CHECK_MSG(tmpl_src != NULL, "missing %s", rel);
    json_t *cfg = json_loadb(c, cl, 0, NULL);
    json_object_set_new(cfg, "chat_template", json_string(tmpl_src ? tmpl_src : ""));
    snprintf(dir, sizeof(dir), "%s/%s", tmpdir, tname);
    mkdir(dir, 0755);
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    CHECK(write_file(path, j, jl));
    snprintf(path, sizeof(path), "%s/tokenizer_config.json", dir);
    CHECK(json_dump_file(cfg, path, 0) == 0);
    snprintf(path, sizeof(path), "%s/%s.gguf", tmpdir, tname);
    snprintf(cmd, sizeof(cmd),
             "/usr/bin/python3 '%s/tools/ref/gguf_vocab.py' '%s' '%s' --pre %s --vocab-size %d",
             tt_src(), dir, path, pre, VOCAB_SIZE);
    CHECK_MSG(system(cmd) == 0, "%s failed", cmd);
    cllm_status st;
    cllm_error err = {0};
    cllm_tok *tg = gguf_tok(path, &st, &err), *th = NULL;
    CHECK_MSG(tg != NULL, "%s: %s", path, err.msg);
    /* the HF side reads the same (edited) tokenizer_config.json */
    char *cj = json_dumps(cfg, 0);
    if (cllm_tok_load_mem(j, jl, cj, strlen(cj), &th, &err)) fprintf(stderr, "%s\n", err.msg);
    free(cj);
    CHECK(th != NULL);
    if (tg && th) {
        size_t docs = 0, bad = 0;
        for (size_t k = 0; k < sizeof(CORPORA) / sizeof(*CORPORA); k++)
            check_corpus(tg, th, tname, CORPORA[k], &docs, &bad);
        fprintf(stderr, "%s (pre %s): %zu documents, %zu mismatches\n", tname, pre, docs, bad);
        CHECK(docs > 10000 && bad == 0);
        check_table(tg, th);
        if (tmpl_src) check_template(tg, th, tname, tmpl_src);
    }
    cllm_tok_free(tg);
    cllm_tok_free(th);
    json_decref(cfg);
    free(tmpl_src);
    free(j);
    free(c);
}

/* A tiny GGUF written here, one piece of metadata broken per case. */
typedef struct gbuf {
    unsigned char *p;
    size_t n, cap;
    uint64_t n_kv;
} gbuf;

static void put(gbuf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void put_u32(gbuf *b, uint32_t v) {
    put(b, &v, 4);
} /* the tests run little-endian */
static void put_u64(gbuf *b, uint64_t v) {
    put(b, &v, 8);
}
static void put_str(gbuf *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}
static void kv_head(gbuf *b, const char *key, uint32_t type) {
    put_str(b, key);
    put_u32(b, type);
    b->n_kv++;
}
static void kv_str(gbuf *b, const char *key, const char *v) {
    kv_head(b, key, CLLM_GGUF_STRING);
    put_str(b, v);
}
static void kv_strs(gbuf *b, const char *key, const char *const *v, int n) {
    kv_head(b, key, CLLM_GGUF_ARRAY);
    put_u32(b, CLLM_GGUF_STRING);
    put_u64(b, (uint64_t)n);
    for (int i = 0; i < n; i++) put_str(b, v[i]);
}
static void kv_i32s(gbuf *b, const char *key, const int32_t *v, int n) {
    kv_head(b, key, CLLM_GGUF_ARRAY);
    put_u32(b, CLLM_GGUF_I32);
    put_u64(b, (uint64_t)n);
    put(b, v, (size_t)n * 4);
}
static void kv_u32(gbuf *b, const char *key, uint32_t v) {
    kv_head(b, key, CLLM_GGUF_U32);
    put_u32(b, v);
}

enum {
    BAD_NONE,
    BAD_NO_TOKENS,
    BAD_TYPES_LEN,
    BAD_MODEL,
    BAD_PRE,
    BAD_NO_PRE,
    BAD_EOS,
    BAD_TYPE_VALUE,
    BAD_MERGE,
    BAD_REPEAT,
    BAD_NO_TYPES,
    BAD_ADD_BOS, /* add_bos_token without a bos id */
    OK_ADD_BOS,  /* add_bos_token with one: a TemplateProcessing post-processor */
    BAD_N
};

static const struct {
    cllm_status st;
    const char *words[2]; /* the message must name both */
} BAD_WANT[BAD_N] = {
    [BAD_NONE] = {CLLM_OK, {"", ""}},
    [BAD_NO_TOKENS] = {CLLM_ENOTFOUND, {"tokenizer.ggml.tokens", "missing"}},
    [BAD_TYPES_LEN] = {CLLM_EFORMAT, {"tokenizer.ggml.token_type has 4 entries", "5"}},
    [BAD_MODEL] = {CLLM_EUNSUPPORTED, {"tokenizer.ggml.model", "'llama'"}},
    [BAD_PRE] = {CLLM_EUNSUPPORTED, {"tokenizer.ggml.pre", "'falcon'"}},
    [BAD_NO_PRE] = {CLLM_EUNSUPPORTED, {"tokenizer.ggml.pre is missing", "default"}},
    [BAD_EOS] = {CLLM_EFORMAT, {"tokenizer.ggml.eos_token_id", "5 tokens"}},
    [BAD_TYPE_VALUE] = {CLLM_EFORMAT, {"tokenizer.ggml.token_type[1]", "is 9"}},
    [BAD_MERGE] = {CLLM_EFORMAT, {"tokenizer.ggml.merges[0]", "'ab'"}},
    [BAD_REPEAT] = {CLLM_EFORMAT, {"tokenizer.ggml.tokens[1] 'a'", "repeats id 0"}},
    [BAD_NO_TYPES] = {CLLM_ENOTFOUND, {"tokenizer.ggml.token_type", "missing"}},
    [BAD_ADD_BOS] = {CLLM_EFORMAT, {"add_bos_token is true", "no bos_token_id"}},
    [OK_ADD_BOS] = {CLLM_OK, {"", ""}},
};

static void write_tiny(const char *path, int bad) {
    const char *tokens[5] = {"a", "b", "ab", "\xc4\xa0", "<|im_end|>"}; /* U+0120: a space */
    int32_t types[5] = {1, 1, 1, 1, 3};
    const char *merges[1] = {"a b"};
    if (bad == BAD_REPEAT) tokens[1] = "a";
    if (bad == BAD_TYPE_VALUE) types[1] = 9;
    if (bad == BAD_MERGE) merges[0] = "ab";
    gbuf b = {0}, h = {0};
    kv_str(&b, "general.architecture", "qwen35moe");
    kv_str(&b, "tokenizer.ggml.model", bad == BAD_MODEL ? "llama" : "gpt2");
    if (bad != BAD_NO_PRE) kv_str(&b, "tokenizer.ggml.pre", bad == BAD_PRE ? "falcon" : "qwen35");
    if (bad != BAD_NO_TOKENS) kv_strs(&b, "tokenizer.ggml.tokens", tokens, 5);
    if (bad != BAD_NO_TYPES)
        kv_i32s(&b, "tokenizer.ggml.token_type", types, bad == BAD_TYPES_LEN ? 4 : 5);
    kv_strs(&b, "tokenizer.ggml.merges", merges, 1);
    kv_u32(&b, "tokenizer.ggml.eos_token_id", bad == BAD_EOS ? 99 : 4);
    if (bad == OK_ADD_BOS) kv_u32(&b, "tokenizer.ggml.bos_token_id", 4);
    if (bad == BAD_ADD_BOS || bad == OK_ADD_BOS) {
        kv_head(&b, "tokenizer.ggml.add_bos_token", CLLM_GGUF_BOOL);
        put(&b, "\1", 1);
    }
    kv_str(&b, "tokenizer.chat_template", "{{ messages[0]['content'] }}{{ eos_token }}");
    put(&h, "GGUF", 4);
    put_u32(&h, 3);
    put_u64(&h, 0);
    put_u64(&h, b.n_kv);
    put(&h, b.p, b.n);
    CHECK(write_file(path, h.p, h.n));
    free(b.p);
    free(h.p);
}

static void check_bad_files(void) {
    char path[700];
    for (int bad = 0; bad < BAD_N; bad++) {
        snprintf(path, sizeof(path), "%s/tiny-%d.gguf", tmpdir, bad);
        write_tiny(path, bad);
        cllm_status st;
        cllm_error err = {0};
        cllm_tok *tok = gguf_tok(path, &st, &err);
        bool named =
            strstr(err.msg, BAD_WANT[bad].words[0]) && strstr(err.msg, BAD_WANT[bad].words[1]);
        bool ok = BAD_WANT[bad].st == CLLM_OK;
        CHECK_MSG(st == BAD_WANT[bad].st && (ok ? tok != NULL : named), "case %d: %s %s", bad,
                  cllm_status_name(st), err.msg);
        if (bad == OK_ADD_BOS) { /* BOS only where the caller asks for special tokens */
            cllm_tok_ids ids = {0};
            CHECK(tok && cllm_tok_encode(tok, "ab", 2, CLLM_TOK_ADD_SPECIAL, &ids, NULL) == 0);
            CHECK(ids.n == 2 && ids.ids[0] == 4 && ids.ids[1] == 2);
            ids.n = 0;
            CHECK(tok && cllm_tok_encode(tok, "ab", 2, 0, &ids, NULL) == 0);
            CHECK(ids.n == 1 && ids.ids[0] == 2);
            cllm_tok_ids_free(&ids);
        }
        if (!ok) fprintf(stderr, "case %d: %s\n", bad, err.msg);
        if (bad != BAD_NONE) {
            cllm_tok_free(tok);
            continue;
        }
        /* the valid one: merges, the byte-level space, the control token, eos by name */
        cllm_tok_ids ids = {0};
        const int32_t want[4] = {2, 3, 2, 4};
        CHECK(tok && cllm_tok_encode(tok, "ab ab<|im_end|>", 15, 0, &ids, NULL) == CLLM_OK);
        CHECK(ids.n == 4 && !memcmp(ids.ids, want, sizeof(want)));
        CHECK(tok && cllm_tok_eos_id(tok) == 4 && cllm_tok_is_special(tok, 4));
        cllm_tok_ids_free(&ids);
        cllm_tok_free(tok);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof(tmpdir), "%s/gguf_tok-%d", test_tmp(), (int)getpid());
    mkdir(test_tmp(), 0755);
    CHECK(mkdir(tmpdir, 0755) == 0);
    check_bad_files();
    check_qwen(0);
    check_qwen(1);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    if (!test_failures && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return test_report("test_gguf_tok");
}
