/* base/mem.c allocations: cllm_alloc_huge hands out zeroed, writable, 64-byte aligned memory whose
 * mapping starts on a 2 MiB boundary (so whole huge pages can back it), of every size from 0 up,
 * freed by cllm_free_aligned like the other blocks; an impossible size is refused, not wrapped. */
#include <stdint.h>
#include <string.h>

#include "base/mem.h"
#include "test.h"

static int all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

int main(void) {
    const size_t sizes[] = {
        0, 1, 63, 4096, ((size_t)2 << 20) - 64, (size_t)2 << 20, ((size_t)5 << 20) + 123};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i];
        unsigned char *p = cllm_alloc_huge(n);
        CHECK(p != NULL);
        if (!p) continue;
        CHECK((uintptr_t)p % CLLM_ALIGN == 0);
        CHECK(((uintptr_t)p - CLLM_ALIGN) % ((uintptr_t)2 << 20) == 0);
        CHECK(all_zero(p, n));
        if (n) {
            memset(p, 0xa5, n); /* every byte writable (ASan / a fault would stop here) */
            CHECK(p[n - 1] == 0xa5);
        }
        cllm_free_aligned(p);
    }
    CHECK(cllm_alloc_huge(SIZE_MAX - 100) == NULL);
    CHECK(cllm_alloc_huge(SIZE_MAX / 2) == NULL); /* no such mapping on any machine here */
    /* the other kinds still free through the same call */
    void *a = cllm_alloc_zeroed(100), *b = cllm_alloc_zeroed((size_t)3 << 20);
    CHECK(a && b && all_zero(a, 100) && all_zero(b, (size_t)3 << 20));
    cllm_free_aligned(a);
    cllm_free_aligned(b);
    return test_report("test_mem");
}
