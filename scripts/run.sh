#!/usr/bin/env bash
# The README's main job: installs dependencies, builds, and serves the embedded tiny model
# (models/tiny, a Qwen3.5-MoE trained on public-domain text) on http://127.0.0.1:8000 with the
# OpenAI-compatible API. Extra arguments go to `cllm serve` (e.g. --port 8080 --host 0.0.0.0).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
echo "serving models/tiny on http://127.0.0.1:8000 — try:"
echo "  curl localhost:8000/v1/chat/completions -H 'Content-Type: application/json' \\"
echo "       -d '{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"Continue: In the beginning\"}]}'"
exec build/cllm serve models/tiny "$@"
