# cmake/cuda_detect.cmake — sets DS4_CUDA_DEFAULT: ON when a CUDA compiler is available.
# Looks at CUDACXX / PATH (check_language) and at the toolkit's usual home, so a machine with
# the toolkit installed but not on PATH (CI) still compiles the CUDA code.
include(CheckLanguage)
if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
  find_program(DS4_NVCC nvcc HINTS /usr/local/cuda/bin)
  if(DS4_NVCC)
    set(CMAKE_CUDA_COMPILER ${DS4_NVCC} CACHE FILEPATH "CUDA compiler")
  endif()
endif()
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  set(DS4_CUDA_DEFAULT ON)
else()
  set(DS4_CUDA_DEFAULT OFF)
endif()
