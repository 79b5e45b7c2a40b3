/* libFuzzer target: safetensors header parser. Input = an 8-byte data size prefix + header JSON. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    uint32_t dsz;
    memcpy(&dsz, data, 4);
    cllm_st_file f;
    memset(&f, 0, sizeof(f));
    cllm_error err;
    if (cllm_st_parse_header((const char *)data + 4, size - 4, dsz, "fuzz", &f, &err) == CLLM_OK) {
        for (size_t i = 0; i < f.n_tensors; i++) free(f.tensors[i].name);
        free(f.tensors);
        free(f.metadata_format);
    }
    return 0;
}
