// backend/cuda/matvec_quant.cu — block-quantized matvecs: Q8_0 × Q8_0 activations and the
// routed-expert rows IQ2_XXS / Q2_K / Q4_K × Q8_K activations, r = 1..8 rows per launch.
//
// Role: matvec_q8_0 / matvec_iq2_xxs / matvec_q2_k / matvec_q4_k of cuda_kernels.h, and the
// expert-selected forms matvec_*_sel (the expert id read from device memory per pair).
// Layout: one warp per output row, 8 rows per 256-thread block. A warp walks the row's
// blocks in chunks (128 for Q8_0, 4 blocks per lane; 32 for the 256-element super-blocks,
// which give 8 lanes per block, one 32-element group each, 4 blocks per step). Each weight block is
// loaded and decoded once and dotted with all r activation rows.
// Bit-exactness (quant/dot.h): the integer part of a block dot is exact int32 whatever the
// split (lanes' partial sums are combined with integer shuffles); the float part of each
// block (scale products, int->float, the K-quant a - c) is computed by one lane exactly as
// the CPU writes it; the per-block terms of a chunk go to shared memory and lane k adds
// them into row k's single accumulator in block order — the CPU's sequential sum, never a
// tree. --fmad=false keeps every product and sum separately rounded.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "quant/iq2_tables.h"

namespace ds4::cuda {

namespace {

using quant::BlockQ8_0Act;
using quant::BlockQ8K;
using detail::kFullMask;
using detail::load_u16;
using detail::load_words_even;
using detail::f16_to_f32;

constexpr int kWarps = 8;  // output rows per block

__device__ uint64_t g_iq2_grid[256];  // quant::kIq2XxsGrid, uploaded once per device
__device__ uint8_t g_iq2_signs[128];  // quant::kIq2Signs

template <int R>
__device__ __forceinline__ void reduce8(int32_t (&v)[R]) {
#pragma unroll
  for (int k = 0; k < R; ++k) {
#pragma unroll
    for (int s = 1; s < 8; s *= 2) v[k] += __shfl_xor_sync(kFullMask, v[k], s);
  }
}

// ---- Formats: terms() computes, for the lane's block b, t[k] = the float term the CPU adds
// to row k's accumulator for block b (valid only on lanes with sub == 0 and valid == true);
// every lane of the warp must call it (the 8-lane formats shuffle inside).
struct Q8_0Fmt {
  using Act = BlockQ8_0Act;
  static constexpr int kLanesPerBlock = 1;
  static constexpr int kBlockElems = quant::kQK8_0;
  static constexpr int kBlockBytes = 34;
  static constexpr bool kTables = false;
  static constexpr int kChunk = 128;  // blocks whose terms are in flight at once (4 per lane)
  static constexpr int kUnroll = 4;
  template <int R>
  static __device__ __forceinline__ void terms(const uint8_t* row, int b, bool valid, int /*sub*/,
                                               const Act* __restrict__ x, int64_t xs, float (&t)[R],
                                               const uint64_t*, const uint8_t*) {
    if (!valid) return;
    const uint8_t* p = row + static_cast<size_t>(b) * kBlockBytes;
    const float wd = f16_to_f32(load_u16(p));
    uint32_t q[8];
    load_words_even<8>(p + 2, q);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      const Act* a = x + k * xs + b;
      const int* aq = reinterpret_cast<const int*>(a->qs);
      int isum = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) isum = __dp4a(static_cast<int>(q[i]), __ldg(aq + i), isum);
      const float s = wd * __ldg(&a->d);
      t[k] = s * static_cast<float>(isum);
    }
  }
  static __device__ __forceinline__ float finish(float acc) { return acc; }
};

struct Iq2XxsFmt {
  using Act = BlockQ8K;
  static constexpr int kLanesPerBlock = 8;
  static constexpr int kBlockElems = quant::kQKK;
  static constexpr int kBlockBytes = 66;
  static constexpr int kChunk = 32;
  static constexpr int kUnroll = 2;
  static constexpr bool kTables = true;
  template <int R>
  static __device__ __forceinline__ void terms(const uint8_t* row, int b, bool valid, int sub,
                                               const Act* __restrict__ x, int64_t xs, float (&t)[R],
                                               const uint64_t* grid, const uint8_t* signs) {
    int32_t part[R];
#pragma unroll
    for (int k = 0; k < R; ++k) part[k] = 0;
    float wd = 0.0f;
    if (valid) {
      const uint8_t* p = row + static_cast<size_t>(b) * kBlockBytes;
      wd = f16_to_f32(load_u16(p));
      uint32_t aux[2];
      load_words_even<2>(p + 2 + 8 * sub, aux);
      const int32_t ls = static_cast<int32_t>(2 * (aux[1] >> 28) + 1);
      uint32_t sv[8];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const uint64_t g = grid[(aux[0] >> (8 * c)) & 0xffu];
        const uint32_t s = signs[(aux[1] >> (7 * c)) & 127u];
        const uint32_t lo = static_cast<uint32_t>(g), hi = static_cast<uint32_t>(g >> 32);
        const uint32_t mlo = detail::sign_mask4(s), mhi = detail::sign_mask4(s >> 4);
        sv[2 * c] = (lo & ~mlo) | (__vneg4(lo) & mlo);
        sv[2 * c + 1] = (hi & ~mhi) | (__vneg4(hi) & mhi);
      }
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const int* aq = reinterpret_cast<const int*>(x[k * xs + b].qs + 32 * sub);
        int sumi = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) sumi = __dp4a(static_cast<int>(sv[i]), __ldg(aq + i), sumi);
        part[k] = sumi * ls;
      }
    }
    reduce8<R>(part);
    if (valid && sub == 0) {
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const float d = wd * __ldg(&x[k * xs + b].d);
        t[k] = d * static_cast<float>(part[k]);
      }
    }
  }
  static __device__ __forceinline__ float finish(float acc) { return 0.125f * acc; }
};

struct Q2KFmt {
  using Act = BlockQ8K;
  static constexpr int kLanesPerBlock = 8;
  static constexpr int kBlockElems = quant::kQKK;
  static constexpr int kBlockBytes = 84;
  static constexpr int kChunk = 32;
  static constexpr int kUnroll = 2;
  static constexpr bool kTables = false;
  template <int R>
  static __device__ __forceinline__ void terms(const uint8_t* row, int b, bool valid, int sub,
                                               const Act* __restrict__ x, int64_t xs, float (&t)[R],
                                               const uint64_t*, const uint8_t*) {
    int32_t isum[R], summs[R];
#pragma unroll
    for (int k = 0; k < R; ++k) isum[k] = summs[k] = 0;
    const uint8_t* p = row + static_cast<size_t>(b) * kBlockBytes;
    const int n = sub >> 2, j = sub & 3;
    const int sb = 8 * n + 2 * j;
    if (valid) {
      const uint32_t* pw = reinterpret_cast<const uint32_t*>(p);
      const int32_t sc0 = p[sb], sc1 = p[sb + 1];
      uint32_t qv[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) qv[i] = (__ldg(pw + 4 + 8 * n + i) >> (2 * j)) & 0x03030303u;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const Act& a = x[k * xs + b];
        const int* aq = reinterpret_cast<const int*>(a.qs + 128 * n + 32 * j);
        int s0 = 0, s1 = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) s0 = __dp4a(static_cast<int>(qv[i]), __ldg(aq + i), s0);
#pragma unroll
        for (int i = 4; i < 8; ++i) s1 = __dp4a(static_cast<int>(qv[i]), __ldg(aq + i), s1);
        isum[k] = (sc0 & 15) * s0 + (sc1 & 15) * s1;
        summs[k] = static_cast<int32_t>(__ldg(&a.bsums[sb])) * (sc0 >> 4) +
                   static_cast<int32_t>(__ldg(&a.bsums[sb + 1])) * (sc1 >> 4);
      }
    }
    reduce8<R>(isum);
    reduce8<R>(summs);
    if (valid && sub == 0) {
      const float wd = f16_to_f32(load_u16(p + 80));
      const float wm = f16_to_f32(load_u16(p + 82));
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const float yd = __ldg(&x[k * xs + b].d);
        const float dall = yd * wd;
        const float dmin = yd * wm;
        const float a = dall * static_cast<float>(isum[k]);
        const float c = dmin * static_cast<float>(summs[k]);
        t[k] = a - c;
      }
    }
  }
  static __device__ __forceinline__ float finish(float acc) { return acc; }
};

struct Q4KFmt {
  using Act = BlockQ8K;
  static constexpr int kLanesPerBlock = 8;
  static constexpr int kBlockElems = quant::kQKK;
  static constexpr int kBlockBytes = 144;
  static constexpr int kChunk = 32;
  static constexpr int kUnroll = 2;
  static constexpr bool kTables = false;
  template <int R>
  static __device__ __forceinline__ void terms(const uint8_t* row, int b, bool valid, int sub,
                                               const Act* __restrict__ x, int64_t xs, float (&t)[R],
                                               const uint64_t*, const uint8_t*) {
    int32_t isum[R], summs[R];
#pragma unroll
    for (int k = 0; k < R; ++k) isum[k] = summs[k] = 0;
    const uint8_t* p = row + static_cast<size_t>(b) * kBlockBytes;
    const int j = sub;
    if (valid) {
      const uint8_t* scales = p + 4;
      int32_t sc, m;  // quant::q4_k_scale_min
      if (j < 4) {
        sc = scales[j] & 63;
        m = scales[j + 4] & 63;
      } else {
        sc = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4);
        m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
      }
      const uint32_t* qw = reinterpret_cast<const uint32_t*>(p + 16 + 32 * (j >> 1));
      const int shift = 4 * (j & 1);
      uint32_t qv[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) qv[i] = (__ldg(qw + i) >> shift) & 0x0f0f0f0fu;
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const Act& a = x[k * xs + b];
        const int* aq = reinterpret_cast<const int*>(a.qs + 32 * j);
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) s = __dp4a(static_cast<int>(qv[i]), __ldg(aq + i), s);
        isum[k] = sc * s;
        summs[k] = m * (static_cast<int32_t>(__ldg(&a.bsums[2 * j])) + __ldg(&a.bsums[2 * j + 1]));
      }
    }
    reduce8<R>(isum);
    reduce8<R>(summs);
    if (valid && sub == 0) {
      const float wd = f16_to_f32(load_u16(p));
      const float wm = f16_to_f32(load_u16(p + 2));
#pragma unroll
      for (int k = 0; k < R; ++k) {
        const float yd = __ldg(&x[k * xs + b].d);
        const float d = yd * wd;
        const float dmin = yd * wm;
        const float a = d * static_cast<float>(isum[k]);
        const float c = dmin * static_cast<float>(summs[k]);
        t[k] = a - c;
      }
    }
  }
  static __device__ __forceinline__ float finish(float acc) { return acc; }
};

// The body of both kernels below: output rows [8·blockIdx.x, +8) of the weight rows at w.
template <class F, int R>
__device__ __forceinline__ void quant_matvec_rows(const uint8_t* __restrict__ w, size_t row_bytes, int nb,
                                                  int64_t n_out, const typename F::Act* __restrict__ x,
                                                  int64_t xs, float* __restrict__ y, int64_t ys) {
  constexpr int kLpb = F::kLanesPerBlock;
  constexpr int kBps = 32 / kLpb;  // blocks per step
  constexpr int kChunk = F::kChunk;
  __shared__ float ts[kWarps][R][kChunk + 1];
  __shared__ uint64_t grid_s[F::kTables ? 256 : 1];
  __shared__ uint8_t signs_s[F::kTables ? 128 : 1];
  if constexpr (F::kTables) {
    grid_s[threadIdx.x] = g_iq2_grid[threadIdx.x];
    if (threadIdx.x < 128) signs_s[threadIdx.x] = g_iq2_signs[threadIdx.x];
    __syncthreads();
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (o >= n_out) return;  // warp-uniform
  const uint8_t* row = w + o * row_bytes;
  const int sub = lane % kLpb, slot = lane / kLpb;
  float acc = 0.0f;  // lane k < R: row k's accumulator
  for (int c = 0; c < nb; c += kChunk) {
    const int cnt = nb - c < kChunk ? nb - c : kChunk;
    // Unrolled so the loads of several steps are in flight together (latency, not bandwidth,
    // bounds a warp that waits for one block at a time).
#pragma unroll F::kUnroll
    for (int s = 0; s < kChunk; s += kBps) {
      const bool valid = s + slot < cnt;
      float t[R];
      F::template terms<R>(row, c + s + slot, valid, sub, x, xs, t, grid_s, signs_s);
      if (valid && sub == 0) {
#pragma unroll
        for (int k = 0; k < R; ++k) ts[warp][k][s + slot] = t[k];
      }
    }
    __syncwarp();
    if (lane < R) {
      for (int j = 0; j < cnt; ++j) acc = acc + ts[warp][lane][j];
    }
    __syncwarp();
  }
  if (lane < R) y[lane * ys + o] = F::finish(acc);
}

template <class F, int R>
__global__ void __launch_bounds__(32 * kWarps) quant_matvec_kernel(
    const uint8_t* __restrict__ w, size_t row_bytes, int nb, int64_t n_out,
    const typename F::Act* __restrict__ x, int64_t xs, float* __restrict__ y, int64_t ys) {
  quant_matvec_rows<F, R>(w, row_bytes, nb, n_out, x, xs, y, ys);
}

// Expert-selected form: pair q = blockIdx.y uses expert e = sel[q] (device memory), weight
// rows at w + e·expert_bytes, activation row x + (q / x_div)·xs, output row y + q·ys. One
// activation row per pair (r = 1): the same per-row dot sequence as quant_matvec_kernel<F, 1>.
// An expert id outside [0, n_expert) gives NaN outputs instead of a wild read.
template <class F>
__global__ void __launch_bounds__(32 * kWarps) quant_matvec_sel_kernel(
    const uint8_t* __restrict__ w, size_t row_bytes, size_t expert_bytes, int64_t n_expert, int nb,
    int64_t n_out, const int32_t* __restrict__ sel, const typename F::Act* __restrict__ x, int64_t xs,
    int x_div, float* __restrict__ y, int64_t ys) {
  const int64_t q = blockIdx.y;
  const int32_t e = sel[q];
  float* yq = y + q * ys;
  if (e < 0 || e >= n_expert) {
    const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
    if ((threadIdx.x & 31) == 0 && o < n_out) yq[o] = __int_as_float(0x7fffffff);
    return;
  }
  quant_matvec_rows<F, 1>(w + static_cast<size_t>(e) * expert_bytes, row_bytes, nb, n_out, x + (q / x_div) * xs,
                          xs, yq, ys);
}

Status upload_iq2_tables() {
  // Once per device (the symbols are per-device); a failure is reported, not cached.
  static bool done[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
    return resource_error("cuda: matvec_iq2_xxs: no current device");
  if (done[dev]) return Status();
  if (cudaMemcpyToSymbol(g_iq2_grid, quant::kIq2XxsGrid, sizeof(uint64_t) * 256) != cudaSuccess ||
      cudaMemcpyToSymbol(g_iq2_signs, quant::kIq2Signs, 128) != cudaSuccess) {
    return resource_error("cuda: matvec_iq2_xxs: cannot upload the IQ2_XXS tables: %s",
                          cudaGetErrorString(cudaGetLastError()));
  }
  done[dev] = true;
  return Status();
}

template <class F>
Status launch(const char* op, const Weights& w, const typename F::Act* x, int64_t xs, int r, float* y,
              int64_t ys, Stream stream) {
  const int64_t nb = w.n_in / F::kBlockElems;
  const uintptr_t base = reinterpret_cast<uintptr_t>(w.data);
  const size_t align = F::kBlockBytes % 4 == 0 ? 4 : 2;
  if (w.n_in < 0 || w.n_in % F::kBlockElems != 0 || w.n_out < 0 || r < 0 ||
      w.row_bytes < static_cast<size_t>(nb) * F::kBlockBytes || w.row_bytes % align != 0 ||
      base % 4 != 0 || nb > (1 << 30))
    return invalid_argument("cuda: %s: bad shape (n_in %lld must be a multiple of %d, row_bytes %zu >= %lld "
                            "and a multiple of %zu, weights 4-byte aligned, rows %d)", op,
                            static_cast<long long>(w.n_in), F::kBlockElems, w.row_bytes,
                            static_cast<long long>(nb * F::kBlockBytes), align, r);
  if (xs == 0) xs = nb;
  if (ys == 0) ys = w.n_out;
  if constexpr (F::kTables) {
    Status s = upload_iq2_tables();
    if (!s.ok()) return s;
  }
  if (w.n_out == 0 || r == 0) return Status();
  const unsigned grid = static_cast<unsigned>((w.n_out + kWarps - 1) / kWarps);
  const uint8_t* wp = static_cast<const uint8_t*>(w.data);
  for (int k0 = 0; k0 < r; k0 += kMaxRows) {
    const int rr = r - k0 < kMaxRows ? r - k0 : kMaxRows;
    const typename F::Act* xk = x + k0 * xs;
    float* yk = y + k0 * ys;
    const int inb = static_cast<int>(nb);
    switch (rr) {
#define DS4_CASE(R)                                                                                  \
  case R:                                                                                            \
    quant_matvec_kernel<F, R><<<grid, 32 * kWarps, 0, stream>>>(wp, w.row_bytes, inb, w.n_out, xk, xs, \
                                                                 yk, ys);                           \
    break;
      DS4_CASE(1) DS4_CASE(2) DS4_CASE(3) DS4_CASE(4) DS4_CASE(5) DS4_CASE(6) DS4_CASE(7) DS4_CASE(8)
#undef DS4_CASE
    }
    Status s = launch_status(op, w.n_in, w.n_out, rr);
    if (!s.ok()) return s;
  }
  return Status();
}

template <class F>
Status launch_sel(const char* op, const ExpertWeights& w, const int32_t* sel, int n_pairs,
                  const typename F::Act* x, int64_t xs, int x_div, float* y, int64_t ys, Stream stream) {
  const int64_t nb = w.n_in / F::kBlockElems;
  const uintptr_t base = reinterpret_cast<uintptr_t>(w.data);
  const size_t align = F::kBlockBytes % 4 == 0 ? 4 : 2;
  if (w.n_in <= 0 || w.n_in % F::kBlockElems != 0 || w.n_out < 0 || w.n_expert <= 0 || n_pairs < 0 ||
      x_div < 1 || w.row_bytes < static_cast<size_t>(nb) * F::kBlockBytes || w.row_bytes % align != 0 ||
      w.expert_bytes < w.row_bytes * static_cast<size_t>(w.n_out) || w.expert_bytes % 4 != 0 || base % 4 != 0 ||
      nb > (1 << 30) || x_div > 65535)
    return invalid_argument("cuda: %s: bad shape (n_in %lld a multiple of %d, n_out %lld, %lld experts of %zu "
                            "bytes (a multiple of 4), row_bytes %zu >= %lld and a multiple of %zu, weights "
                            "4-byte aligned, %d pairs, 1 <= x_div %d <= 65535)", op,
                            static_cast<long long>(w.n_in), F::kBlockElems, static_cast<long long>(w.n_out),
                            static_cast<long long>(w.n_expert), w.expert_bytes, w.row_bytes,
                            static_cast<long long>(nb * F::kBlockBytes), align, n_pairs, x_div);
  if (xs == 0) xs = nb;
  if (ys == 0) ys = w.n_out;
  if constexpr (F::kTables) {
    Status s = upload_iq2_tables();
    if (!s.ok()) return s;
  }
  if (w.n_out == 0 || n_pairs == 0) return Status();
  // Pairs beyond the grid's y limit run as further launches of whole x rows.
  const int max_pairs = 65535 - 65535 % x_div;
  for (int q0 = 0; q0 < n_pairs; q0 += max_pairs) {
    const int cnt = n_pairs - q0 < max_pairs ? n_pairs - q0 : max_pairs;
    const dim3 grid(static_cast<unsigned>((w.n_out + kWarps - 1) / kWarps), static_cast<unsigned>(cnt));
    quant_matvec_sel_kernel<F><<<grid, 32 * kWarps, 0, stream>>>(
        static_cast<const uint8_t*>(w.data), w.row_bytes, w.expert_bytes, w.n_expert, static_cast<int>(nb),
        w.n_out, sel + q0, x + (q0 / x_div) * xs, xs, x_div, y + q0 * ys, ys);
    Status s = launch_status(op, w.n_in, w.n_out, cnt);
    if (!s.ok()) return s;
  }
  return Status();
}

}  // namespace

Status matvec_iq2_xxs_sel(const ExpertWeights& w, const int32_t* sel, int n_pairs, const BlockQ8K* x,
                          int64_t x_stride, int x_div, float* y, int64_t y_stride, Stream stream) {
  return launch_sel<Iq2XxsFmt>("matvec_iq2_xxs_sel", w, sel, n_pairs, x, x_stride, x_div, y, y_stride, stream);
}
Status matvec_q2_k_sel(const ExpertWeights& w, const int32_t* sel, int n_pairs, const BlockQ8K* x,
                       int64_t x_stride, int x_div, float* y, int64_t y_stride, Stream stream) {
  return launch_sel<Q2KFmt>("matvec_q2_k_sel", w, sel, n_pairs, x, x_stride, x_div, y, y_stride, stream);
}
Status matvec_q4_k_sel(const ExpertWeights& w, const int32_t* sel, int n_pairs, const BlockQ8K* x,
                       int64_t x_stride, int x_div, float* y, int64_t y_stride, Stream stream) {
  return launch_sel<Q4KFmt>("matvec_q4_k_sel", w, sel, n_pairs, x, x_stride, x_div, y, y_stride, stream);
}

Status matvec_q8_0(const Weights& w, const BlockQ8_0Act* x, int64_t x_stride, int r, float* y,
                   int64_t y_stride, Stream stream) {
  return launch<Q8_0Fmt>("matvec_q8_0", w, x, x_stride, r, y, y_stride, stream);
}
Status matvec_iq2_xxs(const Weights& w, const BlockQ8K* x, int64_t x_stride, int r, float* y,
                      int64_t y_stride, Stream stream) {
  return launch<Iq2XxsFmt>("matvec_iq2_xxs", w, x, x_stride, r, y, y_stride, stream);
}
Status matvec_q2_k(const Weights& w, const BlockQ8K* x, int64_t x_stride, int r, float* y,
                   int64_t y_stride, Stream stream) {
  return launch<Q2KFmt>("matvec_q2_k", w, x, x_stride, r, y, y_stride, stream);
}
Status matvec_q4_k(const Weights& w, const BlockQ8K* x, int64_t x_stride, int r, float* y,
                   int64_t y_stride, Stream stream) {
  return launch<Q4KFmt>("matvec_q4_k", w, x, x_stride, r, y, y_stride, stream);
}

}  // namespace ds4::cuda
