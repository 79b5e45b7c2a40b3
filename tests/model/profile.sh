#!/usr/bin/env bash
# CLLM_PROFILE (model/forward.c prof_report): the per-family table of decode steps (=1), of
# prompt steps (=prefill) and of the MTP head's passes (=mtp) on models/tiny: the header counts the steps and tokens, every family
# and the unaccounted rest appear once, the rows add up to the step (ms and percent), a family's
# matmul waits never exceed its time; unset, nothing is logged.
set -u
. "$CLLM_SRC/tests/lib/check.sh"
BIN=$CLLM_BIN SRC=$CLLM_SRC
T=${CLLM_TMP:-/tmp}/profile
rm -rf "$T" && mkdir -p "$T"
FAMS=("embed" "norms" "attn proj" "attn core" "gdn proj" "gdn conv" "gdn recurrence"
  "moe router" "moe experts gate/up" "moe experts + shared down" "moe routing" "lm_head"
  "mtp fc" "unaccounted")

check_table() { # file label header-regex
  local f=$1 what=$2
  grep -qE "$3" "$f" && ok "$what: header" || { bad "$what: no header /$3/"; grep profile "$f"; }
  for fam in "${FAMS[@]}"; do
    [ "$(grep -c "profile: $fam" "$f")" = 1 ] || bad "$what: family '$fam' not once"
  done
  # per-step ms of the header, the rows' ms and percent, and each row's matmul waits
  awk -v what="$what" '
    /profile: .* steps of .* ms per step/ { for (i = 1; i <= NF; i++) if ($i == "ms" && $(i+1) == "per") total = $(i-1) }
    /profile: / && / ms +[0-9.]+%/ {
      for (i = 1; i <= NF; i++) if ($i == "ms" && $(i+1) ~ /%$/) { ms += $(i-1); pc += $(i+1) + 0; v = $(i-1) }
      if (match($0, /matmul waits [0-9.]+/)) { w = substr($0, RSTART + 13, RLENGTH - 13); if (w + 0 > v + 0.001) badw++ }
      rows++
    }
    END {
      d = ms - total; if (d < 0) d = -d
      printf "%s: %d rows, %.3f of %.3f ms, %.1f%%, %d waits over their row\n", what, rows, ms, total, pc, badw
      exit !(rows == 14 && total > 0 && d <= 0.02 && pc > 99 && pc < 101 && badw == 0)
    }' "$f" >"$T/sum" && ok "$(cat "$T/sum")" || bad "$(cat "$T/sum")"
}

CLLM_PROFILE=1 "$BIN" bench-forward "$SRC/models/tiny" -p 8 -n 8 -t 2 >/dev/null 2>"$T/dec" ||
  bad "bench-forward CLLM_PROFILE=1 failed"
check_table "$T/dec" "decode" "profile: 8 decode steps of 1.00 tokens on average"
CLLM_PROFILE=prefill "$BIN" bench-forward "$SRC/models/tiny" -p 8 -n 4 -t 2 >/dev/null 2>"$T/pre" ||
  bad "bench-forward CLLM_PROFILE=prefill failed"
check_table "$T/pre" "prefill" "profile: 1 prefill steps of 8.00 tokens on average"
# the MTP head's passes (models/tiny has a trained one): their own table, the main steps not in it
CLLM_PROFILE=mtp "$BIN" generate "$SRC/models/tiny" --prompt "In the beginning" -n 24 -t 2 \
  --temperature 0 --speculative-config '{"method": "mtp", "num_speculative_tokens": 2}' \
  >/dev/null 2>"$T/mtp" || bad "generate CLLM_PROFILE=mtp failed"
check_table "$T/mtp" "mtp" "profile: [1-9][0-9]* MTP head steps of 1.00 tokens on average"
grep -q "decode steps\|prefill steps" "$T/mtp" && bad "CLLM_PROFILE=mtp: a main-step table too" ||
  ok "CLLM_PROFILE=mtp: the MTP table alone"
expect_rc 2 "CLLM_PROFILE=bogus refused" env CLLM_PROFILE=bogus "$BIN" cpuinfo
"$BIN" bench-forward "$SRC/models/tiny" -p 8 -n 4 -t 2 >/dev/null 2>"$T/off"
grep -q "profile:" "$T/off" && bad "profile lines without CLLM_PROFILE" || ok "no profile when unset"
check_exit
