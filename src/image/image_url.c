/* cllm_data_url_decode: the bytes of an OpenAI image_url part given as a data: URL (RFC 2397,
 * base64 form). The server calls it before cllm_image_decode; other schemes are refused here so
 * the message names the scheme. */
#include "image/image.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "base/base64.h"

static int is_scheme_char(unsigned char c) {
    return isalnum(c) || c == '+' || c == '-' || c == '.';
}

cllm_status cllm_data_url_decode(const char *url, size_t len, uint8_t **bytes, size_t *n,
                                 char *mime, size_t mime_cap, cllm_error *err) {
    *bytes = NULL;
    *n = 0;
    if (mime && mime_cap) mime[0] = '\0';
    size_t colon = 0;
    while (colon < len && colon < 32 && is_scheme_char((unsigned char)url[colon])) colon++;
    if (colon == 0 || colon >= len || url[colon] != ':' || !isalpha((unsigned char)url[0]))
        return cllm_err_set(err, CLLM_EINVAL, "image URL: not a URL (expected data:...)");
    if (colon != 4 || strncasecmp(url, "data", 4))
        return cllm_err_set(err, CLLM_EINVAL,
                            "image URL: the '%.*s' scheme is not supported: only data: URLs "
                            "(base64) are read, nothing is fetched",
                            (int)colon, url);
    const char *meta = url + 5, *end = url + len;
    const char *comma = memchr(meta, ',', (size_t)(end - meta));
    if (!comma) return cllm_err_set(err, CLLM_EINVAL, "image URL: data: URL without a ','");
    /* <mime>;param=value;...;base64 — base64 is the last parameter in RFC 2397; any is taken */
    const char *semi = memchr(meta, ';', (size_t)(comma - meta));
    const char *mime_end = semi ? semi : comma;
    int b64 = 0;
    for (const char *q = semi; q && q < comma;) {
        const char *s = q + 1, *e = memchr(s, ';', (size_t)(comma - s));
        if (!e) e = comma;
        if (e - s == 6 && !strncasecmp(s, "base64", 6)) b64 = 1;
        q = e < comma ? e : NULL;
    }
    if (!b64)
        return cllm_err_set(err, CLLM_EINVAL,
                            "image URL: the data: URL is not base64 (';base64' missing)");
    if (mime && mime_cap) {
        size_t m = (size_t)(mime_end - meta);
        if (m > mime_cap - 1) m = mime_cap - 1;
        for (size_t i = 0; i < m; i++) mime[i] = (char)tolower((unsigned char)meta[i]);
        mime[m] = '\0';
    }
    cllm_status st = cllm_base64_decode(comma + 1, (size_t)(end - comma - 1), bytes, n, err);
    if (st) cllm_err_prefix(err, "image URL");
    return st;
}
