#!/usr/bin/env bash
# lm-evaluation-harness's local-completions loglikelihood / loglikelihood_rolling requests
# (tests/data/http/e2e/lm_eval_local_completions.cjs) against `cllm serve` on the embedded trained
# tiny model (models/tiny), each number checked against `cllm eval --logprobs` on the same token
# ids: 100 requests, equal to 1e-5; the OpenAI SDK's shapes for echo and prompt_logprobs when
# node_modules/openai is there. Skipped (exit 77) without node.
set -u
. "$CLLM_SRC/tests/lib/check.sh"
BIN=$CLLM_BIN SRC=$CLLM_SRC
T=${CLLM_TMP:-/tmp}/lm_eval
rm -rf "$T" && mkdir -p "$T"
command -v node >/dev/null || { echo "SKIP: node missing"; exit 77; }
. "$SRC/tests/lib/serve.sh"
start_serve "$SRC/models/tiny" || exit 1
expect_rc 0 "lm-eval local-completions client, 100 requests vs cllm eval" timeout 600 \
  env NODE_PATH="$SRC/node_modules" node "$SRC/tests/data/http/e2e/lm_eval_local_completions.cjs" $PORT $KEY tiny "$BIN" "$SRC/models/tiny" \
  "$SRC/docs/architecture.md" 100
tail -n 1 "$T/out"
check_exit
