/* See tp_shard.h. */
#include "model/tp_shard.h"

#include <string.h>

#include "model/tensor_plan.h"
#include "model/tensor_table_int.h"

/* Part `rank` of `total` rows in units of `align`: first (units % size) ranks get one extra. */
static void split(int total, int rank, int size, int align, int *off, int *n) {
    int units = total / align, base = units / size, extra = units % size;
    int u0 = rank * base + (rank < extra ? rank : extra);
    *off = u0 * align;
    *n = (base + (rank < extra ? 1 : 0)) * align;
}

/* Heads that may be replicated (KV heads, GDN key heads) for `nq` heads that use them. */
static cllm_status split_heads_rep(int n, int rank, int size, int *off, int *cnt, const char *what,
                                   cllm_error *err) {
    if (size <= n) {
        if (n % size)
            return cllm_err_set(err, CLLM_EINVAL,
                                "tensor parallel: %s = %d is not divisible by "
                                "--tensor-parallel-size %d",
                                what, n, size);
        *cnt = n / size;
        *off = rank * *cnt;
        return CLLM_OK;
    }
    if (size % n)
        return cllm_err_set(err, CLLM_EINVAL,
                            "tensor parallel: --tensor-parallel-size %d exceeds %s = %d and is not "
                            "a multiple of it (heads cannot be replicated evenly)",
                            size, what, n);
    *cnt = 1;
    *off = rank / (size / n);
    return CLLM_OK;
}

static cllm_status split_rows(int total, int rank, int size, int align, int *off, int *n,
                              const char *what, cllm_error *err) {
    if (total <= 0) {
        *off = *n = 0;
        return CLLM_OK;
    }
    if (total % align)
        return cllm_err_set(err, CLLM_EINVAL,
                            "tensor parallel: %s = %d is not a multiple of %d (the quantization "
                            "group / packing a shard must keep whole)",
                            what, total, align);
    if (total / align < size)
        return cllm_err_set(err, CLLM_EINVAL,
                            "tensor parallel: %s = %d has fewer than --tensor-parallel-size %d "
                            "units of %d rows",
                            what, total, size, align);
    split(total, rank, size, align, off, n);
    return CLLM_OK;
}

cllm_status cllm_shard_plan(const cllm_config *c, int rank, int size, int align, int ep,
                            cllm_shard *o, cllm_error *err) {
    memset(o, 0, sizeof(*o));
    if (size < 1 || rank < 0 || rank >= size || align < 1)
        return cllm_err_set(err, CLLM_EINVAL, "tensor parallel: bad rank %d of %d", rank, size);
    o->rank = rank;
    o->size = size;
    o->align = align;
    o->ep = ep;
    o->ne = c->n_experts;
    int n_attn = cllm_config_count_layers(c, CLLM_LAYER_FULL_ATTN);
    int n_gdn = cllm_config_count_layers(c, CLLM_LAYER_LINEAR_ATTN);
    cllm_status s;
    o->nh = c->n_heads;
    o->nkv = c->n_kv_heads;
    if (n_attn > 0) {
        if (c->n_heads % size)
            return cllm_err_set(err, CLLM_EINVAL,
                                "tensor parallel: self_attn.q_proj/o_proj: num_attention_heads = "
                                "%d is not divisible by --tensor-parallel-size %d",
                                c->n_heads, size);
        o->nh = c->n_heads / size;
        o->h0 = rank * o->nh;
        if ((s = split_heads_rep(c->n_kv_heads, rank, size, &o->kv0, &o->nkv,
                                 "self_attn.k_proj/v_proj: num_key_value_heads", err)))
            return s;
    }
    o->ngk = c->lin_n_k_heads;
    o->ngv = c->lin_n_v_heads;
    if (n_gdn > 0) {
        if (c->lin_n_v_heads % size)
            return cllm_err_set(err, CLLM_EINVAL,
                                "tensor parallel: linear_attn.in_proj_z/out_proj: "
                                "linear_num_value_heads = %d is not divisible by "
                                "--tensor-parallel-size %d",
                                c->lin_n_v_heads, size);
        o->ngv = c->lin_n_v_heads / size;
        o->gv0 = rank * o->ngv;
        if ((s = split_heads_rep(c->lin_n_k_heads, rank, size, &o->gk0, &o->ngk,
                                 "linear_attn.in_proj_qkv: linear_num_key_heads", err)))
            return s;
    }
    bool any_dense = false, any_moe = false;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->layer_is_moe[l])
            any_moe = true;
        else
            any_dense = true;
    }
    if (any_dense && (s = split_rows(c->intermediate_size, rank, size, align, &o->i0, &o->ni,
                                     "mlp.{gate,up,down}_proj: intermediate_size", err)))
        return s;
    if (any_moe && c->n_experts > 0 && ep) {
        if (c->n_experts % size)
            return cllm_err_set(err, CLLM_EINVAL,
                                "expert parallel: mlp.experts: num_experts = %d is not divisible "
                                "by --tensor-parallel-size %d",
                                c->n_experts, size);
        o->ne = c->n_experts / size;
        o->e0 = rank * o->ne;
        o->mi0 = 0;
        o->nmi = c->moe_intermediate_size;
    } else if (any_moe && c->n_experts > 0 &&
               (s = split_rows(c->moe_intermediate_size, rank, size, align, &o->mi0, &o->nmi,
                               "mlp.experts: moe_intermediate_size", err)))
        return s;
    if (tt_has_block(c, &tt_shared) &&
        (s = split_rows(c->shared_expert_intermediate_size, rank, size, align, &o->si0, &o->nsi,
                        "mlp.shared_expert: shared_expert_intermediate_size", err)))
        return s;
    /* lm_head rows: units of 8 keep an int8 GPTQ lm_head's packed columns whole */
    int va = align > 1 ? 8 : 1;
    if ((s = split_rows(c->vocab_size, rank, size, va, &o->v0, &o->nv, "lm_head: vocab_size", err)))
        return s;
    return CLLM_OK;
}

void cllm_shard_local_config(const cllm_config *c, const cllm_shard *s, cllm_config *out) {
    *out = *c;
    out->n_heads = s->nh;
    out->n_kv_heads = s->nkv;
    out->lin_n_k_heads = s->ngk;
    out->lin_n_v_heads = s->ngv;
    if (s->ni) out->intermediate_size = s->ni;
    if (s->nmi) out->moe_intermediate_size = s->nmi;
    if (s->nsi) out->shared_expert_intermediate_size = s->nsi;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

uint64_t cllm_shard_plan_hash(const cllm_config *c, int size, int align, int ep) {
    uint64_t h = 0xcbf29ce484222325ull;
    const int dims[] = {c->arch,
                        c->hidden_size,
                        c->n_layers,
                        c->vocab_size,
                        c->n_heads,
                        c->n_kv_heads,
                        c->head_dim,
                        c->lin_n_k_heads,
                        c->lin_n_v_heads,
                        c->lin_k_dim,
                        c->lin_v_dim,
                        c->lin_conv_kernel,
                        c->n_experts,
                        c->n_experts_per_tok,
                        c->moe_intermediate_size,
                        c->shared_expert_intermediate_size,
                        c->intermediate_size,
                        size,
                        align};
    h = fnv(h, dims, sizeof(dims));
    h = fnv(h, c->layer_types, (size_t)c->n_layers);
    h = fnv(h, c->layer_is_moe, (size_t)c->n_layers);
    h = fnv(h, CLLM_VERSION, sizeof(CLLM_VERSION));
    for (int r = 0; r < size; r++) {
        cllm_shard s;
        if (cllm_shard_plan(c, r, size, align, ep, &s, NULL) == CLLM_OK) h = fnv(h, &s, sizeof(s));
    }
    return h;
}

typedef struct bytes_ctx {
    const cllm_shard *s;
    const cllm_config *g;
    int eb;
    uint64_t total, repl;
} bytes_ctx;

static void count_one(void *vc, const cllm_tensor_spec *t) {
    bytes_ctx *b = vc;
    uint64_t n = cllm_tensor_spec_elems(t) * (uint64_t)(t->force_f32 ? 4 : b->eb);
    bool repl = t->tp_split == TS_REPL; /* embeddings, norms, router, shared expert gate */
    if (t->group == CLLM_TG_LM_HEAD) n = n / (uint64_t)b->g->vocab_size * (uint64_t)b->s->nv;
    if (t->group == CLLM_TG_EXPERTS && b->s->ep)
        n = n / (uint64_t)b->g->n_experts * (uint64_t)b->s->ne;
    /* KV heads / GDN key heads replicated when N exceeds them: count the copies as replicated */
    if (b->s->size > b->g->n_kv_heads && t->tp_range == TR_KV) repl = true;
    b->total += n;
    if (repl) b->repl += n;
}

void cllm_shard_rank_bytes(const cllm_config *c, const cllm_shard *s, int elem_bytes,
                           uint64_t *total, uint64_t *replicated) {
    cllm_config loc;
    cllm_shard_local_config(c, s, &loc);
    bytes_ctx b = {s, c, elem_bytes, 0, 0};
    cllm_tensor_plan(&loc, CLLM_EXPERTS_FUSED, false, false, count_one, &b);
    *total = b.total;
    *replicated = b.repl;
}
