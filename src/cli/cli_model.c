/* The model-directory check shared by serve, verify and eval: a clear hint for the three usual
 * mistakes (a file instead of its directory, a Hugging Face id, a path that does not exist)
 * before any loader prints a bare "cannot open". */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"

/* "org/name" with no leading '/' or '.', exactly one '/', and no such local path: what
 * `vllm serve Qwen/Qwen3.5-35B-A3B` would download. */
static bool looks_like_hf_id(const char *p) {
    if (!*p || p[0] == '/' || p[0] == '.' || p[0] == '~') return false;
    const char *slash = strchr(p, '/');
    return slash && slash != p && slash[1] && !strchr(slash + 1, '/');
}

int cli_check_model_dir(const char *command, const char *path) {
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return 0;
        const char *slash = strrchr(path, '/');
        fprintf(stderr,
                "cllm %s: '%s' is a file, not a model directory; pass the directory that holds "
                "config.json and the *.safetensors (here: '%.*s')\n",
                command, path, slash ? (int)(slash - path) : 1, slash ? path : ".");
        return 1;
    }
    if (errno == ENOENT && looks_like_hf_id(path)) {
        fprintf(stderr,
                "cllm %s: '%s' looks like a Hugging Face model id; cllm does not download: "
                "download it first (e.g. `huggingface-cli download %s --local-dir DIR`) and pass "
                "the directory\n",
                command, path, path);
        return 1;
    }
    fprintf(stderr, "cllm %s: model directory '%s': %s\n", command, path, strerror(errno));
    return 1;
}
