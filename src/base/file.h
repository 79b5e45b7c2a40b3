/* Whole-file reads for the small text files cllm loads (config.json, tokenizer.json, templates,
 * token-id lists). */
#ifndef CLLM_BASE_FILE_H
#define CLLM_BASE_FILE_H

#include <stddef.h>

#include "base/status.h"

/* Reads path into a malloc'd, NUL-terminated buffer (caller frees) and sets *len (may be NULL).
 * max_bytes caps the size (0 = no cap). Errors: CLLM_ENOTFOUND (missing), CLLM_EIO (cannot open
 * or read), CLLM_EFORMAT (over the cap), CLLM_ENOMEM; the message names the file. */
char *cllm_read_file(const char *path, size_t max_bytes, size_t *len, cllm_error *err);

#endif
