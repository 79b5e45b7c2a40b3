/* The Qwen2-VL image processor as Qwen3-VL and Qwen3.5 use it (HF transformers
 * models/qwen2_vl/image_processing_*qwen2_vl.py; docs/model.md § image preprocessing):
 * smart_resize, the bicubic resize (image_resize.c), rescale and normalize, and the patch order
 * the vision tower's patch embedding reads. Called by the server per image; pure. */
#include "image/image.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void cllm_image_prep_default(cllm_image_prep *p) {
    memset(p, 0, sizeof(*p));
    p->patch_size = 16;
    p->temporal_patch_size = 2;
    p->merge_size = 2;
    p->min_pixels = 65536;    /* 256 * 256 */
    p->max_pixels = 16777216; /* 4096 * 4096 */
    for (int c = 0; c < 3; c++) p->mean[c] = p->std[c] = 0.5f;
    p->rescale = 1.0 / 255.0;
}

static cllm_status prep_check(const cllm_image_prep *p, cllm_error *err) {
    if (p->patch_size < 1 || p->merge_size < 1 || p->temporal_patch_size < 1 ||
        p->patch_size > 1024 || p->merge_size > 64 || p->temporal_patch_size > 64)
        return cllm_err_set(err, CLLM_EINVAL,
                            "image processor: patch %d, merge %d, temporal %d are not valid",
                            p->patch_size, p->merge_size, p->temporal_patch_size);
    if (p->min_pixels < 1 || p->max_pixels < p->min_pixels)
        return cllm_err_set(err, CLLM_EINVAL,
                            "image processor: min_pixels %ld, max_pixels %ld are not valid",
                            p->min_pixels, p->max_pixels);
    for (int c = 0; c < 3; c++)
        if (!(p->std[c] != 0.0f) || !isfinite(p->std[c]) || !isfinite(p->mean[c]))
            return cllm_err_set(err, CLLM_EINVAL, "image processor: mean/std of channel %d", c);
    return CLLM_OK;
}

cllm_status cllm_image_smart_resize(int h, int w, const cllm_image_prep *p, int *rh, int *rw,
                                    cllm_error *err) {
    cllm_status st = prep_check(p, err);
    if (st) return st;
    if (h < 1 || w < 1) return cllm_err_set(err, CLLM_EINVAL, "image: %dx%d has no pixels", w, h);
    long factor = (long)p->patch_size * p->merge_size;
    double ratio = (double)(h > w ? h : w) / (h > w ? w : h);
    if (ratio > 200) /* transformers raises ValueError here */
        return cllm_err_set(err, CLLM_EINVAL,
                            "image: %dx%d has an aspect ratio of %.1f, over the 200 the "
                            "image processor accepts",
                            w, h, ratio);
    /* Python's round() is round-half-even: rint in the default rounding mode */
    double hb = rint((double)h / factor) * factor, wb = rint((double)w / factor) * factor;
    double area = (double)h * w; /* exact: h, w < 2^31 */
    if (hb * wb > (double)p->max_pixels) {
        double beta = sqrt(area / (double)p->max_pixels);
        hb = fmax((double)factor, floor((double)h / beta / factor) * factor);
        wb = fmax((double)factor, floor((double)w / beta / factor) * factor);
    } else if (hb * wb < (double)p->min_pixels) {
        double beta = sqrt((double)p->min_pixels / area);
        hb = ceil((double)h * beta / factor) * factor;
        wb = ceil((double)w * beta / factor) * factor;
    }
    if (hb < factor || wb < factor || hb > 1 << 20 || wb > 1 << 20)
        return cllm_err_set(err, CLLM_EINVAL,
                            "image: %dx%d resizes to %.0fx%.0f, outside what the processor "
                            "settings allow",
                            w, h, wb, hb);
    *rh = (int)hb;
    *rw = (int)wb;
    return CLLM_OK;
}

long cllm_image_tokens(const int grid[3], int merge_size) {
    if (merge_size < 1) return 0;
    return (long)grid[0] * grid[1] * grid[2] / ((long)merge_size * merge_size);
}

/* Rows in the processor's order: (h / m, w / m, mh, mw) blocks of m x m patches, each row the
 * patch flattened (channel, temporal, py, px), the temporal copies identical (one image). */
static void patchify(const uint8_t *rgb, int rh, int rw, const cllm_image_prep *p,
                     const float lut[3][256], float *out) {
    int P = p->patch_size, T = p->temporal_patch_size, m = p->merge_size;
    int bh_n = rh / P / m, bw_n = rw / P / m;
    size_t D = (size_t)3 * T * P * P, r = 0;
    for (int bh = 0; bh < bh_n; bh++)
        for (int bw = 0; bw < bw_n; bw++)
            for (int mh = 0; mh < m; mh++)
                for (int mw = 0; mw < m; mw++, r++) {
                    int y0 = (bh * m + mh) * P, x0 = (bw * m + mw) * P;
                    float *row = out + r * D;
                    for (int c = 0; c < 3; c++)
                        for (int py = 0; py < P; py++) {
                            const uint8_t *src = rgb + ((size_t)(y0 + py) * rw + x0) * 3 + c;
                            float *dst = row + (size_t)c * T * P * P + (size_t)py * P;
                            for (int px = 0; px < P; px++) dst[px] = lut[c][src[3 * px]];
                            for (int t = 1; t < T; t++)
                                memcpy(dst + (size_t)t * P * P, dst, (size_t)P * sizeof(float));
                        }
                }
}

cllm_status cllm_image_preprocess(const cllm_image *img, const cllm_image_prep *p, float **pixels,
                                  int grid[3], cllm_error *err) {
    *pixels = NULL;
    int rh, rw;
    cllm_status st = cllm_image_smart_resize(img->height, img->width, p, &rh, &rw, err);
    if (st) return st;
    cllm_image resized = {0};
    const cllm_image *src = img;
    if (rh != img->height || rw != img->width) {
        st = cllm_image_resize_bicubic(img, rw, rh, &resized, err);
        if (st) return st;
        src = &resized;
    }
    /* numpy: (u8 as float64 * rescale) as float32, then (x - mean) / std in float32 */
    float lut[3][256];
    for (int c = 0; c < 3; c++)
        for (int v = 0; v < 256; v++) {
            float x = (float)((double)v * p->rescale);
            lut[c][v] = (x - p->mean[c]) / p->std[c];
        }
    size_t n = (size_t)rh * rw * 3 * p->temporal_patch_size;
    float *out = malloc(n * sizeof(float));
    if (!out) {
        cllm_image_free(&resized);
        return cllm_err_set(err, CLLM_ENOMEM, "image: out of memory for %zu pixel values", n);
    }
    patchify(src->rgb, rh, rw, p, lut, out);
    cllm_image_free(&resized);
    grid[0] = 1;
    grid[1] = rh / p->patch_size;
    grid[2] = rw / p->patch_size;
    *pixels = out;
    return CLLM_OK;
}
