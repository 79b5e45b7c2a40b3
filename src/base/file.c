/* See file.h. Reads in growing chunks so pipes and /proc files work too (no reliance on fstat). */
#include "base/file.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *cllm_read_file(const char *path, size_t max_bytes, size_t *len, cllm_error *err) {
    if (len) *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        cllm_err_set(err, errno == ENOENT ? CLLM_ENOTFOUND : CLLM_EIO, "%s: cannot open: %s", path,
                     strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 1 >= cap) {
            size_t nc = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                fclose(f);
                cllm_err_set(err, CLLM_ENOMEM, "%s: out of memory", path);
                return NULL;
            }
            buf = nb;
            cap = nc;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (max_bytes && n > max_bytes) {
            free(buf);
            fclose(f);
            cllm_err_set(err, CLLM_EFORMAT, "%s: larger than %zu bytes", path, max_bytes);
            return NULL;
        }
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        cllm_err_set(err, CLLM_EIO, "%s: read error", path);
        return NULL;
    }
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

bool cllm_remove_folder(const char *path) {
    DIR *d = opendir(path);
    if (!d) return false;
    struct dirent *e;
    char p[4096];
    struct stat sb;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int n = snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
        if (n > 0 && (size_t)n < sizeof(p) && !lstat(p, &sb) &&
            (S_ISREG(sb.st_mode) || S_ISLNK(sb.st_mode)))
            unlink(p);
    }
    closedir(d);
    return rmdir(path) == 0;
}
