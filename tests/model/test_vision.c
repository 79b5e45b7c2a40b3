/* The vision tower's API (model/vision.h) on synthetic checkpoints (configs/tiny-vision.json):
 *  - has_vision: true with the tower bound, false for a text model and for a multimodal config
 *    whose checkpoint lacks the model.visual.* tensors (that one still loads);
 *  - n_tokens: t*h*w / merge^2, 0 for a refused grid;
 *  - refusals before any work, each EINVAL with a message saying why: no tower, a grid side not
 *    divisible by the merge size, zero or negative sides, past the side and patch caps; the
 *    output buffer is left untouched;
 *  - an out_hidden_size that is not the text hidden_size fails the load naming both;
 *  - 1, 2 and 3 threads give the same bits; outputs are finite and not constant.
 * The comparison with the float64 reference is tests/model/vision_ref.sh, which runs this
 * program's dump mode: test_vision dump MODEL_DIR T H W PIXELS.f32 OUT.f32 THREADS. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/forward.h"
#include "model/vision.h"
#include "test.h"
#include "test_model.h"

static float *readf(const char *path, size_t want) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *b = malloc(want * sizeof(float) + 4);
    size_t n = b ? fread(b, sizeof(float), want + 1, f) : 0;
    fclose(f);
    if (n != want) {
        fprintf(stderr, "%s: %zu floats, expected %zu\n", path, n, want);
        free(b);
        return NULL;
    }
    return b;
}

/* Encodes with a pool of n threads (1: none); out must hold the tokens' rows. */
static cllm_status encode_n(const cllm_model *m, int n, const float *px, int t, int h, int w,
                            float *out, cllm_error *err) {
    cllm_pool *pool = n > 1 ? cllm_pool_create(n) : NULL;
    cllm_fwd_ctx *c = NULL;
    cllm_status s = cllm_fwd_ctx_create(m, pool, &c, err);
    if (s == CLLM_OK) s = cllm_vision_encode(c, px, t, h, w, out, err);
    cllm_fwd_ctx_free(c);
    cllm_pool_free(pool);
    return s;
}

static int dump(int argc, char **argv) {
    if (argc != 9) {
        fprintf(stderr, "usage: test_vision dump MODEL T H W PIXELS.f32 OUT.f32 THREADS\n");
        return 2;
    }
    int t = atoi(argv[3]), h = atoi(argv[4]), w = atoi(argv[5]), nt = atoi(argv[8]);
    cllm_error err = {0};
    cllm_model *m = NULL;
    if (cllm_model_load(argv[2], NULL, &m, &err) != CLLM_OK) {
        fprintf(stderr, "load: %s\n", err.msg);
        return 1;
    }
    const cllm_vision_config *vc = &cllm_model_config(m)->vision;
    size_t pd = (size_t)vc->in_channels * vc->temporal_patch_size * vc->patch_size * vc->patch_size;
    size_t n_tok = (size_t)cllm_vision_n_tokens(m, t, h, w);
    float *px = readf(argv[6], (size_t)t * h * w * pd);
    float *out = malloc((n_tok ? n_tok : 1) * vc->out_hidden_size * sizeof(float));
    int rc = 1;
    if (px && out && encode_n(m, nt, px, t, h, w, out, &err) == CLLM_OK) {
        FILE *f = fopen(argv[7], "wb");
        rc = f && fwrite(out, sizeof(float), n_tok * vc->out_hidden_size, f) ==
                         n_tok * vc->out_hidden_size
                 ? 0
                 : 1;
        if (f) fclose(f);
    } else if (px && out) {
        fprintf(stderr, "encode: %s\n", err.msg);
    }
    free(px);
    free(out);
    cllm_model_free(m);
    return rc;
}

static void check_refused(cllm_model *m, int t, int h, int w, const char *why) {
    cllm_error err = {0};
    float px[1] = {0}, out[4] = {7, 7, 7, 7};
    cllm_status s = encode_n(m, 1, px, t, h, w, out, &err);
    CHECK_MSG(s == CLLM_EINVAL, "grid %d x %d x %d: status %d", t, h, w, (int)s);
    CHECK_MSG(strstr(err.msg, why) != NULL, "grid %d x %d x %d: '%s' lacks '%s'", t, h, w, err.msg,
              why);
    CHECK(out[0] == 7 && out[3] == 7);
    CHECK(cllm_vision_n_tokens(m, t, h, w) == 0);
}

static void test_tower(const char *dir) {
    cllm_error err = {0};
    cllm_model *m = NULL;
    CHECK_MSG(cllm_model_load(dir, NULL, &m, &err) == CLLM_OK, "%s", err.msg);
    if (!m) return;
    CHECK(cllm_model_has_vision(m));
    CHECK(cllm_vision_n_tokens(m, 1, 4, 6) == 6);
    CHECK(cllm_vision_n_tokens(m, 2, 2, 2) == 2);
    check_refused(m, 1, 3, 4, "merge");
    check_refused(m, 1, 4, 2 * 3 + 1, "merge");
    check_refused(m, 0, 2, 2, "positive");
    check_refused(m, 1, -2, 2, "positive");
    check_refused(m, 1, CLLM_VISION_MAX_SIDE + 2, 2, "side");
    check_refused(m, 1, 512, 512, "too many patches");

    const cllm_vision_config *vc = &cllm_model_config(m)->vision;
    const int H = cllm_model_config(m)->hidden_size, t = 1, h = 4, w = 6;
    size_t pd = (size_t)vc->in_channels * vc->temporal_patch_size * vc->patch_size * vc->patch_size;
    size_t np = (size_t)t * h * w, no = (size_t)cllm_vision_n_tokens(m, t, h, w) * H;
    float *px = malloc(np * pd * sizeof(float));
    float *o[3] = {malloc(no * sizeof(float)), malloc(no * sizeof(float)),
                   malloc(no * sizeof(float))};
    for (size_t i = 0; i < np * pd; i++) px[i] = test_frand();
    for (int k = 0; k < 3; k++)
        CHECK_MSG(encode_n(m, k + 1, px, t, h, w, o[k], &err) == CLLM_OK, "%s", err.msg);
    CHECK(!memcmp(o[0], o[1], no * sizeof(float)));
    CHECK(!memcmp(o[0], o[2], no * sizeof(float)));
    int finite = 1;
    double lo = o[0][0], hi = o[0][0];
    for (size_t i = 0; i < no; i++) {
        finite &= isfinite(o[0][i]);
        lo = fmin(lo, o[0][i]), hi = fmax(hi, o[0][i]);
    }
    CHECK(finite);
    CHECK_MSG(hi - lo > 0.1, "output range [%g, %g]", lo, hi);
    /* the same encode as a job run one unit, then two, then the rest: the same bits */
    cllm_fwd_ctx *c = NULL;
    CHECK(cllm_fwd_ctx_create(m, NULL, &c, &err) == CLLM_OK);
    cllm_vision_job *j = NULL;
    CHECK_MSG(c && cllm_vision_job_start(c, px, t, h, w, &j, &err) == CLLM_OK, "%s", err.msg);
    if (j) {
        int units = cllm_vision_job_units(j), steps = 0;
        CHECK(units == vc->depth + 2);
        bool done = false;
        memset(o[1], 0, no * sizeof(float));
        for (int n = 1; !done && steps < 100; n++, steps++)
            CHECK(cllm_vision_job_run(c, j, n, o[1], &done, &err) == CLLM_OK);
        CHECK(done && cllm_vision_job_units(j) == 0);
        CHECK_MSG(!memcmp(o[0], o[1], no * sizeof(float)), "a job in steps differs");
        cllm_vision_job_free(j);
    }
    /* a job dropped half way leaks nothing (ASan) */
    j = NULL;
    if (c && cllm_vision_job_start(c, px, t, h, w, &j, &err) == CLLM_OK) {
        bool done = true;
        CHECK(cllm_vision_job_run(c, j, 1, o[1], &done, &err) == CLLM_OK && !done);
        cllm_vision_job_free(j);
    }
    cllm_fwd_ctx_free(c);
    for (int k = 0; k < 3; k++) free(o[k]);
    free(px);
    cllm_model_free(m);
}

/* A text model: no tower; the same weights under a vision config: loads, still none. */
static void test_no_tower(const char *text_dir) {
    cllm_error err = {0};
    cllm_model *m = NULL;
    CHECK_MSG(cllm_model_load(text_dir, NULL, &m, &err) == CLLM_OK, "%s", err.msg);
    if (!m) return;
    CHECK(!cllm_model_has_vision(m));
    CHECK(cllm_vision_n_tokens(m, 1, 2, 2) == 0);
    check_refused(m, 1, 2, 2, "no vision tower");
    cllm_model_free(m);
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "cp '%s/configs/tiny-vision.json' '%s/config.json'", test_src(),
             text_dir);
    CHECK(system(cmd) == 0);
    CHECK_MSG(cllm_model_load(text_dir, NULL, &m, &err) == CLLM_OK, "%s", err.msg);
    if (!m) return;
    CHECK(cllm_model_config(m)->vision.present);
    CHECK(!cllm_model_has_vision(m));
    cllm_model_free(m);
}

static void test_bad_out_hidden(const char *tmp) {
    char cfg[1200], dir[1200];
    snprintf(cfg, sizeof(cfg), "%s/vis_bad.json", tmp);
    snprintf(dir, sizeof(dir), "%s/vis_bad", tmp);
    const char *from[] = {"\"out_hidden_size\": 64"}, *to[] = {"\"out_hidden_size\": 32"};
    CHECK(tm_write_config(test_src(), "tiny-vision.json", cfg, from, to, 1) == 0);
    cllm_error err = {0};
    cllm_synth_opts so = {.config_path = cfg,
                          .out_dir = dir,
                          .seed = 1,
                          .dtype = CLLM_DT_F32,
                          .include_vision = true};
    CHECK_MSG(cllm_synth(&so, &err) == CLLM_OK, "%s", err.msg);
    cllm_model *m = NULL;
    CHECK(cllm_model_load(dir, NULL, &m, &err) == CLLM_EFORMAT);
    CHECK_MSG(strstr(err.msg, "32") && strstr(err.msg, "64"), "%s", err.msg);
    cllm_model_free(m);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "dump")) return dump(argc, argv);
    char tmp[1024], vdir[1100], tdir[1100], cmd[2400];
    snprintf(tmp, sizeof(tmp), "%s/test_vision", test_tmp());
    snprintf(vdir, sizeof(vdir), "%s/vis", tmp);
    snprintf(tdir, sizeof(tdir), "%s/text", tmp);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s'", tmp, tmp);
    if (system(cmd) != 0) return 1;
    bool tok = false;
    cllm_error err = {0};
    CHECK_MSG(tm_synth_f32(test_src(), "tiny-vision.json", vdir, &tok, &err) == CLLM_OK, "%s",
              err.msg);
    CHECK_MSG(tm_synth_f32(test_src(), "tiny.json", tdir, &tok, &err) == CLLM_OK, "%s", err.msg);
    test_tower(vdir);
    test_no_tower(tdir);
    test_bad_out_hidden(tmp);
    return test_report("test_vision");
}
