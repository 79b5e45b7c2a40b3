#!/bin/bash
# A rank killed mid-run under tensor parallel: the other ranks (blocked in a collective) and
# mpirun exit non-zero within 10 s, for both launch paths (mpirun -np 3 cllm ...; cllm ...
# re-launching itself through mpirun); a rank stopped with SIGSTOP (a hang) likewise, through the
# collective watchdog (CLLM_TP_TIMEOUT_S=3 here); mpirun itself SIGKILLed: the orphaned ranks
# exit by themselves. Skipped (77) without mpirun or in a build without MPI.
set -u
BIN=${CLLM_BIN:?}; SRC=${CLLM_SRC:?}; T=${CLLM_TMP:-/tmp}/tp_kill
rm -rf "$T"; mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
. "$SRC/tests/lib/tp.sh"
tp_require
M=$T/m
"$BIN" synth -q --config "$SRC/tests/dist/tiny-tp3.json" "$M" >/dev/null 2>&1 || { bad synth; exit 1; }

# pid of the rank with OMPI_COMM_WORLD_RANK=$2 among the descendants of $1
rank_pid() {
  local p
  for p in $(pgrep -f -- "$BIN generate $M "); do # this test's model only (tests run in parallel)
    [ "$p" = "$1" ] && continue
    tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return; }
  done
}

kill_case() { # desc, rank to kill, signal, command...
  local desc=$1 victim=$2 sig=$3; shift 3
  "$@" >"$T/run.out" 2>&1 &
  local job=$! pid="" i
  for i in $(seq 1 100); do # wait until the ranks are decoding
    pid=$(rank_pid "$job" "$victim"); [ -n "$pid" ] && break; sleep 0.1
  done
  [ -n "$pid" ] || { bad "$desc: rank $victim never started"; kill "$job" 2>/dev/null; wait "$job"; return; }
  # decoding: tokens are coming (a rank stopped while the job starts up is not this case: the
  # start-up exchanges are untimed; slow under ASan)
  for i in $(seq 200); do grep -q '[0-9] [0-9] [0-9]' "$T/run.out" 2>/dev/null && break; sleep 0.1; done
  sleep 0.5
  kill -0 "$job" 2>/dev/null || { bad "$desc: run ended before the kill"; cat "$T/run.out"; return; }
  kill -"$sig" "$pid"
  local t0=$SECONDS
  for i in $(seq 1 100); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then
    bad "$desc: still running 10 s after rank $victim was killed"
    # mpirun and its ranks carry this test's model path: end them all, not just the wrapper
    kill -9 $(pgrep -f -- "$M") "$job" 2>/dev/null
    wait "$job"; return
  fi
  wait "$job"; local rc=$?
  if [ "$rc" != 0 ]; then ok "$desc: exited rc $rc $((SECONDS - t0)) s after the kill"
  else bad "$desc: rc 0 after a rank was killed"; fi
  sleep 0.5
  local left; left=$(pgrep -f -- "$BIN generate $M" | wc -l)
  [ "$left" = 0 ] || bad "$desc: $left ranks left running"
}

# long enough to outlast the kills below (~500 tok/s here on a quiet box), short enough that a
# run this script loses track of ends by itself
GEN=(generate "$M" --tokens 1,2,3 -n 30000 --ignore-eos --ids --tensor-parallel-size 3)
kill_case "mpirun -np 3, rank 1 killed" 1 KILL timeout 60 "${MPI[@]}" -np 3 "$BIN" "${GEN[@]}"
kill_case "self re-launch, rank 2 killed" 2 KILL timeout 60 "$BIN" "${GEN[@]}"
# a rank that hangs (stopped): the others' watchdog (CLLM_TP_TIMEOUT_S=3) ends the run
CLLM_TP_TIMEOUT_S=3 kill_case "mpirun -np 3, rank 1 stopped (hang)" 1 STOP \
  timeout 60 "${MPI[@]}" -x CLLM_TP_TIMEOUT_S -np 3 "$BIN" "${GEN[@]}"
# mpirun itself killed with SIGKILL (it cannot end its ranks): each rank sees its launcher gone
# and exits within the failure bound (10 s), instead of decoding on unattended
"${MPI[@]}" -np 3 "$BIN" "${GEN[@]}" >"$T/run.out" 2>&1 &
MP=$!
for i in $(seq 100); do [ -n "$(rank_pid "$MP" 2)" ] && break; sleep 0.1; done
sleep 1
kill -9 "$MP"; wait "$MP" 2>/dev/null
for i in $(seq 150); do [ -z "$(pgrep -f -- "$BIN generate $M ")" ] && break; sleep 0.1; done
left=$(pgrep -f -- "$BIN generate $M ")
if [ -z "$left" ]; then ok "mpirun killed: every rank exited by itself ($i polls of 0.1 s)"
else bad "mpirun killed: ranks still running after 15 s: $left"; kill -9 $left 2>/dev/null; fi
check_exit
