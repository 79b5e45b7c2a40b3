#!/usr/bin/env bash
# The act_bits 16 integer path through the whole forward pass (model/forward.c FWD_QA_INT16,
# kernels.h qact16): on random-weight w4a16 (int8 lm_head) and w8a16 (MoE) models, `cllm eval` logits
# with int16 activation codes (default) are within the code rounding of the float kernels
# (CLLM_ACT16=float): max |d| per row <= 1e-3 x max |logit| of the row (observed ~1e-5); prefill
# in pieces of 7 and of 1 == one call, bitwise (batch invariance on the integer path); a bad
# CLLM_ACT16 value is refused naming it. (The kernel tiers agree bitwise: tests/kernels/
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
CLLM_ACT16=fast "$BIN" eval "$T/tiny-w4a16" --tokens 1,2,3 >"$T/out" 2>&1
rc=$?
[ $rc != 0 ] && grep -q "CLLM_ACT16=fast" "$T/out" && ok "CLLM_ACT16=fast refused (rc $rc)" ||
  { bad "CLLM_ACT16=fast: rc $rc"; cat "$T/out"; }
exit $fail
