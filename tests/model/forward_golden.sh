#!/bin/bash
# Golden test of the forward pass against the independent numpy reference (tools/ref), plus the
# CLI's determinism and bad-input behaviour. Run by ctest with CLLM_BIN, CLLM_SRC, CLLM_TMP.
#
# For each tiny config (tiny, tiny-gqa, tiny-moe, tiny-qwen3, tiny-qwen3-moe, tiny-qwen2) and
# weight dtype (f32, bf16; f16 for one), fused experts and (two cases) per-expert tensors:
# `cllm eval` logits of every position vs tools/ref/ref_forward.py on
#   - a 1-token prompt,
#   - a 70-token prompt (crosses the 64-token chunk and several 16-position KV blocks),
#   - a 300-token prompt on tiny-gqa (many attention tiles / KV blocks, long recurrence),
# threshold: max |cllm - ref| <= 2e-5 * max(1, max |ref|) (observed ~2e-7 relative: cllm
# accumulates in fp32 over the same stored weights the float64 reference reads exactly).
# Bitwise (logits hash): prefill in calls of 7 and of 1 == one call; 2 threads == 1 thread;
# KV block size 5 == 16. Mixed prefill+decode batches are checked bitwise against sequences run
# alone in tests/model/test_forward.c, so this golden comparison covers them too.
# The reference needs /usr/bin/python3 with numpy; without it the golden part is skipped (the
# bitwise and bad-input parts still run).
set -u
BIN=${CLLM_BIN:?}; SRC=${CLLM_SRC:?}; TMP=${CLLM_TMP:-/tmp}/forward_golden
rm -rf "$TMP"; mkdir -p "$TMP"
. "$SRC/tests/lib/check.sh"
T=$TMP
PY=/usr/bin/python3
have_ref=1
if ! $PY -c 'import numpy' 2>/dev/null || [ ! -f "$SRC/tools/ref/ref_forward.py" ]; then
  echo "SKIP golden comparison: no numpy or tools/ref" >&2; have_ref=0
fi
cat > "$TMP/cmp.py" <<'PYEOF'
import sys, numpy as np
c = np.fromfile(sys.argv[1], dtype=np.float32); r = np.fromfile(sys.argv[2], dtype=np.float32)
if c.shape != r.shape or c.size == 0:
    print("shape mismatch", c.shape, r.shape); sys.exit(1)
if not np.all(np.isfinite(c)):
    print("non-finite logits"); sys.exit(1)
d = float(np.abs(c - r).max()); m = float(np.abs(r).max()); tol = 2e-5 * max(1.0, m)
print("%s: max abs err %.3g (max |ref| %.3g, tol %.3g)" % (sys.argv[3], d, m, tol))
sys.exit(0 if d <= tol else 1)
PYEOF
T70=$(seq 0 69 | awk '{printf "%s%d", (NR>1?",":""), ($1*37+5)%300}')
seq 0 299 | awk '{print ($1*53+11)%300}' > "$TMP/t300"
hash() { "$BIN" eval "$@" --logits-hash 2>&1 | awk '/logits-hash/{print $2}'; }
for spec in tiny:f32 tiny:bf16 tiny-gqa:f32 tiny-gqa:bf16 tiny-moe:f32 tiny-moe:bf16 \
            tiny-qwen3:f32 tiny-qwen3:bf16 tiny-qwen3-moe:f32 tiny-qwen3-moe:f16 \
            tiny-qwen2:f32 tiny-qwen2:bf16 tiny-moe:bf16:per-expert tiny-qwen3-moe:f32:per-expert; do
  IFS=: read -r cfg dt layout <<<"$spec"; layout=${layout:-fused}; M="$TMP/$cfg-$dt-$layout"
  "$BIN" synth --config "$SRC/configs/$cfg.json" "$M" --seed 3 --dtype $dt --experts $layout -q 2>/dev/null ||
    { bad "synth $spec"; continue; }
  cases="1tok:7 70tok:$T70"
  [ "$spec" = tiny-gqa:f32 ] && cases="$cases 300tok:@$TMP/t300"  # 10 attention tiles, 19 blocks
  for case in $cases; do
    name=${case%%:*}; toks=${case#*:}
    "$BIN" eval "$M" --tokens "$toks" --dump-logits "$M/$name.c.f32" || { bad "eval $spec $name"; continue; }
    if [ $have_ref = 1 ]; then
      $PY "$SRC/tools/ref/ref_forward.py" "$M" --tokens "$toks" --out "$M/$name.r.f32" >/dev/null 2>&1 || { bad "ref $spec $name"; continue; }
      $PY "$TMP/cmp.py" "$M/$name.c.f32" "$M/$name.r.f32" "$spec $name" || bad "golden $spec $name"
    fi
  done
  h=$(hash "$M" --tokens "$T70")
  [ -n "$h" ] || bad "no hash $spec"
  [ "$(hash "$M" --tokens "$T70" --prefill-chunk 7)" = "$h" ] || bad "$spec: prefill in chunks of 7 differs"
  [ "$(hash "$M" --tokens "$T70" --threads 2)" = "$h" ] || bad "$spec: 2 threads differ"
  [ "$(hash "$M" --tokens "$T70" --block-size 5)" = "$h" ] || bad "$spec: block size 5 differs"
done
# a checkpoint with an MTP head (bound, unused) and per-expert MTP experts: same text logits path
sed 's/"mtp_num_hidden_layers": 0/"mtp_num_hidden_layers": 1/' "$SRC/configs/tiny-moe.json" > "$TMP/tiny-mtp.json"
M="$TMP/tiny-mtp"
if "$BIN" synth --config "$TMP/tiny-mtp.json" "$M" --seed 4 --dtype f32 -q 2>/dev/null; then
  "$BIN" eval "$M" --tokens "$T70" --dump-logits "$M/c.f32" 2>"$M/log" || bad "eval with MTP head"
  grep -q "MTP head present" "$M/log" || bad "MTP head not reported"
  if [ $have_ref = 1 ]; then
    $PY "$SRC/tools/ref/ref_forward.py" "$M" --tokens "$T70" --out "$M/r.f32" >/dev/null 2>&1 &&
      $PY "$TMP/cmp.py" "$M/c.f32" "$M/r.f32" "tiny-moe+mtp f32 70tok" || bad "golden with MTP head"
  fi
else
  bad "synth with MTP"
fi
# the scalar tier against the reference too
M="$TMP/tiny-moe-f32-fused"
if [ $have_ref = 1 ] && [ -f "$M/70tok.r.f32" ]; then
  CLLM_ISA=ref "$BIN" eval "$M" --tokens "$T70" --dump-logits "$M/70tok.ref-isa.f32" 2>/dev/null &&
    $PY "$TMP/cmp.py" "$M/70tok.ref-isa.f32" "$M/70tok.r.f32" "tiny-moe CLLM_ISA=ref" || bad "scalar tier golden"
  [ "$(CLLM_ISA=ref hash "$M" --tokens "$T70" --prefill-chunk 1)" = "$(CLLM_ISA=ref hash "$M" --tokens "$T70")" ] ||
    bad "scalar tier: token-by-token differs from one call"
fi
# generate: greedy, same ids whatever the threads and prefill split
M="$TMP/tiny-f32-fused"
g1=$("$BIN" generate "$M" --tokens 1,2,3,4,5 -n 8 --threads 1 2>/dev/null)
g2=$("$BIN" generate "$M" --tokens 1,2,3,4,5 -n 8 --threads 2 --prefill-chunk 2 2>/dev/null)
[ -n "$g1" ] && [ "$g1" = "$g2" ] || bad "generate greedy output depends on threads/split: '$g1' vs '$g2'"
"$BIN" generate "$M" --tokens 1,2,3 -n 4 --temperature 0.8 --top-k 20 --top-p 0.9 --min-p 0.01 --seed 5 2>"$TMP/gen.err" >/dev/null ||
  bad "generate sampling"
grep -q "decode:.*tok/s" "$TMP/gen.err" || bad "generate does not print tok/s"
# bad input: one line, nonzero exit, no crash (exit code < 128)
expect_bad_input() { # expect-pattern cmd...
  local pat=$1; shift
  out=$("$@" 2>&1); rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 128 ] || ! grep -qi -- "$pat" <<<"$out"; then bad "bad input ($*): rc=$rc out=$out"; fi
}
expect_bad_input "empty prompt" "$BIN" eval "$M" --tokens ""
expect_bad_input "empty prompt" "$BIN" generate "$M" --tokens " , "
expect_bad_input "out of range" "$BIN" eval "$M" --tokens 1,999999
expect_bad_input "tokenizer" "$BIN" generate "$M" -p "hello"
B="$TMP/bad"; cp -r "$M" "$B"
sed -i 's/"max_position_embeddings": [0-9]*/"max_position_embeddings": 8/' "$B/config.json"
expect_bad_input "max_position_embeddings" "$BIN" eval "$B" --tokens 1,2,3,4,5,6,7,8,9,10
cp "$M/config.json" "$B/config.json"; sed -i 's/"model_type": "qwen3_5_moe"/"model_type": "llama"/' "$B/config.json"
expect_bad_input "llama" "$BIN" eval "$B" --tokens 1
cp "$M/config.json" "$B/config.json"; sed -i 's/"num_hidden_layers": 4/"num_hidden_layers": 5/; s/"full_attention"$/"full_attention", "linear_attention"/' "$B/config.json"
expect_bad_input "missing tensor" "$BIN" eval "$B" --tokens 1
cp "$M/config.json" "$B/config.json"; sed -i 's/"moe_intermediate_size": 32/"moe_intermediate_size": 48/' "$B/config.json"
expect_bad_input "expected shape" "$BIN" eval "$B" --tokens 1
expect_bad_input "" "$BIN" eval "$TMP/does-not-exist" --tokens 1
[ $fail = 0 ] && echo "forward_golden: all passed"
check_exit
