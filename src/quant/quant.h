/* The quantizer's primitives (`cllm quantize`, GPTQ): an owned matrix in the GPTQ v1 layout
 * (model/qformat.h describes the layout and reads it at load time), the scale and zero of a group
 * (symmetric or asymmetric), the code of one weight, round-to-nearest over rows. */
#ifndef CLLM_QUANT_QUANT_H
#define CLLM_QUANT_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "kernels/kernels.h"

/* An owned quantized matrix (same layout as cllm_qweight). */
typedef struct cllm_qbuf {
    int32_t *qweight, *qzeros, *g_idx;
    uint16_t *scales;
    int bits, group, K, N;
    bool asym, scale_bf16; /* set after cllm_qbuf_alloc, before quantizing */
} cllm_qbuf;

/* Checks bits/group/K/N (clear message naming `what` on failure) and allocates. */
cllm_status cllm_qbuf_alloc(cllm_qbuf *q, int bits, int group, int K, int N, const char *what,
                            cllm_error *err);
void cllm_qbuf_free(cllm_qbuf *q);
cllm_qweight cllm_qbuf_view(const cllm_qbuf *q);

/* Round-to-nearest symmetric quantization of rows [n0, n1) of W (row-major [n1-n0][ldw], rows
 * of the logical [N][K] matrix) into q. Scales are rounded to fp16 before the codes are chosen. */
void cllm_quant_rtn_rows(const float *W, size_t ldw, int n0, int n1, cllm_qbuf *q);
/* Symmetric scale of a group from its absolute maximum: sets scales/qzeros of (group g, output
 * n) and returns the fp16-rounded scale the codes must use. */
float cllm_quant_set_group(cllm_qbuf *q, int g, int n, float amax);
/* Scale and zero of a group from its range [wmin, wmax]: symmetric (from max(|wmin|, |wmax|))
 * unless q->asym; returns the rounded (fp16 or bf16) scale the codes must use. */
float cllm_quant_set_group_mm(cllm_qbuf *q, int g, int n, float wmin, float wmax);
/* Code for w at (n, k) with scale s and the group's stored zero (round, clamp); stores it;
 * returns the dequantized value. */
float cllm_quant_set_code(cllm_qbuf *q, int n, int k, float w, float s);
/* Sets g_idx to k / group. */
void cllm_quant_fill_gidx(cllm_qbuf *q);

#endif
