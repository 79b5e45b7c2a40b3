#!/bin/bash
# GGUF loading end to end against the numpy reference: a `cllm synth` F32 Qwen3.5-MoE with rows
# that are multiples of 256 (hidden, expert and shared-expert widths 256, GDN Hv*dv 256,
# attention heads*head_dim 256; 2 key heads, 4 value heads so the converter's V-head reorder is
# undone; 4 layers, one full attention; an MTP layer; an odd vocabulary, 301 rows) converted by
# tools/ref/gguf_np.py hf_to_gguf (an independent from-spec writer) under these type mixes:
#   f32, f16, bf16, q8_0, q4_0, q5_0+iq4_nl, q4_1+q5_1, q4_k_m-like (q4_k, q6_k for output /
#   attn_v / ssm_out / some ffn_down_exps; norms f32), q5_k+iq4_xs, a split set (q8_0 + q4_k,
#   9 tensors a file) and fused gate_up experts (q4_0 + q6_k).
# For each: `cllm verify FILE.gguf` says OK, and `cllm eval FILE.gguf --dump-logits` on a 70-token
# prompt equals tools/ref/ref_forward.py on gguf_to_ref_dir(FILE) (float64 over the GGUF's
# exact dequantized weights): max |cllm - ref| <= 2e-5 * max(1, max |ref|), the tolerance of
# forward_golden.sh for F32 models (cllm computes in fp32 over the same weight values, whatever
# path a type takes: GPTQ groups, F32 expansion or block kernels). For the q4_k_m mix also a
# 1-token prompt and --prefill-chunk 30 (three calls, crossing the 64-token GDN chunk) vs the
# same reference; and the q4_k_m mix once more on linear_value_head_dim 128 (out_proj's columns
# then move in 128-column chunks and stay quantized: not logged as F32, logits == reference; a
# loader that ignored the chunk order was 1.56 off). Exit 77 without /usr/bin/python3 + numpy.
# (The split mix found an off-by-one in split_name, fixed since.)
set -u
BIN=${CLLM_BIN:?}; SRC=${CLLM_SRC:?}; T=${CLLM_TMP:-/tmp}/gguf_ref
PY=/usr/bin/python3
rm -rf "$T"; mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
if ! $PY -c 'import numpy' 2>/dev/null; then echo "SKIP: no /usr/bin/python3 with numpy" >&2; exit 77; fi
export CLLM_SRC="$SRC"
# weights are compared on float activations (the default int16 activation codes of GPTQ groups
# round activations; quant_ct.sh checks that rounding on its own)
export CLLM_ACT16=float
$PY - "$SRC/configs/tiny-moe.json" "$T/cfg.json" <<'PYEOF'
import json, sys
c = json.load(open(sys.argv[1])); t = c["text_config"]
t.update(vocab_size=301, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
         head_dim=64, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
         linear_value_head_dim=64, num_experts=4, num_experts_per_tok=2,
         moe_intermediate_size=256, shared_expert_intermediate_size=256,
         mtp_num_hidden_layers=1, eos_token_id=300)
json.dump(c, open(sys.argv[2], "w"), indent=1)
PYEOF
"$BIN" synth --config "$T/cfg.json" "$T/fp" --seed 11 --dtype f32 -q || { bad "synth"; exit 1; }
T70=$($PY -c "print(','.join(str((i*37+5)%301) for i in range(70)))")
# prep.py: every mix converted, its reference directory written and the reference logits computed
cat > "$T/prep.py" <<'PYEOF'
import os, re, sys
sys.path.insert(0, os.environ["CLLM_SRC"] + "/tools/ref")
import numpy as np, gguf_np as G, ref_forward as R
fp, T, toks = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")]
def q4km(n):
    if n == "output.weight" or re.search(r"attn_v|ssm_out|blk\.[02]\.ffn_down_exps", n): return "Q6_K"
    return "Q4_K"
mixes = {  # name: (type_of, kwargs)
    "f32": (lambda n: "F32", {}), "f16": (lambda n: "F16", {}), "bf16": (lambda n: "BF16", {}),
    "q8_0": (lambda n: "Q8_0", {}), "q4_0": (lambda n: "Q4_0", {}),
    "q5_0_iq4nl": (lambda n: "Q5_0" if "exps" in n or "token_embd" in n else "IQ4_NL", {}),
    "q4_1_q5_1": (lambda n: "Q4_1" if "exps" in n or n == "output.weight" else "Q5_1", {}),
    "q4km": (q4km, {}),
    "q5k_iq4xs": (lambda n: "Q5_K" if "exps" in n or "token_embd" in n else "IQ4_XS", {}),
    "split": (lambda n: "Q8_0" if "exps" in n else "Q4_K", {"split_max_tensors": 9}),
    "fused": (lambda n: "Q4_0" if "exps" in n else "Q6_K", {"fused_gate_up": True}),
}
for name in (sys.argv[4].split(",") if len(sys.argv) > 4 else mixes):
    tf, kw = mixes[name]
    paths = G.hf_to_gguf(fp, f"{T}/{name}.gguf", tf, **kw)
    g = G.GGUFFile(paths[0])
    types = sorted({G.TYPE_NAMES[t["type"]]
                    for t in g.tensors.values()})
    rd = G.gguf_to_ref_dir(paths[0], f"{T}/{name}.ref")
    m = R.Model(rd)
    sets = [("70", toks)] + ([("1", toks[:1])] if name == "q4km" else [])
    for tag, ids in sets:
        lg, _ = R.forward(m, ids)
        lg.astype(np.float32).tofile(f"{T}/{name}.{tag}.r.f32")
    with open(f"{T}/{name}.first", "w") as f: f.write(os.path.basename(paths[0]))
    print(f"{name}: {len(paths)} file(s), types {' '.join(types)}", flush=True)
PYEOF
cat > "$T/cmp.py" <<'PYEOF'
import sys, numpy as np
c = np.fromfile(sys.argv[1], dtype=np.float32); r = np.fromfile(sys.argv[2], dtype=np.float32)
if c.shape != r.shape or c.size == 0:
    print("shape mismatch", c.shape, r.shape); sys.exit(1)
if not np.all(np.isfinite(c)):
    print("non-finite logits"); sys.exit(1)
d = float(np.abs(c - r).max()); m = float(np.abs(r).max()); tol = 2e-5 * max(1.0, m)
print("  %s: max abs err %.3g (max |ref| %.3g, tol %.3g)" % (sys.argv[3], d, m, tol))
sys.exit(0 if d <= tol else 1)
PYEOF
$PY "$T/prep.py" "$T/fp" "$T" "$T70" ${GGUF_REF_MIXES:-} || { bad "prep (convert + reference)"; exit 1; }
for f in "$T"/*.first; do
  mix=$(basename "$f" .first); G="$T/$(cat "$f")"
  "$BIN" verify "$G" >"$T/out" 2>&1 && grep -q "^OK" "$T/out" && ok "$mix: verify OK" ||
    { bad "$mix: verify"; cat "$T/out"; }
  "$BIN" eval "$G" --tokens "$T70" --dump-logits "$T/$mix.70.c.f32" >"$T/out" 2>&1 ||
    { bad "$mix: eval"; cat "$T/out"; continue; }
  $PY "$T/cmp.py" "$T/$mix.70.c.f32" "$T/$mix.70.r.f32" "$mix 70 tokens" && ok "$mix == reference" ||
    bad "$mix: logits vs reference"
  if [ -f "$T/$mix.1.r.f32" ]; then
    "$BIN" eval "$G" --tokens "${T70%%,*}" --dump-logits "$T/$mix.1.c.f32" >/dev/null 2>&1 &&
      $PY "$T/cmp.py" "$T/$mix.1.c.f32" "$T/$mix.1.r.f32" "$mix 1 token" && ok "$mix 1-token prompt" ||
      bad "$mix: 1-token prompt"
    "$BIN" eval "$G" --tokens "$T70" --prefill-chunk 30 --dump-logits "$T/$mix.ch.c.f32" >/dev/null 2>&1 &&
      $PY "$T/cmp.py" "$T/$mix.ch.c.f32" "$T/$mix.70.r.f32" "$mix --prefill-chunk 30" &&
      ok "$mix prefill in chunks of 30" || bad "$mix: --prefill-chunk 30"
  fi
done
# The default int16 activation codes (GPTQ groups and the K-quant blocks' matmul_kq alike): within
# the code rounding of the float path, as act16_forward.sh bounds it (per row <= 1e-3 x max |logit|,
# and not bitwise equal: the codes are in use); prefill in chunks of 30 == one call, bitwise.
for mix in q4km q4_0 q5k_iq4xs; do
  [ -f "$T/$mix.first" ] || continue; G="$T/$(cat "$T/$mix.first")"
  if CLLM_ACT16=int "$BIN" eval "$G" --tokens "$T70" --dump-logits "$T/$mix.i.f32" >/dev/null 2>&1 &&
    CLLM_ACT16=int "$BIN" eval "$G" --tokens "$T70" --prefill-chunk 30 --dump-logits "$T/$mix.ic.f32" \
      >/dev/null 2>&1; then
    $PY - "$T/$mix.i.f32" "$T/$mix.70.c.f32" "$mix" <<'PYEOF' && ok "$mix int16 codes ~ float" || bad "$mix: int16 codes vs float path"
import sys, numpy as np
a = np.fromfile(sys.argv[1], dtype=np.float32).reshape(70, -1); b = np.fromfile(sys.argv[2], dtype=np.float32).reshape(70, -1)
rel = float((np.abs(a - b).max(axis=1) / np.abs(b).max(axis=1)).max())
print("  %s int16 codes vs float: max rel %.3g (bound 1e-3)" % (sys.argv[3], rel))
sys.exit(0 if 0 < rel <= 1e-3 and np.isfinite(a).all() else 1)
PYEOF
    cmp -s "$T/$mix.i.f32" "$T/$mix.ic.f32" && ok "$mix int16 codes: chunks of 30 == one call" ||
      bad "$mix: int16 codes, chunked prefill differs"
  else bad "$mix: eval with int16 codes"; fi
done
# linear_value_head_dim 128 (the real model's): the K-quant out_proj's columns move in whole
# 128-column chunks, so it is repacked into panels with per-128 block scales (CLLM_KQ_D128)
# instead of held as F32 as with the 64 above; the q4km mix against its reference.
V=$T/v128; mkdir -p "$V"
sed 's/"linear_value_head_dim": 64/"linear_value_head_dim": 128/' "$T/cfg.json" >"$V/cfg.json"
if grep -q '"linear_value_head_dim": 128' "$V/cfg.json" &&
  "$BIN" synth --config "$V/cfg.json" "$V/fp" --seed 12 --dtype f32 -q &&
  $PY "$T/prep.py" "$V/fp" "$V" "$T70" q4km >/dev/null &&
  "$BIN" eval "$V/$(cat "$V/q4km.first")" --tokens "$T70" --dump-logits "$V/c.f32" >"$V/out" 2>&1; then
  ! grep -q "held as F32" "$V/out" && ok "v128: out_proj kept quantized" ||
    bad "v128: out_proj held as F32"
  $PY "$T/cmp.py" "$V/c.f32" "$V/q4km.70.r.f32" "q4km v128 70 tokens" && ok "q4km v128 == reference" ||
    bad "q4km v128: logits vs reference"
else bad "v128: synth / convert / eval"; fi
if [ -f "$T/split.first" ]; then n=$(ls "$T"/split-*-of-*.gguf 2>/dev/null | wc -l)
  [ "$n" -gt 1 ] && ok "split set has $n files" || bad "split set: $n files"; fi
[ $fail = 0 ] && echo "gguf_ref: all passed"
check_exit
