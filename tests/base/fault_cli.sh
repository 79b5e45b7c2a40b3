#!/bin/bash
# Allocation-failure walk over whole commands (base/fault.h, env CLLM_FAULT_ALLOC=N): model load +
# tokenizer load + template + generation (`cllm generate`), server start-up (`cllm serve`) and
# `cllm quantize`. Each run with its N-th allocation failed must exit 0 (a failure it tolerates)
# or 1 with a message on stderr, never a signal, a hang, or a sanitizer report; a failed quantize
# leaves no output directory. Needs a -DCLLM_FAULT_INJECT=ON build (skipped otherwise), best with
# -DCLLM_SANITIZE=ON (leaks then fail the run). Points: the first 25 allocations, then
# FAULT_POINTS (default 40) spread over the rest; FAULT_WALK_FULL=1 walks every allocation.
set -u
T=${CLLM_TMP:-/tmp}/fault_cli
rm -rf "$T"
mkdir -p "$T"
source "$CLLM_SRC/tests/lib/check.sh"
B=$CLLM_BIN
CLLM_FAULT_REPORT=1 "$B" cpuinfo 2>&1 | grep -q '^cllm-fault:' || {
    echo "skipped: $B is not a -DCLLM_FAULT_INJECT=ON build"
    exit 77
}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
HEAD=25
SPREAD=${FAULT_POINTS:-40}
total_points=0

allocs() { # allocs CMD...: allocations one clean run makes
    CLLM_FAULT_REPORT=1 "$@" 2>&1 > /dev/null | sed -n 's/^cllm-fault: \([0-9]*\) allocations.*/\1/p' | tail -1
}
points() { # points TOTAL: the N to fail
    local total=$1
    if [ "${FAULT_WALK_FULL:-0}" = 1 ] || [ $total -le $((HEAD + SPREAD)) ]; then
        seq 1 $total
    else
        seq 1 $HEAD
        awk -v h=$HEAD -v t=$total -v s=$SPREAD 'BEGIN { for (i = 0; i < s; i++) printf "%d\n", h + 1 + i * (t - h) / s }'
    fi
}
# walk NAME CLEANUP_CMD -- CMD...: fails each point of CMD in turn
walk() {
    local name=$1 cleanup=$2
    shift 3
    eval "$cleanup"
    local total
    total=$(allocs "$@")
    eval "$cleanup"
    [ -n "$total" ] && [ "$total" -gt 0 ] || { bad "$name: no allocation count"; return; }
    local n pts=0 errs=0 tolerated=0
    for n in $(points $total); do
        if declare -F "$1" > /dev/null; then
            CLLM_FAULT_ALLOC=$n "$@" > "$T/out" 2> "$T/err"
        else
            CLLM_FAULT_ALLOC=$n timeout 120 "$@" > "$T/out" 2> "$T/err"
        fi
        local rc=$?
        pts=$((pts + 1))
        if grep -qE "AddressSanitizer|LeakSanitizer|runtime error:" "$T/err"; then
            bad "$name, allocation $n failed: sanitizer report"
            grep -m5 -E "ERROR|SUMMARY|runtime error|#[0-3] " "$T/err"
        elif [ $rc = 0 ]; then
            tolerated=$((tolerated + 1))
            [ -n "${CHECK_NO_OUT:-}" ] && ! "$B" verify "$CHECK_NO_OUT" > /dev/null 2>&1 &&
                bad "$name, allocation $n: exit 0 but $CHECK_NO_OUT does not verify"
        elif [ $rc = 1 ] && [ -s "$T/err" ]; then
            errs=$((errs + 1))
            [ -n "${CHECK_NO_OUT:-}" ] && [ -e "$CHECK_NO_OUT" ] && bad "$name, allocation $n: exit 1 but $CHECK_NO_OUT exists"
        else
            bad "$name, allocation $n failed: exit $rc: $(tail -c 300 "$T/err")"
        fi
        eval "$cleanup"
    done
    echo "$name: $total allocations, $pts points failed: $errs exit 1 with a message, $tolerated tolerated (exit 0)"
    total_points=$((total_points + pts))
}

walk "generate (model + tokenizer load, template, forward)" ":" -- \
    "$B" generate "$CLLM_SRC/models/tiny" -p "Once upon a time" -n 4
"$B" synth --config "$CLLM_SRC/configs/tiny.json" --dtype bf16 "$T/syn" -q || bad "synth"
CHECK_NO_OUT="$T/q" walk "quantize w4a16" "rm -rf $T/q $T/q.tmp-*" -- \
    "$B" quantize "$T/syn" "$T/q" --scheme w4a16 -g 32 -q
# serve start-up: exit 1 with a message, or it starts (then the probe's SIGTERM drains it: exit 0)
serve_probe() {
    "$B" serve "$CLLM_SRC/models/tiny" --port $((20000 + RANDOM % 12000)) --threads 1 \
        --kv-cache-memory 2MiB --max-model-len 512 --stats-interval 0 &
    local p=$!
    for _ in $(seq 30); do kill -0 $p 2> /dev/null || break; sleep 0.1; done
    kill -TERM $p 2> /dev/null
    wait $p
}
SPREAD=10 HEAD=10 walk "serve start-up" ":" -- serve_probe
echo "fault_cli: $total_points injection points"
check_exit
