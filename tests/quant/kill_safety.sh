#!/bin/bash
# Crash safety of written models: `cllm synth` and `cllm quantize` killed with SIGKILL at random
# moments leave nothing that looks complete unless it is complete. After each kill the output is
# checked: if `cllm verify` accepts it (a model a user would load), it must be byte-identical to
# an uninterrupted run's output; quantize's output directory must not exist at all unless so (it
# appears by rename of OUT.tmp-PID). Leftover NAME.tmp-PID files / OUT.tmp-PID directories are
# counted (litter, not a model; the next run into the same place removes them: stale_tmp.sh). KILL_RUNS (default 8) kills per command; the delays are uniform over
# 1.2x the uninterrupted run time, so some runs finish (kill after exit: must be complete).
set -u
T=${CLLM_TMP:-/tmp}/kill_safety
rm -rf "$T"
mkdir -p "$T"
source "$CLLM_SRC/tests/lib/check.sh"
RUNS=${KILL_RUNS:-8}
B=$CLLM_BIN
# a model big enough that writing it takes a while (several shards), small enough for CI
sed 's/"vocab_size": 512/"vocab_size": 4096/; s/"hidden_size": 64/"hidden_size": 256/; s/"moe_intermediate_size": 32/"moe_intermediate_size": 128/; s/"num_experts": 8,/"num_experts": 32,/' \
    "$CLLM_SRC/configs/tiny.json" > "$T/cfg.json"
SYN=("$B" synth --config "$T/cfg.json" --dtype bf16 --shard-size 4MB --tokenizer "$CLLM_SRC/models/tiny" -q)

ms() { echo $(($(date +%s%N) / 1000000)); }
t0=$(ms)
"${SYN[@]}" "$T/ref_synth" > /dev/null 2>&1 || { bad "reference synth failed"; exit 1; }
t_syn=$(($(ms) - t0 + 1))
(cd "$T/ref_synth" && sha256sum * | sort -k2) > "$T/ref_synth.sum"
t0=$(ms)
"$B" quantize "$T/ref_synth" "$T/ref_q" --scheme w4a16 -g 32 --shard-size 4MB -q > /dev/null 2>&1 ||
    { bad "reference quantize failed"; exit 1; }
t_q=$(($(ms) - t0 + 1))
(cd "$T/ref_q" && sha256sum * | sort -k2) > "$T/ref_q.sum"
echo "uninterrupted: synth $t_syn ms ($(ls $T/ref_synth | wc -l) files), quantize $t_q ms"

# kill_one NAME OUTDIR DELAY_MS CMD...: runs CMD, SIGKILLs it after DELAY_MS
kill_one() {
    local delay=$1
    shift
    "$@" > /dev/null 2>&1 &
    local p=$!
    sleep "$(awk -v d=$delay 'BEGIN {printf "%.3f", d / 1000}')"
    kill -KILL $p 2> /dev/null
    wait $p 2> /dev/null
}
looks_complete() { "$B" verify "$1" > /dev/null 2>&1; }
same() { [ "$( (cd "$1" && sha256sum * 2> /dev/null | sort -k2))" = "$(cat "$2")" ]; }

syn_complete=0 syn_partial=0 syn_bad=0 q_complete=0 q_absent=0 q_bad=0 litter=0
for i in $(seq $RUNS); do
    d=$((RANDOM % (t_syn * 12 / 10 + 1)))
    o="$T/syn$i"
    kill_one $d "${SYN[@]}" "$o"
    if [ -d "$o" ] && looks_complete "$o"; then
        if same "$o" "$T/ref_synth.sum"; then syn_complete=$((syn_complete + 1)); else
            syn_bad=$((syn_bad + 1))
            bad "synth killed at $d ms: verify accepts $o but it differs from the uninterrupted run"
        fi
    else syn_partial=$((syn_partial + 1)); fi
    litter=$((litter + $(find "$T/syn$i" -name '*.tmp-*' 2> /dev/null | wc -l)))
    rm -rf "$o"

    d=$((RANDOM % (t_q * 12 / 10 + 1)))
    o="$T/q$i"
    kill_one $d "$B" quantize "$T/ref_synth" "$o" --scheme w4a16 -g 32 --shard-size 4MB -q
    if [ -e "$o" ]; then
        if looks_complete "$o" && same "$o" "$T/ref_q.sum"; then q_complete=$((q_complete + 1)); else
            q_bad=$((q_bad + 1))
            bad "quantize killed at $d ms: $o exists but is not the complete output"
        fi
    else q_absent=$((q_absent + 1)); fi
    litter=$((litter + $(ls -d "$o".tmp-* 2> /dev/null | wc -l)))
    rm -rf "$o" "$o".tmp-*
done
echo "synth: $RUNS kills: $syn_complete complete (== uninterrupted), $syn_partial incomplete (verify refuses), $syn_bad bad"
echo "quantize: $RUNS kills: $q_complete complete (== uninterrupted), $q_absent no output dir, $q_bad bad"
echo "litter left by killed runs (NAME.tmp-PID files, OUT.tmp-PID dirs): $litter"
[ $syn_bad = 0 ] && ok "synth: nothing that looks complete unless complete" || true
[ $q_bad = 0 ] && ok "quantize: nothing that looks complete unless complete" || true
check_exit
