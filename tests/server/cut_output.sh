#!/bin/bash
# Answers cut off by max_tokens say so and hold exactly what was generated (models/tiny, greedy):
# - a forced tool call (tool_choice naming a function, and "required") stopped inside the call:
#   finish_reason "length", no tool_calls, content = the generated tokens' bytes (from logprobs)
#   with no closing </tool_call> added; streamed deltas add up to the same text;
# - /v1/responses stopped by max_output_tokens: status "incomplete" and the message item cut
#   "incomplete" too (as OpenAI's Responses API), in the JSON answer and in the stream's
#   response.output_item.done; an answer that ends by itself keeps "completed".
set -u
BIN=${CLLM_BIN:-build/cllm}
SRC=${CLLM_SRC:-.}
T=${CLLM_TMP:-/tmp}/cut_output
rm -rf "$T" && mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
. "$SRC/tests/lib/serve.sh"
command -v curl > /dev/null || { echo "SKIP: no curl"; exit 77; }
PY=/usr/bin/python3
start_serve "$SRC/models/tiny" || exit 1

TOOLS='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
  "properties":{"city":{"type":"string"}},"required":["city"]}}}]'
# chat CHOICE MAX STREAM -> the answer (JSON, or the SSE stream)
chat() {
    curl -sN -H "$H" "$U/v1/chat/completions" -d "{\"model\":\"tiny\",
      \"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"tools\":$TOOLS,
      \"tool_choice\":$1,\"max_tokens\":$2,\"temperature\":0,\"logprobs\":true,\"stream\":$3,
      \"chat_template_kwargs\":{\"enable_thinking\":false}}"
}
NAMED='{"type":"function","function":{"name":"get_weather"}}'
for choice in "$NAMED" '"required"'; do
    for n in 30 45; do
        chat "$choice" $n false > "$T/chat.json"
        chat "$choice" $n true > "$T/chat.sse"
        why=$($PY - "$T/chat.json" "$T/chat.sse" $n << 'EOF'
import json, sys
a = json.load(open(sys.argv[1]))
c = a["choices"][0]
m = c["message"]
gen = bytes(b for t in c["logprobs"]["content"] for b in t["bytes"]).decode("utf-8", "replace")
content = m.get("content") or ""
errs = []
if c["finish_reason"] != "length": errs.append("finish_reason %r" % c["finish_reason"])
if m.get("tool_calls"): errs.append("tool_calls %r" % m["tool_calls"])
if a["usage"]["completion_tokens"] != int(sys.argv[3]): errs.append("usage %r" % a["usage"])
if not content.startswith("<tool_call>"): errs.append("not inside a call: %r" % content)
if content.rstrip().endswith("</tool_call>"): errs.append("closing tag added: %r" % content)
if content != gen.strip("\n"): errs.append("content %r != generated %r" % (content, gen))
text, fin, calls = "", None, 0
for line in open(sys.argv[2]):
    if not line.startswith("data: {"): continue
    ch = json.loads(line[6:])["choices"][0]
    text += ch["delta"].get("content") or ""
    calls += len(ch["delta"].get("tool_calls") or [])
    fin = ch["finish_reason"] or fin
if (text, fin, calls) != (content, "length", 0):
    errs.append("stream: %r %r %d calls" % (text, fin, calls))
print("; ".join(errs) if errs else "ok " + repr(content))
EOF
)
        case $why in
        ok*) ok "tool_choice $choice, max_tokens $n: $why" ;;
        *) bad "tool_choice $choice, max_tokens $n: $why" ;;
        esac
    done
done

# resp MAX STREAM -> the /v1/responses answer
resp() {
    curl -sN -H "$H" "$U/v1/responses" -d "{\"model\":\"tiny\",\"input\":\"Hello\",
      \"max_output_tokens\":$1,\"temperature\":0,\"stream\":$2}"
}
resp 5 false > "$T/r.json"
resp 5 true > "$T/r.sse"
resp 2000 false > "$T/r_full.json"
why=$($PY - "$T/r.json" "$T/r.sse" "$T/r_full.json" << 'EOF'
import json, sys
errs = []
r = json.load(open(sys.argv[1]))
st = [i.get("status") for i in r["output"]]
if r["status"] != "incomplete" or st[-1:] != ["incomplete"]:
    errs.append("json: response %s, items %r" % (r["status"], st))
done, final = [], None
for line in open(sys.argv[2]):
    if not line.startswith("data: {"): continue
    e = json.loads(line[6:])
    if e["type"] == "response.output_item.done": done.append(e["item"]["status"])
    if e["type"] in ("response.incomplete", "response.completed"): final = e
if done[-1:] != ["incomplete"] or not final or final["type"] != "response.incomplete" or \
        final["response"]["output"][-1]["status"] != "incomplete":
    errs.append("stream: items done %r, final %r" % (done, final and final["type"]))
f = json.load(open(sys.argv[3]))
if f["status"] != "completed" or any(i.get("status") != "completed" for i in f["output"]):
    errs.append("uncut: %s %r" % (f["status"], [i.get("status") for i in f["output"]]))
print("; ".join(errs) if errs else "ok")
EOF
)
[ "$why" = ok ] && ok "/v1/responses cut by max_output_tokens: item incomplete" || bad "/v1/responses: $why"
kill -0 $SPID 2> /dev/null && ok "server alive" || { bad "server died"; cat "$T/serve.log"; }
check_exit
