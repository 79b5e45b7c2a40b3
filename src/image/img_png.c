/* PNG decoding with libpng into RGB8 (see image.h for what each colour type becomes).
 *
 * libpng reports errors by calling our error function, which longjmps back to the setjmp in
 * png_run. Everything that must be freed after such a jump lives in the png_ctx the caller owns
 * (not in png_run's locals, which a longjmp may leave stale), and no libpng call is made with
 * our own buffers half-built in locals. Warnings are dropped: nothing reaches stderr. */
#include "image/image_int.h"

#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct png_ctx {
    const uint8_t *data;
    size_t n, pos;
    char msg[200];   /* libpng's error text */
    uint8_t *rgb;    /* the image being filled; the caller frees it on error */
    png_bytep *rows; /* row pointers into rgb */
} png_ctx;

static void png_on_error(png_structp png, png_const_charp msg) {
    png_ctx *c = png_get_error_ptr(png);
    snprintf(c->msg, sizeof(c->msg), "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static void png_on_read(png_structp png, png_bytep dst, size_t len) {
    png_ctx *c = png_get_io_ptr(png);
    if (len > c->n - c->pos) png_error(png, "the data is truncated");
    memcpy(dst, c->data + c->pos, len);
    c->pos += len;
}

/* Asks libpng for RGB8 whatever the colour type: 16-bit to the high byte (png_set_strip_16, as
 * PIL's ";16B" raw modes do), palette looked up, 1/2/4-bit gray widened by bit replication,
 * gray copied to R, G and B, alpha (and the alpha a tRNS palette expands to) stripped. */
static void png_want_rgb8(png_structp png, int depth, int ctype, int interlace) {
    if (depth == 16) png_set_strip_16(png);
    if (ctype == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (ctype == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (ctype == PNG_COLOR_TYPE_GRAY || ctype == PNG_COLOR_TYPE_GRAY_ALPHA)
        png_set_gray_to_rgb(png);
    png_set_strip_alpha(png);
    if (interlace != PNG_INTERLACE_NONE) png_set_interlace_handling(png);
}

static cllm_status png_run(png_structp png, png_infop info, png_ctx *c, long max_px,
                           cllm_image *out, cllm_error *err) {
    if (setjmp(png_jmpbuf(png))) return cllm_err_set(err, CLLM_EINVAL, "PNG: %s", c->msg);
    png_set_read_fn(png, c, png_on_read);
    /* our own limit (max_px) gives the message; libpng's per-side cap would refuse first */
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_read_info(png, info);
    png_uint_32 w, h;
    int depth, ctype, interlace;
    png_get_IHDR(png, info, &w, &h, &depth, &ctype, &interlace, NULL, NULL);
    cllm_status st = img_check_dims("PNG", (long)w, (long)h, max_px, err);
    if (st) return st;
    png_want_rgb8(png, depth, ctype, interlace);
    png_read_update_info(png, info);
    if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
        png_get_rowbytes(png, info) != (size_t)w * 3)
        return cllm_err_set(err, CLLM_EINVAL, "PNG: colour type %d, depth %d is not handled", ctype,
                            depth);
    c->rgb = malloc((size_t)w * h * 3);
    c->rows = malloc((size_t)h * sizeof(png_bytep));
    if (!c->rgb || !c->rows)
        return cllm_err_set(err, CLLM_ENOMEM, "PNG: out of memory for %ux%u pixels", (unsigned)w,
                            (unsigned)h);
    for (png_uint_32 y = 0; y < h; y++) c->rows[y] = c->rgb + (size_t)y * w * 3;
    png_read_image(png, c->rows);
    out->width = (int)w;
    out->height = (int)h;
    return CLLM_OK;
}

cllm_status img_decode_png(const uint8_t *d, size_t n, long max_px, cllm_image *out,
                           cllm_error *err) {
    png_ctx c = {.data = d, .n = n};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &c, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    cllm_status st = info ? png_run(png, info, &c, max_px, out, err)
                          : cllm_err_set(err, CLLM_ENOMEM, "PNG: out of memory");
    if (png) png_destroy_read_struct(&png, info ? &info : NULL, NULL);
    free(c.rows);
    if (st) {
        free(c.rgb);
        out->width = out->height = 0;
        return st;
    }
    out->rgb = c.rgb;
    return CLLM_OK;
}
