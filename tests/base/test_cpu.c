/* The start-up proof of CPU features (base/cpu.c): cllm_cpu_insn_runs catches an instruction that
 * faults (ud2, the defined invalid opcode) and reports one that runs, more than once, restoring
 * the SIGILL disposition it found; and every extension the tables would use survived its proof
 * here, so the chosen tier's kernels run. */
#include <signal.h>
#include <string.h>

#include "base/cpu.h"
#include "kernels/kernels.h"
#include "test.h"

static int ran_after;

static void nop_fn(void) {
    __asm__ volatile("" ::: "memory");
}

#if defined(__x86_64__) || defined(__i386__)
static void bad_fn(void) {
    __asm__ volatile("ud2" ::: "memory");
    ran_after = 1; /* never reached: the guard jumps back from the handler */
}
#elif defined(__aarch64__)
static void bad_fn(void) {
    __asm__ volatile(".inst 0x00000000" ::: "memory"); /* permanently undefined (UDF #0) */
    ran_after = 1;
}
#endif

static void mark(int sig) {
    (void)sig;
}

int main(void) {
    struct sigaction mine, seen;
    memset(&mine, 0, sizeof(mine));
    mine.sa_handler = mark;
    sigemptyset(&mine.sa_mask);
    CHECK(sigaction(SIGILL, &mine, NULL) == 0);
    CHECK(cllm_cpu_insn_runs(nop_fn));
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
    for (int i = 0; i < 3; i++) CHECK_MSG(!cllm_cpu_insn_runs(bad_fn), "fault %d not caught", i);
    CHECK(ran_after == 0);
    CHECK(cllm_cpu_insn_runs(nop_fn)); /* the guard still works after a fault */
#endif
    CHECK(sigaction(SIGILL, NULL, &seen) == 0);
    CHECK_MSG(seen.sa_handler == mark, "the previous SIGILL handler was not restored");
    /* the features left after the proof pick a tier whose table is there and runs */
    const cllm_cpu_features *f = cllm_cpu_features_get();
    CHECK(!f->avx512vnni || f->avx512f);
    CHECK(cllm_kern() != NULL);
    char buf[256];
    cllm_cpu_describe(buf, sizeof(buf));
    fprintf(stderr, "test_cpu: tier %s, features: %s\n", cllm_cpu_tier_name(cllm_cpu_tier()), buf);
    return test_report("test_cpu");
}
