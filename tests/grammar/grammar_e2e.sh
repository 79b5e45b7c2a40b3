#!/bin/bash
# Structured outputs end to end: `cllm serve` on models/tiny (the trained tiny model and its
# tokenizer) driven by tests/grammar/grammar_e2e.cjs (official OpenAI SDK, ajv, the draft-4 JSON
# Schema Test Suite + tests/data/grammar/api_schemas.json). Skipped (77) without node or the npm
# packages (npm ci).
set -u
BIN=${CLLM_BIN:-build/cllm}
SRC=${CLLM_SRC:-.}
T=${CLLM_TMP:-/tmp}/grammar_e2e
mkdir -p "$T"
command -v node > /dev/null || exit 77
for p in openai ajv ajv-draft-04 ajv-formats json-schema-test-suite; do
    [ -d "$SRC/node_modules/$p" ] || { echo "npm package $p missing (npm ci)"; exit 77; }
done
PORT=$((20000 + RANDOM % 12000))
"$BIN" serve "$SRC/models/tiny" --port $PORT --served-model-name tiny --threads 2 \
    --max-model-len 2048 --kv-cache-memory 128MiB > "$T/server.log" 2>&1 &
SPID=$!
trap 'kill $SPID 2> /dev/null; wait $SPID 2> /dev/null' EXIT
for _ in $(seq 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:$PORT/health)" = 200 ] && break
    kill -0 $SPID 2> /dev/null || { cat "$T/server.log"; exit 1; }
    sleep 0.1
done
NODE_PATH="$SRC/node_modules" node "$SRC/tests/grammar/grammar_e2e.cjs" $PORT tiny
rc=$?
kill -0 $SPID 2> /dev/null || { echo "server died"; cat "$T/server.log"; rc=1; }
exit $rc
