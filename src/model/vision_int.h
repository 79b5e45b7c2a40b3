/* Private to the vision tower (model/vision.c, vision_bind.c) and the loader that calls its
 * binder (weights.c): the bound weights of the tower. */
#ifndef CLLM_MODEL_VISION_INT_H
#define CLLM_MODEL_VISION_INT_H

#include "model/fwd_int.h"

typedef struct fwd_vblock {
    float *n1_w, *n1_b, *n2_w, *n2_b; /* [D] LayerNorm weight / bias */
    fwd_wt qkv, proj, fc1, fc2;       /* [3D][D], [D][D], [F][D], [D][F] */
    float *qkv_b, *proj_b, *fc1_b, *fc2_b;
} fwd_vblock;

typedef struct fwd_vision {
    int depth, D, heads, hd, F;
    int patch, tpatch, in_ch, patch_dim; /* patch_dim = in_ch * tpatch * patch * patch */
    int merge, out;                      /* spatial merge; out_hidden_size */
    int side;                            /* the learned position grid is side x side */
    fwd_wt patch_w;                      /* [D][patch_dim] (the Conv3d kernel flattened) */
    float *patch_b;                      /* [D] */
    float *pos;                          /* [side * side][D], fp32 copy */
    fwd_vblock *blocks;                  /* [depth] */
    float *mn_w, *mn_b;                  /* merger LayerNorm [D] */
    fwd_wt mfc1, mfc2;                   /* [4D][4D], [out][4D] (merge 2) */
    float *mfc1_b, *mfc2_b;
} fwd_vision;

/* The loader's binder (weights.c): matrices bound in place (16-bit, GPTQ or GGUF blocks as the
 * text weights), vectors as fp32 copies. On failure they return an empty result and the binder
 * keeps the first error (fwd_bind_status). */
typedef struct binder binder;
fwd_wt fwd_bind_mat(binder *b, int rows, int cols, const char *name);
float *fwd_bind_vec(binder *b, size_t n, const char *name);
cllm_status fwd_bind_status(const binder *b);

/* Binds the tower's tensors (model/vision_bind.c) into m->vision; err names the first missing or
 * mis-shaped tensor, or an out_hidden_size that is not the text hidden_size. */
cllm_status fwd_vision_bind(cllm_model *m, binder *b, cllm_error *err);

#endif
