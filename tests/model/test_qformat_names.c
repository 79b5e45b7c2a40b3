/* cllm_qformat_is_qtensor (model/qformat.c): which checkpoint tensors are a quantized Linear's
 * (the prefault passes over them once every matrix is repacked into panels). */
#include "model/qformat.h"
#include "test.h"

int main(void) {
    static const char *const yes[] = {
        "model.layers.0.self_attn.q_proj.qweight",           "lm_head.qzeros",
        "model.layers.3.mlp.experts.7.down_proj.scales",     "model.layers.0.mlp.gate_proj.g_idx",
        "model.layers.1.linear_attn.out_proj.weight_packed", "lm_head.weight_scale",
        "model.layers.2.mlp.up_proj.weight_zero_point"};
    static const char *const no[] = {
        "model.layers.0.self_attn.q_proj.weight",  /* a float matrix */
        "model.layers.0.mlp.up_proj.weight_shape", /* compressed-tensors metadata: not listed */
        "model.layers.0.mlp.up_proj.weight_g_idx",
        "model.norm.weight",
        ".qweight", /* a suffix alone is no tensor name */
        "x.qweight.bias",
        "x_qweight",
        ""};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        CHECK_MSG(cllm_qformat_is_qtensor(yes[i]), "%s", yes[i]);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        CHECK_MSG(!cllm_qformat_is_qtensor(no[i]), "%s", no[i]);
    return test_report("test_qformat_names");
}
