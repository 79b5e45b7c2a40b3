/* A prompt with images through the real engine (engine.h: sched_img.c's positions and rows, the
 * vision tower, the text forward), for tests/model/vision_text_ref.sh to compare with the float64
 * reference. Run mode:
 *   test_vision_engine run MODEL_DIR BUDGET OUT.txt PROMPT IMG...
 * PROMPT: comma-separated token ids where the image pad id stands once per image; each IMG is
 * T,H,W:PIXELS.f32 (patches in the processor's order). The program expands each pad to the
 * image's tokens, runs the request greedily for 6 tokens with prompt logprobs and logprobs, and
 * writes: the expanded prompt ids, then the generated ids, then one line per prompt position
 * 1.. (logprob of that token given the ones before), then the generated tokens' logprobs.
 * Without arguments (the unit run): a model without a tower refuses an image by name, and a
 * prompt whose pads do not match its images is refused. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "model/config.h"
#include "test.h"
#include "test_model.h"

typedef struct run_out {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    cllm_finish fin;
    char err[256];
    int gen[64], n_gen;
    double gen_lp[64];
    double *plp;
    int n_plp;
} run_out;

static void on_ev(void *user, const cllm_event *ev) {
    run_out *o = user;
    pthread_mutex_lock(&o->mu);
    for (int i = 0; i < ev->n_tokens && o->n_gen < 64; i++) {
        o->gen[o->n_gen] = ev->token_ids[i];
        o->gen_lp[o->n_gen++] = ev->logprobs ? ev->logprobs[i * 1].logprob : 0;
    }
    if (ev->prompt_lp && !o->plp) {
        o->plp = malloc((size_t)ev->n_prompt_lp * sizeof(double));
        for (int i = 0; o->plp && i < ev->n_prompt_lp; i++)
            o->plp[i] = ev->prompt_lp[(size_t)i * (1 + ev->n_prompt_top)].logprob;
        o->n_plp = ev->n_prompt_lp;
    }
    if (ev->finish != CLLM_FINISH_NONE) {
        o->fin = ev->finish;
        if (ev->error) snprintf(o->err, sizeof(o->err), "%s", ev->error);
        o->done = true;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
}

static cllm_engine *open_engine(const char *dir, int budget, cllm_error *err) {
    cllm_engine_opts o;
    cllm_engine_opts_defaults(&o);
    o.model_dir = dir;
    o.n_threads = 2;
    o.max_num_seqs = 4;
    o.max_num_batched_tokens = budget;
    o.max_model_len = 512;
    o.kv_cache_bytes = 256u << 20; /* 512 positions of the full 35B shape fit */
    cllm_engine *e = NULL;
    return cllm_engine_create(&o, &e, err) == CLLM_OK ? e : NULL;
}

static float *readf(const char *path, size_t want) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    float *b = malloc(want * sizeof(float) + 4);
    size_t n = b ? fread(b, sizeof(float), want + 1, f) : 0;
    fclose(f);
    if (n != want) {
        free(b);
        return NULL;
    }
    return b;
}

static int run(int argc, char **argv) {
    const char *dir = argv[2], *outp = argv[4];
    int budget = atoi(argv[3]);
    cllm_config cf;
    cllm_error err = {0};
    if (cllm_config_load(dir, &cf, &err) != CLLM_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int pad = cf.image_token_id, m = cf.vision.spatial_merge_size;
    int pd = cf.vision.in_channels * cf.vision.temporal_patch_size * cf.vision.patch_size *
             cf.vision.patch_size;
    cllm_config_free(&cf);
    int n_img = argc - 6;
    cllm_image_input im[8];
    memset(im, 0, sizeof(im));
    for (int k = 0; k < n_img && k < 8; k++) {
        int *g = im[k].grid;
        char path[512];
        if (sscanf(argv[6 + k], "%d,%d,%d:%511s", &g[0], &g[1], &g[2], path) != 4) return 2;
        im[k].pixels = readf(path, (size_t)g[0] * g[1] * g[2] * (size_t)pd);
        if (!im[k].pixels) {
            fprintf(stderr, "cannot read %s\n", path);
            return 1;
        }
    }
    int prompt[1024], n = 0, k = 0;
    for (char *s = argv[5]; *s && n < 1000;) {
        int id = (int)strtol(s, &s, 10);
        if (*s == ',') s++;
        if (id != pad) {
            prompt[n++] = id;
            continue;
        }
        im[k].pos = n;
        int nt = im[k].grid[0] * im[k].grid[1] * im[k].grid[2] / (m * m);
        for (int j = 0; j < nt && n < 1000; j++) prompt[n++] = pad;
        k++;
    }
    cllm_engine *e = open_engine(dir, budget, &err);
    if (!e) {
        fprintf(stderr, "engine: %s\n", err.msg);
        return 1;
    }
    run_out o = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    cllm_sampling s;
    cllm_sampling_defaults(e, &s);
    s.temperature = 0;
    s.max_tokens = 6;
    s.ignore_eos = true;
    s.logprobs = 0;
    s.has_prompt_logprobs = true;
    s.prompt_logprobs = 0;
    cllm_request r = {.prompt = prompt,
                      .n_prompt = n,
                      .sampling = s,
                      .on_event = on_ev,
                      .user = &o,
                      .images = im,
                      .n_images = n_img};
    uint64_t id;
    int rc = 1;
    if (cllm_engine_submit(e, &r, &id, &err) != CLLM_OK) {
        fprintf(stderr, "submit: %s\n", err.msg);
        goto done;
    }
    pthread_mutex_lock(&o.mu);
    while (!o.done) pthread_cond_wait(&o.cv, &o.mu);
    pthread_mutex_unlock(&o.mu);
    if (o.fin != CLLM_FINISH_LENGTH || o.n_plp != n - 1) {
        fprintf(stderr, "finish %d (%s), %d prompt logprobs for %d tokens\n", o.fin, o.err, o.n_plp,
                n);
        goto done;
    }
    FILE *f = fopen(outp, "w");
    if (!f) goto done;
    for (int i = 0; i < n; i++) fprintf(f, "%d%c", prompt[i], i + 1 < n ? ',' : '\n');
    for (int i = 0; i < o.n_gen; i++) fprintf(f, "%d%c", o.gen[i], i + 1 < o.n_gen ? ',' : '\n');
    for (int i = 0; i < o.n_plp; i++) fprintf(f, "%.9g\n", o.plp[i]);
    for (int i = 0; i < o.n_gen; i++) fprintf(f, "%.9g\n", o.gen_lp[i]);
    fclose(f);
    rc = 0;
done:
    cllm_engine_free(e);
    free(o.plp);
    for (int i = 0; i < n_img; i++) free((void *)im[i].pixels);
    return rc;
}

/* unit run: refusals through the public API on a synthetic text-only model */
static void test_refusals(void) {
    char dir[1024], cmd[1200];
    snprintf(dir, sizeof(dir), "%s/test_vision_engine", test_tmp());
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) return;
    bool tok = false;
    cllm_error err = {0};
    if (tm_synth_f32(test_src(), "tiny.json", dir, &tok, &err) != CLLM_OK) {
        CHECK_MSG(0, "synth: %s", err.msg);
        return;
    }
    cllm_engine *e = open_engine(dir, 64, &err);
    CHECK_MSG(e, "engine: %s", err.msg);
    if (!e) return;
    float px[4 * 1536] = {0};
    cllm_image_input im = {.pixels = px, .grid = {1, 2, 2}, .pos = 1};
    int prompt[] = {1, 2, 3};
    cllm_sampling s;
    cllm_sampling_defaults(e, &s);
    s.max_tokens = 2;
    run_out o = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    cllm_request r = {.prompt = prompt,
                      .n_prompt = 3,
                      .sampling = s,
                      .on_event = on_ev,
                      .user = &o,
                      .images = &im,
                      .n_images = 1};
    uint64_t id;
    CHECK(cllm_engine_submit(e, &r, &id, &err) == CLLM_EINVAL);
    CHECK_MSG(strstr(err.msg, "no vision tower"), "message: %s", err.msg);
    cllm_engine_free(e);
    if (system(cmd) != 0) return;
}

int main(int argc, char **argv) {
    if (argc >= 6 && !strcmp(argv[1], "run")) return run(argc, argv);
    test_refusals();
    return test_report("test_vision_engine");
}
