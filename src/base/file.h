/* Whole-file reads for the small text files cllm loads (config.json, tokenizer.json, templates,
 * token-id lists), and removing a flat folder cllm wrote. */
#ifndef CLLM_BASE_FILE_H
#define CLLM_BASE_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

/* Reads path into a malloc'd, NUL-terminated buffer (caller frees) and sets *len (may be NULL).
 * max_bytes caps the size (0 = no cap). Errors: CLLM_ENOTFOUND (missing), CLLM_EIO (cannot open
 * or read), CLLM_EFORMAT (over the cap), CLLM_ENOMEM; the message names the file. */
char *cllm_read_file(const char *path, size_t max_bytes, size_t *len, cllm_error *err);

/* Removes a folder's plain files and symlinks (never what a link points to), then the folder;
 * false when it cannot be opened or is not empty after (a subfolder, a file of another kind). */
bool cllm_remove_folder(const char *path);

#endif
