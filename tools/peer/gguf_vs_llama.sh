#!/bin/bash
# Dev check, outside CI (needs the peer llama.cpp of ../shared/peer/RECIPE.sh and
# tools/peer/build.sh): cllm and llama.cpp on the same GGUF files. A random Qwen3.5-MoE model
# (hidden 256, 2 K / 4 V heads of 64, MTP, the Qwen vocabulary) is converted by tools/ref/gguf_np.py
# into F32, Q8_0, Q4_0 and a Q4_K/Q6_K mix. llama.cpp rounds activations to 8 bits for quantized
# matmuls, which this small random model amplifies to 1-14% of a logit, so each quantized file is
# also compared with llama.cpp on an F32 GGUF of that file's exact weights (gguf_to_ref_dir ->
# hf_to_gguf F32): that is the same arithmetic cllm does. Prints max |diff| / max |logit| per row.
#   PEER_DIR=/work/peer tools/peer/gguf_vs_llama.sh
set -euo pipefail
: "${PEER_DIR:?set PEER_DIR}"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CLLM=${CLLM:-$SRC/build/cllm} LL=$PEER_DIR/llama_logits PY=/usr/bin/python3
VOC=$PEER_DIR/llama.cpp-src/models/ggml-vocab-qwen35.gguf
T=$(mktemp -d /tmp/gguf_vs_llama.XXXXXX)
[ -x "$LL" ] || PEER_DIR=$PEER_DIR "$SRC/tools/peer/build.sh" >/dev/null
$PY - "$SRC/configs/tiny-mtp.json" "$T/cfg.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); t = c.get("text_config", c)
t.update(vocab_size=151936, eos_token_id=151645, hidden_size=256, moe_intermediate_size=256,
         shared_expert_intermediate_size=256, linear_key_head_dim=64, linear_value_head_dim=64,
         head_dim=64)  # llama.cpp's qwen35moe takes key and value head dims equal
json.dump(c, open(sys.argv[2], "w"))
PY
"$CLLM" synth -c "$T/cfg.json" --dtype f32 -q "$T/hf"
$PY - "$SRC/tools/ref" "$T" "$VOC" <<'PY'
import sys; sys.path.insert(0, sys.argv[1]); import gguf_np as G
T, V = sys.argv[2], sys.argv[3]
keep = lambda n: "norm" in n or n.endswith("ssm_a") or "bias" in n or "conv1d" in n or "gate_inp" in n
mixes = {"f32": lambda n: G.F32, "q8_0": lambda n: G.F32 if keep(n) else G.Q8_0,
         "q4_0": lambda n: G.F32 if keep(n) else G.Q4_0,
         "q4k_q6k": lambda n: G.F32 if keep(n) else (G.Q6_K if "ffn_down" in n or n.startswith("output.") else G.Q4_K)}
for m, ty in mixes.items():
    G.hf_to_gguf(f"{T}/hf", f"{T}/{m}.gguf", type_of=ty, vocab_gguf=V)
    if m != "f32":
        G.gguf_to_ref_dir(f"{T}/{m}.gguf", f"{T}/{m}.w")
        G.hf_to_gguf(f"{T}/{m}.w", f"{T}/{m}.w.gguf", type_of=lambda n: G.F32, vocab_gguf=V)
PY
IDS=1,5,9,200,33,77,450,3,8,100,101,102,103,7,6,5,4,3,2,1
for m in f32 q8_0 q4_0 q4k_q6k; do
  "$LL" "$T/$m.gguf" $IDS "$T/$m.ll" >/dev/null 2>&1
  [ -f "$T/$m.w.gguf" ] && "$LL" "$T/$m.w.gguf" $IDS "$T/$m.w.ll" >/dev/null 2>&1
  CLLM_ACT16=float "$CLLM" eval "$T/$m.gguf" --tokens $IDS --dump-logits "$T/$m.cf" >/dev/null 2>&1
  "$CLLM" eval "$T/$m.gguf" --tokens $IDS --dump-logits "$T/$m.ci" >/dev/null 2>&1
  $PY - "$T" "$m" <<'PY'
import sys, os, numpy as np
T, m = sys.argv[1:3]
ld = lambda p: np.fromfile(p, np.float32).reshape(20, -1)
def rel(a, b): return (np.abs(a - b).max(axis=1) / np.abs(a).max(axis=1)).max()
ll = ld(f"{T}/{m}.ll"); cf, ci = ld(f"{T}/{m}.cf"), ld(f"{T}/{m}.ci")
line = f"{m:8s} vs llama.cpp on the file: cllm float acts {rel(ll, cf):.3g}, int16 codes {rel(ll, ci):.3g}"
if os.path.exists(f"{T}/{m}.w.ll"):
    w = ld(f"{T}/{m}.w.ll")
    line += f"; vs llama.cpp on F32 of its weights: cllm {rel(w, cf):.3g} / {rel(w, ci):.3g}, llama.cpp on the file {rel(w, ll):.3g}"
print(line)
PY
done
rm -rf "$T"
