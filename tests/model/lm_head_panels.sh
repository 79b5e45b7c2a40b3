#!/usr/bin/env bash
# The GPTQ lm_head repacked into column panels at load (model/weights.c lm_head_panels) gives
# bitwise the logits of the checkpoint's layout (CLLM_LM_PANEL=0): int8 and int4 lm_heads, a
# vocabulary that leaves a ragged last panel (1000 = 3 x 256 + 232), all positions at once
# (multi-token tiles), one token per call (the decode sweep) and chunks of 5, on the int16 and
# the float activation paths; greedy generation (the engine's decode steps) the same.
set -u
. "$CLLM_SRC/tests/lib/check.sh"
BIN=$CLLM_BIN SRC=$CLLM_SRC
T=${CLLM_TMP:-/tmp}/lm_head_panels
rm -rf "$T" && mkdir -p "$T"
sed 's/"vocab_size": 512/"vocab_size": 1000/' "$SRC/configs/tiny.json" >"$T/cfg.json"
grep -q '"vocab_size": 1000' "$T/cfg.json" || bad "config edit (tiny.json has no vocab_size 512?)"
TOK=$(/usr/bin/python3 -c "print(','.join(str((i*37+5)%1000) for i in range(24)))")
for lm in int8 int4; do
  d="$T/m-$lm"
  expect_rc 0 "synth lm_head $lm" "$BIN" synth -q --config "$T/cfg.json" --scheme w4a16 \
    --group-size 32 --lm-head "$lm" --seed 3 "$d"
  for act in int float; do
    for chunk in 0 1 5; do
      a=$(CLLM_ACT16=$act CLLM_LM_PANEL=0 "$BIN" eval "$d" --tokens "$TOK" --prefill-chunk $chunk --logits-hash 2>&1 | tail -1)
      b=$(CLLM_ACT16=$act "$BIN" eval "$d" --tokens "$TOK" --prefill-chunk $chunk --logits-hash 2>&1 | tail -1)
      case "$a" in *logits-hash*) ;; *) bad "$lm $act chunk $chunk: eval failed: $a"; continue ;; esac
      expect_eq "$lm lm_head, act16=$act, prefill chunk $chunk: panels == checkpoint layout" "$b" "$a"
    done
  done
  a=$(CLLM_LM_PANEL=0 "$BIN" generate "$d" --tokens 1,2,3 -n 12 --temperature 0 --ids 2>/dev/null)
  b=$("$BIN" generate "$d" --tokens 1,2,3 -n 12 --temperature 0 --ids 2>/dev/null)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "$lm: greedy generation the same" || bad "$lm: generation '$a' vs '$b'"
done
exit ${fail:-0}
