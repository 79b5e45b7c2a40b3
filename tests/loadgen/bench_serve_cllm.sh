#!/usr/bin/env bash
# bench-serve and doctor end to end against the real `cllm serve` on a synthetic tiny model
# (digits-only prompts: the tiny model's vocabulary is 512 ids). Skips (exit 77, ctest shows it skipped) when
# this build has no `serve` command yet.
set -u
. "$CLLM_SRC/tests/lib/check.sh"
T=$CLLM_TMP
mkdir -p "$CLLM_TMP"
if ! "$CLLM_BIN" serve --help >/dev/null 2>&1; then echo "SKIP: no cllm serve in this build"; exit 77; fi
M="$CLLM_TMP/bs_tiny"
"$CLLM_BIN" synth --config "$CLLM_SRC/configs/tiny.json" --tokenizer "$CLLM_SRC/models/tiny" -q "$M" || exit 1
PORT=$(( 20000 + RANDOM % 12000 ))
"$CLLM_BIN" serve "$M" --port $PORT --threads 1 --kv-cache-memory 64MiB > "$CLLM_TMP/bs_serve.log" 2>&1 &
SP=$!
trap 'kill $SP 2>/dev/null; wait $SP 2>/dev/null' EXIT
for i in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  sleep 0.2
done
out=$("$CLLM_BIN" bench-serve --url "http://127.0.0.1:$PORT" --dataset-path "$CLLM_SRC/tests/data/bench/digits.jsonl" \
      --num-prompts 16 --max-concurrency 4 --num-warmups 1 --ignore-eos -q --save-result "$CLLM_TMP/bs_cllm.json")
expect_eq bench-rc "$?" 0
echo "$out"
expect_eq successful "$(echo "$out" | grep '^Successful requests:' | awk '{print $3}')" 16
expect_eq generated "$(echo "$out" | grep '^Total generated tokens:' | awk '{print $4}')" 256
"$CLLM_BIN" doctor --url "http://127.0.0.1:$PORT" --log "$CLLM_TMP/bs_serve.log" --window 0.3 > "$CLLM_TMP/bs_doctor.out"
expect_eq doctor-rc "$?" 0
cat "$CLLM_TMP/bs_doctor.out"
expect_eq doctor-slots "$(grep -c 'OK    state_slots' "$CLLM_TMP/bs_doctor.out")" 1
check_exit
