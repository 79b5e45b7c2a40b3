/* Image input in the scheduler (issue 34). A request's images are copied at submit with their
 * 3-D M-RoPE positions worked out (Qwen3-VL's rule, docs/model.md: text before an image at
 * t = h = w = its index; the image's tokens at start + (frame, row, column) over the merged
 * grid; the text after it from the image's largest position + 1), encoded by the vision tower
 * before the request is admitted, a few work units per engine step (the tower's blocks; an
 * image's tokens are its cost against the step's token budget), the rows kept while the request
 * lives (a preempted or forked sequence does not encode again), and handed to each forward call
 * that covers its pad tokens. The prefix cache keys a block by the content hash of every image
 * overlapping it, so the same image twice hits and two images behind the same text do not.
 *
 * Limits: one image encodes at a time, the head of the waiting queue's (the requests behind it
 * wait, first come first served); images are refused under tensor parallel. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/mem.h"
#include "engine/sched_int.h"

void sched_img_free(eng_req *q) {
    for (int i = 0; i < q->n_imgs; i++) {
        if (q->imgs[i].job) q->imgs[i].ops->image_free(q->imgs[i].mctx, q->imgs[i].job);
        free(q->imgs[i].pixels);
        free(q->imgs[i].emb);
    }
    free(q->imgs);
    free(q->mrope);
    q->imgs = NULL;
    q->mrope = NULL;
    q->n_imgs = 0;
}

/* The prompt's M-RoPE positions ([n_prompt][3]) and the delta of every later token. */
static void mrope_positions(eng_req *q, int merge) {
    int next = 0, at = 0; /* next text position; prompt index */
    for (int k = 0; k <= q->n_imgs; k++) {
        int end = k < q->n_imgs ? q->imgs[k].pos : q->n_prompt;
        for (; at < end; at++, next++)
            q->mrope[3 * at] = q->mrope[3 * at + 1] = q->mrope[3 * at + 2] = next;
        if (k == q->n_imgs) break;
        const eng_img *im = &q->imgs[k];
        int gt = im->grid[0], gh = im->grid[1] / merge, gw = im->grid[2] / merge;
        for (int f = 0; f < gt; f++)
            for (int r = 0; r < gh; r++)
                for (int c = 0; c < gw; c++, at++) {
                    q->mrope[3 * at] = next + f;
                    q->mrope[3 * at + 1] = next + r;
                    q->mrope[3 * at + 2] = next + c;
                }
        /* HF get_rope_index: current_pos += max(grid_h, grid_w) / merge (the frame count is not
         * part of it; an image has one) */
        next += gh > gw ? gh : gw;
    }
    q->rope_delta = next - q->n_prompt;
}

cllm_status sched_img_copy(const sched_cfg *cfg, const cllm_request *r, eng_req *q,
                           cllm_error *err) {
    if (r->n_images <= 0) return CLLM_OK;
    if (!r->images) return cllm_err_set(err, CLLM_EINVAL, "images: NULL with n_images > 0");
    if (cfg->vision_merge < 1)
        return cllm_err_set(err, CLLM_EINVAL,
                            cfg->vision_refused ? cfg->vision_refused
                                                : "this model has no vision tower: image input "
                                                  "is not supported");
    int m = cfg->vision_merge, prev_end = 0;
    long n_pad = 0;
    for (int i = 0; i < r->n_prompt; i++) n_pad += r->prompt[i] == cfg->image_token_id;
    long n_img_tok = 0;
    for (int k = 0; k < r->n_images; k++) {
        const cllm_image_input *im = &r->images[k];
        const int *g = im->grid;
        if (!im->pixels || g[0] < 1 || g[1] < m || g[2] < m || g[1] % m || g[2] % m ||
            (long)g[0] * g[1] * g[2] > (1L << 24))
            return cllm_err_set(err, CLLM_EINVAL,
                                "image %d: grid %dx%dx%d must be positive and its height and "
                                "width multiples of the merge size %d",
                                k, g[0], g[1], g[2], m);
        long n = (long)g[0] * g[1] * g[2] / ((long)m * m);
        if (im->pos < prev_end || im->pos + n > r->n_prompt)
            return cllm_err_set(err, CLLM_EINVAL,
                                "image %d: its %ld tokens at prompt position %d overlap another "
                                "image or run past the prompt (%d tokens)",
                                k, n, im->pos, r->n_prompt);
        for (long i = im->pos; i < im->pos + n; i++)
            if (r->prompt[i] != cfg->image_token_id)
                return cllm_err_set(err, CLLM_EINVAL,
                                    "image %d: prompt position %ld holds token %d, not the "
                                    "image pad %d",
                                    k, i, r->prompt[i], cfg->image_token_id);
        prev_end = im->pos + (int)n;
        n_img_tok += n;
    }
    if (n_img_tok != n_pad)
        return cllm_err_set(err, CLLM_EINVAL,
                            "the prompt has %ld image pad tokens but its images give %ld", n_pad,
                            n_img_tok);
    q->imgs = calloc((size_t)r->n_images, sizeof(eng_img));
    q->mrope = malloc((size_t)r->n_prompt * 3 * sizeof(int32_t));
    if (!q->imgs || !q->mrope) goto oom;
    q->n_imgs = r->n_images;
    for (int k = 0; k < r->n_images; k++) {
        const cllm_image_input *im = &r->images[k];
        eng_img *d = &q->imgs[k];
        memcpy(d->grid, im->grid, sizeof(d->grid));
        d->pos = im->pos;
        d->n_tok = im->grid[0] * im->grid[1] * im->grid[2] / (m * m);
        size_t nf = (size_t)im->grid[0] * im->grid[1] * im->grid[2] * (size_t)cfg->vision_patch_dim;
        if (!(d->pixels = malloc(nf * sizeof(float)))) goto oom;
        memcpy(d->pixels, im->pixels, nf * sizeof(float));
        if (im->hash[0] || im->hash[1]) {
            d->hash.lo = im->hash[0];
            d->hash.hi = im->hash[1];
        } else {
            XXH3_state_t st;
            XXH3_128bits_reset(&st);
            XXH3_128bits_update(&st, im->grid, sizeof(im->grid));
            XXH3_128bits_update(&st, d->pixels, nf * sizeof(float));
            XXH128_hash_t h = XXH3_128bits_digest(&st);
            d->hash.lo = h.low64;
            d->hash.hi = h.high64;
        }
    }
    mrope_positions(q, m);
    return CLLM_OK;
oom:
    sched_img_free(q);
    return cllm_err_set(err, CLLM_ENOMEM, "out of memory copying the request's images");
}

void sched_img_hash(const eng_req *q, int from, int n, XXH3_state_t *st) {
    for (int k = 0; k < q->n_imgs; k++) {
        const eng_img *im = &q->imgs[k];
        if (im->pos >= from + n || im->pos + im->n_tok <= from) continue;
        /* which image and where it starts: two images at different offsets differ too */
        XXH3_128bits_update(st, &im->hash, sizeof(im->hash));
        XXH3_128bits_update(st, &im->pos, sizeof(im->pos));
    }
}

int sched_img_encode(sched *s, eng_req *q, int from, int *budget, cllm_error *err) {
    bool ran = false;
    for (int k = 0; k < q->n_imgs; k++) {
        eng_img *im = &q->imgs[k];
        if (im->encoded || im->pos + im->n_tok <= from) continue; /* done, or all cached */
        if (!s->ops.image_start) {
            cllm_err_set(err, CLLM_EUNSUPPORTED, "image input: no vision tower");
            return -1;
        }
        if (!im->job) {
            if (!im->emb)
                im->emb = malloc((size_t)im->n_tok * (size_t)s->cfg.hidden_size * sizeof(float));
            if (!im->emb) {
                cllm_err_set(err, CLLM_ENOMEM, "out of memory for image %d", k);
                return -1;
            }
            im->job = s->ops.image_start(s->mctx, im->pixels, im->grid, &im->units, err);
            if (!im->job) return -1;
            im->ops = &s->ops;
            im->mctx = s->mctx;
        }
        /* the image's tokens are its cost, shared by its units (vLLM counts an image's tokens
         * against the encoder budget the same way); but a unit takes far longer than its tokens'
         * worth of prefill (a 448^2 image, 196 tokens, is ~17 s of tower on two cores), so while
         * other rows run in this step it gets one unit per step: they wait one block, not the
         * image */
        int cost = (im->n_tok + im->units - 1) / im->units, n = *budget / (cost ? cost : 1);
        if (s->n_batch > 0) n = ran ? 0 : 1;
        if (n < 1 && ran) return 0; /* this step has had its share */
        if (n < 1) n = 1;
        if (n > im->units) n = im->units;
        double t0 = cllm_time_s();
        bool done = false;
        cllm_status rc = s->ops.image_run(s->mctx, im->job, n, im->emb, &done, err);
        s->stats.image_encode_s += cllm_time_s() - t0;
        if (rc != CLLM_OK) return -1;
        ran = true;
        im->units -= n;
        *budget -= n * cost;
        if (*budget < 0) *budget = 0;
        if (!done) return 0;
        s->ops.image_free(s->mctx, im->job);
        im->job = NULL;
        im->encoded = true;
        s->stats.images_encoded++;
        s->stats.image_tokens += (uint64_t)im->n_tok;
        /* the patches are no longer needed: a preempted request keeps the rows */
        free(im->pixels);
        im->pixels = NULL;
    }
    return 1;
}

void sched_img_bind(sched *s, eng_seq *e, cllm_seq_batch *b) {
    const eng_req *q = e->req;
    b->embeds = NULL;
    b->mrope_pos = NULL;
    b->rope_delta = 0;
    if (!q->n_imgs) return;
    int p0 = b->start_pos, n = b->n_tokens;
    if (p0 >= q->n_prompt) {
        b->rope_delta = q->rope_delta; /* generated text: one position component */
        return;
    }
    CLLM_ASSERT(s->img_used + n <= s->img_cap);
    const float **rows = s->img_rows + s->img_used;
    int32_t *pos = s->img_pos + 3 * (size_t)s->img_used;
    s->img_used += n;
    for (int i = 0; i < n; i++) {
        int p = p0 + i;
        rows[i] = NULL;
        if (p < q->n_prompt) {
            memcpy(pos + 3 * i, q->mrope + 3 * (size_t)p, 3 * sizeof(int32_t));
        } else {
            pos[3 * i] = pos[3 * i + 1] = pos[3 * i + 2] = p + q->rope_delta;
        }
    }
    for (int k = 0; k < q->n_imgs; k++) {
        const eng_img *im = &q->imgs[k];
        int a = im->pos > p0 ? im->pos : p0, z = im->pos + im->n_tok;
        if (z > p0 + n) z = p0 + n;
        /* admission encoded every image not wholly below the cached prefix */
        for (int p = a; p < z; p++) {
            CLLM_ASSERT(im->encoded);
            rows[p - p0] = im->emb + (size_t)(p - im->pos) * s->cfg.hidden_size;
        }
    }
    b->embeds = rows;
    b->mrope_pos = pos;
}

int sched_img_mtp_pos(const eng_seq *e, cllm_mtp_seq *m, int32_t *buf) {
    const eng_req *q = e->req;
    m->mrope_pos = NULL;
    m->rope_delta = 0;
    if (!q->n_imgs) return 0;
    if (m->start_pos >= q->n_prompt) {
        m->rope_delta = q->rope_delta;
        return 0;
    }
    if (!buf) return 0;
    for (int i = 0; i < m->n_tokens; i++) {
        int p = m->start_pos + i;
        if (p < q->n_prompt)
            memcpy(buf + 3 * i, q->mrope + 3 * (size_t)p, 3 * sizeof(int32_t));
        else
            buf[3 * i] = buf[3 * i + 1] = buf[3 * i + 2] = p + q->rope_delta;
    }
    m->mrope_pos = buf;
    return m->n_tokens;
}

cllm_status sched_img_init(sched *s) {
    if (s->cfg.vision_merge < 1) return CLLM_OK;
    /* a step's rows: the token budget plus every verify row's drafts */
    s->img_cap = s->cfg.max_num_batched_tokens + s->batch_cap * (CLLM_SPEC_MAX_K + 1);
    s->img_rows = malloc((size_t)s->img_cap * sizeof(*s->img_rows));
    s->img_pos = malloc((size_t)s->img_cap * 3 * sizeof(int32_t));
    return s->img_rows && s->img_pos ? CLLM_OK : CLLM_ENOMEM;
}

void sched_img_release(sched *s) {
    free(s->img_rows);
    free(s->img_pos);
}
