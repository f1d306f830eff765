// backend/cuda/matvec_dense.cu — F16 and F32 matvecs in the canonical 16-lane order.
//
// Role: matvec_f16 / matvec_f32 of cuda_kernels.h, bit-identical to quant::dot_f16 /
// dot_f32 (quant/dot.h) for r = 1..8 rows per launch.
// Layout: two threads per output row. Thread h (0 or 1) owns the CPU's lane partials
// p[8h .. 8h+7] of every activation row; per 16-element step it loads its 8 weights once
// (one 16-byte load when aligned) and adds w·x into each partial: the same sequence of
// separately rounded products and sums as the CPU's lane j. Then the fixed tree: step 8
// (p[j] + p[j+8]) brings thread 1's partials over with a shuffle, steps 4, 2, 1 run inside
// thread 0, and thread 0 adds the n % 16 tail sequentially. --fmad=false keeps mul and add
// apart.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_kernels.h"

namespace ds4::cuda {

namespace {

using detail::kFullMask;

template <bool kF16>
__device__ __forceinline__ float load_w1(const uint8_t* row, int64_t i) {
  if constexpr (kF16) {
    return detail::f16_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
  } else {
    return reinterpret_cast<const float*>(row)[i];
  }
}

// Weights row[e .. e+8) as f32.
template <bool kF16>
__device__ __forceinline__ void load_w8(const uint8_t* row, int64_t e, bool vec, float (&v)[8]) {
  if constexpr (kF16) {
    if (vec) {
      const uint4 u = __ldg(reinterpret_cast<const uint4*>(row + 2 * e));
      const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        v[2 * i] = detail::f16_to_f32(static_cast<uint16_t>(words[i] & 0xffffu));
        v[2 * i + 1] = detail::f16_to_f32(static_cast<uint16_t>(words[i] >> 16));
      }
      return;
    }
  } else {
    if (vec) {
      const float4 a = __ldg(reinterpret_cast<const float4*>(row + 4 * e));
      const float4 b = __ldg(reinterpret_cast<const float4*>(row + 4 * e) + 1);
      v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
      v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = load_w1<kF16>(row, e + i);
}

__device__ __forceinline__ void load_x8(const float* x, bool vec, float (&v)[8]) {
  if (vec) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(x));
    const float4 b = __ldg(reinterpret_cast<const float4*>(x) + 1);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
    return;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) v[i] = __ldg(x + i);
}

template <bool kF16, int R>
__global__ void __launch_bounds__(256) dense_matvec_kernel(const uint8_t* __restrict__ w, size_t row_bytes,
                                                           int64_t n, int64_t n_out, const float* __restrict__ x,
                                                           int64_t xs, float* __restrict__ y, int64_t ys,
                                                           bool w_vec, bool x_vec) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t o_raw = tid >> 1;
  const int h = static_cast<int>(tid & 1);
  const bool live = o_raw < n_out;
  const int64_t o = live ? o_raw : n_out - 1;  // spare threads shadow the last row, write nothing
  const uint8_t* row = w + o * row_bytes;
  float p[R][8];
#pragma unroll
  for (int k = 0; k < R; ++k)
#pragma unroll
    for (int j = 0; j < 8; ++j) p[k][j] = 0.0f;
  const int64_t m = n - n % 16;
  for (int64_t i = 0; i < m; i += 16) {
    const int64_t e = i + 8 * h;
    float wv[8];
    load_w8<kF16>(row, e, w_vec, wv);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      float xv[8];
      load_x8(x + k * xs + e, x_vec, xv);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float t = wv[j] * xv[j];
        p[k][j] = p[k][j] + t;
      }
    }
  }
  // Tree step 8: p[j] = p[j] + p[j + 8], p[j + 8] living in the partner thread.
#pragma unroll
  for (int k = 0; k < R; ++k)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float hi = __shfl_down_sync(kFullMask, p[k][j], 1);
      p[k][j] = p[k][j] + hi;
    }
  if (h != 0 || !live) return;
#pragma unroll
  for (int k = 0; k < R; ++k) {
#pragma unroll
    for (int s = 4; s >= 1; s /= 2)
#pragma unroll
      for (int j = 0; j < s; ++j) p[k][j] = p[k][j] + p[k][j + s];
    float acc = p[k][0];
    const float* xk = x + k * xs;
    for (int64_t i = m; i < n; ++i) {
      const float t = load_w1<kF16>(row, i) * xk[i];
      acc = acc + t;
    }
    y[k * ys + o] = acc;
  }
}

template <bool kF16>
Status launch(const char* op, const Weights& w, const float* x, int64_t xs, int r, float* y, int64_t ys,
              Stream stream) {
  const size_t elem = kF16 ? 2 : 4;
  if (w.n_in < 0 || w.n_out < 0 || r < 0 || w.row_bytes < static_cast<size_t>(w.n_in) * elem ||
      w.row_bytes % elem != 0 || reinterpret_cast<uintptr_t>(w.data) % elem != 0)
    return invalid_argument("cuda: %s: bad shape (n_in %lld, row_bytes %zu >= n_in·%zu and aligned, rows %d)", op,
                            static_cast<long long>(w.n_in), w.row_bytes, elem, r);
  if (xs == 0) xs = w.n_in;
  if (ys == 0) ys = w.n_out;
  if (w.n_out == 0 || r == 0) return Status();
  const bool w_vec = reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.row_bytes % 16 == 0;
  const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && xs % 4 == 0;
  const unsigned grid = static_cast<unsigned>((2 * w.n_out + 255) / 256);
  const uint8_t* wp = static_cast<const uint8_t*>(w.data);
  for (int k0 = 0; k0 < r; k0 += kMaxRows) {
    const int rr = r - k0 < kMaxRows ? r - k0 : kMaxRows;
    const float* xk = x + k0 * xs;
    float* yk = y + k0 * ys;
    switch (rr) {
#define DS4_CASE(R)                                                                                       \
  case R:                                                                                                 \
    dense_matvec_kernel<kF16, R><<<grid, 256, 0, stream>>>(wp, w.row_bytes, w.n_in, w.n_out, xk, xs, yk, ys, \
                                                           w_vec, x_vec);                                 \
    break;
      DS4_CASE(1) DS4_CASE(2) DS4_CASE(3) DS4_CASE(4) DS4_CASE(5) DS4_CASE(6) DS4_CASE(7) DS4_CASE(8)
#undef DS4_CASE
    }
    Status s = launch_status(op, w.n_in, w.n_out, rr);
    if (!s.ok()) return s;
  }
  return Status();
}

}  // namespace

Status matvec_f16(const Weights& w, const float* x, int64_t x_stride, int r, float* y, int64_t y_stride,
                  Stream stream) {
  return launch<true>("matvec_f16", w, x, x_stride, r, y, y_stride, stream);
}
Status matvec_f32(const Weights& w, const float* x, int64_t x_stride, int r, float* y, int64_t y_stride,
                  Stream stream) {
  return launch<false>("matvec_f32", w, x, x_stride, r, y, y_stride, stream);
}

}  // namespace ds4::cuda
