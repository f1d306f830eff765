// backend/cuda/reduce.cu — RMS norm and the read-outs (top_two, top_k) on the device.
//
// Role: rms_norm / top_two / top_two_rows of cuda_kernels.h, and the top_k op (ops.h); the
// argmax op with a margin (elementwise.cu) runs top_two_rows.
// rms_norm: bit-identical to backend/cpu's rms_norm_row. Its statistic is quant::sumsq_f64's
// 64-lane order: 64 double partials (p[l] sums x[i]² for i ≡ l mod 64 in increasing i, the
// n % 64 tail included), then the halving tree 32, 16, 8, 4, 2, 1. One CTA per row. Staged
// kernel (the default, rows up to kStagedMax): the whole row (and the weights) go to shared
// memory by cp.async at once, in kStageParts groups, and the 64 chains run on 64 threads of
// four warps as the parts arrive (lanes64.cuh's staged_scale); then every thread writes
// x·scale(·w) from shared memory, 16 bytes at a time. Chunked kernel (RmsNormKernel::kChunked,
// and longer rows): the row goes through shared memory in 2,048-float chunks, the next in
// flight while warp 0 (lane t: partials t and t + 32) sums the current one.
// Rows are independent, so r rows cost about what one does.
// top_two: core/reduce.h's definition. The maximum, the second maximum (counting ties) and
// the first index holding the maximum are order-free over non-NaN values, so a tree over
// (top1, top2, first id) pairs gives the scalar loop's id and margin bit for bit (signed
// zeros only matter when the margin is 0, which is normalized to +0 as the CPU does).
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/lanes64.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/pdl.cuh"

namespace ds4::cuda {

namespace {

using detail::kFullMask;

constexpr int kNormThreads = 256;
constexpr int kNormChunk = 2048;  // floats staged per step: a multiple of 64, 8 per thread
constexpr int kNormPer = kNormChunk / kNormThreads;

__global__ void __launch_bounds__(kNormThreads) rms_norm_kernel(const float* x, const float* __restrict__ w,
                                                                float* out, int64_t n, int64_t stride, float eps) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  __shared__ __align__(16) float xs[2][kNormChunk];
  __shared__ float s_scale;
  const int tid = threadIdx.x, lane = tid & 31;
  const int64_t row = blockIdx.x;
  const float* xr = x + row * stride;
  const bool vec = reinterpret_cast<uintptr_t>(xr) % 16 == 0;
  float reg[kNormPer];
  // Global -> registers for the chunk at column c (elements past n read as 0, never summed).
  auto fetch = [&](int64_t c) {
#pragma unroll
    for (int q = 0; q < kNormPer / 4; ++q) {
      const int e = (tid + q * kNormThreads) * 4;
      if (vec && c + e + 4 <= n) {
        const float4 a = *reinterpret_cast<const float4*>(xr + c + e);
        reg[4 * q] = a.x; reg[4 * q + 1] = a.y; reg[4 * q + 2] = a.z; reg[4 * q + 3] = a.w;
      } else {
#pragma unroll
        for (int u = 0; u < 4; ++u) reg[4 * q + u] = c + e + u < n ? xr[c + e + u] : 0.0f;
      }
    }
  };
  auto stash = [&](int buf) {
#pragma unroll
    for (int q = 0; q < kNormPer / 4; ++q) {
      const int e = (tid + q * kNormThreads) * 4;
#pragma unroll
      for (int u = 0; u < 4; ++u) xs[buf][e + u] = reg[4 * q + u];
    }
  };
  double p0 = 0.0, p1 = 0.0;  // warp 0, lane t: partials p[t] and p[t + 32]
  fetch(0);
  stash(0);
  __syncthreads();
  for (int64_t c = 0, step = 0; c < n; c += kNormChunk, ++step) {
    const bool more = c + kNormChunk < n;
    if (more) fetch(c + kNormChunk);  // in flight while warp 0 sums this chunk
    if (tid < 32) {
      const int cnt = n - c < kNormChunk ? static_cast<int>(n - c) : kNormChunk;
      const float* q = xs[step & 1];
#pragma unroll 4
      for (int i = 0; i < cnt; i += 64) {  // element c + i + l belongs to lane l (c, i ≡ 0 mod 64)
        if (i + lane < cnt) p0 = detail::sumsq_step(p0, q[i + lane]);
        if (i + lane + 32 < cnt) p1 = detail::sumsq_step(p1, q[i + lane + 32]);
      }
    }
    if (more) stash((step + 1) & 1);
    __syncthreads();
  }
  if (tid < 32) {
    p0 = detail::tree64(p0, p1);
    if (lane == 0) s_scale = detail::rms_scale(p0, n, eps);
  }
  __syncthreads();
  const float scale = s_scale;
  float* orow = out + row * stride;
  if (w != nullptr) {
    for (int64_t i = tid; i < n; i += kNormThreads) orow[i] = xr[i] * scale * w[i];
  } else {
    for (int64_t i = tid; i < n; i += kNormThreads) orow[i] = xr[i] * scale;
  }
}

// The staged form (see the header): at most kStagedMax floats a row, 16 KB of x (and 16 KB of
// w) per 4,096 columns in dynamic shared memory.
constexpr int kStagedMax = 16384;

__global__ void __launch_bounds__(kNormThreads) rms_norm_staged_kernel(const float* x, const float* __restrict__ w,
                                                                       float* out, int n, int64_t stride, float eps,
                                                                       bool pdl) {
  extern __shared__ __align__(16) float dyn[];
  __shared__ double sq_s[64];
  __shared__ float s_scale;
  const int n4 = (n + 3) / 4 * 4;
  float* xs = dyn;        // [n4] the row
  float* wsm = dyn + n4;  // [n4] the weights (w given)
  const int tid = threadIdx.x;
  const int64_t row = blockIdx.x;
  const float* xr = x + row * stride;
  const bool xvec = reinterpret_cast<uintptr_t>(xr) % 16 == 0;
  const int part = detail::stage_part(n);
  // The row's parts (the statistic waits on them), then the weights; launched with PDL (pdl),
  // the weights first, before the wait for the kernel that writes the row.
  auto stage_w = [&] {
    if (w != nullptr) detail::stage_f32(wsm, w, 0, n, reinterpret_cast<uintptr_t>(w) % 16 == 0);
    cp_async_commit();
  };
  if (pdl) stage_w();
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
#pragma unroll
  for (int c = 0; c < detail::kStageParts; ++c) {
    const int lo = c * part < n ? c * part : n;
    detail::stage_f32(xs, xr, lo, lo + part < n ? lo + part : n, xvec);
    cp_async_commit();
  }
  if (!pdl) stage_w();
  const float scale =
      detail::staged_scale(xs, n, eps, pdl ? detail::kStageParts : detail::kStageParts + 1, sq_s, &s_scale);
  cp_async_wait_all();  // the weights
  __syncthreads();
  float* orow = out + row * stride;
  int s = 0;  // first element of the scalar remainder
  if (reinterpret_cast<uintptr_t>(orow) % 16 == 0) {
    const int q1 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(xs);
    const float4* w4 = reinterpret_cast<const float4*>(wsm);
    float4* o4 = reinterpret_cast<float4*>(orow);
    if (w != nullptr) {
      for (int q = tid; q < q1; q += kNormThreads) {
        const float4 a = x4[q], b = w4[q];
        o4[q] = make_float4(a.x * scale * b.x, a.y * scale * b.y, a.z * scale * b.z, a.w * scale * b.w);
      }
    } else {
      for (int q = tid; q < q1; q += kNormThreads) {
        const float4 a = x4[q];
        o4[q] = make_float4(a.x * scale, a.y * scale, a.z * scale, a.w * scale);
      }
    }
    s = q1 * 4;
  }
  if (w != nullptr) {
    for (int i = s + tid; i < n; i += kNormThreads) orow[i] = xs[i] * scale * wsm[i];
  } else {
    for (int i = s + tid; i < n; i += kNormThreads) orow[i] = xs[i] * scale;
  }
}

RmsNormKernel g_norm_kernel = RmsNormKernel::kStaged;

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

// One block per row (row blockIdx.x at x + row·stride): ids[row] / margins[row] when given,
// and *out (row 0 only, the single-row form) when given.
__global__ void __launch_bounds__(kTopThreads) top_two_kernel(const float* __restrict__ x_all, int64_t n,
                                                              int64_t stride, int64_t excluded,
                                                              int32_t* __restrict__ ids,
                                                              float* __restrict__ margins,
                                                              TopTwoResult* out) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  __shared__ Top part[kTopThreads / 32];
  const float* x = x_all + static_cast<int64_t>(blockIdx.x) * stride;
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
  if (ids != nullptr) ids[blockIdx.x] = static_cast<int32_t>(id);
  if (margins != nullptr) margins[blockIdx.x] = margin;
  if (out != nullptr) {
    out->id = static_cast<int32_t>(id);
    out->margin = margin;
  }
}

// ---- top_k ----------------------------------------------------------------------------------
// The set is fixed by the definition (backend.h TopKParams), so any exact selection gives the
// CPU's output: an order-preserving 32-bit key per value (+0 and -0 share one key, so they tie
// by id as float compares do; NaN and the excluded id are no candidates), a radix select of
// the k-th largest key (four 8-bit digits, most significant first; lanes with equal digits
// add once per warp), then one pass in index order that takes every key above the threshold
// and the lowest-id keys equal to it (an ordered compaction, tile by tile), and a rank sort
// of the <= k survivors by (key desc, id asc). Values are copied from the row, bits intact.
constexpr int kSelThreads = 1024;
constexpr int kSelWarps = kSelThreads / 32;

__device__ __forceinline__ uint32_t order_key(float v) {
  uint32_t u = __float_as_uint(v);
  if (v == 0.0f) u = 0u;  // -0 -> +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ bool is_candidate(float v, int64_t i, int64_t excluded) {
  return i != excluded && !isnan(v);
}

__global__ void __launch_bounds__(kSelThreads) top_k_kernel(const float* __restrict__ x_all, int64_t n,
                                                            int64_t stride, int k, int64_t excluded,
                                                            int32_t* __restrict__ ids_all,
                                                            float* __restrict__ values_all) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  __shared__ uint32_t hist[256];
  __shared__ uint32_t sel_key[backend::kTopKMax];
  __shared__ int32_t sel_id[backend::kTopKMax];
  __shared__ uint32_t warp_count[kSelWarps];
  __shared__ uint32_t s_prefix, s_mask, s_remaining, s_above_count, s_ties_taken, s_all;
  const float* x = x_all + static_cast<int64_t>(blockIdx.x) * stride;
  int32_t* ids = ids_all + static_cast<int64_t>(blockIdx.x) * k;
  float* values = values_all + static_cast<int64_t>(blockIdx.x) * k;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  if (tid == 0) {
    s_prefix = 0;
    s_mask = 0;
    s_remaining = static_cast<uint32_t>(k);
    s_above_count = 0;
    s_ties_taken = 0;
    s_all = 0;
  }
  // 1. Radix select: after the digits, s_prefix is the k-th largest key and s_remaining how
  // many keys equal to it belong to the top k.
  for (int digit = 3; digit >= 0; --digit) {
    for (int b = tid; b < 256; b += kSelThreads) hist[b] = 0;
    __syncthreads();
    const uint32_t prefix = s_prefix, mask = s_mask;
    const int shift = 8 * digit;
    for (int64_t base = 0; base < n; base += kSelThreads) {
      const int64_t i = base + tid;
      bool take = false;
      uint32_t bin = 0;
      if (i < n) {
        const float v = __ldg(x + i);
        if (is_candidate(v, i, excluded)) {
          const uint32_t key = order_key(v);
          take = (key & mask) == prefix;
          bin = (key >> shift) & 255u;
        }
      }
      const unsigned active = __ballot_sync(detail::kFullMask, take);
      if (take) {
        const unsigned peers = __match_any_sync(active, bin);
        if (lane == __ffs(peers) - 1) atomicAdd(&hist[bin], static_cast<uint32_t>(__popc(peers)));
      }
    }
    __syncthreads();
    if (tid == 0) {
      uint32_t remaining = s_remaining;
      if (digit == 3) {
        uint32_t total = 0;
        for (int b = 0; b < 256; ++b) total += hist[b];
        if (total <= remaining) s_all = 1;  // every candidate is in the top k
      }
      uint32_t above = 0;
      int b = 255;
      for (; b > 0; --b) {
        if (above + hist[b] >= remaining) break;
        above += hist[b];
      }
      s_remaining = remaining - above;
      s_prefix = prefix | (static_cast<uint32_t>(b) << shift);
      s_mask = mask | (255u << shift);
    }
    __syncthreads();
    if (s_all) break;
  }
  const bool all = s_all != 0;
  const uint32_t thr = all ? 0u : s_prefix;  // every candidate key is > 0 (-inf's key is 0x007fffff)
  const uint32_t need_ties = all ? 0u : s_remaining;
  // 2. Collect keys above the threshold (any order) and the first need_ties keys equal to it.
  for (int64_t base = 0; base < n; base += kSelThreads) {
    const int64_t i = base + tid;
    bool tie = false;
    if (i < n) {
      const float v = __ldg(x + i);
      if (is_candidate(v, i, excluded)) {
        const uint32_t key = order_key(v);
        if (key > thr) {
          const uint32_t slot = atomicAdd(&s_above_count, 1u);
          sel_key[slot] = key;
          sel_id[slot] = static_cast<int32_t>(i);
        } else if (key == thr) {
          tie = need_ties > 0;
        }
      }
    }
    if (need_ties == 0) continue;  // block-uniform
    const unsigned tb = __ballot_sync(detail::kFullMask, tie);
    if (lane == 0) warp_count[warp] = static_cast<uint32_t>(__popc(tb));
    __syncthreads();
    const uint32_t taken = s_ties_taken;
    uint32_t before = 0, tile = 0;
    for (int w = 0; w < kSelWarps; ++w) {
      if (w < warp) before += warp_count[w];
      tile += warp_count[w];
    }
    if (tie) {
      const uint32_t rank = taken + before + static_cast<uint32_t>(__popc(tb & ((1u << lane) - 1u)));
      if (rank < need_ties) {
        const uint32_t slot = static_cast<uint32_t>(k) - need_ties + rank;
        sel_key[slot] = thr;
        sel_id[slot] = static_cast<int32_t>(i);
      }
    }
    __syncthreads();
    if (tid == 0) s_ties_taken = taken + tile;
    __syncthreads();
  }
  __syncthreads();
  // 3. Rank sort of the m survivors (key desc, id asc) and the padding.
  const int m = all ? static_cast<int>(s_above_count) : k;
  for (int t = tid; t < k; t += kSelThreads) {
    if (t >= m) {
      ids[t] = -1;
      values[t] = -INFINITY;
      continue;
    }
    const uint32_t key = sel_key[t];
    const int32_t id = sel_id[t];
    int rank = 0;
    for (int j = 0; j < m; ++j) {
      const uint32_t kj = sel_key[j];
      rank += (kj > key || (kj == key && sel_id[j] < id)) ? 1 : 0;
    }
    ids[rank] = id;
    values[rank] = x[id];
  }
}

}  // namespace

Status rms_norm(const float* x, const float* weight, float* out, int64_t n, int64_t stride, int n_rows,
                float eps, Stream stream) {
  if (stride == 0) stride = n;
  if (n <= 0 || stride < n || n_rows < 0)
    return invalid_argument("cuda: rms_norm: bad shape (n %lld > 0, stride %lld >= n, rows %d)",
                            static_cast<long long>(n), static_cast<long long>(stride), n_rows);
  if (n_rows == 0) return Status();
  // More than 48 KB of dynamic shared memory needs the opt-in (once per process; one device).
  // Should it fail, the chunked kernel runs.
  static const bool staged_ok = [] {
    const cudaError_t e = cudaFuncSetAttribute(rms_norm_staged_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               2 * kStagedMax * static_cast<int>(sizeof(float)));
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess;
  }();
  if (staged_ok && g_norm_kernel == RmsNormKernel::kStaged && n <= kStagedMax) {
    const int ni = static_cast<int>(n);
    const size_t smem = sizeof(float) * static_cast<size_t>((ni + 3) / 4 * 4) * (weight != nullptr ? 2 : 1);
    detail::launch_pdl(pdl_all(), rms_norm_staged_kernel, static_cast<unsigned>(n_rows), kNormThreads, smem, stream, x,
                       weight, out, ni, stride, eps, pdl_all());
    return launch_status("rms_norm", n, n, n_rows);
  }
  detail::launch_pdl(pdl_all(), rms_norm_kernel, static_cast<unsigned>(n_rows), kNormThreads, 0, stream, x, weight, out,
                     n, stride, eps);
  return launch_status("rms_norm", n, n, n_rows);
}

void set_rms_norm_kernel(RmsNormKernel k) { g_norm_kernel = k; }
RmsNormKernel rms_norm_kernel_choice() { return g_norm_kernel; }

Status top_two(const float* logits, int64_t n, int32_t excluded, TopTwoResult* out, Stream stream) {
  if (n < 0 || n > INT32_MAX) return invalid_argument("cuda: top_two: bad row length %lld", static_cast<long long>(n));
  detail::launch_pdl(pdl_all(), top_two_kernel, 1, kTopThreads, 0, stream, logits, n, n, excluded, nullptr, nullptr,
                     out);
  return launch_status("top_two", n, 1, 1);
}

Status top_two_rows(const float* logits, int64_t n, int64_t stride, int n_rows, int32_t excluded, int32_t* ids,
                    float* margins, Stream stream) {
  if (n < 0 || n > INT32_MAX || stride < 0 || n_rows < 0)
    return invalid_argument("cuda: top_two_rows: bad shape (n %lld, stride %lld, rows %d)", static_cast<long long>(n),
                            static_cast<long long>(stride), n_rows);
  if (n_rows == 0) return Status();
  detail::launch_pdl(pdl_all(), top_two_kernel, static_cast<unsigned>(n_rows), kTopThreads, 0, stream, logits, n,
                     stride, excluded, ids, margins, nullptr);
  return launch_status("top_two_rows", n, 2, n_rows);
}

Status top_k(const backend::TopKParams& p, Stream stream) {
  if (p.n < 0 || p.n > INT32_MAX || p.stride < 0 || p.n_rows < 0 || p.k < 1 || p.k > backend::kTopKMax)
    return invalid_argument("cuda: top_k: bad shape (n %lld, stride %lld, rows %d, k %d in 1..%d)",
                            static_cast<long long>(p.n), static_cast<long long>(p.stride), p.n_rows, p.k,
                            backend::kTopKMax);
  if (p.n_rows == 0) return Status();
  detail::launch_pdl(pdl_all(), top_k_kernel, static_cast<unsigned>(p.n_rows), kSelThreads, 0, stream, p.x, p.n,
                     p.stride, p.k, p.excluded, p.ids, p.values);
  return launch_status("top_k", p.n, p.k, p.n_rows);
}

}  // namespace ds4::cuda
