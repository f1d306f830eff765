// backend/cuda/matvec_dense_rows.cu — F16 / F32 weights × MANY f32 activation rows (prefill) in
// the canonical 64-lane order, on CUDA cores (issue #30).
//
// Role: matvec_f16_rows / matvec_f32_rows and set_dense_rows_kernel of cuda_kernels.h;
// matmul (matmul.cu) takes them for n_rows > kMaxRows under DenseRowsKernel::kWide instead of
// the r <= 8 kernels in tiles of kMaxRows (which re-read the weights per 8 rows and run one CTA
// per (output, row) below 4096 outputs).
// Layout: a CTA computes a tile of kBO outputs × kBR activation rows; its 8 warps are kWO × kWR
// warp tiles of kTO outputs × kTR rows. The K dimension runs in chunks of kKT columns (a
// multiple of 64) staged in shared memory by cp.async, kStages chunks in flight: the weight
// tile [kBO][kKT] (f16 or f32, as stored) and the activation tile [kBR][kKT] f32. Each weight
// chunk is read from global memory once per CTA and serves kBR rows.
// Order (quant/dot.h dot_f16 / dot_f32): lane t of a warp owns the CPU's lane partials
// p[2t] and p[2t+1] of each of its kTO·kTR outputs; in a 64-column step starting at column c
// (c ≡ 0 mod 64) it adds w[c+2t]·x[c+2t] to p[2t] and w[c+2t+1]·x[c+2t+1] to p[2t+1]
// (dot_step: a separately rounded product, then the sum; --fmad=false), steps in increasing
// c; the n % 64 tail (columns m + j, j < n % 64, read from global memory) is each lane's last
// step. Then lanes64.cuh's tree64_pairs: h = 32..2 by shuffles (offsets 16..1), h = 1 in-thread.
// So every output gets the CPU's exact sequence; rows and outputs never share an accumulator
// (batch invariance: a row's bits do not depend on r, the tile or its place in it).
// Padding rows / outputs of a partial tile load a clamped copy (row r-1, output n_out-1) and
// store nothing. Shapes: any n_in >= 0 (16-byte cp.async when the weight rows and x rows are
// 16-byte aligned, else 4-byte cp.async for x and plain loads for the weights).
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/lanes64.cuh"
#include "backend/cuda/pdl.cuh"

namespace ds4::cuda {

namespace {

constexpr int kRowsThreads = 256;  // 8 warps
constexpr int kKT = 256;           // columns per staged chunk (4 steps of 64)
constexpr int kStages = 3;         // chunks in flight

// Warp tile kTO outputs × kTR rows; CTA kWO × kWR warps.
template <int kTO_, int kTR_, int kWO_, int kWR_>
struct RowsTile {
  static constexpr int kTO = kTO_, kTR = kTR_, kWO = kWO_, kWR = kWR_;
  static constexpr int kBO = kTO * kWO, kBR = kTR * kWR;
  static_assert(kWO * kWR * 32 == kRowsThreads, "8 warps");
};
using BigTile = RowsTile<4, 8, 4, 2>;    // 16 outputs × 16 rows per CTA, 64 partials a thread
using SmallTile = RowsTile<2, 4, 4, 2>;  // 8 × 8: more CTAs for the narrow matrices

template <bool kF16, class T>
__host__ __device__ constexpr size_t rows_stage_bytes() {
  return static_cast<size_t>(T::kBO) * kKT * (kF16 ? 2 : 4) + static_cast<size_t>(T::kBR) * kKT * 4;
}
template <bool kF16, class T>
__host__ __device__ constexpr size_t rows_smem_bytes() {
  return kStages * rows_stage_bytes<kF16, T>();
}

// Weights (w, f16 or f32) and activations (x, f32) of elements [2t, 2t+1] of a 64-column step.
template <bool kF16>
__device__ __forceinline__ float2 load_w_pair_smem(const unsigned char* wrow, int c) {
  if constexpr (kF16) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(wrow + 2 * c);
    return make_float2(detail::f16_to_f32(static_cast<uint16_t>(u & 0xffffu)),
                       detail::f16_to_f32(static_cast<uint16_t>(u >> 16)));
  } else {
    return *reinterpret_cast<const float2*>(wrow + 4 * c);
  }
}

template <bool kF16>
__device__ __forceinline__ float load_w1_global(const uint8_t* row, int64_t i) {
  if constexpr (kF16) {
    return detail::f16_to_f32(__ldg(reinterpret_cast<const uint16_t*>(row) + i));
  } else {
    return __ldg(reinterpret_cast<const float*>(row) + i);
  }
}

// grid (ceil(n_out / kBO), ceil(r / kBR)); dynamic shared memory rows_smem_bytes.
template <bool kF16, class T>
__global__ void __launch_bounds__(kRowsThreads) dense_rows_kernel(const uint8_t* __restrict__ w, size_t row_bytes,
                                                                  int64_t n, int64_t n_out,
                                                                  const float* __restrict__ x, int64_t xs, int r,
                                                                  float* __restrict__ y, int64_t ys, bool w_vec,
                                                                  bool x_vec) {
  detail::pdl_enter();               // wait for the kernel before, then let the next one launch (pdl.cuh)
  constexpr int kEs = kF16 ? 2 : 4;  // weight element bytes
  constexpr int kWTile = T::kBO * kKT * kEs;
  constexpr size_t kStage = rows_stage_bytes<kF16, T>();
  extern __shared__ __align__(16) unsigned char dyn[];
  const int tid = threadIdx.x;
  const int64_t o_base = static_cast<int64_t>(blockIdx.x) * T::kBO;
  const int64_t k_base = static_cast<int64_t>(blockIdx.y) * T::kBR;
  const int64_t m = n - n % 64;  // staged columns; the tail is read from global memory
  const int64_t n_chunks = (m + kKT - 1) / kKT;

  // Chunk ch (columns [ch·kKT, ch·kKT + len)) into stage buffer s; the caller commits.
  auto issue = [&](int64_t ch, int s) {
    unsigned char* ws = dyn + s * kStage;
    float* xsm = reinterpret_cast<float*>(ws + kWTile);
    const int64_t c0 = ch * kKT;
    const int len = static_cast<int>(m - c0 < kKT ? m - c0 : kKT);  // a multiple of 64
    // Weights: kBO rows of len elements.
    if (w_vec) {
      constexpr int kPer = 16 / kEs;  // elements per 16-byte piece
      const int per_row = len / kPer;
      for (int q = tid; q < T::kBO * per_row; q += kRowsThreads) {
        const int rho = q / per_row, e = (q % per_row) * kPer;
        int64_t o = o_base + rho;
        o = o < n_out ? o : n_out - 1;
        cp_async16_cg(ws + (rho * kKT + e) * kEs, w + o * row_bytes + (c0 + e) * kEs);
      }
    } else {
      for (int q = tid; q < T::kBO * len; q += kRowsThreads) {
        const int rho = q / len, e = q % len;
        int64_t o = o_base + rho;
        o = o < n_out ? o : n_out - 1;
        if constexpr (kF16) {
          reinterpret_cast<uint16_t*>(ws)[rho * kKT + e] =
              __ldg(reinterpret_cast<const uint16_t*>(w + o * row_bytes) + c0 + e);
        } else {
          reinterpret_cast<float*>(ws)[rho * kKT + e] = __ldg(reinterpret_cast<const float*>(w + o * row_bytes) + c0 + e);
        }
      }
    }
    // Activations: kBR rows of len floats.
    if (x_vec) {
      const int per_row = len / 4;
      for (int q = tid; q < T::kBR * per_row; q += kRowsThreads) {
        const int k = q / per_row, e = (q % per_row) * 4;
        int64_t kr = k_base + k;
        kr = kr < r ? kr : r - 1;
        cp_async16_cg(xsm + k * kKT + e, x + kr * xs + c0 + e);
      }
    } else {
      for (int q = tid; q < T::kBR * len; q += kRowsThreads) {
        const int k = q / len, e = q % len;
        int64_t kr = k_base + k;
        kr = kr < r ? kr : r - 1;
        cp_async4(xsm + k * kKT + e, x + kr * xs + c0 + e);
      }
    }
  };

  const int warp = tid >> 5, t = tid & 31;
  const int wo = warp % T::kWO, wr = warp / T::kWO;
  float lo[T::kTO][T::kTR], hi[T::kTO][T::kTR];  // p[2t], p[2t+1] of output (j, k)
#pragma unroll
  for (int j = 0; j < T::kTO; ++j)
#pragma unroll
    for (int k = 0; k < T::kTR; ++k) lo[j][k] = hi[j][k] = 0.0f;

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_chunks) issue(s, s);
    cp_async_commit();  // (empty groups keep the count uniform)
  }
  for (int64_t ch = 0; ch < n_chunks; ++ch) {
    cp_async_wait_group<kStages - 2>();  // chunk ch has landed (this thread's copies)
    __syncthreads();                     // everyone's copies; everyone done with chunk ch - 1
    if (ch + kStages - 1 < n_chunks) issue(ch + kStages - 1, static_cast<int>((ch + kStages - 1) % kStages));
    cp_async_commit();
    const unsigned char* ws = dyn + (ch % kStages) * kStage;
    const float* xsm = reinterpret_cast<const float*>(ws + kWTile);
    const int64_t c0 = ch * kKT;
    const int len = static_cast<int>(m - c0 < kKT ? m - c0 : kKT);
    const unsigned char* wbase = ws + (wo * T::kTO) * kKT * kEs;
    const float* xbase = xsm + (wr * T::kTR) * kKT + 2 * t;
    for (int c = 2 * t; c < len; c += 64) {
      float2 wv[T::kTO];
#pragma unroll
      for (int j = 0; j < T::kTO; ++j) wv[j] = load_w_pair_smem<kF16>(wbase + j * kKT * kEs, c);
#pragma unroll
      for (int k = 0; k < T::kTR; ++k) {
        const float2 xv = *reinterpret_cast<const float2*>(xbase + k * kKT + (c - 2 * t));
#pragma unroll
        for (int j = 0; j < T::kTO; ++j) {
          lo[j][k] = detail::dot_step(lo[j][k], wv[j].x, xv.x);
          hi[j][k] = detail::dot_step(hi[j][k], wv[j].y, xv.y);
        }
      }
    }
  }
  cp_async_wait_group<0>();  // no copy outlives the kernel (the trailing groups are empty)

  // The n % 64 tail: column m + j is the last step of lane j (j = 2t, 2t + 1).
  const int64_t o0 = o_base + wo * T::kTO;
  const int64_t k0 = k_base + wr * T::kTR;
  const bool h0 = m + 2 * t < n, h1 = m + 2 * t + 1 < n;
  if (h0 || h1) {
#pragma unroll
    for (int j = 0; j < T::kTO; ++j) {
      int64_t o = o0 + j;
      o = o < n_out ? o : n_out - 1;
      const uint8_t* row = w + o * row_bytes;
      const float w0 = h0 ? load_w1_global<kF16>(row, m + 2 * t) : 0.0f;
      const float w1 = h1 ? load_w1_global<kF16>(row, m + 2 * t + 1) : 0.0f;
#pragma unroll
      for (int k = 0; k < T::kTR; ++k) {
        int64_t kr = k0 + k;
        kr = kr < r ? kr : r - 1;
        const float* xk = x + kr * xs;
        if (h0) lo[j][k] = detail::dot_step(lo[j][k], w0, __ldg(xk + m + 2 * t));
        if (h1) hi[j][k] = detail::dot_step(hi[j][k], w1, __ldg(xk + m + 2 * t + 1));
      }
    }
  }
  // The halving tree per output; lane 0 stores.
#pragma unroll
  for (int j = 0; j < T::kTO; ++j) {
#pragma unroll
    for (int k = 0; k < T::kTR; ++k) {
      const float v = detail::tree64_pairs(lo[j][k], hi[j][k]);
      const int64_t o = o0 + j, kr = k0 + k;
      if (t == 0 && o < n_out && kr < r) y[kr * ys + o] = v;
    }
  }
}

std::atomic<int> g_rows_kernel{static_cast<int>(DenseRowsKernel::kTiles8)};

struct RowsDev {
  bool done = false, ok = false;
  int sms = 0;
};

template <bool kF16, class T>
cudaError_t rows_optin() {
  return cudaFuncSetAttribute(dense_rows_kernel<kF16, T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(rows_smem_bytes<kF16, T>()));
}

// The SM count of the current device, once per device (and the shared-memory opt-ins); 0 when
// the device cannot run the kernel.
int rows_sms() {
  static RowsDev devs[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  RowsDev& d = devs[dev];
  if (!d.done) {
    d.done = true;
    if (cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        rows_optin<true, BigTile>() != cudaSuccess || rows_optin<true, SmallTile>() != cudaSuccess ||
        rows_optin<false, BigTile>() != cudaSuccess || rows_optin<false, SmallTile>() != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    d.ok = d.sms > 0;
  }
  return d.ok ? d.sms : 0;
}

template <bool kF16, class T>
void launch_tile(const Weights& w, const float* x, int64_t xs, int r, float* y, int64_t ys, bool w_vec, bool x_vec,
                 Stream stream) {
  const dim3 grid(static_cast<unsigned>((w.n_out + T::kBO - 1) / T::kBO), static_cast<unsigned>((r + T::kBR - 1) / T::kBR));
  detail::launch_pdl(pdl_all(), dense_rows_kernel<kF16, T>, grid, kRowsThreads, rows_smem_bytes<kF16, T>(), stream,
                     static_cast<const uint8_t*>(w.data), w.row_bytes, w.n_in, w.n_out, x, xs, r, y, ys, w_vec, x_vec);
}

template <bool kF16>
Status launch_rows(const char* op, const Weights& w, const float* x, int64_t xs, int r, float* y, int64_t ys,
                   Stream stream) {
  const size_t elem = kF16 ? 2 : 4;
  DS4_RETURN_IF_ERROR(check_dense_shape(op, w, r, elem));
  if (xs == 0) xs = w.n_in;
  if (ys == 0) ys = w.n_out;
  if (w.n_out == 0 || r == 0) return Status();
  const int sms = rows_sms();
  if (sms == 0 || w.n_out > 0x7fffffffLL * SmallTile::kBO)
    return unsupported("cuda: %s: the many-row kernel cannot run here (n_out %lld)", op,
                       static_cast<long long>(w.n_out));
  const bool w_vec = reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.row_bytes % 16 == 0;
  const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && xs % 4 == 0;
  // The big tile when it gives every SM at least two CTAs, else the small one (the narrow
  // compressor / indexer projections at 32 rows: 4096 -> 256 is 32 big CTAs, 128 small ones).
  const int64_t big = (w.n_out + BigTile::kBO - 1) / BigTile::kBO * ((r + BigTile::kBR - 1) / BigTile::kBR);
  if (big >= 2LL * sms)
    launch_tile<kF16, BigTile>(w, x, xs, r, y, ys, w_vec, x_vec, stream);
  else
    launch_tile<kF16, SmallTile>(w, x, xs, r, y, ys, w_vec, x_vec, stream);
  return launch_status(op, w.n_in, w.n_out, r);
}

}  // namespace

Status matvec_f16_rows(const Weights& w, const float* x, int64_t x_stride, int r, float* y, int64_t y_stride,
                       Stream stream) {
  return launch_rows<true>("matvec_f16_rows", w, x, x_stride, r, y, y_stride, stream);
}
Status matvec_f32_rows(const Weights& w, const float* x, int64_t x_stride, int r, float* y, int64_t y_stride,
                       Stream stream) {
  return launch_rows<false>("matvec_f32_rows", w, x, x_stride, r, y, y_stride, stream);
}

void set_dense_rows_kernel(DenseRowsKernel k) { g_rows_kernel.store(static_cast<int>(k), std::memory_order_relaxed); }
DenseRowsKernel dense_rows_kernel() {
  return static_cast<DenseRowsKernel>(g_rows_kernel.load(std::memory_order_relaxed));
}

}  // namespace ds4::cuda
