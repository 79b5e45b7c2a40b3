/* The forward pass's calibration hooks (model/forward.h: cllm_fwd_hooks), on models/tiny:
 *  - on_matmul sees every matmul, named by its checkpoint tensor (fused experts by offset), layer
 *    by layer, lm_head last, with shares_input on the Linears that read the previous one's input;
 *  - observing changes nothing: logits with the hook == without, bitwise;
 *  - stop_layer runs only the layers before it;
 *  - the residual saved at the start of a layer and resumed there gives the full run's logits. */
#include <stdlib.h>
#include <string.h>

#include "model/forward.h"
#include "model/seq_runner.h"
#include "test.h"

#define NT   8
#define MAXR 512

typedef struct seen {
    int n;
    int layer[MAXR];
    char tensor[MAXR][96];
    uint64_t offset[MAXR];
    int cols[MAXR];
    bool shares[MAXR], quantized[MAXR];
} seen;

static void on_mm(void *user, const cllm_fwd_matmul *mm) {
    seen *s = user;
    if (s->n == MAXR) return;
    int i = s->n++;
    s->layer[i] = mm->layer;
    snprintf(s->tensor[i], sizeof(s->tensor[i]), "%s", mm->tensor ? mm->tensor : "(null)");
    s->offset[i] = mm->offset;
    s->cols[i] = mm->cols;
    s->shares[i] = mm->shares_input;
    s->quantized[i] = mm->quantized;
}

static int run(cllm_seq_runner *r, const int32_t *tok, const cllm_fwd_hooks *h, float *logits) {
    cllm_error err;
    cllm_fwd_ctx_set_hooks(r->ctx, h);
    r->pos = 0;
    cllm_status st =
        cllm_seq_runner_step(r, tok, NT, logits ? CLLM_LOGITS_ALL : CLLM_LOGITS_NONE, logits, &err);
    cllm_fwd_ctx_set_hooks(r->ctx, NULL);
    if (st) fprintf(stderr, "forward: %s\n", err.msg);
    return st;
}

static int find(const seen *s, const char *suffix, int layer) {
    size_t n = strlen(suffix);
    for (int i = 0; i < s->n; i++) {
        size_t l = strlen(s->tensor[i]);
        if (s->layer[i] == layer && l >= n && !strcmp(s->tensor[i] + l - n, suffix)) return i;
    }
    return -1;
}

int main(void) {
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s/models/tiny", test_src());
    cllm_seq_runner r;
    cllm_error err;
    if (cllm_seq_runner_open(&r, dir, NULL, 1, NT, 16, CLLM_KV_F32, &err)) {
        fprintf(stderr, "%s: %s\n", dir, err.msg);
        return 1;
    }
    const cllm_config *cf = cllm_model_config(r.m);
    int V = cf->vocab_size, H = cf->hidden_size, L = cf->n_layers;
    int32_t tok[NT] = {5, 17, 300, 42, 9, 77, 1000, 3};
    float *a = malloc((size_t)NT * V * sizeof(float)), *b = malloc((size_t)NT * V * sizeof(float));
    float *resid = malloc((size_t)NT * H * sizeof(float));
    seen *s = calloc(1, sizeof(*s));
    CHECK(a && b && resid && s && L >= 3);

    /* plain run, then observed */
    CHECK(run(&r, tok, NULL, a) == CLLM_OK);
    cllm_fwd_hooks h = {.on_matmul = on_mm, .user = s};
    CHECK(run(&r, tok, &h, b) == CLLM_OK);
    CHECK_MSG(!memcmp(a, b, (size_t)NT * V * sizeof(float)), "logits changed by observing");
    CHECK(s->n > 4 * L);
    bool named = true, ordered = true;
    for (int i = 0; i < s->n; i++) {
        named &= strcmp(s->tensor[i], "(null)") != 0 && !s->quantized[i];
        if (i) ordered &= s->layer[i] >= s->layer[i - 1] || s->layer[i] == -1;
    }
    CHECK_MSG(named, "every matmul of a 16-bit model names its tensor");
    CHECK(ordered);
    CHECK(s->layer[s->n - 1] == -1 && strstr(s->tensor[s->n - 1], "lm_head") != NULL);
    /* the first matmul of layer 0 (GDN in_proj_qkv) reads the normed input; in_proj_z shares it */
    int q = find(s, "layers.0.linear_attn.in_proj_qkv.weight", 0),
        z = find(s, "layers.0.linear_attn.in_proj_z.weight", 0);
    CHECK(q >= 0 && z == q + 1 && !s->shares[q] && s->shares[z] && s->cols[q] == H);
    CHECK(find(s, "linear_attn.out_proj.weight", 0) >= 0 &&
          !s->shares[find(s, "linear_attn.out_proj.weight", 0)]);
    /* a fused expert tensor: several experts reported under one name with distinct offsets */
    int e0 = -1, e1 = -1;
    for (int i = 0; i < s->n && e1 < 0; i++)
        if (s->layer[i] == 0 && strstr(s->tensor[i], "mlp.experts.gate_up_proj")) {
            if (e0 < 0)
                e0 = i;
            else if (s->offset[i] != s->offset[e0])
                e1 = i;
        }
    CHECK_MSG(e0 >= 0 && e1 >= 0, "fused experts reported by offset");

    /* stop_layer: only the layers before it, no lm_head */
    memset(s, 0, sizeof(*s));
    h = (cllm_fwd_hooks){.on_matmul = on_mm, .user = s, .stop_layer = 2};
    CHECK(run(&r, tok, &h, NULL) == CLLM_OK);
    int maxl = -2;
    for (int i = 0; i < s->n; i++) maxl = s->layer[i] > maxl ? s->layer[i] : maxl;
    CHECK(s->n > 0 && maxl == 1 && s->layer[s->n - 1] != -1);

    /* residual: saved at the start of layer 2 on a full run, resumed there */
    h = (cllm_fwd_hooks){.resid = resid, .resid_out = 2};
    CHECK(run(&r, tok, &h, b) == CLLM_OK);
    CHECK(!memcmp(a, b, (size_t)NT * V * sizeof(float)));
    memset(s, 0, sizeof(*s));
    memset(b, 0, (size_t)NT * V * sizeof(float));
    h = (cllm_fwd_hooks){
        .on_matmul = on_mm, .user = s, .resid = resid, .resid_in = 2, .resid_out = -1};
    CHECK(run(&r, tok, &h, b) == CLLM_OK);
    CHECK_MSG(!memcmp(a, b, (size_t)NT * V * sizeof(float)), "resumed run differs from a full one");
    CHECK(s->n > 0 && s->layer[0] == 2);

    free(a), free(b), free(resid), free(s);
    cllm_seq_runner_close(&r);
    return test_report("test_fwd_hooks");
}
