/* Image content parts of chat requests (issue 34): an OpenAI `image_url` part (or the Responses
 * API's `input_image`, turned into one by responses.c) with a data: URL, or a file:// URL under
 * --allowed-local-media-path, is decoded and preprocessed here (src/image/) on the HTTP thread,
 * so the engine gets patches ready for the vision tower. http(s) URLs are refused: these
 * servers are offline by design. After the chat template, each image-pad token of the prompt
 * becomes the image's grid t*h*w / merge^2 pad tokens, as the HF processor expands it. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/log.h"
#include "image/image.h"
#include "server/srv_int.h"

#define BAD(param, ...) srv_bad(e, param, __VA_ARGS__)

/* Smaller images are refused: the processor would blow a 1x1 image up to 256x256 (current
 * transformers does; older releases refused sides under its factor, 32), inventing every pixel
 * of what the model sees. */
#define SRV_IMAGE_MIN_SIDE 4
/* an image file read from disk may not be larger than the request body could be */
#define SRV_IMAGE_FILE_MAX (64u << 20)

void srv_image_free(srv_gen *g) {
    for (int i = 0; i < g->n_images; i++) free((void *)g->images[i].pixels);
    free(g->images);
    g->images = NULL;
    g->n_images = 0;
}

static bool read_pixels_kw(json_t *kw, const char *where, long *minp, long *maxp, srv_err *e) {
    if (!kw || json_is_null(kw)) return true;
    if (!json_is_object(kw)) return BAD(where, "'%s' must be an object", where);
    const char *k;
    json_t *v;
    json_object_foreach(kw, k, v) {
        long *dst = !strcmp(k, "min_pixels") ? minp : !strcmp(k, "max_pixels") ? maxp : NULL;
        if (!dst)
            return BAD(where, "%s: '%.60s' is not supported (min_pixels, max_pixels)", where, k);
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1LL << 28))
            return BAD(where, "%s.%s must be an integer in [1, 268435456]", where, k);
        *dst = (long)json_integer_value(v);
    }
    return true;
}

bool srv_image_kwargs(cllm_server *s, json_t *body, srv_gen *g, srv_err *e) {
    (void)s; /* the server's --mm-processor-kwargs are in s->img_prep already */
    g->mm_min_pixels = g->mm_max_pixels = 0;
    return read_pixels_kw(json_object_get(body, "mm_processor_kwargs"), "mm_processor_kwargs",
                          &g->mm_min_pixels, &g->mm_max_pixels, e);
}

static void prep_pixels(json_t *o, const char *key, long *dst) {
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= (1LL << 28))
        *dst = (long)json_integer_value(v);
}

static void prep_triple(json_t *o, const char *key, float *dst) {
    json_t *v = json_object_get(o, key);
    if (!json_is_array(v) || json_array_size(v) != 3) return;
    for (size_t i = 0; i < 3; i++)
        if (!json_is_number(json_array_get(v, i))) return;
    for (size_t i = 0; i < 3; i++) dst[i] = (float)json_number_value(json_array_get(v, i));
}

/* --mm-processor-kwargs (cmd_serve.c checked its keys and ranges at start) */
static void server_kwargs(cllm_server *s) {
    json_t *d = s->o.mm_processor_kwargs ? json_loads(s->o.mm_processor_kwargs, 0, NULL) : NULL;
    prep_pixels(d, "min_pixels", &s->img_prep.min_pixels);
    prep_pixels(d, "max_pixels", &s->img_prep.max_pixels);
    json_decref(d);
}

void srv_image_load_prep(cllm_server *s) {
    cllm_image_prep *p = &s->img_prep;
    const char *tsrc = srv_chat_template_src(s);
    s->tmpl_image_parts = tsrc && strstr(tsrc, "image_pad");
    cllm_image_prep_default(p);
    if (s->vision.patch_size > 0) {
        p->patch_size = s->vision.patch_size;
        p->temporal_patch_size = s->vision.temporal_patch_size;
        p->merge_size = s->vision.merge_size;
    }
    if (!s->vision.present) return;
    char path[4096];
    snprintf(path, sizeof(path), "%s/preprocessor_config.json", s->o.model_dir);
    json_error_t je;
    json_t *o = s->o.model_dir ? json_load_file(path, 0, &je) : NULL;
    if (!o) { /* none: the Qwen3.5 processor's defaults */
        server_kwargs(s);
        return;
    }
    /* HF's Qwen2-VL processor: size {shortest_edge, longest_edge}, and min_pixels / max_pixels
     * over it when given (its backward-compatible keys) */
    json_t *size = json_object_get(o, "size");
    prep_pixels(size, "shortest_edge", &p->min_pixels);
    prep_pixels(size, "longest_edge", &p->max_pixels);
    prep_pixels(o, "min_pixels", &p->min_pixels);
    prep_pixels(o, "max_pixels", &p->max_pixels);
    prep_triple(o, "image_mean", p->mean);
    prep_triple(o, "image_std", p->std);
    json_t *rf = json_object_get(o, "rescale_factor");
    if (json_is_number(rf) && json_number_value(rf) > 0) p->rescale = json_number_value(rf);
    json_t *ps = json_object_get(o, "patch_size");
    if (json_is_integer(ps) && json_integer_value(ps) != p->patch_size)
        LOG_WARN("%s: patch_size %lld differs from the tower's %d (the tower's is used)", path,
                 (long long)json_integer_value(ps), p->patch_size);
    json_decref(o);
    server_kwargs(s);
    LOG_INFO("image processor: %s (pixels %ld..%ld)", path, p->min_pixels, p->max_pixels);
}

/* file://PATH under the allowed folder (both resolved, so no .. or link escapes it) */
static bool read_local(cllm_server *s, const char *url, uint8_t **bytes, size_t *n, srv_err *e) {
    if (!s->o.allowed_local_media_path)
        return BAD("messages", "file:// image URLs need the server's --allowed-local-media-path");
    char dir[PATH_MAX], path[PATH_MAX];
    if (!realpath(s->o.allowed_local_media_path, dir))
        return BAD("messages", "--allowed-local-media-path does not exist");
    if (!realpath(url + 7, path)) return BAD("messages", "image file %.200s not found", url + 7);
    size_t dl = strlen(dir);
    if (strncmp(path, dir, dl) || (path[dl] != '/' && path[dl] != 0))
        return BAD("messages", "image file %.200s is outside --allowed-local-media-path", url + 7);
    cllm_error fe = {0};
    size_t len = 0;
    char *data = cllm_read_file(path, SRV_IMAGE_FILE_MAX, &len, &fe);
    if (!data) return BAD("messages", "image file: %s", fe.msg);
    *bytes = (uint8_t *)data;
    *n = len;
    return true;
}

/* The URL string of an image part: image_url {url} or a string; input_image's image_url. */
static const char *part_url(json_t *part) {
    json_t *u = json_object_get(part, "image_url");
    if (json_is_object(u)) u = json_object_get(u, "url");
    return json_string_value(u);
}

bool srv_image_part(cllm_server *s, json_t *part, size_t msg, srv_gen *g, srv_err *e) {
    const char *ty = json_string_value(json_object_get(part, "type"));
    if (!s->vision.present)
        return BAD("messages", "messages[%zu].content: %s", msg,
                   s->vision.why_not ? s->vision.why_not : SRV_NO_VISION);
    if (strcmp(ty, "image_url") && strcmp(ty, "input_image"))
        return BAD("messages",
                   "messages[%zu].content: '%.40s' parts are not supported (text, "
                   "image_url)",
                   msg, ty);
    if (g->n_images >= s->o.limit_mm_images)
        return BAD("messages", "At most %d image(s) may be provided in one prompt.",
                   s->o.limit_mm_images);
    const char *url = part_url(part);
    if (!url)
        return BAD("messages", "messages[%zu].content: an image part needs image_url.url", msg);
    uint8_t *bytes = NULL;
    size_t n = 0;
    cllm_error ie = {0};
    if (!strncmp(url, "file://", 7)) {
        if (!read_local(s, url, &bytes, &n, e)) return false;
    } else if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
        return BAD("messages",
                   "messages[%zu].content: http(s) image URLs are not fetched (this server "
                   "does not go online); send the image as a data: URL",
                   msg);
    } else if (cllm_data_url_decode(url, strlen(url), &bytes, &n, NULL, 0, &ie) != CLLM_OK) {
        return BAD("messages", "messages[%zu].content: image_url: %s", msg, ie.msg);
    }
    cllm_image img = {0};
    cllm_status st = cllm_image_decode(bytes, n, NULL, &img, &ie);
    free(bytes);
    if (st != CLLM_OK) return BAD("messages", "messages[%zu].content: image: %s", msg, ie.msg);
    if (img.width < SRV_IMAGE_MIN_SIDE || img.height < SRV_IMAGE_MIN_SIDE) {
        int w = img.width, h = img.height;
        cllm_image_free(&img);
        return BAD("messages",
                   "messages[%zu].content: image is %dx%d pixels; each side must be at least %d",
                   msg, w, h, SRV_IMAGE_MIN_SIDE);
    }
    cllm_image_prep p = s->img_prep; /* the request's kwargs over it */
    if (g->mm_min_pixels) p.min_pixels = g->mm_min_pixels;
    if (g->mm_max_pixels) p.max_pixels = g->mm_max_pixels;
    float *pixels = NULL;
    int grid[3];
    st = cllm_image_preprocess(&img, &p, &pixels, grid, &ie);
    cllm_image_free(&img);
    if (st != CLLM_OK) {
        if (st == CLLM_ENOMEM) {
            srv_err_set(e, 500, "InternalServerError", NULL, "out of memory preparing an image");
            return false;
        }
        return BAD("messages", "messages[%zu].content: image: %s", msg, ie.msg);
    }
    cllm_image_input *ni = realloc(g->images, (size_t)(g->n_images + 1) * sizeof(*ni));
    if (!ni) {
        free(pixels);
        srv_err_set(e, 500, "InternalServerError", NULL, "out of memory");
        return false;
    }
    g->images = ni;
    cllm_image_input *im = &g->images[g->n_images++];
    memset(im, 0, sizeof(*im));
    im->pixels = pixels;
    memcpy(im->grid, grid, sizeof(grid));
    im->pos = -1;
    return true;
}

bool srv_image_expand(cllm_server *s, srv_gen *g, srv_err *e) {
    int pad = s->vision.image_token_id;
    long n_pad = 0, total = (long)g->prompt.n;
    for (size_t i = 0; pad >= 0 && i < g->prompt.n; i++) n_pad += g->prompt.ids[i] == pad;
    if (!g->n_images) {
        if (n_pad && s->vision.present)
            return BAD("messages",
                       "the prompt holds %ld image placeholder token(s) but no image was given",
                       n_pad);
        return true;
    }
    if (n_pad != g->n_images)
        return BAD("messages", "the prompt has %ld image placeholder(s) for %d image(s)", n_pad,
                   g->n_images);
    int m2 = s->vision.merge_size * s->vision.merge_size;
    for (int k = 0; k < g->n_images; k++)
        total += cllm_image_tokens(g->images[k].grid, s->vision.merge_size) - 1;
    if (total > INT_MAX / 2) return BAD("messages", "the images make the prompt too long");
    int32_t *ids = malloc((size_t)total * sizeof(int32_t));
    if (!ids) {
        srv_err_set(e, 500, "InternalServerError", NULL, "out of memory");
        return false;
    }
    size_t o = 0;
    int k = 0;
    for (size_t i = 0; i < g->prompt.n; i++) {
        if (g->prompt.ids[i] != pad) {
            ids[o++] = g->prompt.ids[i];
            continue;
        }
        cllm_image_input *im = &g->images[k++];
        im->pos = (int)o;
        long nt = (long)im->grid[0] * im->grid[1] * im->grid[2] / m2;
        for (long j = 0; j < nt; j++) ids[o++] = pad;
    }
    free(g->prompt.ids);
    g->prompt.ids = ids;
    g->prompt.n = o;
    g->prompt.cap = o;
    return true;
}
