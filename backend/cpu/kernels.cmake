# backend/cpu/kernels.cmake — library ds4_cpu_kernels (the hot CPU kernels).
# Included by backend/CMakeLists.txt (and, as a fallback, by tests/kernels and bench/kernels/);
# defines the target once. SIMD files get their ISA flags here and are reached only through
# runtime dispatch (backend/cpu/kernels.cpp). No file enables FMA contraction: the global
# -ffp-contract=off stays in force and the kernels never call fmadd intrinsics.
if(TARGET ds4_cpu_kernels)
  return()
endif()
set(_k ${CMAKE_CURRENT_LIST_DIR})
set(DS4_CPU_KERNEL_SRCS
    ${_k}/kernels.cpp
    ${_k}/kernels_scalar.cpp
    ${_k}/kernels_avx2.cpp
    ${_k}/kernels_avx512.cpp)
# Elsewhere the SIMD files compile to "not available" tables.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set_source_files_properties(${_k}/kernels_avx2.cpp PROPERTIES COMPILE_OPTIONS "-mavx2;-mf16c")
  set_source_files_properties(${_k}/kernels_avx512.cpp PROPERTIES COMPILE_OPTIONS
      "-mavx2;-mf16c;-mavx512f;-mavx512bw;-mavx512vl;-mavx512dq;-mavx512vnni")
endif()
ds4_library(cpu_kernels SOURCES ${DS4_CPU_KERNEL_SRCS} DEPS quant core)
unset(_k)
