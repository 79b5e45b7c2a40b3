/* Base64 encoder and strict decoder; see base64.h. */
#include "base/base64.h"

#include <stdlib.h>

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* 0..63 for alphabet characters, -1 otherwise. */
static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

static int is_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

cllm_status cllm_base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_n,
                               cllm_error *err) {
    *out = NULL;
    *out_n = 0;
    uint8_t *buf = malloc(n / 4 * 3 + 3);
    if (!buf) return cllm_err_set(err, CLLM_ENOMEM, "base64: out of memory for %zu bytes", n);
    size_t len = 0, pads = 0, first_pad = 0;
    uint32_t acc = 0;
    int have = 0; /* sextets in acc */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (is_space(c)) continue;
        if (c == '=') {
            if (!pads) first_pad = i;
            pads++;
            continue;
        }
        int v = b64_value(c);
        if (v < 0 || pads) {
            free(buf);
            if (v < 0)
                return cllm_err_set(err, CLLM_EINVAL,
                                    "base64: invalid character 0x%02x at offset %zu", c, i);
            return cllm_err_set(err, CLLM_EINVAL, "base64: data after '=' padding at offset %zu",
                                first_pad);
        }
        acc = acc << 6 | (uint32_t)v;
        if (++have == 4) {
            buf[len++] = (uint8_t)(acc >> 16);
            buf[len++] = (uint8_t)(acc >> 8);
            buf[len++] = (uint8_t)acc;
            acc = 0;
            have = 0;
        }
    }
    /* A final group of 2 or 3 characters carries 1 or 2 bytes; its unused low bits must be
     * zero (a canonical encoder writes them so), and padding, when present, must complete it. */
    const char *bad = NULL;
    if (have == 1)
        bad = "a single character cannot end the data";
    else if (have == 2 && (acc & 0xf))
        bad = "non-zero bits after the last byte";
    else if (have == 3 && (acc & 0x3))
        bad = "non-zero bits after the last byte";
    else if (pads && (size_t)have + pads != 4)
        bad = "wrong amount of '=' padding";
    if (bad) {
        free(buf);
        return cllm_err_set(err, CLLM_EINVAL, "base64: %s", bad);
    }
    if (have == 2) buf[len++] = (uint8_t)(acc >> 4);
    if (have == 3) {
        buf[len++] = (uint8_t)(acc >> 10);
        buf[len++] = (uint8_t)(acc >> 2);
    }
    *out = buf;
    *out_n = len;
    return CLLM_OK;
}

char *cllm_base64_encode(const void *b, size_t n) {
    const uint8_t *p = b;
    char *o = malloc((n + 2) / 3 * 4 + 1);
    if (!o) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        o[j++] = b64_alphabet[w >> 18 & 63];
        o[j++] = b64_alphabet[w >> 12 & 63];
        o[j++] = i + 1 < n ? b64_alphabet[w >> 6 & 63] : '=';
        o[j++] = i + 2 < n ? b64_alphabet[w & 63] : '=';
    }
    o[j] = 0;
    return o;
}
