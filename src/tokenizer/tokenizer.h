/* Tokenizer: HF tokenizer.json byte-level BPE, encode and decode, plus the incremental detokenizer.
 *
 * Request path: server/ validates a request, tokenizer/chat_template renders the prompt, then
 * cllm_tok_encode turns it into ids for the engine; after sampling, cllm_tok_stream_* turns ids
 * back into text chunks for SSE without ever splitting a UTF-8 character.
 *
 * A cllm_tok is immutable after loading and safe to use from many threads at once (the word cache
 * inside is guarded by a try-lock and skipped under contention). Supported: byte-level BPE
 * (GPT-2 / Qwen / Llama-3 family): normalizer NFC/NFKC/Lowercase/Sequence, pre-tokenizers
 * Split(regex|string, any behaviour, invert) / ByteLevel / Sequence, decoder ByteLevel,
 * post-processor ByteLevel / TemplateProcessing (single sequence) / Sequence. Anything else fails
 * to load with CLLM_EUNSUPPORTED and names the component. */
#ifndef CLLM_TOKENIZER_TOKENIZER_H
#define CLLM_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

typedef struct cllm_tok cllm_tok;

/* A growable id array; zero-initialise it, free with cllm_tok_ids_free. */
typedef struct cllm_tok_ids {
    int32_t *ids;
    size_t n, cap;
} cllm_tok_ids;

void cllm_tok_ids_free(cllm_tok_ids *v);

/* Loads DIR/tokenizer.json and (when present) DIR/tokenizer_config.json, which supplies the chat
 * template and the bos/eos/pad token names. On success *out owns everything; free with
 * cllm_tok_free. Errors name the file and the field. */
cllm_status cllm_tok_load(const char *model_dir, cllm_tok **out, cllm_error *err);

/* Same, with explicit paths; config_path may be NULL. */
cllm_status cllm_tok_load_files(const char *tokenizer_json_path, const char *config_path,
                                cllm_tok **out, cllm_error *err);

/* Same, from in-memory JSON text (used by fuzzers and tests); config_json may be NULL. */
cllm_status cllm_tok_load_mem(const char *tokenizer_json, size_t len, const char *config_json,
                              size_t config_len, cllm_tok **out, cllm_error *err);

void cllm_tok_free(cllm_tok *tok);

enum {
    CLLM_TOK_ADD_SPECIAL = 1,   /* apply the post-processor (e.g. Llama-3's BOS); no-op for Qwen */
    CLLM_TOK_SPLIT_SPECIAL = 2, /* do not recognise added tokens in the text: encode them as text */
};

/* Encodes len bytes of text and APPENDS the ids to *out (grown with realloc). Invalid UTF-8 is
 * replaced by U+FFFD per maximal subpart first (what HF sees after a lossy decode). Returns
 * CLLM_ENOMEM on allocation failure, leaving *out valid. Thread-safe. */
cllm_status cllm_tok_encode(const cllm_tok *tok, const char *text, size_t len, int flags,
                            cllm_tok_ids *out, cllm_error *err);

/* Decodes ids into a malloc'd NUL-terminated UTF-8 string (*out, length *out_len), caller frees.
 * Byte sequences that are not valid UTF-8 become U+FFFD, as HF does. Ids outside the vocabulary
 * give CLLM_ERANGE. With skip_special, added tokens marked special are dropped. */
cllm_status cllm_tok_decode(const cllm_tok *tok, const int32_t *ids, size_t n, bool skip_special,
                            char **out, size_t *out_len, cllm_error *err);

/* Number of ids: one past the largest id of the vocabulary and the added tokens. */
int32_t cllm_tok_n_vocab(const cllm_tok *tok);

/* Id of a token given its text: an added token's content, or a vocabulary entry's raw bytes
 * ("Ġhello" is looked up as " hello"). Returns -1 when there is none. */
int32_t cllm_tok_token_id(const cllm_tok *tok, const char *text, size_t len);

/* Raw bytes of one token (not NUL-terminated; *len set), or NULL for an unknown id. The pointer is
 * owned by tok. For added tokens this is their content. */
const char *cllm_tok_token_bytes(const cllm_tok *tok, int32_t id, size_t *len);

/* True when id is an added token flagged special (dropped by skip_special). */
bool cllm_tok_is_special(const cllm_tok *tok, int32_t id);

/* True when id is any added token (special or not, e.g. Qwen's <think>). */
bool cllm_tok_is_added(const cllm_tok *tok, int32_t id);

/* Token names and ids from tokenizer_config.json; NULL / -1 when absent. Owned by tok. */
const char *cllm_tok_bos_token(const cllm_tok *tok);
const char *cllm_tok_eos_token(const cllm_tok *tok);
int32_t cllm_tok_bos_id(const cllm_tok *tok);
int32_t cllm_tok_eos_id(const cllm_tok *tok);
int32_t cllm_tok_pad_id(const cllm_tok *tok);

/* The chat_template string of tokenizer_config.json (the "default" one when it is a list), or
 * NULL. Owned by tok. */
const char *cllm_tok_chat_template(const cllm_tok *tok);

/* Incremental detokenizer for streaming. Push ids one at a time; each push returns the text that
 * became final (possibly empty), never ending inside a UTF-8 character. The concatenation of all
 * pushes and the final flush equals cllm_tok_decode of all ids. Not thread-safe per stream. */
typedef struct cllm_tok_stream {
    const cllm_tok *tok;
    bool skip_special;
    unsigned char pend[4]; /* bytes of an incomplete UTF-8 character carried to the next push */
    int n_pend;
    char *buf; /* output of the last push/flush, owned by the stream */
    size_t cap;
} cllm_tok_stream;

void cllm_tok_stream_init(cllm_tok_stream *st, const cllm_tok *tok, bool skip_special);

/* Returns the newly final text (NUL-terminated, valid until the next call on st; *len set), or
 * NULL with CLLM_ERANGE/CLLM_ENOMEM in err for an unknown id or failed allocation. */
const char *cllm_tok_stream_push(cllm_tok_stream *st, int32_t id, size_t *len, cllm_error *err);

/* Ends the stream: any incomplete trailing character is returned as U+FFFD. */
const char *cllm_tok_stream_flush(cllm_tok_stream *st, size_t *len);

void cllm_tok_stream_free(cllm_tok_stream *st);

/* Replaces invalid UTF-8 in s[0..len) with U+FFFD (maximal subparts, as WHATWG and Rust's
 * from_utf8_lossy do). Returns a malloc'd NUL-terminated copy (caller frees) or NULL on ENOMEM. */
char *cllm_tok_utf8_sanitize(const char *s, size_t len, size_t *out_len);

#endif
