#!/usr/bin/env bash
# Temporaries left by runs killed with -9 (issue 32, item 15): the next `cllm synth` into the same
# folder removes NAME.safetensors.tmp-PID files, the next `cllm quantize` to the same OUT removes
# OUT.tmp-PID folders, when PID is no longer running, and says so in the log. A temporary whose
# PID runs is kept, and so is everything not of our naming (other stems, a PID that is not a
# number, a file where a folder is expected and the reverse).
set -u
BIN=${CLLM_BIN:?} SRC=${CLLM_SRC:?}
T=${CLLM_TMP:-/tmp}/stale_tmp
rm -rf "$T" && mkdir -p "$T"
. "$SRC/tests/lib/check.sh"

(exit 0) &
DEAD=$!
wait $DEAD
kill -0 $DEAD 2> /dev/null && { echo "SKIP: pid $DEAD was reused at once"; exit 77; }
sleep 300 &
LIVE=$!
trap 'kill $LIVE 2> /dev/null; wait $LIVE 2> /dev/null' EXIT

# --- synth ---
S=$T/syn
mkdir -p "$S"
echo stale > "$S/model.safetensors.tmp-$DEAD"
echo stale > "$S/model-00001-of-00002.safetensors.tmp-$DEAD"
echo live > "$S/model.safetensors.tmp-$LIVE"
echo mine > "$S/notes.txt.tmp-$DEAD"             # not a shard
echo mine > "$S/model.safetensors.tmp-${DEAD}x"  # not a pid
echo mine > "$S/model.safetensors.tmp"           # no pid in the name: owner unknown
mkdir "$S/x.safetensors.tmp-$DEAD"               # a folder where synth writes files
"$BIN" synth --config "$SRC/configs/tiny.json" "$S" -q > "$T/synth.out" 2> "$T/synth.err" ||
    { bad "synth failed"; cat "$T/synth.err"; }
[ ! -e "$S/model.safetensors.tmp-$DEAD" ] && [ ! -e "$S/model-00001-of-00002.safetensors.tmp-$DEAD" ] &&
    ok "synth: stale shard temporaries removed" || bad "synth: stale temporaries left: $(ls "$S")"
[ -e "$S/model.safetensors.tmp-$LIVE" ] && ok "synth: a running writer's temporary kept" ||
    bad "synth removed a live pid's temporary"
[ -e "$S/notes.txt.tmp-$DEAD" ] && [ -e "$S/model.safetensors.tmp-${DEAD}x" ] &&
    [ -e "$S/model.safetensors.tmp" ] && [ -d "$S/x.safetensors.tmp-$DEAD" ] &&
    ok "synth: names not of our temp naming untouched" || bad "synth removed a foreign file: $(ls "$S")"
[ "$(grep -c "synth: removed stale temporary .*tmp-$DEAD (left by pid $DEAD, no longer running)" "$T/synth.err")" = 2 ] &&
    ok "synth: each removal in the log" || { bad "synth log"; cat "$T/synth.err"; }
"$BIN" verify "$S" > /dev/null 2>&1 && ok "synth: output verifies" || bad "synth output does not verify"
extra=$(ls "$S" | grep '\.tmp' | grep -vx -e "model.safetensors.tmp-$LIVE" -e "notes.txt.tmp-$DEAD" \
    -e "model.safetensors.tmp-${DEAD}x" -e "model.safetensors.tmp" -e "x.safetensors.tmp-$DEAD")
[ -z "$extra" ] && ok "synth: left no temporary of its own" || bad "synth left: $extra"

# --- quantize ---
Q=$T/q
mkdir -p "$Q.tmp-$DEAD" "$Q.tmp-$LIVE" "$T/q2.tmp-$DEAD"
echo part > "$Q.tmp-$DEAD/model.safetensors"
echo part > "$Q.tmp-$DEAD/config.json"
echo live > "$Q.tmp-$LIVE/model.safetensors"
(exit 0) &
DEAD2=$!
wait $DEAD2
echo file > "$Q.tmp-$DEAD2" # a file where quantize writes folders
"$BIN" quantize -g 32 "$S" "$Q" > "$T/q.out" 2> "$T/q.err" || { bad "quantize failed"; cat "$T/q.err"; }
[ ! -e "$Q.tmp-$DEAD" ] && ok "quantize: stale OUT.tmp-PID folder removed" || bad "quantize: $Q.tmp-$DEAD left"
[ -d "$Q.tmp-$LIVE" ] && [ -e "$Q.tmp-$LIVE/model.safetensors" ] && ok "quantize: a running writer's folder kept" ||
    bad "quantize removed a live pid's folder"
[ -d "$T/q2.tmp-$DEAD" ] && [ -f "$Q.tmp-$DEAD2" ] && ok "quantize: other outputs' and non-folder temporaries untouched" ||
    bad "quantize removed a foreign entry: $(ls "$T")"
grep -q "quantize: removed stale temporary $Q.tmp-$DEAD (left by pid $DEAD, no longer running)" "$T/q.err" &&
    ok "quantize: the removal in the log" || { bad "quantize log"; cat "$T/q.err"; }
grep -q "quantize: kept $Q.tmp-$LIVE: its writer (pid $LIVE) is still running" "$T/q.err" &&
    ok "quantize: the kept folder in the log" || { bad "quantize log (kept)"; cat "$T/q.err"; }
"$BIN" verify "$Q" > /dev/null 2>&1 && ok "quantize: output verifies" || bad "quantize output does not verify"
check_exit
