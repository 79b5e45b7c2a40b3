/* Log lines: "2026-11-30T10:12:01.123Z INFO message" or one JSON object per line
 * ({"ts":...,"level":...,"msg":...}) for log shippers. The level is set by the caller (the CLI:
 * --log-level, CLLM_LOG through cli/options.c). */
#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static cllm_log_level log_level = CLLM_LOG_INFO;
static int log_json;

static const char *const level_names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void cllm_log_set_level(cllm_log_level lvl) {
    log_level = lvl;
}

int cllm_log_set_level_name(const char *name) {
    static const char *const lower[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++) {
        if (!strcmp(name, lower[i]) || !strcmp(name, level_names[i])) {
            cllm_log_set_level((cllm_log_level)i);
            return 0;
        }
    }
    return -1;
}

int cllm_log_set_format_name(const char *name) {
    if (!strcmp(name, "text"))
        log_json = 0;
    else if (!strcmp(name, "json"))
        log_json = 1;
    else
        return -1;
    return 0;
}

int cllm_log_enabled(cllm_log_level lvl) {
    return lvl >= log_level;
}

/* Escapes msg as a JSON string body into out (always NUL-terminated). */
static void json_escape(char *out, size_t cap, const char *msg) {
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && o + 7 < cap; p++) {
        if (*p == '"' || *p == '\\') {
            out[o++] = '\\';
            out[o++] = (char)*p;
        } else if (*p < 0x20) {
            o += (size_t)snprintf(out + o, cap - o, "\\u%04x", *p);
        } else {
            out[o++] = (char)*p;
        }
    }
    out[o] = '\0';
}

void cllm_log(cllm_log_level lvl, const char *fmt, ...) {
    if (!cllm_log_enabled(lvl)) return;
    char msg[2048], line[4600], ts[40];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    size_t n = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof(ts) - n, ".%03ldZ", now.tv_nsec / 1000000);

    int len;
    if (log_json) {
        char esc[4300];
        json_escape(esc, sizeof(esc), msg);
        len = snprintf(line, sizeof(line), "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n", ts,
                       level_names[lvl], esc);
    } else {
        len = snprintf(line, sizeof(line), "%s %-5s %s\n", ts, level_names[lvl], msg);
    }
    if (len < 0) return;
    if ((size_t)len >= sizeof(line)) len = (int)sizeof(line) - 1;
    /* One write() per line keeps lines whole when several threads log. */
    ssize_t w = write(STDERR_FILENO, line, (size_t)len);
    (void)w;
}
