/* JPEG decoding with libjpeg(-turbo) into RGB8, matching what PIL (which decodes through the
 * same library) hands the HF processor after convert("RGB").
 *
 * libjpeg reports fatal errors through error_exit, which must not return: ours formats the
 * message and longjmps to jpg_run's setjmp; jpeg_destroy_decompress then frees all libjpeg
 * memory, and our buffers live in the jpg_ctx the caller owns. Messages are never printed. A
 * premature end of data is only a warning to libjpeg (it pads with gray); it is an error here,
 * as PIL raises "image file is truncated". Other corrupt-data warnings (extraneous bytes before
 * a marker) are accepted, as PIL accepts them. */
#include "image/image_int.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

/* Progressive files can carry any number of scans, each a pass over the whole coefficient
 * buffer: a small file could cost minutes. Real encoders write about 10 (libjpeg's default
 * progression); libjpeg-turbo's own tools cap at 500 (djpeg -maxscan suggests it). */
#define JPG_MAX_SCANS 1000

typedef struct jpg_ctx {
    struct jpeg_error_mgr pub; /* first: libjpeg's err pointer is cast back to jpg_ctx */
    struct jpeg_progress_mgr progress;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
    uint8_t *rgb, *row; /* the image being filled and one decoded row; freed by the caller */
} jpg_ctx;

static void jpg_on_error(j_common_ptr ci) {
    jpg_ctx *c = (jpg_ctx *)ci->err;
    ci->err->format_message(ci, c->msg);
    longjmp(c->jump, 1);
}

static void jpg_on_message(j_common_ptr ci, int level) {
    if (level < 0 && ci->err->msg_code == JWRN_JPEG_EOF) {
        jpg_ctx *c = (jpg_ctx *)ci->err;
        snprintf(c->msg, sizeof(c->msg), "the data is truncated");
        longjmp(c->jump, 1);
    }
}

static void jpg_on_output(j_common_ptr ci) {
    (void)ci;
}

static void jpg_on_progress(j_common_ptr ci) {
    j_decompress_ptr d = (j_decompress_ptr)ci;
    if (d->is_decompressor && d->input_scan_number > JPG_MAX_SCANS) {
        jpg_ctx *c = (jpg_ctx *)ci->err;
        snprintf(c->msg, sizeof(c->msg), "more than %d progressive scans", JPG_MAX_SCANS);
        longjmp(c->jump, 1);
    }
}

/* PIL's convert("RGB") of a 4-channel JPEG: PIL always reads it as Adobe-inverted CMYK
 * ("CMYK;I"), then cmyk2rgb: with c = 255 - C and k = 255 - K, R = clip(K - c * K / 255) using
 * its rounding (MULDIV255). */
static uint8_t cmyk_channel(int stored, int stored_k) {
    int inv = 255 - stored, nk = stored_k, t = inv * nk + 128;
    int v = nk - (((t >> 8) + t) >> 8);
    return (uint8_t)(v <= 0 ? 0 : v > 255 ? 255 : v);
}

static void jpg_row_to_rgb(const uint8_t *in, int comps, int w, uint8_t *out) {
    for (int x = 0; x < w; x++, out += 3) {
        const uint8_t *p = in + (size_t)x * comps;
        if (comps == 1)
            out[0] = out[1] = out[2] = p[0];
        else if (comps == 3)
            memcpy(out, p, 3);
        else
            for (int k = 0; k < 3; k++) out[k] = cmyk_channel(p[k], p[3]);
    }
}

static cllm_status jpg_run(struct jpeg_decompress_struct *ci, jpg_ctx *c, const uint8_t *d,
                           size_t n, long max_px, cllm_image *out, cllm_error *err) {
    if (setjmp(c->jump)) return cllm_err_set(err, CLLM_EINVAL, "JPEG: %s", c->msg);
    jpeg_create_decompress(ci);
    ci->progress = &c->progress;
    jpeg_mem_src(ci, d, (unsigned long)n);
    jpeg_read_header(ci, TRUE);
    cllm_status st =
        img_check_dims("JPEG", (long)ci->image_width, (long)ci->image_height, max_px, err);
    if (st) return st;
    int comps = ci->num_components;
    if (comps == 1)
        ci->out_color_space = JCS_GRAYSCALE;
    else if (comps == 3)
        ci->out_color_space = JCS_RGB;
    else if (comps == 4)
        ci->out_color_space = JCS_CMYK; /* libjpeg turns YCCK into CMYK */
    else
        return cllm_err_set(err, CLLM_EINVAL, "JPEG: %d colour components are not handled", comps);
    jpeg_start_decompress(ci);
    int w = (int)ci->output_width, h = (int)ci->output_height;
    if (ci->output_components != comps)
        return cllm_err_set(err, CLLM_EINVAL, "JPEG: unexpected output of %d components",
                            ci->output_components);
    c->rgb = malloc((size_t)w * h * 3);
    c->row = malloc((size_t)w * comps);
    if (!c->rgb || !c->row)
        return cllm_err_set(err, CLLM_ENOMEM, "JPEG: out of memory for %dx%d pixels", w, h);
    while (ci->output_scanline < ci->output_height) {
        JSAMPROW r = c->row;
        size_t y = ci->output_scanline;
        if (jpeg_read_scanlines(ci, &r, 1) != 1)
            return cllm_err_set(err, CLLM_EINVAL, "JPEG: the data is truncated");
        jpg_row_to_rgb(c->row, comps, w, c->rgb + y * w * 3);
    }
    out->width = w;
    out->height = h;
    return CLLM_OK;
}

cllm_status img_decode_jpeg(const uint8_t *d, size_t n, long max_px, cllm_image *out,
                            cllm_error *err) {
    jpg_ctx *c = calloc(1, sizeof(*c));
    struct jpeg_decompress_struct *ci = calloc(1, sizeof(*ci));
    if (!c || !ci) {
        free(c);
        free(ci);
        return cllm_err_set(err, CLLM_ENOMEM, "JPEG: out of memory");
    }
    ci->err = jpeg_std_error(&c->pub);
    c->pub.error_exit = jpg_on_error;
    c->pub.emit_message = jpg_on_message;
    c->pub.output_message = jpg_on_output;
    c->progress.progress_monitor = jpg_on_progress;
    cllm_status st = jpg_run(ci, c, d, n, max_px, out, err);
    jpeg_destroy_decompress(ci);
    free(c->row);
    if (st) {
        free(c->rgb);
        out->width = out->height = 0;
    } else {
        out->rgb = c->rgb;
    }
    free(c);
    free(ci);
    return st;
}
