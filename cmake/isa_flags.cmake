# cllm_isa_sources(<list variable>): the one place that knows the per-file ISA flags. Included by
# CMakeLists.txt (the main build) and cmake/kernels_only.cmake (the kernels-only and AArch64 cross
# builds). Walks the source list in the named variable and, by file name:
#   *_avx512.c     x86-64: AVX-512 F/BW/VL/DQ + VNNI (+ AVX2/FMA/F16C); VNNI is used only by the
#                  *_vnni functions, which dispatch calls when the CPU reports avx512vnni
#   *_avx2.c       x86-64: AVX2 + FMA + F16C (kernels/x86/ and base/half_avx2.c)
#   *_dot_neon.c   AArch64: ARMv8.2-A + dot product; SDOT kernels, called only with HWCAP_ASIMDDP
#   *_neon.c       AArch64: baseline Advanced SIMD, no flag
# Files for another ISA than CMAKE_SYSTEM_PROCESSOR are removed from the list (PARENT_SCOPE).
# set_source_files_properties applies in the calling directory: both callers are the top level.
function(cllm_isa_sources var)
  set(x86 OFF)
  set(arm OFF)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
    set(x86 ON)
  elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
    set(arm ON)
  endif()
  set(kept "")
  foreach(f ${${var}})
    if(f MATCHES "_avx512\\.c$")
      if(NOT x86)
        continue()
      endif()
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS
        "-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni;-mavx2;-mfma;-mf16c")
    elseif(f MATCHES "_avx2\\.c$")
      if(NOT x86)
        continue()
      endif()
      set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
    elseif(f MATCHES "_neon\\.c$")
      if(NOT arm)
        continue()
      endif()
      if(f MATCHES "_dot_neon\\.c$")
        set_source_files_properties(${f} PROPERTIES COMPILE_OPTIONS "-march=armv8.2-a+dotprod")
      endif()
    endif()
    list(APPEND kept ${f})
  endforeach()
  set(${var} ${kept} PARENT_SCOPE)
endfunction()
