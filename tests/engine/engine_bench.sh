#!/usr/bin/env bash
# cllm bench end to end on the tiny hybrid synth model: text table and sweep columns, --json
# fields, the multi-turn prefix-reuse workload (share >= 90%), --speculative-config's alternated
# plain and spec rows, and usage errors (rc 2).
set -u
BIN=${CLLM_BIN:?} SRC=${CLLM_SRC:?}
T=${CLLM_TMP:-/tmp}/engine_bench
rm -rf "$T" && mkdir -p "$T"
. "$SRC/tests/lib/check.sh"

"$BIN" synth -q --config "$SRC/configs/tiny.json" --seed 1 --dtype f32 "$T/m" || { echo "FAIL: synth"; exit 1; }

"$BIN" bench "$T/m" -p 64 -n 16 -r 2 -b 1,3 -t 1 >"$T/out" 2>"$T/err"
rc=$?
[ $rc = 0 ] && ok "bench text rc 0" || { bad "bench text rc $rc"; cat "$T/err"; }
grep -q "| pp64 |" "$T/out" && grep -q "| tg16 |" "$T/out" && ok "llama-bench rows" || bad "llama-bench rows missing"
grep -q "PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s" "$T/out" \
  && ok "sweep header" || bad "sweep header"
[ "$(grep -c '^|    64 |     16 |' "$T/out")" = 2 ] && ok "two sweep rows" || { bad "sweep rows"; cat "$T/out"; }
grep -q "KV: [0-9]* blocks = [0-9]* tokens.*; state slots: [0-9]" "$T/err" && ok "start-up KV line" || bad "no KV line on stderr"

"$BIN" bench "$T/m" --json -p 32 -n 8 -r 1 -b 2 -t 1 --multi-turn --mt-conversations 2 --mt-turns 3 \
  --mt-first 40 --mt-answer 20 --mt-message 10 >"$T/json" 2>"$T/err"
rc=$?
[ $rc = 0 ] && ok "bench --json rc 0" || { bad "bench --json rc $rc"; cat "$T/err"; }
python3 - "$T/json" <<'PY' && ok "json fields and reuse share" || bad "json check"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["tests"][0]["test"] == "pp32" and d["tests"][1]["test"] == "tg8", d["tests"]
assert d["tests"][0]["avg_ts"] > 0 and d["tests"][1]["avg_ts"] > 0
b = d["batched"][0]
for k in ("pp", "tg", "pl", "n_kv", "t_pp", "speed_pp", "t_tg", "speed_tg", "t", "speed"):
    assert k in b, k
assert b["n_kv"] == 2 * (32 + 8)
mt = d["multi_turn"]
assert mt["reuse_share"] >= 0.9, mt
assert mt["shared_prefix_tokens"] > 0
PY

# --speculative-config: one engine, each tg run paired with a run without speculation
# (cllm_sampling.no_speculation), both rows printed, the spec row with the pairs' median ratio
SPEC='{"method": "ngram", "num_speculative_tokens": 2, "synthetic_acceptance": 0.6, "fixed_k": true}'
"$BIN" bench "$T/m" -p 16 -n 12 -r 3 -b 1 -t 1 --speculative-config "$SPEC" >"$T/spec" 2>"$T/err"
rc=$?
[ $rc = 0 ] && ok "bench spec rc 0" || { bad "bench spec rc $rc"; cat "$T/err"; }
[ "$(grep -c '| tg12 |' "$T/spec")" = 1 ] && grep -q '| tg12 spec | .*x plain (median of 3 alternated pairs), [0-9]* verifies' "$T/spec" &&
  [ "$(grep -c '| pp16 |' "$T/spec")" = 1 ] && ok "bench spec: plain and spec tg rows, one pp row" ||
  { bad "bench spec rows"; cat "$T/spec"; }
[ "$(grep -c 'KV: [0-9]* blocks' "$T/err")" = 2 ] && ok "bench spec: one engine for the table, one for the sweep" ||
  bad "bench spec engines: $(grep -c 'KV: ' "$T/err")"
"$BIN" bench "$T/m" --json -p 16 -n 12 -r 2 -b 1 -t 1 --speculative-config "$SPEC" >"$T/specj" 2>"$T/err"
python3 - "$T/specj" <<'PY' && ok "bench spec json" || { bad "bench spec json"; cat "$T/specj"; }
import json, re, sys
d = json.load(open(sys.argv[1]))
tg = [t for t in d["tests"] if t["test"] == "tg12"]
assert len(tg) == 2 and "speculative" not in tg[0] and "spec_vs_plain" not in tg[0], tg
assert tg[1]["spec_vs_plain"] > 0 and int(re.match(r"(\d+) verifies", tg[1]["speculative"]).group(1)) > 0, tg
b = d["batched"]
assert len(b) == 2 and "speculative" not in b[0] and b[1]["speculative"] is True, b
PY

"$BIN" bench "$T/m" -p 16 -n 4 -r 1 -t 1 --no-sweep --no-warmup >"$T/nw" 2>&1 &&
  grep -q "| pp16 |" "$T/nw" && ok "--no-warmup runs the table" || bad "--no-warmup: $(tail -2 "$T/nw")"
"$BIN" bench "$T/m" -b 0 >/dev/null 2>&1; [ $? = 2 ] && ok "bad -b rc 2" || bad "bad -b not a usage error"
"$BIN" bench >/dev/null 2>&1; [ $? = 2 ] && ok "no model rc 2" || bad "no model not a usage error"
"$BIN" bench "$T/nope" >/dev/null 2>&1; [ $? = 1 ] && ok "missing model rc 1" || bad "missing model rc"
check_exit
