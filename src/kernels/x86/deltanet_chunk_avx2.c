/* AVX2/FMA chunked (WY) Gated DeltaNet form: the gdn_chunk entry of the avx2 and avx512 tiers
 * (kernels.c), the --gdn-prefill chunked option. The body is shared with the NEON tier
 * (kernels/deltanet_chunk_body_int.h over kernels/simd8_int.h). */
#define GDN_CHUNK_FN kern_gdn_chunk_avx2
#include "kernels/deltanet_chunk_body_int.h"
