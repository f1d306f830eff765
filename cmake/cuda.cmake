# cmake/cuda.cmake — enables CUDA for backend/cuda (DS4_CUDA=ON).
# Arch: sm_90a machine code (Hopper: H100/H200) plus compute_90 PTX for later GPUs.
# Numerics are part of correctness (design.md §4): no FMA contraction (--fmad=false), IEEE
# division and square root, denormals kept, no fast math — the CUDA twin of
# -ffp-contract=off -fno-fast-math. DS4_CUDA_FLAGS holds them for every CUDA target.
if(NOT CMAKE_CUDA_COMPILER)
  message(FATAL_ERROR "DS4_CUDA=ON but no CUDA compiler (nvcc) was found; install the CUDA "
                      "toolkit, set CUDACXX, or configure with -DDS4_CUDA=OFF")
endif()
set(CMAKE_CUDA_ARCHITECTURES OFF)  # the -gencode flags below say exactly what is built
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
# 12.1: kernel parameters past 4 KB (the fused sink attention passes its queries by value).
if(CUDAToolkit_VERSION VERSION_LESS 12.1)
  message(FATAL_ERROR "DS4_CUDA=ON needs CUDA 12.1 or later (found ${CUDAToolkit_VERSION}); configure with "
                      "-DDS4_CUDA=OFF for the CPU build")
endif()
set(CMAKE_CUDA_FLAGS_RELEASE "-O3")
# C++20 like the host code: CMake 3.25 knows no CUDA20 dialect flag for nvcc 13, so say it.
if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(DS4_CUDA_FLAGS
    -gencode=arch=compute_90a,code=sm_90a
    -gencode=arch=compute_90,code=compute_90
    --fmad=false -prec-div=true -prec-sqrt=true -ftz=false
    -Xcompiler=-ffp-contract=off,-fno-fast-math)
message(STATUS "ds4: CUDA backend ON (${CMAKE_CUDA_COMPILER}, CUDA ${CUDAToolkit_VERSION})")
