# Sourced by e2e scripts that need a running `cllm serve` on a tiny random-weight model with the
# embedded tokenizer (models/tiny). Needs BIN, SRC, T. Sets U (base URL), KEY, H (auth header),
# SPID; the server is stopped on exit.
tiny_model() { # tiny_model DIR: the tiny config with a vocabulary large enough for models/tiny's tokenizer
  sed 's/"vocab_size": 512/"vocab_size": 4096/' "$SRC/configs/tiny.json" >"$T/tiny.json"
  "$BIN" synth --config "$T/tiny.json" "$1" --dtype f32 --tokenizer "$SRC/models/tiny" -q
}
start_serve() { # start_serve MODEL [serve flags]: waits for /health 200 (30 s), 1 when it does not come up
  local model=$1; shift
  local try
  for try in 1 2 3 4 5; do # a random port another test holds: pick another one
    PORT=$((20000 + RANDOM % 12000)) KEY=sk-e2e
    H="Authorization: Bearer $KEY" U="http://127.0.0.1:$PORT"
    "$BIN" serve "$model" --port $PORT --api-key $KEY --served-model-name tiny --max-model-len 4096 \
      --kv-cache-memory 64MiB --threads 2 "$@" >"$T/serve.log" 2>&1 &
    SPID=$!
    trap 'kill $SPID 2>/dev/null; wait $SPID 2>/dev/null' EXIT
    for _ in $(seq 300); do
      [ "$(curl -s -o /dev/null -w '%{http_code}' $U/health)" = 200 ] && return 0
      kill -0 $SPID 2>/dev/null || break
      sleep 0.1
    done
    kill -0 $SPID 2>/dev/null || ! grep -q "address already in use" "$T/serve.log" || continue
    break
  done
  echo "server did not become ready:" >&2
  cat "$T/serve.log" >&2
  return 1
}
