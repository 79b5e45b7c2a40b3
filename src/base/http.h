/* Blocking HTTP GET for bench-serve (model discovery) and doctor (health, models, metrics).
 * One libcurl easy handle per call; the body is capped so a broken server cannot grow it. */
#ifndef CLLM_BASE_HTTP_H
#define CLLM_BASE_HTTP_H

#include <stddef.h>

#include "base/status.h"

typedef struct cllm_http_resp {
    int status; /* HTTP status, 0 when no response */
    char *body; /* owned, NUL-terminated; NULL when no response */
    size_t len;
    double time_s; /* total request time */
} cllm_http_resp;

/* GETs url with an optional bearer token. Returns CLLM_EIO (message says why) when no HTTP
 * response came back (refused, timeout, reset), CLLM_ERANGE when the body passed max_body;
 * any HTTP status is CLLM_OK. Free with cllm_http_resp_free. */
cllm_status cllm_http_get(const char *url, const char *api_key, double timeout_s, size_t max_body,
                          cllm_http_resp *out, cllm_error *err);
void cllm_http_resp_free(cllm_http_resp *r);

/* Joins a base URL ("http://h:8000" or ".../") and a path ("/v1/models") into buf. */
void cllm_url_join(char *buf, size_t cap, const char *base, const char *path);

#endif
