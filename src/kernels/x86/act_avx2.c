/* AVX2/FMA silu_mul and dot_rows: bodies shared with the NEON tier (kernels/act_body.h,
 * kernels/dot_rows_body.h). */
#define ACT_SILU_MUL_FN kern_silu_mul_avx2
#include "kernels/act_body.h"
#define DOT_ROWS_FN kern_dot_rows_avx2
#include "kernels/dot_rows_body.h"
