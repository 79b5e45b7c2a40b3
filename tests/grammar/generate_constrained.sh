#!/bin/bash
# cllm generate --json-schema / --regex / --grammar on models/tiny: outputs satisfy the
# constraint (schema checked by python's json + the bounds, regex by grep -E), bad input is a
# usage error naming the problem.
set -u
BIN=${CLLM_BIN:-build/cllm}
SRC=${CLLM_SRC:-.}
T=${CLLM_TMP:-/tmp}/generate_constrained
mkdir -p "$T"
source "$SRC/tests/lib/check.sh"
M="$SRC/models/tiny"
cat > "$T/s.json" << 'J'
{"type":"object","properties":{"city":{"type":"string","maxLength":10},"n":{"type":"integer","minimum":1,"maximum":9},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2}},"required":["city","n","tags"]}
J
for seed in 1 2 3 4 5; do
    out=$("$BIN" generate "$M" -p "Data:" -n 80 --temperature 1.2 --seed $seed --json-schema "$T/s.json" 2> /dev/null)
    if /usr/bin/python3 -c 'import json,sys; v=json.loads(sys.argv[1]); assert set(v)=={"city","n","tags"} and 1<=v["n"]<=9 and len(v["city"])<=10 and all(t in "ab" for t in v["tags"])' "$out" 2> /dev/null; then
        ok "schema seed $seed: $out"
    else
        # cut by -n is allowed only if the text is long
        [ ${#out} -gt 60 ] && ok "schema seed $seed cut by -n" || bad "schema seed $seed: $out"
    fi
    out=$("$BIN" generate "$M" -p "Code:" -n 20 --temperature 1.2 --seed $seed --regex '[a-z]{2,4}-[0-9]{2}' 2> /dev/null)
    echo "$out" | grep -Eqx '[a-z]{2,4}-[0-9]{2}' && ok "regex seed $seed: $out" || bad "regex seed $seed: $out"
done
printf 'root ::= "yes" | "no" | "maybe " [0-9]\n' > "$T/g.gbnf"
out=$("$BIN" generate "$M" -p "Answer:" -n 10 --temperature 1 --seed 9 --grammar "$T/g.gbnf" 2> /dev/null)
echo "$out" | grep -Eqx 'yes|no|maybe [0-9]' && ok "gbnf: $out" || bad "gbnf: $out"
expect_rc 2 "bad regex" "$BIN" generate "$M" -p x -n 4 --regex '(a'
grep -q "missing )" "$T/out" && ok "bad regex message" || bad "bad regex message: $(cat "$T/out")"
echo '{"type":"string","format":"ipv6"}' > "$T/bad.json"
expect_rc 2 "unsupported format" "$BIN" generate "$M" -p x -n 4 --json-schema "$T/bad.json"
grep -q "format 'ipv6'" "$T/out" && ok "unsupported format message" || bad "message: $(cat "$T/out")"
expect_rc 2 "two constraints" "$BIN" generate "$M" -p x -n 4 --regex a --grammar "$T/g.gbnf"
check_exit
