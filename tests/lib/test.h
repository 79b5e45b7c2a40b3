/* Minimal test harness: CHECK records a failure and keeps going; main returns test_report(). */
#ifndef CLLM_TEST_H
#define CLLM_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int test_failures;
static int test_checks;

/* The environment ctest gives every test (CMakeLists.txt), with the defaults for a run by hand
 * from the repository root: CLLM_SRC (the source tree), CLLM_TMP (scratch files). */
static inline const char *test_src(void) {
    const char *s = getenv("CLLM_SRC");
    return s ? s : ".";
}
static inline const char *test_tmp(void) {
    const char *s = getenv("CLLM_TMP");
    return s ? s : "/tmp";
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        test_checks++;                                                                             \
        if (!(cond)) {                                                                             \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                       \
    do {                                                                                           \
        test_checks++;                                                                             \
        if (!(cond)) {                                                                             \
            test_failures++;                                                                       \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

/* xorshift64 test data: test_frand() uniform in [-1, 1), test_irand(n) in [0, n). Per test
 * program, fixed seed, so failures reproduce. */
static uint64_t test_rng = 88172645463325252ull;
static inline float test_frand(void) {
    test_rng ^= test_rng << 13, test_rng ^= test_rng >> 7, test_rng ^= test_rng << 17;
    return (float)((test_rng >> 11) * 0x1.0p-53) * 2.0f - 1.0f;
}
static inline int test_irand(int n) {
    test_rng ^= test_rng << 13, test_rng ^= test_rng >> 7, test_rng ^= test_rng << 17;
    return (int)(test_rng % (uint64_t)n);
}

static inline int test_report(const char *name) {
    fprintf(stderr, "%s: %d checks, %d failures\n", name, test_checks, test_failures);
    return test_failures ? 1 : (test_checks ? 0 : 1); /* a test that checks nothing fails */
}

#endif
