#!/usr/bin/env bash
# The README's main job: installs dependencies, builds, and serves the embedded tiny model
# (models/tiny, a Qwen3.5-MoE trained on public-domain text) on http://127.0.0.1:8000 (or what
# --host / --port say) with the OpenAI-compatible API. Extra arguments go to `cllm serve` (e.g.
# --port 8080 --host 0.0.0.0); the curl hint printed first follows them. Once the server is up it
# asks the model what models/tiny/sample.png says and prints the answer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
# the hint names what serve will use: the last --port / --host / --served-model-name / --api-key
# given, in either spelling cllm parses (--port 8080, --port=8080)
port=8000 host=127.0.0.1 name=tiny key= prev=
for a in "$@"; do
    case $prev in
    --port) port=$a ;; --host) host=$a ;; --served-model-name) name=$a ;; --api-key) key=$a ;;
    esac
    case $a in
    --port=*) port=${a#*=} ;; --host=*) host=${a#*=} ;; --served-model-name=*) name=${a#*=} ;;
    --api-key=*) key=${a#*=} ;;
    esac
    prev=$a
done
case $host in
0.0.0.0 | "" | :: | "[::]") url_host=localhost ;; # all addresses: this host answers on loopback
*:*) url_host="[$host]" ;;                         # IPv6 literal
*) url_host=$host ;;
esac
echo "serving models/tiny on http://$url_host:$port — try:"
echo "  curl $url_host:$port/v1/chat/completions -H 'Content-Type: application/json' \\"
[ -n "$key" ] && echo "       -H 'Authorization: Bearer <the --api-key>' \\"
echo "       -d '{\"model\":\"$name\",\"messages\":[{\"role\":\"user\",\"content\":\"Continue: In the beginning\"}]}'"
build/cllm serve models/tiny "$@" &
pid=$!
trap 'kill $pid 2>/dev/null' INT TERM
# Once it is up: one question about the shipped sample image (models/tiny has a small trained
# vision tower, models/tiny/MODEL_CARD.md "Vision tower"), sent as a data: URL.
if command -v curl >/dev/null && command -v python3 >/dev/null; then
    for _ in $(seq 600); do
        curl -sf -o /dev/null "http://$url_host:$port/health" && break
        kill -0 $pid 2>/dev/null || break
        sleep 0.1
    done
    auth=()
    [ -n "$key" ] && auth=(-H "Authorization: Bearer $key")
    body='{"model": "'$name'", "temperature": 0, "max_tokens": 24, "messages": [{"role": "user",
  "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,'$(base64 -w0 models/tiny/sample.png)'"}},
              {"type": "text", "text": "What does this image say?"}]}]}'
    answer=$(curl -s "http://$url_host:$port/v1/chat/completions" "${auth[@]}" \
        -H 'Content-Type: application/json' -d "$body" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"].strip())' 2>/dev/null) ||
        answer="(no answer: the server did not come up or refused the request)"
    echo "models/tiny/sample.png: \"What does this image say?\" -> $answer"
fi
wait $pid
