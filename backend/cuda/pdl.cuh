// backend/cuda/pdl.cuh — programmatic dependent launch (Hopper): a kernel launched with it may
// start while the kernel before it on the stream is still running, do the work that depends on
// nothing that kernel writes (stream its weights into shared memory), then wait for it.
//
// Role: pdl_wait / pdl_trigger / pdl_enter for kernels, launch_pdl for their launchers. Two
// process-wide switches, same bits either way: cuda_kernels.h's set_pdl (--cuda-pdl, on by
// default) launches the wide Q8_0 kernel with it (weights streamed before its wait), and
// set_pdl_all (--cuda-pdl-all, on by default) every other kernel, each opening with pdl_enter.
// Invariants:
//  * A kernel launched with launch_pdl(on = true) calls pdl_wait() in every block before it
//    reads anything an earlier kernel of the stream writes, and before it writes anything (so
//    its completion still implies its predecessor's: a later kernel that waits on it may read
//    what the one before wrote). pdl_wait returns at once in a kernel launched without it.
//  * pdl_trigger() only lets the next kernel be scheduled early; it never makes this kernel's
//    writes visible: that is pdl_wait's job, in the next kernel. Any kernel may call it.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace ds4::cuda {

// Whether the kernels other than the wide Q8_0 one are launched with PDL (set_pdl_all).
bool pdl_all();

}  // namespace ds4::cuda

namespace ds4::cuda::detail {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// A kernel's first statement: wait for the kernel before (a no-op when not launched with PDL),
// then let the next one be scheduled. Triggering after the wait keeps at most one grid waiting
// ahead of the running one; a trigger before it let every queued grid launch at once, each
// holding SM slots while it waited (measured: no gain, docs/CUDA.md).
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_trigger();
}

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-stream-serialization
// attribute when `on`. Errors are the launch's (cudaGetLastError sees them, as after <<<>>>).
template <typename... P, typename... A>
cudaError_t launch_pdl(bool on, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                       A&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  if (on) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}

}  // namespace ds4::cuda::detail
