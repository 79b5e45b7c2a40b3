#!/usr/bin/env bash
# The README's main job: installs dependencies, builds, and serves the embedded tiny model
# (models/tiny, a Qwen3.5-MoE trained on public-domain text) on http://127.0.0.1:8000 (or what
# --host / --port say) with the OpenAI-compatible API. Extra arguments go to `cllm serve` (e.g.
# --port 8080 --host 0.0.0.0); the curl hint printed first follows them.
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
exec build/cllm serve models/tiny "$@"
