/* Minimal test harness: CHECK records a failure and keeps going; main returns test_report(). */
#ifndef CLLM_TEST_H
#define CLLM_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_failures;
static int test_checks;

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

static inline int test_report(const char *name) {
    fprintf(stderr, "%s: %d checks, %d failures\n", name, test_checks, test_failures);
    return test_failures ? 1 : (test_checks ? 0 : 1); /* a test that checks nothing fails */
}

#endif
