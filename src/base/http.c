/* Blocking GET helper; see http.h. */
#include "base/http.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sink {
    char *buf;
    size_t len, cap, max;
    int overflow;
} sink;

static size_t on_data(char *p, size_t sz, size_t nm, void *ud) {
    sink *s = ud;
    size_t n = sz * nm;
    if (s->len + n > s->max) {
        s->overflow = 1;
        return 0;
    }
    if (s->len + n + 1 > s->cap) {
        size_t c = s->cap ? s->cap : 4096;
        while (c < s->len + n + 1) c *= 2;
        char *q = realloc(s->buf, c);
        if (!q) return 0;
        s->buf = q, s->cap = c;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    s->buf[s->len] = 0;
    return n;
}

void cllm_url_join(char *buf, size_t cap, const char *base, const char *path) {
    size_t bl = strlen(base);
    while (bl && base[bl - 1] == '/') bl--;
    snprintf(buf, cap, "%.*s%s", (int)bl, base, path);
}

cllm_status cllm_http_get(const char *url, const char *api_key, double timeout_s, size_t max_body,
                          cllm_http_resp *out, cllm_error *err) {
    memset(out, 0, sizeof(*out));
    CURL *h = curl_easy_init();
    if (!h) return cllm_err_set(err, CLLM_ENOMEM, "curl_easy_init failed");
    sink s = {.max = max_body};
    struct curl_slist *hdr = NULL;
    char auth[512];
    if (api_key) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", api_key);
        hdr = curl_slist_append(hdr, auth);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(timeout_s * 1000));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
    if (hdr) curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_getinfo(h, CURLINFO_TOTAL_TIME, &out->time_s);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    if (s.overflow) {
        free(s.buf);
        return cllm_err_set(err, CLLM_ERANGE, "%s: body larger than %zu bytes", url, max_body);
    }
    if (rc != CURLE_OK) {
        free(s.buf);
        return cllm_err_set(err, CLLM_EIO, "%s: %s", url, curl_easy_strerror(rc));
    }
    out->status = (int)status;
    out->body = s.buf ? s.buf : strdup("");
    out->len = s.len;
    return out->body ? CLLM_OK : cllm_err_set(err, CLLM_ENOMEM, "out of memory");
}

void cllm_http_resp_free(cllm_http_resp *r) {
    free(r->body);
    r->body = NULL;
}
