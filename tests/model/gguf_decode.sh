#!/bin/bash
# ggml block decoding bitwise: cllm_gguf_row_f32 (src/model/gguf_quant.c) == tools/ref/gguf_np.py
# dequantize (from ggml's dequantize_row_*, itself checked against gguf-py, tools/ref/README.md)
# for every type cllm reads: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K IQ4_NL IQ4_XS.
# Per type, 37-row tensors of random blocks at fp16 scales 0.01, 1e-7 (subnormal), 3e4 (near the
# fp16 top; K-quant sub-scales multiply it), of fully random bytes (any fp16 field: NaN, inf,
# subnormal, negative), and of special scale bit patterns (+-0, smallest subnormal, largest
# subnormal, +-65504, +-inf, NaN) set in every fp16 field; F16/BF16 also as random bit patterns.
# python writes one GGUF and the expected float32 values; test_gguf_decode decodes each row and
# compares bit for bit (NaN == NaN). Exit 77 without /usr/bin/python3 + numpy.
set -u
BIN=${CLLM_BIN:?}; SRC=${CLLM_SRC:?}; T=${CLLM_TMP:-/tmp}/gguf_decode
PY=/usr/bin/python3
TB=$(dirname "$BIN")/test_gguf_decode
rm -rf "$T"; mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
if ! $PY -c 'import numpy' 2>/dev/null; then echo "SKIP: no /usr/bin/python3 with numpy" >&2; exit 77; fi
[ -x "$TB" ] || { bad "no test binary $TB"; exit 1; }
CLLM_SRC="$SRC" $PY - "$T/blocks.gguf" "$T/blocks.f32" <<'PYEOF' || { bad "python writer"; exit 1; }
import os, sys
sys.path.insert(0, os.environ["CLLM_SRC"] + "/tools/ref")
import numpy as np, gguf_np as G
rng = np.random.default_rng(33)
ROWS = 37
SPECIAL = [0x0000, 0x8000, 0x0001, 0x03ff, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00]
tensors, expect = [], []
def add(name, t, K, data):
    tensors.append(G.Tensor(name, t, [K, ROWS], data))
    expect.append(G.dequantize(data, ROWS, K, t).astype(np.float32).reshape(-1))
for t, tn in sorted(G.TYPE_NAMES.items()):
    bs, bb = G.BLOCK[t]
    K = 512 if bs == 256 else 96
    if bs == 1:
        add(f"{tn}.normal", t, K, G.random_blocks(t, ROWS, K, rng))
        add(f"{tn}.bits", t, K, rng.bytes(ROWS * K * bb))
        continue
    for s in (0.01, 1e-7, 3e4):
        add(f"{tn}.s{s:g}", t, K, G.random_blocks(t, ROWS, K, rng, scale=s))
    add(f"{tn}.bytes", t, K, rng.bytes(ROWS * (K // bs) * bb))
    d = np.frombuffer(bytearray(G.random_blocks(t, ROWS, K, rng)), np.uint8).reshape(-1, bb).copy()
    for i in range(d.shape[0]):
        for off in G._F16_FIELDS[t]:
            h = SPECIAL[(i + off) % len(SPECIAL)]
            d[i, off], d[i, off + 1] = h & 255, h >> 8
    add(f"{tn}.special", t, K, d.tobytes())
G.write_gguf(sys.argv[1], {"general.architecture": "none"}, tensors)
np.concatenate(expect).tofile(sys.argv[2])
print(f"{len(tensors)} tensors of {len(G.TYPE_NAMES)} types written")
PYEOF
if CLLM_GGUF_DECODE="$T/blocks.gguf" CLLM_GGUF_EXPECT="$T/blocks.f32" "$TB" >"$T/out" 2>&1; then
  cat "$T/out"; ok "every type decodes bitwise as gguf_np.dequantize"
else
  cat "$T/out"; bad "decoders differ from gguf_np.dequantize"
fi
# the comparison can fail: one flipped expected value is reported
$PY -c "
import numpy as np, sys; a = np.fromfile(sys.argv[1], np.float32); a[12345] = np.nextafter(a[12345], np.float32(np.inf)) if np.isfinite(a[12345]) else 1.0; a.tofile(sys.argv[2])
" "$T/blocks.f32" "$T/flip.f32"
CLLM_GGUF_DECODE="$T/blocks.gguf" CLLM_GGUF_EXPECT="$T/flip.f32" "$TB" >"$T/out" 2>&1 &&
  bad "a one-ulp change in the expected values went unnoticed" || ok "a one-ulp change is caught"
[ $fail = 0 ] && echo "gguf_decode: all passed"
check_exit
