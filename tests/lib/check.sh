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
# check_exit ends a script with $fail. A passing script's scratch folder ($T, when it is a folder of
# its own under CLLM_TMP) is removed: the suite's synthetic models add up to ~2.6 GB, more than a CI
# machine may have free (stop 47 failed on a full disk). A failing script keeps its folder for a
# look; CLLM_KEEP_TMP=1 keeps every one.
check_exit() {
  if [ "$fail" = 0 ] && [ -z "${CLLM_KEEP_TMP:-}" ] && [ -n "${CLLM_TMP:-}" ] && [ -n "${T:-}" ]; then
    case "$T" in "$CLLM_TMP"/?*) rm -rf -- "$T" ;; esac
  fi
  exit "$fail"
}
