# backend/cuda/cuda.cmake — library ds4_cuda: the CUDA backend's kernels and host launchers
# (backend/cuda/cuda_kernels.h). Included by backend/CMakeLists.txt when DS4_CUDA is ON;
# links the CUDA runtime statically, so a binary without a GPU (or driver) still starts and
# reports why the device is unusable.
if(TARGET ds4_cuda)
  return()
endif()
set(_c ${CMAKE_CURRENT_LIST_DIR})
ds4_library(cuda SOURCES
    ${_c}/device.cu
    ${_c}/graph.cu
    ${_c}/quantize.cu
    ${_c}/matvec_quant.cu
    ${_c}/matvec_q8_0_r1.cu
    ${_c}/matvec_q8_0_wide.cu
    ${_c}/matmul_q8_0_tc.cu
    ${_c}/matvec_dense.cu
    ${_c}/matvec_dense_rows.cu
    ${_c}/reduce.cu
    ${_c}/matmul.cu
    ${_c}/attention.cu
    ${_c}/indexer.cu
    ${_c}/hc.cu
    ${_c}/elementwise.cu
    ${_c}/moe.cu
    ${_c}/moe_r1.cu
    ${_c}/moe_rows.cu
  DEPS core quant CUDA::cudart_static)
target_compile_options(ds4_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${DS4_CUDA_FLAGS}>)
unset(_c)
