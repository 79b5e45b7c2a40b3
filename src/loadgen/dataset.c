/* bench-serve datasets; see dataset.h. */
#include "loadgen/dataset.h"

#include <errno.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loadgen/rng.h"

/* Common English words: in byte-level BPE vocabularies each, with its leading space, is one
 * token, so a prompt of N words is close to N tokens. */
static const char *const words[] = {
    "the",      "of",        "and",     "to",     "in",     "is",      "you",    "that",
    "it",       "he",        "was",     "for",    "on",     "are",     "as",     "with",
    "his",      "they",      "at",      "be",     "this",   "have",    "from",   "or",
    "one",      "had",       "by",      "word",   "but",    "not",     "what",   "all",
    "were",     "we",        "when",    "your",   "can",    "said",    "there",  "use",
    "an",       "each",      "which",   "she",    "do",     "how",     "their",  "if",
    "will",     "up",        "other",   "about",  "out",    "many",    "then",   "them",
    "these",    "so",        "some",    "her",    "would",  "make",    "like",   "him",
    "into",     "time",      "has",     "look",   "two",    "more",    "write",  "go",
    "see",      "number",    "no",      "way",    "could",  "people",  "my",     "than",
    "first",    "water",     "been",    "call",   "who",    "oil",     "its",    "now",
    "find",     "long",      "down",    "day",    "did",    "get",     "come",   "made",
    "may",      "part",      "over",    "new",    "sound",  "take",    "only",   "little",
    "work",     "know",      "place",   "year",   "live",   "me",      "back",   "give",
    "most",     "very",      "after",   "thing",  "our",    "just",    "name",   "good",
    "sentence", "man",       "think",   "say",    "great",  "where",   "help",   "through",
    "much",     "before",    "line",    "right",  "too",    "mean",    "old",    "any",
    "same",     "tell",      "boy",     "follow", "came",   "want",    "show",   "also",
    "around",   "form",      "three",   "small",  "set",    "put",     "end",    "does",
    "another",  "well",      "large",   "must",   "big",    "even",    "such",   "because",
    "turn",     "here",      "why",     "ask",    "went",   "men",     "read",   "need",
    "land",     "different", "home",    "us",     "move",   "try",     "kind",   "hand",
    "picture",  "again",     "change",  "off",    "play",   "spell",   "air",    "away",
    "animal",   "house",     "point",   "page",   "letter", "mother",  "answer", "found",
    "study",    "still",     "learn",   "should", "world",  "high",    "every",  "near",
    "add",      "food",      "between", "own",    "below",  "country", "plant",  "last",
    "school",   "father",    "keep",    "tree",   "never",  "start",   "city",   "earth",
    "eye",      "light",     "thought", "head",   "under",  "story",   "saw",
};
#define N_WORDS (sizeof(words) / sizeof(words[0]))

void lg_dataset_free(lg_dataset *ds) {
    if (!ds->convs) return;
    for (long i = 0; i < ds->n; i++) {
        for (int t = 0; t < ds->convs[i].n_turns; t++) free(ds->convs[i].turns[t].prompt);
        free(ds->convs[i].turns);
    }
    free(ds->convs);
    ds->convs = NULL;
    ds->n = 0;
}

/* Appends n random words (space-separated, no leading space) to a fresh string. */
static char *random_words(lg_rng *r, const char *prefix, int n) {
    size_t plen = prefix ? strlen(prefix) : 0, cap = plen + 2 + (size_t)n * 11;
    char *s = malloc(cap), *p = s;
    if (!s) return NULL;
    if (plen) {
        memcpy(p, prefix, plen);
        p += plen;
    }
    for (int i = 0; i < n; i++) {
        const char *w = words[lg_rng_next(r) % N_WORDS];
        size_t wl = strlen(w);
        if (p != s) *p++ = ' ';
        memcpy(p, w, wl);
        p += wl;
    }
    *p = 0;
    return s;
}

static int draw_len(lg_rng *r, int len, double ratio) {
    long lo = (long)((double)len * (1.0 - ratio)), hi = (long)((double)len * (1.0 + ratio));
    if (lo < 1) lo = 1;
    if (hi < lo) hi = lo;
    return (int)lg_rng_range(r, lo, hi);
}

cllm_status lg_dataset_random(const lg_random_opts *o, lg_dataset *ds, cllm_error *err) {
    memset(ds, 0, sizeof(*ds));
    if (o->n <= 0 || o->input_len < 0 || o->output_len <= 0 || o->turns < 1 || o->prefix_len < 0 ||
        o->range_ratio < 0 || o->range_ratio >= 1)
        return cllm_err_set(
            err, CLLM_EINVAL,
            "random dataset: need n > 0, input_len >= 0, output_len > 0, turns >= 1, "
            "0 <= range_ratio < 1");
    lg_rng r;
    lg_rng_seed(&r, o->seed);
    char *prefix = o->prefix_len ? random_words(&r, NULL, o->prefix_len) : NULL;
    if (o->prefix_len && !prefix)
        return cllm_err_set(err, CLLM_ENOMEM, "random dataset: out of memory");
    ds->convs = calloc((size_t)o->n, sizeof(lg_conv));
    if (!ds->convs) goto oom;
    ds->n = o->n;
    for (long i = 0; i < o->n; i++) {
        lg_conv *c = &ds->convs[i];
        c->turns = calloc((size_t)o->turns, sizeof(lg_turn));
        if (!c->turns) goto oom;
        c->n_turns = o->turns;
        for (int t = 0; t < o->turns; t++) {
            int in = o->input_len ? draw_len(&r, o->input_len, o->range_ratio) : 0;
            /* the shared prefix opens the conversation only: later turns carry it in history */
            const char *pre = t == 0 ? prefix : NULL;
            c->turns[t].prompt = random_words(&r, pre, in);
            if (!c->turns[t].prompt) goto oom;
            c->turns[t].est_tokens = in + (pre ? o->prefix_len : 0);
            c->turns[t].max_tokens = draw_len(&r, o->output_len, o->range_ratio);
        }
    }
    free(prefix);
    return CLLM_OK;
oom:
    free(prefix);
    lg_dataset_free(ds);
    return cllm_err_set(err, CLLM_ENOMEM, "random dataset: out of memory");
}

static int est_tokens(const char *s) {
    size_t n = strlen(s);
    return (int)((n + 3) / 4);
}

static cllm_status parse_line(json_t *j, int def_max, lg_conv *c, const char *path, long lineno,
                              cllm_error *err) {
    if (!json_is_object(j))
        return cllm_err_set(err, CLLM_EFORMAT, "%s:%ld: not a JSON object", path, lineno);
    int max_tokens = def_max;
    json_t *mt = json_object_get(j, "max_tokens");
    if (!mt) mt = json_object_get(j, "output_len");
    if (mt) {
        if (!json_is_integer(mt) || json_integer_value(mt) < 1 || json_integer_value(mt) > 1000000)
            return cllm_err_set(err, CLLM_EFORMAT,
                                "%s:%ld: max_tokens must be an integer in 1..1000000", path,
                                lineno);
        max_tokens = (int)json_integer_value(mt);
    }
    const char *qs[4096];
    int nq = 0;
    json_t *v;
    if ((v = json_object_get(j, "prompt"))) {
        if (!json_is_string(v))
            return cllm_err_set(err, CLLM_EFORMAT, "%s:%ld: \"prompt\" must be a string", path,
                                lineno);
        qs[nq++] = json_string_value(v);
    } else if ((v = json_object_get(j, "turns")) || (v = json_object_get(j, "messages"))) {
        bool msgs = json_object_get(j, "turns") == NULL;
        if (!json_is_array(v))
            return cllm_err_set(err, CLLM_EFORMAT, "%s:%ld: turns/messages must be an array", path,
                                lineno);
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            const char *q = NULL;
            if (msgs) {
                const char *role = json_string_value(json_object_get(e, "role"));
                if (!role)
                    return cllm_err_set(err, CLLM_EFORMAT, "%s:%ld: message %zu has no role", path,
                                        lineno, i);
                if (strcmp(role, "user")) continue;
                q = json_string_value(json_object_get(e, "content"));
            } else {
                q = json_string_value(e);
            }
            if (!q)
                return cllm_err_set(err, CLLM_EFORMAT, "%s:%ld: turn %zu is not a string", path,
                                    lineno, i);
            if (nq == (int)(sizeof(qs) / sizeof(qs[0])))
                return cllm_err_set(err, CLLM_ERANGE, "%s:%ld: more than %zu turns", path, lineno,
                                    sizeof(qs) / sizeof(qs[0]));
            qs[nq++] = q;
        }
    } else {
        return cllm_err_set(err, CLLM_EFORMAT,
                            "%s:%ld: needs \"prompt\", \"turns\" or \"messages\"", path, lineno);
    }
    if (nq == 0) return cllm_err_set(err, CLLM_EFORMAT, "%s:%ld: no user turn", path, lineno);
    c->turns = calloc((size_t)nq, sizeof(lg_turn));
    if (!c->turns) return cllm_err_set(err, CLLM_ENOMEM, "%s: out of memory", path);
    c->n_turns = nq;
    for (int t = 0; t < nq; t++) {
        c->turns[t].prompt = strdup(qs[t]);
        if (!c->turns[t].prompt) return cllm_err_set(err, CLLM_ENOMEM, "%s: out of memory", path);
        c->turns[t].est_tokens = est_tokens(qs[t]);
        c->turns[t].max_tokens = max_tokens;
    }
    return CLLM_OK;
}

cllm_status lg_dataset_jsonl(const char *path, int default_max_tokens, lg_dataset *ds,
                             cllm_error *err) {
    memset(ds, 0, sizeof(*ds));
    FILE *f = fopen(path, "r");
    if (!f) return cllm_err_set(err, CLLM_ENOTFOUND, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    long lineno = 0, cap = 0;
    cllm_status st = CLLM_OK;
    while ((len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
        if (!*p || *p == '#') continue;
        json_error_t je;
        json_t *j = json_loads(p, JSON_REJECT_DUPLICATES, &je);
        if (!j) {
            st = cllm_err_set(err, CLLM_EFORMAT, "%s:%ld: bad JSON: %s", path, lineno, je.text);
            break;
        }
        if (ds->n == cap) {
            long nc = cap ? cap * 2 : 64;
            lg_conv *q = realloc(ds->convs, (size_t)nc * sizeof(lg_conv));
            if (!q) {
                json_decref(j);
                st = cllm_err_set(err, CLLM_ENOMEM, "%s: out of memory", path);
                break;
            }
            ds->convs = q;
            cap = nc;
        }
        memset(&ds->convs[ds->n], 0, sizeof(lg_conv));
        ds->n++;
        st = parse_line(j, default_max_tokens, &ds->convs[ds->n - 1], path, lineno, err);
        json_decref(j);
        if (st) break;
    }
    free(line);
    fclose(f);
    if (st == CLLM_OK && ds->n == 0) st = cllm_err_set(err, CLLM_EFORMAT, "%s: no prompts", path);
    if (st) lg_dataset_free(ds);
    return st;
}
