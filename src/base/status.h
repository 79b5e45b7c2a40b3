/* Status codes and error messages shared by every module.
 *
 * Anything that can fail because of input or the environment returns a cllm_status and, when the
 * caller passes a cllm_error, a one-line message naming the file/tensor/field and the problem.
 * Library code never exits or aborts on bad input; CLLM_ASSERT is for internal invariants only. */
#ifndef CLLM_BASE_STATUS_H
#define CLLM_BASE_STATUS_H

#include <stddef.h>

typedef enum cllm_status {
    CLLM_OK = 0,
    CLLM_EINVAL,       /* bad argument or request field */
    CLLM_ENOMEM,       /* allocation failed or a cap was hit */
    CLLM_EIO,          /* file or socket error */
    CLLM_EFORMAT,      /* malformed file contents */
    CLLM_ENOTFOUND,    /* missing file, tensor or key */
    CLLM_EUNSUPPORTED, /* valid but not handled by this build */
    CLLM_ERANGE,       /* value outside the allowed range */
    CLLM_EBUSY,        /* overloaded; try again later */
    CLLM_ECANCELLED,   /* stopped on request */
} cllm_status;

typedef struct cllm_error {
    cllm_status code;
    char msg[512];
} cllm_error;

/* Records code and a printf-style message in err (which may be NULL) and returns code, so a
 * failing path reads `return cllm_err_set(err, CLLM_EFORMAT, "%s: ...", path);`. */
cllm_status cllm_err_set(cllm_error *err, cllm_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message (for adding the file name at an outer level). */
void cllm_err_prefix(cllm_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void cllm_err_clear(cllm_error *err);

/* Short stable name of a status ("EFORMAT"). */
const char *cllm_status_name(cllm_status s);

/* Logs file:line and the failed expression, then aborts: only for invariants that no input can
 * break (a failed one is a bug in cllm, never a user error). Kept under NDEBUG on purpose. */
#define CLLM_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) cllm_assert_fail(__FILE__, __LINE__, #cond);                                  \
    } while (0)
_Noreturn void cllm_assert_fail(const char *file, int line, const char *expr);

#endif
