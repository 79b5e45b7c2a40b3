#!/usr/bin/env bash
# Block-FP8 (quant_method "fp8") as `cllm quantize` input and AutoAWQ gemm checkpoints served, end
# to end on synth tiny Qwen3.5-MoE models (`cllm synth --layout fp8|awq`; AWQ also over HTTP), against
# tools/ref/awq_fp8_ref.py (numpy decoders written from the e4m3 spec and AutoAWQ's packing,
# independent of the C code):
#  - the numpy e4m3 decoder on all 256 codes (spec spot values; torch.float8_e4m3fn when present);
#  - FP8: `cllm quantize` (RTN W4A16) of the FP8 model writes bitwise the same qweight/qzeros/
#    scales as quantizing the numpy-dequantized F32 model, the output verifies, and its logits
#    equal those of the quantized F32 model (2e-5 relative); against the BF16 model the FP8 one
#    was drawn from (same seed; the FP8 adds e4m3 rounding, 0.046 rms relative on the logits),
#    fp8-w4 is no further than 1.25x bf16-w4's own distance (observed 0.113 vs 0.121 rms
#    relative) and within 0.25 rms of bf16-w4 (observed 0.132: int4 RTN of two nearby models on
#    a random tiny net); an FP8 weight kept by --keep comes out as BF16 equal to the numpy dequantization;
#  - AWQ: verify OK; numpy unpack + AutoAWQ-style repack gives the same words; cllm's logits
#    equal tools/ref/ref_forward.py on the numpy-dequantized model within quant_ct.sh's tolerance
#    (2e-5 * max(1, max |ref|)); some zeros are 0 (the sign-flip path of set_true_zero);
#  - compressed-tensors asymmetric group-128 int4 (the form AWQ models are often shipped in) on a
#    128-wide variant of the tiny config: same tolerance against the numpy reference;
#  - bad files fail with a message naming the key or tensor, exit 1 or 2, never a crash.
set -u
BIN=${CLLM_BIN:?} SRC=${CLLM_SRC:?}
T=${CLLM_TMP:-/tmp}/quant_fp8_awq
PY=/usr/bin/python3
R="$SRC/tools/ref/awq_fp8_ref.py"
rm -rf "$T" && mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
if ! $PY -c 'import numpy' 2>/dev/null; then echo "SKIP: no numpy for $PY"; exit 77; fi
export CLLM_ACT16=float CLLM_SRC="$SRC"
TOK=$($PY -c "print(','.join(str((i*37+5)%512) for i in range(40)))")
cat > "$T/cmp.py" <<'PYEOF'
import sys, numpy as np
c = np.fromfile(sys.argv[1], dtype=np.float32); r = np.fromfile(sys.argv[2], dtype=np.float32)
rel = float(sys.argv[4]) if len(sys.argv) > 4 else 2e-5
if c.shape != r.shape or c.size == 0: print("shape mismatch", c.shape, r.shape); sys.exit(1)
if not np.all(np.isfinite(c)): print("non-finite logits"); sys.exit(1)
d = float(np.abs(c - r).max()); m = float(np.abs(r).max()); tol = rel * max(1.0, m)
print("  %s: max abs err %.3g (max |ref| %.3g, tol %.3g)" % (sys.argv[3], d, m, tol))
sys.exit(0 if d <= tol else 1)
PYEOF
# mutate SRC DST NAME ACTION: a copy of SRC's model with tensor NAME changed (f32: stored F32;
# bf16: stored BF16; drop; rows: first dim one shorter; nan: first code 0x7f)
cat > "$T/mutate.py" <<'PYEOF'
import os, shutil, sys; sys.path.insert(0, os.environ["CLLM_SRC"] + "/tools/ref")
import numpy as np, safetensors_np as S
src, dst, name, act = sys.argv[1:5]
m = S.SafetensorsModel(src); out, dts = {}, {}
for k in m.keys():
    a = np.array(m.where[k].raw(k)); dt = m.dtype(k)
    if dt == "BF16": a = S.bf16_to_f32(a)
    dts[k] = dt
    if k == name:
        if act == "drop": continue
        if act == "f32": a, dts[k] = a.astype(np.float32), "F32"
        if act == "bf16": a, dts[k] = a.astype(np.float32), "BF16"
        if act == "rows": a = a[:-1]
        if act == "nan": a = a.copy(); a.flat[0] = 0x7f
    out[k] = a
shutil.rmtree(dst, ignore_errors=True); os.makedirs(dst)
shutil.copy(os.path.join(src, "config.json"), dst)
S.write_safetensors(os.path.join(dst, "model.safetensors"), out, dtypes=dts)
PYEOF
logits() { "$BIN" eval "$1" --tokens "$TOK" --dump-logits "$2" >"$T/out" 2>&1 || { cat "$T/out"; return 1; }; }
verify_ok() { "$BIN" verify --full "$1" >"$T/out" 2>&1 && grep -q "^OK" "$T/out" || { cat "$T/out"; return 1; }; }

$PY "$R" fp8-codes && ok "numpy e4m3 decoder" || bad "numpy e4m3 decoder"

# ---- FP8 -> cllm quantize
C="$SRC/configs/tiny.json"
"$BIN" synth -q --config "$C" --seed 5 --layout fp8 --group-size 32 "$T/fp8" || { bad "synth fp8"; exit 1; }
"$BIN" synth -q --config "$C" --seed 5 --experts per-expert "$T/bf16" || { bad "synth bf16"; exit 1; }
$PY "$R" fp8-dq "$T/fp8" "$T/fp8-dq" >/dev/null && ok "numpy fp8 dequantization" || bad "fp8-dq"
for m in fp8 fp8-dq bf16; do
  "$BIN" quantize -q -g 32 "$T/$m" "$T/$m-w4" >"$T/out" 2>&1 || { bad "quantize $m"; cat "$T/out"; }
done
verify_ok "$T/fp8-w4" && ok "quantized FP8 verifies" || bad "quantized FP8 verify"
$PY - "$T/fp8-w4" "$T/fp8-dq-w4" <<'PYEOF' && ok "FP8 -> W4A16 == numpy-dequantized -> W4A16 (bitwise codes, scales)" || bad "FP8 quantize differs from dequantized"
import os, sys; sys.path.insert(0, os.environ["CLLM_SRC"] + "/tools/ref")
import numpy as np, safetensors_np as S
a, b = S.SafetensorsModel(sys.argv[1]), S.SafetensorsModel(sys.argv[2])
ks = [k for k in a.keys() if k.endswith((".qweight", ".qzeros", ".scales"))]
diff = [k for k in ks if not np.array_equal(a.where[k].raw(k), b.where[k].raw(k))]
print("  %d quantized tensors compared, %d differ %s" % (len(ks), len(diff), diff[:3]))
sys.exit(0 if ks and not diff and sorted(a.keys()) == sorted(b.keys()) else 1)
PYEOF
logits "$T/fp8-w4" "$T/f.c" && logits "$T/fp8-dq-w4" "$T/f.d" && logits "$T/bf16-w4" "$T/f.b" || bad "eval quantized"
$PY "$T/cmp.py" "$T/f.c" "$T/f.d" "fp8-w4 vs dequantized-w4" && ok "fp8-w4 logits == dequantized-w4" || bad "fp8-w4 vs dq"
logits "$T/bf16" "$T/f.f" || bad "eval bf16"
$PY - "$T/f.c" "$T/f.b" "$T/f.f" <<'PYEOF' && ok "fp8-w4 as close to the bf16 model as bf16-w4" || bad "fp8-w4 vs bf16-w4"
import sys, numpy as np
fw, bw, b = (np.fromfile(f, np.float32) for f in sys.argv[1:4])
r = lambda x, y: float(np.sqrt(((x - y) ** 2).mean() / (y ** 2).mean()))
print("  rms rel: fp8-w4 vs bf16 %.3f, bf16-w4 vs bf16 %.3f, fp8-w4 vs bf16-w4 %.3f"
      % (r(fw, b), r(bw, b), r(fw, bw)))
sys.exit(0 if r(fw, b) <= 1.25 * r(bw, b) and r(fw, bw) <= 0.25 else 1)
PYEOF
# an FP8 weight kept by --keep is written BF16, equal to the numpy dequantization rounded to BF16
KEEP=model.language_model.layers.3.self_attn.o_proj.weight
"$BIN" quantize -q -g 32 --keep "$KEEP" "$T/fp8" "$T/fp8-keep" >"$T/out" 2>&1 || { bad "quantize --keep"; cat "$T/out"; }
$PY - "$T/fp8-keep" "$T/fp8-dq" "$KEEP" <<'PYEOF' && ok "kept FP8 weight == numpy dequant as BF16" || bad "kept FP8 weight"
import os, sys; sys.path.insert(0, os.environ["CLLM_SRC"] + "/tools/ref")
import numpy as np, safetensors_np as S
a, b, k = S.SafetensorsModel(sys.argv[1]), S.SafetensorsModel(sys.argv[2]), sys.argv[3]
ref = S.f32_to_bf16_bits(b.get(k).astype(np.float32))
sys.exit(0 if a.dtype(k) == "BF16" and np.array_equal(a.where[k].raw(k), ref) else 1)
PYEOF

# ---- AWQ gemm served
"$BIN" synth -q --config "$C" --seed 7 --layout awq --group-size 32 "$T/awq" || { bad "synth awq"; exit 1; }
verify_ok "$T/awq" && ok "awq verifies" || bad "awq verify"
$PY "$R" awq-repack "$T/awq" && ok "numpy AWQ unpack/repack round trip" || bad "awq repack"
$PY "$R" awq-dq "$T/awq" "$T/awq-dq" >/dev/null || bad "awq-dq"
$PY - "$T/awq" <<'PYEOF' && ok "awq synth has zeros 0" || bad "awq synth: no zero 0"
import os, sys; sys.path.insert(0, os.environ["CLLM_SRC"] + "/tools/ref")
import numpy as np, safetensors_np as S, awq_fp8_ref as A
m = S.SafetensorsModel(sys.argv[1])
sys.exit(0 if any((A.unpack_awq(np.array(m.where[k].raw(k))) == 0).any() for k in m.keys() if k.endswith(".qzeros")) else 1)
PYEOF
logits "$T/awq" "$T/a.c" || bad "eval awq"
$PY "$SRC/tools/ref/ref_forward.py" "$T/awq-dq" --tokens "$TOK" --out "$T/a.r" >/dev/null 2>&1 || bad "ref awq"
$PY "$T/cmp.py" "$T/a.c" "$T/a.r" "awq vs numpy ref" && ok "awq == numpy dequant + float64 forward" || bad "awq vs ref"
# and served: a completion over token ids (the synth model has no tokenizer)
if command -v curl >/dev/null; then
    . "$SRC/tests/lib/serve.sh"
    if start_serve "$T/awq" --skip-tokenizer-init; then
        code=$(curl -s -o "$T/awq.json" -w '%{http_code}' "$U/v1/completions" -H "$H" \
            -H 'Content-Type: application/json' \
            -d '{"model": "tiny", "prompt": [1, 2, 3, 4], "max_tokens": 5, "temperature": 0, "ignore_eos": true}')
        n=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["usage"]["completion_tokens"])' "$T/awq.json" 2>/dev/null)
        [ "$code" = 200 ] && [ "$n" = 5 ] && ok "awq served: 200, 5 tokens" || { bad "awq serve: $code $n"; cat "$T/awq.json"; }
        kill $SPID 2>/dev/null; wait $SPID 2>/dev/null
    else bad "awq: the server did not come up"; fi
fi

# ---- compressed-tensors asymmetric group-128 int4 (AWQ-style) on a 128-wide tiny config
$PY - "$C" "$T/c128.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); t = c["text_config"]
t.update(hidden_size=128, linear_value_head_dim=32, moe_intermediate_size=128,
         shared_expert_intermediate_size=128)
json.dump(c, open(sys.argv[2], "w"), indent=1)
PYEOF
"$BIN" synth -q --config "$T/c128.json" --seed 3 --dtype f32 "$T/fp128" || bad "synth 128"
$PY "$SRC/tools/ref/ct_writer.py" ct "$T/fp128" "$T/ct128" "$T/ct128-dq" --strategy group --group 128 --asym >/dev/null || bad "ct writer g128"
verify_ok "$T/ct128" && ok "ct asym g128 verifies" || bad "ct g128 verify"
logits "$T/ct128" "$T/c.c" || bad "eval ct128"
$PY "$SRC/tools/ref/ref_forward.py" "$T/ct128-dq" --tokens "$TOK" --out "$T/c.r" >/dev/null 2>&1 || bad "ref ct128"
$PY "$T/cmp.py" "$T/c.c" "$T/c.r" "ct asym g128 vs numpy ref" && ok "ct asym g128 == numpy ref" || bad "ct g128 vs ref"

# ---- bad files: a clear message naming the key or tensor, exit 1 or 2
# expect_fail NAME PATTERN CMD...
expect_fail() {
  local n=$1 pat=$2; shift 2
  "$@" >"$T/out" 2>&1; local rc=$?
  if [ $rc -ge 1 ] && [ $rc -le 2 ] && grep -q -- "$pat" "$T/out"; then ok "$n: refused ($pat)"
  else bad "$n: rc $rc, expected a message with '$pat'"; cat "$T/out"; fi
}
setq() { # setq SRC DST PYEXPR-on-qc
  rm -rf "$2"; cp -r "$1" "$2"
  $PY -c "import json,sys; p='$2/config.json'; c=json.load(open(p)); qc=c['quantization_config']; $3; json.dump(c,open(p,'w'))"
}
P=model.language_model.layers.0.linear_attn.out_proj
setq "$T/awq" "$T/b1" "qc['version']='gemv'"
expect_fail "awq gemv" "awq version 'gemv'" "$BIN" eval "$T/b1" --tokens 1,2
setq "$T/awq" "$T/b2" "qc['bits']=8"
expect_fail "awq 8-bit" "awq bits 8" "$BIN" eval "$T/b2" --tokens 1,2
$PY "$T/mutate.py" "$T/awq" "$T/b3" "$P.scales" f32
expect_fail "awq F32 scales" "$P.scales: dtype F32" "$BIN" eval "$T/b3" --tokens 1,2
$PY "$T/mutate.py" "$T/awq" "$T/b4" "$P.qweight" rows
expect_fail "awq qweight shape" "$P.qweight" "$BIN" eval "$T/b4" --tokens 1,2
$PY "$T/mutate.py" "$T/awq" "$T/b5" "$P.qzeros" drop
expect_fail "awq qzeros missing" "$P.qzeros missing" "$BIN" verify "$T/b5"
"$BIN" synth -q --config "$C" --seed 7 --scheme w4a16 --group-size 32 "$T/gptq" && setq "$T/gptq" "$T/b6" "c['quantization_config']={'quant_method':'awq','bits':4,'group_size':128,'zero_point':True,'version':'gemm'}"
expect_fail "GPTQ tensors under an awq config" ".qweight: I32" "$BIN" eval "$T/b6" --tokens 1,2
expect_fail "serve fp8" "quant_method 'fp8'.*cllm quantize" "$BIN" eval "$T/fp8" --tokens 1,2
expect_fail "fp8 gptq method" "method gptq on an FP8" "$BIN" quantize "$T/fp8" "$T/x" --method gptq --calib /dev/null
setq "$T/fp8" "$T/b7" "qc['fmt']='e5m2'"
expect_fail "fp8 e5m2" "fmt 'e5m2'" "$BIN" quantize -q "$T/b7" "$T/x"
setq "$T/fp8" "$T/b8" "del qc['weight_block_size']"
expect_fail "fp8 no block size" "weight_block_size" "$BIN" quantize -q "$T/b8" "$T/x"
$PY "$T/mutate.py" "$T/fp8" "$T/b9" "$P.weight_scale_inv" rows
expect_fail "fp8 scale_inv shape" "$P.weight_scale_inv: F32 \[1, 2\], expected F32 \[2, 2\]" "$BIN" quantize -q -g 32 "$T/b9" "$T/x"
$PY "$T/mutate.py" "$T/fp8" "$T/b10" "$P.weight_scale_inv" bf16
expect_fail "fp8 scale_inv dtype" "$P.weight_scale_inv: BF16" "$BIN" quantize -q -g 32 "$T/b10" "$T/x"
$PY "$T/mutate.py" "$T/fp8" "$T/b11" "$P.weight_scale_inv" drop
expect_fail "fp8 scale_inv missing" "$P.weight: F8_E4M3 weight without" "$BIN" quantize -q -g 32 "$T/b11" "$T/x"
$PY "$T/mutate.py" "$T/fp8" "$T/b12" "$P.weight" nan
expect_fail "fp8 NaN code" "$P.weight: F8_E4M3 NaN code at \[0, 0\]" "$BIN" quantize -q -g 32 "$T/b12" "$T/x"
[ ! -e "$T/x" ] && ok "no output left by the refused runs" || bad "refused run left $T/x"
"$BIN" synth --config "$C" --layout fp8 --scheme w4a16 "$T/x" >"$T/out" 2>&1; [ $? -ne 0 ] && grep -q "layout fp8" "$T/out" && ok "synth fp8 + scheme refused" || bad "synth fp8 + scheme"
check_exit
