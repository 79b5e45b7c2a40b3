/* Reasoning and tool-call parsing: expected results for Qwen3 / Qwen3.5 style outputs, and the
 * streaming property: fed at once, one byte at a time, split at every single position and in
 * random chunks, the concatenated deltas and the final result are identical. */
#include <string.h>

#include <jansson.h>

#include "test.h"
#include "tokenizer/output_parser.h"

typedef struct res {
    char *reasoning; /* NULL = none */
    char *content;
    char *calls; /* JSON text */
    char *d_reasoning, *d_content, *d_calls;
} res;

static void res_free(res *r) {
    free(r->reasoning), free(r->content), free(r->calls);
    free(r->d_reasoning), free(r->d_content), free(r->d_calls);
}

static void append(char **acc, const char *s, size_t n) {
    size_t l = *acc ? strlen(*acc) : 0;
    *acc = realloc(*acc, l + n + 1);
    memcpy(*acc + l, s, n);
    (*acc)[l + n] = 0;
}

/* Feeds text in chunks ending at the given cut points (sorted, last = len). */
static res run(const cllm_outp_opts *o, const char *text, const size_t *cuts, int ncuts, bool cut) {
    res r = {0};
    cllm_outp *p = cllm_outp_new(o);
    json_t *dcalls = json_array();
    size_t prev = 0, len = strlen(text);
    cllm_outp_delta d;
    for (int i = 0; i <= ncuts + 1; i++) {
        if (i <= ncuts) {
            size_t end = i < ncuts ? cuts[i] : len;
            cllm_outp_feed(p, text + prev, end - prev, &d);
            prev = end;
        } else {
            if (cut)
                cllm_outp_finish_cut(p, &d);
            else
                cllm_outp_finish(p, &d);
        }
        append(&r.d_reasoning, d.reasoning, d.reasoning_len);
        append(&r.d_content, d.content, d.content_len);
        json_array_extend(dcalls, d.tool_calls);
        json_decref(d.tool_calls);
    }
    const char *rs = cllm_outp_reasoning(p);
    r.reasoning = rs ? strdup(rs) : NULL;
    r.content = strdup(cllm_outp_content(p));
    r.calls = json_dumps(cllm_outp_tool_calls(p), JSON_COMPACT);
    r.d_calls = json_dumps(dcalls, JSON_COMPACT);
    json_decref(dcalls);
    cllm_outp_free(p);
    return r;
}

static bool streq(const char *a, const char *b) {
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static unsigned rng = 12345;
static unsigned rnd(unsigned n) {
    rng = rng * 1103515245u + 12345u;
    return (rng >> 8) % n;
}

int main(void) {
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                               "\"parameters\":{\"type\":\"object\","
                               "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":"
                               "\"integer\"},\"metric\":{\"type\":\"boolean\"},"
                               "\"opts\":{\"type\":\"object\"},\"tags\":{\"type\":\"array\"},"
                               "\"zip\":{\"type\":\"string\"}}}}}]",
                               0, NULL);
    cllm_outp_opts q35 = {
        .reasoning = true, .starts_in_reasoning = true, .tool_calls = true, .tools = tools};
    cllm_outp_opts q3 = {
        .reasoning = true, .starts_in_reasoning = false, .tool_calls = true, .tools = tools};
    cllm_outp_opts nothink = {
        .reasoning = true, .starts_in_reasoning = false, .tool_calls = true, .tools = tools};
    struct {
        const cllm_outp_opts *o;
        const char *text, *reasoning, *content, *calls;
        bool cut; /* ended by max_tokens: cllm_outp_finish_cut */
    } cases[] = {
        {&q35, "Let me think.\nStep 2.\n</think>\n\nThe answer is 4.", "Let me think.\nStep 2.",
         "The answer is 4.", "[]"},
        {&q3, "<think>\nhmm\n</think>\n\nHi there!", "hmm", "Hi there!", "[]"},
        {&q3, "Plain answer, no thinking.", NULL, "Plain answer, no thinking.", "[]"},
        {&nothink, "Answer with < and <thi but no tag.\n", NULL,
         "Answer with < and <thi but no tag.", "[]"},
        {&q35, "cut off while thinking <too", "cut off while thinking <too", "", "[]"},
        {&q35,
         "I need the "
         "weather.\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</"
         "parameter>\n"
         "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</"
         "parameter>\n<parameter=zip>\n007\n</parameter>\n"
         "<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n</function>\n</tool_call>",
         "I need the weather.", "",
         "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": "
         "3, \\\"metric\\\": true, \\\"zip\\\": \\\"007\\\", \\\"opts\\\": {\\\"a\\\": [1, "
         "2]}}\"}]"},
        {&q3,
         "<think>\nx\n</think>\n\nChecking.\n<tool_call>\n{\"name\": \"get_weather\", "
         "\"arguments\": {\"city\": \"Rome\"}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
         "\"Oslo\"}}\n</tool_call>",
         "x", "Checking.",
         "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": "
         "\\\"Rome\\\"}\"},{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": "
         "\\\"Oslo\\\"}\"}]"},
        {&q35,
         "thinking then a call inside "
         "reasoning\n<tool_call>\n<function=get_weather>\n<parameter=city>\nBerlin\n</"
         "parameter>\n</function>\n</tool_call>\nmore thought\n</think>\n\ndone",
         "thinking then a call inside reasoningmore thought", "done",
         "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Berlin\\\"}\"}]"},
        {&q3, "text <tool_call>not a call</tool_call> after", NULL,
         "text <tool_call>not a call</tool_call> after", "[]"},
        {&q3, "unterminated <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}", NULL,
         "unterminated ", "[{\"name\":\"get_weather\",\"arguments\":\"{}\"}]"},
        /* unterminated and not a call: given back as generated, no closing tag invented */
        {&q3, "x <tool_call>\n<function=get_weather>\n<parameter=ci", NULL,
         "x <tool_call>\n<function=get_weather>\n<parameter=ci", "[]"},
        /* cut off by max_tokens: even a call that would parse is unfinished, so it is text */
        {&q3, "unterminated <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}", NULL,
         "unterminated <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}", "[]", true},
        {&q35, "r\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", "r",
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", "[]", true},
        {&q35, "多语言推理 🤔\n</think>\n\n答案：四。\n", "多语言推理 🤔",
         "答案：四。", "[]"},
        {&q3, "<think></think>empty think", "", "empty think", "[]"},
    };
    int n_split_runs = 0;
    for (size_t c = 0; c < sizeof(cases) / sizeof(*cases); c++) {
        const char *t = cases[c].text;
        size_t len = strlen(t);
        res whole = run(cases[c].o, t, NULL, 0, cases[c].cut);
        CHECK_MSG(streq(whole.reasoning, cases[c].reasoning), "case %zu reasoning: [%s]", c,
                  whole.reasoning ? whole.reasoning : "(null)");
        CHECK_MSG(streq(whole.content, cases[c].content), "case %zu content: [%s]", c,
                  whole.content);
        CHECK_MSG(streq(whole.calls, cases[c].calls), "case %zu calls: %s", c, whole.calls);
        CHECK_MSG(streq(whole.d_content, whole.content) && streq(whole.d_calls, whole.calls) &&
                      streq(whole.d_reasoning, whole.reasoning ? whole.reasoning : ""),
                  "case %zu: deltas differ from result", c);
        /* every single split point, byte-at-a-time, and random chunkings */
        size_t *cuts = malloc((len + 1) * sizeof(size_t));
        for (int mode = 0; mode < 3; mode++) {
            int reps = mode == 0 ? (int)len : mode == 1 ? 1 : 50;
            for (int rep = 0; rep < reps; rep++) {
                int nc = 0;
                if (mode == 0)
                    cuts[nc++] = (size_t)rep;
                else if (mode == 1)
                    for (size_t i = 1; i < len; i++) cuts[nc++] = i;
                else
                    for (size_t i = 1; i < len; i++)
                        if (rnd(4) == 0) cuts[nc++] = i;
                res part = run(cases[c].o, t, cuts, nc, cases[c].cut);
                bool same = streq(part.reasoning, whole.reasoning) &&
                            streq(part.content, whole.content) && streq(part.calls, whole.calls) &&
                            streq(part.d_content, whole.d_content) &&
                            streq(part.d_reasoning, whole.d_reasoning) &&
                            streq(part.d_calls, whole.d_calls);
                CHECK_MSG(same, "case %zu mode %d rep %d: streaming result differs (content [%s])",
                          c, mode, rep, part.content);
                n_split_runs++;
                res_free(&part);
            }
        }
        free(cuts);
        res_free(&whole);
    }
    fprintf(stderr, "output parser: %zu cases, %d chunkings compared\n",
            sizeof(cases) / sizeof(*cases), n_split_runs);
    json_decref(tools);
    return test_report("test_parse_output");
}
