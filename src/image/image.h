/* Image input: decoding (PNG, JPEG, WebP) to RGB8, data: URLs, and the Qwen2-VL / Qwen3-VL /
 * Qwen3.5 image processor (smart resize, PIL-exact bicubic resize, rescale, normalize, patchify).
 *
 * Where it sits: the server takes an OpenAI image part (a data: URL), calls
 * cllm_data_url_decode, cllm_image_decode, then cllm_image_preprocess, and hands the patch rows
 * and grid to the vision encoder; cllm_image_tokens says how many image-pad tokens the prompt
 * gets. The arithmetic is that of the HF processor with its PIL backend, bit for bit up to the
 * float pixels (docs/model.md § image preprocessing says which processor and why). Pure
 * functions: no globals, thread-safe, nothing printed; every error is CLLM_EINVAL (bad input) or
 * CLLM_ENOMEM with a message saying what is wrong. */
#ifndef CLLM_IMAGE_IMAGE_H
#define CLLM_IMAGE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct cllm_image {
    int width, height;
    uint8_t *rgb; /* [height][width][3], malloc'd; freed by cllm_image_free */
} cllm_image;

#define CLLM_IMAGE_DEFAULT_MAX_PIXELS (64L * 1024 * 1024)

typedef struct cllm_image_limits {
    long max_pixels_decoded; /* width * height above this is refused from the header, before any
                                pixel buffer exists; 0 = CLLM_IMAGE_DEFAULT_MAX_PIXELS (64 Mpx) */
    size_t max_bytes;        /* encoded size above this is refused; 0 = no cap */
} cllm_image_limits;

/* Decodes PNG, JPEG or WebP (told apart by their first bytes, never by a MIME type) into *out
 * (RGB8; caller frees with cllm_image_free). lim may be NULL (defaults). What becomes RGB:
 *  - gray, palette, gray+alpha, RGBA, 1/2/4/16-bit PNG: as PIL's convert("RGB") — alpha and
 *    tRNS transparency dropped (not blended), 16-bit channels to their high byte;
 *  - JPEG gray / YCbCr / RGB through libjpeg's own conversion, CMYK and YCCK as PIL does (Adobe
 *    polarity assumed, PIL's cmyk2rgb formula); progressive JPEGs over 1000 scans are refused;
 *  - still WebP, lossy or lossless, with or without alpha; animated WebP is refused by name.
 * Refused with CLLM_EINVAL and a message: empty data, over max_bytes, unknown format (GIF, BMP,
 * TIFF, HEIF/AVIF named), truncated or corrupt data, zero width or height, width * height over
 * the limit. No library prints anything and no error leaks memory. EXIF orientation is not
 * applied (as vLLM). */
cllm_status cllm_image_decode(const void *data, size_t n, const cllm_image_limits *lim,
                              cllm_image *out, cllm_error *err);

void cllm_image_free(cllm_image *img);

/* "data:[<mime>][;param=v]*;base64,<payload>" -> the payload's bytes in a malloc'd *bytes
 * (caller frees; *n bytes). The MIME type (lower-cased; "" when the URL has none) is copied to
 * mime when mime is not NULL (truncated to mime_cap - 1 characters). Another scheme (http,
 * https, file, ...) is refused naming it, as is a data: URL without ";base64" and bad base64.
 * The MIME type is information only: cllm_image_decode sniffs the bytes. */
cllm_status cllm_data_url_decode(const char *url, size_t len, uint8_t **bytes, size_t *n,
                                 char *mime, size_t mime_cap, cllm_error *err);

/* The image processor's settings (HF preprocessor_config.json of the checkpoint). */
typedef struct cllm_image_prep {
    int patch_size, temporal_patch_size, merge_size; /* 16, 2, 2 */
    long min_pixels, max_pixels; /* "size": shortest_edge 65536, longest_edge 16777216 */
    float mean[3], std[3];       /* image_mean, image_std: 0.5 each for Qwen3-VL and Qwen3.5 */
    double rescale;              /* rescale_factor: 1/255 */
} cllm_image_prep;

/* The Qwen3.5 (and Qwen3-VL) values above. */
void cllm_image_prep_default(cllm_image_prep *p);

/* HF smart_resize: the (height, width) an h x w image is resized to: multiples of
 * factor = patch_size * merge_size, area within [min_pixels, max_pixels], aspect ratio kept as
 * closely as rounding allows (Python's round-half-even, floor when shrinking, ceil when
 * growing, as transformers does). Like transformers, it refuses an aspect ratio over 200
 * (ValueError "absolute aspect ratio must be smaller than 200") and accepts tiny images: a 1x1
 * image grows to 256x256 with the defaults. CLLM_EINVAL also for h or w < 1 and settings that
 * make no sense (factor < 1, min_pixels > max_pixels). */
cllm_status cllm_image_smart_resize(int h, int w, const cllm_image_prep *p, int *rh, int *rw,
                                    cllm_error *err);

/* PIL's Image.resize((w, h), Image.BICUBIC) on an RGB image, bit for bit (Pillow's Resample.c
 * arithmetic: separable, antialiased when shrinking, fixed-point 8-bit passes, horizontal
 * first). *out is a new image (caller frees). CLLM_EINVAL for w or h < 1, CLLM_ENOMEM. */
cllm_status cllm_image_resize_bicubic(const cllm_image *in, int w, int h, cllm_image *out,
                                      cllm_error *err);

/* smart_resize + bicubic resize + rescale + normalize + patchify, as the HF Qwen2-VL image
 * processor. *pixels: malloc'd (caller frees) [grid_t * grid_h * grid_w][3 * temporal *
 * patch * patch] floats in the processor's order: the image repeated to temporal_patch_size
 * frames; rows ordered (t, h / merge, w / merge, merge_h, merge_w); each row flattened
 * (channel, temporal, py, px). grid = {grid_t, grid_h, grid_w} in patches (grid_t is 1 for an
 * image). Each value is (float)(u8 * rescale) then (x - mean[c]) / std[c] in float, as numpy
 * computes it there. */
cllm_status cllm_image_preprocess(const cllm_image *img, const cllm_image_prep *p, float **pixels,
                                  int grid[3], cllm_error *err);

/* Tokens the text model sees for a grid: grid_t * grid_h * grid_w / (merge * merge). */
long cllm_image_tokens(const int grid[3], int merge_size);

#endif
