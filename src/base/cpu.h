/* Run-time CPU feature detection and the kernel tier chosen from it.
 * cllm_cpu_set_isa("ref"|"avx2"|"avx512"|"neon") forces a tier (the CLI's CLLM_ISA, for tests and
 * bug reports); forcing a tier the CPU lacks falls back to the best available one with a
 * warning. */
#ifndef CLLM_BASE_CPU_H
#define CLLM_BASE_CPU_H

#include <stdbool.h>
#include <stddef.h>

typedef struct cllm_cpu_features {
    int avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, neon;
    int dotprod; /* AArch64 SDOT/UDOT (HWCAP_ASIMDDP) */
} cllm_cpu_features;

typedef enum cllm_isa {
    CLLM_TIER_REF = 0, /* portable scalar C */
    CLLM_TIER_AVX2,    /* AVX2 + FMA + F16C */
    CLLM_TIER_AVX512,  /* AVX-512 F/BW/VL/DQ */
    CLLM_TIER_NEON,
} cllm_isa;

/* Asks for tier name (ref, avx2, avx512, neon) instead of the best one; call before the first
 * cllm_cpu_tier / cllm_kern (later calls have no effect). An unknown name or a tier the CPU lacks
 * is warned about when the tier is chosen. Not thread-safe: at start-up. */
void cllm_cpu_set_isa(const char *name);
const cllm_cpu_features *cllm_cpu_features_get(void);
cllm_isa cllm_cpu_tier(void);
const char *cllm_cpu_tier_name(cllm_isa t);
/* Runs fn with SIGILL caught: false when it raised SIGILL (then nothing after the faulting
 * instruction ran), true when it returned. Feature detection runs one instruction of every
 * extension CPUID claims through this and drops those that fault (some CPUs here advertise AMX
 * and fault on it). Restores the previous SIGILL disposition; not for concurrent use. */
bool cllm_cpu_insn_runs(void (*fn)(void));
/* Writes a space-separated list of detected features ("avx2 fma f16c"). */
void cllm_cpu_describe(char *buf, size_t cap);

#endif
