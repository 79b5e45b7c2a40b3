#!/usr/bin/env bash
# The NEON kernel tier (src/kernels/arm/) on an x86 host: a CMake cross build
# (cmake/aarch64-linux-gnu.cmake, -DCLLM_KERNELS_ONLY=ON: the kernel sources, the few base/model/
# quant files they and their tests use, and tests/kernels/test_quant_kern.c, test_quant_a8.c,
# test_q16_kern.c, test_kern.c, test_gdn_chunk.c, test_act.c as static aarch64 binaries), whose ctest runs them
# under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR) twice: `-cpu max`
# (dot product: the neon and neon-dot tables, cllm_kern_tiers, so SDOT and vmull/vpadal W4A8) and
# `-cpu cortex-a57` (plain ARMv8.0: the neon table only; the act_bits 16 path is baseline NEON
# on both). The tests compare the NEON
# tier with the scalar ref bitwise on odd shapes (sym/asym/random zeros, f16/bf16 scales, n_tok
# 1..17 and more, column sub-ranges, token alone vs in a batch), so this also checks that the ref
# kernels agree with the dequantized oracle on AArch64.
# If clang is present, the NEON files also get a clang --target=aarch64 -Werror syntax check.
# Timing under qemu means nothing; only correctness is checked here.
#
# Needs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user (scripts/install-deps.sh);
# without them it exits 77, which ctest reports as skipped. On an AArch64 host the normal build
# and its unit tests already cover the tier; this script then also skips.
set -u
SRC=${CLLM_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
T=${CLLM_TMP:-/tmp}/arm_kernels
CC=${CLLM_ARM_CC:-aarch64-linux-gnu-gcc}
QEMU=""
for q in qemu-aarch64 qemu-aarch64-static; do
  command -v "$q" >/dev/null 2>&1 && { QEMU=$q; break; }
done
skip() { echo "SKIP: $*"; exit 77; }
case "$(uname -m)" in aarch64 | arm64) skip "AArch64 host: the native build tests the NEON tier" ;; esac
command -v "$CC" >/dev/null 2>&1 || skip "no $CC (apt-get install gcc-aarch64-linux-gnu)"
[ -n "$QEMU" ] || skip "no qemu-aarch64 (apt-get install qemu-user)"
[ -f /usr/include/jansson.h ] && [ -f /usr/include/jansson_config.h ] ||
  skip "no /usr/include/jansson.h (libjansson-dev)"
command -v cmake >/dev/null 2>&1 || skip "no cmake"

rm -rf "$T" && mkdir -p "$T"
. "$SRC/tests/lib/check.sh"
t0=$(date +%s)

# The cross build is CMake's: the toolchain file names the compiler and qemu as
# CMAKE_CROSSCOMPILING_EMULATOR, CLLM_KERNELS_ONLY builds the kernels and their tests only
# (cmake/kernels_only.cmake: the other modules need libraries with no aarch64 copy here).
B="$T/build"
if cmake -S "$SRC" -B "$B" -DCMAKE_TOOLCHAIN_FILE="$SRC/cmake/aarch64-linux-gnu.cmake" \
  -DCMAKE_C_COMPILER="$CC" -DCLLM_KERNELS_ONLY=ON -DCMAKE_BUILD_TYPE=Release >"$T/cmake.log" 2>&1; then
  ok "configured ($CC $("$CC" -dumpfullversion), emulator $QEMU)"
else
  bad "cmake configure"; cat "$T/cmake.log"; exit 1
fi
if cmake --build "$B" -j2 >"$T/build.log" 2>&1; then
  ok "cross-compiled the kernels and their tests"
else
  bad "cross build"; tail -n 60 "$T/build.log"; exit 1
fi
# for the clang syntax check below
CFLAGS=(-std=c11 -O3 -DNDEBUG -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wno-unused-parameter
        -Wno-missing-field-initializers -Werror -I"$SRC/src")

tests=(test_quant_kern test_quant_a8 test_q16_kern test_kern test_gdn_chunk test_act)
# cpu model -> the neon table the tests must report having checked
for spec in "max:neon-dot" "cortex-a57:neon"; do
  cpu=${spec%%:*} want=${spec#*:}
  for t in "${tests[@]}"; do
    # through ctest and the emulator; no CLLM_BIN: test_gdn_chunk's end-to-end part would run
    # the x86 binary, not ARM code
    if env -u CLLM_BIN QEMU_CPU="$cpu" ctest --test-dir "$B" -R "^$t\$" -V >"$T/$t.$cpu.out" 2>&1; then
      ok "$t on -cpu $cpu: $(grep -E '^[0-9]+: ' "$T/$t.$cpu.out" | tail -n 1 | sed -E 's/^[0-9]+: //')"
    else
      bad "$t on -cpu $cpu"; tail -n 30 "$T/$t.$cpu.out"
    fi
  done
  # the NEON tier really ran (not only ref): each test names the tiers it checked
  grep -q "+ $want tiers checked" "$T/test_quant_a8.$cpu.out" &&
    grep -q "+ $want tiers checked" "$T/test_quant_kern.$cpu.out" &&
    grep -q "+ $want tiers checked" "$T/test_q16_kern.$cpu.out" &&
    grep -q "tier $want checked" "$T/test_kern.$cpu.out" &&
    grep -qE "^([0-9]+: )?$want gdn_chunk vs ref step" "$T/test_gdn_chunk.$cpu.out" &&
    grep -qE "^([0-9]+: )?$want silu_mul: max" "$T/test_act.$cpu.out" &&
    ok "-cpu $cpu used the $want table" || bad "-cpu $cpu: the $want table was not tested"
done

# Same bits on both ISAs: tests/kern_xisa.c through the host build's avx2 table and through the
# neon table (ref lines too). Needs the x86 build's library (next to CLLM_BIN) and an AVX2 CPU.
LIBA=""
[ -n "${CLLM_BIN:-}" ] && LIBA="$(dirname "$CLLM_BIN")/libcllm_core.a"
if [ -n "$LIBA" ] && [ -f "$LIBA" ] && command -v cc >/dev/null 2>&1; then
  if cc -std=c11 -O2 -D_GNU_SOURCE -I"$SRC/src" "$SRC/tests/kernels/kern_xisa.c" "$LIBA" -lm -lpthread \
    -o "$T/kern_xisa_host" 2>"$T/host.err"; then
    "$T/kern_xisa_host" >"$T/xisa.host" 2>&1
    if grep -q "^no tier" "$T/xisa.host"; then
      echo "note: no AVX2 on this host, cross-ISA comparison not run"
    else
      for cpu in max cortex-a57; do
        "$QEMU" -cpu "$cpu" "$B/kern_xisa" >"$T/xisa.$cpu" 2>&1
        if cmp -s "$T/xisa.host" "$T/xisa.$cpu"; then
          ok "-cpu $cpu: neon == avx2 bitwise (float matmuls, gdn_step, matmul_q, qact8, qact16; ref too)"
        else
          bad "-cpu $cpu: neon and avx2 outputs differ"; diff "$T/xisa.host" "$T/xisa.$cpu"
        fi
      done
    fi
  else
    bad "host build of kern_xisa"; cat "$T/host.err"
  fi
else
  echo "note: no x86 build library (CLLM_BIN unset or libcllm_core.a missing), cross-ISA comparison not run"
fi

# clang sees different things than gcc; syntax only (no aarch64 clang runtime needed)
if command -v clang >/dev/null 2>&1; then
  for f in "$SRC"/src/kernels/arm/*.c "$SRC"/src/kernels/kernels.c "$SRC"/src/base/cpu.c; do
    extra=()
    case "$f" in *_dot_neon.c) extra=(-march=armv8.2-a+dotprod) ;; esac
    clang --target=aarch64-linux-gnu -isystem /usr/aarch64-linux-gnu/include -fsyntax-only \
      "${CFLAGS[@]}" "${extra[@]}" "$f" 2>"$T/clang.err" || { bad "clang $f"; cat "$T/clang.err"; }
  done
  [ "$fail" = 0 ] && ok "clang --target=aarch64-linux-gnu -fsyntax-only on the NEON files"
fi

echo "arm_kernels: $(($(date +%s) - t0)) s"
[ "$fail" = 0 ] && echo "arm_kernels: all ok" || echo "arm_kernels: FAILED"
check_exit
