#!/bin/bash
# The per-rank top-k reduction of the vocabulary-split lm_head (model/forward_tp.c): under
# tensor parallel, a sample that needs only the row's best k (greedy: k = 1; top-k sampling:
# k = top_k) has each rank send its slice's best k (logit, id) pairs instead of its slice.
#  - `cllm generate` tokens under -np 2, 3 and 4 equal N = 1 and the whole-row path
#    (CLLM_TP_TOPK=0) for greedy and for seeded top-k (+ top-p, min-p) sampling;
#  - the all-gather carries exactly N * k * 8 bytes per token (CLLM_TP_STATS), the whole row
#    N * vmax * 4 without the reduction;
#  - samplings that need the whole row (repetition penalty, sampling without top_k) still
#    gather it and still equal N = 1.
#  - a NaN in one rank's slice: that row is gathered again whole, and the tokens still equal N = 1
#    (needs python3 to write the NaN; left out without it).
# The exactness on ties is checked without MPI by tests/dist/test_tp_topk.c.
# Skipped (77) without mpirun or in a build without MPI.
set -u
BIN=${CLLM_BIN:?}; SRC=${CLLM_SRC:?}; T=${CLLM_TMP:-/tmp}/tp_topk
rm -rf "$T"; mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
. "$SRC/tests/lib/tp.sh"
tp_require
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$BIN" synth -q --config "$SRC/configs/tiny.json" "$T/tiny" >/dev/null 2>&1 || bad "synth tiny"
"$BIN" synth -q --config "$SRC/tests/dist/tiny-tp3.json" "$T/tp3" >/dev/null 2>&1 || bad "synth tp3"
TOK=$(seq -s, 1 7 150)
GEN=(--tokens "$TOK" -n 24 --ids --ignore-eos)

# case NAME MODEL N WANT_K ARGS...: tokens at N (reduced and whole-row) equal N = 1; WANT_K > 0:
# the all-gather's bytes per call are N * WANT_K * 8
case_() {
  local name=$1 M=$2 n=$3 k=$4; shift 4
  local ref="$T/$name.1"
  [ -s "$ref" ] || "$BIN" generate "$M" "${GEN[@]}" "$@" >"$ref" 2>"$T/err" || { bad "$name N=1"; cat "$T/err"; return; }
  CLLM_TP_TOPK=1 CLLM_TP_STATS=1 timeout 120 "$BIN" generate "$M" "${GEN[@]}" "$@" \
    --tensor-parallel-size "$n" >"$T/$name.$n" 2>"$T/$name.$n.err"
  CLLM_TP_TOPK=0 CLLM_TP_STATS=1 timeout 120 "$BIN" generate "$M" "${GEN[@]}" "$@" \
    --tensor-parallel-size "$n" >"$T/$name.$n.full" 2>"$T/$name.$n.full.err"
  if [ -s "$ref" ] && cmp -s "$ref" "$T/$name.$n" && cmp -s "$ref" "$T/$name.$n.full"; then
    ok "$name N=$n: tokens = N=1 = whole-row path"
  else bad "$name N=$n: tokens differ"; cat "$ref" "$T/$name.$n" "$T/$name.$n.full"; tail -3 "$T/$name.$n.err"; fi
  local got full
  got=$(sed -n 's/^tp rank 0.*all-gather [0-9]* calls, [0-9]* bytes (\([0-9]*\) B\/call).*/\1/p' "$T/$name.$n.err")
  full=$(sed -n 's/^tp rank 0.*all-gather [0-9]* calls, [0-9]* bytes (\([0-9]*\) B\/call).*/\1/p' "$T/$name.$n.full.err")
  if [ "$k" -gt 0 ]; then
    expect_eq "$name N=$n: all-gather bytes per token (whole row: $full)" "$got" $((n * k * 8))
  else
    expect_eq "$name N=$n: needs the whole row: gathered whole" "$got" "$full"
  fi
}

case_ greedy "$T/tiny" 2 1
case_ greedy "$T/tiny" 4 1
case_ topk20 "$T/tiny" 2 20 --temperature 0.8 --top-k 20 --seed 11
case_ topk20 "$T/tiny" 4 20 --temperature 0.8 --top-k 20 --seed 11
case_ topk5p "$T/tiny" 2 5 --temperature 1.3 --top-k 5 --top-p 0.8 --min-p 0.05 --seed 3
case_ greedy3 "$T/tp3" 3 1
case_ topk3 "$T/tp3" 3 12 --temperature 0.7 --top-k 12 --seed 5
case_ rep "$T/tiny" 2 0 --temperature 0.8 --top-k 20 --repetition-penalty 1.3 --seed 2
case_ nok "$T/tiny" 2 0 --temperature 0.9 --seed 4

# A NaN in one rank's slice (lm_head row 300: rank 1's at N=2): that rank flags it, so the row is
# gathered again whole (forward_tp.c nan_rows), one more all-gather per token, and the tokens
# still equal N = 1 and the whole-row path
[ -x $PY ] || { echo "NaN row case left out: no python3"; exit $fail; }
cp -r "$T/tiny" "$T/nan"
$PY - "$T/nan/model.safetensors" 300 <<'PYEOF' || bad "NaN row: model edit"
import json, struct, sys
p, v = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
t = json.loads(b[8:8 + n])["lm_head.weight"]
es, nan = {"BF16": (2, b"\xc0\x7f"), "F16": (2, b"\x00\x7e"), "F32": (4, struct.pack("<f", float("nan")))}[t["dtype"]]
H = t["shape"][1]
o = 8 + n + t["data_offsets"][0] + v * H * es
b[o:o + H * es] = nan * H
open(p, "wb").write(b)
PYEOF
calls() { sed -n 's/^tp rank 0.*all-gather \([0-9]*\) calls.*/\1/p' "$1"; }
for s in "greedy" "topk --temperature 0.8 --top-k 20 --seed 11"; do
  set -- $s; name=nan-$1; shift
  "$BIN" generate "$T/nan" "${GEN[@]}" "$@" >"$T/$name.1" 2>/dev/null
  CLLM_TP_STATS=1 timeout 120 "$BIN" generate "$T/nan" "${GEN[@]}" "$@" --tensor-parallel-size 2 \
    >"$T/$name.2" 2>"$T/$name.2.err"
  CLLM_TP_TOPK=0 CLLM_TP_STATS=1 timeout 120 "$BIN" generate "$T/nan" "${GEN[@]}" "$@" \
    --tensor-parallel-size 2 >"$T/$name.2.full" 2>"$T/$name.2.full.err"
  if [ -s "$T/$name.1" ] && cmp -s "$T/$name.1" "$T/$name.2" && cmp -s "$T/$name.1" "$T/$name.2.full"; then
    ok "$name N=2: tokens = N=1 = whole-row path"
  else bad "$name N=2: tokens differ"; cat "$T/$name.1" "$T/$name.2" "$T/$name.2.full"; tail -3 "$T/$name.2.err"; fi
  full=$(calls "$T/$name.2.full.err")
  expect_eq "$name N=2: a second all-gather per token (whole row: $full calls)" "$(calls "$T/$name.2.err")" \
    "$((${full:-0} * 2))"
done
check_exit
