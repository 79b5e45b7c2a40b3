#!/usr/bin/env bash
# GPTQ calibration in groups of layers (--gptq-mem): a budget that forces one layer per
# calibration pass gives exactly the bytes of the single-pass run (every group is calibrated on
# the 16-bit model's activations), with and without experts falling back to RTN; a budget smaller
# than one layer's Hessians splits the layer across passes (same bytes again); a budget smaller
# than one Hessian is a clear error before anything is written.
set -u
BIN=${CLLM_BIN:?} SRC=${CLLM_SRC:?}
T=${CLLM_TMP:-/tmp}/quant_gptq_layers
PY=/usr/bin/python3
rm -rf "$T" && mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
expect_rc 0 "synth" "$BIN" synth -q --config "$SRC/configs/tiny.json" --seed 3 --dtype f32 "$T/fp"
$PY -c "import random; random.seed(7); print(' '.join(str(random.randrange(512)) for _ in range(1024)))" > "$T/calib.ids"
Q=("$BIN" quantize -q -g 32 --method gptq --calib "$T/calib.ids" --calib-samples 4 --calib-seq-len 64)
for mb in 4:350k 70:180k; do
  m=${mb%%:*} b=${mb#*:}
  expect_rc 0 "one pass (min tokens $m)" "${Q[@]}" --min-expert-tokens $m "$T/fp" "$T/all$m"
  grep -q "1 calibration pass " "$T/out" && ok "plan: 1 pass" || { bad "plan 1 pass"; cat "$T/out"; }
  expect_rc 0 "one layer per pass (min tokens $m)" "${Q[@]}" --min-expert-tokens $m --gptq-mem $b "$T/fp" "$T/grp$m"
  grep -q "4 calibration passes (up to 1 layer," "$T/out" && ok "plan: 4 passes of 1 layer" || { bad "plan 4 passes"; cat "$T/out"; }
  grep -q "4 calibration passes, Hessians peak" "$T/out" && ok "ran 4 passes" || { bad "summary"; cat "$T/out"; }
  cmp -s "$T/all$m/model.safetensors" "$T/grp$m/model.safetensors" && ok "same bytes grouped vs one pass" || bad "grouped output differs (min tokens $m)"
done
grep -q "(52 gptq, 70 rtn; 69 experts and 1 other" "$T/out" && ok "fallback experts counted in grouped run" || { bad "fallback count"; cat "$T/out"; }
expect_rc 0 "one thread" "${Q[@]}" --min-expert-tokens 4 -t 1 "$T/fp" "$T/t1"
expect_rc 0 "three threads" "${Q[@]}" --min-expert-tokens 4 -t 3 "$T/fp" "$T/t3"
cmp -s "$T/t1/model.safetensors" "$T/t3/model.safetensors" && ok "same bytes on 1 and 3 threads" || bad "thread count changes bytes"
expect_rc 0 "two layers per pass" "${Q[@]}" --min-expert-tokens 4 --gptq-mem 650k "$T/fp" "$T/grp2"
grep -q "2 calibration passes (up to 2 layers," "$T/out" && ok "plan: 2 passes of 2 layers" || { bad "plan 2 passes"; cat "$T/out"; }
cmp -s "$T/all4/model.safetensors" "$T/grp2/model.safetensors" && ok "same bytes, 2 layers per pass" || bad "2-layer groups differ"
expect_rc 0 "budget below one layer: layers split" "${Q[@]}" --min-expert-tokens 4 --gptq-mem 100k "$T/fp" "$T/split"
grep -q "16 calibration passes (up to 1 layer, .* at once, 4 layers split across passes)" "$T/out" && ok "plan: 16 passes, layers split" || { bad "plan split"; cat "$T/out"; }
cmp -s "$T/all4/model.safetensors" "$T/split/model.safetensors" && ok "same bytes, layers split across passes" || bad "split layers differ"
# 12 layers: groups run in layer order (natural name order: layers.9 before layers.10), so each
# pass resumes from the previous group's residuals; still the single-pass bytes.
$PY - "$SRC/configs/tiny.json" "$T/cfg12.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); t = c.get("text_config", c)
t["num_hidden_layers"] = 12
t["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(12)]
json.dump(c, open(sys.argv[2], "w"))
PYEOF
expect_rc 0 "synth 12 layers" "$BIN" synth -q --config "$T/cfg12.json" --seed 3 --dtype f32 "$T/fp12"
expect_rc 0 "12 layers, one pass" "${Q[@]}" --min-expert-tokens 4 "$T/fp12" "$T/l12a"
expect_rc 0 "12 layers, one layer per pass" "${Q[@]}" --min-expert-tokens 4 --gptq-mem 350k "$T/fp12" "$T/l12b"
grep -q "12 calibration passes (up to 1 layer," "$T/out" && ok "plan: 12 passes" || { bad "plan 12 passes"; cat "$T/out"; }
cmp -s "$T/l12a/model.safetensors" "$T/l12b/model.safetensors" && ok "12 layers: same bytes" || bad "12 layers: grouped output differs"
$PY - "$T/l12b/model.safetensors" <<'PYEOF' && ok "quantized tensors in layer order (9 before 10)" || bad "tensor order"
import json, re, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]
h = json.loads(f.read(n)); h.pop("__metadata__", None)
layers = [int(re.search(r"layers\.(\d+)\.", k).group(1)) for k, v in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0]) if k.endswith(".qweight") and re.search(r"layers\.(\d+)\.", k)]
sys.exit(0 if layers == sorted(layers) and layers[-1] == 11 else 1)
PYEOF
expect_rc 1 "budget below one Hessian" "${Q[@]}" --gptq-mem 10k "$T/fp" "$T/small"
grep -q -- "--gptq-mem 10.0 kB: model.language_model.layers.0.* alone needs .* of Hessians" "$T/out" && ok "error names the linear and sizes" || { bad "budget error text"; cat "$T/out"; }
[ ! -e "$T/small" ] && ! ls -d "$T"/small.tmp-* >/dev/null 2>&1 && ok "nothing written" || bad "output left behind"
expect_rc 2 "bad --gptq-mem" "${Q[@]}" --gptq-mem lots "$T/fp" "$T/bad"
check_exit
