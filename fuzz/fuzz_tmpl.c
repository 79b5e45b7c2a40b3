/* libFuzzer target: compile and render arbitrary template source against a fixed chat context
 * (messages with tools and tool calls), under tight limits. Must never crash or leak; errors are
 * fine. The first byte picks one of a few contexts. */
#include <stdint.h>
#include <stdlib.h>

#include "tokenizer/chat_template.h"

static const char *CTX[] = {
    "{\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"hi "
    "<think>\"},"
    "{\"role\":\"assistant\",\"content\":\"<think>\\nr\\n</"
    "think>\\n\\nok\",\"tool_calls\":[{\"function\":"
    "{\"name\":\"f\",\"arguments\":{\"a\":1,\"b\":[true,null,1.5]}}}]},{\"role\":\"tool\","
    "\"content\":\"x\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"add_generation_prompt\":"
    "true}",
    "{\"messages\":[],\"enable_thinking\":false}",
    "{\"messages\":\"not a list\",\"x\":{\"y\":{\"z\":[1,2,3]}}}",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!size) return 0;
    json_t *ctx = json_loads(CTX[data[0] % 3], 0, NULL);
    cllm_jinja *t = NULL;
    if (cllm_jinja_compile((const char *)data + 1, size - 1, &t, NULL) == CLLM_OK) {
        cllm_jinja_limits lim = {
            .max_output = 1 << 20, .max_memory = 64 << 20, .max_steps = 200000, .max_depth = 32};
        char *out = NULL;
        size_t n;
        if (cllm_jinja_render(t, ctx, &lim, &out, &n, NULL) == CLLM_OK) free(out);
        cllm_jinja_free(t);
    }
    json_decref(ctx);
    return 0;
}
