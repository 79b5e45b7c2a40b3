# Sourced by the end-to-end scripts (tests/*.sh; this folder is not globbed as a test). Needs T,
# the script's scratch directory (for expect_rc). The script ends with `exit $fail`. Every check
# runs its command directly (no eval); a script that skips exits 77 (ctest: skipped).
fail=0
ok()  { echo "ok: $*"; }
bad() { echo "FAIL: $*"; fail=1; }
expect_rc() { # expect_rc RC DESC CMD...: CMD's output kept in $T/out, shown on failure
  local want=$1 desc=$2; shift 2
  "$@" >"$T/out" 2>&1; local rc=$?
  if [ "$rc" = "$want" ]; then ok "$desc (rc $rc)"; else bad "$desc: rc $rc, want $want"; cat "$T/out"; fi
}
expect_eq() { # expect_eq DESC GOT WANT
  if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: want [$3] got [$2]"; fi
}
