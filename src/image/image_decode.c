/* cllm_image_decode: the limits, the format sniffing and the dispatch to img_png.c, img_jpeg.c,
 * img_webp.c. The server calls it on the bytes of an image part; see image.h. */
#include "image/image_int.h"

#include <stdlib.h>
#include <string.h>

cllm_status img_check_dims(const char *fmt, long w, long h, long max_px, cllm_error *err) {
    if (w < 1 || h < 1)
        return cllm_err_set(err, CLLM_EINVAL, "%s: the image has zero width or height (%ldx%ld)",
                            fmt, w, h);
    if (w > max_px / h) /* w * h > max_px without overflow */
        return cllm_err_set(err, CLLM_EINVAL,
                            "%s: the image is %ldx%ld pixels, over the limit of %ld pixels", fmt, w,
                            h, max_px);
    return CLLM_OK;
}

static int has(const uint8_t *d, size_t n, size_t at, const char *magic, size_t len) {
    return n >= at + len && !memcmp(d + at, magic, len);
}

/* Formats we do not read, named so the client learns what to send instead. */
static const char *other_format(const uint8_t *d, size_t n) {
    if (has(d, n, 0, "GIF87a", 6) || has(d, n, 0, "GIF89a", 6)) return "GIF";
    if (has(d, n, 0, "BM", 2)) return "BMP";
    if (has(d, n, 0, "II*\0", 4) || has(d, n, 0, "MM\0*", 4)) return "TIFF";
    if (has(d, n, 4, "ftypavif", 8) || has(d, n, 4, "ftypavis", 8)) return "AVIF";
    if (has(d, n, 4, "ftyphei", 7) || has(d, n, 4, "ftypmif1", 8) || has(d, n, 4, "ftypheic", 8))
        return "HEIF";
    if (has(d, n, 0, "%PDF", 4)) return "PDF";
    if (has(d, n, 0, "<svg", 4) || has(d, n, 0, "<?xml", 5)) return "SVG/XML";
    return NULL;
}

cllm_status cllm_image_decode(const void *data, size_t n, const cllm_image_limits *lim,
                              cllm_image *out, cllm_error *err) {
    const uint8_t *d = data;
    memset(out, 0, sizeof(*out));
    long max_px = lim && lim->max_pixels_decoded > 0 ? lim->max_pixels_decoded
                                                     : CLLM_IMAGE_DEFAULT_MAX_PIXELS;
    if (!d || n == 0) return cllm_err_set(err, CLLM_EINVAL, "image: the data is empty");
    if (lim && lim->max_bytes && n > lim->max_bytes)
        return cllm_err_set(err, CLLM_EINVAL, "image: %zu bytes, over the limit of %zu", n,
                            lim->max_bytes);
    if (has(d, n, 0, "\x89PNG\r\n\x1a\n", 8)) return img_decode_png(d, n, max_px, out, err);
    if (has(d, n, 0, "\xff\xd8\xff", 3)) return img_decode_jpeg(d, n, max_px, out, err);
    if (has(d, n, 0, "RIFF", 4) && has(d, n, 8, "WEBP", 4))
        return img_decode_webp(d, n, max_px, out, err);
    const char *other = other_format(d, n);
    if (other)
        return cllm_err_set(err, CLLM_EINVAL,
                            "image: %s images are not supported (PNG, JPEG and WebP are)", other);
    char hex[3 * 8 + 1] = "";
    size_t k = 0;
    for (size_t i = 0; i < n && i < 8; i++) {
        static const char digits[] = "0123456789abcdef";
        if (i) hex[k++] = ' ';
        hex[k++] = digits[d[i] >> 4];
        hex[k++] = digits[d[i] & 15];
        hex[k] = '\0';
    }
    return cllm_err_set(err, CLLM_EINVAL,
                        "image: unknown format (first bytes %s): PNG, JPEG and WebP are read", hex);
}

void cllm_image_free(cllm_image *img) {
    if (!img) return;
    free(img->rgb);
    img->rgb = NULL;
    img->width = img->height = 0;
}
