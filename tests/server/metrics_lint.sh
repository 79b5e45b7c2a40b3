#!/usr/bin/env bash
# /metrics after some traffic passes `promtool check metrics`, except its lint on the ':' in vLLM's
# metric names (what vLLM dashboards key on). Skipped (exit 77) without promtool
# (apt-get install prometheus).
set -u
. "$CLLM_SRC/tests/lib/check.sh"
BIN=$CLLM_BIN SRC=$CLLM_SRC
T=${CLLM_TMP:-/tmp}/metrics_lint
rm -rf "$T" && mkdir -p "$T"
command -v promtool >/dev/null || { echo "SKIP: no promtool (apt-get install prometheus)"; exit 77; }
. "$SRC/tests/lib/serve.sh"
tiny_model "$T/model" || { bad "synth"; exit 1; }
start_serve "$T/model" || exit 1
expect_rc 0 "completion" curl -sf -H "$H" $U/v1/completions -d '{"prompt":"Hello","max_tokens":4}'
expect_rc 0 "chat stream" curl -sfN -H "$H" $U/v1/chat/completions \
  -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}'
curl -s $U/metrics >"$T/metrics.txt"
grep -q '^vllm:generation_tokens_total' "$T/metrics.txt" && ok "metrics served" || bad "no metrics"
promtool check metrics <"$T/metrics.txt" >"$T/lint" 2>&1
# vLLM names its tokens-per-step histogram vllm:iteration_tokens_total; promtool's "_total" lint on
# that one name is vLLM's too, so it is allowed like the colons
grep -q '^vllm:iteration_tokens_total_count{[^}]*} [1-9]' "$T/metrics.txt" && ok "tokens per engine step counted" ||
  bad "vllm:iteration_tokens_total not counted"
if grep -v '^vllm:[a-z0-9_]* metric names should not contain .:.$' "$T/lint" |
  grep -v '^vllm:iteration_tokens_total non-counter metrics should not have "_total" suffix$' | grep .; then
  bad "promtool check metrics"
else
  ok "promtool check metrics (vLLM's ':' names aside)"
fi
check_exit
