/* Decode and the incremental detokenizer, plus small accessors.
 *
 * Token bytes were un-mapped from the byte-level alphabet at load time, so decoding is a
 * concatenation followed by HF's lossy UTF-8 step (invalid sequences -> U+FFFD). The stream
 * variant holds back only a trailing incomplete-but-still-valid UTF-8 prefix, which makes its
 * output identical to the batch decode: lossy replacement is decided by bytes already seen. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

cllm_status cllm_tok_decode(const cllm_tok *tok, const int32_t *ids, size_t n, bool skip_special,
                            char **out, size_t *out_len, cllm_error *err) {
    *out = NULL;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->n_vocab || !tok->tok_bytes[ids[i]])
            return cllm_err_set(err, CLLM_ERANGE, "decode: token id %d out of range", (int)ids[i]);
        total += tok->tok_len[ids[i]];
    }
    char *raw = malloc(total + 1);
    if (!raw) return cllm_err_set(err, CLLM_ENOMEM, "decode: out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_special && (tok->tok_flags[ids[i]] & TOKF_SPECIAL)) continue;
        memcpy(raw + o, tok->tok_bytes[ids[i]], tok->tok_len[ids[i]]);
        o += tok->tok_len[ids[i]];
    }
    size_t len;
    char *s = cllm_tok_utf8_sanitize(raw, o, &len);
    free(raw);
    if (!s) return cllm_err_set(err, CLLM_ENOMEM, "decode: out of memory");
    *out = s;
    if (out_len) *out_len = len;
    return CLLM_OK;
}

void cllm_tok_stream_init(cllm_tok_stream *st, const cllm_tok *tok, bool skip_special) {
    memset(st, 0, sizeof(*st));
    st->tok = tok;
    st->skip_special = skip_special;
}

static bool reserve(cllm_tok_stream *st, size_t need) {
    if (need <= st->cap) return true;
    size_t nc = st->cap ? st->cap : 64;
    while (nc < need) nc *= 2;
    char *p = realloc(st->buf, nc);
    if (!p) return false;
    st->buf = p;
    st->cap = nc;
    return true;
}

/* Length of a trailing run of u[0..n) that is a valid but incomplete UTF-8 sequence (0..3). */
static int incomplete_tail(const unsigned char *u, size_t n) {
    for (int k = 1; k <= 3 && (size_t)k <= n; k++) {
        const unsigned char *p = u + n - k;
        if ((*p & 0xc0) == 0x80) continue; /* continuation byte: look further back */
        int bad;
        /* valid_len returns 0 with bad == k exactly when p..end is a prefix cut by the end */
        if (tok_utf8_valid_len(p, (size_t)k, &bad) == 0 && bad == k && *p >= 0xc2 && *p <= 0xf4)
            return k;
        return 0;
    }
    return 0;
}

const char *cllm_tok_stream_push(cllm_tok_stream *st, int32_t id, size_t *len, cllm_error *err) {
    const cllm_tok *tok = st->tok;
    if (id < 0 || id >= tok->n_vocab || !tok->tok_bytes[id]) {
        cllm_err_set(err, CLLM_ERANGE, "detokenize: token id %d out of range", (int)id);
        return NULL;
    }
    size_t tl = (st->skip_special && (tok->tok_flags[id] & TOKF_SPECIAL)) ? 0 : tok->tok_len[id];
    size_t n = (size_t)st->n_pend + tl;
    unsigned char *raw = malloc(n + 1);
    if (!raw || !reserve(st, n * 3 + 1)) {
        free(raw);
        cllm_err_set(err, CLLM_ENOMEM, "detokenize: out of memory");
        return NULL;
    }
    memcpy(raw, st->pend, (size_t)st->n_pend);
    memcpy(raw + st->n_pend, tok->tok_bytes[id], tl);
    int keep = incomplete_tail(raw, n);
    size_t emit = n - (size_t)keep, o = 0;
    for (size_t i = 0; i < emit;) {
        int bad, k = tok_utf8_valid_len(raw + i, emit - i, &bad);
        if (k) {
            memcpy(st->buf + o, raw + i, (size_t)k);
            o += (size_t)k, i += (size_t)k;
        } else {
            o += (size_t)tok_utf8_put(0xfffd, st->buf + o);
            i += (size_t)bad;
        }
    }
    memcpy(st->pend, raw + emit, (size_t)keep);
    st->n_pend = keep;
    st->buf[o] = 0;
    free(raw);
    *len = o;
    return st->buf;
}

const char *cllm_tok_stream_flush(cllm_tok_stream *st, size_t *len) {
    /* An incomplete sequence is one maximal subpart: a single U+FFFD, as the batch decode gives. */
    if (!reserve(st, 4)) {
        *len = 0;
        return "";
    }
    size_t o = st->n_pend ? (size_t)tok_utf8_put(0xfffd, st->buf) : 0;
    st->n_pend = 0;
    st->buf[o] = 0;
    *len = o;
    return st->buf;
}

void cllm_tok_stream_free(cllm_tok_stream *st) {
    free(st->buf);
    st->buf = NULL;
    st->cap = 0;
}

int32_t cllm_tok_n_vocab(const cllm_tok *tok) {
    return tok->n_vocab;
}

int32_t cllm_tok_token_id(const cllm_tok *tok, const char *text, size_t len) {
    for (int k = 0; k < tok->n_added; k++)
        if (tok->added[k].len == len && !memcmp(tok->added[k].content, text, len))
            return tok->added[k].id;
    return tok_strmap_get(&tok->vocab, text, len);
}

const char *cllm_tok_token_bytes(const cllm_tok *tok, int32_t id, size_t *len) {
    if (id < 0 || id >= tok->n_vocab || !tok->tok_bytes[id]) return NULL;
    *len = tok->tok_len[id];
    return tok->tok_bytes[id];
}

bool cllm_tok_is_special(const cllm_tok *tok, int32_t id) {
    return id >= 0 && id < tok->n_vocab && (tok->tok_flags[id] & TOKF_SPECIAL);
}

bool cllm_tok_is_added(const cllm_tok *tok, int32_t id) {
    return id >= 0 && id < tok->n_vocab && (tok->tok_flags[id] & TOKF_ADDED);
}

const char *cllm_tok_bos_token(const cllm_tok *tok) {
    return tok->bos_token;
}
const char *cllm_tok_eos_token(const cllm_tok *tok) {
    return tok->eos_token;
}
int32_t cllm_tok_bos_id(const cllm_tok *tok) {
    return tok->bos_id;
}
int32_t cllm_tok_eos_id(const cllm_tok *tok) {
    return tok->eos_id;
}
int32_t cllm_tok_pad_id(const cllm_tok *tok) {
    return tok->pad_id;
}
const char *cllm_tok_chat_template(const cllm_tok *tok) {
    return tok->chat_template;
}
