/* NEON float matmul: the AVX2 tier's lane operations
 * (kernels/matmul_f_body_int.h over kernels/simd8_int.h); 2-row token tails (see there). */
#define MATMUL_SUF       neon
#define MATMUL_TAIL_ROWS 2
#include "kernels/matmul_f_body_int.h"
