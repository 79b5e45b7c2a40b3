/* Streaming reasoning / tool-call splitter (see output_parser.h). A small state machine over a
 * pending buffer: text is released only once no tag can start inside it, so any chunking of the
 * same output gives the same deltas in total and the same final result. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/output_parser.h"

json_t *outp_parse_tool_call(const char *s, size_t len, json_t *tools);

typedef enum { ST_CONTENT, ST_REASONING, ST_TOOL } outp_state;

typedef struct sbuf {
    char *p;
    size_t len, cap;
} sbuf;

struct cllm_outp {
    cllm_outp_opts o;
    outp_state st, tool_from; /* tool_from: state to return to after </tool_call> */
    bool skip_nl;             /* drop newlines at the start of the next text */
    sbuf pend;                /* not yet decided */
    sbuf tool;                /* body of the current tool call */
    sbuf all_reasoning, all_content;
    bool any_reasoning;
    sbuf d_reasoning, d_content; /* this feed's deltas */
    json_t *calls, *d_calls;
};

static int sb_put(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->len + n + 1) nc *= 2;
        char *p = realloc(b->p, nc);
        if (!p) return -1;
        b->p = p;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

static void sb_consume(sbuf *b, size_t n) {
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    if (b->p) b->p[b->len] = 0;
}

cllm_outp *cllm_outp_new(const cllm_outp_opts *opts) {
    cllm_outp *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    if (opts) p->o = *opts;
    p->st = p->o.reasoning && p->o.starts_in_reasoning ? ST_REASONING : ST_CONTENT;
    p->any_reasoning = p->st == ST_REASONING;
    p->skip_nl = true;
    p->calls = json_array();
    if (sb_put(&p->all_content, "", 0) || !p->calls) {
        cllm_outp_free(p);
        return NULL;
    }
    return p;
}

void cllm_outp_free(cllm_outp *p) {
    if (!p) return;
    free(p->pend.p);
    free(p->tool.p);
    free(p->all_reasoning.p);
    free(p->all_content.p);
    free(p->d_reasoning.p);
    free(p->d_content.p);
    json_decref(p->calls);
    json_decref(p->d_calls);
    free(p);
}

static int emit(cllm_outp *p, outp_state st, const char *s, size_t n) {
    if (!n) return 0;
    if (st == ST_REASONING)
        return sb_put(&p->d_reasoning, s, n) || sb_put(&p->all_reasoning, s, n) ? -1 : 0;
    return sb_put(&p->d_content, s, n) || sb_put(&p->all_content, s, n) ? -1 : 0;
}

/* The tags that can end text in the current state. */
static int tags_for(const cllm_outp *p, const char **t) {
    int n = 0;
    if (p->st == ST_TOOL) {
        t[n++] = "</tool_call>";
        return n;
    }
    if (p->o.reasoning) t[n++] = p->st == ST_REASONING ? "</think>" : "<think>";
    if (p->o.tool_calls) t[n++] = "<tool_call>";
    return n;
}

/* Emits text in the current state, holding nothing back (the caller decided). */
static int emit_text(cllm_outp *p, const char *s, size_t n) {
    if (p->st == ST_TOOL) return sb_put(&p->tool, s, n);
    return emit(p, p->st, s, n);
}

/* How a tool call's body ended: at </tool_call>, at the end of the output (the model stopped
 * without closing it), or cut off (max_tokens): a cut call is unfinished, so it is not parsed. */
typedef enum { TOOL_CLOSED, TOOL_OPEN, TOOL_CUT } tool_end;

static int finish_tool(cllm_outp *p, tool_end how) {
    json_t *call = how == TOOL_CUT
                       ? NULL
                       : outp_parse_tool_call(p->tool.p ? p->tool.p : "", p->tool.len, p->o.tools);
    int rc = 0;
    if (call) {
        rc = json_array_append(p->calls, call) || json_array_append(p->d_calls, call);
        json_decref(call);
    } else { /* not a call we understand: give it back as text, verbatim: only a closing tag the
              * model wrote is given back */
        rc = emit(p, p->tool_from, "<tool_call>", 11) ||
             emit(p, p->tool_from, p->tool.p ? p->tool.p : "", p->tool.len) ||
             (how == TOOL_CLOSED && emit(p, p->tool_from, "</tool_call>", 12));
    }
    p->tool.len = 0;
    return rc;
}

static int process(cllm_outp *p, bool final, bool was_cut) {
    for (;;) {
        const char *tags[3];
        int nt = tags_for(p, tags);
        char *s = p->pend.p ? p->pend.p : "";
        size_t n = p->pend.len;
        if (p->skip_nl && p->st != ST_TOOL) {
            size_t k = 0;
            while (k < n && (s[k] == '\n' || s[k] == '\r')) k++;
            sb_consume(&p->pend, k);
            s = p->pend.p ? p->pend.p : "";
            n = p->pend.len;
            if (!n) return 0;
            p->skip_nl = false;
        }
        /* earliest complete tag */
        const char *best = NULL;
        int bt = -1;
        for (int i = 0; i < nt; i++) {
            const char *f = memmem(s, n, tags[i], strlen(tags[i]));
            if (f && (!best || f < best)) best = f, bt = i;
        }
        if (best) {
            size_t pre = (size_t)(best - s), cut = pre;
            if (p->st != ST_TOOL) /* newlines right before a tag are dropped */
                while (cut > 0 && (s[cut - 1] == '\n' || s[cut - 1] == '\r')) cut--;
            if (emit_text(p, s, p->st == ST_TOOL ? pre : cut)) return -1;
            const char *tag = tags[bt];
            if (!strcmp(tag, "</think>"))
                p->st = ST_CONTENT;
            else if (!strcmp(tag, "<think>"))
                p->st = ST_REASONING, p->any_reasoning = true;
            else if (!strcmp(tag, "<tool_call>"))
                p->tool_from = p->st, p->st = ST_TOOL;
            else if (!strcmp(tag, "</tool_call>")) {
                p->st = p->tool_from;
                if (finish_tool(p, TOOL_CLOSED)) return -1;
            }
            p->skip_nl = true;
            sb_consume(&p->pend, pre + strlen(tag));
            continue;
        }
        /* No complete tag: keep a suffix that could start one, and trailing newlines. */
        size_t keep = 0;
        if (!final) {
            for (int i = 0; i < nt; i++) {
                size_t tl = strlen(tags[i]);
                for (size_t k = tl - 1; k > keep; k--)
                    if (k <= n && !memcmp(s + n - k, tags[i], k)) {
                        keep = k;
                        break;
                    }
            }
        }
        size_t cut = n - keep;
        if (p->st != ST_TOOL) {
            size_t c2 = cut;
            while (c2 > 0 && (s[c2 - 1] == '\n' || s[c2 - 1] == '\r')) c2--;
            if (final && p->st != ST_TOOL) {
                if (emit_text(p, s, c2)) return -1;
                sb_consume(&p->pend, n);
                return 0;
            }
            cut = c2; /* newlines wait until we know what follows */
        }
        if (emit_text(p, s, cut)) return -1;
        sb_consume(&p->pend, cut);
        if (final) { /* unterminated tool call: parse what we have */
            if (p->pend.len && sb_put(&p->tool, p->pend.p, p->pend.len)) return -1;
            p->pend.len = 0;
            p->st = p->tool_from;
            return finish_tool(p, was_cut ? TOOL_CUT : TOOL_OPEN);
        }
        return 0;
    }
}

static cllm_status run(cllm_outp *p, const char *text, size_t len, bool final, bool cut,
                       cllm_outp_delta *d) {
    p->d_reasoning.len = p->d_content.len = 0;
    json_decref(p->d_calls);
    p->d_calls = json_array();
    if (!p->d_calls || sb_put(&p->pend, text, len) || process(p, final, cut) ||
        sb_put(&p->d_reasoning, "", 0) || sb_put(&p->d_content, "", 0))
        return CLLM_ENOMEM;
    if (d) {
        d->reasoning = p->d_reasoning.p;
        d->reasoning_len = p->d_reasoning.len;
        d->content = p->d_content.p;
        d->content_len = p->d_content.len;
        d->tool_calls = json_incref(p->d_calls);
    }
    return CLLM_OK;
}

cllm_status cllm_outp_feed(cllm_outp *p, const char *text, size_t len, cllm_outp_delta *d) {
    return run(p, text, len, false, false, d);
}

cllm_status cllm_outp_finish(cllm_outp *p, cllm_outp_delta *d) {
    return run(p, "", 0, true, false, d);
}

cllm_status cllm_outp_finish_cut(cllm_outp *p, cllm_outp_delta *d) {
    return run(p, "", 0, true, true, d);
}

const char *cllm_outp_reasoning(const cllm_outp *p) {
    return p->any_reasoning ? (p->all_reasoning.p ? p->all_reasoning.p : "") : NULL;
}
const char *cllm_outp_content(const cllm_outp *p) {
    return p->all_content.p;
}
json_t *cllm_outp_tool_calls(const cllm_outp *p) {
    return p->calls;
}
