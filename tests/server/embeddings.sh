#!/usr/bin/env bash
# /v1/embeddings on the embedded trained tiny model (models/tiny) with the real engine:
# tests/data/http/e2e/embeddings.cjs (the vector is the lm_head's input at the last token, checked
# against `cllm eval --dump-logits`; normalisation, batches, cache hits, base64, the OpenAI SDK).
# Skipped (exit 77) without node.
set -u
. "$CLLM_SRC/tests/lib/check.sh"
BIN=$CLLM_BIN SRC=$CLLM_SRC
T=${CLLM_TMP:-/tmp}/embeddings
rm -rf "$T" && mkdir -p "$T"
command -v node >/dev/null || { echo "SKIP: node missing"; exit 77; }
. "$SRC/tests/lib/serve.sh"
start_serve "$SRC/models/tiny" || exit 1
expect_rc 0 "embeddings vs the checkpoint's lm_head and cllm eval" env NODE_PATH="$SRC/node_modules" \
  timeout 300 node "$SRC/tests/data/http/e2e/embeddings.cjs" $PORT $KEY tiny "$BIN" "$SRC/models/tiny" "$T"
tail -n 1 "$T/out"
check_exit
