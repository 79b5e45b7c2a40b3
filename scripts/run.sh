#!/usr/bin/env bash
# The README's main job: installs dependencies, builds, and runs cllm on the embedded model.
# Until the server lands this makes a synthetic tiny model, verifies it and (when the forward pass
# exists) generates from it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
M=build/tiny-synth
build/cllm synth -q --config configs/tiny.json --seed 1 "$M"
build/cllm verify "$M"
if build/cllm --help | grep -q "^  generate"; then
  build/cllm generate "$M" --tokens 1,2,3 -n 16 "$@"
fi
