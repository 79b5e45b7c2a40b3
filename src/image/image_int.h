/* Private to src/image/: the per-format decoders cllm_image_decode (image_decode.c) dispatches
 * to after sniffing. Each one checks width * height against max_px from the header before it
 * allocates the pixels, fills *out only on success, frees everything on every error, and says
 * what was wrong in err (the format's name first). */
#ifndef CLLM_IMAGE_IMAGE_INT_H
#define CLLM_IMAGE_IMAGE_INT_H

#include "image/image.h"

cllm_status img_decode_png(const uint8_t *d, size_t n, long max_px, cllm_image *out,
                           cllm_error *err);
cllm_status img_decode_jpeg(const uint8_t *d, size_t n, long max_px, cllm_image *out,
                            cllm_error *err);
cllm_status img_decode_webp(const uint8_t *d, size_t n, long max_px, cllm_image *out,
                            cllm_error *err);

/* CLLM_OK when 1 <= w, 1 <= h and w * h <= max_px; else CLLM_EINVAL naming fmt and the sizes. */
cllm_status img_check_dims(const char *fmt, long w, long h, long max_px, cllm_error *err);

#endif
