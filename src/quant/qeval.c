/* `cllm eval --ppl/--compare/--table`; see qeval.h. */
#include "quant/qeval.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/argmax.h"
#include "base/mem.h"
#include "base/progress.h"
#include "model/seq_runner.h"

typedef struct stats {
    double nll, kld;
    long n_scored, top1;
    double t_prefill, t_decode;
    long n_prefill, n_decode;
    double bleu;
    uint64_t file_bytes, rss;
} stats;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t kb = 0;
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, "VmRSS:", 6)) kb = strtoull(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb * 1024;
}

static uint64_t dir_weight_bytes(const char *dir) {
    DIR *d = opendir(dir);
    uint64_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 12 || strcmp(e->d_name + l - 12, ".safetensors")) continue;
        char p[4096];
        struct stat sb;
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (!stat(p, &sb)) n += (uint64_t)sb.st_size;
    }
    if (d) closedir(d);
    return n;
}

static void log_softmax(const float *x, double *y, int V) {
    double mx = x[0];
    for (int i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int i = 0; i < V; i++) s += exp(x[i] - mx);
    double l = mx + log(s);
    for (int i = 0; i < V; i++) y[i] = x[i] - l;
}

static int greedy(cllm_seq_runner *r, const int32_t *prompt, int np, int ng, int V, float *lg,
                  int32_t *out, stats *s) {
    cllm_error err;
    r->pos = 0;
    double t0 = now();
    if (cllm_seq_runner_step(r, prompt, np, CLLM_LOGITS_LAST, lg, &err)) {
        fprintf(stderr, "cllm eval: %s\n", err.msg);
        return -1;
    }
    double t1 = now();
    s->t_prefill += t1 - t0;
    s->n_prefill += np;
    for (int i = 0; i < ng; i++) {
        out[i] = cllm_argmax(lg, V);
        if (i + 1 == ng) break;
        if (cllm_seq_runner_step(r, &out[i], 1, CLLM_LOGITS_LAST, lg, &err)) {
            fprintf(stderr, "cllm eval: %s\n", err.msg);
            return -1;
        }
    }
    s->t_decode += now() - t1;
    s->n_decode += ng - 1;
    return 0;
}

/* corpus BLEU-4 over token ids, one reference per candidate */
typedef struct bleu_acc {
    long match[4], total[4], cand_len, ref_len;
} bleu_acc;

static void bleu_add(bleu_acc *b, const int32_t *c, const int32_t *r, int n) {
    b->cand_len += n;
    b->ref_len += n;
    for (int k = 1; k <= 4; k++) {
        if (n < k) continue;
        b->total[k - 1] += n - k + 1;
        char *used = calloc((size_t)n, 1);
        for (int i = 0; i + k <= n; i++)
            for (int j = 0; j + k <= n; j++) {
                if (used[j] || memcmp(c + i, r + j, (size_t)k * sizeof(int32_t))) continue;
                used[j] = 1;
                b->match[k - 1]++;
                break;
            }
        free(used);
    }
}

static double bleu_score(const bleu_acc *b) {
    double lp = 0;
    for (int k = 0; k < 4; k++) {
        if (!b->match[k] || !b->total[k]) return 0;
        lp += log((double)b->match[k] / (double)b->total[k]) / 4;
    }
    double bp = b->cand_len < b->ref_len ? exp(1 - (double)b->ref_len / (double)b->cand_len) : 1;
    return 100 * bp * exp(lp);
}

/* Windows the perplexity loop runs over n tokens. */
static int n_windows(const cllm_qeval_opts *o, int n) {
    int w = 0;
    for (int s0 = 0; s0 + 1 < n; s0 += o->stride) {
        w++;
        if (s0 + (n - s0 < o->ctx ? n - s0 : o->ctx) >= n) break;
    }
    return w;
}

/* One model under test (r) and its optional base (b), run in lockstep over the same tokens. */
typedef struct pair {
    const cllm_qeval_opts *o;
    cllm_seq_runner r, b;
    bool r_open, hb; /* hb: a base is open */
    int V;
    float *lg, *lb;   /* [cap][V] logits of r and b */
    double *pa, *pb;  /* [V] log-probabilities */
    int32_t *ga, *gb; /* [gen_len] greedy tokens */
    uint64_t rss0;    /* RSS before r was opened (the base already at full size) */
    cllm_progress prog;
    int done, total; /* progress: windows, then greedy prompts */
} pair;

static void pair_close(pair *p) {
    cllm_progress_break(&p->prog);
    free(p->lg), free(p->lb), free(p->pa), free(p->pb), free(p->ga), free(p->gb);
    if (p->r_open) cllm_seq_runner_close(&p->r);
    if (p->hb) cllm_seq_runner_close(&p->b);
}

/* Opens the base first and runs its first window, so that its buffers reach full size before
 * the RSS baseline is taken; then the model under test and the buffers. 0 or 1 (reported). */
static int pair_open(pair *p, const char *dir, const char *bdir, const int32_t *tok, int n) {
    const cllm_qeval_opts *o = p->o;
    cllm_error err;
    int cap = o->ctx > o->prompt_len + o->gen_len ? o->ctx : o->prompt_len + o->gen_len;
    if (bdir) {
        if (cllm_seq_runner_open(&p->b, bdir, &o->fwd, o->threads, cap, 16, CLLM_KV_F32, &err)) {
            fprintf(stderr, "cllm eval: %s: %s\n", bdir, err.msg);
            return 1;
        }
        p->hb = true;
        int Vb = cllm_model_config(p->b.m)->vocab_size, L0 = n < o->ctx ? n : o->ctx;
        p->lb = malloc((size_t)cap * Vb * sizeof(float));
        if (!p->lb || cllm_seq_runner_step(&p->b, tok, L0, CLLM_LOGITS_ALL, p->lb, &err)) {
            fprintf(stderr, "cllm eval: %s: %s\n", bdir, p->lb ? err.msg : "out of memory");
            return 1;
        }
    }
    p->rss0 = rss_bytes();
    if (cllm_seq_runner_open(&p->r, dir, &o->fwd, o->threads, cap, 16, o->kv_dtype, &err)) {
        fprintf(stderr, "cllm eval: %s: %s\n", dir, err.msg);
        return 1;
    }
    p->r_open = true;
    if (o->ssm_dtype != CLLM_KV_F32 && cllm_seq_runner_set_state_dtype(&p->r, o->ssm_dtype, &err)) {
        fprintf(stderr, "cllm eval: %s: %s\n", dir, err.msg);
        return 1;
    }
    int V = p->V = cllm_model_config(p->r.m)->vocab_size;
    if (p->hb && cllm_model_config(p->b.m)->vocab_size != V) {
        fprintf(stderr, "cllm eval: %s and %s have different vocabularies\n", dir, bdir);
        return 1;
    }
    p->lg = malloc((size_t)cap * V * sizeof(float));
    p->pa = malloc((size_t)V * sizeof(double)), p->pb = malloc((size_t)V * sizeof(double));
    p->ga = malloc((size_t)o->gen_len * sizeof(int32_t));
    p->gb = malloc((size_t)o->gen_len * sizeof(int32_t));
    if (!p->lg || !p->pa || !p->pb || !p->ga || !p->gb) {
        fprintf(stderr, "cllm eval: out of memory\n");
        return 1;
    }
    return 0;
}

/* Perplexity (+ KLD/top-1 against the base) over strided windows: window [s0, s0+L) scores the
 * predictions of tokens s0+1.. (first window) or of its last `stride` tokens (later windows). */
static int score_windows(pair *p, const int32_t *tok, int n, stats *s) {
    const cllm_qeval_opts *o = p->o;
    int V = p->V, nw = n_windows(o, n);
    cllm_error err;
    char line[64];
    for (int s0 = 0; s0 + 1 < n; s0 += o->stride) {
        int L = n - s0 < o->ctx ? n - s0 : o->ctx;
        p->r.pos = 0;
        double t0 = now();
        if (cllm_seq_runner_step(&p->r, tok + s0, L, CLLM_LOGITS_ALL, p->lg, &err)) {
            fprintf(stderr, "cllm eval: %s\n", err.msg);
            return 1;
        }
        s->t_prefill += now() - t0;
        s->n_prefill += L;
        if (p->hb) {
            p->b.pos = 0;
            if (cllm_seq_runner_step(&p->b, tok + s0, L, CLLM_LOGITS_ALL, p->lb, &err)) {
                fprintf(stderr, "cllm eval: %s\n", err.msg);
                return 1;
            }
        }
        /* the previous (full) window scored targets up to s0 - stride + ctx - 1 */
        int first = s0 == 0 ? 0 : o->ctx - o->stride - 1;
        if (first < 0) first = 0;
        for (int q = first; q + 1 < L; q++) {
            const float *la = p->lg + (size_t)q * V;
            log_softmax(la, p->pa, V);
            s->nll -= p->pa[tok[s0 + q + 1]];
            s->n_scored++;
            if (p->hb) {
                const float *lb = p->lb + (size_t)q * V;
                log_softmax(lb, p->pb, V);
                double k = 0;
                for (int i = 0; i < V; i++) k += exp(p->pb[i]) * (p->pb[i] - p->pa[i]);
                s->kld += k;
                s->top1 += cllm_argmax(la, V) == cllm_argmax(lb, V);
            }
        }
        snprintf(line, sizeof(line), "%d/%d windows of %d tokens", ++p->done, nw, o->ctx);
        cllm_progress_update(&p->prog, p->done, p->total, line);
        if (s0 + L >= n) break;
    }
    return 0;
}

/* Greedy generations from prompts spread over the text: decode speed, and BLEU-4 of the
 * model's generations against the base's. */
static int score_generations(pair *p, const int32_t *tok, int n, stats *s) {
    const cllm_qeval_opts *o = p->o;
    int np = n > o->prompt_len ? o->n_prompts : 0;
    char line[64];
    bleu_acc ba = {0};
    for (int i = 0; i < np; i++) {
        int off = (int)((long)i * (n - o->prompt_len) / o->n_prompts);
        if (greedy(&p->r, tok + off, o->prompt_len, o->gen_len, p->V, p->lg, p->ga, s)) return 1;
        if (p->hb) {
            stats dummy = {0};
            if (greedy(&p->b, tok + off, o->prompt_len, o->gen_len, p->V, p->lb, p->gb, &dummy))
                return 1;
            bleu_add(&ba, p->ga, p->gb, o->gen_len);
        }
        snprintf(line, sizeof(line), "%d/%d greedy prompts", i + 1, np);
        cllm_progress_update(&p->prog, ++p->done, p->total, line);
    }
    s->bleu = !p->hb ? 100 : ba.cand_len ? bleu_score(&ba) : NAN;
    return 0;
}

/* Runs `dir` (and base `bdir` in lockstep when given) over the windows and prompts. */
static int eval_pair(const cllm_qeval_opts *o, const char *dir, const char *bdir,
                     const int32_t *tok, int n, stats *s) {
    memset(s, 0, sizeof(*s));
    pair p = {.o = o};
    p.total = n_windows(o, n) + (n > o->prompt_len ? o->n_prompts : 0);
    char what[160];
    snprintf(what, sizeof(what), "eval %s", dir);
    cllm_progress_init(&p.prog, o->progress, o->tty, 10, 30, what);
    int ret = pair_open(&p, dir, bdir, tok, n);
    if (!ret) ret = score_windows(&p, tok, n, s);
    if (!ret) ret = score_generations(&p, tok, n, s);
    if (!ret) {
        uint64_t rss1 = rss_bytes();
        s->rss = rss1 > p.rss0 ? rss1 - p.rss0 : 0;
        s->file_bytes = dir_weight_bytes(dir);
    }
    pair_close(&p);
    return ret;
}

static void row(FILE *out, const char *name, const stats *s, bool base) {
    char a[32], b[32];
    cllm_fmt_bytes(a, sizeof(a), s->file_bytes);
    cllm_fmt_bytes(b, sizeof(b), s->rss);
    double ppl = s->n_scored ? exp(s->nll / (double)s->n_scored) : NAN;
    fprintf(out, "%-28s %10s %10s %10.1f %10.1f %9.4f", name, a, b,
            s->t_prefill > 0 ? s->n_prefill / s->t_prefill : 0,
            s->t_decode > 0 ? s->n_decode / s->t_decode : 0, ppl);
    if (base)
        fprintf(out, " %9s %7s %7s\n", "-", "-", "-");
    else
        fprintf(out, " %9.5f %6.2f%% %7.2f\n", s->n_scored ? s->kld / s->n_scored : 0,
                s->n_scored ? 100.0 * s->top1 / s->n_scored : 0, s->bleu); /* nan: no prompts */
}

static void header(FILE *out, const cllm_qeval_opts *o, int n) {
    fprintf(
        out,
        "eval: %d tokens, windows of %d stride %d; %d greedy prompts of %d tokens + %d generated; "
        "KLD(base || model) and top-1 over the same positions; RSS = process growth while the "
        "model is loaded and run (weights touched + its buffers)\n",
        n, o->ctx, o->stride, o->n_prompts, o->prompt_len, o->gen_len);
    fprintf(out, "%-28s %10s %10s %10s %10s %9s %9s %7s %7s\n", "model", "size", "RSS", "prefill/s",
            "decode/s", "ppl", "KLD", "top-1", "BLEU-4");
}

static const char *short_name(const char *p) {
    size_t l = strlen(p);
    while (l > 1 && p[l - 1] == '/') l--;
    const char *s = p + l;
    while (s > p && s[-1] != '/') s--;
    return s;
}

int cllm_qeval_run(const cllm_qeval_opts *o, FILE *out) {
    if (!o->tokens) {
        fprintf(stderr, "cllm eval: --ppl needs token ids (--ppl @FILE or --ppl 1,2,3)\n");
        return 2;
    }
    if (o->ctx < 2 || o->stride < 1 || o->stride > o->ctx) {
        fprintf(stderr, "cllm eval: need --ctx >= 2 and 1 <= --stride <= --ctx\n");
        return 2;
    }
    cllm_error err;
    int32_t *tok = NULL;
    int n = cllm_parse_token_list(o->tokens, &tok, &err);
    if (n < 2) {
        fprintf(stderr, "cllm eval: %s\n", n < 0 ? err.msg : "need at least 2 tokens");
        free(tok);
        return 2;
    }
    stats s;
    int rc = 0;
    header(out, o, n);
    if (o->table) {
        if ((rc = eval_pair(o, o->model, NULL, tok, n, &s)) == 0)
            row(out, short_name(o->model), &s, true);
        char *dup = strdup(o->table), *save = NULL;
        for (char *p = strtok_r(dup, ",", &save); p && !rc; p = strtok_r(NULL, ",", &save))
            if ((rc = eval_pair(o, p, o->model, tok, n, &s)) == 0)
                row(out, short_name(p), &s, false);
        free(dup);
    } else {
        if ((rc = eval_pair(o, o->model, o->compare, tok, n, &s)) == 0)
            row(out, short_name(o->model), &s, o->compare == NULL);
    }
    fflush(out);
    free(tok);
    return rc;
}
