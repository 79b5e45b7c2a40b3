/* Shard discovery, index validation and name lookup; see checkpoint.h. */
#include "model/checkpoint.h"

#include "model/gguf_ckpt.h"

#include <dirent.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define INDEX_NAME      "model.safetensors.index.json"
#define INDEX_MAX_BYTES (64u * 1024 * 1024)

/* Records a problem: fatal in strict mode (returns the status), listed in lenient mode. */
static cllm_status problem(cllm_ckpt *c, bool lenient, cllm_error *err, cllm_status code,
                           const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static cllm_status problem(cllm_ckpt *c, bool lenient, cllm_error *err, cllm_status code,
                           const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!lenient) return cllm_err_set(err, code, "%s", msg);
    char **np = realloc(c->problems, (c->n_problems + 1) * sizeof(*np));
    if (!np) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    c->problems = np;
    c->problems[c->n_problems++] = strdup(msg);
    return CLLM_OK;
}

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int add_file_name(cllm_ckpt *c, const char *name) {
    for (size_t i = 0; i < c->n_files; i++)
        if (!strcmp(c->file_names[i], name)) return 0;
    char **nn = realloc(c->file_names, (c->n_files + 1) * sizeof(*nn));
    if (!nn) return -1;
    c->file_names = nn;
    c->file_names[c->n_files] = strdup(name);
    if (!c->file_names[c->n_files]) return -1;
    c->n_files++;
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static cllm_status list_safetensors(cllm_ckpt *c, cllm_error *err) {
    DIR *d = opendir(c->dir);
    if (!d) return cllm_err_set(err, CLLM_ENOTFOUND, "%s: cannot open model directory", c->dir);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors") && add_file_name(c, e->d_name)) {
            closedir(d);
            return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        }
    }
    closedir(d);
    qsort(c->file_names, c->n_files, sizeof(char *), cmp_str);
    return CLLM_OK;
}

/* Reads the index; fills file_names and returns the weight_map (caller decrefs *root). */
static cllm_status read_index(cllm_ckpt *c, const char *path, bool lenient, json_t **root,
                              json_t **wmap, cllm_error *err) {
    json_error_t je;
    *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!*root)
        return cllm_err_set(err, CLLM_EFORMAT, "%s: not valid JSON (%s, line %d)", path, je.text,
                            je.line);
    *wmap = json_object_get(*root, "weight_map");
    if (!json_is_object(*wmap))
        return cllm_err_set(err, CLLM_EFORMAT, "%s: missing object 'weight_map'", path);
    const char *name;
    json_t *v;
    json_object_foreach(*wmap, name, v) {
        const char *shard = json_string_value(v);
        if (!shard)
            return cllm_err_set(err, CLLM_EFORMAT, "%s: weight_map['%s'] is not a string", path,
                                name);
        if (strchr(shard, '/') || !strcmp(shard, "..") || !*shard)
            return cllm_err_set(err, CLLM_EFORMAT,
                                "%s: weight_map['%s'] = '%s' is not a plain file name", path, name,
                                shard);
        if (add_file_name(c, shard)) return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    (void)lenient;
    return CLLM_OK;
}

static cllm_status index_tensors(cllm_ckpt *c, bool lenient, cllm_error *err) {
    for (size_t i = 0; i < c->n_files; i++) {
        cllm_st_file *f = c->files[i];
        if (!f) continue;
        for (size_t t = 0; t < f->n_tensors; t++) {
            const cllm_tensor *ten = &f->tensors[t];
            const cllm_tensor *prev = cllm_strmap_get(&c->by_name, ten->name, strlen(ten->name));
            if (prev) {
                cllm_status st =
                    problem(c, lenient, err, CLLM_EFORMAT, "tensor '%s' appears in both %s and %s",
                            ten->name, prev->file, ten->file);
                if (st) return st;
                continue;
            }
            if (cllm_strmap_put(&c->by_name, ten->name, strlen(ten->name), (void *)ten) < 0)
                return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
            c->n_tensors++;
        }
    }
    return CLLM_OK;
}

static cllm_status check_index(cllm_ckpt *c, json_t *wmap, const char *index_path, bool lenient,
                               cllm_error *err) {
    const char *name;
    json_t *v;
    json_object_foreach(wmap, name, v) {
        const char *shard = json_string_value(v);
        const cllm_tensor *t = cllm_ckpt_get(c, name);
        size_t fi = 0;
        while (fi < c->n_files && strcmp(c->file_names[fi], shard)) fi++;
        if (fi < c->n_files && !c->files[fi]) continue; /* shard already reported */
        cllm_status st = CLLM_OK;
        if (!t)
            st = problem(c, lenient, err, CLLM_ENOTFOUND, "%s: tensor '%s' listed in %s is missing",
                         shard, name, INDEX_NAME);
        else if (strcmp(strrchr(t->file, '/') + 1, shard))
            st = problem(c, lenient, err, CLLM_EFORMAT, "%s: tensor '%s' is in %s, index says %s",
                         index_path, name, t->file, shard);
        if (st) return st;
    }
    for (size_t i = 0; i < c->n_files; i++) {
        const cllm_st_file *f = c->files[i];
        for (size_t t = 0; f && t < f->n_tensors; t++) {
            if (!json_object_get(wmap, f->tensors[t].name)) {
                cllm_status st =
                    problem(c, lenient, err, CLLM_EFORMAT, "%s: tensor '%s' is not listed in %s",
                            f->path, f->tensors[t].name, INDEX_NAME);
                if (st) return st;
            }
        }
    }
    return CLLM_OK;
}

/* The GGUF of a folder with no *.safetensors: model.gguf (what `cllm serve FILE.gguf` links), or
 * the one *.gguf there (the first file of a split set counts for the set); NULL otherwise. */
static char *find_gguf(const char *dir) {
    char *p = path_join(dir, "model.gguf");
    if (p && file_exists(p)) return p;
    free(p);
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char *found = NULL;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l > 12 && !strcmp(e->d_name + l - 12, ".safetensors")) {
            n = 2; /* a safetensors checkpoint: not a GGUF folder */
            break;
        }
        if (!cllm_gguf_is_path(e->d_name) ||
            (strstr(e->d_name, "-of-") && !strstr(e->d_name, "-00001-of-")))
            continue;
        if (n++ == 0) found = path_join(dir, e->d_name);
    }
    closedir(d);
    if (n != 1) {
        free(found);
        return NULL;
    }
    return found;
}

cllm_status cllm_ckpt_open(const char *dir, bool lenient, cllm_ckpt **out, cllm_error *err) {
    *out = NULL;
    cllm_ckpt *c = calloc(1, sizeof(*c));
    if (!c || !(c->dir = strdup(dir)) || cllm_strmap_init(&c->by_name, 1024)) {
        cllm_ckpt_close(c);
        return cllm_err_set(err, CLLM_ENOMEM, "out of memory");
    }
    json_t *root = NULL, *wmap = NULL;
    char *index_path = path_join(dir, INDEX_NAME);
    cllm_status st = CLLM_OK;
    char *gguf = find_gguf(dir);
    if (gguf) { /* only when the folder has no safetensors (find_gguf) */
        st = cllm_gguf_ckpt_fill(c, gguf, err);
        free(gguf);
        if (!st) st = index_tensors(c, false, err);
        free(index_path);
        if (st) {
            cllm_ckpt_close(c);
            return st;
        }
        *out = c;
        return CLLM_OK;
    }
    if (index_path && file_exists(index_path)) {
        c->has_index = true;
        st = read_index(c, index_path, lenient, &root, &wmap, err);
    } else {
        char *single = path_join(dir, "model.safetensors");
        if (single && file_exists(single))
            st = add_file_name(c, "model.safetensors")
                     ? cllm_err_set(err, CLLM_ENOMEM, "%s: out of memory", dir)
                     : CLLM_OK;
        else
            st = list_safetensors(c, err);
        free(single);
    }
    if (st) goto fail;
    if (c->n_files == 0) {
        st = cllm_err_set(err, CLLM_ENOTFOUND, "%s: no .safetensors files and no %s", dir,
                          INDEX_NAME);
        goto fail;
    }
    c->files = calloc(c->n_files, sizeof(*c->files));
    if (!c->files) {
        st = cllm_err_set(err, CLLM_ENOMEM, "out of memory");
        goto fail;
    }
    size_t opened = 0;
    for (size_t i = 0; i < c->n_files; i++) {
        char *p = path_join(dir, c->file_names[i]);
        cllm_error e2;
        cllm_status s2 = p ? cllm_st_open(p, &c->files[i], &e2) : CLLM_ENOMEM;
        free(p);
        if (s2 == CLLM_OK) {
            opened++;
            continue;
        }
        st = problem(c, lenient, err, s2, "%s", s2 == CLLM_ENOMEM ? "out of memory" : e2.msg);
        if (st) goto fail;
    }
    if (opened == 0) {
        st = cllm_err_set(err, CLLM_ENOTFOUND, "%s: none of the %zu weight files could be read%s%s",
                          dir, c->n_files, c->n_problems ? ": " : "",
                          c->n_problems ? c->problems[0] : "");
        goto fail;
    }
    if ((st = index_tensors(c, lenient, err))) goto fail;
    if (wmap && (st = check_index(c, wmap, index_path, lenient, err))) goto fail;
    json_decref(root);
    free(index_path);
    *out = c;
    return CLLM_OK;
fail:
    json_decref(root);
    free(index_path);
    cllm_ckpt_close(c);
    return st;
}

void cllm_ckpt_close(cllm_ckpt *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n_files; i++) {
        if (c->files) cllm_st_close(c->files[i]);
        free(c->file_names[i]);
    }
    free(c->files);
    free(c->file_names);
    for (size_t i = 0; i < c->n_problems; i++) free(c->problems[i]);
    free(c->problems);
    cllm_strmap_free(&c->by_name);
    if (c->owner_free) c->owner_free(c->owner);
    free(c->dir);
    free(c);
}

const cllm_tensor *cllm_ckpt_get(const cllm_ckpt *c, const char *name) {
    return cllm_strmap_get(&c->by_name, name, strlen(name));
}

void cllm_ckpt_foreach(const cllm_ckpt *c, void (*fn)(void *ctx, const cllm_tensor *t), void *ctx) {
    for (size_t i = 0; i < c->n_files; i++)
        for (size_t t = 0; c->files[i] && t < c->files[i]->n_tensors; t++)
            fn(ctx, &c->files[i]->tensors[t]);
}
