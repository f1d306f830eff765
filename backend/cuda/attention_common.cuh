// backend/cuda/attention_common.cuh — device helpers shared by attention.cu and indexer.cu.
//
// Role: the canonical 16-lane dot on a half-warp, an ordered block prefix sum, the
// launch-status check and the per-launch query count of the multi-query ops.
// Invariants: half_dot16 is quant::dot_f32's operation sequence exactly (lane j sums elements
// i ≡ j mod 16 of the full 16-groups in order, the tree 8, 4, 2, 1, then the tail in order);
// block_scan_counts is exact integer arithmetic in thread order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "core/status.h"

namespace ds4::cuda::attn {

using detail::kFullMask;

inline constexpr int kMaxBatch = 8;  // queries per launch of the multi-query ops

// Status of the launch just made: an error naming op and shapes when it failed.
inline Status launch_result(const char* op, const char* shapes) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status();
  return resource_error("cuda: %s (%s) failed to launch: %s", op, shapes, cudaGetErrorString(e));
}

// quant::dot_f32(a, b, n) on a half-warp (hl = lane & 15; both halves of the warp call it
// together). The result is valid on hl == 0.
__device__ __forceinline__ float half_dot16(const float* a, const float* b, int n, int hl) {
  float p = 0.0f;
  const int m = n - n % 16;
  for (int i = 0; i < m; i += 16) {
    const float t = a[i + hl] * b[i + hl];
    p = p + t;
  }
  for (int s = 8; s >= 1; s >>= 1) {
    const float o = __shfl_down_sync(kFullMask, p, s, 16);
    p = p + o;
  }
  if (hl == 0) {
    for (int i = m; i < n; ++i) {
      const float t = a[i] * b[i];
      p = p + t;
    }
  }
  return p;
}

// Exclusive prefix sum of v >= 0 over the block in thread order; *total gets the sum.
// warp_sums: shared scratch of 32 ints. Every thread of the block must call it.
__device__ __forceinline__ int block_scan_counts(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  int incl = v;
  for (int s = 1; s < 32; s <<= 1) {
    const int o = __shfl_up_sync(kFullMask, incl, s);
    if (lane >= s) incl += o;
  }
  __syncthreads();  // earlier readers of warp_sums are done
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  int before = 0, all = 0;
  for (int w = 0; w < nwarps; ++w) {
    const int c = warp_sums[w];
    if (w < warp) before += c;
    all += c;
  }
  *total = all;
  return before + incl - v;
}

}  // namespace ds4::cuda::attn
