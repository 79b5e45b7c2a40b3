/* See cli_spec.h. Keys and defaults follow vLLM's SpeculativeConfig: "ngram" (also "[ngram]")
 * with prompt_lookup_min/max defaulting to each other, both 5 when neither is given. Keys vLLM
 * knows that cllm cannot honour are refused naming them, and so is anything unknown. */
#include "cli/cli_spec.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static int fail(char *msg, size_t cap, const char *fmt, const char *a) {
    snprintf(msg, cap, fmt, a);
    return -1;
}

/* An integer key in [lo, hi]; absent keeps *v. */
static int get_int(json_t *j, const char *key, int lo, int hi, int *v, char *msg, size_t cap) {
    json_t *x = json_object_get(j, key);
    if (!x) return 0;
    if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi) {
        snprintf(msg, cap, "--speculative-config: %s must be an integer in [%d, %d]", key, lo, hi);
        return -1;
    }
    *v = (int)json_integer_value(x);
    return 1;
}

int cli_spec_parse(const char *json, bool bench, cllm_spec_opts *o, char *msg, size_t cap) {
    memset(o, 0, sizeof(*o));
    if (!json) return 0;
    json_error_t je;
    json_t *j = json_loads(json, 0, &je);
    if (!j || !json_is_object(j)) {
        json_decref(j);
        return fail(msg, cap, "--speculative-config: not a JSON object (%s)", je.text);
    }
    static const char *const unsupported[] = {"model",
                                              "draft_tensor_parallel_size",
                                              "quantization",
                                              "max_model_len",
                                              "revision",
                                              "code_revision",
                                              "speculative_token_tree",
                                              "draft_model",
                                              "acceptance_method",
                                              "posterior_threshold",
                                              "posterior_alpha",
                                              "disable_padded_drafter_batch",
                                              NULL};
    static const char *const known[] = {"method",
                                        "num_speculative_tokens",
                                        "prompt_lookup_min",
                                        "prompt_lookup_max",
                                        "disable_by_batch_size",
                                        "suffix_decoding_max_tree_depth",
                                        "suffix_decoding_max_cached_requests",
                                        "suffix_decoding_max_spec_factor",
                                        "suffix_decoding_min_token_prob",
                                        "synthetic_acceptance",
                                        "fixed_k",
                                        "draft_vocab_size",
                                        NULL};
    const char *key;
    json_t *val;
    int rc = -1;
    json_object_foreach(j, key, val) {
        for (int i = 0; unsupported[i]; i++)
            if (!strcmp(key, unsupported[i])) {
                fail(
                    msg, cap,
                    "--speculative-config: key '%s' is not supported by cllm (drafts come from the "
                    "checkpoint's MTP head, n-gram lookup or suffix matching; no separate draft "
                    "model)",
                    key);
                goto out;
            }
        int ok = 0;
        for (int i = 0; known[i]; i++) ok |= !strcmp(key, known[i]);
        if (!ok) {
            fail(msg, cap, "--speculative-config: unknown key '%s'", key);
            goto out;
        }
        /* fixed_k changes speed only; synthetic acceptance changes the tokens */
        if (!bench && !strcmp(key, "synthetic_acceptance")) {
            fail(msg, cap,
                 "--speculative-config: '%s' is for benchmarks only (cllm bench); a server must "
                 "return the model's own tokens",
                 key);
            goto out;
        }
    }
    json_t *m = json_object_get(j, "method");
    if (!m) {
        fail(msg, cap, "--speculative-config: %s is required (\"mtp\", \"ngram\" or \"suffix\")",
             "method");
        goto out;
    }
    const char *ms = json_string_value(m);
    if (!ms) {
        fail(msg, cap, "--speculative-config: %s must be a string", "method");
        goto out;
    }
    if (!strcmp(ms, "ngram") || !strcmp(ms, "[ngram]")) {
        o->method = CLLM_SPEC_NGRAM;
    } else if (!strcmp(ms, "suffix")) {
        o->method = CLLM_SPEC_SUFFIX;
    } else if (!strcmp(ms, "mtp") || !strcmp(ms, "qwen3_5_mtp") || !strcmp(ms, "qwen3_next_mtp")) {
        o->method = CLLM_SPEC_MTP;
    } else {
        fail(msg, cap,
             "--speculative-config: method '%s' is not supported (cllm supports \"mtp\" (also "
             "\"qwen3_5_mtp\", \"qwen3_next_mtp\"), \"ngram\" and \"suffix\")",
             ms);
        goto out;
    }
    o->num_speculative_tokens = 0;
    if (get_int(j, "num_speculative_tokens", 1, CLLM_SPEC_MAX_K, &o->num_speculative_tokens, msg,
                cap) < 0)
        goto out;
    if (o->num_speculative_tokens == 0) {
        fail(msg, cap, "--speculative-config: %s is required", "num_speculative_tokens");
        goto out;
    }
    /* keys of the other method are an error, not silently ignored */
    static const char *const ngram_keys[] = {"prompt_lookup_min", "prompt_lookup_max", NULL};
    static const char *const suffix_keys[] = {
        "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
        "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob", NULL};
    const char *const *other[2] = {NULL, NULL};
    if (o->method != CLLM_SPEC_SUFFIX) other[0] = suffix_keys;
    if (o->method != CLLM_SPEC_NGRAM) other[1] = ngram_keys;
    for (int g = 0; g < 2; g++)
        for (int i = 0; other[g] && other[g][i]; i++)
            if (json_object_get(j, other[g][i])) {
                snprintf(msg, cap, "--speculative-config: '%s' does not apply to method '%s'",
                         other[g][i], ms);
                goto out;
            }
    if (json_object_get(j, "suffix_decoding_min_token_prob")) {
        fail(msg, cap,
             "--speculative-config: '%s' is not supported: cllm's suffix drafts take the most "
             "recent continuation, not the most frequent",
             "suffix_decoding_min_token_prob");
        goto out;
    }
    o->suffix_max_depth = 24;
    o->suffix_max_cached_requests = 10000;
    o->suffix_max_spec_factor = 1.0;
    if (get_int(j, "suffix_decoding_max_tree_depth", 1, 1024, &o->suffix_max_depth, msg, cap) < 0 ||
        get_int(j, "suffix_decoding_max_cached_requests", 1, 1 << 20,
                &o->suffix_max_cached_requests, msg, cap) < 0)
        goto out;
    json_t *sf = json_object_get(j, "suffix_decoding_max_spec_factor");
    if (sf) {
        double f = json_number_value(sf);
        if (!json_is_number(sf) || !(f > 0 && f <= 64)) {
            fail(msg, cap, "--speculative-config: %s must be a number in (0, 64]",
                 "suffix_decoding_max_spec_factor");
            goto out;
        }
        o->suffix_max_spec_factor = f;
    }
    int lmin = 0, lmax = 0, hmin, hmax;
    if ((hmin = get_int(j, "prompt_lookup_min", 1, 1024, &lmin, msg, cap)) < 0 ||
        (hmax = get_int(j, "prompt_lookup_max", 1, 1024, &lmax, msg, cap)) < 0)
        goto out;
    if (!hmin && !hmax) lmin = lmax = 5;
    if (!hmin && hmax) lmin = lmax;
    if (hmin && !hmax) lmax = lmin;
    if (lmin > lmax) {
        snprintf(msg, cap,
                 "--speculative-config: prompt_lookup_min (%d) must be <= prompt_lookup_max (%d)",
                 lmin, lmax);
        goto out;
    }
    o->prompt_lookup_min = lmin;
    o->prompt_lookup_max = lmax;
    if (get_int(j, "disable_by_batch_size", 1, 1 << 30, &o->disable_by_batch_size, msg, cap) < 0)
        goto out;
    json_t *sa = json_object_get(j, "synthetic_acceptance");
    if (sa) {
        double a = json_number_value(sa);
        if (!json_is_number(sa) || !(a > 0 && a <= 1)) {
            fail(msg, cap, "--speculative-config: %s must be a number in (0, 1]",
                 "synthetic_acceptance");
            goto out;
        }
        o->synthetic_acceptance = a;
    }
    if (json_object_get(j, "draft_vocab_size") && o->method != CLLM_SPEC_MTP) {
        snprintf(msg, cap, "--speculative-config: '%s' does not apply to method '%s'",
                 "draft_vocab_size", ms);
        goto out;
    }
    if (get_int(j, "draft_vocab_size", 64, 1 << 24, &o->draft_vocab_size, msg, cap) < 0) goto out;
    json_t *fk = json_object_get(j, "fixed_k");
    if (fk) {
        if (!json_is_boolean(fk)) {
            fail(msg, cap, "--speculative-config: %s must be true or false", "fixed_k");
            goto out;
        }
        o->fixed_k = json_is_true(fk);
    }
    rc = 0;
out:
    json_decref(j);
    if (rc) memset(o, 0, sizeof(*o));
    return rc;
}
