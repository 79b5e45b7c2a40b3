/* Loading tokenizer.json and tokenizer_config.json into a cllm_tok.
 *
 * Called once per model at start-up (server, CLI). Every component of the HF pipeline is read
 * and checked; anything we do not implement fails with CLLM_EUNSUPPORTED naming the component,
 * rather than tokenizing differently from HF without a word. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/file.h"
#include "tokenizer/tok_int.h"

/* Undoes the byte-level alphabet of one token string: each mapped code point becomes its byte.
 * A string with any other code point is kept as UTF-8, as HF's ByteLevel decoder does. */
static char *unmap_bytes(const char *s, size_t len, size_t *out_len) {
    char *out = malloc(len + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += (size_t)tok_utf8_next((const unsigned char *)s + i, len - i, &cp);
        int b = tok_cp_to_byte(cp);
        if (b < 0) {
            memcpy(out, s, len);
            o = len;
            break;
        }
        out[o++] = (char)b;
    }
    out[o] = 0;
    *out_len = o;
    return out;
}

static bool jbool(json_t *o, const char *k, bool dflt) {
    json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static const char *jtype(json_t *o) {
    const char *t = json_string_value(json_object_get(o, "type"));
    return t ? t : "";
}

static cllm_status load_normalizer(cllm_tok *tok, json_t *n, cllm_error *err) {
    if (!n || json_is_null(n)) return CLLM_OK;
    const char *t = jtype(n);
    if (!strcmp(t, "Sequence")) {
        json_t *arr = json_object_get(n, "normalizers");
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) {
            cllm_status st = load_normalizer(tok, e, err);
            if (st) return st;
        }
        return CLLM_OK;
    }
    tok_norm_kind k;
    if (!strcmp(t, "NFC"))
        k = NORM_NFC;
    else if (!strcmp(t, "NFKC"))
        k = NORM_NFKC;
    else if (!strcmp(t, "NFD"))
        k = NORM_NFD;
    else if (!strcmp(t, "NFKD"))
        k = NORM_NFKD;
    else if (!strcmp(t, "Lowercase"))
        k = NORM_LOWER;
    else
        return cllm_err_set(err, CLLM_EUNSUPPORTED, "normalizer type '%s' is not supported", t);
    tok_norm_kind *p = realloc(tok->norms, (size_t)(tok->n_norms + 1) * sizeof(*p));
    if (!p) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    tok->norms = p;
    tok->norms[tok->n_norms++] = k;
    return CLLM_OK;
}

static cllm_status add_pre(cllm_tok *tok, tok_pre pre, cllm_error *err) {
    tok_pre *p = realloc(tok->pres, (size_t)(tok->n_pres + 1) * sizeof(*p));
    if (!p) {
        pcre2_code_free(pre.re);
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    tok->pres = p;
    tok->pres[tok->n_pres++] = pre;
    return CLLM_OK;
}

static cllm_status load_pretok(cllm_tok *tok, json_t *n, cllm_error *err) {
    if (!n || json_is_null(n)) return CLLM_OK;
    const char *t = jtype(n);
    if (!strcmp(t, "Sequence")) {
        json_t *arr = json_object_get(n, "pretokenizers");
        size_t i;
        json_t *e;
        json_array_foreach(arr, i, e) {
            cllm_status st = load_pretok(tok, e, err);
            if (st) return st;
        }
        return CLLM_OK;
    }
    tok_pre pre = {0};
    if (!strcmp(t, "ByteLevel")) {
        pre.kind = PRE_BYTELEVEL;
        pre.add_prefix_space = jbool(n, "add_prefix_space", true);
        pre.behavior = SPLIT_ISOLATED;
        if (jbool(n, "use_regex", true) &&
            !(pre.re = tok_regex_compile(TOK_GPT2_REGEX, false, err)))
            return err ? err->code : CLLM_EFORMAT;
        return add_pre(tok, pre, err);
    }
    if (!strcmp(t, "Split")) {
        pre.kind = PRE_SPLIT;
        json_t *pat = json_object_get(n, "pattern");
        const char *rx = json_string_value(json_object_get(pat, "Regex"));
        const char *lit = json_string_value(json_object_get(pat, "String"));
        if (!rx && !lit) return cllm_err_set(err, CLLM_EFORMAT, "Split pre_tokenizer: no pattern");
        const char *b = json_string_value(json_object_get(n, "behavior"));
        if (!b) b = "Isolated";
        if (!strcmp(b, "Isolated"))
            pre.behavior = SPLIT_ISOLATED;
        else if (!strcmp(b, "Removed"))
            pre.behavior = SPLIT_REMOVED;
        else if (!strcmp(b, "MergedWithPrevious"))
            pre.behavior = SPLIT_MERGED_PREV;
        else if (!strcmp(b, "MergedWithNext"))
            pre.behavior = SPLIT_MERGED_NEXT;
        else if (!strcmp(b, "Contiguous"))
            pre.behavior = SPLIT_CONTIGUOUS;
        else
            return cllm_err_set(err, CLLM_EFORMAT, "Split pre_tokenizer: behavior '%s'", b);
        pre.invert = jbool(n, "invert", false);
        if (!(pre.re = tok_regex_compile(rx ? rx : lit, !rx, err)))
            return err ? err->code : CLLM_EFORMAT;
        return add_pre(tok, pre, err);
    }
    return cllm_err_set(err, CLLM_EUNSUPPORTED, "pre_tokenizer type '%s' is not supported", t);
}

static cllm_status check_decoder(json_t *n, cllm_error *err) {
    if (!n || json_is_null(n)) return CLLM_OK;
    const char *t = jtype(n);
    if (!strcmp(t, "ByteLevel")) return CLLM_OK;
    if (!strcmp(t, "Sequence")) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(n, "decoders"), i, e) {
            cllm_status st = check_decoder(e, err);
            if (st) return st;
        }
        return CLLM_OK;
    }
    return cllm_err_set(err, CLLM_EUNSUPPORTED, "decoder type '%s' is not supported", t);
}

static cllm_status push_id(int32_t **v, int *n, int32_t id) {
    int32_t *p = realloc(*v, (size_t)(*n + 1) * sizeof(*p));
    if (!p) return CLLM_ENOMEM;
    *v = p;
    p[(*n)++] = id;
    return CLLM_OK;
}

static cllm_status load_post(cllm_tok *tok, json_t *n, cllm_error *err) {
    if (!n || json_is_null(n)) return CLLM_OK;
    const char *t = jtype(n);
    if (!strcmp(t, "ByteLevel")) return CLLM_OK;
    if (!strcmp(t, "Sequence")) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(n, "processors"), i, e) {
            cllm_status st = load_post(tok, e, err);
            if (st) return st;
        }
        return CLLM_OK;
    }
    if (strcmp(t, "TemplateProcessing"))
        return cllm_err_set(err, CLLM_EUNSUPPORTED, "post_processor type '%s' is not supported", t);
    json_t *single = json_object_get(n, "single"), *specials = json_object_get(n, "special_tokens");
    bool after = false;
    size_t i;
    json_t *e;
    json_array_foreach(single, i, e) {
        if (json_object_get(e, "Sequence")) {
            after = true;
            continue;
        }
        const char *name =
            json_string_value(json_object_get(json_object_get(e, "SpecialToken"), "id"));
        json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (!name || !json_is_array(ids))
            return cllm_err_set(err, CLLM_EFORMAT, "TemplateProcessing: bad special token entry");
        size_t j;
        json_t *idv;
        json_array_foreach(ids, j, idv) {
            cllm_status st = after ? push_id(&tok->post_suffix, &tok->n_post_suffix,
                                             (int32_t)json_integer_value(idv))
                                   : push_id(&tok->post_prefix, &tok->n_post_prefix,
                                             (int32_t)json_integer_value(idv));
            if (st) return cllm_err_set(err, st, "out of memory");
        }
    }
    return CLLM_OK;
}

static int cmp_added(const void *a, const void *b) {
    const tok_added *x = a, *y = b;
    return x->len < y->len ? 1 : x->len > y->len ? -1 : (x->id > y->id) - (x->id < y->id);
}

static cllm_status set_token(cllm_tok *tok, int32_t id, const char *bytes, size_t len,
                             uint8_t flags) {
    if (id < 0 || id >= tok->n_vocab) return CLLM_ERANGE;
    char *p = malloc(len + 1);
    if (!p) return CLLM_ENOMEM;
    memcpy(p, bytes, len);
    p[len] = 0;
    free(tok->tok_bytes[id]);
    tok->tok_bytes[id] = p;
    tok->tok_len[id] = (uint32_t)len;
    tok->tok_flags[id] = flags;
    return CLLM_OK;
}

static cllm_status load_model(cllm_tok *tok, json_t *root, cllm_error *err) {
    json_t *model = json_object_get(root, "model");
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    const char *mt = json_string_value(json_object_get(model, "type"));
    if (mt && strcmp(mt, "BPE"))
        return cllm_err_set(err, CLLM_EUNSUPPORTED, "model type '%s' is not supported (BPE only)",
                            mt);
    if (!json_is_object(vocab) || !json_is_array(merges))
        return cllm_err_set(err, CLLM_EFORMAT, "model.vocab / model.merges missing");
    if (jbool(model, "byte_fallback", false))
        return cllm_err_set(err, CLLM_EUNSUPPORTED, "BPE byte_fallback is not supported");
    const char *pfx = json_string_value(json_object_get(model, "continuing_subword_prefix"));
    const char *sfx = json_string_value(json_object_get(model, "end_of_word_suffix"));
    if ((pfx && *pfx) || (sfx && *sfx))
        return cllm_err_set(err, CLLM_EUNSUPPORTED, "BPE subword prefix/suffix is not supported");
    tok->ignore_merges = jbool(model, "ignore_merges", false);

    /* Ids: the largest of the vocabulary and the added tokens sizes the tables. */
    int64_t max_id = -1;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 26))
            return cllm_err_set(err, CLLM_EFORMAT, "model.vocab: bad id for '%s'", key);
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(json_object_get(root, "added_tokens"), i, v) {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        if (id < 0 || id > (1 << 26) || !json_is_string(json_object_get(v, "content")))
            return cllm_err_set(err, CLLM_EFORMAT, "added_tokens[%zu]: bad id or content", i);
        if (id > max_id) max_id = id;
    }
    tok->n_vocab = (int32_t)(max_id + 1);
    tok->tok_bytes = calloc((size_t)tok->n_vocab + 1, sizeof(char *));
    tok->tok_len = calloc((size_t)tok->n_vocab + 1, sizeof(uint32_t));
    tok->tok_flags = calloc((size_t)tok->n_vocab + 1, 1);
    if (!tok->tok_bytes || !tok->tok_len || !tok->tok_flags)
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");

    json_object_foreach(vocab, key, v) {
        size_t blen;
        char *b = unmap_bytes(key, strlen(key), &blen);
        if (!b) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        int32_t id = (int32_t)json_integer_value(v);
        cllm_status st =
            tok_strmap_put(&tok->vocab, b, blen, id) ? CLLM_ENOMEM : set_token(tok, id, b, blen, 0);
        free(b);
        if (st) return cllm_err_set(err, st, "out of memory");
    }
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        tok->byte_id[b] = tok_strmap_get(&tok->vocab, &c, 1);
    }

    json_array_foreach(merges, i, v) {
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        if (json_is_string(v)) {
            const char *s = json_string_value(v), *sp = strchr(s, ' ');
            if (!sp) return cllm_err_set(err, CLLM_EFORMAT, "merges[%zu]: no space in '%s'", i, s);
            a = s, alen = (size_t)(sp - s), b = sp + 1, blen = strlen(sp + 1);
        } else if (json_is_array(v) && json_array_size(v) == 2) {
            a = json_string_value(json_array_get(v, 0));
            b = json_string_value(json_array_get(v, 1));
            if (a) alen = strlen(a);
            if (b) blen = strlen(b);
        }
        if (!a || !b) return cllm_err_set(err, CLLM_EFORMAT, "merges[%zu]: not a pair", i);
        size_t ra, rb;
        char *ua = unmap_bytes(a, alen, &ra), *ub = unmap_bytes(b, blen, &rb);
        char *cat = ua && ub ? malloc(ra + rb + 1) : NULL;
        if (!cat) {
            free(ua), free(ub);
            return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        }
        memcpy(cat, ua, ra);
        memcpy(cat + ra, ub, rb);
        int32_t ia = tok_strmap_get(&tok->vocab, ua, ra), ib = tok_strmap_get(&tok->vocab, ub, rb);
        int32_t ic = tok_strmap_get(&tok->vocab, cat, ra + rb);
        free(ua), free(ub), free(cat);
        if (ia < 0 || ib < 0 || ic < 0)
            return cllm_err_set(err, CLLM_EFORMAT, "merges[%zu]: token out of vocabulary", i);
        if (tok_pairmap_put(&tok->merges, ia, ib, (int32_t)i, ic))
            return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }

    size_t n_added = json_array_size(json_object_get(root, "added_tokens"));
    tok->added = calloc(n_added + 1, sizeof(tok_added));
    if (!tok->added) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    json_array_foreach(json_object_get(root, "added_tokens"), i, v) {
        tok_added *a = &tok->added[tok->n_added];
        const char *c = json_string_value(json_object_get(v, "content"));
        a->id = (int32_t)json_integer_value(json_object_get(v, "id"));
        a->len = strlen(c);
        a->special = jbool(v, "special", false);
        a->lstrip = jbool(v, "lstrip", false);
        a->rstrip = jbool(v, "rstrip", false);
        a->normalized = jbool(v, "normalized", !a->special);
        a->single_word = jbool(v, "single_word", false);
        if (!a->len) continue; /* an empty added token can never match */
        if (!(a->content = strdup(c))) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        tok->n_added++;
        if (a->normalized) tok->any_normalized_added = true;
        /* Decoding goes through the ByteLevel decoder like any token (HF does the same). */
        size_t blen;
        char *b = unmap_bytes(c, a->len, &blen);
        cllm_status st =
            b ? set_token(tok, a->id, b, blen, TOKF_ADDED | (a->special ? TOKF_SPECIAL : 0))
              : CLLM_ENOMEM;
        free(b);
        if (st) return cllm_err_set(err, st, "added_tokens[%zu]", i);
    }
    qsort(tok->added, (size_t)tok->n_added, sizeof(tok_added), cmp_added);
    return CLLM_OK;
}

/* A token name in tokenizer_config.json is a string or {"content": "..."}. */
static char *config_token(json_t *cfg, const char *k) {
    json_t *v = json_object_get(cfg, k);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

static cllm_status load_config(cllm_tok *tok, json_t *cfg, cllm_error *err) {
    tok->bos_token = config_token(cfg, "bos_token");
    tok->eos_token = config_token(cfg, "eos_token");
    tok->pad_token = config_token(cfg, "pad_token");
    json_t *ct = json_object_get(cfg, "chat_template");
    if (json_is_array(ct)) { /* [{name, template}]: take "default", else the first */
        json_t *pick = json_array_get(ct, 0), *e;
        size_t i;
        json_array_foreach(ct, i, e) {
            const char *nm = json_string_value(json_object_get(e, "name"));
            if (nm && !strcmp(nm, "default")) pick = e;
        }
        ct = json_object_get(pick, "template");
    }
    if (json_is_string(ct) && !(tok->chat_template = strdup(json_string_value(ct))))
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    return CLLM_OK;
}

static int32_t name_id(const cllm_tok *tok, const char *s) {
    return s ? cllm_tok_token_id(tok, s, strlen(s)) : -1;
}

cllm_status cllm_tok_load_mem(const char *tj, size_t len, const char *cj, size_t clen,
                              cllm_tok **out, cllm_error *err) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(tj, len, 0, &je);
    if (!root)
        return cllm_err_set(err, CLLM_EFORMAT, "tokenizer.json:%d:%d: %s", je.line, je.column,
                            je.text);
    json_t *cfg = NULL;
    if (cj && !(cfg = json_loadb(cj, clen, 0, &je))) {
        json_decref(root);
        return cllm_err_set(err, CLLM_EFORMAT, "tokenizer_config.json:%d:%d: %s", je.line,
                            je.column, je.text);
    }
    cllm_tok *tok = calloc(1, sizeof(*tok));
    cllm_status st = tok ? CLLM_OK : cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    if (tok) pthread_mutex_init(&tok->cache_mu, NULL);
    if (!st) st = load_model(tok, root, err);
    if (!st) st = load_normalizer(tok, json_object_get(root, "normalizer"), err);
    if (!st) st = load_pretok(tok, json_object_get(root, "pre_tokenizer"), err);
    if (!st) st = check_decoder(json_object_get(root, "decoder"), err);
    if (!st) st = load_post(tok, json_object_get(root, "post_processor"), err);
    if (!st && cfg) st = load_config(tok, cfg, err);
    if (!st) {
        tok->cache_cap = 1 << 16;
        tok->cache = calloc(tok->cache_cap, sizeof(*tok->cache));
        if (!tok->cache) tok->cache_cap = 0; /* runs without a cache */
        tok->bos_id = name_id(tok, tok->bos_token);
        tok->eos_id = name_id(tok, tok->eos_token);
        tok->pad_id = name_id(tok, tok->pad_token);
    }
    json_decref(root);
    json_decref(cfg);
    if (st) {
        cllm_tok_free(tok);
        return st;
    }
    *out = tok;
    return CLLM_OK;
}

cllm_status cllm_tok_load_files(const char *tpath, const char *cpath, cllm_tok **out,
                                cllm_error *err) {
    *out = NULL;
    size_t tl = 0, cl = 0;
    char *t = cllm_read_file(tpath, 0, &tl, err), *c = NULL;
    if (!t) return err ? err->code : CLLM_EIO;
    if (cpath && !(c = cllm_read_file(cpath, 0, &cl, err))) {
        free(t);
        return err ? err->code : CLLM_EIO;
    }
    cllm_status st = cllm_tok_load_mem(t, tl, c, cl, out, err);
    if (st) cllm_err_prefix(err, "%s", tpath);
    free(t);
    free(c);
    return st;
}

cllm_status cllm_tok_load(const char *dir, cllm_tok **out, cllm_error *err) {
    size_t n = strlen(dir) + 32;
    char *tp = malloc(n), *cp = malloc(n);
    if (!tp || !cp) {
        free(tp), free(cp);
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    snprintf(tp, n, "%s/tokenizer.json", dir);
    snprintf(cp, n, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(cp, "rb");
    if (f) fclose(f);
    cllm_status st = cllm_tok_load_files(tp, f ? cp : NULL, out, err);
    free(tp);
    free(cp);
    return st;
}

void cllm_tok_free(cllm_tok *tok) {
    if (!tok) return;
    for (int32_t i = 0; tok->tok_bytes && i < tok->n_vocab; i++) free(tok->tok_bytes[i]);
    free(tok->tok_bytes);
    free(tok->tok_len);
    free(tok->tok_flags);
    tok_strmap_free(&tok->vocab);
    tok_pairmap_free(&tok->merges);
    free(tok->norms);
    for (int i = 0; i < tok->n_pres; i++) pcre2_code_free(tok->pres[i].re);
    free(tok->pres);
    for (int i = 0; i < tok->n_added; i++) free(tok->added[i].content);
    free(tok->added);
    free(tok->post_prefix);
    free(tok->post_suffix);
    free(tok->bos_token);
    free(tok->eos_token);
    free(tok->pad_token);
    free(tok->chat_template);
    for (size_t i = 0; i < tok->cache_cap; i++) {
        free(tok->cache[i].key);
        free(tok->cache[i].ids);
    }
    free(tok->cache);
    pthread_mutex_destroy(&tok->cache_mu);
    free(tok);
}
