#!/bin/bash
# Prefill tok/s, Gated DeltaNet recurrence (default) vs --gdn-prefill chunked, side by side in
# one run (a command, not a timed test). Usage:
#   tools/bench_gdn_prefill.sh BIN [MODEL_DIR] [-p N] [extra bench-forward args]
# Without MODEL_DIR a configs/small.json f32 synth model is made in ${TMPDIR:-/tmp}.
# Runs alternate (rec, chunked, rec, chunked) and the best of each is reported, with the ratio.
set -eu
BIN=${1:?usage: bench_gdn_prefill.sh BIN [MODEL] [bench-forward args]}; shift
SRC=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -gt 0 ] && [ -d "$1" ]; then M=$1; shift; else
  M=${TMPDIR:-/tmp}/cllm_gdn_bench_small
  [ -f "$M/config.json" ] || "$BIN" synth --config "$SRC/configs/small.json" "$M" --dtype f32 -q
fi
args=("$@"); [ ${#args[@]} -gt 0 ] || args=(-p 256 -n 1)
pf() { "$@" 2>&1 | awk 'tolower($0) ~ /prefill/ { for (i = 1; i <= NF; i++) if ($(i) ~ /^[0-9.]+$/ && tolower($(i+1)) ~ /tok\/s/) { print $(i); exit } }'; }
best_r=0; best_c=0
for rep in 1 2; do
  r=$(pf "$BIN" bench-forward "$M" "${args[@]}"); c=$(pf "$BIN" bench-forward "$M" "${args[@]}" --gdn-prefill chunked)
  echo "rep $rep: recurrent ${r:-?} tok/s, chunked ${c:-?} tok/s"
  best_r=$(awk -v a="$best_r" -v b="${r:-0}" 'BEGIN{print (b>a)?b:a}'); best_c=$(awk -v a="$best_c" -v b="${c:-0}" 'BEGIN{print (b>a)?b:a}')
done
awk -v r="$best_r" -v c="$best_c" -v m="$M" 'BEGIN{printf "%s prefill: recurrent %.1f tok/s, chunked %.1f tok/s, chunked/recurrent %.3f\n", m, r, c, (r>0)?c/r:0}'
