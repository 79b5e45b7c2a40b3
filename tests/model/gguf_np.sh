#!/bin/bash
# Self-test of tools/ref/gguf_np.py, the numpy GGUF writer/reader, ggml block formats and
# qwen35moe converter the GGUF loader tests compare against (tools/ref/test_gguf_np.py:
# block decoders vs a scalar transliteration of ggml's dequantize_row_*, quantize round trips,
# container and split-file round trips, hf_to_gguf -> gguf_to_hf_arrays -> ref_forward).
# Run by ctest with CLLM_SRC; exit 77 (skipped) without /usr/bin/python3 + numpy.
set -u
SRC=${CLLM_SRC:?}
PY=/usr/bin/python3
if ! $PY -c 'import numpy' 2>/dev/null; then
  echo "SKIP: no /usr/bin/python3 with numpy" >&2; exit 77
fi
exec $PY "$SRC/tools/ref/test_gguf_np.py"
