/* GGUF tokenizer metadata -> HF tokenizer.json + tokenizer_config.json text; see gguf_tok.h.
 *
 * What llama.cpp's converter (convert_hf_to_gguf.py, get_vocab_base + gguf-py's SpecialVocab)
 * wrote, undone: tokenizer.ggml.tokens holds every id's string in id order, as the HF vocabulary
 * spells it (byte-level "Ġthe"), ids the HF tokenizer lacks filled with "[PAD<id>]" of type UNUSED;
 * token_type says which ids were HF added tokens (CONTROL when special or looking special,
 * USER_DEFINED otherwise); merges are "a b" strings in rank order; bos/eos/pad are ids; the
 * pre-tokenizer is only a name (tokenizer.ggml.pre, from a hash of the HF tokenizer's output), so
 * the regex, normalizer and decoder come from the table below, copied from the HF tokenizer.json of
 * the family the name stands for. */
#include "model/gguf_tok.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K_MODEL     "tokenizer.ggml.model"
#define K_PRE       "tokenizer.ggml.pre"
#define K_TOKENS    "tokenizer.ggml.tokens"
#define K_TYPES     "tokenizer.ggml.token_type"
#define K_MERGES    "tokenizer.ggml.merges"
#define K_TEMPLATE  "tokenizer.chat_template"
#define K_TEMPLATES "tokenizer.chat_templates"

/* llama_token_type as the converter writes it (gguf-py TokenType). */
enum { TT_NORMAL = 1, TT_UNKNOWN, TT_CONTROL, TT_USER_DEFINED, TT_UNUSED, TT_BYTE };

/* The Split regex of each pre-tokenizer name, as the HF tokenizer.json of that family has it
 * (llama.cpp rewrites the (?i:...) group for its own regex engine; HF's original is what cllm's
 * tokenizer runs). Every one here is NFC + Split(Isolated) + ByteLevel, like Qwen's. */
typedef struct pre_kind {
    const char *name;
    const char *regex;
} pre_kind;

static const pre_kind PRE_KINDS[] = {
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
              "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"qwen35", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
               "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

/* What the JSON is built from, read and checked once. */
typedef struct tok_meta {
    const cllm_gguf_kv *tokens; /* [n] strings */
    const cllm_gguf_kv *types;  /* [n] integers */
    const cllm_gguf_kv *merges; /* strings "a b" */
    const char *regex;
    int64_t n;
    int64_t bos, eos, pad; /* -1: absent */
    bool add_bos, add_eos;
} tok_meta;

static bool utf8_valid(const unsigned char *s, size_t n) {
    static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80             ? 0
                   : (c & 0xE0) == 0xC0 ? 1
                   : (c & 0xF0) == 0xE0 ? 2
                   : (c & 0xF8) == 0xF0 ? 3
                                        : 9;
        if (k == 9 || k >= n - i) return false;
        uint32_t cp = k ? c & (0x3Fu >> k) : c;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3Fu);
        }
        /* overlong forms, surrogates and code points past U+10FFFF are not UTF-8 */
        if (cp < min_cp[k] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
        i += k + 1;
    }
    return true;
}

/* A string array key, or an error naming it. */
static cllm_status str_array(const cllm_gguf *g, const char *key, const cllm_gguf_kv **out,
                             cllm_error *err) {
    const cllm_gguf_kv *kv = cllm_gguf_kv_find(g, key);
    if (!kv) return cllm_err_set(err, CLLM_ENOTFOUND, "GGUF tokenizer: %s is missing", key);
    if (kv->type != CLLM_GGUF_ARRAY || kv->arr_type != CLLM_GGUF_STRING || !kv->strs)
        return cllm_err_set(err, CLLM_EFORMAT, "GGUF tokenizer: %s is not a string array", key);
    *out = kv;
    return CLLM_OK;
}

/* tokenizer.ggml.model and .pre: which tokenizer this is, and the regex its name stands for. */
static cllm_status read_kind(const cllm_gguf *g, tok_meta *m, cllm_error *err) {
    char *model = cllm_gguf_get_str(g, K_MODEL);
    if (!model) return cllm_err_set(err, CLLM_ENOTFOUND, "GGUF tokenizer: %s is missing", K_MODEL);
    if (strcmp(model, "gpt2")) {
        cllm_err_set(err, CLLM_EUNSUPPORTED,
                     "GGUF tokenizer: %s '%.64s' is not supported (only 'gpt2', byte-level BPE)",
                     K_MODEL, model);
        free(model);
        return CLLM_EUNSUPPORTED;
    }
    free(model);
    char *pre = cllm_gguf_get_str(g, K_PRE);
    for (size_t i = 0; pre && i < sizeof(PRE_KINDS) / sizeof(*PRE_KINDS); i++)
        if (!strcmp(pre, PRE_KINDS[i].name)) m->regex = PRE_KINDS[i].regex;
    if (!pre)
        cllm_err_set(err, CLLM_EUNSUPPORTED,
                     "GGUF tokenizer: %s is missing (llama.cpp's 'default' pre-tokenizer is not "
                     "supported; known: qwen2, qwen35)",
                     K_PRE);
    else if (!m->regex)
        cllm_err_set(err, CLLM_EUNSUPPORTED,
                     "GGUF tokenizer: %s '%.64s' is not supported (known: qwen2, qwen35)", K_PRE,
                     pre);
    free(pre);
    if (!m->regex) return CLLM_EUNSUPPORTED;
    /* The converter writes these only for tokenizers that lowercase or strip accents (BERT-like);
     * the Qwen pre-tokenizers above have neither, so a file that sets them is not one of ours. */
    static const char *const norm_keys[] = {"tokenizer.ggml.normalizer.lowercase",
                                            "tokenizer.ggml.normalizer.strip_accents"};
    for (int i = 0; i < 2; i++) {
        bool on = false;
        if (cllm_gguf_get_bool(g, norm_keys[i], &on) && on)
            return cllm_err_set(err, CLLM_EUNSUPPORTED, "GGUF tokenizer: %s is not supported",
                                norm_keys[i]);
    }
    return CLLM_OK;
}

/* An optional token id key: -1 when absent, an error when it names no token. */
static cllm_status read_id(const cllm_gguf *g, const char *key, int64_t n, int64_t *id,
                           cllm_error *err) {
    *id = -1;
    if (!cllm_gguf_kv_find(g, key)) return CLLM_OK;
    if (!cllm_gguf_get_int(g, key, id) || *id < 0 || *id >= n)
        return cllm_err_set(err, CLLM_EFORMAT,
                            "GGUF tokenizer: %s is not a token id below the %lld tokens", key,
                            (long long)n);
    return CLLM_OK;
}

static cllm_status read_meta(const cllm_gguf *g, tok_meta *m, cllm_error *err) {
    cllm_status st = read_kind(g, m, err);
    if (!st) st = str_array(g, K_TOKENS, &m->tokens, err);
    if (!st) st = str_array(g, K_MERGES, &m->merges, err);
    if (st) return st;
    m->n = (int64_t)m->tokens->n;
    if (m->n <= 0 || m->n > (1 << 26)) /* tokenizer.h's cap on ids */
        return cllm_err_set(err, CLLM_EFORMAT, "GGUF tokenizer: %s has %lld tokens", K_TOKENS,
                            (long long)m->n);
    /* Without types the added tokens (<|im_start|>, <think>) cannot be told from the vocabulary
     * and the text would be split into pieces HF never makes: refuse rather than guess. */
    m->types = cllm_gguf_kv_find(g, K_TYPES);
    int64_t t0;
    if (!m->types)
        return cllm_err_set(err, CLLM_ENOTFOUND, "GGUF tokenizer: %s is missing", K_TYPES);
    if (m->types->type != CLLM_GGUF_ARRAY)
        return cllm_err_set(err, CLLM_EFORMAT, "GGUF tokenizer: %s is not an array", K_TYPES);
    if ((int64_t)m->types->n != m->n)
        return cllm_err_set(err, CLLM_EFORMAT, "GGUF tokenizer: %s has %llu entries, %s %lld",
                            K_TYPES, (unsigned long long)m->types->n, K_TOKENS, (long long)m->n);
    if (!cllm_gguf_arr_int(m->types, 0, &t0))
        return cllm_err_set(err, CLLM_EFORMAT, "GGUF tokenizer: %s is not an integer array",
                            K_TYPES);
    st = read_id(g, "tokenizer.ggml.bos_token_id", m->n, &m->bos, err);
    if (!st) st = read_id(g, "tokenizer.ggml.eos_token_id", m->n, &m->eos, err);
    if (!st) st = read_id(g, "tokenizer.ggml.padding_token_id", m->n, &m->pad, err);
    if (st) return st;
    cllm_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &m->add_bos);
    cllm_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &m->add_eos);
    if ((m->add_bos && m->bos < 0) || (m->add_eos && m->eos < 0))
        return cllm_err_set(err, CLLM_EFORMAT,
                            "GGUF tokenizer: tokenizer.ggml.add_%s_token is true but there is no "
                            "%s_token_id",
                            m->add_bos && m->bos < 0 ? "bos" : "eos",
                            m->add_bos && m->bos < 0 ? "bos" : "eos");
    return CLLM_OK;
}

/* String i of kv copied NUL-terminated into *buf (grown as needed), checked to be UTF-8 without
 * NULs: JSON text and cllm's tokenizer hold nothing else. */
static cllm_status kv_str(const cllm_gguf_kv *kv, const char *key, uint64_t i, char **buf,
                          size_t *cap, cllm_error *err) {
    size_t len = (size_t)kv->str_lens[i];
    if (len + 1 > *cap) {
        size_t nc = len + 1 > 2 * *cap ? len + 1 : 2 * *cap;
        char *nb = realloc(*buf, nc);
        if (!nb) return cllm_err_set(err, CLLM_ENOMEM, "GGUF tokenizer: out of memory");
        *buf = nb, *cap = nc;
    }
    memcpy(*buf, kv->strs[i], len);
    (*buf)[len] = 0;
    if (memchr(*buf, 0, len) || !utf8_valid((const unsigned char *)*buf, len))
        return cllm_err_set(err, CLLM_EFORMAT, "GGUF tokenizer: %s[%llu] is not UTF-8 text", key,
                            (unsigned long long)i);
    return CLLM_OK;
}

static cllm_status oom(cllm_error *err) {
    return cllm_err_set(err, CLLM_ENOMEM, "GGUF tokenizer: out of memory");
}

/* Control and user-defined ids become HF added tokens (matched in the text before BPE, never
 * normalized: the converter stored them pre-normalized), every other id a model.vocab entry
 * except UNUSED ones: the "[PAD<id>]" fillers of ids the HF tokenizer lacks stay out of it, so
 * they decode to nothing as in HF (where those ids have no token) instead of to "[PAD<id>]". */
static cllm_status build_tokens(const tok_meta *m, json_t *vocab, json_t *added, char **buf,
                                size_t *cap, cllm_error *err) {
    for (int64_t i = 0; i < m->n; i++) {
        int64_t t = 0;
        cllm_status st = kv_str(m->tokens, K_TOKENS, (uint64_t)i, buf, cap, err);
        if (st) return st;
        if (!cllm_gguf_arr_int(m->types, (uint64_t)i, &t) || t < TT_NORMAL || t > TT_BYTE)
            return cllm_err_set(err, CLLM_EFORMAT,
                                "GGUF tokenizer: %s[%lld] is %lld (token types are 1..6)", K_TYPES,
                                (long long)i, (long long)t);
        if (t == TT_UNUSED) continue;
        if (t == TT_CONTROL || t == TT_USER_DEFINED) {
            json_t *a = json_pack("{s:I,s:s,s:b,s:b,s:b,s:b,s:b}", "id", (json_int_t)i, "content",
                                  *buf, "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
                                  "special", t == TT_CONTROL);
            if (json_array_append_new(added, a)) return oom(err);
            continue;
        }
        json_t *prev = json_object_get(vocab, *buf);
        if (prev)
            return cllm_err_set(err, CLLM_EFORMAT,
                                "GGUF tokenizer: %s[%lld] '%.64s' repeats id %lld", K_TOKENS,
                                (long long)i, *buf, (long long)json_integer_value(prev));
        if (json_object_set_new_nocheck(vocab, *buf, json_integer(i))) return oom(err);
    }
    return CLLM_OK;
}

/* Merges stay "a b" strings (HF's older form, which the loader reads as well); one without the
 * separating space would make the loader fail on an index only, so it is named here. */
static cllm_status build_merges(const tok_meta *m, json_t *merges, char **buf, size_t *cap,
                                cllm_error *err) {
    for (uint64_t i = 0; i < m->merges->n; i++) {
        cllm_status st = kv_str(m->merges, K_MERGES, i, buf, cap, err);
        if (st) return st;
        const char *sp = strchr(*buf, ' ');
        if (!sp || sp == *buf || !sp[1] || strchr(sp + 1, ' '))
            return cllm_err_set(err, CLLM_EFORMAT,
                                "GGUF tokenizer: %s[%llu] '%.64s' is not two tokens and a space",
                                K_MERGES, (unsigned long long)i, *buf);
        if (json_array_append_new(merges, json_string_nocheck(*buf))) return oom(err);
    }
    return CLLM_OK;
}

/* GPT-2's byte-level alphabet shows the printable bytes (33-126, 161-172, 174-255) as
 * themselves and the other 68 as U+0100.. in byte order. Returns the byte of code point cp, or
 * -1 when cp is outside the alphabet. */
static int byte_of(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255))
        return (int)cp;
    if (cp < 256 || cp >= 256 + 68) return -1;
    int k = (int)cp - 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        if (!printable && k-- == 0) return b;
    }
    return -1;
}

/* The text tokenizer_config.json names token id by: an added token's content as is, a vocabulary
 * entry's bytes (the loader looks names up as text, "Ġhi" as " hi"). Entries that are not
 * byte-level text stay as spelled. Malloc'd, NULL on ENOMEM. */
static char *token_name(const tok_meta *m, int64_t id) {
    const unsigned char *s = (const unsigned char *)m->tokens->strs[id];
    size_t n = (size_t)m->tokens->str_lens[id], o = 0;
    int64_t t = 0;
    char *out = malloc(n + 1);
    if (!out) return NULL;
    cllm_gguf_arr_int(m->types, (uint64_t)id, &t);
    bool raw = t == TT_CONTROL || t == TT_USER_DEFINED;
    for (size_t i = 0; i < n && !raw;) {
        /* kv_str checked every token to be UTF-8 already */
        size_t k = s[i] < 0x80 ? 0 : s[i] < 0xE0 ? 1 : s[i] < 0xF0 ? 2 : 3;
        uint32_t cp = k ? s[i] & (0x3Fu >> k) : s[i];
        for (size_t j = 1; j <= k; j++) cp = cp << 6 | (s[i + j] & 0x3Fu);
        int b = byte_of(cp);
        if (b < 0) raw = true;
        out[o++] = (char)b;
        i += k + 1;
    }
    if (raw || memchr(out, 0, o) || !utf8_valid((const unsigned char *)out, o)) {
        memcpy(out, s, n);
        o = n;
    }
    out[o] = 0;
    return out;
}

static json_t *byte_level(const char *type) {
    return json_pack("{s:s,s:b,s:b,s:b}", "type", type, "add_prefix_space", 0, "trim_offsets", 0,
                     "use_regex", 0);
}

/* ByteLevel, plus a TemplateProcessing that adds BOS / EOS when the file asks for them (as HF's
 * Llama-3 tokenizer.json does; the Qwen files never do). names: [bos, eos] texts. */
static json_t *post_processor(const tok_meta *m, char *const names[2]) {
    if (!m->add_bos && !m->add_eos) return byte_level("ByteLevel");
    json_t *single = json_array(), *pair = json_array(), *specials = json_object();
    const bool add[2] = {m->add_bos, m->add_eos};
    const int64_t ids[2] = {m->bos, m->eos};
    bool ok = single && pair && specials;
    for (int seq = 0; seq < 2 && ok; seq++) { /* pair: bos A eos bos B eos */
        for (int k = 0; k < 3; k++) {
            const int which = k == 0 ? 0 : 1; /* bos before the sequence, eos after it */
            json_t *e;
            if (k == 1)
                e = json_pack("{s:{s:s,s:i}}", "Sequence", "id", seq ? "B" : "A", "type_id", seq);
            else if (add[which])
                e = json_pack("{s:{s:s,s:i}}", "SpecialToken", "id", names[which], "type_id", seq);
            else
                continue;
            if (!seq && json_array_append(single, e)) ok = false;
            if (json_array_append_new(pair, e)) ok = false;
        }
    }
    for (int w = 0; w < 2; w++)
        if (add[w] && json_object_set_new(specials, names[w],
                                          json_pack("{s:s,s:[I],s:[s]}", "id", names[w], "ids",
                                                    (json_int_t)ids[w], "tokens", names[w])))
            ok = false;
    if (!ok) { /* out of memory: the caller reports it */
        json_decref(single), json_decref(pair), json_decref(specials);
        return NULL;
    }
    return json_pack("{s:s,s:[o,{s:s,s:o,s:o,s:o}]}", "type", "Sequence", "processors",
                     byte_level("ByteLevel"), "type", "TemplateProcessing", "single", single,
                     "pair", pair, "special_tokens", specials);
}

/* tokenizer.json around the vocabulary: NFC, Split(regex) + ByteLevel, BPE, ByteLevel decoder,
 * the way the Qwen tokenizer.json files are laid out. */
static json_t *tokenizer_root(const tok_meta *m, json_t *vocab, json_t *merges, json_t *added,
                              json_t *post) {
    json_t *pre = json_pack("{s:s,s:[{s:s,s:{s:s},s:s,s:b},o]}", "type", "Sequence",
                            "pretokenizers", "type", "Split", "pattern", "Regex", m->regex,
                            "behavior", "Isolated", "invert", 0, byte_level("ByteLevel"));
    json_t *model = json_pack("{s:s,s:n,s:n,s:s,s:s,s:b,s:b,s:b,s:o,s:o}", "type", "BPE", "dropout",
                              "unk_token", "continuing_subword_prefix", "", "end_of_word_suffix",
                              "", "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 0, "vocab",
                              vocab, "merges", merges);
    return json_pack("{s:s,s:n,s:n,s:o,s:{s:s},s:o,s:o,s:o,s:o}", "version", "1.0", "truncation",
                     "padding", "added_tokens", added, "normalizer", "type", "NFC", "pre_tokenizer",
                     pre, "post_processor", post, "decoder", byte_level("ByteLevel"), "model",
                     model);
}

/* chat_template: tokenizer.chat_template, or HF's list form when the file also has named ones
 * (tokenizer.chat_templates lists the names, tokenizer.chat_template.<name> holds each). */
static json_t *chat_templates(const cllm_gguf *g) {
    char *def = cllm_gguf_get_str(g, K_TEMPLATE);
    const cllm_gguf_kv *names = cllm_gguf_kv_find(g, K_TEMPLATES);
    if (!names || names->type != CLLM_GGUF_ARRAY || names->arr_type != CLLM_GGUF_STRING) {
        json_t *t = def ? json_string(def) : json_null();
        free(def);
        return t;
    }
    json_t *list = json_array();
    if (list && def)
        json_array_append_new(list, json_pack("{s:s,s:s}", "name", "default", "template", def));
    free(def);
    for (uint64_t i = 0; list && i < names->n; i++) {
        char key[160];
        int kl = snprintf(key, sizeof(key), "%s.%.*s", K_TEMPLATE, (int)names->str_lens[i],
                          names->strs[i]);
        char *t = kl > 0 && (size_t)kl < sizeof(key) ? cllm_gguf_get_str(g, key) : NULL;
        json_t *e = json_pack("{s:s%,s:s}", "name", names->strs[i], (size_t)names->str_lens[i],
                              "template", t ? t : "");
        if (t && e)
            json_array_append_new(list, e);
        else
            json_decref(e);
        free(t);
    }
    return list;
}

/* tokenizer_config.json: the special token names (the loader maps them back to ids), whether BOS
 * / EOS are added, and the chat template. names: bos, eos, pad texts or NULL. */
static json_t *config_root(const cllm_gguf *g, const tok_meta *m, char *const names[3]) {
    json_t *c = json_pack("{s:b,s:b,s:s?,s:s?,s:s?,s:n,s:b,s:s}", "add_bos_token", m->add_bos,
                          "add_eos_token", m->add_eos, "bos_token", names[0], "eos_token", names[1],
                          "pad_token", names[2], "unk_token", "clean_up_tokenization_spaces", 0,
                          "tokenizer_class", "PreTrainedTokenizerFast");
    json_t *t = chat_templates(g);
    if (!c || !t || json_object_set_new(c, "chat_template", t)) {
        json_decref(c);
        return NULL;
    }
    return c;
}

static cllm_status build_json(const cllm_gguf *g, const tok_meta *m, char *names[3], json_t **tj,
                              json_t **cj, cllm_error *err) {
    json_t *vocab = json_object(), *added = json_array(), *merges = json_array();
    char *buf = NULL;
    size_t cap = 0;
    cllm_status st = vocab && added && merges ? CLLM_OK : oom(err);
    if (!st) st = build_tokens(m, vocab, added, &buf, &cap, err);
    if (!st) st = build_merges(m, merges, &buf, &cap, err);
    free(buf);
    const int64_t ids[3] = {m->bos, m->eos, m->pad};
    for (int i = 0; i < 3 && !st; i++)
        if (ids[i] >= 0 && !(names[i] = token_name(m, ids[i]))) st = oom(err);
    if (st) {
        json_decref(vocab), json_decref(added), json_decref(merges);
        return st;
    }
    /* json_pack takes the references, also when it fails */
    *tj = tokenizer_root(m, vocab, merges, added, post_processor(m, names));
    *cj = config_root(g, m, names);
    return *tj && *cj ? CLLM_OK : oom(err);
}

cllm_status cllm_gguf_tokenizer_json(const cllm_gguf *g, char **tokenizer_json,
                                     char **tokenizer_config_json, cllm_error *err) {
    *tokenizer_json = *tokenizer_config_json = NULL;
    tok_meta m = {0};
    cllm_status st = read_meta(g, &m, err);
    if (st) return st;
    char *names[3] = {NULL, NULL, NULL};
    json_t *tj = NULL, *cj = NULL;
    st = build_json(g, &m, names, &tj, &cj, err);
    if (!st) {
        *tokenizer_json = json_dumps(tj, JSON_COMPACT);
        *tokenizer_config_json = json_dumps(cj, JSON_INDENT(2));
        if (!*tokenizer_json || !*tokenizer_config_json) {
            free(*tokenizer_json), free(*tokenizer_config_json);
            *tokenizer_json = *tokenizer_config_json = NULL;
            st = oom(err);
        }
    }
    json_decref(tj), json_decref(cj);
    for (int i = 0; i < 3; i++) free(names[i]);
    return st;
}
