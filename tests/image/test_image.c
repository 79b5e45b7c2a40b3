/* src/image/ unit tests: base64 and data: URLs; decoding of PNG (every colour type and depth,
 * interlaced), JPEG (gray, YCbCr, CMYK) and WebP (lossless, lossy, alpha) made here with the
 * libraries' encoders; every refusal (empty, over max_bytes, unknown and named formats, every
 * truncation of a small file, corrupt data, zero size, headers declaring 20000x20000 and more)
 * with its message and no leak (ASan in CI); smart_resize edge cases; the patch order.
 *
 * With arguments it is the C side of tests/image/image_ref.sh (compared with PIL + numpy):
 *   test_image prep MIN_PIXELS MAX_PIXELS FILE...   writes FILE.out (see prep_tool)
 *   test_image resize FILE.rgb W H OUT_W OUT_H OUT.rgb
 *   test_image smart < "h w min max" lines          prints "rh rw" or "ERR" per line */
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <webp/encode.h>

#include "base/base64.h"
#include "image/image.h"
#include "test.h"

/* ---- growable byte buffer ---- */
typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void buf_add(buf *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void be32(buf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    buf_add(b, x, 4);
}

static uint32_t crc32_of(const uint8_t *d, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= d[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static void png_chunk(buf *b, const char *type, const uint8_t *d, size_t n) {
    be32(b, (uint32_t)n);
    size_t at = b->n;
    buf_add(b, type, 4);
    if (n) buf_add(b, d, n);
    be32(b, crc32_of(b->p + at, n + 4));
}

/* ---- PNG made with libpng: sample(x, y, ch) in [0, 2^depth) ---- */
static uint32_t sample(int x, int y, int ch, int depth) {
    uint32_t v = (uint32_t)(x * 37 + y * 101 + ch * 59 + (x * y) % 13) * 2654435761u >> 7;
    return depth == 16 ? v & 0xffff : v & ((1u << depth) - 1);
}

static void on_png_write(png_structp png, png_bytep d, size_t n) {
    buf_add(png_get_io_ptr(png), d, n);
}
static void on_png_flush(png_structp png) {
    (void)png;
}

static int ctype_channels(int ctype) {
    switch (ctype) {
    case PNG_COLOR_TYPE_GRAY:
        return 1;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
        return 2;
    case PNG_COLOR_TYPE_RGB:
        return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA:
        return 4;
    default:
        return 1; /* palette */
    }
}

static png_color test_palette(int i) {
    png_color c = {(png_byte)(i * 7 + 3), (png_byte)(255 - i), (png_byte)(i * 13)};
    return c;
}

static buf make_png(int w, int h, int ctype, int depth, int interlace) {
    buf b = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_set_write_fn(png, &b, on_png_write, on_png_flush);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, ctype,
                 interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (ctype == PNG_COLOR_TYPE_PALETTE) {
        png_color pal[256];
        png_byte trns[256];
        for (int i = 0; i < 1 << depth; i++) pal[i] = test_palette(i), trns[i] = (png_byte)(i * 5);
        png_set_PLTE(png, info, pal, 1 << depth);
        png_set_tRNS(png, info, trns, 1 << depth, NULL);
    }
    png_write_info(png, info);
    int ch = ctype_channels(ctype), bits = ch * depth;
    size_t rowbytes = ((size_t)w * bits + 7) / 8;
    uint8_t *row = malloc(rowbytes);
    png_set_interlace_handling(png);
    uint8_t **rows = malloc(sizeof(uint8_t *) * h);
    for (int y = 0; y < h; y++) {
        rows[y] = calloc(1, rowbytes);
        for (int x = 0; x < w; x++)
            for (int c = 0; c < ch; c++) {
                uint32_t v = sample(x, y, c, depth);
                size_t bit = ((size_t)x * ch + c) * depth;
                if (depth == 16) {
                    rows[y][bit / 8] = (uint8_t)(v >> 8);
                    rows[y][bit / 8 + 1] = (uint8_t)v;
                } else if (depth == 8) {
                    rows[y][bit / 8] = (uint8_t)v;
                } else {
                    rows[y][bit / 8] |= (uint8_t)(v << (8 - depth - bit % 8));
                }
            }
    }
    png_write_image(png, rows);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    for (int y = 0; y < h; y++) free(rows[y]);
    free(rows);
    free(row);
    return b;
}

/* What PIL's convert("RGB") gives for sample (x, y) (16-bit gray: the high byte, see image.h) */
static void png_expect(int x, int y, int ctype, int depth, uint8_t rgb[3]) {
    if (ctype == PNG_COLOR_TYPE_PALETTE) {
        png_color c = test_palette((int)sample(x, y, 0, depth));
        rgb[0] = c.red, rgb[1] = c.green, rgb[2] = c.blue;
        return;
    }
    int ch = ctype == PNG_COLOR_TYPE_GRAY || ctype == PNG_COLOR_TYPE_GRAY_ALPHA ? 1 : 3;
    for (int k = 0; k < 3; k++) {
        uint32_t v = sample(x, y, ch == 1 ? 0 : k, depth);
        rgb[k] = (uint8_t)(depth == 16 ? v >> 8 : v * (255 / ((1u << depth) - 1)));
    }
}

static void test_png_types(void) {
    static const struct {
        int ctype, depth;
    } types[] = {
        {PNG_COLOR_TYPE_GRAY, 1},        {PNG_COLOR_TYPE_GRAY, 2},
        {PNG_COLOR_TYPE_GRAY, 4},        {PNG_COLOR_TYPE_GRAY, 8},
        {PNG_COLOR_TYPE_GRAY, 16},       {PNG_COLOR_TYPE_GRAY_ALPHA, 8},
        {PNG_COLOR_TYPE_GRAY_ALPHA, 16}, {PNG_COLOR_TYPE_PALETTE, 1},
        {PNG_COLOR_TYPE_PALETTE, 2},     {PNG_COLOR_TYPE_PALETTE, 4},
        {PNG_COLOR_TYPE_PALETTE, 8},     {PNG_COLOR_TYPE_RGB, 8},
        {PNG_COLOR_TYPE_RGB, 16},        {PNG_COLOR_TYPE_RGB_ALPHA, 8},
        {PNG_COLOR_TYPE_RGB_ALPHA, 16},
    };
    for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
        for (int il = 0; il < 2; il++) {
            int w = 13 + (int)t, h = 9 + il * 4;
            buf b = make_png(w, h, types[t].ctype, types[t].depth, il);
            cllm_image img;
            cllm_error err = {0};
            cllm_status st = cllm_image_decode(b.p, b.n, NULL, &img, &err);
            CHECK_MSG(st == CLLM_OK, "type %d depth %d: %s", types[t].ctype, types[t].depth,
                      err.msg);
            int bad = 0;
            if (st == CLLM_OK) {
                CHECK(img.width == w && img.height == h);
                for (int y = 0; y < h; y++)
                    for (int x = 0; x < w; x++) {
                        uint8_t e[3];
                        png_expect(x, y, types[t].ctype, types[t].depth, e);
                        bad += memcmp(e, img.rgb + ((size_t)y * w + x) * 3, 3) != 0;
                    }
            }
            CHECK_MSG(bad == 0, "type %d depth %d interlace %d: %d pixels differ", types[t].ctype,
                      types[t].depth, il, bad);
            cllm_image_free(&img);
            free(b.p);
        }
}

/* ---- JPEG made with libjpeg ---- */
static buf make_jpeg(int w, int h, int comps, const uint8_t *px, int progressive) {
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    unsigned char *mem = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&ci, &mem, &size);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = comps;
    ci.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 95, TRUE);
    if (progressive) jpeg_simple_progression(&ci);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW r = (JSAMPROW)(px + (size_t)ci.next_scanline * w * comps);
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    buf b = {0};
    buf_add(&b, mem, size);
    free(mem);
    return b;
}

static void test_jpeg(void) {
    int w = 40, h = 24;
    for (int comps = 1; comps <= 4; comps++) {
        if (comps == 2) continue;
        for (int prog = 0; prog < 2; prog++) {
            /* flat colour per 8x8 block keeps the loss small and predictable */
            uint8_t *px = malloc((size_t)w * h * comps);
            for (int y = 0; y < h; y++)
                for (int x = 0; x < w; x++)
                    for (int c = 0; c < comps; c++)
                        px[((size_t)y * w + x) * comps + c] =
                            (uint8_t)(40 + 50 * c + 30 * (x / 16) + 20 * (y / 16));
            buf b = make_jpeg(w, h, comps, px, prog);
            cllm_image img;
            cllm_error err = {0};
            cllm_status st = cllm_image_decode(b.p, b.n, NULL, &img, &err);
            CHECK_MSG(st == CLLM_OK, "JPEG %d components: %s", comps, err.msg);
            int worst = 0;
            for (int i = 0; st == CLLM_OK && i < w * h; i++) {
                const uint8_t *p = px + (size_t)i * comps;
                for (int k = 0; k < 3; k++) {
                    int e = comps == 1 ? p[0] : comps == 3 ? p[k] : 0;
                    if (comps == 4) { /* PIL: Adobe-inverted CMYK, cmyk2rgb */
                        int inv = 255 - p[k], nk = p[3];
                        e = nk - (inv * nk + 127) / 255;
                    }
                    int d = abs(e - img.rgb[(size_t)i * 3 + k]);
                    if (d > worst) worst = d;
                }
            }
            CHECK_MSG(worst <= 4, "JPEG %d components: off by %d", comps, worst);
            /* every truncation is refused (the last two bytes are the EOI marker, which
             * libjpeg need not read) */
            int accepted = 0;
            for (size_t n = 1; n + 2 < b.n; n++) {
                cllm_image t;
                st = cllm_image_decode(b.p, n, NULL, &t, &err);
                if (st == CLLM_OK)
                    accepted++, cllm_image_free(&t);
                else
                    CHECK(t.rgb == NULL && err.msg[0]);
            }
            CHECK_MSG(accepted == 0, "JPEG %d components: %d truncations accepted", comps,
                      accepted);
            cllm_image_free(&img);
            free(px);
            free(b.p);
        }
    }
}

/* ---- WebP made with libwebp ---- */
static void test_webp(void) {
    int w = 37, h = 21;
    uint8_t *rgba = malloc((size_t)w * h * 4), *rgb = malloc((size_t)w * h * 3);
    uint8_t *smooth_rgb = malloc((size_t)w * h * 3), *smooth_rgba = malloc((size_t)w * h * 4);
    for (int i = 0; i < w * h; i++)
        for (int c = 0; c < 4; c++) {
            /* lossless: anything; lossy: smooth, so the loss stays small */
            uint8_t v = (uint8_t)sample(i % w, i / w, c, 8);
            uint8_t smooth = (uint8_t)(40 + 2 * (i % w) + 3 * (i / w) + 20 * c);
            if (c < 3) smooth_rgb[i * 3 + c] = smooth;
            rgba[i * 4 + c] = c == 3 ? 255 - (uint8_t)(i % 7) : v;
            if (c < 3) rgb[i * 3 + c] = v;
            smooth_rgba[i * 4 + c] = c < 3 ? smooth : rgba[i * 4 + 3];
        }
    for (int kind = 0; kind < 4; kind++) {
        uint8_t *enc = NULL;
        size_t n = kind == 0   ? WebPEncodeLosslessRGB(rgb, w, h, w * 3, &enc)
                   : kind == 1 ? WebPEncodeLosslessRGBA(rgba, w, h, w * 4, &enc)
                   : kind == 2 ? WebPEncodeRGB(smooth_rgb, w, h, w * 3, 95, &enc)
                               : WebPEncodeRGBA(smooth_rgba, w, h, w * 4, 95, &enc);
        const uint8_t *want = kind < 2 ? rgb : smooth_rgb;
        CHECK(n > 0);
        cllm_image img;
        cllm_error err = {0};
        cllm_status st = cllm_image_decode(enc, n, NULL, &img, &err);
        CHECK_MSG(st == CLLM_OK, "WebP kind %d: %s", kind, err.msg);
        int worst = 0;
        for (int i = 0; st == CLLM_OK && i < w * h * 3; i++) {
            int d = abs(want[i] - img.rgb[i]);
            if (d > worst) worst = d;
        }
        if (kind < 2)
            CHECK_MSG(worst == 0, "lossless WebP kind %d: off by %d", kind, worst);
        else
            CHECK_MSG(worst <= 8 && st == CLLM_OK, "lossy WebP kind %d: off by %d", kind, worst);
        cllm_image_free(&img);
        int accepted = 0;
        for (size_t k = 1; k < n; k++) {
            cllm_image t;
            if (cllm_image_decode(enc, k, NULL, &t, &err) == CLLM_OK)
                accepted++, cllm_image_free(&t);
        }
        CHECK_MSG(accepted == 0, "WebP kind %d: %d truncations accepted", kind, accepted);
        WebPFree(enc);
    }
    free(rgba);
    free(rgb);
    free(smooth_rgba);
    free(smooth_rgb);
}

/* ---- refusals ---- */
static void expect_refused(const void *d, size_t n, const cllm_image_limits *lim,
                           const char *needle, const char *what) {
    cllm_image img;
    cllm_error err = {0};
    cllm_status st = cllm_image_decode(d, n, lim, &img, &err);
    CHECK_MSG(st == CLLM_EINVAL && img.rgb == NULL && strstr(err.msg, needle),
              "%s: status %d, message '%s' (wanted '%s')", what, st, err.msg, needle);
    if (st == CLLM_OK) cllm_image_free(&img);
}

/* A PNG declaring w x h: signature, IHDR, a small IDAT, IEND, all CRCs right. */
static buf png_header_only(uint32_t w, uint32_t h) {
    buf b = {0};
    buf_add(&b, "\x89PNG\r\n\x1a\n", 8);
    uint8_t ihdr[13] = {(uint8_t)(w >> 24),
                        (uint8_t)(w >> 16),
                        (uint8_t)(w >> 8),
                        (uint8_t)w,
                        (uint8_t)(h >> 24),
                        (uint8_t)(h >> 16),
                        (uint8_t)(h >> 8),
                        (uint8_t)h,
                        8,
                        0,
                        0,
                        0,
                        0};
    png_chunk(&b, "IHDR", ihdr, 13);
    static const uint8_t idat[] = {0x78, 0x9c, 0x63, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01};
    png_chunk(&b, "IDAT", idat, sizeof(idat));
    png_chunk(&b, "IEND", NULL, 0);
    return b;
}

static void test_refusals(void) {
    expect_refused("", 0, NULL, "empty", "empty");
    expect_refused("hello world, not an image", 25, NULL, "unknown format", "text");
    expect_refused("GIF89a\x01\x00\x01\x00", 10, NULL, "GIF", "GIF");
    expect_refused("BM\x00\x00\x00\x00", 6, NULL, "BMP", "BMP");
    expect_refused("\x00\x00\x00\x1c"
                   "ftypavif",
                   12, NULL, "AVIF", "AVIF");

    buf ok = make_png(20, 10, PNG_COLOR_TYPE_RGB, 8, 0);
    cllm_image_limits small = {.max_bytes = ok.n - 1};
    expect_refused(ok.p, ok.n, &small, "over the limit", "max_bytes");
    cllm_image_limits few = {.max_pixels_decoded = 199};
    expect_refused(ok.p, ok.n, &few, "over the limit", "max_pixels_decoded");
    few.max_pixels_decoded = 200;
    cllm_image img;
    cllm_error err = {0};
    CHECK(cllm_image_decode(ok.p, ok.n, &few, &img, &err) == CLLM_OK);
    cllm_image_free(&img);

    /* every truncation of a PNG before its last IDAT's CRC is refused (IEND is not needed,
     * as PIL does not need it) */
    size_t idat_end = 8;
    for (size_t at = 8; at + 8 <= ok.n;) {
        uint32_t len =
            (uint32_t)ok.p[at] << 24 | ok.p[at + 1] << 16 | ok.p[at + 2] << 8 | ok.p[at + 3];
        if (!memcmp(ok.p + at + 4, "IDAT", 4)) idat_end = at + 12 + len;
        at += 12 + len;
    }
    int accepted = 0;
    for (size_t n = 1; n < idat_end; n++) {
        cllm_image t;
        cllm_status st = cllm_image_decode(ok.p, n, NULL, &t, &err);
        if (st == CLLM_OK)
            accepted++, cllm_image_free(&t);
        else
            CHECK(t.rgb == NULL && err.msg[0]);
    }
    CHECK_MSG(accepted == 0, "PNG: %d truncations accepted", accepted);
    expect_refused(ok.p, idat_end - 6, NULL, "truncated", "PNG cut inside IDAT");

    /* corrupt: a flipped byte in IDAT fails its CRC; a bad IHDR CRC; garbage after the
     * signature */
    buf bad = {0};
    buf_add(&bad, ok.p, ok.n);
    bad.p[idat_end - 6] ^= 0x55;
    expect_refused(bad.p, bad.n, NULL, "PNG:", "IDAT corrupt");
    memcpy(bad.p, ok.p, ok.n);
    bad.p[8 + 8 + 5] ^= 1; /* inside IHDR: its CRC no longer matches */
    expect_refused(bad.p, bad.n, NULL, "PNG:", "IHDR CRC");
    memcpy(bad.p + 8, "garbage!garbage!", 16);
    expect_refused(bad.p, bad.n, NULL, "PNG:", "garbage");
    free(bad.p);
    free(ok.p);

    /* headers that declare too much (a bomb: the data would inflate to gigabytes) or nothing */
    buf big = png_header_only(20000, 20000);
    expect_refused(big.p, big.n, NULL, "20000x20000 pixels, over the limit", "PNG 20000^2");
    free(big.p);
    big = png_header_only(1000000, 1000000);
    expect_refused(big.p, big.n, NULL, "over the limit", "PNG 10^6 x 10^6");
    free(big.p);
    big = png_header_only(0x7fffffff, 0x7fffffff);
    expect_refused(big.p, big.n, NULL, "PNG:", "PNG 2^31-1 square");
    free(big.p);
    big = png_header_only(0, 5);
    expect_refused(big.p, big.n, NULL, "PNG:", "PNG zero width");
    free(big.p);

    /* JPEG: dimensions patched in the SOF */
    uint8_t px[16 * 16 * 3];
    memset(px, 128, sizeof(px));
    buf j = make_jpeg(16, 16, 3, px, 0);
    size_t sof = 0;
    for (size_t i = 2; i + 9 < j.n; i++)
        if (j.p[i] == 0xff && j.p[i + 1] == 0xc0) {
            sof = i;
            break;
        }
    CHECK(sof > 0);
    j.p[sof + 5] = 0xea, j.p[sof + 6] = 0x60; /* height 60000 */
    j.p[sof + 7] = 0xea, j.p[sof + 8] = 0x60; /* width 60000 */
    expect_refused(j.p, j.n, NULL, "60000x60000 pixels, over the limit", "JPEG 60000^2");
    j.p[sof + 5] = 0, j.p[sof + 6] = 0;
    expect_refused(j.p, j.n, NULL, "JPEG:", "JPEG zero height");
    expect_refused(j.p, 3, NULL, "JPEG:", "JPEG SOI only");
    memset(j.p + 4, 0x17, j.n - 4);
    expect_refused(j.p, j.n, NULL, "JPEG:", "JPEG garbage");
    free(j.p);

    /* WebP: a lossless header declaring 16383 x 16383 (268 Mpx) */
    uint8_t wp[30] = "RIFF\x16\x00\x00\x00WEBPVP8L\x0a\x00\x00\x00\x2f";
    uint32_t bits = (16383 - 1) | (uint32_t)(16383 - 1) << 14;
    wp[21] = (uint8_t)bits, wp[22] = (uint8_t)(bits >> 8), wp[23] = (uint8_t)(bits >> 16);
    wp[24] = (uint8_t)(bits >> 24);
    expect_refused(wp, 30, NULL, "16383x16383 pixels, over the limit", "WebP 16383^2");
    expect_refused("RIFF\x04\x00\x00\x00WEBPjunkjunk", 20, NULL, "WebP:", "WebP junk");
}

/* ---- base64 and data: URLs ---- */
static void test_base64(void) {
    static const struct {
        const char *in, *out;
    } ok[] = {{"", ""},    {"Zg==", "f"}, {"Zm8=", "fo"},       {"Zm9v", "foo"},
              {"Zg", "f"}, {"Zm8", "fo"}, {"Zm9vYg==", "foob"}, {" Zm9v\r\nYmFy\n", "foobar"}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint8_t *o;
        size_t n;
        cllm_error err = {0};
        cllm_status st = cllm_base64_decode(ok[i].in, strlen(ok[i].in), &o, &n, &err);
        CHECK_MSG(st == CLLM_OK && n == strlen(ok[i].out) && !memcmp(o, ok[i].out, n), "'%s': %s",
                  ok[i].in, err.msg);
        free(o);
    }
    static const char *bad[] = {"Zg=a", "Z", "Zh==", "Zm9=", "Zm9v=", "Zm-v", "Zg===", "Z==="};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t *o = (uint8_t *)"x";
        size_t n;
        cllm_error err = {0};
        cllm_status st = cllm_base64_decode(bad[i], strlen(bad[i]), &o, &n, &err);
        CHECK_MSG(st == CLLM_EINVAL && o == NULL && !strncmp(err.msg, "base64: ", 8), "'%s'",
                  bad[i]);
    }
    for (int len = 0; len < 50; len++) { /* encode then decode */
        uint8_t d[50];
        for (int i = 0; i < len; i++) d[i] = (uint8_t)test_irand(256);
        char *e = cllm_base64_encode(d, (size_t)len);
        uint8_t *o;
        size_t n;
        CHECK(e && strlen(e) == (size_t)(len + 2) / 3 * 4);
        CHECK(cllm_base64_decode(e, strlen(e), &o, &n, NULL) == CLLM_OK && n == (size_t)len &&
              !memcmp(o, d, n));
        free(o);
        free(e);
    }
}

static void test_data_url(void) {
    char mime[32];
    uint8_t *b;
    size_t n;
    cllm_error err = {0};
    const char *u = "data:Image/PNG;base64,Zm9vYmFy";
    CHECK(cllm_data_url_decode(u, strlen(u), &b, &n, mime, sizeof(mime), &err) == CLLM_OK);
    CHECK(n == 6 && !memcmp(b, "foobar", 6) && !strcmp(mime, "image/png"));
    free(b);
    u = "DATA:;charset=x;base64,Zm9v";
    CHECK(cllm_data_url_decode(u, strlen(u), &b, &n, mime, 4, &err) == CLLM_OK && n == 3 &&
          mime[0] == '\0');
    free(b);
    u = "data:image/jpeg;base64,Zm9v"; /* mime truncated to the buffer */
    CHECK(cllm_data_url_decode(u, strlen(u), &b, &n, mime, 6, &err) == CLLM_OK &&
          !strcmp(mime, "image"));
    free(b);
    static const struct {
        const char *url, *needle;
    } bad[] = {{"https://example.com/a.png", "'https' scheme is not supported"},
               {"http://x", "'http' scheme"},
               {"file:///etc/passwd", "'file' scheme"},
               {"/tmp/a.png", "not a URL"},
               {"", "not a URL"},
               {"data:image/png,Zm9v", "not base64"},
               {"data:image/png;base64", "without a ','"},
               {"data:image/png;base64,Zm9v!", "base64: invalid character"}};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        b = (uint8_t *)"x";
        CHECK_MSG(cllm_data_url_decode(bad[i].url, strlen(bad[i].url), &b, &n, mime, sizeof(mime),
                                       &err) == CLLM_EINVAL &&
                      b == NULL && strstr(err.msg, bad[i].needle),
                  "'%s': '%s'", bad[i].url, err.msg);
    }
}

/* ---- smart_resize and preprocess ---- */
static void test_smart_resize(void) {
    cllm_image_prep p;
    cllm_image_prep_default(&p);
    static const struct {
        int h, w, rh, rw;
    } cases[] = {
        {1, 1, 256, 256}, /* tiny: grown to min_pixels, as transformers does */
        {32, 32, 256, 256},       {1000, 1000, 992, 992},
        {1080, 1920, 1088, 1920}, {20000, 20000, 4096, 4096}, /* max_pixels: 4096^2 */
        {1, 200, 32, 3648},                                   /* ratio exactly 200: accepted */
        {5000, 25, 4992, 32},                                 /* 200:1 tall */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rh = 0, rw = 0;
        cllm_error err = {0};
        cllm_status st = cllm_image_smart_resize(cases[i].h, cases[i].w, &p, &rh, &rw, &err);
        CHECK_MSG(st == CLLM_OK && rh == cases[i].rh && rw == cases[i].rw, "%dx%d -> %dx%d (%s)",
                  cases[i].h, cases[i].w, rh, rw, err.msg);
    }
    int rh, rw;
    cllm_error err = {0};
    CHECK(cllm_image_smart_resize(1, 201, &p, &rh, &rw, &err) == CLLM_EINVAL &&
          strstr(err.msg, "aspect ratio"));
    CHECK(cllm_image_smart_resize(0, 10, &p, &rh, &rw, &err) == CLLM_EINVAL);
    /* Python's round() halves to even: 48/32 = 1.5 -> 2, 80/32 = 2.5 -> 2 */
    p.min_pixels = 1;
    CHECK(cllm_image_smart_resize(48, 320, &p, &rh, &rw, &err) == CLLM_OK && rh == 64);
    CHECK(cllm_image_smart_resize(80, 320, &p, &rh, &rw, &err) == CLLM_OK && rh == 64);
    CHECK(cllm_image_smart_resize(112, 320, &p, &rh, &rw, &err) == CLLM_OK && rh == 128);
    p.min_pixels = 10, p.max_pixels = 5;
    CHECK(cllm_image_smart_resize(64, 64, &p, &rh, &rw, &err) == CLLM_EINVAL);
}

static void test_preprocess(void) {
    cllm_image_prep p;
    cllm_image_prep_default(&p);
    p.min_pixels = 64 * 64;
    cllm_image img = {.width = 64, .height = 64, .rgb = malloc(64 * 64 * 3)};
    for (int y = 0; y < 64; y++)
        for (int x = 0; x < 64; x++)
            for (int c = 0; c < 3; c++) img.rgb[(y * 64 + x) * 3 + c] = (uint8_t)(x * 3 + y + c);
    float *px;
    int grid[3];
    cllm_error err = {0};
    CHECK(cllm_image_preprocess(&img, &p, &px, grid, &err) == CLLM_OK);
    CHECK(grid[0] == 1 && grid[1] == 4 && grid[2] == 4 && cllm_image_tokens(grid, 2) == 4);
    /* value of pixel (y, x, c) after rescale + normalize */
#define V(y, x, c) (((float)((double)(uint8_t)((x)*3 + (y) + (c)) / 255.0) - 0.5f) / 0.5f)
    const int D = 3 * 2 * 16 * 16;
    CHECK(px[0] == V(0, 0, 0));
    CHECK(px[1 * D] == V(0, 16, 0)); /* row 1: merge_w = 1 */
    CHECK(px[2 * D] == V(16, 0, 0)); /* row 2: merge_h = 1 */
    CHECK(px[4 * D] == V(0, 32, 0)); /* row 4: the next 2x2 block to the right */
    CHECK(px[8 * D] == V(32, 0, 0)); /* row 8: the next block row */
    CHECK(px[5 * D + 1 * 512 + 1 * 256 + 2 * 16 + 3] == V(2, 32 + 16 + 3, 1)); /* c1 t1 */
    CHECK(px[5 * D + 1 * 512 + 2 * 16 + 3] == px[5 * D + 1 * 512 + 256 + 2 * 16 + 3]);
#undef V
    free(px);
    cllm_image_free(&img);
    /* a 1x1 image is accepted and grows to 256x256: 256 patches, 64 tokens */
    cllm_image one = {.width = 1, .height = 1, .rgb = malloc(3)};
    memset(one.rgb, 200, 3);
    cllm_image_prep_default(&p);
    CHECK(cllm_image_preprocess(&one, &p, &px, grid, &err) == CLLM_OK && grid[1] == 16 &&
          grid[2] == 16 && cllm_image_tokens(grid, 2) == 64);
    float v200 = ((float)(200 / 255.0) - 0.5f) / 0.5f;
    int same = 1;
    for (int i = 0; i < 256 * 1536; i++) same &= px[i] == v200;
    CHECK(same); /* a constant image stays constant through the bicubic resize */
    free(px);
    cllm_image_free(&one);
}

/* ---- tool modes for tests/image/image_ref.sh ---- */
static int write_all(FILE *f, const void *d, size_t n) {
    return fwrite(d, 1, n, f) == n;
}

/* FILE.out: int32 [status, w, h, rh, rw, grid_t, grid_h, grid_w], then the decoded RGB, the
 * resized RGB and the float rows; status 1 = refused, followed by the message. */
static int prep_tool(int argc, char **argv) {
    cllm_image_prep p;
    cllm_image_prep_default(&p);
    p.min_pixels = atol(argv[2]);
    p.max_pixels = atol(argv[3]);
    for (int i = 4; i < argc; i++) {
        buf in = {0};
        FILE *f = fopen(argv[i], "rb");
        uint8_t chunk[65536];
        size_t k;
        while (f && (k = fread(chunk, 1, sizeof(chunk), f)) > 0) buf_add(&in, chunk, k);
        if (f) fclose(f);
        char path[4096];
        snprintf(path, sizeof(path), "%s.out", argv[i]);
        FILE *o = fopen(path, "wb");
        if (!o) return 2;
        cllm_image img = {0}, rs = {0};
        cllm_error err = {0};
        float *px = NULL;
        int32_t hd[8] = {0}, grid[3] = {0};
        int rh = 0, rw = 0;
        cllm_status st = cllm_image_decode(in.p, in.n, NULL, &img, &err);
        if (!st) st = cllm_image_smart_resize(img.height, img.width, &p, &rh, &rw, &err);
        if (!st) st = cllm_image_resize_bicubic(&img, rw, rh, &rs, &err);
        if (!st) st = cllm_image_preprocess(&img, &p, &px, grid, &err);
        hd[0] = st != CLLM_OK;
        hd[1] = img.width, hd[2] = img.height, hd[3] = rh, hd[4] = rw;
        hd[5] = grid[0], hd[6] = grid[1], hd[7] = grid[2];
        int ok = write_all(o, hd, sizeof(hd));
        if (st)
            ok &= write_all(o, err.msg, strlen(err.msg));
        else
            ok &= write_all(o, img.rgb, (size_t)img.width * img.height * 3) &&
                  write_all(o, rs.rgb, (size_t)rw * rh * 3) &&
                  write_all(o, px, (size_t)rh * rw * 3 * p.temporal_patch_size * sizeof(float));
        ok &= fclose(o) == 0;
        free(px);
        cllm_image_free(&img);
        cllm_image_free(&rs);
        free(in.p);
        if (!ok) return 2;
    }
    return 0;
}

static int resize_tool(char **argv) {
    cllm_image in = {.width = atoi(argv[3]), .height = atoi(argv[4])}, out;
    size_t n = (size_t)in.width * in.height * 3;
    in.rgb = malloc(n);
    FILE *f = fopen(argv[2], "rb");
    if (!f || fread(in.rgb, 1, n, f) != n) return 2;
    fclose(f);
    cllm_error err = {0};
    if (cllm_image_resize_bicubic(&in, atoi(argv[5]), atoi(argv[6]), &out, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    f = fopen(argv[7], "wb");
    int ok = f && write_all(f, out.rgb, (size_t)out.width * out.height * 3);
    if (f) ok &= fclose(f) == 0;
    cllm_image_free(&in);
    cllm_image_free(&out);
    return ok ? 0 : 2;
}

static int smart_tool(void) {
    long h, w, mn, mx;
    cllm_image_prep p;
    cllm_image_prep_default(&p);
    while (scanf("%ld %ld %ld %ld", &h, &w, &mn, &mx) == 4) {
        p.min_pixels = mn, p.max_pixels = mx;
        int rh, rw;
        if (cllm_image_smart_resize((int)h, (int)w, &p, &rh, &rw, NULL))
            printf("ERR\n");
        else
            printf("%d %d\n", rh, rw);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "prep")) return prep_tool(argc, argv);
    if (argc == 8 && !strcmp(argv[1], "resize")) return resize_tool(argv);
    if (argc == 2 && !strcmp(argv[1], "smart")) return smart_tool();
    test_base64();
    test_data_url();
    test_png_types();
    test_jpeg();
    test_webp();
    test_refusals();
    test_smart_resize();
    test_preprocess();
    return test_report("test_image");
}
