#!/bin/bash
# cllm bench-grammar --mixed on models/tiny: the mixed-batch benchmark of issue 15 runs end to end
# (warm-up, paired mixed/baseline rounds, summary with the engine thread's grammar share) and
# refuses bad arguments. No speed is asserted: the figures only have to be printed and finite.
set -u
BIN=${CLLM_BIN:-build/cllm}
SRC=${CLLM_SRC:-.}
T=${CLLM_TMP:-/tmp}/bench_mixed
mkdir -p "$T"
source "$SRC/tests/lib/check.sh"
S="$SRC/tests/data/grammar/bench"
"$BIN" bench-grammar --mixed "$SRC/models/tiny" --batch 4 --tokens 16 --prompt-len 8 --rounds 1 \
    --threads 1 "$S/person.json" "$S/shapes_anyof.json" > "$T/out" 2> "$T/err"
rc=$?
[ $rc = 0 ] && ok "runs" || bad "rc $rc: $(tail -3 "$T/err")"
grep -q "^schemas prepared: " "$T/out" && ok "preparation line" || bad "no preparation: $(cat "$T/out")"
grep -q "^warm-up mixed round" "$T/out" && ok "warm-up line" || bad "no warm-up line: $(cat "$T/out")"
# the constrained neighbours really ran in the measured round (masks were computed)
grep -Eq "^round 1: .*grammar work [0-9.]+ ms/step \([1-9][0-9]* masks\)" "$T/out" &&
    ok "constrained neighbours ran" || bad "no masks in round 1: $(grep '^round 1' "$T/out")"
grep -q "^round 1: beside [0-9]* constrained requests" "$T/out" && ok "round line" ||
    bad "no round line: $(cat "$T/out")"
grep -Eq "^over 1 rounds: grammar work on the engine thread = [0-9]+\.[0-9]+% " "$T/out" &&
    ok "summary with the grammar share" || bad "summary: $(tail -1 "$T/out")"
grep -qi "nan\|inf%" "$T/out" && bad "non-finite figure: $(cat "$T/out")" || ok "figures finite"
"$BIN" bench-grammar --mixed "$SRC/models/tiny" --batch 4 --tokens 8 "$T/missing.json" \
    > /dev/null 2> "$T/err2"
[ $? = 1 ] && grep -q "cannot read" "$T/err2" && ok "missing schema refused" ||
    bad "missing schema: $(cat "$T/err2")"
check_exit
