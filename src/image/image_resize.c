/* cllm_image_resize_bicubic: Pillow's Image.resize(size, Image.BICUBIC) on an RGB8 image, bit for
 * bit. The HF image processor (PIL backend) resizes with exactly this call, so the vision
 * encoder sees the pixels it was trained on. Written from the facts of Pillow's
 * src/libImaging/Resample.c (9.4, Debian 12's python3-pil; the arithmetic is unchanged in later
 * releases), not from its code:
 *  - separable: a horizontal pass (only over the source rows the vertical pass will read), then
 *    a vertical one; a pass whose size does not change is skipped; each pass rounds to uint8;
 *  - per output pixel xx: center = (xx + 0.5) * scale with scale = in / out; when shrinking the
 *    filter is stretched by scale (antialiasing: support 2 * scale), when growing it is not;
 *    taps xmin = (int)(center - support + 0.5) .. (int)(center + support + 0.5), clamped;
 *    weight = bicubic((x + xmin - center + 0.5) / filterscale), a = -0.5 (Keys), in double;
 *  - the weights are normalized by their sum, then made fixed-point with 22 fraction bits
 *    (rounding half away from zero), and a pixel is (sum(v * k) + 2^21) >> 22 clipped to 0..255.
 * Floating-point expressions keep Pillow's order of operations; the build is ISO C (-std=c11),
 * where GCC does not contract a * b + c into an FMA, so the doubles match Pillow's own build. */
#include "image/image.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RS_PRECISION_BITS (32 - 8 - 2)

typedef struct rs_coeffs {
    int ksize;   /* taps per output pixel (the most any needs) */
    int *bounds; /* [out][2]: first source index, number of taps */
    int32_t *k;  /* [out][ksize] fixed-point weights */
} rs_coeffs;

static double rs_bicubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static void rs_coeffs_free(rs_coeffs *c) {
    free(c->bounds);
    free(c->k);
    c->bounds = NULL;
    c->k = NULL;
}

static cllm_status rs_coeffs_make(int in_size, int out_size, rs_coeffs *c) {
    /* Pillow takes the source box as floats (0, 0, w, h); sizes here are < 2^24, so exact */
    float in0 = 0.0f, in1 = (float)in_size;
    double scale = (double)(in1 - in0) / out_size, filterscale = scale < 1.0 ? 1.0 : scale;
    double support = 2.0 * filterscale;
    int ksize = (int)ceil(support) * 2 + 1;
    c->ksize = ksize;
    c->bounds = malloc((size_t)out_size * 2 * sizeof(int));
    c->k = calloc((size_t)out_size * ksize, sizeof(int32_t));
    double *w = malloc((size_t)ksize * sizeof(double));
    if (!c->bounds || !c->k || !w) {
        free(w);
        rs_coeffs_free(c);
        return CLLM_ENOMEM;
    }
    double ss = 1.0 / filterscale;
    for (int xx = 0; xx < out_size; xx++) {
        double center = in0 + (xx + 0.5) * scale, ww = 0.0;
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) {
            w[x] = rs_bicubic((x + xmin - center + 0.5) * ss);
            ww += w[x];
        }
        int32_t *k = c->k + (size_t)xx * ksize;
        for (int x = 0; x < xmax; x++) {
            double v = ww != 0.0 ? w[x] / ww : w[x];
            k[x] = v < 0 ? (int32_t)(-0.5 + v * (1 << RS_PRECISION_BITS))
                         : (int32_t)(0.5 + v * (1 << RS_PRECISION_BITS));
        }
        c->bounds[2 * xx] = xmin;
        c->bounds[2 * xx + 1] = xmax < 0 ? 0 : xmax;
    }
    free(w);
    return CLLM_OK;
}

static uint8_t rs_clip8(int64_t ss) {
    int64_t v = ss >> RS_PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* out[y][0..out_w) from in rows y0 + y, for y < rows */
static void rs_horizontal(const uint8_t *in, int in_w, int y0, int rows, const rs_coeffs *c,
                          uint8_t *out, int out_w) {
    for (int y = 0; y < rows; y++) {
        const uint8_t *src = in + (size_t)(y0 + y) * in_w * 3;
        uint8_t *dst = out + (size_t)y * out_w * 3;
        for (int xx = 0; xx < out_w; xx++) {
            int xmin = c->bounds[2 * xx], n = c->bounds[2 * xx + 1];
            const int32_t *k = c->k + (size_t)xx * c->ksize;
            int64_t s0 = 1 << (RS_PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (int x = 0; x < n; x++) {
                const uint8_t *p = src + (size_t)(xmin + x) * 3;
                s0 += p[0] * (int64_t)k[x];
                s1 += p[1] * (int64_t)k[x];
                s2 += p[2] * (int64_t)k[x];
            }
            dst[3 * xx] = rs_clip8(s0);
            dst[3 * xx + 1] = rs_clip8(s1);
            dst[3 * xx + 2] = rs_clip8(s2);
        }
    }
}

/* out[yy] = sum over taps of in rows; acc is a scratch row of w * 3 */
static void rs_vertical(const uint8_t *in, int w, const rs_coeffs *c, uint8_t *out, int out_h,
                        int64_t *acc) {
    size_t row = (size_t)w * 3;
    for (int yy = 0; yy < out_h; yy++) {
        int ymin = c->bounds[2 * yy], n = c->bounds[2 * yy + 1];
        const int32_t *k = c->k + (size_t)yy * c->ksize;
        for (size_t i = 0; i < row; i++) acc[i] = 1 << (RS_PRECISION_BITS - 1);
        for (int y = 0; y < n; y++) {
            const uint8_t *src = in + (size_t)(ymin + y) * row;
            int64_t ky = k[y];
            for (size_t i = 0; i < row; i++) acc[i] += src[i] * ky;
        }
        uint8_t *dst = out + (size_t)yy * row;
        for (size_t i = 0; i < row; i++) dst[i] = rs_clip8(acc[i]);
    }
}

cllm_status cllm_image_resize_bicubic(const cllm_image *in, int w, int h, cllm_image *out,
                                      cllm_error *err) {
    memset(out, 0, sizeof(*out));
    if (w < 1 || h < 1 || in->width < 1 || in->height < 1)
        return cllm_err_set(err, CLLM_EINVAL, "resize: %dx%d to %dx%d is not a valid size",
                            in->width, in->height, w, h);
    size_t out_bytes = (size_t)w * h * 3;
    if (w == in->width && h == in->height) { /* PIL returns a copy */
        out->rgb = malloc(out_bytes);
        if (!out->rgb) return cllm_err_set(err, CLLM_ENOMEM, "resize: out of memory");
        memcpy(out->rgb, in->rgb, out_bytes);
        out->width = w;
        out->height = h;
        return CLLM_OK;
    }
    rs_coeffs ch = {0}, cv = {0};
    uint8_t *tmp = NULL, *dst = NULL;
    int64_t *acc = NULL;
    cllm_status st = rs_coeffs_make(in->width, w, &ch);
    if (!st) st = rs_coeffs_make(in->height, h, &cv);
    if (st) goto done;
    const uint8_t *src = in->rgb;
    if (w != in->width) {
        /* only the source rows the vertical pass reads */
        int y0 = cv.bounds[0], y1 = cv.bounds[2 * (h - 1)] + cv.bounds[2 * (h - 1) + 1];
        tmp = malloc((size_t)w * (y1 - y0 > 0 ? y1 - y0 : 1) * 3);
        if (!tmp) goto nomem;
        rs_horizontal(in->rgb, in->width, y0, y1 - y0, &ch, tmp, w);
        for (int i = 0; i < h; i++) cv.bounds[2 * i] -= y0;
        src = tmp;
    }
    if (h != in->height) {
        dst = malloc(out_bytes);
        acc = malloc((size_t)w * 3 * sizeof(int64_t));
        if (!dst || !acc) goto nomem;
        rs_vertical(src, w, &cv, dst, h, acc);
    } else {
        dst = tmp; /* the horizontal pass covered every row */
        tmp = NULL;
    }
    out->rgb = dst;
    out->width = w;
    out->height = h;
    dst = NULL;
    goto done;
nomem:
    st = CLLM_ENOMEM;
done:
    free(tmp);
    free(dst);
    free(acc);
    rs_coeffs_free(&ch);
    rs_coeffs_free(&cv);
    if (st)
        return cllm_err_set(err, st, "resize: out of memory for %dx%d to %dx%d", in->width,
                            in->height, w, h);
    return CLLM_OK;
}
