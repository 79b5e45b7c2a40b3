# Sourced by the end-to-end scripts (tests/*.sh; this folder is not globbed as a test). Needs T,
# the script's scratch directory. The script ends with `exit $fail`.
fail=0
ok()  { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
expect_rc() { # expect_rc RC DESC CMD...: CMD's output kept in $T/out, shown on failure
  local want=$1 desc=$2; shift 2
  "$@" >"$T/out" 2>&1; local rc=$?
  if [ "$rc" = "$want" ]; then ok "$desc (rc $rc)"; else bad "$desc: rc $rc, want $want"; cat "$T/out"; fi
}
