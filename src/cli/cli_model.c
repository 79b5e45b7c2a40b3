/* The model-directory check shared by serve, verify and eval: a clear hint for the three usual
 * mistakes (a file instead of its directory, a Hugging Face id, a path that does not exist)
 * before any loader prints a bare "cannot open". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/tmp_sweep.h"
#include "cli/cli.h"
#include "model/gguf.h"
#include "model/gguf_ckpt.h"

static char gguf_dir[4096]; /* the folder made for a GGUF, removed at exit */

static void remove_gguf_dir(void) {
    cllm_remove_folder(gguf_dir); /* the links and the files written there */
}

/* A folder for the GGUF at path: config.json and links (cllm_gguf_model_dir). */
static int gguf_folder(const char *command, const char **path) {
    if (gguf_dir[0]) {
        fprintf(stderr, "cllm %s: one GGUF model per process\n", command);
        return 1;
    }
    const char *tmp = getenv("TMPDIR");
    char stem[4000];
    snprintf(stem, sizeof(stem), "%s/cllm-gguf", tmp && *tmp ? tmp : "/tmp");
    /* STEM.tmp-PID, so that a run killed before its atexit left a folder the next run removes
     * (base/tmp_sweep.h), as quantize and synth do with theirs */
    const cllm_tmp_sweep_spec sw = {tmp && *tmp ? tmp : "/tmp", "cllm-gguf", false, true, "gguf"};
    cllm_tmp_sweep(&sw, NULL);
    if (!cllm_tmp_path(gguf_dir, sizeof(gguf_dir), stem) || mkdir(gguf_dir, 0700) != 0) {
        fprintf(stderr, "cllm %s: cannot make a folder for '%s' in %s: %s\n", command, *path,
                tmp && *tmp ? tmp : "/tmp", strerror(errno));
        gguf_dir[0] = 0;
        return 1;
    }
    atexit(remove_gguf_dir);
    cllm_error err = {0};
    if (cllm_gguf_model_dir(*path, gguf_dir, &err)) {
        fprintf(stderr, "cllm %s: %s\n", command, err.msg);
        return 1;
    }
    *path = gguf_dir;
    return 0;
}

/* "org/name" with no leading '/' or '.', exactly one '/', and no such local path: what
 * `vllm serve Qwen/Qwen3.5-35B-A3B` would download. */
static bool looks_like_hf_id(const char *p) {
    if (!*p || p[0] == '/' || p[0] == '.' || p[0] == '~') return false;
    const char *slash = strchr(p, '/');
    return slash && slash != p && slash[1] && !strchr(slash + 1, '/');
}

int cli_check_model_dir(const char *command, const char **pathp) {
    const char *path = *pathp;
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return 0;
        if (S_ISREG(st.st_mode) && cllm_gguf_is_path(path)) return gguf_folder(command, pathp);
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
