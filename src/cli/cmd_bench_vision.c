/* `cllm bench-vision MODEL [--sizes 448,896,1344]`: the vision tower's encode time per square
 * image size (the grid the image processor's smart resize gives, random normalised pixels), its
 * tokens, the arithmetic rate, and the process's peak resident memory after each size (the
 * tower's scratch grows with the patch count: attention is quadratic in it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/mem.h"
#include "base/threadpool.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "image/image.h"
#include "model/seq_runner.h"
#include "model/vision.h"

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0; /* KiB on Linux */
}

/* Multiply-adds of one encode: the linear layers per patch, attention's two N x N products per
 * block, the merger per merged token (docs/model.md §2.8). */
static double encode_flops(const cllm_vision_config *v, double n_patch, int out_hidden) {
    double D = v->hidden_size, F = v->intermediate_size,
           m2 = (double)v->spatial_merge_size * v->spatial_merge_size;
    double pd = (double)v->in_channels * v->temporal_patch_size * v->patch_size * v->patch_size;
    double per_patch = pd * D + v->depth * (4 * D * D + 2 * D * F);
    double attn = v->depth * 2.0 * n_patch * n_patch * D;
    double merger = n_patch / m2 * (m2 * D * m2 * D + m2 * D * out_hidden);
    return 2.0 * (n_patch * per_patch + attn + merger);
}

int cmd_bench_vision(int argc, char **argv) {
    const char *sizes = "448,896,1344";
    long threads = 0, reps = 2, seed = 1;
    const cli_opt opts[] = {
        {"--sizes", NULL, CLI_STR, &sizes, "square image sides in pixels, comma-separated"},
        {"--repetitions", "-r", CLI_INT, &reps, "encodes per size (the best is shown)", NULL, 1,
         1000},
        {"--threads", "-t", CLI_INT, &threads, "threads (0 = all CPUs)", NULL, 0, 1024},
        {"--seed", "-s", CLI_INT, &seed, "seed for the random pixels", NULL, 0, 9.2e18},
        {0}};
    const cli_spec spec = {"bench-vision",
                           "MODEL [options]",
                           "Vision tower encode time, tokens and memory per image size.",
                           opts,
                           1,
                           1};
    const char *pos[1];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    cllm_error err = {0};
    cllm_seq_runner r;
    if (cllm_seq_runner_open(&r, pos[0], NULL, (int)threads, 16, 16, CLLM_KV_F32, &err)) {
        fprintf(stderr, "cllm bench-vision: %s\n", err.msg);
        return 1;
    }
    int ret = 0;
    const cllm_config *cf = cllm_model_config(r.m);
    const cllm_vision_config *v = &cf->vision;
    if (!cllm_model_has_vision(r.m)) {
        fprintf(stderr, "cllm bench-vision: %s has no vision tower\n", pos[0]);
        cllm_seq_runner_close(&r);
        return 1;
    }
    cllm_image_prep prep;
    cllm_image_prep_default(&prep);
    prep.patch_size = v->patch_size;
    prep.merge_size = v->spatial_merge_size;
    prep.max_pixels = 1L << 26; /* the sizes asked for, not the processor's cap */
    int pd = v->in_channels * v->temporal_patch_size * v->patch_size * v->patch_size;
    printf("tower: depth %d, hidden %d, heads %d, mlp %d, patch %d, merge %d; threads %d\n",
           v->depth, v->hidden_size, v->num_heads, v->intermediate_size, v->patch_size,
           v->spatial_merge_size, r.pool ? cllm_pool_size(r.pool) : 1);
    printf("| image | grid (patches) | tokens | encode s | GFLOP | GFLOP/s | peak RSS MB |\n");
    printf("|---|---|---|---|---|---|---|\n");
    uint64_t s = (uint64_t)seed * 0x9e3779b97f4a7c15ull + 1;
    for (const char *p = sizes; *p;) {
        long side = strtol(p, (char **)&p, 10);
        if (*p == ',') p++;
        int gh, gw;
        if (side < 1 || cllm_image_smart_resize((int)side, (int)side, &prep, &gh, &gw, &err)) {
            fprintf(stderr, "cllm bench-vision: size %ld: %s\n", side, err.msg);
            ret = 1;
            break;
        }
        gh /= v->patch_size, gw /= v->patch_size;
        size_t np_ = (size_t)gh * gw;
        int nt = cllm_vision_n_tokens(r.m, 1, gh, gw);
        float *px = malloc(np_ * pd * sizeof(float));
        float *out = malloc((size_t)(nt > 0 ? nt : 1) * cf->hidden_size * sizeof(float));
        if (!px || !out) {
            free(px);
            free(out);
            fprintf(stderr, "cllm bench-vision: out of memory\n");
            ret = 1;
            break;
        }
        for (size_t i = 0; i < np_ * pd; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            px[i] = (float)((s >> 11) * (2.0 / 9007199254740992.0) - 1.0);
        }
        double best = 1e30;
        for (long k = 0; k < reps && ret == 0; k++) {
            double t0 = cllm_time_s();
            if (cllm_vision_encode(r.ctx, px, 1, gh, gw, out, &err) != CLLM_OK) {
                fprintf(stderr, "cllm bench-vision: %ldx%ld: %s\n", side, side, err.msg);
                ret = 1;
            }
            double dt = cllm_time_s() - t0;
            if (dt < best) best = dt;
        }
        free(px);
        free(out);
        if (ret) break;
        double gf = encode_flops(v, (double)np_, cf->hidden_size) / 1e9;
        printf("| %ldx%ld | %dx%d | %d | %.2f | %.0f | %.1f | %.0f |\n", side, side, gh, gw, nt,
               best, gf, gf / best, peak_rss_mb());
        fflush(stdout);
    }
    cllm_seq_runner_close(&r);
    return ret;
}
