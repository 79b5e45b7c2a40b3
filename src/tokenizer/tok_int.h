/* Private tokenizer structures shared by tok_load.c, tok_encode.c, tok_bpe.c, tok_decode.c. */
#ifndef CLLM_TOKENIZER_TOK_INT_H
#define CLLM_TOKENIZER_TOK_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/tokenizer.h"

/* ---- hash maps (tok_map.c) ---- */

/* Byte string -> int32, open addressing, keys owned by the map's arena. */
typedef struct tok_strmap {
    uint32_t *slots; /* [cap] index+1 into entries, 0 = empty */
    size_t cap;      /* power of two */
    struct tok_strent {
        const char *key;
        uint32_t len;
        uint32_t hash;
        int32_t val;
    } * ents;
    size_t n, ents_cap;
} tok_strmap;

int tok_strmap_put(tok_strmap *m, const char *key, size_t len, int32_t val); /* 0 ok, -1 ENOMEM */
int32_t tok_strmap_get(const tok_strmap *m, const char *key, size_t len);    /* -1 if absent */
void tok_strmap_free(tok_strmap *m);
uint32_t tok_hash_bytes(const char *p, size_t len);

/* (left id, right id) -> merge rank and merged id. */
typedef struct tok_pairmap {
    struct tok_pairent {
        uint64_t key; /* (left << 32 | right) + 1; 0 = empty */
        int32_t rank, id;
    } * slots;
    size_t cap, n;
} tok_pairmap;

int tok_pairmap_put(tok_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t id);
const struct tok_pairent *tok_pairmap_get(const tok_pairmap *m, int32_t a, int32_t b);
void tok_pairmap_free(tok_pairmap *m);

/* ---- pipeline description ---- */

typedef enum tok_norm_kind { NORM_NFC, NORM_NFKC, NORM_NFD, NORM_NFKD, NORM_LOWER } tok_norm_kind;

typedef enum tok_split_behavior {
    SPLIT_REMOVED,
    SPLIT_ISOLATED,
    SPLIT_MERGED_PREV,
    SPLIT_MERGED_NEXT,
    SPLIT_CONTIGUOUS,
} tok_split_behavior;

typedef enum tok_pre_kind { PRE_SPLIT, PRE_BYTELEVEL } tok_pre_kind;

typedef struct tok_pre {
    tok_pre_kind kind;
    pcre2_code *re; /* PRE_SPLIT (and PRE_BYTELEVEL with use_regex) */
    tok_split_behavior behavior;
    bool invert;
    bool add_prefix_space; /* PRE_BYTELEVEL */
} tok_pre;

typedef struct tok_added {
    int32_t id;
    char *content;
    size_t len;
    bool special, lstrip, rstrip, normalized, single_word;
} tok_added;

/* One word cache entry: the ids of a pre-token, keyed by its bytes. */
typedef struct tok_cache_ent {
    char *key;
    uint32_t len, hash;
    int32_t *ids;
    uint32_t n;
} tok_cache_ent;

struct cllm_tok {
    /* vocabulary, indexed by id: raw bytes of each token (byte-level mapping undone) */
    char **tok_bytes;   /* [n_vocab] NULL for holes */
    uint32_t *tok_len;  /* [n_vocab] */
    uint8_t *tok_flags; /* [n_vocab] TOKF_* */
    int32_t n_vocab;
    tok_strmap vocab; /* raw bytes -> id (model vocab only) */
    tok_pairmap merges;
    int32_t byte_id[256]; /* id of each single byte, -1 if missing */
    bool ignore_merges;

    tok_norm_kind *norms;
    int n_norms;
    tok_pre *pres;
    int n_pres;

    tok_added *added; /* sorted by content length, longest first */
    int n_added;
    bool any_normalized_added;

    int32_t *post_prefix, *post_suffix; /* ids added by TemplateProcessing with ADD_SPECIAL */
    int n_post_prefix, n_post_suffix;

    char *bos_token, *eos_token, *pad_token, *chat_template;
    int32_t bos_id, eos_id, pad_id;

    /* word cache, guarded by cache_mu (try-lock: skipped under contention) */
    pthread_mutex_t cache_mu;
    tok_cache_ent *cache;
    size_t cache_cap, cache_n;
};

enum { TOKF_ADDED = 1, TOKF_SPECIAL = 2 };

/* ---- byte-level mapping (tok_bytes.c) ---- */

/* GPT-2 bytes_to_unicode: code point of byte b. */
uint32_t tok_byte_to_cp(uint8_t b);
/* Inverse; -1 when cp is not one of the 256 mapped code points. */
int tok_cp_to_byte(uint32_t cp);
/* Decodes one UTF-8 code point at s (len > 0, assumed valid); returns its byte length. */
int tok_utf8_next(const unsigned char *s, size_t len, uint32_t *cp);
/* Length of the valid UTF-8 sequence at s, 0 when s[0..] starts an invalid/maximal-subpart
 * sequence; *bad_len gets the length of the maximal invalid subpart then. */
int tok_utf8_valid_len(const unsigned char *s, size_t len, int *bad_len);
/* Appends the UTF-8 of cp to out. Returns bytes written (1..4). */
int tok_utf8_put(uint32_t cp, char *out);

/* ---- BPE (tok_bpe.c) ---- */

/* Encodes one pre-token (raw bytes) and appends ids to out. */
cllm_status tok_bpe_word(const cllm_tok *tok, const char *w, size_t len, cllm_tok_ids *out);
cllm_status tok_ids_push(cllm_tok_ids *v, int32_t id);
cllm_status tok_ids_append(cllm_tok_ids *v, const int32_t *ids, size_t n);

/* ---- pre-tokenization (tok_pretok.c) ---- */

/* Compiles a HF (Oniguruma-flavoured) regex with PCRE2 UTF|UCP, JIT when available. */
pcre2_code *tok_regex_compile(const char *pattern, bool literal, cllm_error *err);
/* Normalizes s (valid UTF-8); returns malloc'd string or NULL on ENOMEM. */
char *tok_normalize(const cllm_tok *tok, const char *s, size_t len, size_t *out_len);
/* Pre-tokenizes s and BPE-encodes each piece, appending to out. */
cllm_status tok_encode_segment(const cllm_tok *tok, const char *s, size_t len, bool first,
                               cllm_tok_ids *out);

/* The GPT-2 regex ByteLevel uses when use_regex is true. */
extern const char TOK_GPT2_REGEX[];

#endif
