/* libFuzzer target: config.json and generation_config.json parsers, plus the tensor plan the
 * parsed config implies (catches size arithmetic that a hostile config could break). */
#include <stdint.h>
#include <string.h>

#include "model/config.h"
#include "model/tensor_plan.h"

static void count(void *ctx, const cllm_tensor_spec *s) {
    *(uint64_t *)ctx += cllm_tensor_spec_elems(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cllm_config c;
    cllm_error err;
    if (cllm_config_parse((const char *)data, size, "fuzz", &c, &err) == CLLM_OK) {
        /* Plans for huge layer/expert counts are long but bounded; keep the fuzzer fast. */
        if ((uint64_t)c.n_layers * (uint64_t)(c.n_experts + 1) < 20000) {
            uint64_t n = 0;
            cllm_tensor_plan(&c, CLLM_EXPERTS_PER_EXPERT, true, true, count, &n);
        }
        cllm_config_free(&c);
    }
    cllm_gen_config g;
    cllm_gen_config_parse((const char *)data, size, "fuzz", &g, &err);
    return 0;
}
