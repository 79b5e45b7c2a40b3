/* libFuzzer target: the streaming output parser on arbitrary text, fed whole and in two pieces
 * at a split point taken from the input; the results must be identical. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/output_parser.h"

static char *result(const uint8_t *d, size_t n, size_t cut) {
    cllm_outp_opts o = {
        .reasoning = true, .starts_in_reasoning = n && (d[0] & 1), .tool_calls = true};
    cllm_outp *p = cllm_outp_new(&o);
    cllm_outp_delta dl;
    cllm_outp_feed(p, (const char *)d, cut, &dl);
    json_decref(dl.tool_calls);
    cllm_outp_feed(p, (const char *)d + cut, n - cut, &dl);
    json_decref(dl.tool_calls);
    cllm_outp_finish(p, &dl);
    json_decref(dl.tool_calls);
    const char *r = cllm_outp_reasoning(p);
    json_t *all = json_pack("{s:s?, s:s, s:O}", "r", r, "c", cllm_outp_content(p), "t",
                            cllm_outp_tool_calls(p));
    char *s = all ? json_dumps(all, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(all);
    cllm_outp_free(p);
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t cut = data[1] % size;
    char *a = result(data, size, 0), *b = result(data, size, cut);
    if ((a == NULL) != (b == NULL) || (a && strcmp(a, b))) abort();
    free(a);
    free(b);
    return 0;
}
