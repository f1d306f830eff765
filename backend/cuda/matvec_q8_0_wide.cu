// backend/cuda/matvec_q8_0_wide.cu — the "wide" Q8_0 matvec of one activation row (decode,
// r = 1): q8_0_wide_kernel and its grouped twin, for matvec_r1.h's wide_try_launch /
// wide_try_launch_grouped (Q8_0R1Kernel::kWide, and kAuto below the output head) and, given
// the f32 row, wide_try_launch_f32 / wide_try_launch_grouped_f32 (the CTA quantizes it: the
// one-launch matmul of one row; kWideFused, and kAuto for lone rows of <= 4096 inputs).
// Why: the warp kernels read a block per lane with 4-byte loads (a warp instruction touches ~9
// cache lines for 128 useful bytes) and the staged kernel gives a lane 8 blocks (272 bytes) of
// serial decode with few warps per SM; on the small Flash matrices (4.4 MB) neither gets near
// the read ceiling. Here a CTA of up to 256 threads owns R output rows and walks them in chunks
// of C blocks: the chunk's R·C·34 bytes are copied to shared memory by coalesced 16-byte
// cp.async (consecutive threads, consecutive 16-byte pieces: 4 cache lines per warp
// instruction), S chunks in flight (the whole row when nb <= 128), then each thread decodes ONE
// block pair (68 bytes = 17 words; R·C/2 pairs = the CTA's threads), so every block of the
// chunk has its integer dot computed in parallel. Layout (shared memory, dynamic):
//   act_q [nb/2][5] uint4  the activation quants, pair P's two blocks at uint4 5P..5P+3 (+1 pad:
//                          a quarter-warp's 16-byte reads of consecutive pairs hit 8 bank groups)
//   act_d [nb] f32         the activation scales
//   stage [min(S, chunks)][R][C·34] bytes   weight chunks (pair g of a chunk at word 17g:
//                          odd stride, conflict-free 4-byte reads)
//   ts    [R][C + 4] f32   the chunk's per-block float terms (stride C/4 + 1 uint4: odd)
// Bit-exactness: a block's isum is exact (8 dp4a), its float term is quant::dot_q8_0's
// s = f16(w.d) · x.d, t = s · (float)isum, and thread m < R adds row m's terms into the row's
// single accumulator in block order, chunk after chunk (the accumulator stays in a register):
// the CPU's sequence whichever thread computed each isum. --fmad=false.
// With programmatic dependent launch (set_pdl; the kernel's `pdl` argument) the weight chunks in
// flight are issued first, then the kernel waits for its predecessor on the stream (pdl.cuh),
// then it loads or quantizes the activation row: the weights stream while the kernel before
// finishes. Every kernel here triggers its dependents at once (pdl_trigger).
// Invariants: rows 16-byte aligned (w 16-byte aligned, row_bytes a multiple of 16) and nb a
// multiple of 8 (else the caller's other kernels run); R·C <= 512; no allocation; the per-
// device opt-in of dynamic shared memory is done once.
#include <atomic>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/lanes64.cuh"
#include "backend/cuda/matvec_r1.h"
#include "backend/cuda/pdl.cuh"

namespace ds4::cuda {

namespace {

using quant::BlockQ8_0Act;
using detail::f16_to_f32;

constexpr int kWideThreads = 256;    // most threads per CTA (one block pair each)
constexpr int kWideChunkPairs = 256;  // R·C/2: block pairs per chunk
constexpr int kWideMaxOneChunk = 128;  // nb up to which a row is one chunk (else C = kWideLongChunk)
constexpr int kWideLongChunk = 64;
constexpr int kWideStages = 3;  // chunks in flight when the row has several

__host__ __device__ constexpr int wide_ts_stride(int c) { return c + 4; }
size_t wide_smem_bytes(int nb, int rows, int chunk, int slots) {
  return static_cast<size_t>(nb) * 44 + static_cast<size_t>(slots) * rows * chunk * 34 +
         static_cast<size_t>(rows) * wide_ts_stride(chunk) * 4;
}

// The CTA's row groups of w against the row x: rows [t·rows, (t + 1)·rows) for t = blockIdx.x,
// blockIdx.x + gridDim.x, ... (one group when the grid has a CTA per group; several in the
// persistent grid of set_wide_persistent), each row in chunks of `chunk` blocks. The CTA walks
// its (group, chunk) pairs in order, S of them in flight in the stage ring, so the next group's
// weights stream while this one's sums run. X = BlockQ8_0Act: the quantized row, copied to
// shared memory (cp.async) once per CTA. X = float: the f32 row (16-byte aligned), quantized by
// the CTA into the same layout (a thread per block, common.cuh's q8_0_act_* pieces:
// quantize_q8_0_act's bits) while the weight chunks are in flight — the fused matmul of one row,
// one launch.
// With norm.normed (X = float only): the row is rms_norm(x) · norm.weight: every CTA runs the
// statistic (lanes64.cuh block_rms_scale) after the wait, then quantizes the normed values;
// CTA 0 also stores them to norm.normed (RowNorm, cuda_kernels.h).
template <int S, class X>
__device__ __forceinline__ void q8_0_wide_rows(const uint8_t* __restrict__ w, size_t row_bytes, int nb,
                                               int64_t n_out, int rows, int chunk, const X* __restrict__ x,
                                               float* __restrict__ y, bool pdl, const RowNorm& norm) {
  constexpr bool kQuantize = std::is_same_v<X, float>;
  static_assert(kQuantize || std::is_same_v<X, BlockQ8_0Act>, "activation row: f32 or Q8_0 blocks");
  extern __shared__ __align__(16) uint8_t wide_smem[];
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  uint32_t* act_q = reinterpret_cast<uint32_t*>(wide_smem);      // [nb/2][20] words
  float* act_d = reinterpret_cast<float*>(act_q + 20 * (nb / 2));  // [nb]
  uint8_t* stages = reinterpret_cast<uint8_t*>(act_d + nb);       // [slots][rows][chunk·34]
  const int n_chunks = (nb + chunk - 1) / chunk;
  const int64_t n_groups = (n_out + rows - 1) / rows;  // row groups of the matrix
  const int64_t g0 = blockIdx.x, g_step = gridDim.x;
  if (g0 >= n_groups) return;  // a group narrower than the grid (mixed widths): the whole CTA
  const int my_groups = static_cast<int>((n_groups - 1 - g0) / g_step + 1);
  const int total = my_groups * n_chunks;  // this CTA's (group, chunk) pairs
  // The ring's slots: as the launcher sized the shared memory (the most pairs of any CTA).
  const int most = static_cast<int>((n_groups + g_step - 1) / g_step) * n_chunks;
  const int slots = most < S ? most : S;
  const int slot_bytes = rows * chunk * 34;
  float* ts = reinterpret_cast<float*>(stages + slots * slot_bytes);  // [rows][chunk + 4]
  const int ts_stride = wide_ts_stride(chunk);
  // Pair v of this CTA: its group's first output row, live rows, chunk start and length.
  struct Pair {
    int64_t o0;
    int live, c, cnt;
    bool last;  // the row's last chunk
  };
  auto pair_of = [&](int v) {
    const int k = v / n_chunks, j = v - k * n_chunks;
    Pair q;
    q.o0 = (g0 + k * g_step) * rows;
    q.live = n_out - q.o0 < rows ? static_cast<int>(n_out - q.o0) : rows;
    q.c = j * chunk;
    q.cnt = nb - q.c < chunk ? nb - q.c : chunk;
    q.last = j == n_chunks - 1;
    return q;
  };

  // Pair v into slot v % S: live rows of 17·cnt/8 16-byte pieces, consecutive threads on
  // consecutive pieces. m = idx / np by a multiply-high (exact: idx·np < 2^32).
  auto issue = [&](int v) {
    const Pair q = pair_of(v);
    const unsigned np = static_cast<unsigned>(17 * q.cnt / 8);
    const unsigned magic = 0xffffffffu / np + 1u;
    uint8_t* st = stages + (v % S) * slot_bytes;
    const uint8_t* src = w + static_cast<size_t>(q.c) * 34;
    const unsigned total_pieces = static_cast<unsigned>(q.live) * np;
    for (unsigned idx = tid; idx < total_pieces; idx += nt) {
      const unsigned m = __umulhi(idx, magic), i = idx - m * np;
      cp_async16_cg(st + m * (chunk * 34) + 16 * i, src + static_cast<size_t>(q.o0 + m) * row_bytes + 16 * i);
    }
  };
  // The activation row into shared memory by cp.async (block b's d -> act_d[b], quant word k ->
  // act_q[20(b/2) + 8(b%2) + k]; an L2 round trip).
  auto issue_x = [&] {
    if constexpr (!kQuantize) {
      const uint32_t* xw = reinterpret_cast<const uint32_t*>(x);
      for (int i = tid; i < nb * 9; i += nt) {
        const int b = i / 9, k = i - 9 * b;
        cp_async4(k == 0 ? reinterpret_cast<uint32_t*>(act_d + b) : act_q + 20 * (b >> 1) + 8 * (b & 1) + (k - 1),
                  xw + i);
      }
    }
  };
  detail::pdl_trigger();
  if (!pdl) {
    // Pair 0's weights first (the DRAM round trip starts at once), then the activation row in
    // the same cp.async group, then pairs 1 .. S-1, a group each: group v holds pair v.
    issue(0);
    issue_x();
    cp_async_commit();
#pragma unroll
    for (int s = 1; s < S; ++s) {
      if (s < total) issue(s);
      cp_async_commit();
    }
  } else {
    // Pairs 0 .. S-1 (groups 0 .. S-1), then the wait for the kernel before, then the row (its
    // own group S when copied; pair v >= S lands in group v + 1, so the loop's wait for "all
    // but the newest S - 1 groups" still covers pair v).
#pragma unroll
    for (int s = 0; s < S; ++s) {
      if (s < total) issue(s);
      cp_async_commit();
    }
    detail::pdl_wait();
    if constexpr (!kQuantize) {
      issue_x();
      cp_async_commit();
    }
  }
  if constexpr (kQuantize) {
    // Thread t quantizes blocks t, t + nt, ... whole (common.cuh's thread form, as the staged
    // kernel does): the same bits as quantize_q8_0_act.
    // Stores reach the other threads through the first __syncthreads below.
    __shared__ double sq_s[64];
    __shared__ float s_scale;
    const bool fold = norm.normed != nullptr;  // kernel-uniform
    const float nscale = fold ? detail::block_rms_scale(x, 32 * nb, norm.eps, sq_s, &s_scale) : 0.0f;
    float* normed = fold && blockIdx.x == 0 ? norm.normed : nullptr;
    for (int b = tid; b < nb; b += nt) {
      uint32_t qw[8];
      const float d = fold ? detail::q8_0_act_block_words_normed(x, b, nscale, norm.weight, normed, qw)
                           : detail::q8_0_act_block_words(x, b, qw);
      uint4* dst = reinterpret_cast<uint4*>(act_q + 20 * (b >> 1) + 8 * (b & 1));  // 16-byte aligned
      dst[0] = make_uint4(qw[0], qw[1], qw[2], qw[3]);
      dst[1] = make_uint4(qw[4], qw[5], qw[6], qw[7]);
      act_d[b] = d;
    }
  }
  // This thread's block pair of every chunk: row pm, pair pp (blocks 2pp, 2pp + 1 of the chunk).
  const int half = chunk / 2;
  const int pm = tid / half, pp = tid - pm * half;
  float acc = 0.0f;  // thread m < live: row m's accumulator (quant::dot_q8_0's)
  for (int v = 0; v < total; ++v) {
    if (!kQuantize && pdl && v == 0) {
      cp_async_wait_group<0>();  // the row's group is the newest
    } else {
      cp_async_wait_group<S - 1>();  // this thread's copies of pair v (and, from group 0, x)
    }
    __syncthreads();  // ... and everyone's; the previous pair's terms are summed
    const Pair q = pair_of(v);
    const bool row_live = tid < rows * half && pm < q.live;
    if (row_live && 2 * pp < q.cnt) {
      const uint32_t* sp = reinterpret_cast<const uint32_t*>(stages + (v % S) * slot_bytes) + 17 * tid;
      uint32_t wv[17];
#pragma unroll
      for (int i = 0; i < 17; ++i) wv[i] = sp[i];
      const int b0 = q.c + 2 * pp;  // even: its pair's quants are uint4 5(b0/2) .. +3
      const uint4* aq = reinterpret_cast<const uint4*>(act_q) + 5 * (b0 >> 1);
      const float2 ad = *reinterpret_cast<const float2*>(act_d + b0);
      const uint4 a0 = aq[0], a1 = aq[1], a2 = aq[2], a3 = aq[3];
      // Block A (b0): d at bytes 0-1 of word 0, quants from byte 2 (realigned by funnel shifts).
      int ia = 0;
      ia = __dp4a(static_cast<int>(__funnelshift_r(wv[0], wv[1], 16)), static_cast<int>(a0.x), ia);
      ia = __dp4a(static_cast<int>(__funnelshift_r(wv[1], wv[2], 16)), static_cast<int>(a0.y), ia);
      ia = __dp4a(static_cast<int>(__funnelshift_r(wv[2], wv[3], 16)), static_cast<int>(a0.z), ia);
      ia = __dp4a(static_cast<int>(__funnelshift_r(wv[3], wv[4], 16)), static_cast<int>(a0.w), ia);
      ia = __dp4a(static_cast<int>(__funnelshift_r(wv[4], wv[5], 16)), static_cast<int>(a1.x), ia);
      ia = __dp4a(static_cast<int>(__funnelshift_r(wv[5], wv[6], 16)), static_cast<int>(a1.y), ia);
      ia = __dp4a(static_cast<int>(__funnelshift_r(wv[6], wv[7], 16)), static_cast<int>(a1.z), ia);
      ia = __dp4a(static_cast<int>(__funnelshift_r(wv[7], wv[8], 16)), static_cast<int>(a1.w), ia);
      // Block B (b0 + 1): d at bytes 2-3 of word 8, quants word-aligned in words 9..16.
      int ib = 0;
      ib = __dp4a(static_cast<int>(wv[9]), static_cast<int>(a2.x), ib);
      ib = __dp4a(static_cast<int>(wv[10]), static_cast<int>(a2.y), ib);
      ib = __dp4a(static_cast<int>(wv[11]), static_cast<int>(a2.z), ib);
      ib = __dp4a(static_cast<int>(wv[12]), static_cast<int>(a2.w), ib);
      ib = __dp4a(static_cast<int>(wv[13]), static_cast<int>(a3.x), ib);
      ib = __dp4a(static_cast<int>(wv[14]), static_cast<int>(a3.y), ib);
      ib = __dp4a(static_cast<int>(wv[15]), static_cast<int>(a3.z), ib);
      ib = __dp4a(static_cast<int>(wv[16]), static_cast<int>(a3.w), ib);
      const float sa = f16_to_f32(static_cast<uint16_t>(wv[0] & 0xffffu)) * ad.x;  // quant::dot_q8_0's s
      const float sb = f16_to_f32(static_cast<uint16_t>(wv[8] >> 16)) * ad.y;
      *reinterpret_cast<float2*>(ts + pm * ts_stride + 2 * pp) =
          make_float2(sa * static_cast<float>(ia), sb * static_cast<float>(ib));
    }
    __syncthreads();  // the pair's terms are in ts; its stage slot is free
    if (v + S < total) issue(v + S);
    cp_async_commit();
    if (tid < q.live) {
      const float4* tr = reinterpret_cast<const float4*>(ts + tid * ts_stride);
      for (int k = 0; k < q.cnt / 4; ++k) {  // block order: quant::dot_q8_0's single accumulator
        const float4 t = tr[k];
        acc = acc + t.x;
        acc = acc + t.y;
        acc = acc + t.z;
        acc = acc + t.w;
      }
      if (q.last) {
        y[q.o0 + tid] = acc;  // Q8_0Fmt::finish: the sum as it is
        acc = 0.0f;
      }
    }
  }
}

template <int S, class X>
__global__ void __launch_bounds__(kWideThreads) q8_0_wide_kernel(const uint8_t* __restrict__ w, size_t row_bytes,
                                                                 int nb, int64_t n_out, int rows, int chunk,
                                                                 const X* __restrict__ x, float* __restrict__ y,
                                                                 bool pdl, RowNorm norm) {
  q8_0_wide_rows<S>(w, row_bytes, nb, n_out, rows, chunk, x, y, pdl, norm);
}

// The groups of the fused grouped launch (matvec_q8_0_grouped_r1_f32), by value.
struct WideGroupF32Args {
  Q8_0GroupF32 g[kMaxMatvecGroups];
};

// matvec_q8_0_grouped at r = 1: blockIdx.y = group. Args: Q8_0GroupArgs (quantized rows) or
// WideGroupF32Args (f32 rows, quantized in the kernel).
// A group's outputs: the call's n_out, or its own (Q8_0GroupF32::n_out, mixed widths).
__device__ __forceinline__ int64_t group_n_out(const Q8_0Group&, int64_t n_out) { return n_out; }
__device__ __forceinline__ int64_t group_n_out(const Q8_0GroupF32& g, int64_t n_out) {
  return g.n_out > 0 ? g.n_out : n_out;
}

template <int S, class Args>
__global__ void __launch_bounds__(kWideThreads) q8_0_wide_grouped_kernel(Args groups, size_t row_bytes, int nb,
                                                                         int64_t n_out, int rows, int chunk, bool pdl) {
  const auto& gr = groups.g[blockIdx.y];
  q8_0_wide_rows<S>(static_cast<const uint8_t*>(gr.w), row_bytes, nb, group_n_out(gr, n_out), rows, chunk, gr.x,
                    gr.y, pdl, RowNorm{});
}

// Shape of a launch: rows per CTA, chunk blocks, stages (1 or kWideStages), threads, smem.
struct WideLaunch {
  int rows = 1, chunk = 8, stages = 1, threads = 32;
  size_t smem = 0;
  unsigned grid = 0;
};

struct WideDev {
  bool done = false, ok = false;
  int sms = 0, smem_optin = 0;
  int smem_dyn = 0;  // the dynamic shared memory every instantiation may take (wide_optin)
};

std::atomic<bool> g_wide_persistent{false};

// CTAs of `threads` threads and `smem` bytes of dynamic shared memory one SM holds at once
// (the occupancy calculator on the one-row f32 kernel: the four instantiations share its
// registers within a few), cached per (threads, smem) on this thread; 1 when unknown.
int wide_ctas_per_sm(int threads, size_t smem) {
  struct Entry {
    int threads;
    size_t smem;
    int ctas;
  };
  thread_local Entry cache[16];
  thread_local int n_cache = 0;
  for (int i = 0; i < n_cache; ++i)
    if (cache[i].threads == threads && cache[i].smem == smem) return cache[i].ctas;
  int ctas = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, q8_0_wide_kernel<kWideStages, float>, threads, smem) !=
          cudaSuccess ||
      ctas < 1) {
    cudaGetLastError();
    ctas = 1;
  }
  if (n_cache < 16) cache[n_cache++] = Entry{threads, smem, ctas};
  return ctas;
}

// Opts the four instantiations of stage count S in to the device's shared memory per block
// (optin) less their largest static shared memory (the folded norm's statistic): the attribute
// fails when static + dynamic bytes pass the limit, and a failure here turns the wide kernel
// off for the process. *dyn: the dynamic limit set.
template <int S>
cudaError_t wide_optin(int optin, int* dyn) {
  const void* kernels[] = {reinterpret_cast<const void*>(q8_0_wide_kernel<S, BlockQ8_0Act>),
                           reinterpret_cast<const void*>(q8_0_wide_kernel<S, float>),
                           reinterpret_cast<const void*>(q8_0_wide_grouped_kernel<S, Q8_0GroupArgs>),
                           reinterpret_cast<const void*>(q8_0_wide_grouped_kernel<S, WideGroupF32Args>)};
  size_t fixed = 0;
  for (const void* k : kernels) {
    cudaFuncAttributes fa{};
    if (const cudaError_t e = cudaFuncGetAttributes(&fa, k); e != cudaSuccess) return e;
    fixed = fa.sharedSizeBytes > fixed ? fa.sharedSizeBytes : fixed;
  }
  const int bytes = optin - static_cast<int>(fixed);
  for (const void* k : kernels) {
    if (const cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
        e != cudaSuccess)
      return e;
  }
  *dyn = bytes;
  return cudaSuccess;
}

// False when the wide kernel cannot take the shape (weights or rows not 16-byte aligned, nb not
// a multiple of 8, shared memory): the caller's other kernels run it. Rows per CTA: 512 / C
// (a chunk is 256 block pairs, one per thread), halved while the grid (all groups) is under one
// CTA per SM, so the small matrices spread over every SM (4096 -> 512: 256 CTAs of 2 rows);
// not further, since every CTA copies the whole activation row (its L2 reads are 1/R of the
// weights'). Rows longer than kWideMaxOneChunk blocks (8192 inputs and up) go in chunks of 64
// blocks, 8 rows per CTA, 3 in flight, so row m's sequential sum of chunk j (thread m) runs
// while chunks j+1, j+2 load, instead of after the whole row. The grid: a CTA per row group;
// for the shapes wide_persistent_takes (set_wide_persistent) as many CTAs as the SMs hold at
// once (3 pairs in flight each), each walking several row groups, so no second partial wave
// waits on a launch and every SM keeps its copies going from one group to the next.
bool wide_launch_shape(const void* data, size_t row_bytes, int64_t nb64, int64_t n_out, int n_groups,
                       WideLaunch* l) {
  static WideDev devs[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  WideDev& d = devs[dev];
  if (!d.done) {
    d.done = true;
    int dyn_one = 0, dyn_ring = 0;
    if (cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        wide_optin<1>(d.smem_optin, &dyn_one) != cudaSuccess ||
        wide_optin<kWideStages>(d.smem_optin, &dyn_ring) != cudaSuccess) {
      kernel_off("wide one-row Q8_0 kernel", "the warp kernels (after a quantize launch)", dev);
      return false;
    }
    d.smem_dyn = dyn_one < dyn_ring ? dyn_one : dyn_ring;
    d.ok = true;
  }
  if (!d.ok || n_out <= 0 || n_groups < 1) return false;
  if (nb64 <= 0 || nb64 % 8 != 0 || nb64 > (1 << 20) || reinterpret_cast<uintptr_t>(data) % 16 != 0 ||
      row_bytes % 16 != 0 || row_bytes < static_cast<size_t>(nb64) * 34)
    return false;
  const int nb = static_cast<int>(nb64);
  WideLaunch s;
  s.chunk = nb <= kWideMaxOneChunk ? nb : kWideLongChunk;
  s.rows = 2 * kWideChunkPairs / s.chunk;
  if (s.rows < 1) s.rows = 1;
  while (s.rows > 1 && (n_out + s.rows - 1) / s.rows * n_groups < d.sms) s.rows /= 2;
  const int n_chunks = (nb + s.chunk - 1) / s.chunk;
  s.threads = s.rows * s.chunk / 2;
  if (s.threads > kWideThreads || s.threads < 1) return false;
  const int64_t row_groups = (n_out + s.rows - 1) / s.rows;
  int64_t grid = row_groups;
  if (wide_persistent_takes(static_cast<int64_t>(nb) * 32, n_groups)) {
    const size_t full = wide_smem_bytes(nb, s.rows, s.chunk, kWideStages);
    if (full <= static_cast<size_t>(d.smem_dyn)) {
      const int64_t held = static_cast<int64_t>(wide_ctas_per_sm(s.threads, full)) * d.sms / n_groups;
      if (held >= 1 && held < grid) grid = held;
    }
  }
  // The most (group, chunk) pairs one CTA walks: the stage ring's length and slots.
  const int64_t most = (row_groups + grid - 1) / grid * n_chunks;
  s.stages = most > 1 ? kWideStages : 1;
  s.smem = wide_smem_bytes(nb, s.rows, s.chunk, most < s.stages ? static_cast<int>(most) : s.stages);
  if (s.smem > static_cast<size_t>(d.smem_dyn)) return false;
  if (grid > 0x7fffffff) return false;
  s.grid = static_cast<unsigned>(grid);
  *l = s;
  return true;
}

template <class X>
void launch_wide(const WideLaunch& l, const Weights& w, int nb, const X* x, float* y, Stream stream,
                 const RowNorm& norm = RowNorm{}) {
  const uint8_t* wp = static_cast<const uint8_t*>(w.data);
  const bool on = pdl();
  detail::launch_pdl(on, l.stages == 1 ? q8_0_wide_kernel<1, X> : q8_0_wide_kernel<kWideStages, X>, l.grid, l.threads,
                     l.smem, stream, wp, w.row_bytes, nb, w.n_out, l.rows, l.chunk, x, y, on, norm);
}

template <class Args>
bool launch_wide_grouped(const Args& args, int n_groups, size_t row_bytes, int64_t n_in, int64_t n_out,
                         Stream stream) {
  if (n_groups < 1 || n_groups > kMaxMatvecGroups) return false;
  for (int g = 0; g < n_groups; ++g)
    if (reinterpret_cast<uintptr_t>(args.g[g].w) % 16 != 0) return false;
  const int64_t nb = n_in / quant::kQK8_0;
  WideLaunch l;
  if (!wide_launch_shape(args.g[0].w, row_bytes, nb, n_out, n_groups, &l)) return false;
  const dim3 grid(l.grid, static_cast<unsigned>(n_groups));
  const int inb = static_cast<int>(nb);
  const bool on = pdl();
  detail::launch_pdl(on, l.stages == 1 ? q8_0_wide_grouped_kernel<1, Args> : q8_0_wide_grouped_kernel<kWideStages, Args>,
                     grid, l.threads, l.smem, stream, args, row_bytes, inb, n_out, l.rows, l.chunk, on);
  return true;
}

std::atomic<bool> g_pdl{false};
std::atomic<bool> g_pdl_all{false};

}  // namespace

void set_pdl(bool on) { g_pdl.store(on, std::memory_order_relaxed); }
bool pdl() { return g_pdl.load(std::memory_order_relaxed); }
void set_pdl_all(bool on) { g_pdl_all.store(on, std::memory_order_relaxed); }
bool pdl_all() { return g_pdl_all.load(std::memory_order_relaxed); }
void set_wide_persistent(bool on) { g_wide_persistent.store(on, std::memory_order_relaxed); }
bool wide_persistent() { return g_wide_persistent.load(std::memory_order_relaxed); }

bool wide_try_launch(const Weights& w, int nb, const BlockQ8_0Act* x, float* y, Stream stream) {
  WideLaunch l;
  if (!wide_launch_shape(w.data, w.row_bytes, nb, w.n_out, 1, &l)) return false;
  launch_wide(l, w, nb, x, y, stream);
  return true;
}

bool wide_try_launch_grouped(const Q8_0GroupArgs& args, int n_groups, size_t row_bytes, int64_t n_in, int64_t n_out,
                             Stream stream) {
  return launch_wide_grouped(args, n_groups, row_bytes, n_in, n_out, stream);
}

bool wide_try_launch_f32(const Weights& w, const float* x, float* y, Stream stream, const RowNorm* norm) {
  if (reinterpret_cast<uintptr_t>(x) % 16 != 0 || w.n_in <= 0 || w.n_in % quant::kQK8_0 != 0 || w.n_out <= 0)
    return false;
  if (norm != nullptr && (norm->normed == nullptr || reinterpret_cast<uintptr_t>(norm->normed) % 16 != 0 ||
                          w.n_in > (int64_t{1} << 30)))
    return false;
  const int64_t nb = w.n_in / quant::kQK8_0;
  WideLaunch l;
  if (!wide_launch_shape(w.data, w.row_bytes, nb, w.n_out, 1, &l)) return false;
  if (norm != nullptr && l.threads < 32) return false;  // block_rms_scale's tree needs a whole warp
  launch_wide(l, w, static_cast<int>(nb), x, y, stream, norm != nullptr ? *norm : RowNorm{});
  return true;
}

bool wide_try_launch_grouped_f32(const Q8_0GroupF32* groups, int n_groups, size_t row_bytes, int64_t n_in,
                                 int64_t n_out, Stream stream) {
  if (n_groups < 1 || n_groups > kMaxMatvecGroups || n_in <= 0 || n_in % quant::kQK8_0 != 0 || n_out <= 0)
    return false;
  WideGroupF32Args args{};
  for (int g = 0; g < n_groups; ++g) {
    if (reinterpret_cast<uintptr_t>(groups[g].x) % 16 != 0) return false;
    args.g[g] = groups[g];
  }
  return launch_wide_grouped(args, n_groups, row_bytes, n_in, n_out, stream);
}

}  // namespace ds4::cuda
