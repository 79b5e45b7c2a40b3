/* `cllm tokenize`, `cllm detokenize`, `cllm chat-template`: command-line front ends of
 * tokenizer/ (tokenizer.h, chat_template.h). MODEL is a directory with tokenizer.json (and
 * tokenizer_config.json for templates). `tokenize --bench FILE` measures encode throughput. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "base/file.h"
#include "base/mem.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "cli/cli.h"
#include "cli/commands.h"

/* Encodes FILE line by line (like the node reference bench) for at least 2 s; prints MB/s. */
static int bench(const cllm_tok *tok, const char *path) {
    size_t len;
    char *buf = cllm_read_file(path, 0, &len, NULL);
    if (!buf) {
        fprintf(stderr, "cllm tokenize: cannot read %s\n", path);
        return 1;
    }
    cllm_tok_ids ids = {0};
    size_t bytes = 0, toks = 0;
    int passes = 0;
    double t0 = cllm_time_s(), t;
    do {
        for (size_t i = 0; i < len;) {
            const char *nl = memchr(buf + i, '\n', len - i);
            size_t e = nl ? (size_t)(nl - buf) + 1 : len;
            ids.n = 0;
            cllm_tok_encode(tok, buf + i, e - i, 0, &ids, NULL);
            toks += ids.n;
            i = e;
        }
        bytes += len;
        passes++;
        t = cllm_time_s() - t0;
    } while (t < 2.0);
    printf("encode: %d passes, %.1f MB in %.3f s = %.2f MB/s, %.0f tokens/s (single thread)\n",
           passes, bytes / 1e6, t, bytes / 1e6 / t, toks / t);
    cllm_tok_ids_free(&ids);
    free(buf);
    return 0;
}

/* All of a stream into a malloc'd, NUL-terminated buffer; NULL on error. */
static char *read_stream(FILE *f, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t got = fread(b + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
        if (n + 1 == cap) {
            char *nb = realloc(b, cap * 2);
            if (!nb) break;
            b = nb, cap *= 2;
        }
    }
    if (!b || ferror(f)) {
        free(b);
        return NULL;
    }
    b[n] = 0;
    *len = n;
    return b;
}

static cllm_tok *load(const char *dir) {
    cllm_tok *tok;
    cllm_error err = {0};
    if (cllm_tok_load(dir, &tok, &err)) {
        fprintf(stderr, "cllm: %s\n", err.msg);
        return NULL;
    }
    return tok;
}

int cmd_tokenize(int argc, char **argv) {
    bool ids_only = false, add_special = false, no_special = false;
    const char *bench_file = NULL, *in_file = NULL;
    const cli_opt opts[] = {
        {"--file", "-f", CLI_STR, &in_file,
         "encode the text of FILE ('-' = stdin) instead of TEXT"},
        {"--ids", NULL, CLI_FLAG, &ids_only, "print only the ids, space-separated", NULL, 0, 0},
        {"--add-special", NULL, CLI_FLAG, &add_special,
         "apply the post-processor (BOS for Llama-3)", NULL, 0, 0},
        {"--split-special", NULL, CLI_FLAG, &no_special, "treat special-token text as plain text",
         NULL, 0, 0},
        {"--bench", NULL, CLI_STR, &bench_file,
         "measure encode throughput on FILE (TEXT not needed)", NULL, 0, 0},
        {0}};
    const cli_spec spec = {
        "tokenize",
        "MODEL_DIR [TEXT | -f FILE | -] [options]",
        "Encode TEXT (or a file, or stdin with '-' or when TEXT is absent and stdin is not a "
        "terminal) with the model's tokenizer.json; prints id and token per line.",
        opts,
        1,
        2};
    const char *pos[2];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    /* a big text does not fit an argument list (E2BIG): read it from a file or stdin */
    if (np == 2 && !strcmp(pos[1], "-")) in_file = "-";
    if (np < 2 && !bench_file && !in_file && !isatty(0)) in_file = "-";
    if (np < 2 && !bench_file && !in_file) {
        fprintf(stderr, "cllm tokenize: TEXT missing (or -f FILE, or pipe it on stdin)\n");
        return 2;
    }
    char *text = NULL;
    size_t text_len = 0;
    if (in_file && !bench_file) {
        cllm_error ferr = {0};
        text = !strcmp(in_file, "-") ? read_stream(stdin, &text_len)
                                     : cllm_read_file(in_file, 0, &text_len, &ferr);
        if (!text) {
            fprintf(stderr, "cllm tokenize: %s\n", ferr.msg[0] ? ferr.msg : "cannot read stdin");
            return 1;
        }
    }
    cllm_tok *tok = load(pos[0]);
    if (!tok) {
        free(text);
        return 1;
    }
    if (bench_file) {
        rc = bench(tok, bench_file);
        cllm_tok_free(tok);
        return rc;
    }
    cllm_tok_ids ids = {0};
    cllm_error err = {0};
    int flags =
        (add_special ? CLLM_TOK_ADD_SPECIAL : 0) | (no_special ? CLLM_TOK_SPLIT_SPECIAL : 0);
    const char *t = text ? text : pos[1];
    if (cllm_tok_encode(tok, t, text ? text_len : strlen(t), flags, &ids, &err)) {
        fprintf(stderr, "cllm tokenize: %s\n", err.msg);
        cllm_tok_free(tok);
        free(text);
        return 1;
    }
    free(text);
    for (size_t i = 0; i < ids.n; i++) {
        if (ids_only) {
            printf(i ? " %d" : "%d", ids.ids[i]);
            continue;
        }
        size_t bl;
        const char *b = cllm_tok_token_bytes(tok, ids.ids[i], &bl);
        printf("%d\t", ids.ids[i]);
        for (size_t k = 0; k < bl; k++) { /* show control bytes escaped, keep UTF-8 as is */
            unsigned char c = (unsigned char)b[k];
            if (c == '\n')
                fputs("\\n", stdout);
            else if (c == '\t')
                fputs("\\t", stdout);
            else if (c == '\r')
                fputs("\\r", stdout);
            else if (c < 0x20 || c == 0x7f)
                printf("\\x%02x", c);
            else
                putchar(c);
        }
        putchar('\n');
    }
    if (ids_only) putchar('\n');
    cllm_tok_ids_free(&ids);
    cllm_tok_free(tok);
    return 0;
}

int cmd_detokenize(int argc, char **argv) {
    bool skip = false;
    const cli_opt opts[] = {
        {"--skip-special", NULL, CLI_FLAG, &skip, "drop special tokens", NULL, 0, 0}, {0}};
    const cli_spec spec = {"detokenize",
                           "MODEL_DIR IDS [options]",
                           "Decode ids (separated by spaces or commas) to text.",
                           opts,
                           2,
                           2};
    const char *pos[2];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    size_t cap = strlen(pos[1]) / 2 + 2, n = 0;
    int32_t *ids = malloc(cap * sizeof(int32_t));
    if (!ids) return 1;
    for (const char *s = pos[1]; *s;) {
        if (*s == ' ' || *s == ',' || *s == '\n' || *s == '\t' || *s == '[' || *s == ']') {
            s++;
            continue;
        }
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v > INT32_MAX || n == cap) {
            fprintf(stderr, "cllm detokenize: bad id list near '%.20s'\n", s);
            free(ids);
            return 2;
        }
        ids[n++] = (int32_t)v;
        s = end;
    }
    cllm_tok *tok = load(pos[0]);
    if (!tok) {
        free(ids);
        return 1;
    }
    char *text;
    size_t tl;
    cllm_error err = {0};
    rc = 0;
    if (cllm_tok_decode(tok, ids, n, skip, &text, &tl, &err)) {
        fprintf(stderr, "cllm detokenize: %s\n", err.msg);
        rc = 1;
    } else {
        fwrite(text, 1, tl, stdout);
        putchar('\n');
        free(text);
    }
    free(ids);
    cllm_tok_free(tok);
    return rc;
}

int cmd_chat_template(int argc, char **argv) {
    const char *tools_path = NULL, *tmpl_path = NULL;
    bool no_thinking = false, thinking = false, no_gen = false, ids = false;
    const cli_opt opts[] = {
        {"--tools", NULL, CLI_STR, &tools_path, "JSON file with the OpenAI tools array", NULL, 0,
         0},
        {"--no-thinking", NULL, CLI_FLAG, &no_thinking, "render with enable_thinking=false", NULL,
         0, 0},
        {"--thinking", NULL, CLI_FLAG, &thinking, "render with enable_thinking=true", NULL, 0, 0},
        {"--no-generation-prompt", NULL, CLI_FLAG, &no_gen, "do not open the assistant turn", NULL,
         0, 0},
        {"--chat-template", NULL, CLI_STR, &tmpl_path,
         "template file instead of tokenizer_config.json's", NULL, 0, 0},
        {"--ids", NULL, CLI_FLAG, &ids, "print the prompt's token ids instead of its text", NULL, 0,
         0},
        {0}};
    const cli_spec spec = {"chat-template",
                           "MODEL_DIR MESSAGES.json [options]",
                           "Render the model's chat template for a messages array (OpenAI format).",
                           opts,
                           2,
                           2};
    const char *pos[2];
    int np, rc = cli_parse(&spec, argc, argv, pos, &np);
    if (rc) return rc < 0 ? 0 : rc;
    json_error_t je;
    json_t *msgs = json_load_file(pos[1], 0, &je), *tools = NULL;
    if (json_is_object(msgs) &&
        json_object_get(msgs, "messages")) { /* accept a whole request body */
        json_t *m = json_incref(json_object_get(msgs, "messages"));
        if (!tools_path) tools = json_incref(json_object_get(msgs, "tools"));
        json_decref(msgs);
        msgs = m;
    }
    if (!json_is_array(msgs)) {
        fprintf(stderr, "cllm chat-template: %s: %s\n", pos[1],
                msgs ? "expected a messages array" : je.text);
        json_decref(msgs);
        json_decref(tools);
        return 1;
    }
    if (tools_path && !(tools = json_load_file(tools_path, 0, &je))) {
        fprintf(stderr, "cllm chat-template: %s:%d: %s\n", tools_path, je.line, je.text);
        json_decref(msgs);
        return 1;
    }
    cllm_tok *tok = load(pos[0]);
    char *src = NULL;
    size_t sl = 0;
    if (tok && tmpl_path && !(src = cllm_read_file(tmpl_path, 0, &sl, NULL)))
        fprintf(stderr, "cllm chat-template: cannot read %s\n", tmpl_path);
    if (tok && !tmpl_path && cllm_tok_chat_template(tok)) {
        src = strdup(cllm_tok_chat_template(tok));
        sl = strlen(src);
    }
    rc = 1;
    cllm_jinja *t = NULL;
    cllm_error err = {0};
    if (!tok || !src) {
        if (tok && !tmpl_path)
            fprintf(stderr, "cllm chat-template: %s has no chat_template\n", pos[0]);
    } else if (cllm_jinja_compile(src, sl, &t, &err)) {
        fprintf(stderr, "cllm chat-template: %s\n", err.msg);
    } else {
        cllm_chat_opts co = {.tools = tools,
                             .add_generation_prompt = !no_gen,
                             .enable_thinking = no_thinking ? 0
                                                : thinking  ? 1
                                                            : -1,
                             .bos_token = cllm_tok_bos_token(tok),
                             .eos_token = cllm_tok_eos_token(tok)};
        char *out;
        size_t ol;
        if (cllm_chat_render(t, msgs, &co, &out, &ol, &err)) {
            fprintf(stderr, "cllm chat-template: %s\n", err.msg);
        } else {
            rc = 0;
            if (ids) {
                cllm_tok_ids v = {0};
                if (cllm_tok_encode(tok, out, ol, 0, &v, &err) == CLLM_OK)
                    for (size_t i = 0; i < v.n; i++) printf(i ? " %d" : "%d", v.ids[i]);
                putchar('\n');
                cllm_tok_ids_free(&v);
            } else {
                fwrite(out, 1, ol, stdout);
            }
            free(out);
        }
    }
    cllm_jinja_free(t);
    free(src);
    cllm_tok_free(tok);
    json_decref(msgs);
    json_decref(tools);
    return rc;
}
