/* NEON chunked (WY) Gated DeltaNet form: the gdn_chunk entry of the neon tier (kernels.c), the
 * --gdn-prefill chunked prefill option. The body is shared with the AVX2 tier
 * (kernels/deltanet_chunk_body_int.h over kernels/simd8_int.h: each 8-lane AVX2 register is a pair
 * of 4-lane NEON ones doing the same lane operations); expf comes from the platform's libm. */
#define GDN_CHUNK_FN kern_gdn_chunk_neon
#include "kernels/deltanet_chunk_body_int.h"
