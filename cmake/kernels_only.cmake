# -DCLLM_KERNELS_ONLY=ON (included by CMakeLists.txt, which returns after it): the kernel tiers and
# what their unit tests use, with no third-party library, so the tree cross-compiles with a bare
# toolchain (cmake/aarch64-linux-gnu.cmake). Sources: base (minus strmap.c and http.c: xxhash and
# curl), the kernels, model/qformat.c, quant/quant.c, quant/gptq.c (the tests' RTN/GPTQ helpers;
# their checkpoint and model-side functions are never called and --gc-sections drops them).
# Tests: test_quant_kern, test_quant_a8, test_q16_kern, test_kern, test_gdn_chunk (ctest, run
# through the emulator when cross-compiling) and the cross-ISA probe kern_xisa (run by arm_kernels.sh).
file(GLOB KO_SOURCES ${CMAKE_SOURCE_DIR}/src/base/*.c ${CMAKE_SOURCE_DIR}/src/kernels/*.c)
list(FILTER KO_SOURCES EXCLUDE REGEX ".*/(strmap|http)\\.c$")
list(APPEND KO_SOURCES ${CMAKE_SOURCE_DIR}/src/model/qformat.c ${CMAKE_SOURCE_DIR}/src/quant/quant.c
     ${CMAKE_SOURCE_DIR}/src/quant/gptq.c)
# both ISAs' files: cllm_isa_sources keeps this target's, with the main build's flags
file(GLOB KO_ARCH ${CMAKE_SOURCE_DIR}/src/kernels/x86/*.c ${CMAKE_SOURCE_DIR}/src/kernels/arm/*.c)
list(APPEND KO_SOURCES ${KO_ARCH})
include(${CMAKE_SOURCE_DIR}/cmake/isa_flags.cmake)
cllm_isa_sources(KO_SOURCES)
# qformat.c includes <jansson.h> for its config readers: the host's headers are arch-independent
set(KO_INC ${CMAKE_BINARY_DIR}/host-include)
file(MAKE_DIRECTORY ${KO_INC})
foreach(h jansson.h jansson_config.h)
  if(NOT EXISTS /usr/include/${h})
    message(FATAL_ERROR "CLLM_KERNELS_ONLY: /usr/include/${h} missing (libjansson-dev)")
  endif()
  file(CREATE_LINK /usr/include/${h} ${KO_INC}/${h} SYMBOLIC)
endforeach()
add_compile_options(-ffunction-sections -fdata-sections)
add_library(cllm_kern STATIC ${KO_SOURCES})
target_include_directories(cllm_kern PUBLIC ${CMAKE_SOURCE_DIR}/src)
target_include_directories(cllm_kern SYSTEM AFTER PUBLIC ${KO_INC})
target_link_libraries(cllm_kern PUBLIC m Threads::Threads)
enable_testing()
foreach(name test_quant_kern test_quant_a8 test_q16_kern test_kern test_gdn_chunk test_act kern_xisa)
  add_executable(${name} ${CMAKE_SOURCE_DIR}/tests/kernels/${name}.c)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR}/tests/lib)
  target_link_libraries(${name} PRIVATE cllm_kern)
  if(CMAKE_CROSSCOMPILING)
    target_link_options(${name} PRIVATE -static -Wl,--gc-sections)
  else()
    target_link_options(${name} PRIVATE -Wl,--gc-sections)
  endif()
  if(name MATCHES "^test_")
    add_test(NAME ${name} COMMAND ${name}) # no CLLM_BIN: test_gdn_chunk's end-to-end part skips
  endif()
endforeach()
