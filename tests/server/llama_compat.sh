#!/bin/bash
# A llama.cpp user's habits against `cllm serve` (models/tiny, real engine):
#  - llama-server's launch flags as aliases: -m MODEL -c N -np N -t N --host --port;
#  - `curl -s /health | grep -q healthy` (the deployment's daily inspection script) and
#    llama-server's {"status":"ok"}; 503 bodies never say healthy;
#  - POST /completion: content / stop / stop_type / stopping_word / tokens_predicted / timings,
#    a stop word from the engine, n_predict -1 running to an end token or the context, streaming
#    as data: objects without [DONE], the same text streamed as returned whole; n_probs and
#    return_tokens;
#  - /props reports -c and -np; /slots one entry per -np place; /v1/models/{id}.
set -u
T=${CLLM_TMP:-/tmp}/llama_compat
rm -rf "$T"
mkdir -p "$T"
source "$CLLM_SRC/tests/lib/check.sh"
command -v curl > /dev/null || exit 77
M="$CLLM_SRC/models/tiny"
PORT=$((20000 + RANDOM % 12000))
U="http://127.0.0.1:$PORT"
"$CLLM_BIN" serve -m "$M" -c 1024 -np 3 -t 1 --host 127.0.0.1 --port $PORT \
    --kv-cache-memory 16MiB --stats-interval 0 > "$T/serve.log" 2>&1 &
SPID=$!
trap 'kill $SPID 2>/dev/null' EXIT
up=0
for _ in $(seq 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' $U/health)" = 200 ] && { up=1; break; }
    kill -0 $SPID 2> /dev/null || break
    sleep 0.1
done
[ $up = 1 ] && ok "serve -m -c -np -t --host --port is ready" || { bad "not ready"; cat "$T/serve.log"; exit 1; }

curl -s $U/health | grep -q healthy && ok "curl -s /health | grep -q healthy" || bad "health body lacks healthy"
expect_eq "/health body" "$(curl -s $U/health)" '{"status":"ok","health":"healthy"}'

props=$(curl -s $U/props)
echo "$props" | grep -q '"n_ctx":1024' && echo "$props" | grep -q '"total_slots":3' &&
    ok "/props: n_ctx from -c, total_slots from -np" || bad "props: $props"
n=$(curl -s $U/slots | grep -o '"is_processing"' | wc -l)
expect_eq "/slots: one entry per -np place" "$n" 3
code=$(curl -s -o "$T/m.json" -w '%{http_code}' $U/v1/models/tiny)
[ "$code" = 200 ] && grep -q '"id":"tiny"' "$T/m.json" && ok "/v1/models/tiny" || bad "models/tiny: $code $(cat "$T/m.json")"

# greedy text, then a stop word taken from inside it
body=$(curl -s $U/completion -d '{"prompt":"Once upon a time","n_predict":16,"temperature":0}')
text=$(echo "$body" | sed 's/^{"index":0,"content":"\([^"]*\)".*/\1/')
echo "$body" | grep -q '"stop":true' && echo "$body" | grep -q '"tokens_predicted":16' &&
    echo "$body" | grep -q '"stop_type":"limit"' && echo "$body" | grep -q '"predicted_per_second":' &&
    ok "/completion: content, stop, tokens_predicted, stop_type limit, timings" || bad "completion: $body"
word=$(echo "$text" | awk '{print $3}')
if [ -n "$word" ]; then
    b2=$(curl -s $U/completion -d "{\"prompt\":\"Once upon a time\",\"n_predict\":16,\"temperature\":0,\"stop\":[\"$word\"]}")
    echo "$b2" | grep -q "\"stop_type\":\"word\",\"stopping_word\":\"$word\"" &&
        ! echo "$b2" | sed 's/"generation_settings".*//' | grep -q "\"content\":\"[^\"]*$word" &&
        ok "stop word '$word': stop_type word, not in content" || bad "stop word '$word': $b2"
else
    bad "no third word in '$text'"
fi
b3=$(curl -s $U/completion -d '{"prompt":"Once upon a time","temperature":0,"ignore_eos":false}')
echo "$b3" | grep -qE '"stop_type":"(eos|limit)"' && ok "n_predict -1 ends at an end token or the context" ||
    bad "n_predict -1: $b3"

b4=$(curl -s $U/completion -d '{"prompt":"Once upon a time","n_predict":5,"temperature":0,"n_probs":2,"return_tokens":true}')
np=$(echo "$b4" | grep -o '"top_logprobs":\[' | wc -l)
echo "$b4" | grep -q '"tokens":\[[0-9]*,[0-9]*,[0-9]*,[0-9]*,[0-9]*\]' && [ "$np" = 5 ] &&
    ok "n_probs 2, return_tokens: 5 ids, 5 completion_probabilities" || bad "n_probs: $b4"

# streaming: data: objects, a final stop:true object, no [DONE]; the same text as whole
curl -sN $U/completion -d '{"prompt":"Once upon a time","n_predict":16,"temperature":0,"stream":true}' > "$T/stream.txt"
grep -q '^data: {"index":0,"content":' "$T/stream.txt" && grep -q '"stop":true' "$T/stream.txt" &&
    ! grep -q 'DONE' "$T/stream.txt" && ok "stream: data objects, final stop:true, no [DONE]" ||
    { bad "stream shape"; cat "$T/stream.txt"; }
joined=$(grep '"stop":false' "$T/stream.txt" | sed 's/^data: {"index":0,"content":"\([^"]*\)".*/\1/' | tr -d '\n')
expect_eq "streamed text == whole text" "$joined" "$text"

kill -TERM $SPID
wait $SPID
check_exit
