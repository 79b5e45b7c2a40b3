/* AVX2/FMA/F16C float matmul: the body is shared with the NEON tier
 * (kernels/matmul_f_body_int.h over kernels/simd8_int.h). */
#define MATMUL_SUF       avx2
#define MATMUL_TAIL_ROWS 4
#include "kernels/matmul_f_body_int.h"
