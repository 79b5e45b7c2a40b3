/* The vision tower of a Qwen3.5 / Qwen3-VL checkpoint (docs/model.md "Vision tower"): a ViT over
 * 16x16x2 patches with learned, interpolated position embeddings and 2-D rotary attention, then
 * the 2x2 spatial merger that projects each group of four patches to one text-model embedding.
 *
 * Request path: the server's image preprocessing (src/image/) gives patches in the processor's
 * order -> the engine calls cllm_vision_encode on its forward context -> the rows replace the
 * image-pad tokens' embeddings in the text forward (model/forward.c).
 *
 * The tower's weights are bound by cllm_model_load when the config has a vision_config and the
 * checkpoint carries the model.visual.* tensors (model/vision_bind.c); a text-only checkpoint
 * of a multimodal config loads without them (cllm_model_has_vision false). */
#ifndef CLLM_MODEL_VISION_H
#define CLLM_MODEL_VISION_H

#include <stdbool.h>

#include "base/status.h"
#include "model/forward.h"

/* Caps on one call (what an image may cost before any work): patches per call and per side.
 * 65536 patches is the HF Qwen3-VL processor's largest image (16,777,216 pixels of 16x16
 * patches); a 1344x1344 image is 84 x 84 = 7056. The side cap leaves room for long thin pages. */
#define CLLM_VISION_MAX_PATCHES 65536
#define CLLM_VISION_MAX_SIDE    1024

/* True when the model's vision tower is bound. */
bool cllm_model_has_vision(const cllm_model *m);

/* Text tokens an image of grid (t, h, w) patches becomes: t*h*w / merge^2 (0 for a model
 * without a tower or a grid it would refuse). */
int cllm_vision_n_tokens(const cllm_model *m, int grid_t, int grid_h, int grid_w);

/* Encodes one image (or video clip) of grid_t x grid_h x grid_w patches.
 * pixels: [t*h*w][in_channels * temporal_patch * patch * patch] floats, normalised, each patch
 * flattened (channel, temporal, row, column), patches in the processor's order (t, h/merge,
 * w/merge, merge row, merge column): four consecutive patches form one merged token.
 * out: [n_tokens][out_hidden_size] (out_hidden_size == the text hidden_size, checked at load),
 * tokens in the same order (t, h/merge, w/merge).
 * Errors before any work: EINVAL for a model without a tower, a grid that is not positive or not
 * divisible by spatial_merge_size, one past CLLM_VISION_MAX_PATCHES / CLLM_VISION_MAX_SIDE or
 * whose merged side would pass max_position_embeddings; then only ENOMEM (scratch) can fail.
 * Threads: the ctx's pool; one call at a time per ctx (it shares the ctx's matmul queue with
 * cllm_forward). Deterministic: the same bits whatever the thread count. */
cllm_status cllm_vision_encode(cllm_fwd_ctx *c, const float *pixels, int grid_t, int grid_h,
                               int grid_w, float *out, cllm_error *err);

/* The same encode in steps, so a server can spread one image over several engine steps (the
 * decode rows of a step wait for the units it runs, not for the whole image). A job holds the
 * tower's activations between steps (about N * (6 D + max(F, D)) floats for N patches); pixels
 * must stay valid until the job is done. start: the checks and allocations of
 * cllm_vision_encode (its only ENOMEM point besides the matmul queue), no work. run: up to
 * n_units more units (the patch embedding, each block, the merger: depth + 2 in all; units()
 * says how many are left) on c, a context of the same model (one call at a time per context, as
 * cllm_forward); *done once out is written. The bits equal cllm_vision_encode's however the
 * units are split. */
typedef struct cllm_vision_job cllm_vision_job;
cllm_status cllm_vision_job_start(cllm_fwd_ctx *c, const float *pixels, int grid_t, int grid_h,
                                  int grid_w, cllm_vision_job **out, cllm_error *err);
int cllm_vision_job_units(const cllm_vision_job *j);
cllm_status cllm_vision_job_run(cllm_fwd_ctx *c, cllm_vision_job *j, int n_units, float *out,
                                bool *done, cllm_error *err);
void cllm_vision_job_free(cllm_vision_job *j);

#endif
