// backend/cuda/lanes64.cuh — the canonical 64-lane reductions of quant/dot.h as device pieces.
//
// Role: one definition of the per-step operations and the closing tree that rms_norm
// (reduce.cu), the dense matvecs (matvec_dense.cu) and the fused HC kernels (hc.cu) share, so
// their bits cannot drift apart. A reduction over n elements keeps 64 partials: partial l sums
// the elements i ≡ l mod 64 in increasing i (the n % 64 tail included), then the halving tree
// 32, 16, 8, 4, 2, 1 adds p[l + h] into p[l].
// Staged rows (reduce.cu's staged rms_norm, hc.cu's staged HC kernel): the block copies the
// row into shared memory with cp.async in kStageParts parts (one commit group each, part c
// covers [c·part, (c+1)·part), part ≡ 0 mod 64), and the 64 sum-of-squares chains run on
// lanes 0-15 of warps 0-3 (chain l on thread (l / 16)·32 + l % 16, so the f32 -> f64
// conversions, 16 per clock per SM, spread over the four sub-partitions) while later parts
// are still on their way.
// Invariants: every operation is separately rounded (__dmul_rn / __dadd_rn, __fmul_rn /
// __fadd_rn: nothing for the compiler to contract); tree64 is called by all 32 lanes of a
// warp, lane t holding p[t] and p[t + 32] (tree64_pairs: p[2t] and p[2t + 1]), and its result
// is valid on lane 0.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cp_async.cuh"

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

// The same tree when lane t holds p[2t] (lo) and p[2t + 1] (hi) (a thread owning two adjacent
// columns of each 64-column step): h = 32, 16, 8, 4, 2 by shuffles (p[j + h] is lane t + h/2's
// value of the same parity), h = 1 in-thread (lane 0: p[0] + p[1]). All 32 lanes call it; lane
// 0 holds the total.
__device__ __forceinline__ float tree64_pairs(float lo, float hi) {
#pragma unroll
  for (int d = 16; d >= 1; d /= 2) {
    lo = __fadd_rn(lo, __shfl_down_sync(kFullMask, lo, d));
    hi = __fadd_rn(hi, __shfl_down_sync(kFullMask, hi, d));
  }
  return __fadd_rn(lo, hi);
}

// rms_norm_row's scale from the row's sum of squares: 1 / sqrt(float(sumsq / n) + eps).
__device__ __forceinline__ float rms_scale(double sumsq, int64_t n, float eps) {
  return 1.0f / sqrtf(static_cast<float>(sumsq / static_cast<double>(n)) + eps);
}

// The block's barrier, then warp 0's tree of the 64 partials sq_s and rms_scale into *s_scale,
// then a barrier: every thread of the block calls it and gets the scale.
__device__ __forceinline__ float block_scale_of_partials(const double* sq_s, int64_t n, float eps, float* s_scale) {
  __syncthreads();
  if (threadIdx.x < 32) {
    const double ss = tree64(sq_s[threadIdx.x], sq_s[threadIdx.x + 32]);
    if (threadIdx.x == 0) *s_scale = rms_scale(ss, n, eps);
  }
  __syncthreads();
  return *s_scale;
}

// rms_norm_row's scale of the row x[0, n) in global memory, by the whole block (blockDim >= 32;
// thread t runs chains t, t + blockDim, ... < 64 straight from x, then warp 0 the tree): every
// thread calls it (barriers) and gets the scale. sq_s: 64 doubles, s_scale: one float, shared.
__device__ __forceinline__ float block_rms_scale(const float* x, int n, float eps, double* sq_s, float* s_scale) {
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  for (int l = tid; l < 64; l += nt) {
    double p = 0.0;
    for (int i = l; i < n; i += 64) p = sumsq_step(p, __ldg(x + i));
    sq_s[l] = p;
  }
  return block_scale_of_partials(sq_s, n, eps, s_scale);
}

// ---- Staged rows --------------------------------------------------------------------------

inline constexpr int kStageParts = 4;  // cp.async groups of a staged row (x); callers add one

// Elements per part: ceil(n / kStageParts) rounded up to a multiple of 64 (parts start on a
// lane-0 element, and on a 16-byte boundary of the row).
__host__ __device__ inline int stage_part(int n) { return ((n + 64 * kStageParts - 1) / (64 * kStageParts)) * 64; }

// The statistic's threads: chain l on thread (l / 16)·32 + l % 16 (blockDim >= 128).
__device__ __forceinline__ bool stat_thread(int tid) { return tid < 128 && (tid & 31) < 16; }
__device__ __forceinline__ int stat_lane(int tid) { return (tid & 15) + 16 * (tid >> 5); }

// Floats [lo, hi) of src (global) to dst (shared, same indices) by threads t = 0..nt-1 (the
// block's, by default), with cp.async: 16-byte copies when vec (src 16-byte aligned, dst too,
// lo ≡ 0 mod 4), 4-byte copies otherwise and for the last hi % 4. The caller commits the group.
__device__ __forceinline__ void stage_f32(float* dst, const float* src, int lo, int hi, bool vec, int t, int nt) {
  int s = lo;
  if (vec) {
    const int q1 = hi / 4;
    for (int q = lo / 4 + t; q < q1; q += nt) cp_async16_cg(dst + 4 * q, src + 4 * q);
    s = q1 * 4;
  }
  for (int i = s + t; i < hi; i += nt) cp_async4(dst + i, src + i);
}
__device__ __forceinline__ void stage_f32(float* dst, const float* src, int lo, int hi, bool vec) {
  stage_f32(dst, src, lo, hi, vec, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
}

// Waits until at most `pending` (0..4) of this thread's cp.async groups are outstanding.
__device__ __forceinline__ void cp_async_wait_pending(int pending) {
  switch (pending) {
    case 0: cp_async_wait_group<0>(); break;
    case 1: cp_async_wait_group<1>(); break;
    case 2: cp_async_wait_group<2>(); break;
    case 3: cp_async_wait_group<3>(); break;
    default: cp_async_wait_group<4>(); break;
  }
}

__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }

// The chain p + term(src[0]) + term(src[64]) + ... over cnt steps (src[64·k], k < cnt), in k
// order, software-pipelined: the next 8 steps' loads and terms are issued before this 8's
// adds, so the chain waits on its adds alone, not on a shared-memory round trip per 8 steps
// (the same operations in the same order as the plain loop: the same bits).
template <class T, class Term>
__device__ __forceinline__ T chain64(T p, const float* src, int cnt, Term term) {
  int k = 0;
  if (cnt >= 8) {
    T v[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = term(src[64 * j]);
    for (k = 8; k + 8 <= cnt; k += 8) {
      T u[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) u[j] = term(src[64 * (k + j)]);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        p = add_rn(p, v[j]);
        v[j] = u[j];
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) p = add_rn(p, v[j]);
  }
  for (; k < cnt; ++k) p = add_rn(p, term(src[64 * k]));
  return p;
}

// Lane l's sum-of-squares steps over the staged elements [lo, hi) (lo ≡ 0 mod 64), in
// increasing i: the chain's next stretch of quant::sumsq_f64's order (sumsq_step's operations).
__device__ __forceinline__ double sumsq_range(double p, const float* xs, int lo, int hi, int l) {
  const int first = lo + l;
  const int cnt = first < hi ? (hi - first + 63) / 64 : 0;
  return chain64(p, xs + first, cnt, [](float x) {
    const double v = static_cast<double>(x);
    return __dmul_rn(v, v);
  });
}

// Lane l's f32 chain p + v[l] + v[l + 64] + ... over v[0, n) (the staged HC dot's adds over its
// products).
__device__ __forceinline__ float sum_lane_range(float p, const float* v, int n, int l) {
  return chain64(p, v + l, l < n ? (n - l + 63) / 64 : 0, [](float x) { return x; });
}

// The staged statistic of a row whose parts were committed as the first kStageParts of
// `groups` cp.async groups (the rest are the caller's, still in flight on return): waits for
// each part in turn and runs the chains over it, then the tree; returns rms_scale on every
// thread. Called by all threads of the block (barriers); sq_s: 64 doubles of shared memory,
// s_scale: one float.
__device__ __forceinline__ float staged_scale(const float* xs, int n, float eps, int groups, double* sq_s,
                                              float* s_scale) {
  const int tid = static_cast<int>(threadIdx.x);
  const bool st = stat_thread(tid);
  const int l = stat_lane(tid);
  const int part = stage_part(n);
  double p = 0.0;
#pragma unroll
  for (int c = 0; c < kStageParts; ++c) {
    cp_async_wait_pending(groups - 1 - c);
    __syncthreads();
    const int lo = c * part < n ? c * part : n;
    const int hi = lo + part < n ? lo + part : n;
    if (st) p = sumsq_range(p, xs, lo, hi, l);
  }
  if (st) sq_s[l] = p;
  return block_scale_of_partials(sq_s, n, eps, s_scale);
}

}  // namespace ds4::cuda::detail
