/* Logging: levels, timestamps, text or JSON lines on stderr. Thread-safe (one write per line). */
#ifndef CLLM_BASE_LOG_H
#define CLLM_BASE_LOG_H

typedef enum cllm_log_level {
    CLLM_LOG_DEBUG,
    CLLM_LOG_INFO,
    CLLM_LOG_WARN,
    CLLM_LOG_ERROR,
} cllm_log_level;

void cllm_log_set_level(cllm_log_level lvl);
int cllm_log_set_level_name(const char *name);  /* 0 ok, -1 unknown */
int cllm_log_set_format_name(const char *name); /* "text" | "json"; 0 ok, -1 unknown */
int cllm_log_enabled(cllm_log_level lvl);

void cllm_log(cllm_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define LOG_DEBUG(...) cllm_log(CLLM_LOG_DEBUG, __VA_ARGS__)
#define LOG_INFO(...)  cllm_log(CLLM_LOG_INFO, __VA_ARGS__)
#define LOG_WARN(...)  cllm_log(CLLM_LOG_WARN, __VA_ARGS__)
#define LOG_ERROR(...) cllm_log(CLLM_LOG_ERROR, __VA_ARGS__)

#endif
