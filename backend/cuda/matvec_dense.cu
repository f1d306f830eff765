// backend/cuda/matvec_dense.cu — F16 and F32 matvecs in the canonical 64-lane order.
//
// Role: matvec_f16 / matvec_f32 of cuda_kernels.h, bit-identical to quant::dot_f16 /
// dot_f32 (quant/dot.h) for r = 1..8 rows per launch.
// Layout: one warp per output row; lane t owns the CPU's lane partials p[t] and p[t+32] of
// every activation row and adds w[i]·x[i] for i ≡ t (resp. t+32) mod 64 in increasing i,
// the n % 64 tail included (each tail element is its lane's last step): the same sequence of
// separately rounded products and sums as the CPU's lanes. Matrices of >= 4096 rows read each
// weight from DRAM once per call (tiles staged in shared memory by the whole CTA serve all r
// rows); narrower ones run one CTA per (output row, activation row): by default staged (the
// whole x row and weight row copied to shared memory by cp.async at once, in kStageParts
// groups; the 64 lane chains on 64 threads of four warps, each part summed as it lands; rows
// up to kDenseStagedSmem), else (DenseNarrowKernel::kTiled, longer rows) in 2,048-column tiles,
// one in flight while warp 0 sums the other. Then the
// halving tree: h = 32 inside the thread (p[t] + p[t+32]), h = 16, 8, 4, 2, 1 by shuffles
// (lane t gets p[t+h]): lanes64.cuh's dot_step and tree64. --fmad=false keeps mul and add apart.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/lanes64.cuh"
#include "backend/cuda/pdl.cuh"

namespace ds4::cuda {

namespace {

template <bool kF16>
__device__ __forceinline__ float load_w1(const uint8_t* row, int64_t i) {
  if constexpr (kF16) {
    return detail::f16_to_f32(reinterpret_cast<const uint16_t*>(row)[i]);
  } else {
    return reinterpret_cast<const float*>(row)[i];
  }
}

// Weights row[e .. e + kCe) as f32 (kCe = 8 for F16, 4 for F32): one 16-byte load when vec.
template <bool kF16>
__device__ __forceinline__ void load_chunk(const uint8_t* row, int64_t e, bool vec, float (&v)[kF16 ? 8 : 4]) {
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
      v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < (kF16 ? 8 : 4); ++i) v[i] = load_w1<kF16>(row, e + i);
}

// One CTA = kRpc output rows (one compute warp each). All 256 threads stream tiles of kT
// columns of the weights and of the activation rows into shared memory, prefetching the next
// tile into registers while the compute warps run the current one; so the per-lane chains
// wait on shared memory, never on DRAM. kXRows: activation rows the tiles hold (1 or 8).
template <bool kF16, int kRpc, int kXRows>
struct DenseCfg {
  static constexpr int kThreads = 256;
  // Columns per tile: a multiple of 64 (the lane chunk), sized so the two buffers of weights
  // and activations stay under the 48 KB of static shared memory; a single-row, single-input
  // CTA takes long tiles so that each thread keeps several 16-byte loads in flight.
  static constexpr int kT = kRpc >= 8 ? 256 : (kXRows == 1 ? 2048 : 512);
  static constexpr int kCe = kF16 ? 8 : 4;            // weight elements per 16-byte chunk
  static constexpr int kWStride = kT + 16;            // padded: rows land in other banks
  static constexpr int kWChunks = (kRpc * kT / kCe + kThreads - 1) / kThreads;
  static constexpr int kXChunks = (kXRows * kT / 4 + kThreads - 1) / kThreads;
};

template <bool kF16, int kRpc, int kXRows>
__global__ void __launch_bounds__(256) dense_matvec_kernel(const uint8_t* __restrict__ w, size_t row_bytes,
                                                           int64_t n, int64_t n_out, const float* __restrict__ x,
                                                           int64_t xs, int r, float* __restrict__ y, int64_t ys,
                                                           bool w_vec, bool x_vec) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  using C = DenseCfg<kF16, kRpc, kXRows>;
  constexpr int kT = C::kT, kCe = C::kCe;
  __shared__ __align__(16) float ws[2][kRpc * C::kWStride];
  __shared__ __align__(16) float xsm[2][kXRows * kT];
  const int tid = threadIdx.x;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRpc;
  if constexpr (kXRows == 1) {  // single-input CTAs: blockIdx.y picks the activation row
    x += static_cast<int64_t>(blockIdx.y) * xs;
    y += static_cast<int64_t>(blockIdx.y) * ys;
  }
  const int64_t m = n - n % 64;  // staged columns; the tail is read from global memory
  const int64_t n_tiles = (m + kT - 1) / kT;

  float wreg[C::kWChunks][kCe];
  float xreg[C::kXChunks][4];
  // Global -> registers for the tile starting at column t0 (len columns, a multiple of 64).
  auto fetch = [&](int64_t t0, int len) {
#pragma unroll
    for (int c = 0; c < C::kWChunks; ++c) {
      const int q = tid + c * C::kThreads;
      const int rho = q / (kT / kCe), col = (q % (kT / kCe)) * kCe;
      if (q < kRpc * kT / kCe && col < len) {
        int64_t row = row0 + rho;
        row = row < n_out ? row : n_out - 1;
        const uint8_t* rp = w + row * row_bytes;
        load_chunk<kF16>(rp, t0 + col, w_vec, wreg[c]);
      }
    }
#pragma unroll
    for (int c = 0; c < C::kXChunks; ++c) {
      const int q = tid + c * C::kThreads;
      const int k = q / (kT / 4), col = (q % (kT / 4)) * 4;
      if (q < kXRows * kT / 4 && k < r && col < len) {
        const float* xp = x + k * xs + t0 + col;
        if (x_vec) {
          const float4 a = __ldg(reinterpret_cast<const float4*>(xp));
          xreg[c][0] = a.x; xreg[c][1] = a.y; xreg[c][2] = a.z; xreg[c][3] = a.w;
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) xreg[c][e] = __ldg(xp + e);
        }
      }
    }
  };
  auto stash = [&](int buf, int len) {
#pragma unroll
    for (int c = 0; c < C::kWChunks; ++c) {
      const int q = tid + c * C::kThreads;
      const int rho = q / (kT / kCe), col = (q % (kT / kCe)) * kCe;
      if (q < kRpc * kT / kCe && col < len) {
#pragma unroll
        for (int e = 0; e < kCe; ++e) ws[buf][rho * C::kWStride + col + e] = wreg[c][e];
      }
    }
#pragma unroll
    for (int c = 0; c < C::kXChunks; ++c) {
      const int q = tid + c * C::kThreads;
      const int k = q / (kT / 4), col = (q % (kT / 4)) * 4;
      if (q < kXRows * kT / 4 && k < r && col < len) {
#pragma unroll
        for (int e = 0; e < 4; ++e) xsm[buf][k * kT + col + e] = xreg[c][e];
      }
    }
  };

  const int rho = tid >> 5, t = tid & 31;
  const bool computes = rho < kRpc;
  float p0[kXRows], p1[kXRows];  // lane partials p[t] and p[t + 32] per activation row
#pragma unroll
  for (int k = 0; k < kXRows; ++k) p0[k] = p1[k] = 0.0f;

  if (n_tiles > 0) {
    const int len0 = static_cast<int>(m < kT ? m : kT);
    fetch(0, len0);
    stash(0, len0);
    __syncthreads();
  }
  for (int64_t tt = 0; tt < n_tiles; ++tt) {
    const int64_t t0 = tt * kT;
    const int len = static_cast<int>(m - t0 < kT ? m - t0 : kT);
    const bool more = tt + 1 < n_tiles;
    const int64_t t1 = t0 + kT;
    const int len1 = more ? static_cast<int>(m - t1 < kT ? m - t1 : kT) : 0;
    if (more) fetch(t1, len1);  // in flight while the chains below run
    if (computes) {
      const float* wr = ws[tt & 1] + rho * C::kWStride + t;
      const float* xr = xsm[tt & 1] + t;
      for (int i = 0; i < len; i += 64) {
        const float w0 = wr[i], w1 = wr[i + 32];
#pragma unroll
        for (int k = 0; k < kXRows; ++k) {
          if (k < r) {
            p0[k] = detail::dot_step(p0[k], w0, xr[k * kT + i]);
            p1[k] = detail::dot_step(p1[k], w1, xr[k * kT + i + 32]);
          }
        }
      }
    }
    if (more) stash((tt + 1) & 1, len1);
    __syncthreads();
  }
  if (!computes) return;  // whole warps: the shuffles below see all 32 lanes
  const int64_t o = row0 + rho;
  const int64_t oc = o < n_out ? o : n_out - 1;  // a padding warp computes a copy, stores nothing
  const uint8_t* row = w + oc * row_bytes;
  // The n % 64 tail: element m + l is the last step of lane l.
  const bool h0 = m + t < n, h1 = m + t + 32 < n;
  const float wt0 = h0 ? load_w1<kF16>(row, m + t) : 0.0f;
  const float wt1 = h1 ? load_w1<kF16>(row, m + t + 32) : 0.0f;
#pragma unroll
  for (int k = 0; k < kXRows; ++k) {
    if (k < r) {
      const float* xk = x + k * xs;
      if (h0) p0[k] = detail::dot_step(p0[k], wt0, xk[m + t]);
      if (h1) p1[k] = detail::dot_step(p1[k], wt1, xk[m + t + 32]);
    }
  }
  // The halving tree: h = 32 in-thread, then 16, 8, 4, 2, 1 by shuffles (lane t gets p[t + h]).
#pragma unroll
  for (int k = 0; k < kXRows; ++k) p0[k] = detail::tree64(p0[k], p1[k]);
  if (t != 0 || o >= n_out) return;
#pragma unroll
  for (int k = 0; k < kXRows; ++k)
    if (k < r) y[k * ys + o] = p0[k];
}

// ---- Narrow matrices, staged ------------------------------------------------------------------

constexpr int kDenseStagedThreads = 128;
constexpr int kDenseStagedSmem = 200 * 1024;  // dynamic shared memory a CTA may take

__host__ __device__ inline int round_up(int v, int m) { return (v + m - 1) / m * m; }

// x (f32, n rounded up to 4) then the weight row (n rounded up to 8 halves, or to 4 floats).
size_t dense_staged_smem(bool f16, int64_t n) {
  const int ni = static_cast<int>(n);
  return 4 * static_cast<size_t>(round_up(ni, 4)) + (f16 ? 2 * static_cast<size_t>(round_up(ni, 8))
                                                         : 4 * static_cast<size_t>(round_up(ni, 4)));
}

// F16 weights [lo, hi) of src to dst (same indices): 16-byte cp.async copies when vec (lo ≡ 0
// mod 8), plain loads for the rest (a row that is not 16-byte aligned, the last hi % 8).
__device__ __forceinline__ void stage_f16(uint16_t* dst, const uint16_t* src, int lo, int hi, bool vec) {
  int s = lo;
  if (vec) {
    const int c1 = hi / 8;
    for (int c = lo / 8 + static_cast<int>(threadIdx.x); c < c1; c += static_cast<int>(blockDim.x))
      cp_async16_cg(dst + 8 * c, src + 8 * c);
    s = c1 * 8;
  }
  for (int i = s + static_cast<int>(threadIdx.x); i < hi; i += static_cast<int>(blockDim.x)) dst[i] = __ldg(src + i);
}

// grid (Σ n_out of the groups, r): CTA (o, k) computes y[k][o'] = dot(w row o', x row k) of the
// group g whose outputs [o_begin, o_end) hold o (o' = o - o_begin): one matvec (n = 1) or several
// over rows of one length in one launch (matvec_dense_grouped); a CTA's work is the same
// whichever launch it belongs to.
template <bool kF16>
__global__ void __launch_bounds__(kDenseStagedThreads) dense_staged_kernel(const __grid_constant__ DenseGroups gs,
                                                                           int n, bool pdl) {
  extern __shared__ __align__(16) unsigned char dyn[];
  __shared__ float p_s[64];
  const int tid = threadIdx.x;
  int g = 0;
  while (g + 1 < gs.n && static_cast<int64_t>(blockIdx.x) >= gs.g[g].o_end) ++g;
  const DenseGroup& gr = gs.g[g];
  const int64_t o = static_cast<int64_t>(blockIdx.x) - (g == 0 ? 0 : gs.g[g - 1].o_end);
  const float* x = gr.x + static_cast<int64_t>(blockIdx.y) * gr.xs;
  float* y = gr.y + static_cast<int64_t>(blockIdx.y) * gr.ys;
  float* xsm = reinterpret_cast<float*>(dyn);  // [n4]
  unsigned char* wsm = dyn + 4 * round_up(n, 4);
  const uint8_t* wr = gr.w + o * gr.row_bytes;
  const bool xvec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const bool wvec = reinterpret_cast<uintptr_t>(wr) % 16 == 0;
  const int part = detail::stage_part(n);
  // Part c of the weight row and of x: one cp.async group each (interleaved), or, launched with
  // PDL (pdl), the weight parts first, before the wait for the kernel that writes x, then x's.
  // Either way x's part c is followed by at most kStageParts - 1 - c newer groups, all of them
  // later parts, so the chains' wait below is the same.
  auto stage_w = [&](int lo, int hi) {
    if constexpr (kF16) {
      stage_f16(reinterpret_cast<uint16_t*>(wsm), reinterpret_cast<const uint16_t*>(wr), lo, hi, wvec);
    } else {
      detail::stage_f32(reinterpret_cast<float*>(wsm), reinterpret_cast<const float*>(wr), lo, hi, wvec);
    }
  };
  if (pdl) {
#pragma unroll
    for (int c = 0; c < detail::kStageParts; ++c) {
      const int lo = c * part < n ? c * part : n;
      stage_w(lo, lo + part < n ? lo + part : n);
      cp_async_commit();
    }
  }
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
#pragma unroll
  for (int c = 0; c < detail::kStageParts; ++c) {
    const int lo = c * part < n ? c * part : n;
    const int hi = lo + part < n ? lo + part : n;
    detail::stage_f32(xsm, x, lo, hi, xvec);
    if (!pdl) stage_w(lo, hi);
    cp_async_commit();
  }
  const bool st = detail::stat_thread(tid);
  const int l = detail::stat_lane(tid);
  float acc = 0.0f;
#pragma unroll
  for (int c = 0; c < detail::kStageParts; ++c) {
    detail::cp_async_wait_pending(detail::kStageParts - 1 - c);
    __syncthreads();
    const int lo = c * part < n ? c * part : n;
    const int hi = lo + part < n ? lo + part : n;
    if (st) {
#pragma unroll 8
      for (int i = lo + l; i < hi; i += 64) acc = detail::dot_step(acc, load_w1<kF16>(wsm, i), xsm[i]);
    }
  }
  if (st) p_s[l] = acc;
  __syncthreads();
  if (tid < 32) {
    const float v = detail::tree64(p_s[tid], p_s[tid + 32]);
    if (tid == 0) y[o] = v;
  }
}

DenseNarrowKernel g_narrow = DenseNarrowKernel::kStaged;

template <bool kF16>
bool dense_staged_ready() {  // > 48 KB of dynamic shared memory: the opt-in, once per process
  static const bool ok = [] {
    const cudaError_t e = cudaFuncSetAttribute(dense_staged_kernel<kF16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               kDenseStagedSmem);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess;
  }();
  return ok;
}

template <bool kF16>
Status launch(const char* op, const Weights& w, const float* x, int64_t xs, int r, float* y, int64_t ys,
              Stream stream) {
  const size_t elem = kF16 ? 2 : 4;
  DS4_RETURN_IF_ERROR(check_dense_shape(op, w, r, elem));
  if (xs == 0) xs = w.n_in;
  if (ys == 0) ys = w.n_out;
  if (w.n_out == 0 || r == 0) return Status();
  const bool w_vec = reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.row_bytes % 16 == 0;
  const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && xs % 4 == 0;
  const uint8_t* wp = static_cast<const uint8_t*>(w.data);
  // 8 rows per CTA when that still gives every SM a few CTAs; else one (output row,
  // activation row) pair per CTA with long single-input tiles: a narrow matrix (the HC
  // projection, 24 x 16384) then gets r times the CTAs instead of r times the chain length
  // (its weights are re-read from L2 by each row's CTAs).
  const bool wide = w.n_out >= 4096;
  for (int k0 = 0; k0 < r; k0 += kMaxRows) {
    const int rr = r - k0 < kMaxRows ? r - k0 : kMaxRows;
    const float* xk = x + k0 * xs;
    float* yk = y + k0 * ys;
    if (wide) {
      const unsigned grid = static_cast<unsigned>((w.n_out + 7) / 8);
      detail::launch_pdl(pdl_all(), dense_matvec_kernel<kF16, 8, kMaxRows>, grid, 256, 0, stream, wp, w.row_bytes,
                         w.n_in, w.n_out, xk, xs, rr, yk, ys, w_vec, x_vec);
    } else if (g_narrow == DenseNarrowKernel::kStaged && w.n_in > 0 &&
               dense_staged_smem(kF16, w.n_in) <= static_cast<size_t>(kDenseStagedSmem) && dense_staged_ready<kF16>()) {
      DenseGroups gs{};
      gs.n = 1;
      gs.g[0] = DenseGroup{wp, w.row_bytes, xk, xs, yk, ys, w.n_out};
      const dim3 grid(static_cast<unsigned>(w.n_out), static_cast<unsigned>(rr));
      detail::launch_pdl(pdl_all(), dense_staged_kernel<kF16>, grid, kDenseStagedThreads,
                         dense_staged_smem(kF16, w.n_in), stream, gs, static_cast<int>(w.n_in), pdl_all());
    } else {
      const dim3 grid(static_cast<unsigned>(w.n_out), static_cast<unsigned>(rr));
      detail::launch_pdl(pdl_all(), dense_matvec_kernel<kF16, 1, 1>, grid, 256, 0, stream, wp, w.row_bytes, w.n_in,
                         w.n_out, xk, xs, 1, yk, ys, w_vec, x_vec);
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

Status matvec_dense_grouped(bool f16, const DenseGroup* groups, int n_groups, int64_t n_in, int r, bool* done,
                            Stream stream) {
  *done = false;
  if (n_groups < 1 || n_groups > kMaxDenseGroups || r < 1 || r > kMaxRows || n_in <= 0 ||
      g_narrow != DenseNarrowKernel::kStaged || dense_staged_smem(f16, n_in) > static_cast<size_t>(kDenseStagedSmem))
    return Status();
  const size_t elem = f16 ? 2 : 4;
  DenseGroups gs{};
  gs.n = n_groups;
  int64_t end = 0;
  for (int g = 0; g < n_groups; ++g) {
    const DenseGroup& d = groups[g];
    const int64_t n_out = d.o_end;  // the caller's o_end: this group's own n_out
    // The narrow kernel's shapes only (matvec_f16 takes wide ones on another kernel).
    if (n_out <= 0 || n_out >= 4096 || d.row_bytes < static_cast<size_t>(n_in) * elem || d.row_bytes % elem != 0 ||
        reinterpret_cast<uintptr_t>(d.w) % elem != 0)
      return Status();
    end += n_out;
    gs.g[g] = d;
    gs.g[g].o_end = end;
  }
  if (end > 0x7fffffff || !(f16 ? dense_staged_ready<true>() : dense_staged_ready<false>())) return Status();
  const dim3 grid(static_cast<unsigned>(end), static_cast<unsigned>(r));
  if (f16) {
    detail::launch_pdl(pdl_all(), dense_staged_kernel<true>, grid, kDenseStagedThreads, dense_staged_smem(true, n_in),
                       stream, gs, static_cast<int>(n_in), pdl_all());
  } else {
    detail::launch_pdl(pdl_all(), dense_staged_kernel<false>, grid, kDenseStagedThreads, dense_staged_smem(false, n_in),
                       stream, gs, static_cast<int>(n_in), pdl_all());
  }
  *done = true;
  return launch_status(f16 ? "matvec_f16 (grouped)" : "matvec_f32 (grouped)", n_in, end, r);
}

void set_dense_narrow_kernel(DenseNarrowKernel k) { g_narrow = k; }
DenseNarrowKernel dense_narrow_kernel() { return g_narrow; }

Status check_dense_shape(const char* op, const Weights& w, int r, size_t elem) {
  if (w.n_in < 0 || w.n_out < 0 || r < 0 || w.row_bytes < static_cast<size_t>(w.n_in) * elem ||
      w.row_bytes % elem != 0 || reinterpret_cast<uintptr_t>(w.data) % elem != 0)
    return invalid_argument("cuda: %s: bad shape (n_in %lld, row_bytes %zu >= n_in·%zu and aligned, rows %d)", op,
                            static_cast<long long>(w.n_in), w.row_bytes, elem, r);
  return Status();
}

}  // namespace ds4::cuda
