#!/bin/bash
# End to end: `cllm serve` on a tiny random-weight model (synth) with the real engine and
# tokenizer. curl for /health, /generate, /tokenize, /detokenize, bad input; client disconnect
# frees the request; SIGTERM drains and exits 0; JSON logs. The OpenAI SDK suites are
# tests/server/server_sdk.sh, the promtool lint tests/server/metrics_lint.sh (each skips visibly).
set -u
BIN=${CLLM_BIN:-build/cllm}
SRC=${CLLM_SRC:-.}
TMP=${CLLM_TMP:-/tmp}/server_e2e
rm -rf "$TMP"
mkdir -p "$TMP"
T=$TMP
. "$SRC/tests/lib/check.sh"

if "$BIN" serve --help | grep -q -- "--max-num-queued-reqs"; then ok "serve --help"; else bad "serve --help"; fi
if ! "$BIN" serve 2> /dev/null; then ok "serve without MODEL is a usage error"; else bad "serve without MODEL is a usage error"; fi

# the tiny config with a vocabulary large enough for models/tiny's tokenizer (4007 ids)
sed 's/"vocab_size": 512/"vocab_size": 4096/' "$SRC/configs/tiny.json" > "$TMP/tiny.json"
"$BIN" synth --config "$TMP/tiny.json" "$TMP/model" --dtype f32 --tokenizer "$SRC/models/tiny" -q || {
    echo "synth failed" >&2
    exit 1
}

PORT=$((20000 + RANDOM % 12000))
KEY=sk-e2e
H="Authorization: Bearer $KEY"
U="http://127.0.0.1:$PORT"
NSTART=0
start_server() {
    NSTART=$((NSTART + 1))
    "$BIN" --log-format json serve "$TMP/model" --port $PORT --api-key $KEY --served-model-name tiny \
        --max-model-len 4096 --kv-cache-memory 64MiB --threads 2 --stats-interval 1 "$@" > "$TMP/server$NSTART.log" 2>&1 &
    SPID=$!
    for _ in $(seq 300); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' $U/health)" = 200 ] && return 0
        kill -0 $SPID 2> /dev/null || break
        sleep 0.1
    done
    echo "server did not become ready:" >&2
    cat "$TMP/server$NSTART.log" >&2
    return 1
}
start_server || exit 1

# --- curl: basics ---
if [ "$(curl -s -o /dev/null -w "%{http_code}" $U/v1/models)" = 401 ]; then ok "models without key"; else bad "models without key"; fi
if curl -s -H "$H" $U/v1/models | grep -q "\"id\":\"tiny\""; then ok "models"; else bad "models"; fi
if curl -s $U/version | grep -q "\"version\""; then ok "version"; else bad "version"; fi
out=$(curl -s -H "$H" $U/generate -d '{"prompt":"Hello there","max_tokens":8,"temperature":0}')
if echo "$out" | grep -q "^{\"text\":\[\"Hello there"; then ok "generate: $out"; else bad "generate: $out"; fi
out=$(curl -sN -H "$H" $U/generate -d '{"prompt":"Hello there","max_tokens":4,"stream":true,"temperature":0}')
if [ "$(echo "$out" | grep -c "^{\"text\":\[\"Hello there")" -ge 3 ]; then ok "generate stream: $out"; else bad "generate stream: $out"; fi
tok=$(curl -s -H "$H" $U/tokenize -d '{"prompt":"Hello world, again"}')
ids=$(echo "$tok" | sed 's/.*"tokens":\(\[[^]]*\]\).*/\1/')
if echo "$tok" | grep -q "\"count\":"; then ok "tokenize: $tok"; else bad "tokenize: $tok"; fi
if curl -s -H "$H" $U/detokenize -d "{\"tokens\":$ids}" | grep -q "\"prompt\":\"Hello world, again\""; then ok "detokenize round trip ($ids)"; else bad "detokenize round trip ($ids)"; fi
out=$(curl -s -H "$H" $U/v1/completions -d '{"prompt":"hi","max_tokens":5000}')
if echo "$out" | grep -q "This model.s maximum context length is 4096 tokens. However, you requested 5000 output tokens"; then ok "over-length: $out"; else bad "over-length: $out"; fi
if [ "$(curl -s -o /dev/null -w "%{http_code}" -H "$H" $U/v1/completions -d "{\"prompt\":")" = 400 ]; then ok "malformed json"; else bad "malformed json"; fi
if [ "$(curl -s -o /dev/null -w "%{http_code}" -H "$H" $U/v1/completions -d "{\"model\":\"x\",\"prompt\":\"a\"}")" = 404 ]; then ok "unknown model"; else bad "unknown model"; fi
a=$(curl -s -H "$H" $U/v1/completions -d '{"prompt":"Once upon","max_tokens":20,"temperature":0}' | sed 's/"id":"[^"]*"//; s/"created":[0-9]*//')
b=$(curl -s -H "$H" $U/v1/completions -d '{"prompt":"Once upon","max_tokens":20,"temperature":0}' | sed 's/"id":"[^"]*"//; s/"created":[0-9]*//')
if [ "$a" = "$b" ]; then ok "greedy completions differ: $a / $b"; else bad "greedy completions differ: $a / $b"; fi
out=$(curl -s -H "$H" $U/v1/completions -d '{"prompt":"Hello","max_tokens":3,"temperature":0,"logprobs":2,"n":2}')
if echo "$out" | grep -q "\"index\":1,\"text\":" && echo "$out" | grep -q "\"token_logprobs\":\[-"; then ok "n=2 with logprobs: $out"; else bad "n=2 with logprobs: $out"; fi
a=$(curl -s -H "$H" $U/v1/completions -d '{"prompt":"Hello","max_tokens":6,"temperature":0.8,"seed":3}' | sed 's/"id":"[^"]*"//; s/"created":[0-9]*//')
b=$(curl -s -H "$H" $U/v1/completions -d '{"prompt":"Hello","max_tokens":6,"temperature":0.8,"seed":3}' | sed 's/"id":"[^"]*"//; s/"created":[0-9]*//')
if [ "$a" = "$b" ]; then ok "seeded sampling differs: $a / $b"; else bad "seeded sampling differs: $a / $b"; fi
out=$(curl -sN -H "$H" $U/v1/chat/completions -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}')
if echo "$out" | head -1 | grep -q "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}"; then ok "chat stream role chunk"; else bad "chat stream role chunk"; fi
if echo "$out" | grep -q "\"choices\":\[\],\"usage\":{\"prompt_tokens\":"; then ok "chat stream usage chunk"; else bad "chat stream usage chunk"; fi
if [ "$(echo "$out" | tail -1)" = "data: [DONE]" ]; then ok "chat stream [DONE]"; else bad "chat stream [DONE]"; fi

# (the OpenAI Node SDK suites: tests/server/server_sdk.sh, which exits 77 without node)

# --- client disconnect: the request is aborted and its slot freed ---
curl -sN -H "$H" $U/v1/completions -d '{"prompt":"Long story","max_tokens":4000,"ignore_eos":true,"stream":true}' | head -c 300 > /dev/null
for _ in $(seq 50); do
    m=$(curl -s $U/metrics)
    echo "$m" | grep -q '^vllm:num_requests_running{[^}]*} 0$' && break
    sleep 0.1
done
if echo "$m" | grep -q "^cllm_requests_cancelled_on_disconnect_total{[^}]*} 1$"; then ok "disconnect counted"; else bad "disconnect counted"; fi
if echo "$m" | grep -q "^vllm:request_success_total{[^}]*finished_reason=\"abort\"} 1$"; then ok "disconnect aborted in the engine"; else bad "disconnect aborted in the engine"; fi
if echo "$m" | grep -q "^vllm:num_requests_running{[^}]*} 0$"; then ok "running back to 0"; else bad "running back to 0"; fi
if echo "$m" | grep -q "^cllm_state_slots_used{[^}]*} 0$"; then ok "state slot freed"; else bad "state slot freed"; fi
if echo "$m" | grep -q "^cllm_requests_in_flight{[^}]*} 0$"; then ok "nothing in flight"; else bad "nothing in flight"; fi
# non-streaming: the connection is suspended while it waits; the server's watch notices the hang-up
curl -s -m 0.5 -H "$H" $U/v1/completions -d '{"prompt":"Long story","max_tokens":4000,"ignore_eos":true}' > /dev/null
for _ in $(seq 50); do
    m=$(curl -s $U/metrics)
    echo "$m" | grep -q '^vllm:num_requests_running{[^}]*} 0$' && break
    sleep 0.1
done
if echo "$m" | grep -q "^cllm_requests_cancelled_on_disconnect_total{[^}]*} 2$"; then ok "non-stream disconnect counted"; else bad "non-stream disconnect counted"; fi
if echo "$m" | grep -q "^vllm:request_success_total{[^}]*finished_reason=\"abort\"} 2$"; then ok "non-stream disconnect aborted"; else bad "non-stream disconnect aborted"; fi
if echo "$m" | grep -q "^cllm_state_slots_used{[^}]*} 0$"; then ok "state slot freed (non-stream)"; else bad "state slot freed (non-stream)"; fi
echo "$m" > "$TMP/metrics.txt"
# (promtool on /metrics: tests/server/metrics_lint.sh, which exits 77 without promtool)
if grep -q "^vllm:generation_tokens_total{model_name=\"tiny\",engine=\"0\"} [1-9]" "$TMP/metrics.txt"; then ok "generation tokens counted"; else bad "generation tokens counted"; fi

# --- logs: JSON lines, access log, periodic stats line ---
if grep -q "^{\"ts\":\"[^\"]*\",\"level\":\"INFO\",\"msg\":\"access: 127.0.0.1 \\\\\"POST /v1/completions\\\\\" 200" "$TMP/server1.log"; then ok "json access log"; else bad "json access log"; fi
# the stats line comes every --stats-interval 1 s: a run that got here sooner waits for it (5 s)
stats_re="Avg prompt throughput: .* tokens/s, Avg generation throughput: .*Running: .* reqs, Waiting: .* reqs, KV cache usage: .*Prefix cache hit rate"
for _ in $(seq 50); do grep -q "$stats_re" "$TMP/server1.log" && break; sleep 0.1; done
if grep -q "$stats_re" "$TMP/server1.log"; then ok "stats line"; else bad "stats line"; fi
if ! grep -v "^{\"ts\":" "$TMP/server1.log" | grep .; then ok "every log line is JSON"; else bad "every log line is JSON"; fi

# --- SIGTERM: in-flight stream finishes, new requests get 503, exit 0 ---
curl -sN -H "$H" $U/v1/completions -d '{"prompt":"Drain me","max_tokens":400,"ignore_eos":true,"stream":true}' > "$TMP/drain.out" &
CPID=$!
for _ in $(seq 100); do [ -s "$TMP/drain.out" ] && break; sleep 0.02; done
kill -TERM $SPID
sleep 0.05
code=$(curl -s -o /dev/null -w '%{http_code}' $U/health)
if [ "$code" = 503 ] || [ "$code" = 000 ]; then ok "health while draining: $code"; else bad "health while draining: $code"; fi
wait $CPID
wait $SPID
rc=$?
if [ $rc = 0 ]; then ok "server exit status after SIGTERM: $rc"; else bad "server exit status after SIGTERM: $rc"; fi
if grep -q "\"finish_reason\":\"length\"" "$TMP/drain.out" && tail -2 "$TMP/drain.out" | grep -q "^data: \[DONE\]$"; then ok "in-flight stream finished during drain"; else bad "in-flight stream finished during drain"; fi
if grep -q "shut down cleanly (0 request(s) cancelled)" "$TMP/server1.log"; then ok "clean shutdown line"; else bad "clean shutdown line"; fi

# --- --shutdown-timeout 0 aborts in-flight requests and still exits 0 ---
start_server --shutdown-timeout 0 || exit 1
curl -sN -H "$H" $U/v1/completions -d '{"prompt":"Abort me","max_tokens":4000,"ignore_eos":true,"stream":true}' > "$TMP/abort.out" &
CPID=$!
for _ in $(seq 100); do [ -s "$TMP/abort.out" ] && break; sleep 0.02; done
kill -INT $SPID
wait $CPID
wait $SPID
rc=$?
if [ $rc = 0 ]; then ok "exit status after SIGINT with --shutdown-timeout 0: $rc"; else bad "exit status after SIGINT with --shutdown-timeout 0: $rc"; fi
if grep -q "\"finish_reason\":\"abort\"" "$TMP/abort.out" && grep -q "^data: \[DONE\]$" "$TMP/abort.out"; then ok "aborted stream ends with abort + [DONE]"; else bad "aborted stream ends with abort + [DONE]"; fi

check_exit
