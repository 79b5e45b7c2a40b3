/* Kernel dispatch: one table per tier, chosen from cllm_cpu_tier() on first use (cllm_kern), and
 * the tier tables for tests (cllm_kern_avx2 ..., cllm_kern_tiers). */
#include "kernels/kernels.h"

#include <pthread.h>

#include "base/cpu.h"
#include "kernels/kern_int.h"

static const cllm_kern_ops ref_ops = {
    .name = "ref",
    .matmul_f32 = kern_matmul_f32_ref,
    .matmul_f16 = kern_matmul_f16_ref,
    .matmul_bf16 = kern_matmul_bf16_ref,
    .gdn_step = kern_gdn_step_ref,
    .gdn_step_bf16 = kern_gdn_step_bf16_ref,
    .gdn_chunk = kern_gdn_chunk_ref,
    .matmul_q = kern_matmul_q_ref,
    .qact_prep = kern_qact_prep_ref,
    .matmul_q4_qact = kern_matmul_q4_qact_ref,
    .matmul_q2_qact = kern_matmul_q2_qact_ref,
    .qact16_prep = kern_qact16_prep_ref,
    .matmul_q_qact16 = kern_matmul_q_qact16_ref,
    .gemm_f32 = kern_gemm_f32_ref,
    .matmul_kq = kern_matmul_kq_ref,
    .silu_mul = kern_silu_mul_ref,
};

/* Every other table is a copy of the table below it with the entries its tier replaces: ref ->
 * avx2 -> avx512bw -> avx512 (VNNI) and ref -> neon -> neon-dot. A kernel added to a base reaches
 * each tier above it that does not override it (an x86 table never reaches a NEON one: the NEON
 * chain starts at ref). Filled once, at first use of any of them (fill_tables). */
#ifdef KERN_HAVE_X86
static cllm_kern_ops avx2_ops, avx512_bw_ops, avx512_vnni_ops;

/* ref + every kernel in AVX2 (+ FMA, F16C) */
static void fill_avx2(cllm_kern_ops *o) {
    *o = ref_ops;
    o->name = "avx2";
    o->matmul_f32 = kern_matmul_f32_avx2;
    o->matmul_f16 = kern_matmul_f16_avx2;
    o->matmul_bf16 = kern_matmul_bf16_avx2;
    o->gdn_step = kern_gdn_step_avx2;
    o->gdn_step_bf16 = kern_gdn_step_bf16_avx2;
    o->gdn_chunk = kern_gdn_chunk_avx2;
    o->matmul_q = kern_matmul_q_avx2;
    o->qact_prep = kern_qact_prep_avx2;
    o->matmul_q4_qact = kern_matmul_q4_qact_avx2;
    o->matmul_q2_qact = kern_matmul_q2_qact_avx2;
    o->qact16_prep = kern_qact16_prep_avx2;
    o->matmul_q_qact16 = kern_matmul_q_qact16_avx2;
    o->gemm_f32 = kern_gemm_f32_avx2;
    o->matmul_kq = kern_matmul_kq_avx2;
    o->silu_mul = kern_silu_mul_avx2;
}

/* avx2 + AVX-512 F/BW/VL/DQ for the GPTQ int kernels, gemm_f32, gdn_step and panel-form
 * matmul_kq; float matmuls, the chunked GDN, the activation preps and silu_mul stay AVX2. */
static void fill_avx512_bw(cllm_kern_ops *o) {
    *o = avx2_ops;
    o->name = "avx512bw";
    o->gdn_step = kern_gdn_step_avx512;
    o->gdn_step_bf16 = kern_gdn_step_bf16_avx512;
    o->matmul_q = kern_matmul_q_avx512;
    o->matmul_q4_qact = kern_matmul_q4_qact_avx512;
    o->matmul_q2_qact = kern_matmul_q2_qact_avx512;
    o->matmul_q_qact16 = kern_matmul_q_qact16_avx512;
    o->gemm_f32 = kern_gemm_f32_avx512;
    o->matmul_kq = kern_matmul_kq_avx512;
}

/* avx512bw with VNNI's vpdpbusd / vpdpwssd for the integer-activation kernels instead of
 * vpmaddubsw / vpmaddwd (bitwise the same results). */
static void fill_avx512_vnni(cllm_kern_ops *o) {
    *o = avx512_bw_ops;
    o->name = "avx512";
    o->matmul_q4_qact = kern_matmul_q4_qact_avx512_vnni;
    o->matmul_q2_qact = kern_matmul_q2_qact_avx512_vnni;
    o->matmul_q_qact16 = kern_matmul_q_qact16_avx512_vnni;
    o->matmul_kq = kern_matmul_kq_avx512_vnni;
}
#endif

#ifdef KERN_HAVE_NEON
static cllm_kern_ops neon_ops, neon_dot_ops;

/* ref + baseline ARMv8 Advanced SIMD; gemm_f32 and matmul_kq stay ref. */
static void fill_neon(cllm_kern_ops *o) {
    *o = ref_ops;
    o->name = "neon";
    o->matmul_f32 = kern_matmul_f32_neon;
    o->matmul_f16 = kern_matmul_f16_neon;
    o->matmul_bf16 = kern_matmul_bf16_neon;
    o->gdn_step = kern_gdn_step_neon;
    o->gdn_step_bf16 = kern_gdn_step_bf16_neon;
    o->gdn_chunk = kern_gdn_chunk_neon;
    o->matmul_q = kern_matmul_q_neon;
    o->qact_prep = kern_qact_prep_neon;
    o->matmul_q4_qact = kern_matmul_q4_qact_neon;
    o->matmul_q2_qact = kern_matmul_q2_qact_neon;
    o->qact16_prep = kern_qact16_prep_neon;
    o->matmul_q_qact16 = kern_matmul_q_qact16_neon;
    o->silu_mul = kern_silu_mul_neon;
}

/* neon with the dot-product (SDOT) W4A8 kernel instead of vmull/vpadal (bitwise the same). */
static void fill_neon_dot(cllm_kern_ops *o) {
    *o = neon_ops;
    o->name = "neon-dot";
    o->matmul_q4_qact = kern_matmul_q4_qact_neon_dot;
    o->matmul_q2_qact = kern_matmul_q2_qact_neon_dot;
}
#endif

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* Each base before the tables copied from it. */
static void fill_tables(void) {
#ifdef KERN_HAVE_X86
    fill_avx2(&avx2_ops);
    fill_avx512_bw(&avx512_bw_ops);
    fill_avx512_vnni(&avx512_vnni_ops);
#endif
#ifdef KERN_HAVE_NEON
    fill_neon(&neon_ops);
    fill_neon_dot(&neon_dot_ops);
#endif
}

static const cllm_kern_ops *chosen;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void choose(void) {
    pthread_once(&tables_once, fill_tables);
    chosen = &ref_ops;
#ifdef KERN_HAVE_X86
    cllm_isa t = cllm_cpu_tier();
    if (t == CLLM_TIER_AVX2 || t == CLLM_TIER_AVX512) chosen = &avx2_ops;
    if (t == CLLM_TIER_AVX512 && cllm_kern_avx512()) chosen = cllm_kern_avx512();
#endif
#ifdef KERN_HAVE_NEON
    if (cllm_cpu_tier() == CLLM_TIER_NEON) chosen = cllm_kern_neon();
#endif
}

const cllm_kern_ops *cllm_kern(void) {
    pthread_once(&once, choose);
    return chosen;
}

const cllm_kern_ops *cllm_kern_ref(void) {
    return &ref_ops;
}

const cllm_kern_ops *cllm_kern_avx2(void) {
#ifdef KERN_HAVE_X86
    const cllm_cpu_features *f = cllm_cpu_features_get();
    pthread_once(&tables_once, fill_tables);
    if (f->avx2 && f->fma && f->f16c) return &avx2_ops;
#endif
    return NULL;
}

const cllm_kern_ops *cllm_kern_avx512_bw(void) {
#ifdef KERN_HAVE_X86
    const cllm_cpu_features *f = cllm_cpu_features_get();
    if (cllm_kern_avx2() && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq)
        return &avx512_bw_ops;
#endif
    return NULL;
}

const cllm_kern_ops *cllm_kern_avx512(void) {
#ifdef KERN_HAVE_X86
    if (cllm_kern_avx512_bw() && cllm_cpu_features_get()->avx512vnni) return &avx512_vnni_ops;
#endif
    return cllm_kern_avx512_bw();
}

const cllm_kern_ops *cllm_kern_neon(void) {
#ifdef KERN_HAVE_NEON
    const cllm_cpu_features *f = cllm_cpu_features_get();
    pthread_once(&tables_once, fill_tables);
    if (f->neon) return f->dotprod ? &neon_dot_ops : &neon_ops;
#endif
    return NULL;
}

int cllm_kern_tiers(const cllm_kern_ops **out, int max) {
    const cllm_kern_ops *all[CLLM_KERN_TIERS_MAX];
    int n = 0;
#ifdef KERN_HAVE_X86
    if (cllm_kern_avx2()) all[n++] = cllm_kern_avx2();
    if (cllm_kern_avx512_bw()) all[n++] = cllm_kern_avx512_bw();
    if (cllm_kern_avx512() != cllm_kern_avx512_bw()) all[n++] = cllm_kern_avx512(); /* VNNI */
#endif
#ifdef KERN_HAVE_NEON
    if (cllm_kern_neon()) all[n++] = &neon_ops; /* a dot-product CPU runs the plain table too */
    if (cllm_kern_neon() == &neon_dot_ops) all[n++] = &neon_dot_ops;
#endif
    int k = 0;
    for (; k < n && k < max; k++) out[k] = all[k];
    return k;
}

cllm_matmul_fn cllm_kern_matmul(const cllm_kern_ops *k, cllm_dtype dt) {
    switch (dt) {
    case CLLM_DT_F32:
        return k->matmul_f32;
    case CLLM_DT_F16:
        return k->matmul_f16;
    case CLLM_DT_BF16:
        return k->matmul_bf16;
    default:
        return NULL;
    }
}
