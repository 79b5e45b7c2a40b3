/* `cllm generate MODEL (-p TEXT | --tokens IDS) [-n N --temperature --top-k --top-p --min-p
 * --*-penalty --seed --threads]`: offline generation on one sequence through the forward pass;
 * streams the generated text to stdout (token ids when the model has no tokenizer.json, or with
 * --ids) and ends with prefill and decode tok/s on stderr. Tokens are drawn by the engine's
 * sampler (engine/sampler.h) with the same inputs the server gives it, so a request with the
 * same prompt, sampling parameters and seed gives the same tokens here and from `cllm serve`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "base/mem.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "model/config.h"
#include "model/seq_runner.h"
#include "tokenizer/tokenizer.h"

int cmd_generate(int argc, char **argv) {
    const char *prompt = NULL, *tokens = NULL, *kvd = "f32";
    const char *gdn_mode = "recurrent";
    const char *schema_file = NULL, *regex = NULL, *grammar_file = NULL;
    long n_gen = 32, threads = 0, top_k = 0, seed = 0, block = 16, chunk = 0;
    double temperature = 0.0, top_p = 1.0, min_p = 0.0, rep_pen = 1.0, pres_pen = 0.0,
           freq_pen = 0.0;
    bool ignore_eos = false, hash = false, print_ids = false;
    const cli_opt opts[] = {
        {"--prompt", "-p", CLI_STR, &prompt, "prompt text (needs a tokenizer)"},
        {"--tokens", NULL, CLI_STR, &tokens, "prompt as token ids: 1,2,3 or @FILE"},
        {"--max-tokens", "-n", CLI_INT, &n_gen, "tokens to generate", NULL, 0, 1e9},
        {"--temperature", NULL, CLI_FLOAT, &temperature, "0 = greedy (default)", NULL, 0, 100},
        {"--top-k", NULL, CLI_INT, &top_k, "keep the k most likely (0 = off)", NULL, 0, 1e9},
        {"--top-p", NULL, CLI_FLOAT, &top_p, "nucleus mass (1 = off)", NULL, 0, 1},
        {"--min-p", NULL, CLI_FLOAT, &min_p, "drop tokens below min-p x the top probability", NULL,
         0, 1},
        {"--repetition-penalty", NULL, CLI_FLOAT, &rep_pen,
         "divide positive (multiply negative) logits of seen tokens (1 = off)", NULL, 0.01, 100},
        {"--presence-penalty", NULL, CLI_FLOAT, &pres_pen, "subtract from generated tokens' logits",
         NULL, -2, 2},
        {"--frequency-penalty", NULL, CLI_FLOAT, &freq_pen,
         "subtract count x this from generated tokens' logits", NULL, -2, 2},
        {"--seed", "-s", CLI_INT, &seed,
         "sampling seed (same seed as a server request's: same tokens)", NULL, 0, 9.2e18},
        {"--threads", "-t", CLI_INT, &threads, "threads (0 = all CPUs)", NULL, 0, 1024},
        {"--block-size", NULL, CLI_INT, &block, "KV block size in positions", NULL, 1, 65536},
        {"--kv-dtype", NULL, CLI_CHOICE, &kvd, "KV cache element type", "f32|bf16"},
        {"--gdn-prefill", NULL, CLI_CHOICE, &gdn_mode,
         "Gated DeltaNet prefill: token-by-token recurrence or the chunked form (docs/model.md "
         "2.4)",
         "recurrent|chunked"},
        {"--prefill-chunk", NULL, CLI_INT, &chunk, "prefill in calls of N tokens (0 = one call)",
         NULL, 0, 1e9},
        {"--ignore-eos", NULL, CLI_FLAG, &ignore_eos, "keep going after an end-of-sequence token"},
        {"--logits-hash", NULL, CLI_FLAG, &hash, "print an xxh64 hash of every step's logits"},
        {"--ids", NULL, CLI_FLAG, &print_ids, "print token ids instead of text"},
        {"--json-schema", NULL, CLI_STR, &schema_file,
         "constrain the output to a JSON Schema (file)"},
        {"--regex", NULL, CLI_STR, &regex, "constrain the output to match a regex"},
        {"--grammar", NULL, CLI_STR, &grammar_file,
         "constrain the output to a GBNF grammar (file)"},
        {0}};
    const cli_spec spec = {
        "generate",
        "MODEL (-p TEXT | --tokens IDS) [options]",
        "Generate tokens from a prompt on one sequence; prints ids, then prefill and decode tok/s.",
        opts,
        1,
        1};
    const char *pos[1];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    if (!!prompt == !!tokens) {
        fprintf(stderr, "cllm generate: give exactly one of -p TEXT or --tokens IDS\n");
        return 2;
    }
    cllm_error err = {0};
    int32_t *ids = NULL;
    int n;
    /* The tokenizer is optional for --tokens (synthetic models have none), required for -p. */
    cllm_tok *tok = NULL;
    if (cllm_tok_load(pos[0], &tok, &err) != CLLM_OK) {
        tok = NULL;
        if (prompt) {
            fprintf(stderr, "cllm generate: -p needs the model's tokenizer: %s\n", err.msg);
            return 1;
        }
    }
    cllm_tok_stream ts;
    if (tok) cllm_tok_stream_init(&ts, tok, true);
    if (prompt) {
        cllm_tok_ids v = {0};
        if (cllm_tok_encode(tok, prompt, strlen(prompt), 0, &v, &err) != CLLM_OK || v.n == 0) {
            fprintf(stderr, "cllm generate: %s\n", v.n == 0 ? "empty prompt" : err.msg);
            cllm_tok_ids_free(&v);
            cllm_tok_stream_free(&ts);
            cllm_tok_free(tok);
            return 2;
        }
        ids = v.ids;
        n = (int)v.n;
    } else {
        n = cllm_parse_token_list(tokens, &ids, &err);
        if (n < 0) {
            fprintf(stderr, "cllm generate: %s\n", err.msg);
            if (tok) cllm_tok_stream_free(&ts);
            cllm_tok_free(tok);
            return 2;
        }
    }
    if (!tok) print_ids = true;
    /* generation_config.json may list more end tokens than config.json (Qwen3.5: <|im_end|>). */
    cllm_gen_config gen;
    if (cllm_gen_config_load(pos[0], &gen, &err) != CLLM_OK) gen.n_eos = 0;
    cllm_seq_runner r;
    if (cllm_seq_runner_open(&r, pos[0], (int)threads, n + (int)n_gen, (int)block,
                             !strcmp(kvd, "bf16") ? CLLM_KV_BF16 : CLLM_KV_F32, &err) != CLLM_OK) {
        fprintf(stderr, "cllm generate: %s\n", err.msg);
        free(ids);
        return 1;
    }
    cllm_fwd_ctx_set_gdn_prefill(r.ctx, (cllm_gdn_prefill)cllm_gdn_prefill_parse(gdn_mode));
    const cllm_config *cf = cllm_model_config(r.m);
    int V = cf->vocab_size, ret = 0;
    /* the fields the server fills from a request; the rest off */
    cllm_sampling sp = {.temperature = temperature,
                        .top_p = top_p,
                        .top_k = (int)top_k,
                        .min_p = min_p,
                        .repetition_penalty = rep_pen,
                        .presence_penalty = pres_pen,
                        .frequency_penalty = freq_pen,
                        .seed = (uint64_t)seed,
                        .has_seed = true,
                        .max_tokens = (int)n_gen,
                        .ignore_eos = ignore_eos,
                        .logprobs = -1,
                        .n = 1};
    cllm_gm *gm = NULL;
    cllm_gm_vocab *gv = NULL;
    cllm_gm_matcher *gmm = NULL;
    uint32_t *allow = NULL;
    smp_scratch sm = {0};
    float *logits = malloc((size_t)V * sizeof(float));
    int32_t *out = malloc(((size_t)n_gen + 1) * sizeof(int32_t));
    if (!logits || !out || smp_init(&sm, V)) {
        fprintf(stderr, "cllm generate: out of memory\n");
        ret = 1;
        goto done;
    }
    /* structured output: the same grammar masks the server's sampler path applies */
    if (schema_file || regex || grammar_file) {
        if ((!!schema_file + !!regex + !!grammar_file) > 1 || !tok) {
            fprintf(stderr, "cllm generate: %s\n",
                    tok ? "give one of --json-schema, --regex, --grammar"
                        : "a constraint needs the model's tokenizer");
            ret = 2;
            goto done;
        }
        char *src = NULL;
        size_t sl = 0;
        if (!regex) {
            FILE *f = fopen(schema_file ? schema_file : grammar_file, "rb");
            if (f) {
                fseek(f, 0, SEEK_END);
                long fl = ftell(f);
                fseek(f, 0, SEEK_SET);
                src = fl >= 0 ? malloc((size_t)fl + 1) : NULL;
                if (src && fread(src, 1, (size_t)fl, f) == (size_t)fl) sl = (size_t)fl;
                fclose(f);
            }
            if (!src) {
                fprintf(stderr, "cllm generate: cannot read %s\n",
                        schema_file ? schema_file : grammar_file);
                ret = 1;
                goto done;
            }
        }
        cllm_status gst = schema_file ? cllm_gm_from_json_schema(src, sl, NULL, &gm, &err)
                          : regex     ? cllm_gm_from_regex(regex, strlen(regex), NULL, &gm, &err)
                                      : cllm_gm_from_gbnf(src, sl, NULL, &gm, &err);
        free(src);
        int eos_all[2 * CLLM_MAX_EOS], n_all = 0;
        for (int e = 0; e < cf->n_eos; e++) eos_all[n_all++] = cf->eos_ids[e];
        for (int e = 0; e < gen.n_eos && n_all < 2 * CLLM_MAX_EOS; e++)
            eos_all[n_all++] = gen.eos_ids[e];
        if (gst == CLLM_OK) gst = cllm_gm_vocab_from_tok(tok, eos_all, n_all, &gv, &err);
        if (gst == CLLM_OK && cllm_gm_vocab_size(gv) > V)
            gst = cllm_err_set(&err, CLLM_EINVAL, "the tokenizer has more ids than the model");
        if (gst == CLLM_OK) {
            gmm = cllm_gm_matcher_new(gm, gv);
            allow = calloc((size_t)(V + 31) / 32, sizeof(uint32_t));
        }
        if (gst != CLLM_OK || !gmm || !allow) {
            fprintf(stderr, "cllm generate: %s\n", gst != CLLM_OK ? err.msg : "out of memory");
            ret = gst == CLLM_OK ? 1 : 2;
            goto done;
        }
    }
    double t0 = cllm_time_s();
    int step = chunk > 0 ? (int)chunk : n;
    for (int i = 0; i < n; i += step) {
        int m = n - i < step ? n - i : step;
        if (cllm_seq_runner_step(&r, ids + i, m, i + m == n ? CLLM_LOGITS_LAST : CLLM_LOGITS_NONE,
                                 logits, &err)) {
            fprintf(stderr, "cllm generate: %s\n", err.msg);
            ret = 1;
            goto done;
        }
    }
    double t1 = cllm_time_s();
    int made = 0;
    for (; made < n_gen; made++) {
        if (hash)
            fprintf(stderr, "[logits-hash %016llx]\n",
                    (unsigned long long)XXH64(logits, (size_t)V * sizeof(float), 0));
        smp_input in = {.logits = logits,
                        .prompt = ids,
                        .n_prompt = n,
                        .out = out,
                        .n_out = made,
                        .seed = sp.seed,
                        .index = 0,
                        .step = made};
        if (gmm) {
            if (cllm_gm_matcher_mask(gmm, allow) == 0) break; /* complete: nothing may follow */
            in.allow = allow;
        }
        int32_t next = smp_sample(&sm, &sp, &in, NULL);
        out[made] = next;
        bool gm_done = false;
        if (gmm) {
            if (!cllm_gm_matcher_accept_token(gmm, next)) {
                fprintf(stderr, "\ncllm generate: structured output: sampled token rejected\n");
                ret = 1;
                goto done;
            }
            gm_done = cllm_gm_matcher_is_done(gmm);
        }
        if (print_ids) {
            printf("%d%s", next, made + 1 < n_gen ? " " : "");
        } else {
            size_t len;
            const char *text = cllm_tok_stream_push(&ts, next, &len, &err);
            if (text) fwrite(text, 1, len, stdout);
        }
        fflush(stdout);
        bool eos = false;
        for (int e = 0; e < cf->n_eos; e++) eos |= cf->eos_ids[e] == next;
        for (int e = 0; e < gen.n_eos; e++) eos |= gen.eos_ids[e] == next;
        if ((eos && !ignore_eos) || gm_done) {
            made++;
            break;
        }
        if (made + 1 == n_gen) {
            made++;
            break;
        }
        if (cllm_seq_runner_step(&r, &next, 1, CLLM_LOGITS_LAST, logits, &err)) {
            fprintf(stderr, "\ncllm generate: %s\n", err.msg);
            ret = 1;
            goto done;
        }
    }
    double t2 = cllm_time_s();
    if (!print_ids) {
        size_t len;
        const char *text = cllm_tok_stream_flush(&ts, &len);
        if (text) fwrite(text, 1, len, stdout);
    }
    printf("\n");
    /* decode steps = generated tokens minus the one sampled from the prefill logits */
    int dsteps = made > 0 ? made - 1 : 0;
    fprintf(stderr,
            "prefill: %d tokens in %.3f s (%.2f tok/s); decode: %d tokens in %.3f s (%.2f tok/s)\n",
            n, t1 - t0, n / (t1 - t0), dsteps, t2 - t1, dsteps > 0 ? dsteps / (t2 - t1) : 0.0);
done:
    cllm_gm_matcher_free(gmm);
    cllm_gm_vocab_free(gv);
    cllm_gm_unref(gm);
    free(allow);
    free(logits);
    free(out);
    smp_free(&sm);
    free(ids);
    if (tok) cllm_tok_stream_free(&ts);
    cllm_tok_free(tok);
    cllm_seq_runner_close(&r);
    return ret;
}
