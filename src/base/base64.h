/* Base64 (RFC 4648 §4, the standard alphabet) in both directions: the decoder reads the payload
 * of data: URLs (src/image/image_url.c, for OpenAI image_url parts), the encoder is the one to use
 * for binary in JSON (embeddings' encoding_format "base64"). Pure functions, no state. */
#ifndef CLLM_BASE_BASE64_H
#define CLLM_BASE_BASE64_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Decodes s[0..n) into a malloc'd buffer (*out, caller frees; *out_n bytes; one spare byte so an
 * empty result is still a valid pointer). Accepts the standard alphabet with or without '='
 * padding and skips ASCII whitespace (clients wrap lines); refuses any other character, padding
 * inside the data, a dangling single character and non-zero trailing bits, with
 * CLLM_EINVAL and a message giving the offset. CLLM_ENOMEM when the buffer cannot be had. */
cllm_status cllm_base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_n,
                               cllm_error *err);

/* Encodes b[0..n) with '=' padding into a malloc'd NUL-terminated string (caller frees; its
 * length is 4 * ceil(n / 3)); NULL when out of memory. */
char *cllm_base64_encode(const void *b, size_t n);

#endif
