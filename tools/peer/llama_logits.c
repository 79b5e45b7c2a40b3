/* Test-only tool, outside CI: the logits llama.cpp (the peer build of ../shared/peer/RECIPE.sh)
 * computes for a prompt of token ids, in the format of `cllm eval --dump-logits` (raw float32
 * [rows][vocab] + FILE.shape "rows vocab"), so tests/model/gguf_peer.sh can compare the two
 * engines on one GGUF file. Build: tools/peer/build.sh. Usage: llama_logits MODEL.gguf 1,2,3 OUT
 * (LLAMA_LOGITS_NO_REPACK=1: no weight repacking, see below) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.gguf IDS OUT\n", argv[0]);
        return 2;
    }
    int ids[65536], n = 0;
    for (char *p = argv[2]; *p && n < 65536;) {
        ids[n++] = (int)strtol(p, &p, 10);
        while (*p == ',' || *p == ' ') p++;
    }
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    /* LLAMA_LOGITS_NO_REPACK: weights stay in the mapped file (no CPU_REPACK copies). A full-size
     * Q4_K model repacked is ~20 GB of anonymous memory, more than a 24 GB box can spare. */
    if (getenv("LLAMA_LOGITS_NO_REPACK")) mp.use_extra_bufts = false;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) return 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t)(n + 16);
    cp.n_threads = cp.n_threads_batch = 2;
    cp.type_k = cp.type_v = GGML_TYPE_F32; /* llama.cpp's default F16 KV cache rounds K and V */
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) return 1;
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(ctx, b)) return 1;
    int V = llama_vocab_n_tokens(llama_model_get_vocab(m));
    FILE *f = fopen(argv[3], "wb");
    for (int i = 0; i < n; i++) fwrite(llama_get_logits_ith(ctx, i), 4, (size_t)V, f);
    fclose(f);
    char sp[4096];
    snprintf(sp, sizeof(sp), "%s.shape", argv[3]);
    f = fopen(sp, "w");
    fprintf(f, "%d %d\n", n, V);
    fclose(f);
    llama_batch_free(b);
    return 0;
}
