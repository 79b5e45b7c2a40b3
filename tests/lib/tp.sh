# Sourced by the tensor-parallel e2e scripts (tests/dist/*.sh), after check.sh. Needs BIN and T.
# tp_require [curl|ip|python3|numpy]...: skips the script (exit 77, saying why) without mpirun,
# without one of the named tools, or when cllm was built without MPI (cli/cli_tp.c says so when
# parsing --tensor-parallel-size, before it looks at the model). Then sets PY (the one python),
# MPI (an mpirun command line for ranks on this host: as root it needs --allow-run-as-root) and
# the environment every rank needs. A script that also needs OMPI_ALLOW_RUN_AS_ROOT exports it
# itself: the others run cllm's own re-launch as root without it, so they check that cllm passes
# --allow-run-as-root there.
tp_skip() { echo "SKIP: $*"; exit 77; }
tp_require() {
  # OpenMPI leaves its components' allocations unfreed at MPI_Finalize: under an ASan build
  # LeakSanitizer would fail every rank on them (none of cllm's own frames show up in those reports)
  [ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
  PY=/usr/bin/python3
  command -v mpirun >/dev/null || tp_skip "no mpirun (apt install openmpi-bin)"
  local need
  for need in "$@"; do
    case $need in
      curl) command -v curl >/dev/null || tp_skip "no curl" ;;
      ip) command -v ip >/dev/null || tp_skip "no ip (iproute2)" ;;
      python3) [ -x $PY ] || tp_skip "no python3" ;;
      numpy) $PY -c 'import numpy' 2>/dev/null || tp_skip "no numpy" ;;
      *) echo "FAIL: tp_require: unknown requirement '$need'"; exit 1 ;;
    esac
  done
  "$BIN" eval /nonexistent --tokens 1 --tensor-parallel-size 2 >"$T/tp_require.out" 2>&1
  grep -q "built without MPI" "$T/tp_require.out" && tp_skip "cllm built without MPI"
  MPI=(mpirun --oversubscribe --bind-to none)
  [ "$(id -u)" = 0 ] && MPI+=(--allow-run-as-root)
  export OMPI_MCA_btl_vader_single_copy_mechanism=none # containers without CMA / ptrace rights
}
