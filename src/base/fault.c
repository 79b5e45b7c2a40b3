/* Allocation-failure injection; see fault.h. The __wrap_* functions exist only in fault builds
 * (CLLM_FAULT_INJECT), where the linker sends cllm's calls to malloc & co. here and the
 * __real_* names reach libc (or the sanitizer's interceptors, so ASan still sees every block). */
#include "base/fault.h"

#ifdef CLLM_FAULT_INJECT
#include <errno.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t m);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);

static long n_allocs, n_failed;
static long fail_lo, fail_hi; /* absolute counts, inclusive; fail_lo 0 = none */
static int fired, env_state;  /* env_state: 0 unread, 1 reading, 2 read */
static bool trace;            /* CLLM_FAULT_TRACE=1: a backtrace of each failed call on stderr */
static _Thread_local bool exempt;

static void report(void) {
    fprintf(stderr, "cllm-fault: %ld allocations, %ld failed\n",
            __atomic_load_n(&n_allocs, __ATOMIC_RELAXED),
            __atomic_load_n(&n_failed, __ATOMIC_RELAXED));
}

/* Reads CLLM_FAULT_ALLOC once, on the first counted allocation (getenv does not allocate). */
static void read_env(void) {
    int want = 0;
    if (!__atomic_compare_exchange_n(&env_state, &want, 1, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return;
    const char *v = getenv("CLLM_FAULT_ALLOC");
    if (v && *v) {
        char *end;
        long lo = strtol(v, &end, 10), hi = lo;
        if (*end == '-')
            hi = strtol(end + 1, &end, 10);
        else if (*end == '+')
            hi = __LONG_MAX__, end++;
        if (lo > 0 && hi >= lo && !*end) {
            __atomic_store_n(&fail_hi, hi, __ATOMIC_RELAXED);
            __atomic_store_n(&fail_lo, lo, __ATOMIC_RELEASE);
        } else {
            fprintf(stderr, "cllm-fault: CLLM_FAULT_ALLOC=%s is not N, N-M or N+; ignored\n", v);
        }
    }
    const char *tr = getenv("CLLM_FAULT_TRACE");
    trace = tr && *tr == '1';
    const char *r = getenv("CLLM_FAULT_REPORT");
    if (r && *r == '1') atexit(report);
    __atomic_store_n(&env_state, 2, __ATOMIC_RELEASE);
}

/* At start-up too, so CLLM_FAULT_REPORT works for a process that never allocates. */
__attribute__((constructor)) static void fault_init(void) {
    if (__atomic_load_n(&env_state, __ATOMIC_ACQUIRE) != 2) read_env();
}

/* Counts one allocation; true when it must fail. */
static bool should_fail(void) {
    if (exempt) return false;
    if (__atomic_load_n(&env_state, __ATOMIC_ACQUIRE) != 2) read_env();
    long c = __atomic_add_fetch(&n_allocs, 1, __ATOMIC_RELAXED);
    long lo = __atomic_load_n(&fail_lo, __ATOMIC_ACQUIRE);
    if (!lo || c < lo || c > __atomic_load_n(&fail_hi, __ATOMIC_RELAXED)) return false;
    __atomic_store_n(&fired, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&n_failed, 1, __ATOMIC_RELAXED);
    if (trace) { /* backtrace_symbols_fd writes without allocating through us */
        void *bt[24];
        fprintf(stderr, "cllm-fault: allocation %ld fails here:\n", c);
        backtrace_symbols_fd(bt, backtrace(bt, 24), 2);
    }
    errno = ENOMEM;
    return true;
}

void *__wrap_malloc(size_t n) {
    return should_fail() ? NULL : __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t m) {
    return should_fail() ? NULL : __real_calloc(n, m);
}
void *__wrap_realloc(void *p, size_t n) {
    return should_fail() ? NULL : __real_realloc(p, n); /* p stays valid, as on a real failure */
}
char *__wrap_strdup(const char *s) {
    return should_fail() ? NULL : __real_strdup(s);
}
char *__wrap_strndup(const char *s, size_t n) {
    return should_fail() ? NULL : __real_strndup(s, n);
}
void *__wrap_aligned_alloc(size_t a, size_t n) {
    return should_fail() ? NULL : __real_aligned_alloc(a, n);
}
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return should_fail() ? MAP_FAILED : __real_mmap(addr, len, prot, flags, fd, off);
}

bool cllm_fault_enabled(void) {
    return true;
}

void cllm_fault_arm(long n, long k) {
    __atomic_store_n(&fired, 0, __ATOMIC_RELEASE);
    if (n <= 0 || k <= 0) {
        __atomic_store_n(&fail_lo, 0, __ATOMIC_RELEASE);
        return;
    }
    if (__atomic_load_n(&env_state, __ATOMIC_ACQUIRE) != 2) read_env();
    long base = __atomic_load_n(&n_allocs, __ATOMIC_ACQUIRE);
    __atomic_store_n(&fail_hi, base + n + k - 1, __ATOMIC_RELAXED);
    __atomic_store_n(&fail_lo, base + n, __ATOMIC_RELEASE);
}

bool cllm_fault_fired(void) {
    return __atomic_load_n(&fired, __ATOMIC_ACQUIRE) != 0;
}

long cllm_fault_count(void) {
    return __atomic_load_n(&n_allocs, __ATOMIC_ACQUIRE);
}

void cllm_fault_exempt_thread(bool on) {
    exempt = on;
}

#else /* a normal build: nothing is wrapped */

bool cllm_fault_enabled(void) {
    return false;
}
void cllm_fault_arm(long n, long k) {
    (void)n, (void)k;
}
bool cllm_fault_fired(void) {
    return false;
}
long cllm_fault_count(void) {
    return 0;
}
void cllm_fault_exempt_thread(bool on) {
    (void)on;
}

#endif
