/* Error message helpers; see status.h. */
#include "base/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cllm_status cllm_err_set(cllm_error *err, cllm_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

void cllm_err_prefix(cllm_error *err, const char *fmt, ...) {
    if (!err) return;
    char pre[256], old[sizeof(err->msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof(pre), fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof(old));
    /* Truncation is acceptable here: the message stays NUL-terminated and readable. */
    size_t n = strlen(pre);
    if (n > sizeof(err->msg) - 3) n = sizeof(err->msg) - 3;
    memcpy(err->msg, pre, n);
    memcpy(err->msg + n, ": ", 2);
    size_t rest = sizeof(err->msg) - n - 3, ol = strlen(old);
    if (ol > rest) ol = rest;
    memcpy(err->msg + n + 2, old, ol);
    err->msg[n + 2 + ol] = '\0';
}

void cllm_err_clear(cllm_error *err) {
    if (!err) return;
    err->code = CLLM_OK;
    err->msg[0] = '\0';
}

const char *cllm_status_name(cllm_status s) {
    switch (s) {
    case CLLM_OK:
        return "OK";
    case CLLM_EINVAL:
        return "EINVAL";
    case CLLM_ENOMEM:
        return "ENOMEM";
    case CLLM_EIO:
        return "EIO";
    case CLLM_EFORMAT:
        return "EFORMAT";
    case CLLM_ENOTFOUND:
        return "ENOTFOUND";
    case CLLM_EUNSUPPORTED:
        return "EUNSUPPORTED";
    case CLLM_ERANGE:
        return "ERANGE";
    case CLLM_EBUSY:
        return "EBUSY";
    case CLLM_ECANCELLED:
        return "ECANCELLED";
    }
    return "E?";
}

void cllm_assert_fail(const char *file, int line, const char *expr) {
    fprintf(stderr, "cllm: internal error at %s:%d: assertion '%s' failed\n", file, line, expr);
    abort();
}
