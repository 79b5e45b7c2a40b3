/* `cllm bench-grammar --mixed`: what constrained requests cost their unconstrained neighbours in
 * one batch (issue 15: "unconstrained requests in the same batch slowed by <= 2%"). */
#ifndef CLLM_CLI_BENCH_GRAMMAR_H
#define CLLM_CLI_BENCH_GRAMMAR_H

typedef struct bgm_args {
    const char *model_dir;
    const char *tokenizer_dir;  /* NULL = model_dir */
    const char *const *schemas; /* JSON Schema files the constrained neighbours cycle through */
    int n_schemas;
    int batch;      /* rows in the batch: half unconstrained (measured), half neighbours */
    int tokens;     /* tokens per unconstrained request */
    int prompt_len; /* tokens per prompt */
    int rounds;     /* (mixed, baseline) pairs */
    int threads;    /* 0 = all cores */
    long seed;
    int no_cache; /* compile (and prepare) every request's grammar afresh */
} bgm_args;

/* Prints one line per round and the summary; 0 ok, 1 failure. */
int bench_grammar_mixed(const bgm_args *a);

#endif
