#!/bin/bash
# Builds tools/peer/llama_logits against the peer llama.cpp of ../shared/peer/RECIPE.sh (PEER_DIR).
set -euo pipefail
: "${PEER_DIR:?set PEER_DIR (the folder RECIPE.sh built llama.cpp in)}"
HERE=$(cd "$(dirname "$0")" && pwd)
S=$PEER_DIR/llama.cpp-src
gcc -O2 -o "$PEER_DIR/llama_logits" "$HERE/llama_logits.c" -I"$S/include" -I"$S/ggml/include" \
  -L"$S/build/bin" -lllama -Wl,-rpath,"$S/build/bin"
echo "$PEER_DIR/llama_logits"
