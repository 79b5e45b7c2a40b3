/* NEON silu_mul and dot_rows: the AVX2 tier's lane operations (kernels/act_body.h,
 * kernels/dot_rows_body.h). */
#define ACT_SILU_MUL_FN kern_silu_mul_neon
#include "kernels/act_body.h"
#define DOT_ROWS_FN kern_dot_rows_neon
#include "kernels/dot_rows_body.h"
