// backend/cuda/matmul_q8_0_tc.cu — Q8_0 weights × Q8_0 activations for MANY activation rows
// (prefill: r >= kQ8_0TcMinRows) on the int8 tensor cores: a tiled GEMM whose every output
// keeps quant::dot_q8_0's single float accumulator in block order.
//
// Role: cuda_kernels.h's matmul_q8_0_tc / set_q8_0_rows_kernel, and tc_try_launch
// (matmul_q8_0_tc.h) for matvec_q8_0 / matvec_q8_0_grouped's dispatch. Why: the r <= 8
// kernels read the whole weight matrix once per 8 rows (a 2K-token prefill reads every matrix
// 256 times); here a CTA tile of BM weight rows × BN activation rows reads each once per tile.
// Layout: grid (row tiles, output tiles, groups), x fastest so the CTAs that share a weight
// tile run together (the head's 563 MB of weights leave DRAM once). WM × WN warps, a warp
// owning MT × NT mma tiles (16 weight rows × 8 activation rows each). Two shared-memory stages
// of kTcChunk = 8 blocks: weight rows copied raw (8 × 34 = 272 bytes, 16-byte cp.async; f16 d
// and quants interleaved as in memory), activation rows raw (8 × 36 = 288 bytes, padded to
// 304); the next chunk's copies are in flight while the current one is computed.
// Per block (one mma k-slice of 32 = one Q8_0 block) a warp builds its A fragments from the
// staged weight rows (the quants of even blocks realigned by a funnel shift, as
// q8_0_mma_kernel does), its B fragments from the staged activation rows, and runs one
// mma.m16n8k32.s8 per tile starting from C = kMagic, never accumulating integers across
// blocks. Lane (g = lane / 4, t = lane % 4) receives the isums of (row g, act 2t), (g, 2t+1),
// (g+8, 2t), (g+8, 2t+1) of each tile and owns those accumulators for the whole K loop.
// Bit-exactness (quant/dot.h dot_q8_0), per output and block in block order:
//   isum exact (s8·s8 summed in s32; |isum| <= 32·128·128 = 2^19);
//   (float)isum = bits(kMagic + isum) − 1.5·2^23: with C = kMagic = bits(1.5·2^23) the mma
//     returns kMagic + isum (exact int32, no overflow), whose float is 1.5·2^23 + isum exactly
//     (ulp 1 in [2^23, 2^24)); the subtraction is exact (isum = 0 gives +0, as (float)0 does).
//     Why: one FADD instead of an I2F, whose throughput (16 / clock / SM) would bound the kernel;
//   s = f16(w.d) · x.d, t = s · (float)isum, acc = acc + t: each rounded (__fmul_rn / __fadd_rn,
//     and the folder builds with --fmad=false).
// So a row's bits never depend on r, the tile or the kernel (batch invariance); rows >= r and
// weight rows >= n_out are never copied (their stale shared memory feeds mma lanes whose
// results are never stored).
// Shared-memory banks: weight stage rows are 68 words (≡ 4 mod 32) and activation rows 76
// (≡ 12 mod 32, 76/4 odd), so the 32 lanes' (g, t) fragment loads hit 32 distinct banks.
#include <cuda_runtime.h>

#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/matmul_q8_0_tc.h"
#include "backend/cuda/pdl.cuh"

namespace ds4::cuda {

namespace {

using detail::f16_to_f32;
using detail::load_u16;
using quant::BlockQ8_0Act;

constexpr int kTcChunk = 8;                         // blocks per stage row
constexpr int kTcWRowBytes = kTcChunk * 34;         // 272 = 17 × 16
constexpr int kTcWRowWords = kTcWRowBytes / 4;      // 68
constexpr int kTcXRowBytesRaw = kTcChunk * 36;      // 288 = 18 × 16
constexpr int kTcXRowWords = 76;                    // 72 + 4 padding words
constexpr int kTcXRowBytes = kTcXRowWords * 4;      // 304
constexpr int kMagic = 0x4B400000;                  // bits of 12582912.0f = 1.5 · 2^23
constexpr float kMagicF = 12582912.0f;
static_assert(kTcWRowBytes % 16 == 0 && kTcXRowBytes % 16 == 0, "16-byte cp.async rows");
static_assert(kTcWRowWords % 32 == 4 && (kTcXRowWords / 4) % 2 == 1, "conflict-free fragment loads");

// A CTA tile: WM × WN warps, each MT × NT mma tiles (16 × 8).
template <int WM, int WN, int MT, int NT>
struct TcTile {
  static constexpr int kThreads = 32 * WM * WN;
  static constexpr int kBM = WM * MT * 16;  // weight rows (outputs) per CTA
  static constexpr int kBN = WN * NT * 8;   // activation rows per CTA
  static constexpr int kWBytes = kBM * kTcWRowBytes;
  static constexpr int kStageBytes = kWBytes + kBN * kTcXRowBytes;
  static constexpr int kSmem = 2 * kStageBytes;
};
// The three tiles dispatch chooses from (Q8_0RowsKernel kTcLarge / kTcMedium / kTcSmall).
using TileL = TcTile<2, 4, 4, 4>;  // 128 × 128, 8 warps, 147 KB: 1 CTA per SM
using TileM = TcTile<2, 2, 4, 4>;  // 128 × 64, 4 warps, 106 KB: 2 CTAs per SM
using TileS = TcTile<2, 2, 2, 2>;  // 64 × 32, 4 warps, 53 KB: 4 CTAs per SM

// c = kMagic + A·B: A = 16 weight rows × 32 s8 (row-major), B = 32 × 8 s8 (a column per
// activation row); exact int32.
__device__ __forceinline__ void mma_s8_magic(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(kMagic));
}

// Copies chunk c (cnt blocks) of the tile's weight rows [o0, o0 + BM) and activation rows
// [k0, k0 + BN) into `stage` (all threads): 16-byte cp.async for whole chunks of aligned
// matrices, else 2-byte loads (weights) and 4-byte cp.async (activations). Rows outside the
// matrices are not copied.
template <class T>
__device__ __forceinline__ void tc_issue(uint8_t* stage, const uint8_t* __restrict__ w, size_t row_bytes,
                                         int64_t o0, int64_t n_out, const BlockQ8_0Act* __restrict__ x, int64_t xs,
                                         int k0, int r, int c, int cnt, bool wvec, bool xvec) {
  uint8_t* xst = stage + T::kWBytes;
  const size_t woff = static_cast<size_t>(c) * kTcWRowBytes;
  const int m_cnt = n_out - o0 < T::kBM ? static_cast<int>(n_out - o0) : T::kBM;
  const int n_cnt = r - k0 < T::kBN ? r - k0 : T::kBN;
  if (wvec && cnt == kTcChunk) {
    constexpr int kPer = kTcWRowBytes / 16;  // 17
    for (int idx = threadIdx.x; idx < m_cnt * kPer; idx += T::kThreads) {
      const int m = idx / kPer, i = idx - m * kPer;
      cp_async16_cg(stage + m * kTcWRowBytes + 16 * i, w + static_cast<size_t>(o0 + m) * row_bytes + woff + 16 * i);
    }
  } else {
    const int per = cnt * 17;  // 2-byte pieces per row
    for (int idx = threadIdx.x; idx < m_cnt * per; idx += T::kThreads) {
      const int m = idx / per, i = idx - m * per;
      reinterpret_cast<uint16_t*>(stage + m * kTcWRowBytes)[i] =
          load_u16(w + static_cast<size_t>(o0 + m) * row_bytes + woff + 2 * i);
    }
  }
  const size_t xoff = static_cast<size_t>(c) * kTcChunk;  // blocks
  if (xvec && cnt == kTcChunk) {
    constexpr int kPer = kTcXRowBytesRaw / 16;  // 18
    for (int idx = threadIdx.x; idx < n_cnt * kPer; idx += T::kThreads) {
      const int n = idx / kPer, i = idx - n * kPer;
      const auto* src = reinterpret_cast<const uint8_t*>(x + static_cast<int64_t>(k0 + n) * xs + xoff);
      cp_async16_cg(xst + n * kTcXRowBytes + 16 * i, src + 16 * i);
    }
  } else {
    const int per = cnt * 9;  // words per row
    for (int idx = threadIdx.x; idx < n_cnt * per; idx += T::kThreads) {
      const int n = idx / per, i = idx - n * per;
      const auto* src = reinterpret_cast<const uint32_t*>(x + static_cast<int64_t>(k0 + n) * xs + xoff);
      cp_async4(xst + n * kTcXRowBytes + 4 * i, src + i);
    }
  }
}

// The cnt blocks of one staged chunk for warp (wm, wn): per block the fragments, the mmas and
// the float steps of quant::dot_q8_0 for every owned output (see the file comment).
template <class T, int MT, int NT>
__device__ __forceinline__ void tc_chunk(const uint8_t* stage, int cnt, int wm, int wn, int g, int t,
                                         float (&acc)[MT][NT][4]) {
  const uint32_t* ws = reinterpret_cast<const uint32_t*>(stage);
  const uint32_t* xw = reinterpret_cast<const uint32_t*>(stage + T::kWBytes);
  int wrow[MT][2];  // word offsets of the lane's weight rows g, g + 8 of each tile
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    const int m = wm * MT * 16 + 16 * i + g;
    wrow[i][0] = m * kTcWRowWords;
    wrow[i][1] = (m + 8) * kTcWRowWords;
  }
  int xg[NT], x2t[NT];  // word offsets of activation rows g and 2t of each tile
#pragma unroll
  for (int jn = 0; jn < NT; ++jn) {
    const int n = wn * NT * 8 + 8 * jn;
    xg[jn] = (n + g) * kTcXRowWords;
    x2t[jn] = (n + 2 * t) * kTcXRowWords;
  }
#pragma unroll
  for (int j = 0; j < kTcChunk; ++j) {
    if (j >= cnt) break;  // block-uniform
    const int wi = 17 * (j >> 1);  // the word where the block pair (j & ~1, j | 1) starts
    uint32_t a[MT][4];
    float wd[MT][2];
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t* s = ws + wrow[i][h];
        if ((j & 1) == 0) {  // d at bytes 0-1 of word wi, quants from byte 2: realigned
          a[i][h] = __funnelshift_r(s[wi + t], s[wi + t + 1], 16);
          a[i][h + 2] = __funnelshift_r(s[wi + t + 4], s[wi + t + 5], 16);
          wd[i][h] = f16_to_f32(static_cast<uint16_t>(s[wi] & 0xffffu));
        } else {  // d at bytes 2-3 of word wi + 8, quants word-aligned from word wi + 9
          a[i][h] = s[wi + 9 + t];
          a[i][h + 2] = s[wi + 13 + t];
          wd[i][h] = f16_to_f32(static_cast<uint16_t>(s[wi + 8] >> 16));
        }
      }
    }
    uint32_t b[NT][2];
    float xd[NT][2];
#pragma unroll
    for (int jn = 0; jn < NT; ++jn) {
      b[jn][0] = xw[xg[jn] + 9 * j + 1 + t];  // activation block: word 0 = d, words 1..8 = quants
      b[jn][1] = xw[xg[jn] + 9 * j + 5 + t];
      xd[jn][0] = __uint_as_float(xw[x2t[jn] + 9 * j]);
      xd[jn][1] = __uint_as_float(xw[x2t[jn] + kTcXRowWords + 9 * j]);
    }
#pragma unroll
    for (int i = 0; i < MT; ++i) {
#pragma unroll
      for (int jn = 0; jn < NT; ++jn) {
        int c[4];
        mma_s8_magic(c, a[i], b[jn][0], b[jn][1]);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float s = __fmul_rn(wd[i][q >> 1], xd[jn][q & 1]);
          const float fi = __fsub_rn(__int_as_float(c[q]), kMagicF);  // (float)isum, exact
          acc[i][jn][q] = __fadd_rn(acc[i][jn][q], __fmul_rn(s, fi));
        }
      }
    }
  }
}

template <int WM, int WN, int MT, int NT>
__global__ void __launch_bounds__(32 * WM * WN) q8_0_tc_kernel(Q8_0GroupArgs args, size_t row_bytes, int nb,
                                                                 int64_t n_out, int64_t xs, int r, int64_t ys,
                                                                 bool wvec, bool xvec) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  using T = TcTile<WM, WN, MT, NT>;
  extern __shared__ __align__(16) uint8_t tc_smem[];
  const Q8_0Group& gr = args.g[blockIdx.z];
  const auto* w = static_cast<const uint8_t*>(gr.w);
  const int k0 = static_cast<int>(blockIdx.x) * T::kBN;
  const int64_t o0 = static_cast<int64_t>(blockIdx.y) * T::kBM;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = warp / WN, wn = warp % WN;
  const int g = lane >> 2, t = lane & 3;
  float acc[MT][NT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int jn = 0; jn < NT; ++jn)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][jn][q] = 0.0f;
  const int n_chunks = (nb + kTcChunk - 1) / kTcChunk;
  auto chunk_cnt = [&](int c) { return nb - c * kTcChunk < kTcChunk ? nb - c * kTcChunk : kTcChunk; };
  tc_issue<T>(tc_smem, w, row_bytes, o0, n_out, gr.x, xs, k0, r, 0, chunk_cnt(0), wvec, xvec);
  cp_async_commit();
  for (int c = 0; c < n_chunks; ++c) {
    if (c + 1 < n_chunks)  // into the stage chunk c - 1 used (freed by the barrier below)
      tc_issue<T>(tc_smem + ((c + 1) & 1) * T::kStageBytes, w, row_bytes, o0, n_out, gr.x, xs, k0, r, c + 1,
                  chunk_cnt(c + 1), wvec, xvec);
    cp_async_commit();
    cp_async_wait_group<1>();  // chunk c's group is complete (for this thread's copies) ...
    __syncthreads();           // ... and for every thread's (and the 2-byte stores)
    tc_chunk<T, MT, NT>(tc_smem + (c & 1) * T::kStageBytes, chunk_cnt(c), wm, wn, g, t, acc);
    __syncthreads();  // every warp is done with stage c & 1 before chunk c + 2 is copied there
  }
  float* y = gr.y;
#pragma unroll
  for (int i = 0; i < MT; ++i) {
    const int64_t o = o0 + wm * MT * 16 + 16 * i + g;
#pragma unroll
    for (int jn = 0; jn < NT; ++jn) {
      const int k = k0 + wn * NT * 8 + 8 * jn + 2 * t;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int64_t oq = o + 8 * (q >> 1);
        const int kq = k + (q & 1);
        if (oq < n_out && kq < r) y[static_cast<int64_t>(kq) * ys + oq] = acc[i][jn][q];
      }
    }
  }
}

std::atomic<Q8_0RowsKernel> g_rows_kernel{Q8_0RowsKernel::kAuto};

struct TcDev {
  bool done = false, ok = false;
  int sms = 0;
};

// Per device, once: the SM count and the three kernels' shared-memory opt-in (false when the
// device cannot give them; then nothing launches here and the r <= 8 kernels run the rows).
bool tc_device(int* sms) {
  static TcDev devs[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  TcDev& d = devs[dev];
  if (!d.done) {
    int optin = 0;
    d.ok = cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
           optin >= TileL::kSmem &&
           cudaFuncSetAttribute(q8_0_tc_kernel<2, 4, 4, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                TileL::kSmem) == cudaSuccess &&
           cudaFuncSetAttribute(q8_0_tc_kernel<2, 2, 4, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                TileM::kSmem) == cudaSuccess &&
           cudaFuncSetAttribute(q8_0_tc_kernel<2, 2, 2, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                TileS::kSmem) == cudaSuccess;
    if (!d.ok) cudaGetLastError();  // not the caller's launch error
    d.done = true;
  }
  *sms = d.sms;
  return d.ok;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// kAuto's tile: the largest whose CTAs fill one wave of the GPU (L: 1 CTA per SM, M: 2, S: 4);
// S when none does.
Q8_0RowsKernel auto_tile(int64_t n_out, int r, int n_groups, int sms) {
  const int64_t l = ceil_div(n_out, TileL::kBM) * ceil_div(r, TileL::kBN) * n_groups;
  const int64_t m = ceil_div(n_out, TileM::kBM) * ceil_div(r, TileM::kBN) * n_groups;
  if (l >= sms) return Q8_0RowsKernel::kTcLarge;
  if (m >= 2 * static_cast<int64_t>(sms)) return Q8_0RowsKernel::kTcMedium;
  return Q8_0RowsKernel::kTcSmall;
}

template <class T, int WM, int WN, int MT, int NT>
bool tc_launch(const Q8_0GroupArgs& args, int n_groups, size_t row_bytes, int nb, int64_t n_out, int64_t xs, int r,
               int64_t ys, bool wvec, bool xvec, Stream stream) {
  const int64_t gy = ceil_div(n_out, T::kBM);
  if (gy > 65535) return false;
  const dim3 grid(static_cast<unsigned>(ceil_div(r, T::kBN)), static_cast<unsigned>(gy),
                  static_cast<unsigned>(n_groups));
  detail::launch_pdl(pdl_all(), q8_0_tc_kernel<WM, WN, MT, NT>, grid, T::kThreads, T::kSmem, stream, args, row_bytes,
                     nb, n_out, xs, r, ys, wvec, xvec);
  return true;
}

}  // namespace

void set_q8_0_rows_kernel(Q8_0RowsKernel k) { g_rows_kernel.store(k, std::memory_order_relaxed); }
Q8_0RowsKernel q8_0_rows_kernel() { return g_rows_kernel.load(std::memory_order_relaxed); }

Status tc_try_launch(const Q8_0GroupArgs& args, int n_groups, size_t row_bytes, int64_t n_in, int64_t n_out,
                     int64_t xs, int r, int64_t ys, Stream stream, bool force, bool* launched) {
  *launched = false;
  Q8_0RowsKernel k = q8_0_rows_kernel();
  if (!force && (k == Q8_0RowsKernel::kMatvec || r < kQ8_0TcMinRows)) return Status();
  if (force && k == Q8_0RowsKernel::kMatvec) k = Q8_0RowsKernel::kAuto;
  const int64_t nb = n_in / quant::kQK8_0;
  if (n_groups < 1 || n_groups > kMaxMatvecGroups || n_in <= 0 || n_in % quant::kQK8_0 != 0 || n_out <= 0 ||
      r <= 0 || xs <= 0 || ys <= 0 || nb > (1 << 30) || row_bytes < static_cast<size_t>(nb) * 34 ||
      row_bytes % 2 != 0)
    return Status();
  bool wvec = row_bytes % 16 == 0, xvec = xs % 4 == 0;
  for (int g = 0; g < n_groups; ++g) {
    const auto wa = reinterpret_cast<uintptr_t>(args.g[g].w), xa = reinterpret_cast<uintptr_t>(args.g[g].x);
    if (wa % 4 != 0 || xa % 4 != 0) return Status();  // the r <= 8 kernels' contract (they report it)
    wvec = wvec && wa % 16 == 0;
    xvec = xvec && xa % 16 == 0;
  }
  int sms = 0;
  if (!tc_device(&sms)) return Status();
  if (k == Q8_0RowsKernel::kAuto) k = auto_tile(n_out, r, n_groups, sms);
  const int inb = static_cast<int>(nb);
  bool ok = false;
  switch (k) {
    case Q8_0RowsKernel::kTcLarge:
      ok = tc_launch<TileL, 2, 4, 4, 4>(args, n_groups, row_bytes, inb, n_out, xs, r, ys, wvec, xvec, stream);
      break;
    case Q8_0RowsKernel::kTcMedium:
      ok = tc_launch<TileM, 2, 2, 4, 4>(args, n_groups, row_bytes, inb, n_out, xs, r, ys, wvec, xvec, stream);
      break;
    default:
      ok = tc_launch<TileS, 2, 2, 2, 2>(args, n_groups, row_bytes, inb, n_out, xs, r, ys, wvec, xvec, stream);
      break;
  }
  if (!ok) return Status();
  *launched = true;
  return launch_status("matmul_q8_0_tc", n_in, n_out, r);
}

Status matmul_q8_0_tc(const Weights& w, const BlockQ8_0Act* x, int64_t x_stride, int r, float* y, int64_t y_stride,
                      Stream stream) {
  const int64_t nb = w.n_in / quant::kQK8_0;
  if (x_stride == 0) x_stride = nb;
  if (y_stride == 0) y_stride = w.n_out;
  if (w.n_out == 0 || r == 0) return Status();
  Q8_0GroupArgs args{};
  args.g[0] = Q8_0Group{w.data, x, y};
  bool launched = false;
  DS4_RETURN_IF_ERROR(tc_try_launch(args, 1, w.row_bytes, w.n_in, w.n_out, x_stride, r, y_stride, stream, true,
                                    &launched));
  if (!launched)
    return unsupported("cuda: matmul_q8_0_tc: the tensor-core kernel cannot run [%lld -> %lld] x %d rows (n_in a "
                       "multiple of 32, row_bytes %zu even, weights and rows 4-byte aligned, a device with %d "
                       "bytes of shared memory per block)",
                       static_cast<long long>(w.n_in), static_cast<long long>(w.n_out), r, w.row_bytes,
                       TileL::kSmem);
  return Status();
}

}  // namespace ds4::cuda
