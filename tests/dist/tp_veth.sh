#!/bin/bash
# Tensor parallel across two "hosts" for real: two network namespaces joined by a veth pair made
# here, addresses assigned here to the two ends (10.213.7.1/.2; nothing outside the namespaces is
# contacted), mpirun in the first launching the second rank's daemon through an rsh agent that
# enters the second namespace, MPI over TCP only (btl tcp,self; no shared memory). Checks:
# logits within 1e-5 of the one-process run and bitwise equal to the shared-memory TP=2 run
# (the reduction order is cllm's, not the transport's); greedy tokens identical.
# Skipped (77) without mpirun/numpy, in a build without MPI, or where namespaces cannot be made.
set -u
BIN=${CLLM_BIN:?}; SRC=${CLLM_SRC:?}; T=${CLLM_TMP:-/tmp}/tp_veth
rm -rf "$T"; mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
. "$SRC/tests/lib/tp.sh"
tp_require ip numpy
A=cllm_tpa_$$ B=cllm_tpb_$$
cleanup() { ip netns del "$A" 2>/dev/null; ip netns del "$B" 2>/dev/null; }
trap cleanup EXIT
if ! ip netns add "$A" 2>/dev/null || ! ip netns add "$B" 2>/dev/null ||
   ! ip link add vtp$$a netns "$A" type veth peer name vtp$$b netns "$B" 2>/dev/null; then
  echo "SKIP: cannot create network namespaces / veth here"; exit 77
fi
ip -n "$A" addr add 10.213.7.1/24 dev vtp$$a && ip -n "$B" addr add 10.213.7.2/24 dev vtp$$b &&
  ip -n "$A" link set vtp$$a up && ip -n "$B" link set vtp$$b up &&
  ip -n "$A" link set lo up && ip -n "$B" link set lo up || { bad "veth set-up"; exit 1; }
echo "$A" >"$T/ns.10.213.7.1"; echo "$B" >"$T/ns.10.213.7.2"
cat >"$T/agent.sh" <<'AG'
#!/bin/sh
# mpirun's rsh agent: "HOST CMD..." runs CMD inside HOST's network namespace
h=$1; shift
exec ip netns exec "$(cat "$(dirname "$0")/ns.$h")" sh -c "$*"
AG
chmod +x "$T/agent.sh"
printf '10.213.7.1 slots=1\n10.213.7.2 slots=1\n' >"$T/hosts"
NET=(ip netns exec "$A" mpirun -np 2 --hostfile "$T/hosts" --mca plm_rsh_agent "$T/agent.sh"
     --mca oob_tcp_if_include 10.213.7.0/24 --mca btl tcp,self --mca btl_tcp_if_include 10.213.7.0/24)
SHM=("${MPI[@]}" -np 2)
[ "$(id -u)" = 0 ] && NET+=(--allow-run-as-root)

M=$T/m
"$BIN" synth -q --config "$SRC/configs/tiny.json" "$M" >/dev/null 2>&1 || { bad synth; exit 1; }
TOK=$(seq -s, 1 7 150)
"$BIN" eval "$M" --tokens "$TOK" --dump-logits "$T/l1.bin" >/dev/null 2>&1 || bad "eval N=1"
timeout 60 "${SHM[@]}" "$BIN" eval "$M" --tokens "$TOK" --tensor-parallel-size 2 \
  --dump-logits "$T/shm.bin" >/dev/null 2>&1 || bad "eval shm N=2"
if timeout 60 "${NET[@]}" -x CLLM_TP_STATS=1 "$BIN" eval "$M" --tokens "$TOK" --tensor-parallel-size 2 \
     --dump-logits "$T/tcp.bin" >"$T/out" 2>&1; then
  ok "eval over TCP between two namespaces"; grep "tp rank" "$T/out"
else bad "eval over TCP"; tail -20 "$T/out"; fi
if $PY - "$T/l1.bin" "$T/tcp.bin" <<'PYEOF'
import sys, numpy as np
a = np.fromfile(sys.argv[1], np.float32).reshape(-1, 512); b = np.fromfile(sys.argv[2], np.float32).reshape(-1, 512)
rel = (np.abs(a - b).max(1) / np.abs(a).max(1)).max(); print("max rel %.3g" % rel); sys.exit(0 if rel <= 1e-5 else 1)
PYEOF
then ok "TCP logits within 1e-5 of N=1"; else bad "TCP logits vs N=1"; fi
cmp -s "$T/shm.bin" "$T/tcp.bin" && ok "TCP logits bitwise = shared-memory TP=2" || bad "TCP != shm logits"
"$BIN" generate "$M" --tokens "$TOK" -n 8 --ids --ignore-eos >"$T/g1" 2>/dev/null
timeout 60 "${NET[@]}" "$BIN" generate "$M" --tokens "$TOK" -n 8 --ids --ignore-eos \
  --tensor-parallel-size 2 >"$T/g2" 2>/dev/null
[ -s "$T/g1" ] && cmp -s "$T/g1" "$T/g2" && ok "greedy tokens over TCP" || bad "greedy tokens over TCP differ"
check_exit
