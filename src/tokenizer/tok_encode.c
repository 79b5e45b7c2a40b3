/* Encode: added-token extraction, normalization, pre-tokenization, BPE, post-processing.
 * Mirrors HF's TokenizerImpl::encode for one sequence: added tokens that are not "normalized"
 * are found in the raw text, the rest of the text is normalized, then normalized added tokens
 * are found, and each remaining segment goes through the pre-tokenizer and the model. */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "tokenizer/tok_int.h"

/* Rust's char::is_whitespace (the Unicode White_Space property). */
static bool is_ws(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}

static bool is_alnum(uint32_t c) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

/* Code point ending just before s[pos] (pos > 0). */
static uint32_t cp_before(const char *s, size_t pos, size_t *start) {
    size_t i = pos - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xc0) == 0x80) i--;
    uint32_t cp;
    tok_utf8_next((const unsigned char *)s + i, pos - i, &cp);
    *start = i;
    return cp;
}

/* The longest added token (of the wanted normalized class) starting at s[i], or NULL. */
static const tok_added *match_at(const cllm_tok *tok, const char *s, size_t len, size_t i,
                                 bool normalized) {
    for (int k = 0; k < tok->n_added; k++) { /* sorted longest first */
        const tok_added *a = &tok->added[k];
        if (a->normalized != normalized || a->len > len - i) continue;
        if (!memcmp(s + i, a->content, a->len)) return a;
    }
    return NULL;
}

typedef cllm_status (*seg_fn)(const cllm_tok *tok, const char *s, size_t len, int flags,
                              cllm_tok_ids *out);

/* Finds added tokens of one class in s (leftmost-longest, then HF's single_word / lstrip /
 * rstrip rules), emits their ids and passes the text between them to fn. */
static cllm_status split_added(const cllm_tok *tok, const char *s, size_t len, int flags,
                               bool normalized, seg_fn fn, cllm_tok_ids *out) {
    bool any = false;
    for (int k = 0; k < tok->n_added && !any; k++)
        any = tok->added[k].normalized == normalized &&
              !((flags & CLLM_TOK_SPLIT_SPECIAL) && tok->added[k].special);
    if (!any) return fn(tok, s, len, flags, out);
    uint8_t first[256] = {0};
    for (int k = 0; k < tok->n_added; k++) first[(unsigned char)tok->added[k].content[0]] = 1;
    size_t done = 0; /* text before this offset is already emitted */
    for (size_t i = 0; i < len;) {
        if (!first[(unsigned char)s[i]]) {
            i++;
            continue;
        }
        const tok_added *a = match_at(tok, s, len, i, normalized);
        if (!a || ((flags & CLLM_TOK_SPLIT_SPECIAL) && a->special)) {
            /* HF skips a special match in this mode but the scan continues after it. */
            i += a ? a->len : 1;
            continue;
        }
        size_t start = i, stop = i + a->len;
        if (a->single_word) {
            size_t dummy;
            uint32_t nx;
            bool ok_l = start == 0 || !is_alnum(cp_before(s, start, &dummy));
            bool ok_r =
                stop == len ||
                (tok_utf8_next((const unsigned char *)s + stop, len - stop, &nx), !is_alnum(nx));
            if (!ok_l || !ok_r) {
                i = stop;
                continue;
            }
        }
        if (a->lstrip) {
            size_t ns = start, cs;
            while (ns > 0 && is_ws(cp_before(s, ns, &cs))) ns = cs;
            start = ns > done ? ns : done;
        }
        if (a->rstrip) {
            while (stop < len) {
                uint32_t cp;
                int n = tok_utf8_next((const unsigned char *)s + stop, len - stop, &cp);
                if (!is_ws(cp)) break;
                stop += (size_t)n;
            }
        }
        if (done < start) {
            cllm_status st = fn(tok, s + done, start - done, flags, out);
            if (st) return st;
        }
        cllm_status st = tok_ids_push(out, a->id);
        if (st) return st;
        done = i = stop;
    }
    return done < len ? fn(tok, s + done, len - done, flags, out) : CLLM_OK;
}

static cllm_status encode_plain(const cllm_tok *tok, const char *s, size_t len, int flags,
                                cllm_tok_ids *out) {
    return len ? tok_encode_segment(tok, s, len, false, out) : CLLM_OK;
}

static cllm_status encode_raw_segment(const cllm_tok *tok, const char *s, size_t len, int flags,
                                      cllm_tok_ids *out) {
    size_t nlen = len;
    char *norm = tok->n_norms ? tok_normalize(tok, s, len, &nlen) : NULL;
    if (tok->n_norms && !norm) return CLLM_ENOMEM;
    const char *t = norm ? norm : s;
    cllm_status st = tok->any_normalized_added
                         ? split_added(tok, t, nlen, flags, true, encode_plain, out)
                         : encode_plain(tok, t, nlen, flags, out);
    free(norm);
    return st;
}

static bool valid_utf8(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int bad, n = tok_utf8_valid_len(u + i, len - i, &bad);
        if (!n) return false;
        i += (size_t)n;
    }
    return true;
}

cllm_status cllm_tok_encode(const cllm_tok *tok, const char *text, size_t len, int flags,
                            cllm_tok_ids *out, cllm_error *err) {
    char *clean = NULL;
    if (!valid_utf8(text, len)) {
        if (!(clean = cllm_tok_utf8_sanitize(text, len, &len)))
            return cllm_err_set(err, CLLM_ENOMEM, "encode: out of memory");
        text = clean;
    }
    cllm_status st = CLLM_OK;
    if (flags & CLLM_TOK_ADD_SPECIAL)
        st = tok_ids_append(out, tok->post_prefix, (size_t)tok->n_post_prefix);
    if (!st) st = split_added(tok, text, len, flags, false, encode_raw_segment, out);
    if (!st && (flags & CLLM_TOK_ADD_SPECIAL))
        st = tok_ids_append(out, tok->post_suffix, (size_t)tok->n_post_suffix);
    free(clean);
    return st ? cllm_err_set(err, st, "encode: out of memory") : CLLM_OK;
}
