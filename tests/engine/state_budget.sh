#!/usr/bin/env bash
# The engine sizes its GDN state slots to the RAM left after the weights (engine.c plan_pools): a
# synth model whose recurrent state is 805 MB per sequence (3 GDN layers x 64 value heads x
# 1024 x 1024 fp32) would ask for 256 live slots + 64 snapshots (257 GB) by default. The server
# must say it cut them, start, and answer; the slots it keeps must fit in what was available.
set -u
. "$CLLM_SRC/tests/lib/check.sh"
BIN=$CLLM_BIN SRC=$CLLM_SRC
T=${CLLM_TMP:-/tmp}/state_budget
rm -rf "$T" && mkdir -p "$T"
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
[ "${avail_kb:-0}" -gt 3000000 ] || { echo "SKIP: under 3 GB of RAM available"; exit 77; }

/usr/bin/python3 - "$SRC/configs/tiny.json" "$T/config.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
t = c["text_config"]
t.update(linear_num_key_heads=16, linear_num_value_heads=64, linear_key_head_dim=1024,
         linear_value_head_dim=1024)
json.dump(c, open(sys.argv[2], "w"), indent=1)
EOF
"$BIN" synth -q --config "$T/config.json" --seed 1 "$T/m" || { bad "synth"; exit 1; }

. "$SRC/tests/lib/serve.sh"
start_serve "$T/m" --skip-tokenizer-init || { bad "server did not start"; exit 1; }

if grep -q "256 live state slots + 64 snapshots (.* MiB each) do not fit" "$T/serve.log"; then
  ok "the cut is logged with the plan it replaced"
else
  bad "no cut logged"; cat "$T/serve.log"
fi
line=$(grep -o "state slots: [0-9]* live + [0-9]* snapshots" "$T/serve.log" | head -1)
live=$(echo "$line" | awk '{print $3}') snap=$(echo "$line" | awk '{print $6}')
if [ -n "$live" ] && [ "$live" -ge 1 ] && [ "$live" -lt 256 ]; then
  ok "live slots cut to $live"
else
  bad "live slots [$live]"
fi
# what is kept fits in the RAM that was available before the server started
mib=$(grep -o "snapshots ([0-9.]* MiB each)" "$T/serve.log" | head -1 | grep -o "[0-9]*\.[0-9]" | cut -d. -f1)
kept_kb=$(((live + snap) * ${mib:-0} * 1024))
if [ "$kept_kb" -le "$avail_kb" ]; then ok "$live + $snap slots fit ($kept_kb of $avail_kb kB)"
else bad "$live + $snap slots = $kept_kb kB above the $avail_kb kB available"; fi

code=$(curl -s -o "$T/resp" -w '%{http_code}' -H "$H" $U/v1/completions \
  -d '{"prompt":[1,2,3,4],"max_tokens":3,"temperature":0}')
expect_eq "a completion on the cut pool" "$code" 200
grep -q '"completion_tokens":3' "$T/resp" && ok "3 tokens" || { bad "response"; cat "$T/resp"; }
check_exit
