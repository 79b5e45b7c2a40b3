# Cross build for AArch64 on an x86-64 Debian host (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross),
# tests run under qemu-user through CMAKE_CROSSCOMPILING_EMULATOR; qemu reads the CPU model from
# QEMU_CPU in the environment (tests/kernels/arm_kernels.sh runs the tests with "max" and
# "cortex-a57"). Used with -DCLLM_KERNELS_ONLY=ON: the other modules need libraries (jansson, pcre2,
# microhttpd, curl, xxhash) that have no aarch64 copy on the host.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
if(NOT CMAKE_C_COMPILER)
  set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
endif()
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
find_program(CLLM_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(CLLM_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${CLLM_QEMU_AARCH64})
endif()
