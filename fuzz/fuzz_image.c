/* libFuzzer target: cllm_image_decode on any bytes (PNG, JPEG, WebP and everything else), and
 * for what decodes, the preprocessing at a small pixel budget; then the same bytes as a data:
 * URL. Limits keep each run small: 1 Mpx decoded, 64 K resized pixels. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cllm_image_limits lim = {.max_pixels_decoded = 1 << 20, .max_bytes = 1 << 22};
    cllm_image img;
    cllm_error err;
    if (cllm_image_decode(data, size, &lim, &img, &err) == CLLM_OK) {
        cllm_image_prep p;
        cllm_image_prep_default(&p);
        p.min_pixels = 1024;
        p.max_pixels = 65536;
        float *px;
        int grid[3];
        if (cllm_image_preprocess(&img, &p, &px, grid, &err) == CLLM_OK) free(px);
        cllm_image_free(&img);
    }
    uint8_t *bytes;
    size_t n;
    char mime[64];
    if (cllm_data_url_decode((const char *)data, size, &bytes, &n, mime, sizeof(mime), &err) ==
        CLLM_OK)
        free(bytes);
    return 0;
}
