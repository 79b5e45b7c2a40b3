/* Normalizer and pre-tokenizer: turns one text segment (between added tokens) into pre-tokens
 * and hands each to the BPE. Called by tok_encode.c.
 *
 * HF compiles the Split regex with Oniguruma; we compile it with PCRE2 (UTF + UCP + JIT). With
 * UCP both engines read \p{L}, \p{N}, \p{M} and \s by Unicode properties, so the Qwen and Llama
 * patterns behave the same; the exactness corpus (tests/tokenizer/test_tok_exact.c) checks this. */
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "tokenizer/tok_int.h"

const char TOK_GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

pcre2_code *tok_regex_compile(const char *pattern, bool literal, cllm_error *err) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                      PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0), &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof(msg));
        cllm_err_set(err, CLLM_EFORMAT, "pre_tokenizer regex at offset %zu: %s", (size_t)eo,
                     (const char *)msg);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if JIT fails */
    return re;
}

/* True when NFC leaves every character of s alone in any context: each is below U+0300 (no
 * combining marks, nothing composes with them except marks), kana without the two voicing marks,
 * CJK ideographs, or full-width forms. Anything else takes the utf8proc path for the segment. */
static bool nfc_inert(const unsigned char *s, size_t len) {
    for (size_t i = 0; i < len;) {
        if (s[i] < 0xcc) {
            i += s[i] < 0x80 ? 1 : 2;
            continue;
        }
        uint32_t cp;
        i += (size_t)tok_utf8_next(s + i, len - i, &cp);
        bool ok = (cp >= 0x3000 && cp <= 0x3098) || (cp >= 0x309b && cp <= 0x30ff) ||
                  (cp >= 0x3400 && cp <= 0x4dbf) || (cp >= 0x4e00 && cp <= 0x9fff) ||
                  (cp >= 0xff00 && cp <= 0xffef);
        if (!ok) return false;
    }
    return true;
}

static char *dupmem(const char *s, size_t len) {
    char *p = malloc(len + 1);
    if (!p) return NULL;
    memcpy(p, s, len);
    p[len] = 0;
    return p;
}

static char *lowercase(const char *s, size_t len, size_t *out_len) {
    char *out = malloc(len * 2 + 4); /* a lowercase code point is never over 2x longer here */
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += (size_t)tok_utf8_next((const unsigned char *)s + i, len - i, &cp);
        o += (size_t)tok_utf8_put((uint32_t)utf8proc_tolower((utf8proc_int32_t)cp), out + o);
    }
    out[o] = 0;
    *out_len = o;
    return out;
}

char *tok_normalize(const cllm_tok *tok, const char *s, size_t len, size_t *out_len) {
    char *cur = dupmem(s, len);
    size_t cur_len = len;
    for (int k = 0; cur && k < tok->n_norms; k++) {
        tok_norm_kind kind = tok->norms[k];
        char *next = NULL;
        if (kind == NORM_LOWER) {
            next = lowercase(cur, cur_len, &cur_len);
        } else {
            if (kind == NORM_NFC && nfc_inert((const unsigned char *)cur, cur_len)) continue;
            int opt = UTF8PROC_STABLE;
            if (kind == NORM_NFC) opt |= UTF8PROC_COMPOSE;
            if (kind == NORM_NFKC) opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
            if (kind == NORM_NFD) opt |= UTF8PROC_DECOMPOSE;
            if (kind == NORM_NFKD) opt |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
            utf8proc_uint8_t *o = NULL;
            utf8proc_ssize_t n =
                utf8proc_map((const utf8proc_uint8_t *)cur, (utf8proc_ssize_t)cur_len, &o,
                             (utf8proc_option_t)opt);
            if (n < 0) { /* cannot happen on sanitized input; keep the text unchanged */
                free(o);
                continue;
            }
            next = (char *)o;
            cur_len = (size_t)n;
        }
        free(cur);
        cur = next;
    }
    if (cur) *out_len = cur_len;
    return cur;
}

/* ---- pre-token lists ---- */

typedef struct piece {
    const char *p;
    size_t len;
} piece;

typedef struct plist {
    piece *v;
    size_t n, cap;
} plist;

static int plist_push(plist *l, const char *p, size_t len) {
    if (!len) return 0; /* HF drops empty splits */
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        piece *np = realloc(l->v, nc * sizeof(*np));
        if (!np) return -1;
        l->v = np;
        l->cap = nc;
    }
    l->v[l->n++] = (piece){p, len};
    return 0;
}

/* Strings created by prefix-space insertion live until the segment is encoded. */
typedef struct owned {
    char **v;
    size_t n, cap;
} owned;

static char *owned_add(owned *o, size_t len) {
    if (o->n == o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 8;
        char **nv = realloc(o->v, nc * sizeof(*nv));
        if (!nv) return NULL;
        o->v = nv;
        o->cap = nc;
    }
    char *s = malloc(len + 1);
    if (s) o->v[o->n++] = s;
    return s;
}

/* Splits one piece by re with HF's delimiter behaviours (the same folds as HF's
 * NormalizedString::split), appending to out. seg is scratch space owned by the caller. */
typedef struct seg {
    size_t a, b;
    bool m;
} seg;

static int split_piece(const tok_pre *pre, piece in, pcre2_match_data *md, seg **segs,
                       size_t *seg_cap, plist *out) {
    const char *s = in.p;
    size_t len = in.len, pos = 0, prev = 0, n = 0;
    for (;;) {
        if (n + 2 > *seg_cap) {
            size_t nc = *seg_cap ? *seg_cap * 2 : 64;
            seg *ns = realloc(*segs, nc * sizeof(*ns));
            if (!ns) return -1;
            *segs = ns;
            *seg_cap = nc;
        }
        if (pos > len) break;
        int rc = pcre2_match(pre->re, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: skip one character, as Oniguruma's find_iter does */
            if (ms >= len) break;
            uint32_t cp;
            pos = ms + (size_t)tok_utf8_next((const unsigned char *)s + ms, len - ms, &cp);
            continue;
        }
        if (prev != ms) (*segs)[n++] = (seg){prev, ms, pre->invert};
        (*segs)[n++] = (seg){ms, me, !pre->invert};
        prev = pos = me;
    }
    if (prev != len) (*segs)[n++] = (seg){prev, len, pre->invert};
    size_t base = out->n;
    bool pm = false;
    switch (pre->behavior) {
    case SPLIT_ISOLATED:
    case SPLIT_REMOVED:
        for (size_t i = 0; i < n; i++) {
            if (pre->behavior == SPLIT_REMOVED && (*segs)[i].m) continue;
            if (plist_push(out, s + (*segs)[i].a, (*segs)[i].b - (*segs)[i].a)) return -1;
        }
        break;
    case SPLIT_MERGED_PREV:
    case SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < n; i++) {
            seg g = (*segs)[i];
            bool merge = pre->behavior == SPLIT_MERGED_PREV ? (g.m && !pm) : (g.m == pm);
            if (merge && out->n > base)
                out->v[out->n - 1].len = (size_t)(s + g.b - out->v[out->n - 1].p);
            else if (plist_push(out, s + g.a, g.b - g.a))
                return -1;
            pm = g.m;
        }
        break;
    case SPLIT_MERGED_NEXT: {
        /* HF folds from the right; build in reverse then flip the new tail. */
        for (size_t i = n; i-- > 0;) {
            seg g = (*segs)[i];
            if (g.m && !pm && out->n > base) {
                piece *l = &out->v[out->n - 1];
                l->len += (size_t)(l->p - (s + g.a));
                l->p = s + g.a;
            } else if (plist_push(out, s + g.a, g.b - g.a)) {
                return -1;
            }
            pm = g.m;
        }
        for (size_t i = base, j = out->n; i + 1 < j; i++, j--) {
            piece t = out->v[i];
            out->v[i] = out->v[j - 1];
            out->v[j - 1] = t;
        }
        break;
    }
    }
    return 0;
}

cllm_status tok_encode_segment(const cllm_tok *tok, const char *s, size_t len, bool first,
                               cllm_tok_ids *out) {
    plist a = {0}, b = {0};
    owned own = {0};
    cllm_status st = CLLM_ENOMEM;
    pcre2_match_data *md = NULL;
    seg *segs = NULL;
    size_t seg_cap = 0;
    if (plist_push(&a, s, len)) goto done;
    for (int k = 0; k < tok->n_pres; k++) {
        const tok_pre *pre = &tok->pres[k];
        if (pre->kind == PRE_BYTELEVEL && pre->add_prefix_space) {
            for (size_t i = 0; i < a.n; i++) {
                if (a.v[i].p[0] == ' ') continue;
                char *p = owned_add(&own, a.v[i].len + 1);
                if (!p) goto done;
                p[0] = ' ';
                memcpy(p + 1, a.v[i].p, a.v[i].len);
                a.v[i].p = p;
                a.v[i].len++;
            }
        }
        if (!pre->re) continue;
        if (!md && !(md = pcre2_match_data_create(1, NULL))) goto done;
        b.n = 0;
        for (size_t i = 0; i < a.n; i++)
            if (split_piece(pre, a.v[i], md, &segs, &seg_cap, &b)) goto done;
        plist t = a;
        a = b;
        b = t;
    }
    st = CLLM_OK;
    for (size_t i = 0; i < a.n && st == CLLM_OK; i++)
        st = tok_bpe_word(tok, a.v[i].p, a.v[i].len, out);
done:
    pcre2_match_data_free(md);
    free(segs);
    for (size_t i = 0; i < own.n; i++) free(own.v[i]);
    free(own.v);
    free(a.v);
    free(b.v);
    return st;
}
