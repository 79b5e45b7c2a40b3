/* Aligned allocation, clocks and memory figures; see mem.h. */
#include "base/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Every block carries a 64-byte header (keeps the payload 64-byte aligned) recording how it was
 * obtained. Large blocks come straight from mmap: the kernel hands out zero pages lazily, so a
 * multi-GiB KV pool costs nothing until it is used (a memset would touch every page at start-up).
 */
#define HDR      CLLM_ALIGN
#define MMAP_MIN ((size_t)1 << 20)
#define HUGE_SZ  ((size_t)2 << 20)
enum { BLK_HEAP = 0x68656170, BLK_MMAP = 0x6d6d6170, BLK_HUGE = 0x68756765 };

typedef struct blk_hdr {
    uint32_t kind;
    uint32_t pad;
    size_t total; /* bytes including the header */
} blk_hdr;

static void *alloc_blk(size_t size, int zero) {
    if (size == 0) size = 1;
    if (size > SIZE_MAX - 2 * CLLM_ALIGN) return NULL;
    size_t total = ((size + CLLM_ALIGN - 1) & ~(size_t)(CLLM_ALIGN - 1)) + HDR;
    unsigned char *base;
    uint32_t kind;
    if (total >= MMAP_MIN) {
        base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base == MAP_FAILED) return NULL;
        kind = BLK_MMAP; /* already zero */
    } else {
        base = aligned_alloc(CLLM_ALIGN, total);
        if (!base) return NULL;
        if (zero) memset(base + HDR, 0, total - HDR);
        kind = BLK_HEAP;
    }
    blk_hdr h = {kind, 0, total};
    memcpy(base, &h, sizeof(h));
    return base + HDR;
}

void *cllm_alloc_aligned(size_t size) {
    return alloc_blk(size, 0);
}
void *cllm_alloc_zeroed(size_t size) {
    return alloc_blk(size, 1);
}

void *cllm_alloc_huge(size_t size) {
    if (size > SIZE_MAX - 2 * HUGE_SZ - HDR) return NULL;
    size_t total = (size + HDR + HUGE_SZ - 1) & ~(HUGE_SZ - 1);
    /* map one huge page more, then trim to a 2 MiB-aligned start: mmap only promises 4 KiB */
    unsigned char *raw =
        mmap(NULL, total + HUGE_SZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uintptr_t a = ((uintptr_t)raw + HUGE_SZ - 1) & ~(uintptr_t)(HUGE_SZ - 1);
    unsigned char *base = (unsigned char *)a;
    if (base > raw) munmap(raw, (size_t)(base - raw));
    if (raw + total + HUGE_SZ > base + total)
        munmap(base + total, (size_t)(raw + total + HUGE_SZ - (base + total)));
#ifdef MADV_HUGEPAGE
    (void)madvise(base, total, MADV_HUGEPAGE); /* advice: refused (THP off) is fine */
#endif
    blk_hdr h = {BLK_HUGE, 0, total};
    memcpy(base, &h, sizeof(h));
    return base + HDR;
}

void cllm_free_aligned(void *p) {
    if (!p) return;
    unsigned char *base = (unsigned char *)p - HDR;
    blk_hdr h;
    memcpy(&h, base, sizeof(h));
    if (h.kind == BLK_MMAP || h.kind == BLK_HUGE)
        munmap(base, h.total);
    else
        free(base);
}

void cllm_fmt_bytes(char *b, size_t cap, uint64_t n) {
    if (n >= 1000000000ull)
        snprintf(b, cap, "%.2f GB", (double)n / 1e9);
    else if (n >= 1000000ull)
        snprintf(b, cap, "%.2f MB", (double)n / 1e6);
    else
        snprintf(b, cap, "%.1f kB", (double)n / 1e3);
}

uint64_t cllm_time_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double cllm_time_s(void) {
    return (double)cllm_time_ns() * 1e-9;
}

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

uint64_t cllm_mem_total(void) {
    return meminfo_kb("MemTotal");
}
uint64_t cllm_mem_available(void) {
    return meminfo_kb("MemAvailable");
}

uint64_t cllm_mem_anon_huge(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "AnonHugePages: %llu kB", &kb) == 1) break;
    fclose(f);
    return kb * 1024;
}

uint64_t cllm_mem_rss(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long size = 0, rss = 0;
    int n = fscanf(f, "%llu %llu", &size, &rss);
    fclose(f);
    return n == 2 ? rss * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

void cllm_evict_pages(const void *p, size_t n) {
#ifdef MADV_PAGEOUT
    uintptr_t a = (uintptr_t)p, pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t b0 = (a + pg - 1) / pg * pg, b1 = (a + n) / pg * pg;
    if (b1 > b0) (void)madvise((void *)b0, b1 - b0, MADV_PAGEOUT);
#else
    (void)p, (void)n;
#endif
}

void cllm_drop_pages(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p, pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t b0 = (a + pg - 1) / pg * pg, b1 = (a + n) / pg * pg;
    if (b1 > b0) madvise((void *)b0, b1 - b0, MADV_DONTNEED);
}
