/* WebP decoding with libwebp into RGB8: still images, lossy (VP8) or lossless (VP8L), with or
 * without alpha (dropped). libwebp's default decoding (fancy upsampling) is the one PIL's
 * WebPAnimDecoder uses for a still image's single frame. Animated files are refused by name:
 * PIL would show the first frame, which needs libwebpdemux; nobody sends an animation to ask
 * about a document. libwebp neither prints nor jumps: plain status codes. */
#include "image/image_int.h"

#include <stdlib.h>

#include <webp/decode.h>

static const char *webp_status(VP8StatusCode s) {
    switch (s) {
    case VP8_STATUS_NOT_ENOUGH_DATA:
        return "the data is truncated";
    case VP8_STATUS_BITSTREAM_ERROR:
        return "corrupt data";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
        return "a feature libwebp does not decode";
    case VP8_STATUS_OUT_OF_MEMORY:
        return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
        return "invalid parameter";
    default:
        return "cannot decode";
    }
}

cllm_status img_decode_webp(const uint8_t *d, size_t n, long max_px, cllm_image *out,
                            cllm_error *err) {
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg))
        return cllm_err_set(err, CLLM_EINVAL, "WebP: libwebp version mismatch");
    VP8StatusCode s = WebPGetFeatures(d, n, &cfg.input);
    if (s != VP8_STATUS_OK) return cllm_err_set(err, CLLM_EINVAL, "WebP: %s", webp_status(s));
    if (cfg.input.has_animation)
        return cllm_err_set(err, CLLM_EINVAL, "WebP: animated images are not supported");
    int w = cfg.input.width, h = cfg.input.height;
    cllm_status st = img_check_dims("WebP", w, h, max_px, err);
    if (st) return st;
    size_t size = (size_t)w * h * 3;
    uint8_t *rgb = malloc(size);
    if (!rgb) return cllm_err_set(err, CLLM_ENOMEM, "WebP: out of memory for %dx%d pixels", w, h);
    cfg.output.colorspace = MODE_RGB;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = rgb;
    cfg.output.u.RGBA.stride = w * 3;
    cfg.output.u.RGBA.size = size;
    s = WebPDecode(d, n, &cfg);
    WebPFreeDecBuffer(&cfg.output); /* frees nothing of ours (external memory) */
    if (s != VP8_STATUS_OK) {
        free(rgb);
        return cllm_err_set(err, s == VP8_STATUS_OUT_OF_MEMORY ? CLLM_ENOMEM : CLLM_EINVAL,
                            "WebP: %s", webp_status(s));
    }
    out->width = w;
    out->height = h;
    out->rgb = rgb;
    return CLLM_OK;
}
