#!/usr/bin/env bash
# The official OpenAI Node SDK against `cllm serve` (tests/data/http/e2e/openai_sdk.cjs: completions
# and chat, streaming and not, thinking on/off, tools, 32 concurrent greedy streams == sequential,
# typed errors; openai_sdk_vllm.cjs: batches, stop_reason, responses). Skipped (exit 77) without
# node or node_modules/openai (npm ci at the repo root).
set -u
. "$CLLM_SRC/tests/lib/check.sh"
BIN=$CLLM_BIN SRC=$CLLM_SRC
T=${CLLM_TMP:-/tmp}/server_sdk
rm -rf "$T" && mkdir -p "$T"
command -v node >/dev/null && [ -d "$SRC/node_modules/openai" ] ||
  { echo "SKIP: node or node_modules/openai missing (npm ci at the repo root)"; exit 77; }
. "$SRC/tests/lib/serve.sh"
tiny_model "$T/model" || { bad "synth"; exit 1; }
start_serve "$T/model" || exit 1
for suite in openai_sdk openai_sdk_vllm; do
  expect_rc 0 "$suite.cjs" env NODE_PATH="$SRC/node_modules" timeout 120 \
    node "$SRC/tests/data/http/e2e/$suite.cjs" $PORT $KEY tiny
  tail -n 1 "$T/out"
done
check_exit
