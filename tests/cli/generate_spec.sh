#!/bin/bash
# `cllm generate --speculative-config` (the sequence runs through the engine) on models/tiny:
# greedy and seeded output is the same ids as the direct path, for ngram, suffix and the trained
# MTP head at k 1..3, and drafts were verified (the engine keeps spare state slots for verifies,
# so one sequence alone speculates); synthetic_acceptance is taken (and said to be not the
# model's output); --regex goes through; an unknown key, --logits-hash and --prefill-chunk are refused by name.
set -u
T=${CLLM_TMP:-/tmp}/generate_spec
rm -rf "$T"
mkdir -p "$T"
source "$CLLM_SRC/tests/lib/check.sh"
M="$CLLM_SRC/models/tiny"
P="And God said, Let there be light: and there was light. And God saw the light"
gen() { "$CLLM_BIN" generate "$M" -p "$P" -n 48 --ids "$@" 2> "$T/err"; }
for samp in "" "--temperature 0.8 --seed 7"; do
    want=$(gen $samp)
    [ -n "$want" ] || bad "plain generate ($samp) gave nothing"
    for cfg in '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":2}' \
        '{"method":"suffix","num_speculative_tokens":2}' \
        '{"method":"mtp","num_speculative_tokens":1,"fixed_k":true}' \
        '{"method":"mtp","num_speculative_tokens":3,"fixed_k":true}'; do
        got=$(gen $samp --speculative-config "$cfg")
        v=$(grep -o '[0-9]* verifies' "$T/err" | awk '{print $1}')
        if [ "$got" = "$want" ] && [ "${v:-0}" -gt 0 ]; then
            ok "same ids with $cfg ${samp:+($samp)}, $v verifies"
        else
            bad "$cfg ${samp:+($samp)}: ${v:-no} verifies; ids differ: '$got' vs '$want'"
            cat "$T/err"
        fi
    done
done
# a constraint goes to the engine as the compiled grammar
a=$("$CLLM_BIN" generate "$M" -p "The number is" -n 12 --regex '[0-9]{3}' 2> /dev/null)
b=$("$CLLM_BIN" generate "$M" -p "The number is" -n 12 --regex '[0-9]{3}' \
    --speculative-config '{"method":"ngram","num_speculative_tokens":2}' 2> /dev/null)
[[ "$a" =~ ^[0-9]{3}$ ]] && [ "$a" = "$b" ] && ok "--regex: '$b' both ways" || bad "--regex: '$a' vs '$b'"
gen --speculative-config '{"method":"ngram","num_speculative_tokens":2,"synthetic_acceptance":0.5}' > /dev/null
grep -q "not the model's output" "$T/err" && ok "synthetic acceptance taken, said so" ||
    { bad "synthetic acceptance"; cat "$T/err"; }
expect_rc 2 "unknown key" "$CLLM_BIN" generate "$M" -p "$P" -n 4 \
    --speculative-config '{"method":"ngram","num_speculative_tokens":2,"bogus":1}'
grep -q "bogus" "$T/out" && ok "unknown key named" || { bad "unknown key"; cat "$T/out"; }
for f in --logits-hash "--prefill-chunk 4"; do
    expect_rc 2 "$f" "$CLLM_BIN" generate "$M" -p "$P" -n 4 $f \
        --speculative-config '{"method":"ngram","num_speculative_tokens":2}'
    grep -q -- "${f%% *}" "$T/out" && ok "$f refused by name" || { bad "$f"; cat "$T/out"; }
done
# bench-forward's verify-cost curve: the plain step, each T against it, and the k estimates
"$CLLM_BIN" bench-forward "$M" -p 8 -n 4 -t 1 \
    --speculative-config '{"method":"mtp","num_speculative_tokens":2,"synthetic_acceptance":0.65}' \
    > "$T/bf" 2> "$T/bf.err"
if grep -q "^  plain: " "$T/bf" && [ "$(grep -c 'x the plain step$' "$T/bf")" = 3 ] &&
    grep -q "^  k  2: 2.07 tokens per verify" "$T/bf"; then
    ok "bench-forward verify curve: plain step, T 1..3 against it, k estimates"
else
    bad "bench-forward verify curve"
    cat "$T/bf" "$T/bf.err"
fi
check_exit
