/* Kernel dispatch: one table per tier, chosen from cllm_cpu_tier() on first use. */
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
    .gdn_chunk = kern_gdn_chunk_ref,
    .matmul_q = kern_matmul_q_ref,
    .qact_prep = kern_qact_prep_ref,
    .matmul_q4_qact = kern_matmul_q4_qact_ref,
    .qact16_prep = kern_qact16_prep_ref,
    .matmul_q_qact16 = kern_matmul_q_qact16_ref,
    .gemm_f32 = kern_gemm_f32_ref,
    .matmul_kq = kern_matmul_kq_ref,
    .silu_mul = kern_silu_mul_ref,
};

#ifdef KERN_HAVE_X86
static const cllm_kern_ops avx2_ops = {
    .name = "avx2",
    .matmul_f32 = kern_matmul_f32_avx2,
    .matmul_f16 = kern_matmul_f16_avx2,
    .matmul_bf16 = kern_matmul_bf16_avx2,
    .gdn_step = kern_gdn_step_avx2,
    .gdn_chunk = kern_gdn_chunk_avx2,
    .matmul_q = kern_matmul_q_avx2,
    .qact_prep = kern_qact_prep_avx2,
    .matmul_q4_qact = kern_matmul_q4_qact_avx2,
    .qact16_prep = kern_qact16_prep_avx2,
    .matmul_q_qact16 = kern_matmul_q_qact16_avx2,
    .gemm_f32 = kern_gemm_f32_avx2,
    .matmul_kq = kern_matmul_kq_avx2,
    .silu_mul = kern_silu_mul_avx2,
};
/* AVX-512: the GPTQ int kernels, gemm_f32 and gdn_step; float matmuls, the chunked GDN and the
 * vector helpers stay AVX2.
 * The two tables differ only in the integer-activation kernels (VNNI's vpdpbusd / vpdpwssd or
 * vpmaddubsw / vpmaddwd; bitwise the same results). */
static const cllm_kern_ops avx512_ops = {
    .name = "avx512bw",
    .matmul_f32 = kern_matmul_f32_avx2,
    .matmul_f16 = kern_matmul_f16_avx2,
    .matmul_bf16 = kern_matmul_bf16_avx2,
    .gdn_step = kern_gdn_step_avx512,
    .gdn_chunk = kern_gdn_chunk_avx2,
    .matmul_q = kern_matmul_q_avx512,
    .qact_prep = kern_qact_prep_avx2,
    .matmul_q4_qact = kern_matmul_q4_qact_avx512,
    .qact16_prep = kern_qact16_prep_avx2,
    .matmul_q_qact16 = kern_matmul_q_qact16_avx512,
    .gemm_f32 = kern_gemm_f32_avx512,
    .matmul_kq = kern_matmul_kq_avx2,
    .silu_mul = kern_silu_mul_avx2,
};
static const cllm_kern_ops avx512_vnni_ops = {
    .name = "avx512",
    .matmul_f32 = kern_matmul_f32_avx2,
    .matmul_f16 = kern_matmul_f16_avx2,
    .matmul_bf16 = kern_matmul_bf16_avx2,
    .gdn_step = kern_gdn_step_avx512,
    .gdn_chunk = kern_gdn_chunk_avx2,
    .matmul_q = kern_matmul_q_avx512,
    .qact_prep = kern_qact_prep_avx2,
    .matmul_q4_qact = kern_matmul_q4_qact_avx512_vnni,
    .qact16_prep = kern_qact16_prep_avx2,
    .matmul_q_qact16 = kern_matmul_q_qact16_avx512_vnni,
    .gemm_f32 = kern_gemm_f32_avx512,
    .matmul_kq = kern_matmul_kq_avx2,
    .silu_mul = kern_silu_mul_avx2,
};
#endif

#ifdef KERN_HAVE_NEON
/* The two tables differ only in the W4A8 kernels (SDOT or vmull/vpadal; bitwise the same). */
static const cllm_kern_ops neon_ops = {
    .name = "neon",
    .matmul_f32 = kern_matmul_f32_neon,
    .matmul_f16 = kern_matmul_f16_neon,
    .matmul_bf16 = kern_matmul_bf16_neon,
    .gdn_step = kern_gdn_step_neon,
    .gdn_chunk = kern_gdn_chunk_neon,
    .matmul_q = kern_matmul_q_neon,
    .qact_prep = kern_qact_prep_neon,
    .matmul_q4_qact = kern_matmul_q4_qact_neon,
    .qact16_prep = kern_qact16_prep_neon,
    .matmul_q_qact16 = kern_matmul_q_qact16_neon,
    .gemm_f32 = kern_gemm_f32_ref,
    .matmul_kq = kern_matmul_kq_ref,
    .silu_mul = kern_silu_mul_neon,
};
static const cllm_kern_ops neon_dot_ops = {
    .name = "neon-dot",
    .matmul_f32 = kern_matmul_f32_neon,
    .matmul_f16 = kern_matmul_f16_neon,
    .matmul_bf16 = kern_matmul_bf16_neon,
    .gdn_step = kern_gdn_step_neon,
    .gdn_chunk = kern_gdn_chunk_neon,
    .matmul_q = kern_matmul_q_neon,
    .qact_prep = kern_qact_prep_neon,
    .matmul_q4_qact = kern_matmul_q4_qact_neon_dot,
    .qact16_prep = kern_qact16_prep_neon,
    .matmul_q_qact16 = kern_matmul_q_qact16_neon,
    .gemm_f32 = kern_gemm_f32_ref,
    .matmul_kq = kern_matmul_kq_ref,
    .silu_mul = kern_silu_mul_neon,
};
#endif

static const cllm_kern_ops *chosen;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void choose(void) {
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
    if (f->avx2 && f->fma && f->f16c) return &avx2_ops;
#endif
    return NULL;
}

const cllm_kern_ops *cllm_kern_avx512_bw(void) {
#ifdef KERN_HAVE_X86
    const cllm_cpu_features *f = cllm_cpu_features_get();
    if (f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq)
        return &avx512_ops;
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
    if (f->neon) return f->dotprod ? &neon_dot_ops : &neon_ops;
#endif
    return NULL;
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
