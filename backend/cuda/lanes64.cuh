// backend/cuda/lanes64.cuh — the canonical 64-lane reductions of quant/dot.h as device pieces.
//
// Role: one definition of the per-step operations and the closing tree that rms_norm
// (reduce.cu), the dense matvecs (matvec_dense.cu) and the fused HC kernels (hc.cu) share, so
// their bits cannot drift apart. A reduction over n elements keeps 64 partials: partial l sums
// the elements i ≡ l mod 64 in increasing i (the n % 64 tail included), then the halving tree
// 32, 16, 8, 4, 2, 1 adds p[l + h] into p[l].
// Invariants: every operation is separately rounded (__dmul_rn / __dadd_rn, __fmul_rn /
// __fadd_rn: nothing for the compiler to contract); tree64 is called by all 32 lanes of a
// warp, lane t holding p[t] and p[t + 32], and its result is valid on lane 0.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"

namespace ds4::cuda::detail {

// One step of a sum-of-squares partial (quant::sumsq_f64): p + double(x)·double(x).
__device__ __forceinline__ double sumsq_step(double p, float x) {
  const double v = static_cast<double>(x);
  return __dadd_rn(p, __dmul_rn(v, v));
}

// One step of a dot partial (quant::dot_f16 / dot_f32): p + w·x in f32.
__device__ __forceinline__ float dot_step(float p, float w, float x) { return __fadd_rn(p, __fmul_rn(w, x)); }

// The halving tree: h = 32 in-thread (lo = p[t], hi = p[t + 32]), then 16, 8, 4, 2, 1 by
// shuffles (lane t gets p[t + h]). All 32 lanes call it; lane 0 holds the total.
__device__ __forceinline__ double tree64(double lo, double hi) {
  double p = __dadd_rn(lo, hi);
#pragma unroll
  for (int h = 16; h >= 1; h /= 2) p = __dadd_rn(p, __shfl_down_sync(kFullMask, p, h));
  return p;
}
__device__ __forceinline__ float tree64(float lo, float hi) {
  float p = __fadd_rn(lo, hi);
#pragma unroll
  for (int h = 16; h >= 1; h /= 2) p = __fadd_rn(p, __shfl_down_sync(kFullMask, p, h));
  return p;
}

// rms_norm_row's scale from the row's sum of squares: 1 / sqrt(float(sumsq / n) + eps).
__device__ __forceinline__ float rms_scale(double sumsq, int64_t n, float eps) {
  return 1.0f / sqrtf(static_cast<float>(sumsq / static_cast<double>(n)) + eps);
}

}  // namespace ds4::cuda::detail
