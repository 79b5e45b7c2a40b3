#!/usr/bin/env bash
# `cllm synth --scheme`: a random-weight checkpoint written directly in the GPTQ layout (no 16-bit
# intermediate) verifies, loads and runs a forward pass; the tensors `cllm quantize` keeps 16-bit
# stay float; same seed, same bytes; shapes the layout cannot pack are refused before any write.
set -u
. "$CLLM_SRC/tests/lib/check.sh"
BIN=$CLLM_BIN SRC=$CLLM_SRC
T=${CLLM_TMP:-/tmp}/synth_w4a16
rm -rf "$T" && mkdir -p "$T"

for spec in "tiny:w4a16:32:int8" "small:w4a16:32:int8" "tiny-moe:w8a16:16:bf16" "tiny-qwen3-moe:w4a8:16:bf16"; do
  IFS=: read -r cfg scheme g lm <<<"$spec"
  d="$T/$cfg-$scheme"
  expect_rc 0 "synth $cfg --scheme $scheme" "$BIN" synth -q --config "$SRC/configs/$cfg.json" \
    --scheme "$scheme" --group-size "$g" --lm-head "$lm" --seed 5 "$d"
  expect_rc 0 "verify $cfg $scheme" "$BIN" verify "$d"
  expect_rc 0 "forward $cfg $scheme" "$BIN" generate "$d" --tokens 1,2,3,4 -n 4 --temperature 0 --ids
done
d="$T/small-w4a16"
grep -q '"quant_method": "gptq"' "$d/config.json" && ok "quantization_config written" ||
  bad "no quantization_config"
grep -q '"cllm_scheme": "w4a16"' "$d/config.json" && ok "scheme recorded" || bad "scheme missing"
# the header names the GPTQ parts and keeps the embeddings and norms 16-bit
/usr/bin/python3 - "$d/model.safetensors" <<'PY' && ok "GPTQ parts and kept tensors" || bad "tensor set"
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
q = [k for k in h if k.endswith(".qweight")]
assert q and all(k[:-8] + s in h for k in q for s in (".qzeros", ".scales", ".g_idx")), "parts"
assert not any(k.endswith("_proj.weight") for k in h), "float projection left"
assert h["lm_head.qweight"]["dtype"] == "I32"
assert any("embed_tokens.weight" in k and h[k]["dtype"] == "BF16" for k in h), "embeddings"
assert any(k.endswith("norm.weight") for k in h), "norms"
PY
"$BIN" synth -q --config "$SRC/configs/small.json" --scheme w4a16 --group-size 32 --seed 5 "$T/again"
cmp -s "$d/model.safetensors" "$T/again/model.safetensors" && ok "same seed same bytes" ||
  bad "not deterministic"
# refusals: fused quantized experts, a group that does not divide K (nothing written)
expect_rc 1 "fused experts refused" "$BIN" synth -q --config "$SRC/configs/tiny-moe.json" \
  --scheme w4a16 --experts fused "$T/fused"
grep -q "per expert" "$T/out" && ok "fused refusal named" || bad "fused refusal text"
expect_rc 1 "group not dividing K" "$BIN" synth -q --config "$SRC/configs/tiny-moe.json" \
  --scheme w4a16 --group-size 1024 "$T/g1024"
grep -q "does not divide in_features" "$T/out" && ok "group refusal named" || bad "group text"
[ ! -e "$T/g1024" ] && ok "nothing written on refusal" || bad "refused synth left $T/g1024"
expect_rc 2 "unknown scheme" "$BIN" synth --config x --scheme w3a16 "$T/x"
check_exit
