/* CPUID / HWCAP probing, done once; see cpu.h. */
#include "base/cpu.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20) /* asm/hwcap.h, Linux 4.15 */
#endif
#endif

static cllm_cpu_features feats;
static cllm_isa tier;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
static unsigned long long xgetbv0(void) {
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static void probe(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int osxsave = (c >> 27) & 1;
    unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
    int ymm_ok = (xcr0 & 6) == 6;                 /* OS saves XMM+YMM */
    int zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0; /* opmask + ZMM state */
    feats.fma = ymm_ok && ((c >> 12) & 1);
    feats.f16c = ymm_ok && ((c >> 29) & 1);
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        feats.avx2 = ymm_ok && ((b >> 5) & 1);
        feats.avx512f = zmm_ok && ((b >> 16) & 1);
        feats.avx512dq = zmm_ok && ((b >> 17) & 1);
        feats.avx512bw = zmm_ok && ((b >> 30) & 1);
        feats.avx512vl = zmm_ok && ((b >> 31) & 1);
        feats.avx512vnni = zmm_ok && ((c >> 11) & 1);
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) feats.avx512bf16 = zmm_ok && ((a >> 5) & 1);
}

/* One instruction of each extension the kernels use (GNU as takes the mnemonics whatever -m
 * flags the file has); only the scratch registers named in the clobbers are touched (k2 is
 * call-clobbered in the SysV ABI), and vzeroupper leaves no dirty upper state behind. */
static void run_avx2(void) {
    __asm__ volatile("vpaddd %%ymm0, %%ymm0, %%ymm0\n\tvzeroupper" ::: "xmm0");
}
static void run_fma(void) {
    __asm__ volatile("vfmadd231ps %%ymm0, %%ymm0, %%ymm0\n\tvzeroupper" ::: "xmm0");
}
static void run_f16c(void) {
    __asm__ volatile("vcvtph2ps %%xmm0, %%ymm0\n\tvzeroupper" ::: "xmm0");
}
static void run_avx512f(void) {
    __asm__ volatile("vpaddd %%zmm0, %%zmm0, %%zmm0\n\tvzeroupper" ::: "xmm0");
}
static void run_avx512bw(void) {
    __asm__ volatile("vpaddw %%zmm0, %%zmm0, %%zmm0\n\tkmovq %%k1, %%k2\n\tvzeroupper" ::: "xmm0");
}
static void run_avx512vl(void) {
    __asm__ volatile("vpandq %%ymm0, %%ymm0, %%ymm0\n\tvzeroupper" ::: "xmm0");
}
static void run_avx512dq(void) {
    __asm__ volatile("vpmullq %%zmm0, %%zmm0, %%zmm0\n\tvzeroupper" ::: "xmm0");
}
static void run_avx512vnni(void) {
    __asm__ volatile(
        "vpdpwssd %%zmm0, %%zmm0, %%zmm1\n\tvpdpbusd %%zmm0, %%zmm0, %%zmm1\n\tvzeroupper" ::
            : "xmm1");
}
static void run_avx512bf16(void) {
    __asm__ volatile("vdpbf16ps %%zmm0, %%zmm0, %%zmm1\n\tvzeroupper" ::: "xmm1");
}

/* CPUID and XCR0 say what the CPU and the OS claim; some machines here advertise extensions
 * (AMX among them) whose instructions then fault. So each claimed extension the kernels would use
 * runs one instruction first, and one that raises SIGILL is dropped with a warning. */
static void prove(void) {
    struct {
        int *on;
        void (*fn)(void);
        const char *name;
        bool evex; /* an EVEX encoding beyond avx512f: decodes only where avx512f ran */
    } list[] = {{&feats.avx2, run_avx2, "avx2", false},
                {&feats.fma, run_fma, "fma", false},
                {&feats.f16c, run_f16c, "f16c", false},
                {&feats.avx512f, run_avx512f, "avx512f", false},
                {&feats.avx512bw, run_avx512bw, "avx512bw", true},
                {&feats.avx512vl, run_avx512vl, "avx512vl", true},
                {&feats.avx512dq, run_avx512dq, "avx512dq", true},
                {&feats.avx512vnni, run_avx512vnni, "avx512vnni", true},
                {&feats.avx512bf16, run_avx512bf16, "avx512bf16", true}};
    for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++) {
        if (!*list[i].on || (list[i].evex && !feats.avx512f)) {
            *list[i].on = 0;
            continue;
        }
        if (!cllm_cpu_insn_runs(list[i].fn)) {
            LOG_WARN("cpu: CPUID reports %s but its instructions fault here; not used",
                     list[i].name);
            *list[i].on = 0;
        }
    }
}
#else
static void probe(void) {
#if defined(__aarch64__)
    feats.neon = 1; /* Advanced SIMD is mandatory on AArch64 */
#if defined(__linux__)
    feats.dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
#endif
}
static void prove(void) {}
#endif

#if defined(__unix__) || defined(__APPLE__)
static sigjmp_buf ill_jmp;

static void on_ill(int sig) {
    (void)sig;
    siglongjmp(ill_jmp, 1);
}

bool cllm_cpu_insn_runs(void (*fn)(void)) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_ill;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGILL, &sa, &old) != 0) return false; /* cannot guard it: do not run it */
    volatile bool ok = false;
    if (!sigsetjmp(ill_jmp, 1)) {
        fn();
        ok = true;
    }
    sigaction(SIGILL, &old, NULL);
    return ok;
}
#else
bool cllm_cpu_insn_runs(void (*fn)(void)) {
    fn();
    return true;
}
#endif

static cllm_isa best_tier(void) {
    if (feats.avx512f && feats.avx512bw && feats.avx512vl && feats.avx512dq && feats.fma &&
        feats.f16c)
        return CLLM_TIER_AVX512;
    if (feats.avx2 && feats.fma && feats.f16c) return CLLM_TIER_AVX2;
    if (feats.neon) return CLLM_TIER_NEON;
    return CLLM_TIER_REF;
}

static char want_isa[16]; /* cllm_cpu_set_isa's, "" for none */

void cllm_cpu_set_isa(const char *name) {
    snprintf(want_isa, sizeof(want_isa), "%s", name ? name : "");
}

static void init(void) {
    probe();
    prove();
    tier = best_tier();
    const char *env = want_isa;
    if (!*env) return;
    cllm_isa want = tier;
    if (!strcmp(env, "ref"))
        want = CLLM_TIER_REF;
    else if (!strcmp(env, "avx2"))
        want = CLLM_TIER_AVX2;
    else if (!strcmp(env, "avx512"))
        want = CLLM_TIER_AVX512;
    else if (!strcmp(env, "neon"))
        want = CLLM_TIER_NEON;
    else
        LOG_WARN("CLLM_ISA=%s not recognised (ref|avx2|avx512|neon); using %s", env,
                 cllm_cpu_tier_name(tier));
    /* A forced tier may only go down to something the CPU supports. */
    int ok = want == CLLM_TIER_REF || (want == CLLM_TIER_AVX2 && tier == CLLM_TIER_AVX512) ||
             want == tier;
    if (ok)
        tier = want;
    else
        LOG_WARN("CLLM_ISA=%s not supported by this CPU; using %s", env, cllm_cpu_tier_name(tier));
}

const cllm_cpu_features *cllm_cpu_features_get(void) {
    pthread_once(&once, init);
    return &feats;
}

cllm_isa cllm_cpu_tier(void) {
    pthread_once(&once, init);
    return tier;
}

const char *cllm_cpu_tier_name(cllm_isa t) {
    switch (t) {
    case CLLM_TIER_REF:
        return "ref";
    case CLLM_TIER_AVX2:
        return "avx2";
    case CLLM_TIER_AVX512:
        return "avx512";
    case CLLM_TIER_NEON:
        return "neon";
    }
    return "?";
}

void cllm_cpu_describe(char *buf, size_t cap) {
    const cllm_cpu_features *f = cllm_cpu_features_get();
    struct {
        int on;
        const char *name;
    } list[] = {{f->avx2, "avx2"},
                {f->fma, "fma"},
                {f->f16c, "f16c"},
                {f->avx512f, "avx512f"},
                {f->avx512bw, "avx512bw"},
                {f->avx512vl, "avx512vl"},
                {f->avx512dq, "avx512dq"},
                {f->avx512vnni, "avx512vnni"},
                {f->avx512bf16, "avx512bf16"},
                {f->neon, "neon"},
                {f->dotprod, "dotprod"}};
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(list) / sizeof(list[0]); i++)
        if (list[i].on && o < cap)
            o += (size_t)snprintf(buf + o, cap - o, "%s%s", o ? " " : "", list[i].name);
    if (!o) snprintf(buf, cap, "none (scalar)");
}
