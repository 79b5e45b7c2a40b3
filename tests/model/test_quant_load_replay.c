/* Replays fuzz/fuzz_quant_load.c inputs without libFuzzer: every seed in fuzz/seeds/quant_load/
 * (loads, forward, verify; nothing may crash, which the CLLM_SANITIZE build checks too) and every
 * regression input listed in tests/data/quant_load/EXPECT, whose lines are
 *   PATH (relative to the source root) TAB STATUS (OK or a cllm_status_name) TAB message substring
 * Crashes the fuzzer found are kept there with the error message the fix gives. Runs the ref
 * kernel tier unless CLLM_ISA says otherwise: its plain typed loads are where a misaligned or
 * short tensor shows under the sanitizers (CLLM_SANITIZE builds). */
#include <dirent.h>

#define QLOAD_NO_FUZZER_MAIN
#include "../../fuzz/fuzz_quant_load.c"
#include "base/cpu.h"
#include "cli/options.h"
#include "test.h"

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *b = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n == cap) {
            cap = cap ? 2 * cap : 65536;
            uint8_t *nb = realloc(b, cap);
            if (!nb) break;
            b = nb;
        }
        size_t k = fread(b + *n, 1, cap - *n, f);
        if (!k) break;
        *n += k;
    }
    fclose(f);
    return b;
}

static int run_file(const char *path, cllm_error *err) {
    size_t n;
    uint8_t *b = slurp(path, &n);
    if (!b) return -2;
    memset(err, 0, sizeof(*err));
    int rc = qload_run(b, n, err);
    free(b);
    return rc;
}

int main(void) {
    /* the ref tier unless CLLM_ISA (read by the CLI's option table) names another */
    cllm_opts o;
    cllm_error oe = {0};
    if (cllm_opts_from_env(&o, &oe) != CLLM_OK) {
        fprintf(stderr, "%s\n", oe.msg);
        return 1;
    }
    cllm_cpu_set_isa(o.isa ? o.isa : "ref");
    const char *src = getenv("CLLM_SRC");
    if (!src) src = ".";
    char path[4096], line[1024];
    cllm_error err;
    snprintf(path, sizeof(path), "%s/fuzz/seeds/quant_load", src);
    DIR *d = opendir(path);
    CHECK_MSG(d != NULL, "%s: cannot open", path);
    int n_seeds = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "%s/fuzz/seeds/quant_load/%s", src, e->d_name);
        int rc = run_file(path, &err);
        CHECK_MSG(rc >= 0, "%s: not a usable input (%d)", path, rc);
        n_seeds++;
    }
    if (d) closedir(d);
    CHECK(n_seeds > 0);
    snprintf(path, sizeof(path), "%s/tests/data/quant_load/EXPECT", src);
    FILE *f = fopen(path, "r");
    CHECK_MSG(f != NULL, "%s: cannot open", path);
    int n_cases = 0;
    while (f && fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        char *file = strtok(line, "\t"), *want = strtok(NULL, "\t"), *sub = strtok(NULL, "\t");
        if (!file || !want) continue;
        snprintf(path, sizeof(path), "%s/%s", src, file);
        int rc = run_file(path, &err);
        const char *got = rc < 0 ? "UNUSABLE" : rc == CLLM_OK ? "OK" : cllm_status_name(rc);
        CHECK_MSG(!strcmp(got, want) && (!sub || strstr(err.msg, sub)),
                  "%s: got %s '%s', want %s '%s'", file, got, rc > 0 ? err.msg : "", want,
                  sub ? sub : "");
        n_cases++;
    }
    if (f) fclose(f);
    fprintf(stderr, "replayed %d seeds, %d regression inputs\n", n_seeds, n_cases);
    return test_report("test_quant_load_replay");
}
