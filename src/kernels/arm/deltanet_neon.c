/* NEON Gated DeltaNet recurrence step: the gdn_step entry of the neon tiers (kernels.c), the
 * AVX2 tier's lane operations (kernels/deltanet_step_body_int.h over kernels/simd8_int.h). */
#define GDN_STEP_FN      kern_gdn_step_neon
#define GDN_STEP_BF16_FN kern_gdn_step_bf16_neon
#include "kernels/deltanet_step_body_int.h"
