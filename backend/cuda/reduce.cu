// backend/cuda/reduce.cu — RMS norm and the greedy read-out (top_two) on the device.
//
// Role: rms_norm / top_two of cuda_kernels.h.
// rms_norm: bit-identical to backend/cpu's rms_norm_row. Its statistic is a SEQUENTIAL double
// sum in index order, which no tree reproduces, so one lane per row runs that chain (the
// warp stages the row through shared memory in coalesced chunks so the chain waits on shared
// memory, not DRAM); the scale and the elementwise products then run on all lanes. Rows are
// independent (one warp each), so r rows cost about what one does.
// top_two: core/reduce.h's definition. The maximum, the second maximum (counting ties) and
// the first index holding the maximum are order-free over non-NaN values, so a tree over
// (top1, top2, first id) pairs gives the scalar loop's id and margin bit for bit (signed
// zeros only matter when the margin is 0, which is normalized to +0 as the CPU does).
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace ds4::cuda {

namespace {

using detail::kFullMask;

constexpr int kNormWarps = 8;
constexpr int kNormChunk = 512;

__global__ void __launch_bounds__(32 * kNormWarps) rms_norm_kernel(const float* x, const float* __restrict__ w,
                                                                   float* out, int64_t n, int64_t stride,
                                                                   int n_rows, float eps) {
  // All lanes square a chunk (exact in double) into shared memory; lane 0 then runs the
  // sequential chain of double adds, two terms per 16-byte load.
  __shared__ __align__(16) double sq[kNormWarps][kNormChunk];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kNormWarps + warp;
  if (row >= n_rows) return;  // warp-uniform
  const float* xr = x + row * stride;
  double ss = 0.0;  // lane 0's chain
  for (int64_t c = 0; c < n; c += kNormChunk) {
    const int cnt = n - c < kNormChunk ? static_cast<int>(n - c) : kNormChunk;
    for (int i = lane; i < cnt; i += 32) {
      const double v = static_cast<double>(xr[c + i]);
      sq[warp][i] = v * v;
    }
    __syncwarp();
    if (lane == 0) {
      const double2* q = reinterpret_cast<const double2*>(sq[warp]);
#pragma unroll 8
      for (int i = 0; i < cnt / 2; ++i) {
        const double2 a = q[i];
        ss += a.x;
        ss += a.y;
      }
      if (cnt & 1) ss += sq[warp][cnt - 1];
    }
    __syncwarp();
  }
  float scale = 0.0f;
  if (lane == 0) scale = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(n)) + eps);
  scale = __shfl_sync(kFullMask, scale, 0);
  float* orow = out + row * stride;
  if (w != nullptr) {
    for (int64_t i = lane; i < n; i += 32) orow[i] = xr[i] * scale * w[i];
  } else {
    for (int64_t i = lane; i < n; i += 32) orow[i] = xr[i] * scale;
  }
}

struct Top {
  float t1, t2;  // largest and second largest non-NaN value (ties counted), -inf when none
  float best;    // value at id
  int64_t id;    // first index of the maximum, -1 when none
};

__device__ __forceinline__ Top merge(const Top& a, const Top& b) {
  Top r;
  r.t1 = fmaxf(a.t1, b.t1);
  r.t2 = fmaxf(fminf(a.t1, b.t1), fmaxf(a.t2, b.t2));
  if (a.id < 0) {
    r.id = b.id, r.best = b.best;
  } else if (b.id < 0) {
    r.id = a.id, r.best = a.best;
  } else if (b.best > a.best || (!(a.best > b.best) && b.id < a.id)) {
    r.id = b.id, r.best = b.best;
  } else {
    r.id = a.id, r.best = a.best;
  }
  return r;
}

__device__ __forceinline__ Top shfl_down(const Top& t, int s) {
  Top r;
  r.t1 = __shfl_down_sync(kFullMask, t.t1, s);
  r.t2 = __shfl_down_sync(kFullMask, t.t2, s);
  r.best = __shfl_down_sync(kFullMask, t.best, s);
  r.id = __shfl_down_sync(kFullMask, t.id, s);
  return r;
}

constexpr int kTopThreads = 1024;

// The scalar loop's update for one candidate; a thread sees its indices in ascending order.
__device__ __forceinline__ void consider(Top& t, int64_t i, float v, int64_t excluded) {
  if (i == excluded || isnan(v)) return;
  if (t.id < 0 || v > t.best) {
    t.id = i;
    t.best = v;
  }
  if (v > t.t1) {
    t.t2 = t.t1;
    t.t1 = v;
  } else if (v > t.t2) {
    t.t2 = v;
  }
}

__global__ void __launch_bounds__(kTopThreads) top_two_kernel(const float* __restrict__ x, int64_t n,
                                                              int64_t excluded, TopTwoResult* out) {
  __shared__ Top part[kTopThreads / 32];
  Top t{-INFINITY, -INFINITY, 0.0f, -1};
  int64_t scalar_from = 0;
  if (reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    // 16-byte loads, four in flight per thread; thread indices stay ascending.
    const int64_t n4 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int64_t q0 = threadIdx.x; q0 < n4; q0 += 4 * kTopThreads) {
      float4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t q = q0 + u * kTopThreads;
        v[u] = q < n4 ? __ldg(x4 + q) : make_float4(NAN, NAN, NAN, NAN);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t i = 4 * (q0 + u * kTopThreads);
        consider(t, i, v[u].x, excluded);
        consider(t, i + 1, v[u].y, excluded);
        consider(t, i + 2, v[u].z, excluded);
        consider(t, i + 3, v[u].w, excluded);
      }
    }
    scalar_from = 4 * n4;
  }
  for (int64_t i = scalar_from + threadIdx.x; i < n; i += kTopThreads) consider(t, i, __ldg(x + i), excluded);
  for (int s = 16; s >= 1; s /= 2) t = merge(t, shfl_down(t, s));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part[warp] = t;
  __syncthreads();
  if (warp != 0) return;
  t = part[lane];
  for (int s = 16; s >= 1; s /= 2) t = merge(t, shfl_down(t, s));
  if (lane != 0) return;
  int64_t id = t.id;
  if (id < 0) {  // every candidate NaN: the first allowed index
    id = excluded == 0 ? (n > 1 ? 1 : -1) : (n > 0 ? 0 : -1);
  }
  float margin = t.t1 - t.t2;
  if (margin == 0.0f) margin = 0.0f;
  out->id = static_cast<int32_t>(id);
  out->margin = margin;
}

}  // namespace

Status rms_norm(const float* x, const float* weight, float* out, int64_t n, int64_t stride, int n_rows,
                float eps, Stream stream) {
  if (stride == 0) stride = n;
  if (n <= 0 || stride < n || n_rows < 0)
    return invalid_argument("cuda: rms_norm: bad shape (n %lld > 0, stride %lld >= n, rows %d)",
                            static_cast<long long>(n), static_cast<long long>(stride), n_rows);
  if (n_rows == 0) return Status();
  const unsigned grid = static_cast<unsigned>((n_rows + kNormWarps - 1) / kNormWarps);
  rms_norm_kernel<<<grid, 32 * kNormWarps, 0, stream>>>(x, weight, out, n, stride, n_rows, eps);
  return launch_status("rms_norm", n, n, n_rows);
}

Status top_two(const float* logits, int64_t n, int32_t excluded, TopTwoResult* out, Stream stream) {
  if (n < 0 || n > INT32_MAX) return invalid_argument("cuda: top_two: bad row length %lld", static_cast<long long>(n));
  top_two_kernel<<<1, kTopThreads, 0, stream>>>(logits, n, excluded, out);
  return launch_status("top_two", n, 1, 1);
}

}  // namespace ds4::cuda
