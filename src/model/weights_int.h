/* Private to the weight files (model/weights.c, weights_tp.c): what they share besides the
 * forward pass's own fwd_int.h. */
#ifndef CLLM_MODEL_WEIGHTS_INT_H
#define CLLM_MODEL_WEIGHTS_INT_H

#include "model/fwd_int.h"

/* Called once per matrix by fwd_layer_mats: expert = e for routed expert e's gate/up/down, -1
 * for every other matrix. */
typedef void (*fwd_mat_fn)(void *ctx, const fwd_wt *w, int expert);

/* The matrices of decoder layer L, for the code that treats them all alike (the panel repack,
 * the tensor-parallel prefault, the bytes a decoded token reads): fn runs on each bound one
 * (data != NULL; a matrix of the other layer type, a dense layer's router or an expert another
 * rank owns is not bound) in one fixed order: the matrix rows of every layer block of
 * model/tensor_table.c in table order (attention q/k/v/o, GDN in_proj_qkv/z/b/a and out_proj,
 * router, shared expert gate/up/down, shared expert gate, dense MLP gate/up/down), then the
 * n_experts routed experts' gate/up/down. A matrix row added to a block's table is walked with
 * no edit here. The pointers are into L (a caller that owns L writable may write through them). */
void fwd_layer_mats(const fwd_layer *L, int n_experts, fwd_mat_fn fn, void *ctx);

#endif
