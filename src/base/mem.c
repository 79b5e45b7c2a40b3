/* Aligned allocation, clocks and memory figures; see mem.h. */
#include "base/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void *cllm_alloc_aligned(size_t size) {
    if (size == 0) size = 1;
    if (size > SIZE_MAX - CLLM_ALIGN) return NULL;
    size = (size + CLLM_ALIGN - 1) & ~(size_t)(CLLM_ALIGN - 1);
    return aligned_alloc(CLLM_ALIGN, size);
}

void *cllm_alloc_zeroed(size_t size) {
    void *p = cllm_alloc_aligned(size);
    if (p) memset(p, 0, size ? size : 1);
    return p;
}

void cllm_free_aligned(void *p) { free(p); }

uint64_t cllm_time_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double cllm_time_s(void) { return (double)cllm_time_ns() * 1e-9; }

static uint64_t meminfo_kb(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    uint64_t v = 0;
    size_t kl = strlen(key);
    while (fgets(line, sizeof(line), f)) {
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            v = strtoull(line + kl + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v * 1024;
}

uint64_t cllm_mem_total(void) { return meminfo_kb("MemTotal"); }
uint64_t cllm_mem_available(void) { return meminfo_kb("MemAvailable"); }

uint64_t cllm_mem_rss(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, rss = 0;
    int n = fscanf(f, "%llu %llu", &size, &rss);
    fclose(f);
    return n == 2 ? rss * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}
