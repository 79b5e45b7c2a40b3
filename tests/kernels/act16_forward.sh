#!/usr/bin/env bash
# The act_bits 16 integer path through the whole forward pass (model/forward.c FWD_QA_INT16,
# kernels.h qact16): on random-weight w4a16 (int8 lm_head) and w8a16 (MoE) models, `cllm eval` logits
# with int16 activation codes (default) are within the code rounding of the float kernels
# (CLLM_ACT16=float): max |d| per row <= 1e-3 x max |logit| of the row (observed ~1e-5); prefill
# in pieces of 7 and of 1 == one call, bitwise (batch invariance on the integer path); a bad
# CLLM_ACT16 value is refused naming it; CLLM_ACT16=int8 on a w4a16 file == the w4a8 file of the
# same weights, bitwise. (The kernel tiers agree bitwise: tests/kernels/
# test_q16_kern.c; whole-model tiers differ by the float kernels' rounding.)
set -u
. "$CLLM_SRC/tests/lib/check.sh"
BIN=$CLLM_BIN SRC=$CLLM_SRC
T=${CLLM_TMP:-/tmp}/act16_forward
rm -rf "$T" && mkdir -p "$T"
PY=/usr/bin/python3
$PY -c 'import numpy' 2>/dev/null || { echo "SKIP: no numpy"; exit 77; }
TOK=$(seq -s, 3 8 290) # 37 tokens (vocab 300)

cat >"$T/cmp.py" <<'PYEOF'
import sys, json, numpy as np
a = np.fromfile(sys.argv[1], dtype=np.float32); b = np.fromfile(sys.argv[2], dtype=np.float32)
V = int(sys.argv[3])
if a.size != b.size or a.size % V or a.size == 0: print("size", a.size, b.size); sys.exit(1)
a = a.reshape(-1, V); b = b.reshape(-1, V)
rel = (np.abs(a - b).max(axis=1) / np.maximum(np.abs(a).max(axis=1), 1e-30)).max()
print("max rel %.3g" % rel)
sys.exit(0 if rel <= 1e-3 and rel > 0 and np.isfinite(b).all() else 1)
PYEOF

for spec in "tiny:w4a16:32:int8" "tiny-moe:w8a16:16:bf16"; do
  IFS=: read -r cfg scheme g lm <<<"$spec"
  d="$T/$cfg-$scheme"
  expect_rc 0 "synth $cfg --scheme $scheme" "$BIN" synth -q --config "$SRC/configs/$cfg.json" \
    --scheme "$scheme" --group-size "$g" --lm-head "$lm" --seed 7 "$d"
  V=$($PY -c "import json,sys;d=json.load(open(sys.argv[1]));print(d.get('text_config',d)['vocab_size'])" "$d/config.json")
  for a in int float; do
    CLLM_ACT16=$a "$BIN" eval "$d" --tokens "$TOK" --dump-logits "$T/$cfg.$a.bin" >/dev/null 2>"$T/err" ||
      { bad "$cfg eval CLLM_ACT16=$a"; cat "$T/err"; }
  done
  "$BIN" eval "$d" --tokens "$TOK" --dump-logits "$T/$cfg.def.bin" >/dev/null 2>&1
  cmp -s "$T/$cfg.def.bin" "$T/$cfg.int.bin" && ok "$cfg: default is the int16 path" ||
    bad "$cfg: default differs from CLLM_ACT16=int"
  if r=$($PY "$T/cmp.py" "$T/$cfg.float.bin" "$T/$cfg.int.bin" "$V"); then ok "$cfg $scheme int16 vs float: $r"
  else bad "$cfg $scheme int16 vs float: $r"; fi
  for c in 7 1; do
    "$BIN" eval "$d" --tokens "$TOK" --prefill-chunk "$c" --dump-logits "$T/$cfg.c$c.bin" >/dev/null 2>"$T/err" ||
      { bad "$cfg eval --prefill-chunk $c"; cat "$T/err"; }
    cmp -s "$T/$cfg.int.bin" "$T/$cfg.c$c.bin" && ok "$cfg: prefill in pieces of $c == one call (bitwise)" ||
      bad "$cfg: prefill in pieces of $c differs"
  done
done
# CLLM_ACT16=int8: a 16-bit-activation model's int4 matrices run W4A8's int8 codes and kernels.
# Independent check: the same seed's w4a8 file (identical weights, bf16 lm_head so no int8 matrix
# is left on either side) gives bitwise the same logits; pieces of 7 and 1 == one call.
for s in w4a16 w4a8; do
  expect_rc 0 "synth tiny --scheme $s --lm-head bf16" "$BIN" synth -q --config "$SRC/configs/tiny.json" \
    --scheme "$s" --group-size 32 --lm-head bf16 --seed 7 "$T/lmbf-$s"
done
cmp -s "$T/lmbf-w4a16/model.safetensors" "$T/lmbf-w4a8/model.safetensors" &&
  ok "w4a16 and w4a8 synth files of one seed hold the same weights" || bad "synth weights differ"
"$BIN" eval "$T/lmbf-w4a8" --tokens "$TOK" --dump-logits "$T/a8.bin" >/dev/null 2>&1
for c in 0 7 1; do
  CLLM_ACT16=int8 "$BIN" eval "$T/lmbf-w4a16" --tokens "$TOK" --prefill-chunk "$c" \
    --dump-logits "$T/i8.c$c.bin" >/dev/null 2>"$T/err" || { bad "eval CLLM_ACT16=int8 chunk $c"; cat "$T/err"; }
  cmp -s "$T/a8.bin" "$T/i8.c$c.bin" && ok "CLLM_ACT16=int8 w4a16 == w4a8 file, bitwise (prefill chunk $c)" ||
    bad "CLLM_ACT16=int8 differs from the w4a8 file (prefill chunk $c)"
done
"$BIN" eval "$T/lmbf-w4a16" --tokens "$TOK" --dump-logits "$T/i16.bin" >/dev/null 2>&1
cmp -s "$T/i16.bin" "$T/i8.c0.bin" && bad "CLLM_ACT16=int8 changed nothing" ||
  ok "CLLM_ACT16=int8 differs from the int16 default"
# --act16 (the commands' flag) is CLLM_ACT16 for the process, and beats the environment
"$BIN" eval "$T/lmbf-w4a16" --tokens "$TOK" --act16 int8 --dump-logits "$T/f8.bin" >/dev/null 2>&1
cmp -s "$T/f8.bin" "$T/a8.bin" && ok "--act16 int8 == the w4a8 file, bitwise" || bad "--act16 int8 differs"
CLLM_ACT16=int8 "$BIN" eval "$T/lmbf-w4a16" --tokens "$TOK" --act16 int --dump-logits "$T/f16.bin" >/dev/null 2>&1
cmp -s "$T/f16.bin" "$T/i16.bin" && ok "--act16 int beats CLLM_ACT16=int8" || bad "--act16 int did not override CLLM_ACT16"
"$BIN" eval "$T/tiny-w4a16" --tokens "$TOK" --act16 float --dump-logits "$T/ff.bin" >/dev/null 2>&1
cmp -s "$T/ff.bin" "$T/tiny.float.bin" && ok "--act16 float == CLLM_ACT16=float" || bad "--act16 float differs"
"$BIN" bench-forward "$T/lmbf-w4a16" --act16 int4 -p 4 -n 1 >"$T/out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- "--act16" "$T/out" && ok "--act16 int4 refused naming the flag (rc 2)" ||
  { bad "--act16 int4: rc $rc"; cat "$T/out"; }
CLLM_ACT16=fast "$BIN" eval "$T/tiny-w4a16" --tokens 1,2,3 >"$T/out" 2>&1
rc=$?
[ $rc != 0 ] && grep -q "CLLM_ACT16=fast" "$T/out" && ok "CLLM_ACT16=fast refused (rc $rc)" ||
  { bad "CLLM_ACT16=fast: rc $rc"; cat "$T/out"; }
check_exit
