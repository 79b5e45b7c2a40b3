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

#include "base/file.h"
#include "base/mem.h"
#include "cli/cli.h"
#include "cli/cli_spec.h"
#include "cli/commands.h"
#include "cli/generate_engine.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "model/config.h"
#include "model/seq_runner.h"
#include "tokenizer/tokenizer.h"

/* One generation: the prompt, the runner, the sampler and an optional grammar constraint. */
typedef struct gen {
    cllm_tok *tok; /* NULL: the model has no tokenizer.json (ids only) */
    cllm_tok_stream ts;
    int32_t *ids; /* the prompt */
    int n;
    cllm_gen_config gen_cfg; /* generation_config.json's end tokens */
    cllm_seq_runner r;
    bool r_open;
    const cllm_config *cf;
    int V;
    cllm_sampling sp;
    smp_scratch sm;
    float *logits;
    int32_t *out; /* generated ids */
    cllm_gm *gm;
    cllm_gm_vocab *gv;
    cllm_gm_matcher *gmm;
    uint32_t *allow;
    cllm_error err;
} gen;

static void gen_free(gen *g) {
    cllm_gm_matcher_free(g->gmm);
    cllm_gm_vocab_free(g->gv);
    cllm_gm_unref(g->gm);
    free(g->allow);
    free(g->logits);
    free(g->out);
    smp_free(&g->sm);
    free(g->ids);
    if (g->tok) cllm_tok_stream_free(&g->ts);
    cllm_tok_free(g->tok);
    if (g->r_open) cllm_seq_runner_close(&g->r);
}

/* The tokenizer (optional for --tokens: synthetic models have none, required for -p) and the
 * prompt ids. Returns 0 or the exit code. */
static int load_prompt(gen *g, const char *dir, const char *prompt, const char *tokens) {
    if (cllm_tok_load(dir, &g->tok, &g->err) != CLLM_OK) {
        g->tok = NULL;
        if (prompt) {
            fprintf(stderr, "cllm generate: -p needs the model's tokenizer: %s\n", g->err.msg);
            return 1;
        }
    }
    if (g->tok) cllm_tok_stream_init(&g->ts, g->tok, true);
    if (!prompt) {
        g->n = cllm_parse_token_list(tokens, &g->ids, &g->err);
        if (g->n >= 0) return 0;
        fprintf(stderr, "cllm generate: %s\n", g->err.msg);
        return 2;
    }
    cllm_tok_ids v = {0};
    if (cllm_tok_encode(g->tok, prompt, strlen(prompt), 0, &v, &g->err) != CLLM_OK || v.n == 0) {
        fprintf(stderr, "cllm generate: %s\n", v.n == 0 ? "empty prompt" : g->err.msg);
        cllm_tok_ids_free(&v);
        return 2;
    }
    g->ids = v.ids;
    g->n = (int)v.n;
    return 0;
}

/* The constraint's grammar (g->gm) from one of the three sources; returns 0 or the exit code. */
static int compile_constraint(gen *g, const char *schema_file, const char *regex,
                              const char *grammar_file) {
    if ((!!schema_file + !!regex + !!grammar_file) > 1 || !g->tok) {
        fprintf(stderr, "cllm generate: %s\n",
                g->tok ? "give one of --json-schema, --regex, --grammar"
                       : "a constraint needs the model's tokenizer");
        return 2;
    }
    char *src = NULL;
    size_t sl = 0;
    if (!regex && !(src = cllm_read_file(schema_file ? schema_file : grammar_file, 0, &sl, NULL))) {
        fprintf(stderr, "cllm generate: cannot read %s\n",
                schema_file ? schema_file : grammar_file);
        return 1;
    }
    cllm_error *err = &g->err;
    cllm_status gst = schema_file ? cllm_gm_from_json_schema(src, sl, NULL, &g->gm, err)
                      : regex     ? cllm_gm_from_regex(regex, strlen(regex), NULL, &g->gm, err)
                                  : cllm_gm_from_gbnf(src, sl, NULL, &g->gm, err);
    free(src);
    if (gst == CLLM_OK) return 0;
    fprintf(stderr, "cllm generate: %s\n", err->msg);
    return 2;
}

/* Structured output: the same grammar masks the server's sampler path applies. At most one of
 * the three; returns 0 or the exit code. */
static int setup_constraint(gen *g, const char *schema_file, const char *regex,
                            const char *grammar_file) {
    int rc = compile_constraint(g, schema_file, regex, grammar_file);
    if (rc) return rc;
    cllm_error *err = &g->err;
    int eos_all[2 * CLLM_MAX_EOS], n_all = 0;
    for (int e = 0; e < g->cf->n_eos; e++) eos_all[n_all++] = g->cf->eos_ids[e];
    for (int e = 0; e < g->gen_cfg.n_eos && n_all < 2 * CLLM_MAX_EOS; e++)
        eos_all[n_all++] = g->gen_cfg.eos_ids[e];
    cllm_status gst = cllm_gm_vocab_from_tok(g->tok, eos_all, n_all, &g->gv, err);
    if (gst == CLLM_OK && cllm_gm_vocab_size(g->gv) > g->V)
        gst = cllm_err_set(err, CLLM_EINVAL, "the tokenizer has more ids than the model");
    if (gst == CLLM_OK) {
        g->gmm = cllm_gm_matcher_new(g->gm, g->gv);
        g->allow = calloc((size_t)(g->V + 31) / 32, sizeof(uint32_t));
    }
    if (gst != CLLM_OK || !g->gmm || !g->allow) {
        fprintf(stderr, "cllm generate: %s\n", gst != CLLM_OK ? err->msg : "out of memory");
        return gst == CLLM_OK ? 1 : 2;
    }
    return 0;
}

/* The prompt in calls of `chunk` tokens (0 = one call); logits of its last token. */
static int prefill(gen *g, int chunk) {
    int step = chunk > 0 ? chunk : g->n;
    for (int i = 0; i < g->n; i += step) {
        int m = g->n - i < step ? g->n - i : step;
        if (cllm_seq_runner_step(&g->r, g->ids + i, m,
                                 i + m == g->n ? CLLM_LOGITS_LAST : CLLM_LOGITS_NONE, g->logits,
                                 &g->err)) {
            fprintf(stderr, "cllm generate: %s\n", g->err.msg);
            return 1;
        }
    }
    return 0;
}

/* Samples up to n_gen tokens, streaming them to stdout, until an end token (unless ignore_eos)
 * or a complete constrained output; *made = tokens generated. Returns 0 or the exit code. */
static int decode(gen *g, int n_gen, bool print_ids, bool hash, int *made) {
    const cllm_config *cf = g->cf;
    for (*made = 0; *made < n_gen; ++*made) {
        int k = *made;
        if (hash)
            fprintf(stderr, "[logits-hash %016llx]\n",
                    (unsigned long long)XXH64(g->logits, (size_t)g->V * sizeof(float), 0));
        smp_input in = {.logits = g->logits,
                        .prompt = g->ids,
                        .n_prompt = g->n,
                        .out = g->out,
                        .n_out = k,
                        .seed = g->sp.seed,
                        .index = 0,
                        .step = k};
        if (g->gmm) {
            int allowed = cllm_gm_matcher_mask(g->gmm, g->allow);
            if (allowed == 0) break; /* complete: nothing follows */
            if (allowed < 0) {
                fprintf(stderr, "\ncllm generate: structured output: the grammar's state outgrew "
                                "its caps (4096 stacks); the grammar is too ambiguous\n");
                return 1;
            }
            in.allow = g->allow;
        }
        int32_t next = smp_sample(&g->sm, &g->sp, &in, NULL);
        g->out[k] = next;
        bool gm_done = false;
        if (g->gmm) {
            if (!cllm_gm_matcher_accept_token(g->gmm, next)) {
                fprintf(stderr, "\ncllm generate: structured output: sampled token rejected\n");
                return 1;
            }
            gm_done = cllm_gm_matcher_is_done(g->gmm);
        }
        if (print_ids) {
            printf("%d%s", next, k + 1 < n_gen ? " " : "");
        } else {
            size_t len;
            const char *text = cllm_tok_stream_push(&g->ts, next, &len, &g->err);
            if (text) fwrite(text, 1, len, stdout);
        }
        fflush(stdout);
        bool eos = false;
        for (int e = 0; e < cf->n_eos; e++) eos |= cf->eos_ids[e] == next;
        for (int e = 0; e < g->gen_cfg.n_eos; e++) eos |= g->gen_cfg.eos_ids[e] == next;
        if ((eos && !g->sp.ignore_eos) || gm_done || k + 1 == n_gen) {
            ++*made;
            break;
        }
        if (cllm_seq_runner_step(&g->r, &next, 1, CLLM_LOGITS_LAST, g->logits, &g->err)) {
            fprintf(stderr, "\ncllm generate: %s\n", g->err.msg);
            return 1;
        }
    }
    return 0;
}

int cmd_generate(int argc, char **argv) {
    const char *prompt = NULL, *tokens = NULL, *kvd = "f32", *ssmd = "f32";
    const char *gdn_mode = "recurrent", *act16 = NULL, *spec_json = NULL;
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
        {"--speculative-config", NULL, CLI_STR, &spec_json,
         "speculative decoding as serve takes it (also synthetic_acceptance): the sequence runs "
         "through the engine; same tokens as without"},
        {"--block-size", NULL, CLI_INT, &block, "KV block size in positions", NULL, 1, 65536},
        {"--kv-dtype", NULL, CLI_CHOICE, &kvd, "KV cache element type", "f32|bf16"},
        CLI_SSM_DTYPE_ROW(&ssmd, ""),
        CLI_GDN_PREFILL_ROW(&gdn_mode),
        {"--act16", NULL, CLI_CHOICE, &act16, CLI_ACT16_HELP, CLI_ACT16_CHOICES},
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
    cllm_spec_opts so;
    char smsg[256];
    if (cli_spec_parse(spec_json, true, &so, smsg, sizeof(smsg)) != 0) {
        fprintf(stderr, "cllm generate: %s\n", smsg);
        return 2;
    }
    /* the engine runs the sequence then: what only the direct path has is refused by name */
    if (spec_json && (hash || chunk > 0)) {
        fprintf(stderr,
                "cllm generate: %s does not go with --speculative-config (the engine runs the "
                "sequence; it exposes no logits and plans its own prefill chunks)\n",
                hash ? "--logits-hash" : "--prefill-chunk");
        return 2;
    }
    const cllm_fwd_opts fwd = cli_fwd_opts(act16);
    if (!!prompt == !!tokens) {
        fprintf(stderr, "cllm generate: give exactly one of -p TEXT or --tokens IDS\n");
        return 2;
    }
    if (cli_check_model_dir("generate", &pos[0])) return 1;
    gen g = {0};
    int ret = load_prompt(&g, pos[0], prompt, tokens);
    if (ret) goto done;
    if (!g.tok) print_ids = true;
    /* the fields the server fills from a request; the rest off */
    g.sp = (cllm_sampling){.temperature = temperature,
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
    if (spec_json) {
        gen_engine_args ea = {pos[0],
                              (const int *)g.ids,
                              g.n,
                              (int)n_gen,
                              g.sp,
                              so,
                              fwd,
                              (int)threads,
                              (int)block,
                              cllm_gdn_prefill_parse(gdn_mode),
                              !strcmp(kvd, "bf16"),
                              !strcmp(ssmd, "bf16"),
                              print_ids};
        /* a constraint goes to the engine as the server gives it: the compiled grammar */
        if ((schema_file || regex || grammar_file) &&
            (ret = compile_constraint(&g, schema_file, regex, grammar_file)))
            goto done;
        ea.sampling.grammar = g.gm;
        ret = generate_engine(&ea);
        goto done;
    }
    /* generation_config.json may list more end tokens than config.json (Qwen3.5: <|im_end|>). */
    if (cllm_gen_config_load(pos[0], &g.gen_cfg, &g.err) != CLLM_OK) g.gen_cfg.n_eos = 0;
    if (cllm_seq_runner_open(&g.r, pos[0], &fwd, (int)threads, g.n + (int)n_gen, (int)block,
                             !strcmp(kvd, "bf16") ? CLLM_KV_BF16 : CLLM_KV_F32,
                             &g.err) != CLLM_OK) {
        fprintf(stderr, "cllm generate: %s\n", g.err.msg);
        ret = 1;
        goto done;
    }
    g.r_open = true;
    if (!strcmp(ssmd, "bf16") &&
        cllm_seq_runner_set_state_dtype(&g.r, CLLM_KV_BF16, &g.err) != CLLM_OK) {
        fprintf(stderr, "cllm generate: %s\n", g.err.msg);
        ret = 1;
        goto done;
    }
    cllm_fwd_ctx_set_gdn_prefill(g.r.ctx, (cllm_gdn_prefill)cllm_gdn_prefill_parse(gdn_mode));
    g.cf = cllm_model_config(g.r.m);
    g.V = g.cf->vocab_size;
    g.logits = malloc((size_t)g.V * sizeof(float));
    g.out = malloc(((size_t)n_gen + 1) * sizeof(int32_t));
    if (!g.logits || !g.out || smp_init(&g.sm, g.V)) {
        fprintf(stderr, "cllm generate: out of memory\n");
        ret = 1;
        goto done;
    }
    if ((schema_file || regex || grammar_file) &&
        (ret = setup_constraint(&g, schema_file, regex, grammar_file)))
        goto done;
    /* tensor parallel: ranks send their best k logits, not their slices, when the sampling
     * needs no more (a hash of the whole row does) */
    if (!g.gmm && !hash)
        g.r.logits_topk = smp_reduce_k(&g.sp, g.V, false, false, &g.r.logits_scale);
    double t0 = cllm_time_s();
    if ((ret = prefill(&g, (int)chunk))) goto done;
    double t1 = cllm_time_s();
    int made = 0;
    if ((ret = decode(&g, (int)n_gen, print_ids, hash, &made))) goto done;
    double t2 = cllm_time_s();
    if (!print_ids) {
        size_t len;
        const char *text = cllm_tok_stream_flush(&g.ts, &len);
        if (text) fwrite(text, 1, len, stdout);
    }
    printf("\n");
    /* decode steps = generated tokens minus the one sampled from the prefill logits */
    int dsteps = made > 0 ? made - 1 : 0;
    fprintf(stderr,
            "prefill: %d tokens in %.3f s (%.2f tok/s); decode: %d tokens in %.3f s (%.2f tok/s)\n",
            g.n, t1 - t0, g.n / (t1 - t0), dsteps, t2 - t1, dsteps > 0 ? dsteps / (t2 - t1) : 0.0);
done:
    gen_free(&g);
    return ret;
}
