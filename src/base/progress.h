/* Progress of a long offline job (quantize, GPTQ calibration, eval) on one stream: on a terminal a
 * bar redrawn in place with \r; otherwise (a log file, a pipe) whole lines, one per step_pct
 * percent and/or one per every_s seconds, and one at 100%, so a redirected log gets a handful of
 * readable lines instead of kilobytes of bar. A NULL stream is silent (-q). */
#ifndef CLLM_BASE_PROGRESS_H
#define CLLM_BASE_PROGRESS_H

#include <stdbool.h>
#include <stdio.h>

typedef struct cllm_progress {
    FILE *f;        /* NULL = silent */
    bool tty;       /* bar with \r instead of lines */
    int step_pct;   /* lines: one each time the percentage passes a multiple (0 = none) */
    double every_s; /* lines: one when this long has passed since the last (0 = none) */
    char what[96];
    double t0, t_line;
    int pct, pct_line; /* last drawn percentage, last percentage written as a line */
    bool open;         /* tty: a bar is on the current line */
} cllm_progress;

/* f = stderr or NULL; tty = isatty of f (the caller knows the descriptor). */
void cllm_progress_init(cllm_progress *p, FILE *f, bool tty, int step_pct, double every_s,
                        const char *what);
/* done of total units; detail (may be NULL) goes after the percentage, e.g. "3/8 windows". */
void cllm_progress_update(cllm_progress *p, double done, double total, const char *detail);
/* Ends the bar's line (tty) so other output can follow; the next update starts a new bar. */
void cllm_progress_break(cllm_progress *p);

#endif
