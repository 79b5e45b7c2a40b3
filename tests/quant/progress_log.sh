#!/usr/bin/env bash
# Progress of the offline tools (issue 16): with stderr redirected to a file, synth, quantize (RTN
# and GPTQ calibration) and eval --ppl write whole progress lines and no \r; -q silences them (the
# plan, the summary and the eval table stay); on a terminal (a pty via script(1)) quantize draws
# its \r bar.
set -u
BIN=${CLLM_BIN:?} SRC=${CLLM_SRC:?}
T=${CLLM_TMP:-/tmp}/progress_log
rm -rf "$T" && mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
cr() { grep -c $'\r' "$1"; } # lines holding a carriage return
/usr/bin/python3 -c "import random; random.seed(7); print(' '.join(str(random.randrange(512)) for _ in range(600)))" >"$T/ids"

"$BIN" synth --config "$SRC/configs/tiny.json" --seed 3 "$T/fp" >"$T/synth.out" 2>"$T/synth.err"
expect_eq "synth log: no \\r" "$(cr "$T/synth.err")" 0
grep -q "^synth: 100% .* s)$" "$T/synth.err" && ok "synth log: 100% line" || { bad "synth lines"; cat "$T/synth.err"; }

"$BIN" quantize -g 32 "$T/fp" "$T/q4" >"$T/rtn.out" 2>"$T/rtn.err"
expect_eq "quantize log: no \\r" "$(cr "$T/rtn.err")" 0
n=$(grep -c "^quantize: [0-9]*% .* of .* s)$" "$T/rtn.err")
[ "$n" -ge 2 ] && [ "$n" -le 11 ] && ok "quantize log: $n progress lines (a line per 10%)" || { bad "quantize lines: $n"; cat "$T/rtn.err"; }
grep -q "^quantize: 100% " "$T/rtn.err" && ok "quantize log: 100% line" || bad "no 100% line"
grep -q "^done: " "$T/rtn.out" && ok "summary on stdout" || bad "summary"

G=(-g 32 --method gptq --calib "$T/ids" --calib-samples 2 --calib-seq-len 32 --gptq-mem 350k)
"$BIN" quantize "${G[@]}" "$T/fp" "$T/g4" >"$T/g.out" 2>"$T/g.err"
expect_eq "gptq log: no \\r" "$(cr "$T/g.err") $(cr "$T/g.out")" "0 0"
grep -q "^calibration pass 1: 100% 2/2 sequences of 32 tokens" "$T/g.err" && ok "calibration: a line per pass" || { bad "calibration lines"; cat "$T/g.err"; }
grep -q "^calibration: 64 tokens" "$T/g.err" && ok "calibration count line" || bad "calibration count"

"$BIN" quantize -q "${G[@]}" "$T/fp" "$T/g4q" >"$T/gq.out" 2>"$T/gq.err"
expect_eq "gptq -q: nothing on stderr" "$(wc -c <"$T/gq.err")" 0
expect_eq "gptq -q: no calibration or progress lines on stdout" "$(grep -c "^calibration\|^quantize:" "$T/gq.out")" 0
grep -q "^done: .* gptq" "$T/gq.out" && ok "gptq -q: summary kept" || bad "gptq -q summary"
cmp -s "$T/g4/model.safetensors" "$T/g4q/model.safetensors" && ok "-q: same bytes" || bad "-q changes the output"

"$BIN" eval "$T/fp" --ppl @"$T/ids" --ctx 64 --stride 32 --table "$T/q4" --prompts 2 >"$T/e.out" 2>"$T/e.err"
expect_eq "eval log: no \\r" "$(cr "$T/e.err")" 0
grep -q "^eval .*/fp: 100% 2/2 greedy prompts" "$T/e.err" && grep -q "^eval .*/q4: [0-9]*% [0-9]*/[0-9]* windows of 64 tokens" "$T/e.err" &&
  ok "eval: progress lines per model" || { bad "eval lines"; cat "$T/e.err"; }
"$BIN" eval -q "$T/fp" --ppl @"$T/ids" --ctx 64 --stride 32 --table "$T/q4" --prompts 2 >"$T/eq.out" 2>"$T/eq.err"
expect_eq "eval -q: nothing on stderr" "$(wc -c <"$T/eq.err")" 0
expect_eq "eval -q: same table rows" "$(grep -c '^fp \|^q4 ' "$T/eq.out")" 2

if script -qec true /dev/null >/dev/null 2>&1; then
  script -qec "'$BIN' quantize -g 32 '$T/fp' '$T/q4t'" /dev/null >"$T/tty.out" 2>&1
  grep -q $'\r''quantize \[#*' "$T/tty.out" && ok "terminal: \\r bar" || { bad "no bar on a pty"; cat -A "$T/tty.out" | head; }
else
  echo "skip: script(1) cannot open a pty here"
fi
check_exit
