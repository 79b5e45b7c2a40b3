/* dtype table; see dtype.h. */
#include "base/dtype.h"

#include <string.h>

static const struct {
    const char *name;
    size_t size;
    int is_float;
} dtypes[CLLM_DT_COUNT] = {
    [CLLM_DT_F32] = {"F32", 4, 1},         [CLLM_DT_F16] = {"F16", 2, 1},
    [CLLM_DT_BF16] = {"BF16", 2, 1},       [CLLM_DT_F64] = {"F64", 8, 1},
    [CLLM_DT_F8_E4M3] = {"F8_E4M3", 1, 1}, [CLLM_DT_F8_E5M2] = {"F8_E5M2", 1, 1},
    [CLLM_DT_I64] = {"I64", 8, 0},         [CLLM_DT_I32] = {"I32", 4, 0},
    [CLLM_DT_I16] = {"I16", 2, 0},         [CLLM_DT_I8] = {"I8", 1, 0},
    [CLLM_DT_U64] = {"U64", 8, 0},         [CLLM_DT_U32] = {"U32", 4, 0},
    [CLLM_DT_U16] = {"U16", 2, 0},         [CLLM_DT_U8] = {"U8", 1, 0},
    [CLLM_DT_BOOL] = {"BOOL", 1, 0},
};

size_t cllm_dtype_size(cllm_dtype t) {
    return (unsigned)t < CLLM_DT_COUNT ? dtypes[t].size : 0;
}
const char *cllm_dtype_name(cllm_dtype t) {
    return (unsigned)t < CLLM_DT_COUNT ? dtypes[t].name : "?";
}
int cllm_dtype_is_float(cllm_dtype t) {
    return (unsigned)t < CLLM_DT_COUNT && dtypes[t].is_float;
}

int cllm_dtype_parse(const char *s, cllm_dtype *out) {
    for (int i = 0; i < CLLM_DT_COUNT; i++) {
        if (!strcmp(s, dtypes[i].name)) {
            *out = (cllm_dtype)i;
            return 0;
        }
    }
    return -1;
}
