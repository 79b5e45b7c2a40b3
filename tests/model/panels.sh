#!/usr/bin/env bash
# GPTQ matrices repacked into 32-column panels at load (model/weights.c model_panels) give
# bitwise the logits of the checkpoint's layout (CLLM_PANEL=0). A config whose widths leave ragged
# last panels (hidden 72 = 2 x 32 + 8, expert width 40, vocabulary 1000 = 31 x 32 + 8); W4A16 with
# int8 and int4 lm_heads, W8A16 (int8 layers), W4A8 (the int8-activation kernels), and a quantized
# model with per-group scales and zeros; all positions
# at once (multi-token tiles), one token per call (the decode sweep) and chunks of 5, on the int16
# and the float activation paths; the lm_head alone in the checkpoint's layout (CLLM_LM_PANEL=0);
# greedy generation (the engine's decode steps) the same; the same logits when the copied
# checkpoint pages are evicted from the page cache (CLLM_PANEL_EVICT=1).
set -u
. "$CLLM_SRC/tests/lib/check.sh"
BIN=$CLLM_BIN SRC=$CLLM_SRC
T=${CLLM_TMP:-/tmp}/panels
rm -rf "$T" && mkdir -p "$T"
sed -e 's/"vocab_size": 512/"vocab_size": 1000/' -e 's/"hidden_size": 64/"hidden_size": 72/' \
  -e 's/"moe_intermediate_size": 32/"moe_intermediate_size": 40/' "$SRC/configs/tiny.json" >"$T/cfg.json"
for k in '"vocab_size": 1000' '"hidden_size": 72' '"moe_intermediate_size": 40'; do
  grep -q "$k" "$T/cfg.json" || bad "config edit: $k missing (tiny.json changed?)"
done
TOK=$(/usr/bin/python3 -c "print(','.join(str((i*37+5)%1000) for i in range(24)))")
hash() { "$BIN" eval "$1" --tokens "$TOK" --prefill-chunk "$2" --logits-hash 2>&1 | tail -1; }
# synth's random codes share one scale and the symmetric zero per tensor, so a panel's zeros or
# scales in the wrong place would not show; a quantized model (per-group scales, --asym zeros;
# tiny.json's widths with the 1000 vocabulary, as quantize's groups must divide K) does
sed 's/"vocab_size": 512/"vocab_size": 1000/' "$SRC/configs/tiny.json" >"$T/cfgq.json"
expect_rc 0 "synth bf16 for quantize" "$BIN" synth -q --config "$T/cfgq.json" --seed 5 "$T/bf16"
expect_rc 0 "quantize w4a16 --asym lm_head int4" "$BIN" quantize "$T/bf16" "$T/m-quant-asym" \
  --scheme w4a16 -g 32 --asym --lm-head int4 -q
for m in w4a16:int8 w4a16:int4 w8a16:int8 w4a8:int8 quant:asym; do
  scheme=${m%%:*} lm=${m##*:} d="$T/m-${m/:/-}"
  [ "$scheme" = quant ] || expect_rc 0 "synth $scheme lm_head $lm" "$BIN" synth -q \
    --config "$T/cfg.json" --scheme "$scheme" --group-size 8 --lm-head "$lm" --seed 3 "$d"
  log=$("$BIN" --log-level debug eval "$d" --tokens 1,2 --logits-hash 2>&1)
  case "$log" in *"repacked"*"panels"*) ok "$m: load repacks into panels" ;; *) bad "$m: no repack logged: $log" ;; esac
  for act in int float; do
    [ "$scheme" = w4a8 ] && [ "$act" = float ] && continue # act16 does not apply to 8-bit activations
    for chunk in 0 1 5; do
      a=$(CLLM_ACT16=$act CLLM_PANEL=0 hash "$d" $chunk)
      b=$(CLLM_ACT16=$act hash "$d" $chunk)
      case "$a" in *logits-hash*) ;; *) bad "$m $act chunk $chunk: eval failed: $a"; continue ;; esac
      expect_eq "$m, act16=$act, prefill chunk $chunk: panels == checkpoint layout" "$b" "$a"
    done
  done
  a=$(CLLM_PANEL=0 hash "$d" 0) b=$(CLLM_LM_PANEL=0 hash "$d" 0)
  expect_eq "$m: lm_head alone unpaneled == all unpaneled" "$b" "$a"
  b=$(CLLM_PANEL_EVICT=1 hash "$d" 0) # the source pages evicted after their copy
  expect_eq "$m: panels with CLLM_PANEL_EVICT=1 == checkpoint layout" "$b" "$a"
  a=$(CLLM_PANEL=0 "$BIN" generate "$d" --tokens 1,2,3 -n 12 --temperature 0 --ids 2>/dev/null)
  b=$("$BIN" generate "$d" --tokens 1,2,3 -n 12 --temperature 0 --ids 2>/dev/null)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "$m: greedy generation the same" || bad "$m: generation '$a' vs '$b'"
done
for v in CLLM_PANEL CLLM_LM_PANEL CLLM_PANEL_EVICT; do
  env "$v=yes" "$BIN" eval "$T/m-w4a16-int8" --tokens 1,2 --logits-hash >"$T/out" 2>&1
  rc=$?
  [ $rc != 0 ] && grep -q "$v=yes: expected 0 or 1" "$T/out" && ok "$v=yes refused (rc $rc)" ||
    bad "$v=yes: rc $rc, $(head -2 "$T/out")"
done
check_exit
