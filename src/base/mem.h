/* Aligned allocation and timers. */
#ifndef CLLM_BASE_MEM_H
#define CLLM_BASE_MEM_H

#include <stddef.h>
#include <stdint.h>

#define CLLM_ALIGN 64 /* cache line; also enough for AVX-512 loads */

/* 64-byte aligned, size rounded up to a multiple of 64; NULL on failure or overflow.
 * Free with cllm_free_aligned. cllm_alloc_zeroed also zeroes. */
void *cllm_alloc_aligned(size_t size);
void *cllm_alloc_zeroed(size_t size);
void cllm_free_aligned(void *p);
/* Zeroed, like cllm_alloc_zeroed, but from a 2 MiB-aligned anonymous mapping that asks for
 * transparent huge pages (MADV_HUGEPAGE; the kernel may still give 4 KiB pages). For buffers
 * streamed end to end every step (weight panels, recurrent state): a 4 KiB page per 4 KiB read
 * is a TLB miss each, where a 2 MiB page covers 512 of them. Free with cllm_free_aligned. */
void *cllm_alloc_huge(size_t size);
/* Bytes of this process's anonymous memory on transparent huge pages (0 if unknown). */
uint64_t cllm_mem_anon_huge(void);

/* MADV_DONTNEED on the whole pages inside [p, p + n): their memory goes back to the kernel (file
 * pages are read again on the next touch, anonymous ones come back zeroed); a neighbour's bytes
 * on a shared edge page stay. For data that is never read again (a source copied elsewhere). */
void cllm_drop_pages(const void *p, size_t n);
/* MADV_PAGEOUT on the whole pages inside [p, p + n) of a file mapping: their clean pages leave
 * the page cache now (not when memory runs short), so their memory is free at once. A hint:
 * nothing happens where the kernel lacks it. */
void cllm_evict_pages(const void *p, size_t n);

/* Overflow-checked size arithmetic: 0 on success, -1 on overflow. */
static inline int cllm_mul_size(size_t a, size_t b, size_t *out) {
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

/* "1.23 GB" / "4.56 MB" / "7.8 kB" (decimal units) into buf. */
void cllm_fmt_bytes(char *buf, size_t cap, uint64_t n);

/* Monotonic clock in seconds / nanoseconds. */
double cllm_time_s(void);
uint64_t cllm_time_ns(void);

/* Physical RAM and currently available RAM in bytes (0 if unknown); resident set of this process.
 */
uint64_t cllm_mem_total(void);
uint64_t cllm_mem_available(void);
uint64_t cllm_mem_rss(void);

#endif
