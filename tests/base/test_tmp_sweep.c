/* base/tmp_sweep: which names are our temporaries (STEM.tmp-PID, exact stem or stem suffix, the
 * right kind), a dead PID's removed (a folder with its files), a live PID's kept (ours and a
 * child's), and counts. Scratch folder under CLLM_TMP. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/tmp_sweep.h"
#include "test.h"

static char dir[1024];

static void touch(const char *name) {
    char p[2048];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f) fputs("x", f), fclose(f);
}

static void folder(const char *name, const char *file) {
    char p[2048];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    mkdir(p, 0755);
    if (file) {
        char q[2100];
        snprintf(q, sizeof(q), "%s/%s", p, file);
        FILE *f = fopen(q, "w");
        if (f) fclose(f);
    }
}

static bool exists(const char *name) {
    char p[2048];
    struct stat sb;
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return lstat(p, &sb) == 0;
}

/* NAME from FMT and a pid, in a static buffer (valid until the next call). */
static const char *nm(const char *fmt, long pid) {
    static char b[256];
    snprintf(b, sizeof(b), fmt, pid);
    return b;
}

/* A PID that was a process of ours and is not any more (reaped). */
static long dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}

int main(void) {
    snprintf(dir, sizeof(dir), "%s/test_tmp_sweep", test_tmp());
    mkdir(test_tmp(), 0755);
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    CHECK(mkdir(dir, 0755) == 0);

    char me[64], path[4096];
    CHECK(cllm_tmp_path(path, sizeof(path), "a/out"));
    snprintf(me, sizeof(me), "a/out.tmp-%ld", (long)getpid());
    CHECK(!strcmp(path, me));
    CHECK(!cllm_tmp_path(path, 8, "a/out"));

    long dead = dead_pid(), mine = (long)getpid();
    pid_t child = fork();
    if (child == 0) {
        pause();
        _exit(0);
    }
    /* files, stem suffix ".safetensors" */
    touch(nm("model.safetensors.tmp-%ld", dead));
    touch(nm("m-00001-of-00002.safetensors.tmp-%ld", dead));
    touch(nm("model.safetensors.tmp-%ld", (long)child));
    touch(nm("model.safetensors.tmp-%ld", mine));
    touch(nm("notes.txt.tmp-%ld", dead));          /* other stem */
    touch(nm("model.safetensors.tmp-%ldx", dead)); /* not a pid */
    touch("model.safetensors.tmp-0");
    touch("model.safetensors.tmp-");
    touch("model.safetensors.tmp-99999999999"); /* over INT_MAX */
    touch("model.safetensors.tmp");
    folder(nm("dir.safetensors.tmp-%ld", dead), NULL); /* wrong kind */
    int kept = -1;
    int removed = cllm_tmp_sweep(
        &(cllm_tmp_sweep_spec){
            .dir = dir, .stem = ".safetensors", .stem_is_suffix = true, .who = "test"},
        &kept);
    CHECK_MSG(removed == 2 && kept == 2, "removed %d kept %d", removed, kept);
    CHECK(!exists(nm("model.safetensors.tmp-%ld", dead)));
    CHECK(!exists(nm("m-00001-of-00002.safetensors.tmp-%ld", dead)));
    CHECK(exists(nm("model.safetensors.tmp-%ld", (long)child)));
    CHECK(exists(nm("model.safetensors.tmp-%ld", mine)));
    CHECK(exists(nm("notes.txt.tmp-%ld", dead)));
    CHECK(exists(nm("model.safetensors.tmp-%ldx", dead)));
    CHECK(exists("model.safetensors.tmp-0") && exists("model.safetensors.tmp-") &&
          exists("model.safetensors.tmp-99999999999") && exists("model.safetensors.tmp"));
    CHECK(exists(nm("dir.safetensors.tmp-%ld", dead)));

    /* folders, exact stem "out" */
    folder(nm("out.tmp-%ld", dead), "model.safetensors");
    folder(nm("out.tmp-%ld", (long)child), "config.json");
    folder(nm("xout.tmp-%ld", dead), NULL); /* longer stem */
    folder(nm("out2.tmp-%ld", dead), NULL);
    char nested[256];
    long dead2 = dead_pid();
    folder(nm("out.tmp-%ld", dead2), NULL);
    snprintf(nested, sizeof(nested), "out.tmp-%ld/sub", dead2);
    folder(nested, NULL);
    removed = cllm_tmp_sweep(
        &(cllm_tmp_sweep_spec){.dir = dir, .stem = "out", .folders = true, .who = "test"}, &kept);
    CHECK_MSG(removed == 1 && kept == 1, "removed %d kept %d", removed, kept);
    CHECK(!exists(nm("out.tmp-%ld", dead)));
    CHECK(exists(nm("out.tmp-%ld/config.json", (long)child)));
    CHECK(exists(nm("xout.tmp-%ld", dead)));
    CHECK(exists(nm("out2.tmp-%ld", dead)));
    CHECK(exists(nested)); /* a folder holding a folder is not ours to empty: left, logged */
    /* a missing folder: nothing, no crash */
    CHECK(cllm_tmp_sweep(
              &(cllm_tmp_sweep_spec){.dir = "/nonexistent/x", .stem = "out", .who = "test"},
              &kept) == 0 &&
          kept == 0);

    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    CHECK(system(cmd) == 0);
    return test_report("test_tmp_sweep");
}
