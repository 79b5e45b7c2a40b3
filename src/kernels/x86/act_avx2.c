/* AVX2/FMA silu_mul: the body is shared with the NEON tier (kernels/act_body_int.h). */
#define ACT_SILU_MUL_FN kern_silu_mul_avx2
#include "kernels/act_body_int.h"
