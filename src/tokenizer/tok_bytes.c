/* Byte-level helpers: GPT-2's byte <-> code point map and strict UTF-8 decoding with
 * WHATWG / Rust from_utf8_lossy "maximal subpart" error handling, so that our U+FFFD replacement
 * of invalid input matches what a HF tokenizer behind a JS or Rust string would see. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_int.h"

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100.. in byte order. */
static int printable(int b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

uint32_t tok_byte_to_cp(uint8_t b) {
    if (printable(b)) return b;
    uint32_t n = 0;
    for (int i = 0; i < b; i++)
        if (!printable(i)) n++;
    return 256 + n;
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 256) return printable((int)cp) ? (int)cp : -1;
    if (cp >= 256 + 68) return -1;
    uint32_t n = 0;
    for (int i = 0; i < 256; i++)
        if (!printable(i) && n++ == cp - 256) return i;
    return -1;
}

int tok_utf8_next(const unsigned char *s, size_t len, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80 || len < 2) {
        *cp = c;
        return 1;
    }
    if (c < 0xe0) {
        *cp = ((c & 0x1fu) << 6) | (s[1] & 0x3fu);
        return 2;
    }
    if (c < 0xf0 || len < 4) {
        *cp = len < 3 ? c : ((c & 0x0fu) << 12) | ((s[1] & 0x3fu) << 6) | (s[2] & 0x3fu);
        return len < 3 ? 1 : 3;
    }
    *cp = ((c & 0x07u) << 18) | ((s[1] & 0x3fu) << 12) | ((s[2] & 0x3fu) << 6) | (s[3] & 0x3fu);
    return 4;
}

int tok_utf8_valid_len(const unsigned char *s, size_t len, int *bad_len) {
    unsigned c = s[0];
    *bad_len = 1;
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        need = 1;
    else if (c == 0xe0)
        need = 2, lo = 0xa0;
    else if (c >= 0xe1 && c <= 0xec)
        need = 2;
    else if (c == 0xed)
        need = 2, hi = 0x9f;
    else if (c >= 0xee && c <= 0xef)
        need = 2;
    else if (c == 0xf0)
        need = 3, lo = 0x90;
    else if (c >= 0xf1 && c <= 0xf3)
        need = 3;
    else if (c == 0xf4)
        need = 3, hi = 0x8f;
    else
        return 0;
    /* The maximal subpart is the lead byte plus every continuation byte that still fits. */
    for (int i = 1; i <= need; i++) {
        if ((size_t)i >= len) {
            *bad_len = i;
            return 0;
        }
        unsigned b = s[i];
        if (b < lo || b > hi) {
            *bad_len = i;
            return 0;
        }
        lo = 0x80, hi = 0xbf;
    }
    return need + 1;
}

int tok_utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

char *cllm_tok_utf8_sanitize(const char *s, size_t len, size_t *out_len) {
    const unsigned char *u = (const unsigned char *)s;
    /* Worst case: every byte becomes U+FFFD (3 bytes). */
    if (len > (SIZE_MAX - 1) / 3) return NULL;
    char *out = malloc(len * 3 + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        int bad, n = tok_utf8_valid_len(u + i, len - i, &bad);
        if (n) {
            memcpy(out + o, s + i, (size_t)n);
            o += (size_t)n;
            i += (size_t)n;
        } else {
            o += (size_t)tok_utf8_put(0xfffd, out + o);
            i += (size_t)bad;
        }
    }
    out[o] = 0;
    if (out_len) *out_len = o;
    return out;
}
