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
fail=0
ok()  { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
run() { # run RC DESC CMD...
  local want=$1 desc=$2; shift 2
  "$@" >"$T/out" 2>&1; local rc=$?
  if [ "$rc" = "$want" ]; then ok "$desc (rc $rc)"; else bad "$desc: rc $rc, want $want"; cat "$T/out"; fi
}
run 0 "synth" "$BIN" synth -q --config "$SRC/configs/tiny.json" --seed 3 --dtype f32 "$T/fp"
$PY -c "import random; random.seed(7); print(' '.join(str(random.randrange(512)) for _ in range(1024)))" > "$T/calib.ids"
Q=("$BIN" quantize -q -g 32 --method gptq --calib "$T/calib.ids" --calib-samples 4 --calib-seq-len 64)
for mb in 4:350k 70:180k; do
  m=${mb%%:*} b=${mb#*:}
  run 0 "one pass (min tokens $m)" "${Q[@]}" --min-expert-tokens $m "$T/fp" "$T/all$m"
  grep -q "1 calibration pass " "$T/out" && ok "plan: 1 pass" || { bad "plan 1 pass"; cat "$T/out"; }
  run 0 "one layer per pass (min tokens $m)" "${Q[@]}" --min-expert-tokens $m --gptq-mem $b "$T/fp" "$T/grp$m"
  grep -q "4 calibration passes (up to 1 layer," "$T/out" && ok "plan: 4 passes of 1 layer" || { bad "plan 4 passes"; cat "$T/out"; }
  grep -q "4 calibration passes, Hessians peak" "$T/out" && ok "ran 4 passes" || { bad "summary"; cat "$T/out"; }
  cmp -s "$T/all$m/model.safetensors" "$T/grp$m/model.safetensors" && ok "same bytes grouped vs one pass" || bad "grouped output differs (min tokens $m)"
done
grep -q "(52 gptq, 70 rtn; 69 experts and 1 other" "$T/out" && ok "fallback experts counted in grouped run" || { bad "fallback count"; cat "$T/out"; }
run 0 "one thread" "${Q[@]}" --min-expert-tokens 4 -t 1 "$T/fp" "$T/t1"
run 0 "three threads" "${Q[@]}" --min-expert-tokens 4 -t 3 "$T/fp" "$T/t3"
cmp -s "$T/t1/model.safetensors" "$T/t3/model.safetensors" && ok "same bytes on 1 and 3 threads" || bad "thread count changes bytes"
run 0 "two layers per pass" "${Q[@]}" --min-expert-tokens 4 --gptq-mem 650k "$T/fp" "$T/grp2"
grep -q "2 calibration passes (up to 2 layers," "$T/out" && ok "plan: 2 passes of 2 layers" || { bad "plan 2 passes"; cat "$T/out"; }
cmp -s "$T/all4/model.safetensors" "$T/grp2/model.safetensors" && ok "same bytes, 2 layers per pass" || bad "2-layer groups differ"
run 0 "budget below one layer: layers split" "${Q[@]}" --min-expert-tokens 4 --gptq-mem 100k "$T/fp" "$T/split"
grep -q "16 calibration passes (up to 1 layer, .* at once, 4 layers split across passes)" "$T/out" && ok "plan: 16 passes, layers split" || { bad "plan split"; cat "$T/out"; }
cmp -s "$T/all4/model.safetensors" "$T/split/model.safetensors" && ok "same bytes, layers split across passes" || bad "split layers differ"
run 1 "budget below one Hessian" "${Q[@]}" --gptq-mem 10k "$T/fp" "$T/small"
grep -q -- "--gptq-mem 10.0 kB: model.language_model.layers.0.* alone needs .* of Hessians" "$T/out" && ok "error names the linear and sizes" || { bad "budget error text"; cat "$T/out"; }
[ ! -e "$T/small" ] && ! ls -d "$T"/small.tmp-* >/dev/null 2>&1 && ok "nothing written" || bad "output left behind"
run 2 "bad --gptq-mem" "${Q[@]}" --gptq-mem lots "$T/fp" "$T/bad"
exit $fail
