/* See progress.h. */
#include "base/progress.h"

#include "base/mem.h"

void cllm_progress_init(cllm_progress *p, FILE *f, bool tty, int step_pct, double every_s,
                        const char *what) {
    *p = (cllm_progress){.f = f, .tty = tty, .step_pct = step_pct, .every_s = every_s};
    snprintf(p->what, sizeof(p->what), "%s", what ? what : "");
    p->t0 = p->t_line = cllm_time_s();
    p->pct = p->pct_line = -1;
}

void cllm_progress_update(cllm_progress *p, double done, double total, const char *detail) {
    if (!p->f) return;
    int pct = (int)(100.0 * done / (total > 0 ? total : 1));
    pct = pct < 0 ? 0 : pct > 100 ? 100 : pct;
    const char *sep = detail && *detail ? " " : "";
    detail = detail ? detail : "";
    if (p->tty) {
        if (pct == p->pct && p->open) return;
        fprintf(p->f, "\r%s%s[%-40.*s] %3d%%%s%-60.60s", p->what, *p->what ? " " : "",
                pct * 40 / 100, "########################################", pct, sep, detail);
        p->open = true;
        if (pct == 100) cllm_progress_break(p);
    } else {
        double now = cllm_time_s();
        bool step = p->step_pct > 0 && pct / p->step_pct > p->pct_line / p->step_pct;
        bool late = p->every_s > 0 && now - p->t_line >= p->every_s && pct != p->pct_line;
        bool last = pct == 100 && p->pct_line != 100;
        if (!step && !late && !last) {
            p->pct = pct;
            return;
        }
        fprintf(p->f, "%s%s%d%%%s%s (%.0f s)\n", p->what, *p->what ? ": " : "", pct, sep, detail,
                now - p->t0);
        p->pct_line = pct;
        p->t_line = now;
    }
    p->pct = pct;
    fflush(p->f);
}

void cllm_progress_break(cllm_progress *p) {
    if (p->f && p->tty && p->open) fprintf(p->f, "\n"), fflush(p->f);
    p->open = false;
}
