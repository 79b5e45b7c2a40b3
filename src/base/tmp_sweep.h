/* Temporaries of interrupted writers. A writer that builds NAME in steps writes NAME.tmp-PID
 * (PID: its process id) and renames it to NAME at the end, so a run killed with -9 leaves only
 * NAME.tmp-PID behind; the next run into the same folder calls cllm_tmp_sweep, which removes the
 * ones whose PID is no longer a running process and says so in the log. Used by `cllm quantize`
 * (OUT.tmp-PID folders, quant/quantize.c) and `cllm synth` (shard files, model/synth.c). */
#ifndef CLLM_BASE_TMP_SWEEP_H
#define CLLM_BASE_TMP_SWEEP_H

#include <stdbool.h>
#include <stddef.h>

/* out = "PATH.tmp-<this process's pid>"; false when it does not fit in cap. */
bool cllm_tmp_path(char *out, size_t cap, const char *path);

typedef struct cllm_tmp_sweep_spec {
    const char *dir;     /* folder searched, not recursively */
    const char *stem;    /* entries named STEM.tmp-PID ... */
    bool stem_is_suffix; /* ... where stem ends STEM (".safetensors"), else stem is all of it */
    bool folders;        /* the temporaries are folders of plain files, else plain files */
    const char *who;     /* names the caller in the log lines ("quantize") */
} cllm_tmp_sweep_spec;

/* Removes each temporary in s->dir matching s whose PID is not running (a folder: its plain files,
 * then the folder; one holding anything else is left and logged). Logs a WARN line per removal
 * and an INFO line per temporary kept because its writer still runs. Entries of any other name,
 * of the other kind (file / folder) or with a PID that is not a positive integer are never
 * touched. Returns how many were removed; *kept (may be NULL) gets how many were kept. */
int cllm_tmp_sweep(const cllm_tmp_sweep_spec *s, int *kept);

#endif
