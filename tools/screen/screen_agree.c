/* cllm-screen-agree MODEL SCREEN EST N [TOKENS]: how often the screened int8 lm_head's greedy
 * argmax (CLLM_LM_SCREEN=SCREEN, CLLM_LM_EST=EST) is the plain int8 lm_head's, teacher-forced
 * over N tokens (TOKENS: ids as `cllm generate --tokens` takes them, e.g. @FILE from `cllm
 * tokenize --ids`; without it, random ids). Two runners on the same model, one plain, one
 * screened, fed the same tokens one at a time; prints the agreement and each miss. A
 * measurement for README's figures (Quantization, the screen), not a test. */
#include <stdio.h>
#include <stdlib.h>

#include "base/argmax.h"
#include "cli/options.h"
#include "model/seq_runner.h"

static int open_runner(cllm_seq_runner *r, const char *dir, const char *screen, const char *est,
                       int n) {
    cllm_opts o;
    cllm_error err = {0};
    cllm_status s = cllm_opts_from_env(&o, &err);
    if (s == CLLM_OK) s = cllm_opts_set(&o, "CLLM_LM_SCREEN", screen, NULL, &err);
    if (s == CLLM_OK) s = cllm_opts_set(&o, "CLLM_LM_EST", est, NULL, &err);
    if (s == CLLM_OK) s = cllm_seq_runner_open(r, dir, &o.fwd, 2, n + 8, 16, CLLM_KV_F32, &err);
    if (s != CLLM_OK) fprintf(stderr, "cllm-screen-agree: %s\n", err.msg);
    return s == CLLM_OK ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: cllm-screen-agree MODEL SCREEN EST N [TOKENS]\n");
        return 2;
    }
    const char *dir = argv[1], *screen = argv[2], *est = argv[3];
    int n = atoi(argv[4]);
    cllm_error err = {0};
    int32_t *toks = NULL;
    int nt = argc > 5 ? cllm_parse_token_list(argv[5], &toks, &err) : 0;
    if (nt < 0) {
        fprintf(stderr, "cllm-screen-agree: %s\n", err.msg);
        return 2;
    }
    if (nt > 0 && nt < n) n = nt;
    if (n < 1) {
        fprintf(stderr, "cllm-screen-agree: N must be at least 1\n");
        return 2;
    }
    cllm_seq_runner plain, scr;
    if (open_runner(&plain, dir, "0", "4", n)) return 1;
    if (open_runner(&scr, dir, screen, est, n)) {
        cllm_seq_runner_close(&plain);
        return 1;
    }
    scr.logits_topk = 1;
    scr.logits_scale = 1.0f;
    const int V = cllm_model_config(plain.m)->vocab_size;
    float *ya = malloc((size_t)V * sizeof(float)), *yb = malloc((size_t)V * sizeof(float));
    int agree = 0, rc = 0;
    srand(7);
    for (int i = 0; ya && yb && i < n; i++) {
        int32_t t = nt > 0 ? toks[i] : (int32_t)(rand() % V);
        if (cllm_seq_runner_step(&plain, &t, 1, CLLM_LOGITS_LAST, ya, &err) != CLLM_OK ||
            cllm_seq_runner_step(&scr, &t, 1, CLLM_LOGITS_LAST, yb, &err) != CLLM_OK) {
            fprintf(stderr, "cllm-screen-agree: step %d: %s\n", i, err.msg);
            rc = 1;
            break;
        }
        int a = cllm_argmax(ya, V), b = cllm_argmax(yb, V);
        agree += a == b;
        if (a != b)
            printf("position %d: plain %d (%.4f), screened %d (plain's value %.4f)\n", i, a, ya[a],
                   b, ya[b]);
    }
    if (!rc)
        printf("CLLM_LM_SCREEN=%s CLLM_LM_EST=%s: argmax agrees %d of %d\n", screen, est, agree, n);
    free(ya);
    free(yb);
    free(toks);
    cllm_seq_runner_close(&plain);
    cllm_seq_runner_close(&scr);
    return rc;
}
