/* Test HTTP client helpers over libcurl for tests/server/test_server*.c. */
#ifndef CLLM_TESTS_TEST_SERVER_CLIENT_H
#define CLLM_TESTS_TEST_SERVER_CLIENT_H

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

typedef struct http_res {
    long status;
    char *body;
    size_t len;
    char *headers;
    size_t hlen;
    double ttfb;
} http_res;

static size_t http_sink(char *p, size_t sz, size_t n, void *ud) {
    char **buf = ((char ***)ud)[0];
    size_t *len = ((size_t **)ud)[1];
    size_t add = sz * n;
    char *nb = realloc(*buf, *len + add + 1);
    if (!nb) return 0;
    memcpy(nb + *len, p, add);
    *len += add;
    nb[*len] = 0;
    *buf = nb;
    return add;
}

static void http_free(http_res *r) {
    free(r->body);
    free(r->headers);
    memset(r, 0, sizeof(*r));
}

/* method, path, extra headers ("A: b" NULL-terminated list or NULL), body (NULL for none). */
static int http_do(int port, const char *method, const char *path, const char *const *hdrs,
                   const char *body, size_t body_len, http_res *out) {
    memset(out, 0, sizeof(*out));
    CURL *c = curl_easy_init();
    if (!c) return -1;
    char url[512];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    struct curl_slist *sl = NULL;
    for (int i = 0; hdrs && hdrs[i]; i++) sl = curl_slist_append(sl, hdrs[i]);
    sl = curl_slist_append(sl, "Expect:");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, sl);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    }
    void *bud[2] = {&out->body, &out->len}, *hud[2] = {&out->headers, &out->hlen};
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, http_sink);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, (void *)bud); /* gcc 12 -O3: curl's type check */
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, http_sink);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, (void *)hud);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    curl_easy_getinfo(c, CURLINFO_STARTTRANSFER_TIME, &out->ttfb);
    curl_slist_free_all(sl);
    curl_easy_cleanup(c);
    if (!out->body) out->body = calloc(1, 1);
    if (!out->headers) out->headers = calloc(1, 1);
    return rc == CURLE_OK ? 0 : -1;
}

static int http_post(int port, const char *path, const char *key, const char *body, http_res *out) {
    char auth[256];
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", key ? key : "");
    const char *h[] = {"Content-Type: application/json", key ? auth : NULL, NULL};
    return http_do(port, "POST", path, h, body, strlen(body), out);
}

#endif
