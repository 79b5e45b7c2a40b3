/* Paged KV block pool and Gated DeltaNet state slots (see model/forward.h for the layouts).
 * Plain storage: the engine's block manager decides which blocks and slots a sequence owns. */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "model/fwd_int.h"

static cllm_status pool_init(cllm_kv_pool *p, const cllm_model *m, int n_layers, int n_blocks,
                             int block_size, cllm_kv_dtype dtype, cllm_error *err) {
    memset(p, 0, sizeof(*p));
    if (n_blocks < 1 || block_size < 1)
        return cllm_err_set(err, CLLM_EINVAL,
                            "kv pool: n_blocks (%d) and block_size (%d) must be >= 1", n_blocks,
                            block_size);
    if (dtype != CLLM_KV_F32 && dtype != CLLM_KV_BF16)
        return cllm_err_set(err, CLLM_EINVAL, "kv pool: unknown dtype %d", (int)dtype);
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->n_layers = n_layers;
    p->kv_dim = m->kv_dim;
    p->dtype = dtype;
    p->elem_size = dtype == CLLM_KV_F32 ? 4 : 2;
    size_t bytes;
    if (cllm_mul_size(cllm_kv_pool_block_bytes(p), (size_t)n_blocks, &bytes) != 0)
        return cllm_err_set(err, CLLM_ENOMEM, "kv pool: size overflows");
    if (bytes == 0) return CLLM_OK; /* no attention layers */
    p->data = cllm_alloc_zeroed(bytes);
    if (!p->data)
        return cllm_err_set(err, CLLM_ENOMEM, "kv pool: cannot allocate %zu bytes", bytes);
    return CLLM_OK;
}

cllm_status cllm_kv_pool_init(cllm_kv_pool *p, const cllm_model *m, int n_blocks, int block_size,
                              cllm_kv_dtype dtype, cllm_error *err) {
    return pool_init(p, m, m->n_attn, n_blocks, block_size, dtype, err);
}

cllm_status cllm_kv_pool_init_mtp(cllm_kv_pool *p, const cllm_model *m, int n_blocks,
                                  int block_size, cllm_kv_dtype dtype, cllm_error *err) {
    if (!m->has_mtp) {
        memset(p, 0, sizeof(*p));
        return cllm_err_set(err, CLLM_EINVAL,
                            "kv pool: the model has no MTP head (no mtp.* tensors, or "
                            "mtp_num_hidden_layers 0 in its config)");
    }
    return pool_init(p, m, m->n_attn + m->n_mtp, n_blocks, block_size, dtype, err);
}

void cllm_kv_pool_free(cllm_kv_pool *p) {
    cllm_free_aligned(p->data);
    p->data = NULL;
}

size_t cllm_kv_pool_block_bytes(const cllm_kv_pool *p) {
    return (size_t)p->n_layers * 2 * (size_t)p->block_size * (size_t)p->kv_dim * p->elem_size;
}

cllm_status cllm_state_pool_init(cllm_state_pool *p, const cllm_model *m, int n_slots,
                                 cllm_kv_dtype rec_dtype, cllm_error *err) {
    memset(p, 0, sizeof(*p));
    const cllm_config *c = &m->cfg;
    if (n_slots < 1) return cllm_err_set(err, CLLM_EINVAL, "state pool: n_slots must be >= 1");
    p->n_slots = n_slots;
    p->n_layers = m->n_gdn;
    if (m->n_gdn == 0) return CLLM_OK;
    p->conv_ch = m->conv_ch;
    p->conv_k1 = c->lin_conv_kernel - 1;
    p->n_v_heads = c->lin_n_v_heads;
    p->dk = c->lin_k_dim;
    p->dv = c->lin_v_dim;
    size_t nc = (size_t)n_slots * (size_t)p->n_layers * (size_t)p->conv_ch * (size_t)p->conv_k1;
    size_t nr = (size_t)n_slots * (size_t)p->n_layers * (size_t)p->n_v_heads * (size_t)p->dk *
                (size_t)p->dv;
    p->conv = cllm_alloc_zeroed(nc * sizeof(float) + 4);
    /* read + written whole every decode step */
    if (rec_dtype == CLLM_KV_BF16)
        p->rec16 = cllm_alloc_huge(nr * sizeof(uint16_t));
    else
        p->rec = cllm_alloc_huge(nr * sizeof(float));
    if (!p->conv || (!p->rec && !p->rec16)) {
        cllm_state_pool_free(p);
        return cllm_err_set(err, CLLM_ENOMEM, "state pool: cannot allocate %d slots", n_slots);
    }
    return CLLM_OK;
}

void cllm_state_pool_free(cllm_state_pool *p) {
    cllm_free_aligned(p->conv);
    cllm_free_aligned(p->rec);
    cllm_free_aligned(p->rec16);
    p->conv = p->rec = NULL;
    p->rec16 = NULL;
}

static size_t conv_per_slot(const cllm_state_pool *p) {
    return (size_t)p->n_layers * (size_t)p->conv_ch * (size_t)p->conv_k1;
}
/* bytes of one slot's recurrent state */
static size_t rec_per_slot(const cllm_state_pool *p) {
    return (size_t)p->n_layers * (size_t)p->n_v_heads * (size_t)p->dk * (size_t)p->dv *
           (p->rec16 ? sizeof(uint16_t) : sizeof(float));
}
static char *rec_base(const cllm_state_pool *p) {
    return p->rec16 ? (char *)p->rec16 : (char *)p->rec;
}

void cllm_state_slot_clear(cllm_state_pool *p, int slot) {
    if (!p->conv || slot < 0 || slot >= p->n_slots) return;
    memset(p->conv + (size_t)slot * conv_per_slot(p), 0, conv_per_slot(p) * sizeof(float));
    memset(rec_base(p) + (size_t)slot * rec_per_slot(p), 0, rec_per_slot(p));
}

void cllm_state_slot_copy(cllm_state_pool *p, int dst, int src) {
    if (!p->conv || dst == src || dst < 0 || src < 0 || dst >= p->n_slots || src >= p->n_slots)
        return;
    memcpy(p->conv + (size_t)dst * conv_per_slot(p), p->conv + (size_t)src * conv_per_slot(p),
           conv_per_slot(p) * sizeof(float));
    memcpy(rec_base(p) + (size_t)dst * rec_per_slot(p), rec_base(p) + (size_t)src * rec_per_slot(p),
           rec_per_slot(p));
}
