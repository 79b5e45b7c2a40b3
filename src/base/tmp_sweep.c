/* See tmp_sweep.h. A PID is "gone" only when kill(pid, 0) says ESRCH: EPERM (another user's
 * process) and our own pid count as running, so a live writer's temporary is never removed. A
 * reused PID keeps a stale temporary until that process ends, which errs on the safe side. */
#include "base/tmp_sweep.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/file.h"
#include "base/log.h"

bool cllm_tmp_path(char *out, size_t cap, const char *path) {
    int n = snprintf(out, cap, "%s.tmp-%ld", path, (long)getpid());
    return n > 0 && (size_t)n < cap;
}

/* The PID of NAME = STEM.tmp-PID matching s, else 0. */
static long owner_pid(const cllm_tmp_sweep_spec *s, const char *name) {
    const char *mark = strstr(name, ".tmp-");
    if (!mark) return 0;
    while (strstr(mark + 1, ".tmp-")) mark = strstr(mark + 1, ".tmp-"); /* the last one */
    size_t stem_len = (size_t)(mark - name), want = strlen(s->stem);
    if (s->stem_is_suffix ? stem_len < want || memcmp(mark - want, s->stem, want)
                          : stem_len != want || memcmp(name, s->stem, want))
        return 0;
    const char *d = mark + 5;
    long pid = 0;
    if (!*d || strlen(d) > 10) return 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9') return 0;
        pid = pid * 10 + (*d - '0');
    }
    return pid > 0 && pid <= INT_MAX ? pid : 0;
}

static bool pid_running(long pid) {
    if (pid == (long)getpid()) return true;
    return kill((pid_t)pid, 0) == 0 || errno != ESRCH;
}

int cllm_tmp_sweep(const cllm_tmp_sweep_spec *s, int *kept) {
    int removed = 0, live = 0;
    DIR *d = opendir(s->dir);
    if (kept) *kept = 0;
    if (!d) return 0;
    struct dirent *e;
    char p[4096];
    struct stat sb;
    while ((e = readdir(d))) {
        long pid = owner_pid(s, e->d_name);
        if (!pid) continue;
        int n = snprintf(p, sizeof(p), "%s/%s", s->dir, e->d_name);
        if (n <= 0 || (size_t)n >= sizeof(p) || lstat(p, &sb)) continue;
        if (s->folders ? !S_ISDIR(sb.st_mode) : !S_ISREG(sb.st_mode)) continue;
        if (pid_running(pid)) {
            live++;
            LOG_INFO("%s: kept %s: its writer (pid %ld) is still running", s->who, p, pid);
            continue;
        }
        bool ok = s->folders ? cllm_remove_folder(p) : unlink(p) == 0;
        if (ok) {
            removed++;
            LOG_WARN("%s: removed stale temporary %s (left by pid %ld, no longer running)", s->who,
                     p, pid);
        } else {
            LOG_WARN("%s: cannot remove stale temporary %s (pid %ld): %s", s->who, p, pid,
                     strerror(errno));
        }
    }
    closedir(d);
    if (kept) *kept = live;
    return removed;
}
