/* Helpers shared by the model tests that build a synthetic checkpoint: a configs/ file with some
 * keys edited, and RTN W4A16 quantization of a checkpoint into a fresh directory. */
#ifndef CLLM_TEST_MODEL_H
#define CLLM_TEST_MODEL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/synth.h"
#include "quant/quantize.h"

/* Writes configs/<name> of the source tree src as a random f32 model (seed 1; its vision tower
 * when the config has one) into out_dir, with models/tiny's tokenizer when the tree has it
 * (*have_tok says so). */
static inline cllm_status tm_synth_f32(const char *src, const char *name, const char *out_dir,
                                       bool *have_tok, cllm_error *err) {
    char cfg[1024], tok[1024];
    snprintf(cfg, sizeof(cfg), "%s/configs/%s", src, name);
    snprintf(tok, sizeof(tok), "%s/models/tiny/tokenizer.json", src);
    FILE *t = fopen(tok, "rb");
    *have_tok = t != NULL;
    if (t) fclose(t);
    snprintf(tok, sizeof(tok), "%s/models/tiny", src);
    cllm_synth_opts so = {.config_path = cfg,
                          .out_dir = out_dir,
                          .seed = 1,
                          .dtype = CLLM_DT_F32,
                          .include_vision = true,
                          .tokenizer_dir = *have_tok ? tok : NULL};
    return cllm_synth(&so, err);
}

/* configs/<name> of the source tree src with the first occurrence of each from[i] replaced by
 * to[i], written to dst. 0, or -1 when a file fails or a from[i] is missing. */
static inline int tm_write_config(const char *src, const char *name, const char *dst,
                                  const char *const *from, const char *const *to, int n) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/configs/%s", src, name);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    static char buf[1 << 16], out[1 << 16];
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = 0;
    for (int i = 0; i < n; i++) {
        char *p = strstr(buf, from[i]);
        if (!p) return -1;
        snprintf(out, sizeof(out), "%.*s%s%s", (int)(p - buf), buf, to[i], p + strlen(from[i]));
        memcpy(buf, out, strlen(out) + 1);
    }
    f = fopen(dst, "wb");
    if (!f) return -1;
    int ok = fputs(buf, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static inline cllm_status tm_quantize_w4a16(const char *in_dir, const char *out_dir, int group,
                                            int lm_head_bits, cllm_error *err) {
    char rm[2200];
    snprintf(rm, sizeof(rm), "rm -rf '%s'", out_dir);
    if (system(rm) != 0) return cllm_err_set(err, CLLM_EIO, "%s: cannot remove", out_dir);
    FILE *devnull = fopen("/dev/null", "w");
    cllm_quant_opts qo = {.in_dir = in_dir,
                          .out_dir = out_dir,
                          .scheme = "w4a16",
                          .group = group,
                          .lm_head_bits = lm_head_bits,
                          .method = "rtn",
                          .threads = 1,
                          .out = devnull};
    cllm_status s = cllm_quantize(&qo, err);
    if (devnull) fclose(devnull);
    return s;
}

#endif
