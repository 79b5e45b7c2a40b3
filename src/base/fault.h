/* Allocation-failure injection for tests (the idea of SQLite's and curl's malloc tests).
 *
 * A build configured with -DCLLM_FAULT_INJECT=ON links every binary with
 * -Wl,--wrap=malloc,calloc,realloc,strdup,strndup,aligned_alloc,mmap, so each of those calls made
 * from cllm's own code (not from inside libc, jansson or libmicrohttpd) goes through fault.c,
 * which counts it and can make it fail (NULL, or MAP_FAILED with ENOMEM). No call site changes.
 *
 * Driven two ways:
 *  - environment, for whole processes (tests/base/fault_cli.sh walks `cllm` commands):
 *      CLLM_FAULT_ALLOC=N      fail the N-th counted allocation (1-based)
 *      CLLM_FAULT_ALLOC=N-M    fail every allocation from the N-th to the M-th
 *      CLLM_FAULT_ALLOC=N+     fail every allocation from the N-th on
 *      CLLM_FAULT_REPORT=1     at exit, print "cllm-fault: A allocations, F failed" on stderr
 *      CLLM_FAULT_TRACE=1      print a backtrace of each failed allocation (finding the site)
 *  - in-process, for tests that walk one operation (tests/server/test_fault_walk.c):
 *      cllm_fault_arm(n, k) fails allocations n..n+k-1 counted from now; cllm_fault_fired()
 *      says whether one failed; threads marked exempt neither count nor fail (the test's client).
 *
 * In a normal build the functions below exist, do nothing, and cllm_fault_enabled() is false.
 * Thread-safe (atomics); the counters are process-wide. */
#ifndef CLLM_BASE_FAULT_H
#define CLLM_BASE_FAULT_H

#include <stdbool.h>

/* True when this binary was linked with the wrappers. */
bool cllm_fault_enabled(void);

/* Fails the n-th .. (n+k-1)-th counted allocations after this call (n >= 1, k >= 1);
 * n <= 0 disarms. Clears the fired flag. */
void cllm_fault_arm(long n, long k);

/* Whether an allocation failed since the last cllm_fault_arm. */
bool cllm_fault_fired(void);

/* Counted allocations since the process started. */
long cllm_fault_count(void);

/* The calling thread's allocations are not counted and never fail (on = true). */
void cllm_fault_exempt_thread(bool on);

#endif
