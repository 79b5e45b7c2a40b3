#!/usr/bin/env bash
# `cllm generate` samples through the engine's sampler: the same prompt, sampling parameters and
# seed give the same text from `cllm generate` as from a `cllm serve` request (models/tiny, fp32
# KV on both sides, so the logits are the same bits). Also: two seeds differ, greedy is unchanged.
set -u
. "$CLLM_SRC/tests/lib/check.sh"
BIN=$CLLM_BIN SRC=$CLLM_SRC M=$CLLM_SRC/models/tiny
T=${CLLM_TMP:-/tmp}/generate_serve_seed
rm -rf "$T" && mkdir -p "$T"
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }

PORT=$((20000 + RANDOM % 12000))
U="http://127.0.0.1:$PORT"
"$BIN" serve "$M" --port $PORT --threads 2 --kv-cache-dtype fp32 --kv-cache-memory 64MiB \
  >"$T/server.log" 2>&1 &
SPID=$!
trap 'kill $SPID 2>/dev/null; wait $SPID 2>/dev/null' EXIT
for _ in $(seq 300); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' $U/health)" = 200 ] && break
  kill -0 $SPID 2>/dev/null || break
  sleep 0.1
done
[ "$(curl -s -o /dev/null -w '%{http_code}' $U/health)" = 200 ] || {
  bad "server did not start"; cat "$T/server.log"; exit 1; }

PROMPT="And God said"
# serve TEMP TOP_K TOP_P MIN_P REP PRES FREQ SEED -> the completion's text
serve() {
  curl -s $U/v1/completions -d "{\"prompt\":\"$PROMPT\",\"max_tokens\":24,\"temperature\":$1,
    \"top_k\":$2,\"top_p\":$3,\"min_p\":$4,\"repetition_penalty\":$5,\"presence_penalty\":$6,
    \"frequency_penalty\":$7,\"seed\":$8}" |
    /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'
}
gen() {
  "$BIN" generate "$M" -p "$PROMPT" -n 24 --threads 2 --temperature $1 --top-k $2 --top-p $3 \
    --min-p $4 --repetition-penalty $5 --presence-penalty $6 --frequency-penalty $7 --seed $8 \
    2>/dev/null
}
for args in "0.8 0 1 0 1 0 0 1" "0.8 0 1 0 1 0 0 2" "1.0 20 0.8 0 1 0 0 7" "0.7 40 0.95 0.05 1.1 0.5 0.2 123" \
  "1.3 0 1 0 1 0 0 99" "0 0 1 0 1 0 0 5"; do
  a=$(serve $args) b=$(gen $args)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "same text for ($args)" ||
    bad "($args): serve '$a' vs generate '$b'"
done
[ "$(gen 0.8 0 1 0 1 0 0 1)" != "$(gen 0.8 0 1 0 1 0 0 2)" ] && ok "seeds 1 and 2 differ" ||
  bad "seed has no effect"
check_exit
