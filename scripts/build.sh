#!/usr/bin/env bash
# Configures and builds cllm into build/ (Release, -Werror). Extra args go to cmake configure.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCLLM_WERROR=ON "$@" >/dev/null
cmake --build build -j"$(nproc)"
