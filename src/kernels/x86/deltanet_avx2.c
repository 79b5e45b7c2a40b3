/* AVX2/FMA Gated DeltaNet recurrence step: the gdn_step entry of the avx2 and avx512 tiers
 * (kernels.c). The body is shared with the NEON tier (kernels/deltanet_step_body_int.h over
 * kernels/simd8_int.h). */
#define GDN_STEP_FN      kern_gdn_step_avx2
#define GDN_STEP_BF16_FN kern_gdn_step_bf16_avx2
#include "kernels/deltanet_step_body_int.h"
