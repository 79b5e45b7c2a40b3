#!/usr/bin/env bash
# compressed-tensors pack-quantized and GPTQ v2 loading, end to end on a synth tiny Qwen3.5-MoE.
# tools/ref/ct_writer.py (numpy, independent of the C code) quantizes the fp model into
# compressed-tensors checkpoints — strategy group and channel, symmetric and asymmetric (with
# zero points stored 0, i.e. zero point -8: the sign-flip path), F16 and BF16 scales, a W8A16
# lm_head, trivial weight_g_idx — and writes the same model dequantized to F32 from the stored
# codes. For each: `cllm verify` prints OK, and cllm's logits equal
#   (a) tools/ref/ref_forward.py (float64 numpy forward) on the dequantized model:
#       max |cllm - ref| <= 2e-5 * max(1, max |ref|) (observed <= 1.2e-6 relative: fp32 vs float64),
#   (b) cllm on the dequantized F32 model: same tolerance.
# GPTQ v2 (GPTQModel "gptq_v2", zeros stored as z): a v1 file rewritten as v2 gives bitwise the
# same logits; an asymmetric v2 file with zero 0 matches its numpy dequantization.
# Bad input (unsupported strategy/actorder/type/format, wrong weight_shape, scale shape, packed
# size, F32 scales, zero-point shape, act-order g_idx, fused 3-D quantized experts, truncated
# file) fails with a message naming the key or tensor, exit status 1 or 2, never a crash; verify
# flags a "sym": true GPTQ file whose stored zeros are not the symmetric ones.
set -u
BIN=${CLLM_BIN:?} SRC=${CLLM_SRC:?}
T=${CLLM_TMP:-/tmp}/quant_ct
PY=/usr/bin/python3
export CLLM_SRC="$SRC"
W="$SRC/tools/ref/ct_writer.py"
rm -rf "$T" && mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
if ! $PY -c 'import numpy' 2>/dev/null; then echo "SKIP: no numpy for $PY"; exit 77; fi
# The weight decoding is checked on float activations (exact against the dequantized model); the
# default int16 activation codes (kernels.h qact16) add their own rounding, checked once below.
export CLLM_ACT16=float
TOK=$($PY -c "print(','.join(str((i*37+5)%512) for i in range(40)))")
cat > "$T/cmp.py" <<'PYEOF'
import sys, numpy as np
c = np.fromfile(sys.argv[1], dtype=np.float32); r = np.fromfile(sys.argv[2], dtype=np.float32)
if c.shape != r.shape or c.size == 0: print("shape mismatch", c.shape, r.shape); sys.exit(1)
if not np.all(np.isfinite(c)): print("non-finite logits"); sys.exit(1)
d = float(np.abs(c - r).max()); m = float(np.abs(r).max()); tol = 2e-5 * max(1.0, m)
print("  %s: max abs err %.3g (max |ref| %.3g, tol %.3g)" % (sys.argv[3], d, m, tol))
sys.exit(0 if d <= tol else 1)
PYEOF
# check_model NAME DIR DQ: verify OK, cllm(DIR) vs ref(DQ) and vs cllm(DQ)
check_model() {
  local n=$1 d=$2 dq=$3
  "$BIN" verify --full "$d" >"$T/out" 2>&1 && grep -q "^OK" "$T/out" && ok "$n: verify OK" ||
    { bad "$n: verify"; cat "$T/out"; }
  "$BIN" eval "$d" --tokens "$TOK" --dump-logits "$T/$n.c" >"$T/out" 2>&1 || { bad "$n: eval"; cat "$T/out"; return; }
  "$BIN" eval "$dq" --tokens "$TOK" --dump-logits "$T/$n.d" >/dev/null 2>&1 || { bad "$n: eval dq"; return; }
  $PY "$SRC/tools/ref/ref_forward.py" "$dq" --tokens "$TOK" --out "$T/$n.r" >/dev/null 2>&1 || { bad "$n: ref"; return; }
  $PY "$T/cmp.py" "$T/$n.c" "$T/$n.r" "$n vs numpy ref" && ok "$n == numpy dequant + float64 forward" || bad "$n vs ref"
  $PY "$T/cmp.py" "$T/$n.c" "$T/$n.d" "$n vs cllm on dequantized f32" && ok "$n == cllm on dequantized" || bad "$n vs dq"
}
"$BIN" synth -q --config "$SRC/configs/tiny.json" --seed 5 --dtype f32 "$T/fp" || { bad synth; exit 1; }
Z0=model.language_model.layers.1.mlp.experts.3.up_proj
for v in "gsym --strategy group" \
         "gasym --strategy group --asym --scale-dtype BF16 --zero0 $Z0" \
         "csym --strategy channel --g-idx" \
         "casym --strategy channel --asym --zero0 $Z0" \
         "casym8 --strategy channel --asym --bits 8 --scale-dtype BF16 --zero0 $Z0" \
         "gsym8 --strategy group --group 16 --bits 8"; do
  set -- $v; n=$1; shift
  $PY "$W" ct "$T/fp" "$T/$n" "$T/$n-dq" "$@" >"$T/out" 2>&1 || { bad "writer $n"; cat "$T/out"; continue; }
  sed 's/^/  /' "$T/out"
  check_model "$n" "$T/$n" "$T/$n-dq"
done
# int16 activation codes on one of them: within the code rounding (observed ~8e-5 relative)
CLLM_ACT16=int "$BIN" eval "$T/gasym" --tokens "$TOK" --dump-logits "$T/gasym.i" >/dev/null 2>&1 &&
  $PY - "$T/gasym.i" "$T/gasym.r" <<'PYEOF' && ok "gasym int16 activations within 1e-3 of ref" || bad "gasym int16 activations vs ref"
import sys, numpy as np
c = np.fromfile(sys.argv[1], dtype=np.float32); r = np.fromfile(sys.argv[2], dtype=np.float32)
d = float(np.abs(c - r).max()); m = float(np.abs(r).max())
print("  gasym int16 vs numpy ref: max abs err %.3g (max |ref| %.3g)" % (d, m))
sys.exit(0 if c.shape == r.shape and 0 < d <= 1e-3 * max(1.0, m) else 1)
PYEOF
# the zero-0 path really ran: some stored zero points are 0 in the asymmetric files
for n in gasym casym casym8; do
  $PY - "$T/$n" "$Z0" <<'PYEOF' && ok "$n has zero points stored 0 ($Z0)" || bad "$n: no zero-0 case"
import os, sys; sys.path.insert(0, os.environ["CLLM_SRC"] + "/tools/ref")
import numpy as np, safetensors_np as S
m = S.SafetensorsModel(sys.argv[1]); z = m.get(sys.argv[2] + ".weight_zero_point").view(np.uint32)
b = 32 * m.shape(sys.argv[2] + ".weight_packed")[1] // m.get(sys.argv[2] + ".weight_shape")[1]
u = np.stack([(z >> (b * j)) & ((1 << b) - 1) for j in range(32 // b)], 1)
sys.exit(0 if (u == 0).any() else 1)
PYEOF
done
grep -q '"strategy": "channel"' "$T/csym/config.json" && grep -q '"group_size": null' "$T/csym/config.json" &&
  ok "channel config as llm-compressor writes it (group_size null)" || bad "channel config"

# GPTQ v2: v1 -> v2 rewrite gives the same model bitwise; asymmetric v2 with a zero of 0
"$BIN" quantize -q -g 32 "$T/fp" "$T/q4" >/dev/null 2>&1 || bad "quantize q4"
"$BIN" quantize -q -g 32 --asym "$T/fp" "$T/q4a" >/dev/null 2>&1 || bad "quantize q4a"
$PY "$W" gptq-v2 "$T/q4" "$T/v2" "$T/v2-dq" >/dev/null || bad "writer v2"
h1=$("$BIN" eval "$T/q4" --tokens "$TOK" --logits-hash 2>&1); h2=$("$BIN" eval "$T/v2" --tokens "$TOK" --logits-hash 2>&1)
[ -n "$h1" ] && [ "$h1" = "$h2" ] && ok "gptq_v2 file == its v1 original bitwise" || bad "gptq_v2 hash '$h1' vs '$h2'"
$PY "$W" gptq-v2 "$T/q4a" "$T/v2a" "$T/v2a-dq" --zero0 "$Z0" >/dev/null || bad "writer v2a"
check_model v2asym0 "$T/v2a" "$T/v2a-dq"
h3=$("$BIN" eval "$T/v2a" --tokens "$TOK" --logits-hash 2>&1); h4=$("$BIN" eval "$T/q4a" --tokens "$TOK" --logits-hash 2>&1)
[ "$h3" != "$h4" ] && ok "zero 0 changed the model (the edit is not a no-op)" || bad "v2a zero0 edit had no effect"

# ---- bad input: each is a copy of gsym (or casym) with one thing broken ----
# expect_fail NAME PATTERN DIR: eval and verify both fail (rc 1/2), message matches PATTERN
expect_fail() {
  local n=$1 pat=$2 d=$3 rc
  "$BIN" eval "$d" --tokens "$TOK" --logits-hash >"$T/out" 2>&1; rc=$?
  if { [ $rc = 1 ] || [ $rc = 2 ]; } && grep -q -- "$pat" "$T/out"; then ok "$n: refused (rc $rc): $(grep -m1 -- "$pat" "$T/out" | cut -c1-150)"
  else bad "$n: eval rc $rc, want 1/2 and /$pat/"; cat "$T/out"; fi
  "$BIN" verify "$d" >"$T/out" 2>&1; rc=$?
  if [ $rc -lt 128 ] && grep -q FAILED "$T/out" && grep -q -- "problem: .*$pat" "$T/out"; then ok "$n: verify names it"
  else bad "$n: verify rc $rc"; cat "$T/out"; fi
}
cat > "$T/mut.py" <<'PYEOF'
# mut.py DIR OP ARGS: edit a checkpoint copy in place (config key, or one tensor replaced)
import json, os, sys
sys.path.insert(0, os.environ["CLLM_SRC"] + "/tools/ref")
import numpy as np, safetensors_np as S
d, op = sys.argv[1], sys.argv[2]
if op == "cfg":  # cfg JSON_PATH VALUE (path: a/b/c into quantization_config)
    p = os.path.join(d, "config.json"); c = json.load(open(p)); x = c["quantization_config"]
    keys = sys.argv[3].split("/")
    for k in keys[:-1]: x = x[k]
    x[keys[-1]] = json.loads(sys.argv[4]); json.dump(c, open(p, "w")); sys.exit(0)
m = S.SafetensorsModel(d); f = m.files["model.safetensors"]
t = {k: f.raw(k).copy() for k in f.keys()}; dt = {k: f.dtype(k) for k in f.keys()}
for k in t:
    if dt[k] == "BF16": t[k] = S.bf16_to_f32(t[k])
name = sys.argv[3]
if op == "set":      # set NAME PYEXPR(x) -> new array (x = the old one)
    t[name] = eval(sys.argv[4], {"np": np, "x": t[name]})
elif op == "f32":    # store NAME as F32
    t[name] = t[name].astype(np.float32); dt[name] = "F32"
elif op == "add":    # add NAME PYEXPR: a new tensor
    t[name] = eval(sys.argv[4], {"np": np, "t": t})
elif op == "del":
    del t[name]
if name in t and t[name].dtype.kind == "f" and dt.get(name, "F32") == "F32": dt[name] = "F32"
S.write_safetensors(os.path.join(d, "model.safetensors"), t,
                    dtypes={k: v for k, v in dt.items() if v in ("F16", "BF16", "F32")})
PYEOF
E=model.language_model.layers.0.mlp.experts.2.down_proj
mkc() { local n=$1 src=$2; shift 2; rm -rf "$T/$n"; cp -r "$T/$src" "$T/$n"; $PY "$T/mut.py" "$T/$n" "$@" || bad "mut $n"; }
mkc s_block gsym cfg config_groups/group_0/weights/strategy '"block"'
expect_fail "strategy block" 'group_0: weights strategy "block" is not supported' "$T/s_block"
mkc s_tensor gsym cfg config_groups/group_0/weights/strategy '"tensor"'
expect_fail "strategy tensor" 'weights strategy "tensor" is not supported' "$T/s_tensor"
mkc s_ao gsym cfg config_groups/group_0/weights/actorder '"group"'
expect_fail "actorder group" "actorder 'group'" "$T/s_ao"
mkc s_fp8 gsym cfg config_groups/group_1/weights '{"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true, "dynamic": false}'
expect_fail "float8 weights" "group_1: weights type 'float' is not supported" "$T/s_fp8"
mkc s_b3 gsym cfg config_groups/group_0/weights/num_bits 3
expect_fail "3-bit" "weights.num_bits 3 is not supported" "$T/s_b3"
mkc s_dyn gsym cfg config_groups/group_0/weights/dynamic true
expect_fail "dynamic weights" "dynamic weight quantization is not supported" "$T/s_dyn"
mkc s_act gsym cfg config_groups/group_0/input_activations '{"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true}'
expect_fail "W4A8 activations" "only int weight-only" "$T/s_act"
mkc s_tr gsym cfg transform_config '{"config_groups": {}}'
expect_fail "transform_config" "transform_config" "$T/s_tr"
mkc s_nvfp4 gsym cfg format '"nvfp4-pack-quantized"'
$PY "$T/mut.py" "$T/s_nvfp4" cfg config_groups/group_0/format '"nvfp4-pack-quantized"'
expect_fail "nvfp4 format" "format 'nvfp4-pack-quantized' is not supported" "$T/s_nvfp4"
mkc g_fmt q4 cfg checkpoint_format '"marlin"'
expect_fail "gptq marlin format" "gptq checkpoint format 'marlin' is not supported" "$T/g_fmt"
mkc t_shape gsym set $E.weight_shape 'np.array([64, 40], np.int64)'
expect_fail "wrong weight_shape" "$E.weight_shape: I64 \[2\] holds \[64, 40\], expected \[64, 32\]" "$T/t_shape"
mkc t_scale gsym set $E.weight_scale 'np.ones((64, 3), np.float16)'
expect_fail "scale shape" "$E.weight_scale: shape \[64, 3\], expected \[64, K/group\]" "$T/t_scale"
mkc t_scale2 gsym set $E.weight_scale 'np.ones((56, 1), np.float16)'
expect_fail "scale rows" "$E.weight_scale: shape \[56, 1\]" "$T/t_scale2"
mkc t_f32 gsym f32 $E.weight_scale
expect_fail "F32 scales" "$E.weight_scale: dtype F32 not supported" "$T/t_f32"
mkc t_packed gsym set $E.weight_packed 'x[:, :3].copy()'
expect_fail "packed size" "$E.weight_packed: I32 \[64, 3\] does not match" "$T/t_packed"
mkc t_packed8 gsym set $E.weight_packed 'x.astype(np.int64)'
expect_fail "packed dtype" "$E.weight_packed: I64" "$T/t_packed8"
mkc t_zp casym set $E.weight_zero_point 'x[:4].copy()'
expect_fail "zero-point shape" "$E.weight_zero_point: I32 \[4, 1\], expected I32 \[8, 1\]" "$T/t_zp"
mkc t_nosc gsym del $E.weight_scale
expect_fail "scale missing" "$E.weight_scale missing" "$T/t_nosc"
mkc t_gidx csym set $E.weight_g_idx 'np.eye(1, 32, 5, dtype=np.int32)[0]'
expect_fail "act-order g_idx" "$E.weight_g_idx: g_idx\[5\] = 1, not 0" "$T/t_gidx"
F=model.language_model.layers.0.mlp.experts
mkc t_fused gsym add $F.gate_up_proj.weight_packed 'np.zeros((8, 64, 8), np.int32)'
expect_fail "fused 3-D experts" "tensor $F.gate_up_proj.weight_packed: fused 3-D quantized experts are not supported" "$T/t_fused"
# "sym": true GPTQ with a non-symmetric stored zero: vLLM's gptq_marlin would ignore qzeros, cllm
# reads them; verify flags the file (v1 expects 7, v2 expects 8: the v2 file above verifies OK)
"$BIN" verify "$T/v2" >"$T/out" 2>&1 && grep -q "^OK" "$T/out" && ok "gptq_v2 sym zeros (8) verify OK" || { bad "verify v2"; cat "$T/out"; }
mkc g_symz q4 set $E.qzeros 'np.where(np.arange(x.size).reshape(x.shape) == 3, np.int32(-2004318072), x).astype(np.int32)'
"$BIN" verify "$T/g_symz" >"$T/out" 2>&1
grep -q "problem: tensor $E.qzeros: stored zero 8 at (group 0, output 24) but quantization_config.sym is true (expected 7)" "$T/out" &&
  grep -q FAILED "$T/out" && ok "verify: sym file with zero 8 flagged" || { bad "verify sym zeros"; cat "$T/out"; }
# truncated file: the loader reports it, nothing crashes
rm -rf "$T/t_trunc"; cp -r "$T/gsym" "$T/t_trunc"
truncate -s -1000 "$T/t_trunc/model.safetensors"
"$BIN" eval "$T/t_trunc" --tokens "$TOK" --logits-hash >"$T/out" 2>&1; rc=$?
{ [ $rc = 1 ] || [ $rc = 2 ]; } && grep -qi "model.safetensors" "$T/out" && ok "truncated file refused (rc $rc): $(head -c 150 "$T/out")" ||
  { bad "truncated: rc $rc"; cat "$T/out"; }
"$BIN" verify "$T/t_trunc" >"$T/out" 2>&1; rc=$?
[ $rc -lt 128 ] && ok "verify truncated: rc $rc, no crash" || bad "verify truncated crashed ($rc)"
check_exit
