/* NEON silu_mul: the AVX2 tier's lane operations (kernels/act_body_int.h). */
#define ACT_SILU_MUL_FN kern_silu_mul_neon
#include "kernels/act_body_int.h"
