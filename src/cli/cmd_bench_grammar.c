/* `cllm bench-grammar --tokenizer PATH SCHEMA...`: structured-output cost beside xgrammar.
 *
 * For each JSON Schema file: compile time (schema -> automaton, plus filling every node's mask
 * cache, which is what xgrammar's compile does), then a token sequence sampled at random inside
 * the grammar (seeded), timing the mask of every step (median, p99). The same vocabulary, schema
 * and token sequence then go to xgrammar's WebAssembly build (scripts/bench-grammar-xgrammar.mjs,
 * npm @mlc-ai/web-xgrammar, compact separators and strict mode like cllm's defaults), which also
 * reports whether its matcher accepted cllm's tokens one by one. Both in one run, one table.
 * With --mixed MODEL: the cost to unconstrained neighbours in one batch (bench_grammar_mixed.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <unistd.h>

#include "base/file.h"
#include "base/mem.h"
#include "cli/bench_grammar.h"
#include "cli/cli.h"
#include "cli/commands.h"
#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double quant(double *v, int n, double p) {
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    int i = (int)(p * n);
    return v[i < n ? i : n - 1];
}

/* Runs the peer and reads its JSON line into the fields we print. */
static bool run_peer(const char *script, const char *tok_json, const char *schema,
                     const char *tokens, bool any_ws, double *out) {
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "node '%s' '%s' '%s' '%s' %d 2>&1", script, tok_json, schema, tokens,
             any_ws ? 1 : 0);
    FILE *p = popen(cmd, "r");
    if (!p) return false;
    char line[8192] = "", buf[8192];
    while (fgets(buf, sizeof(buf), p))
        if (buf[0] == '{') snprintf(line, sizeof(line), "%s", buf);
    int rc = pclose(p);
    if (rc != 0 || !line[0]) return false;
    static const char *keys[] = {
        "\"tokenizer_ms\":", "\"compile_ms\":", "\"mask_median_ms\":", "\"mask_p99_ms\":",
        "\"accepted\":",     "\"tokens\":",     "\"mask_mean_ms\":"};
    for (int i = 0; i < 7; i++) {
        const char *k = strstr(line, keys[i]);
        out[i] = k ? atof(k + strlen(keys[i])) : -1;
    }
    return true;
}

int cmd_bench_grammar(int argc, char **argv) {
    const char *tok_path = NULL, *peer = "scripts/bench-grammar-xgrammar.mjs";
    long steps = 128, seed = 1;
    bool no_peer = false, any_ws = false, no_cache = false;
    const char *mixed = NULL;
    long batch = 8, mtokens = 64, plen = 32, rounds = 3, threads = 0;
    const cli_opt opts[] = {
        {"--tokenizer", NULL, CLI_STR, &tok_path, "tokenizer.json (or a model directory)"},
        {"--steps", "-n", CLI_INT, &steps, "tokens per schema (at most)", NULL, 1, 1e6},
        {"--seed", "-s", CLI_INT, &seed, "seed of the random token sequence", NULL, 0, 9.2e18},
        {"--any-whitespace", NULL, CLI_FLAG, &any_ws, "allow whitespace between JSON tokens"},
        {"--peer-script", NULL, CLI_STR, &peer, "xgrammar side (node script)"},
        {"--no-peer", NULL, CLI_FLAG, &no_peer, "cllm only"},
        {"--mixed", NULL, CLI_STR, &mixed,
         "MODEL_DIR: unconstrained throughput with vs without constrained neighbours"},
        {"--batch", "-b", CLI_INT, &batch, "--mixed: rows per batch (half measured)", NULL, 2, 128},
        {"--tokens", NULL, CLI_INT, &mtokens, "--mixed: tokens per measured request", NULL, 2,
         100000},
        {"--prompt-len", NULL, CLI_INT, &plen, "--mixed: prompt tokens", NULL, 1, 100000},
        {"--rounds", NULL, CLI_INT, &rounds, "--mixed: (mixed, baseline) round pairs", NULL, 1,
         1000},
        {"--no-cache", NULL, CLI_FLAG, &no_cache,
         "--mixed: compile every request's grammar afresh (no compile cache)"},
        {"--threads", "-t", CLI_INT, &threads, "--mixed: engine threads (0 = all cores)", NULL, 0,
         1024},
        {0}};
    const cli_spec spec = {"bench-grammar",
                           "--tokenizer PATH SCHEMA.json... [options]",
                           "JSON-schema mask and compile times, cllm beside xgrammar (wasm).",
                           opts,
                           1,
                           256};
    const char *pos[256];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    if (mixed) {
        bgm_args ma = {mixed,     tok_path,    pos,          np,   (int)batch, (int)mtokens,
                       (int)plen, (int)rounds, (int)threads, seed, no_cache};
        return bench_grammar_mixed(&ma);
    }
    if (!tok_path) {
        fprintf(stderr, "cllm bench-grammar: --tokenizer is required\n");
        return 2;
    }
    char tj[2048];
    struct stat sb;
    if (!stat(tok_path, &sb) && S_ISDIR(sb.st_mode))
        snprintf(tj, sizeof(tj), "%s/tokenizer.json", tok_path);
    else
        snprintf(tj, sizeof(tj), "%s", tok_path);
    cllm_error err = {0};
    cllm_tok *tok = NULL;
    double t0 = cllm_time_s();
    if (cllm_tok_load_files(tj, NULL, &tok, &err) != CLLM_OK) {
        fprintf(stderr, "cllm bench-grammar: %s\n", err.msg);
        return 1;
    }
    int eos[2], n_eos = 0;
    const char *eos_names[] = {"<|im_end|>", "<|endoftext|>"};
    for (int i = 0; i < 2; i++) {
        int id = cllm_tok_token_id(tok, eos_names[i], strlen(eos_names[i]));
        if (id >= 0) eos[n_eos++] = id;
    }
    double t1 = cllm_time_s();
    cllm_gm_vocab *v = NULL;
    if (cllm_gm_vocab_from_tok(tok, eos, n_eos, &v, &err) != CLLM_OK) {
        fprintf(stderr, "cllm bench-grammar: %s\n", err.msg);
        cllm_tok_free(tok);
        return 1;
    }
    double t2 = cllm_time_s();
    int V = cllm_gm_vocab_size(v), W = (V + 31) / 32;
    printf("vocabulary: %d tokens (%s); cllm: tokenizer load %.0f ms, token trie %.0f ms\n", V, tj,
           (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    printf("%-28s %5s | %10s %10s %9s %9s | %10s %9s %9s %8s\n", "schema", "steps", "cllm comp",
           "(+cache)", "mask p50", "mask p99", "xgr comp", "mask p50", "mask p99", "accepts");
    uint32_t *mask = malloc((size_t)W * sizeof(uint32_t));
    double *ts = malloc((size_t)steps * sizeof(double));
    int ret = 0;
    bool peer_tok_printed = false;
    uint64_t rng = (uint64_t)seed * 0x9e3779b97f4a7c15ull + 1;
    for (int k = 0; k < np && mask && ts; k++) {
        size_t len = 0;
        cllm_error rerr = {0};
        char *text = cllm_read_file(pos[k], 0, &len, &rerr);
        if (!text) {
            fprintf(stderr, "cllm bench-grammar: cannot read schema: %s\n", rerr.msg);
            ret = 1;
            continue;
        }
        cllm_gm_opts o = {.any_whitespace = any_ws};
        cllm_gm *g = NULL;
        double c0 = cllm_time_s();
        cllm_status st = cllm_gm_from_json_schema(text, len, &o, &g, &err);
        double c1 = cllm_time_s();
        free(text);
        if (st != CLLM_OK) {
            printf("%-28.28s refused: %s\n", pos[k], err.msg);
            continue;
        }
        cllm_gm_precompute(g, v);
        double c2 = cllm_time_s();
        cllm_gm_matcher *m = cllm_gm_matcher_new(g, v);
        char tpath[] = "/tmp/cllm-bench-grammar-XXXXXX";
        int fd = mkstemp(tpath);
        FILE *tf = fd >= 0 ? fdopen(fd, "w") : NULL;
        int n = 0;
        for (; m && n < steps; n++) {
            double a = cllm_time_s();
            int cnt = cllm_gm_matcher_mask(m, mask);
            ts[n] = cllm_time_s() - a;
            if (cnt <= 0) break;
            /* uniform among allowed tokens; end when allowed (1 in 3) so outputs stay short */
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            bool end = cllm_gm_matcher_is_accepting(m) && rng % 3 == 0;
            int pick = (int)(rng % (uint64_t)cnt), t = -1;
            for (int w = 0; w < W && t < 0; w++) {
                int c = __builtin_popcount(mask[w]);
                if (pick >= c) {
                    pick -= c;
                    continue;
                }
                for (int bit = 0; bit < 32; bit++)
                    if (mask[w] >> bit & 1 && pick-- == 0) {
                        t = w * 32 + bit;
                        break;
                    }
            }
            if (end && n_eos) t = eos[0];
            if (tf) fprintf(tf, "%d\n", t);
            if (!cllm_gm_matcher_accept_token(m, t) || cllm_gm_matcher_is_done(m)) {
                n++;
                break;
            }
        }
        if (tf) fclose(tf);
        double p50 = quant(ts, n, 0.5), p99 = quant(ts, n, 0.99);
        double peer_v[7] = {0};
        bool have_peer = !no_peer && run_peer(peer, tj, pos[k], tpath, any_ws, peer_v);
        const char *base = strrchr(pos[k], '/');
        base = base ? base + 1 : pos[k];
        printf("%-28.28s %5d | %8.2fms %8.1fms %7.1fus %7.1fus |", base, n, (c1 - c0) * 1e3,
               (c2 - c1) * 1e3, p50 * 1e6, p99 * 1e6);
        if (have_peer)
            printf(" %8.1fms %7.1fus %7.1fus %4.0f/%-4.0f\n", peer_v[1], peer_v[2] * 1e3,
                   peer_v[3] * 1e3, peer_v[4], peer_v[5]);
        else
            printf(" %s\n", no_peer ? "(no peer)" : "(peer failed: node + npm ci?)");
        if (have_peer && !peer_tok_printed) {
            printf("  (xgrammar tokenizer info + compiler setup: %.0f ms)\n", peer_v[0]);
            peer_tok_printed = true;
        }
        unlink(tpath);
        cllm_gm_matcher_free(m);
        cllm_gm_unref(g);
    }
    free(mask);
    free(ts);
    cllm_gm_vocab_free(v);
    cllm_tok_free(tok);
    return ret;
}
