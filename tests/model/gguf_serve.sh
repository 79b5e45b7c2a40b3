#!/bin/bash
# `cllm serve FILE.gguf` with the tokenizer from the GGUF metadata. A synth models/tiny-shaped
# model (tests/lib/serve.sh tiny_model: vocabulary 4096, models/tiny's tokenizer) converted to an
# F32 qwen35moe GGUF by tools/ref/gguf_np.py, its tokenizer.* keys from a vocab GGUF that
# tools/ref/gguf_vocab.py writes from models/tiny's tokenizer.json / tokenizer_config.json. The
# GGUF server and the server on the model folder answer /v1/chat/completions and /v1/completions
# (greedy, 12 tokens) with the same prompt token count and the same text (same weights, same
# tokenizer; the chat answer is reasoning_content + content, the tiny template opens <think>);
# /tokenize agrees too.
# The UNUSED "[PAD<id>]" fillers (ids past the HF tokenizer's) decode to nothing, as in HF; this
# completion generates such ids (it found them decoding as text, fixed since).
set -u
BIN=${CLLM_BIN:?}; SRC=${CLLM_SRC:?}; T=${CLLM_TMP:-/tmp}/gguf_serve
PY=/usr/bin/python3
rm -rf "$T"; mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
. "$SRC/tests/lib/serve.sh"
if ! $PY -c 'import numpy' 2>/dev/null || ! command -v curl >/dev/null; then
  echo "SKIP: no /usr/bin/python3 with numpy, or no curl" >&2; exit 77
fi
tiny_model "$T/m" || { bad "synth"; exit 1; }
$PY "$SRC/tools/ref/gguf_vocab.py" "$SRC/models/tiny" "$T/vocab.gguf" --pre qwen35 \
  --config "$T/m/config.json" >"$T/out" 2>&1 || { bad "gguf_vocab.py"; cat "$T/out"; exit 1; }
CLLM_SRC="$SRC" $PY - "$T/m" "$T/x.gguf" "$T/vocab.gguf" <<'PYEOF' || { bad "hf_to_gguf"; exit 1; }
import os, sys
sys.path.insert(0, os.environ["CLLM_SRC"] + "/tools/ref")
import gguf_np as G
G.hf_to_gguf(sys.argv[1], sys.argv[2], lambda n: "F32", vocab_gguf=sys.argv[3])
g = G.GGUFFile(sys.argv[2])
assert any(k.startswith("tokenizer.ggml.tokens") for k in g.kv), "no tokenizer keys copied"
PYEOF
"$BIN" verify "$T/x.gguf" >"$T/out" 2>&1 && grep -q "^OK" "$T/out" && ok "verify x.gguf OK" ||
  { bad "verify x.gguf"; cat "$T/out"; }
CHAT='{"model":"tiny","messages":[{"role":"user","content":"Continue: In the beginning God created"}],"max_tokens":12,"temperature":0}'
COMP='{"model":"tiny","prompt":"The quick brown fox jumps over the lazy dog, and then","max_tokens":12,"temperature":0}'
TOKR='{"model":"tiny","prompt":"Hello, world! 12345 héllo"}'
ask() { # ask TAG: answers of the running server into $T/TAG.*
  curl -s -H "$H" -H 'Content-Type: application/json' -d "$CHAT" $U/v1/chat/completions >"$T/$1.chat"
  curl -s -H "$H" -H 'Content-Type: application/json' -d "$COMP" $U/v1/completions >"$T/$1.comp"
  curl -s -H "$H" -H 'Content-Type: application/json' -d "$TOKR" $U/tokenize >"$T/$1.tok"
}
field() { # field FILE PYEXPR(j)
  $PY -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1" 2>/dev/null
}
start_serve "$T/m" || { bad "serve folder"; exit 1; }
ask dir
kill $SPID; wait $SPID 2>/dev/null
start_serve "$T/x.gguf" || { bad "serve x.gguf"; exit 1; }
ask gguf
kill $SPID; wait $SPID 2>/dev/null
for k in chat comp; do
  pt=$(field "$T/gguf.$k" "j['usage']['prompt_tokens']"); pd=$(field "$T/dir.$k" "j['usage']['prompt_tokens']")
  [ -n "$pt" ] && [ "$pt" -gt 3 ] 2>/dev/null && [ "$pt" = "$pd" ] && ok "$k: prompt_tokens $pt == folder's" ||
    { bad "$k: prompt_tokens gguf '$pt' vs folder '$pd'"; cat "$T/gguf.$k"; echo; }
done
MSG="(j['choices'][0]['message'].get('reasoning_content') or '') + '|' + j['choices'][0]['message']['content']"
a=$(field "$T/gguf.chat" "$MSG"); b=$(field "$T/dir.chat" "$MSG")
[ -n "$a" ] && [ "$a" = "$b" ] && ok "chat greedy answer equal: [$a]" || bad "chat answer: gguf [$a] folder [$b]"
a=$(field "$T/gguf.comp" "j['choices'][0]['text']"); b=$(field "$T/dir.comp" "j['choices'][0]['text']")
[ -n "$a" ] && [ "$a" = "$b" ] && ok "completion greedy answer equal: [$a]" ||
  bad "completion answer: gguf [$a] folder [$b]"
a2=$(sed -E 's/\[PAD[0-9]+\]//g' <<<"$a")
[ -n "$a2" ] && [ "$a2" = "$b" ] && ok "completion equal with the [PAD<id>] texts removed" ||
  bad "completion differs beyond the fillers: gguf [$a2] folder [$b]"
a=$(field "$T/gguf.tok" "j['tokens']"); b=$(field "$T/dir.tok" "j['tokens']")
[ -n "$a" ] && [ "$a" = "$b" ] && ok "/tokenize equal: $a" || bad "/tokenize: gguf [$a] folder [$b]"
[ $fail = 0 ] && echo "gguf_serve: all passed"
check_exit
