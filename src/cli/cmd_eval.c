/* `cllm eval MODEL --tokens IDS|@FILE [--dump-logits OUT] [--logits-hash] [--prefill-chunk N]
 * [--logprobs]`: runs a token sequence through the forward pass and writes the logits of every
 * position as raw float32 [n_tokens][vocab] (+ OUT.shape "rows vocab"), the format
 * tools/ref/ref_forward.py writes, so cllm can be compared with the reference, another build or
 * another engine; --logprobs prints each token's logprob given the ones before it (the offline
 * side of the server's prompt_logprobs / echo, tests/server/lm_eval_client.py). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/file.h"
#include "base/log.h"
#include "tokenizer/tokenizer.h"
#include "quant/qeval.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "dist/dist.h"
#include "model/seq_runner.h"

/* --ppl FILE that is text (not "@ids" nor "1,2,3"): tokenized with the model's tokenizer into
 * "id,id,..." (*ids, malloc'd). Leaves *ids NULL for token-id forms. 0 ok, 1 error (printed). */
static int ppl_text_ids(const char *model, const char *arg, bool quiet, char **ids) {
    *ids = NULL;
    if (arg[0] == '@' || strspn(arg, "0123456789, \n") == strlen(arg)) return 0;
    cllm_error err = {0};
    size_t n = 0;
    char *text = cllm_read_file(arg, 0, &n, &err);
    if (!text) {
        fprintf(stderr, "cllm eval: --ppl %s: %s (token ids are --ppl @FILE or 1,2,3)\n", arg,
                err.msg);
        return 1;
    }
    cllm_tok *tok = NULL;
    cllm_tok_ids t = {0};
    int rc = 0;
    if (cllm_tok_load(model, &tok, &err) != CLLM_OK ||
        cllm_tok_encode(tok, text, n, 0, &t, &err) != CLLM_OK) {
        fprintf(stderr, "cllm eval: tokenizing %s: %s\n", arg, err.msg);
        rc = 1;
    } else {
        char *b = malloc(t.n * 12 + 1);
        size_t off = 0;
        for (size_t i = 0; b && i < t.n; i++)
            off += (size_t)sprintf(b + off, i ? ",%d" : "%d", t.ids[i]);
        if (b) b[off] = 0;
        *ids = b;
        if (!b) rc = 1;
        if (!quiet) fprintf(stderr, "eval: %s: %zu bytes of text -> %zu tokens\n", arg, n, t.n);
    }
    cllm_tok_ids_free(&t);
    cllm_tok_free(tok);
    free(text);
    return rc;
}

/* "POS TOKEN LOGPROB" for positions 1..n-1: log-softmax of row POS-1 in double, summed in index
 * order. */
static void print_logprobs(const float *logits, const int32_t *ids, int n, int V) {
    for (int i = 1; i < n; i++) {
        const float *x = logits + (size_t)(i - 1) * V;
        double mx = x[0], s = 0;
        for (int v = 1; v < V; v++) mx = x[v] > mx ? x[v] : mx;
        for (int v = 0; v < V; v++) s += exp(x[v] - mx);
        printf("%d %d %.17g\n", i, ids[i], x[ids[i]] - (mx + log(s)));
    }
}

int cmd_eval(int argc, char **argv) {
    const char *tokens = NULL, *dump = NULL, *kvd = "f32", *ssmd = "f32";
    const char *gdn_mode = "recurrent", *act16 = NULL;
    long threads = 1, chunk = 0, block = 16;
    bool hash = false, quiet = false, logprobs = false;
    /* quality evaluation (quant/qeval.c) */
    const char *ppl = NULL, *compare = NULL, *table = NULL, *ppl_file = NULL;
    long ctx = 128, stride = 64, n_prompts = 8, prompt_len = 16, gen_len = 32;
    const cli_opt opts[] = {
        {"--tokens", NULL, CLI_STR, &tokens, "token ids: 1,2,3 or @FILE"},
        {"--dump-logits", NULL, CLI_STR, &dump,
         "write float32 [n_tokens][vocab] logits here (+ .shape)"},
        {"--logits-hash", NULL, CLI_FLAG, &hash, "print an xxh64 hash of all logits"},
        {"--logprobs", NULL, CLI_FLAG, &logprobs,
         "print 'POS TOKEN LOGPROB' of every token after the first"},
        {"--prefill-chunk", NULL, CLI_INT, &chunk,
         "feed the prompt in calls of N tokens (0 = one call)", NULL, 0, 1e9},
        {"--threads", "-t", CLI_INT, &threads, "threads (0 = all CPUs)", NULL, 0, 1024},
        {"--block-size", NULL, CLI_INT, &block, "KV block size in positions", NULL, 1, 65536},
        {"--kv-dtype", NULL, CLI_CHOICE, &kvd,
         "KV cache element type (--ppl: of the model under test; the --compare base runs f32)",
         "f32|bf16"},
        CLI_SSM_DTYPE_ROW(&ssmd, "; --ppl: of the model under test"),
        CLI_GDN_PREFILL_ROW(&gdn_mode),
        {"--act16", NULL, CLI_CHOICE, &act16, CLI_ACT16_HELP, CLI_ACT16_CHOICES},
        {"--ppl", NULL, CLI_STR, &ppl,
         "perplexity over strided windows: a text FILE (tokenized), or token ids (@FILE or 1,2,3)"},
        {"--file", "-f", CLI_STR, &ppl_file, "text FILE for --ppl (as llama-perplexity -f)"},
        {"--compare", NULL, CLI_STR, &compare,
         "with --ppl: KLD, top-1 and greedy BLEU-4 against BASE"},
        {"--table", NULL, CLI_STR, &table,
         "with --ppl: comparison table of MODEL (base) vs these dirs (a,b,c)"},
        {"--ctx", NULL, CLI_INT, &ctx, "--ppl window length", NULL, 2, 1e7},
        {"--stride", NULL, CLI_INT, &stride, "--ppl window stride", NULL, 1, 1e7},
        {"--prompts", NULL, CLI_INT, &n_prompts, "greedy prompts for BLEU-4 / decode speed", NULL,
         0, 1e6},
        {"--prompt-len", NULL, CLI_INT, &prompt_len, "tokens per prompt", NULL, 1, 1e6},
        {"--gen-len", NULL, CLI_INT, &gen_len, "greedy tokens per prompt", NULL, 1, 1e6},
        {"--quiet", "-q", CLI_FLAG, &quiet, "--ppl: no progress lines on stderr, only the table"},
        {0}};
    const cli_spec spec = {
        "eval",
        "MODEL --tokens IDS|@FILE | --ppl TEXT_FILE|@IDS [options]",
        "Run a token sequence through the model and dump or hash the logits of every position.",
        opts,
        1,
        1};
    const char *pos[1];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    const cllm_fwd_opts fwd = cli_fwd_opts(act16);
    if (cli_check_model_dir("eval", &pos[0])) return 1;
    if (ppl_file && ppl && strcmp(ppl, ppl_file)) {
        fprintf(stderr, "cllm eval: give --ppl or -f, not both\n");
        return 2;
    }
    if (ppl_file) ppl = ppl_file;
    if (ppl || compare || table) {
        /* the per-position options of the --tokens mode: refused by name, not ignored */
        const struct {
            bool set;
            const char *flag;
        } only_tokens[] = {{tokens != NULL, "--tokens"},
                           {dump != NULL, "--dump-logits"},
                           {hash, "--logits-hash"},
                           {logprobs, "--logprobs"},
                           {chunk != 0, "--prefill-chunk"},
                           {block != 16, "--block-size"},
                           {strcmp(gdn_mode, "recurrent") != 0, "--gdn-prefill"}};
        for (size_t i = 0; i < sizeof(only_tokens) / sizeof(only_tokens[0]); i++)
            if (only_tokens[i].set) {
                fprintf(stderr,
                        "cllm eval: %s applies to --tokens runs, not to --ppl/--compare/--table "
                        "(windows of --ctx tokens, recurrent prefill, block size 16)\n",
                        only_tokens[i].flag);
                return 2;
            }
        char *ids = NULL;
        if (ppl && ppl_text_ids(pos[0], ppl, quiet, &ids)) return 1;
        cllm_qeval_opts q = {.model = pos[0],
                             .fwd = fwd,
                             .tokens = ids ? ids : ppl,
                             .compare = compare,
                             .table = table,
                             .ctx = (int)ctx,
                             .stride = (int)stride,
                             .n_prompts = (int)n_prompts,
                             .prompt_len = (int)prompt_len,
                             .gen_len = (int)gen_len,
                             .threads = (int)threads,
                             .kv_dtype = !strcmp(kvd, "bf16") ? CLLM_KV_BF16 : CLLM_KV_F32,
                             .ssm_dtype = !strcmp(ssmd, "bf16") ? CLLM_KV_BF16 : CLLM_KV_F32,
                             .progress = quiet ? NULL : stderr,
                             .tty = isatty(STDERR_FILENO)};
        rc = cllm_qeval_run(&q, stdout);
        free(ids);
        return rc;
    }
    if (!tokens) {
        fprintf(stderr, "cllm eval: --tokens is required\n");
        return 2;
    }
    cllm_error err = {0};
    int32_t *ids = NULL;
    int n = cllm_parse_token_list(tokens, &ids, &err);
    if (n < 0) {
        fprintf(stderr, "cllm eval: %s\n", err.msg);
        return 2;
    }
    cllm_seq_runner r;
    if (cllm_seq_runner_open(&r, pos[0], &fwd, (int)threads, n, (int)block,
                             !strcmp(kvd, "bf16") ? CLLM_KV_BF16 : CLLM_KV_F32, &err) != CLLM_OK) {
        fprintf(stderr, "cllm eval: %s\n", err.msg);
        free(ids);
        return 1;
    }
    if (!strcmp(ssmd, "bf16") && cllm_seq_runner_set_state_dtype(&r, CLLM_KV_BF16, &err)) {
        fprintf(stderr, "cllm eval: %s\n", err.msg);
        cllm_seq_runner_close(&r);
        free(ids);
        return 1;
    }
    cllm_fwd_ctx_set_gdn_prefill(r.ctx, (cllm_gdn_prefill)cllm_gdn_prefill_parse(gdn_mode));
    int V = cllm_model_config(r.m)->vocab_size;
    float *logits = malloc((size_t)n * V * sizeof(float));
    int ret = 0;
    if (!logits) {
        fprintf(stderr, "cllm eval: out of memory for %d x %d logits\n", n, V);
        ret = 1;
        goto done;
    }
    int step = chunk > 0 ? (int)chunk : n;
    for (int i = 0; i < n; i += step) {
        int m = n - i < step ? n - i : step;
        if (cllm_seq_runner_step(&r, ids + i, m, CLLM_LOGITS_ALL, logits + (size_t)i * V, &err) !=
            CLLM_OK) {
            fprintf(stderr, "cllm eval: %s\n", err.msg);
            ret = 1;
            goto done;
        }
    }
    if (dump && cllm_dist_rank() == 0) { /* tensor parallel: the same rows on every rank */
        FILE *f = fopen(dump, "wb");
        char sp[4096];
        snprintf(sp, sizeof(sp), "%s.shape", dump);
        FILE *g = f ? fopen(sp, "w") : NULL;
        if (!f || !g || fwrite(logits, sizeof(float), (size_t)n * V, f) != (size_t)n * V ||
            fprintf(g, "%d %d\n", n, V) < 0) {
            fprintf(stderr, "cllm eval: cannot write %s\n", dump);
            ret = 1;
        }
        if (f && fclose(f)) ret = 1;
        if (g && fclose(g)) ret = 1;
    }
    if (logprobs && cllm_dist_rank() == 0) print_logprobs(logits, ids, n, V);
    if (hash)
        printf("logits-hash %016llx (%d x %d)\n",
               (unsigned long long)XXH64(logits, (size_t)n * V * sizeof(float), 0), n, V);
done:
    free(logits);
    free(ids);
    cllm_seq_runner_close(&r);
    return ret;
}
