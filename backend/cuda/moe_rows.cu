// backend/cuda/moe_rows.cu — the routed experts of SEVERAL rows, grouped by expert (issue #30).
//
// Role: moe (ops.h) for n_rows >= 2 under MoeRowsKernel::kGrouped / kTensor: each touched expert's
// weights are read ONCE per call and dotted with every row that chose it (the per-pair path of
// moe.cu reads them once per (row, slot) pair). Six launches, all on the device (sel[] is never
// read back): x -> Q8_K; group: one CTA counting-sorts the pairs by expert (stable, pair order
// inside a group) into order[] / gstart[] / gexp[] / n_groups; gate_up: a CTA owns (group,
// 16 output rows): it stages the 32 gate/up weight rows with 16-byte cp.async once and the
// group's x rows (up to kPairChunk at a time, Q8_K in shared memory), and writes mid per pair
// = rowmath::moe_mid_value(gate, up, clamp, wt); mid -> Q8_K; down: the same per (group, 32
// output rows) into per-pair outputs dpair; sum: out = ((0 + dpair[slot 0]) + dpair[slot 1])
// + ..., the slot order (the CPU's out = 0, out = out + down[slot]).
// Lanes: a warp holds 4 weight rows (lane = 8·row + s): the 8 lanes of a row split each
// 256-element super-block into its 8 groups of 32 (decoded once into signed int8 words), dot
// them with pair p's activations, and the 8 partial integer sums are added by shuffles (exact
// int32); lane s keeps pair s's block sum and owns that (row, pair) accumulator: acc = acc +
// term(block b) for b in order — quant/dot.h's single float accumulator per dot, whatever the
// group size, so a row's bits never depend on the rows it is batched with (batch invariance)
// and equal the per-pair (and r = 1) path. --fmad=false keeps every product separately rounded.
// kTensor (--cuda-moe tc) replaces the gate_up and down kernels by moe_rows_tc_kernel: the same
// groups, a warp per 16 weight rows × 8 pairs, each (block, group of 32) integer dot one int8
// mma lane (exact, so the same bits; see "The tensor-core form" below). Why: a prefill chunk's
// 256 rows give a group ~6 pairs, and the dp4a kernel runs 8 dp4a and 3 shuffles per pair and
// lane where one mma serves 8 pairs. Opt-in until it has run on a GPU (docs/CUDA.md).
// Scratch (moe_rows_scratch_bytes <= backend::moe_scratch_bytes): xq [n_rows × n_embd/256]
// Q8_K, mid [pairs × n_ff] f32, midq [pairs × n_ff/256] Q8_K, dpair [pairs × n_embd] f32,
// ints: n_groups, gstart [pairs + 1], gexp [pairs], order [pairs]; each piece 64-byte aligned.
// Pairs whose expert id is outside [0, n_expert) join no group; their slot adds NaN to the row
// (the per-pair path's result). Invariants: no allocation, asynchronous, errors name the op.
#include <algorithm>
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/mma_pieces_hd.h"
#include "backend/cuda/moe_r1.h"
#include "backend/cuda/moe_rows.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/q8k_staged.cuh"
#include "backend/row_math.h"
#include "quant/iq2_tables.h"

namespace ds4::cuda {

namespace {

using quant::BlockQ8K;
using detail::f16_to_f32;
using detail::kFullMask;

constexpr int kThreads = 256;         // 8 warps per CTA
constexpr int kWeightRows = 32;       // weight rows a CTA stages (4 per warp)
constexpr int kGuOut = 16;            // gate/up: output rows per CTA (gate and up of each)
constexpr int kDownOut = 32;          // down: output rows per CTA
constexpr int kPairChunk = 8;         // pairs a CTA dots at once (lane s owns pair s)
constexpr int kStageBlocks = 16;      // super-blocks of a weight row staged at once
using detail::kActBlockBytes;  // a staged Q8_K block (q8k_staged.cuh)
constexpr int kGroupThreads = 256;

__device__ uint64_t g_rows_iq2_grid[kIq2DecodeTables];  // iq2_decode_tables (moe_r1.h), uploaded once per device

// ---- Staged Q8_K activation blocks: q8k_staged.cuh's layout (the fused expert kernels').
using detail::act_bsum;
using detail::act_d;
using detail::act_q32;
// Word wd (0..72) of a BlockQ8K (d, 64 quant words, 8 bsum words) -> its word in the staged block.
__device__ __forceinline__ int act_word_to(int wd) {
  if (wd == 0) return 72;
  if (wd <= 64) {
    const int q = wd - 1;  // quant word q: group q / 8, half (q / 4) % 2, word q % 4
    return ((q >> 2) & 1) * 32 + (q >> 3) * 4 + (q & 3);
  }
  return 64 + (wd - 65);
}

using detail::kquant_close;

// ---- Formats: decode() reads lane s's 32-element group of a staged block (shared memory)
// into signed / unsigned int8 words and its integer scales; part() is the lane's exact integer
// contribution to the block's sums against one staged activation block (i1: the K-quants'
// summs); term() the block's float term from the 8 lanes' summed integers (quant/dot.h).
struct RowsIq2Xxs {
  static constexpr int kBlockBytes = 66;
  static constexpr bool kTables = true;
  static constexpr bool kTwo = false;  // one integer sum per block
  struct Lane {
    uint32_t v[8];  // the group's 32 signed weights (grid magnitude · sign)
    int32_t ls;
    float wd;
  };
  static __device__ __forceinline__ void decode(const uint8_t* p, int s, const uint64_t* grid, Lane& w) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    w.wd = f16_to_f32(h[0]);
    const uint16_t* qh = h + 1 + 4 * s;
    const uint32_t aux0 = qh[0] | (static_cast<uint32_t>(qh[1]) << 16);
    const uint32_t aux1 = qh[2] | (static_cast<uint32_t>(qh[3]) << 16);
    w.ls = static_cast<int32_t>(2 * (aux1 >> 28) + 1);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const uint64_t g = grid[(aux0 >> (8 * c)) & 0xffu];
      const uint32_t si = (aux1 >> (7 * c)) & 127u;
      const uint32_t sv = si | ((static_cast<uint32_t>(__popc(si)) & 1u) << 7);  // quant::kIq2Signs[si]
      const uint32_t mlo = detail::sign_mask4(sv), mhi = detail::sign_mask4(sv >> 4);
      // Byte-wise negation where the mask is 0xff: (g ^ 0xff) + 1 = 256 - g, no carry out of
      // the byte because every grid magnitude is >= 8 (never 0).
      w.v[2 * c] = (static_cast<uint32_t>(g) ^ mlo) + (mlo & 0x01010101u);
      w.v[2 * c + 1] = (static_cast<uint32_t>(g >> 32) ^ mhi) + (mhi & 0x01010101u);
    }
  }
  static __device__ __forceinline__ void part(const Lane& w, const uint8_t* a, int s, int32_t& i0, int32_t& i1) {
    int aq[8];
    act_q32(a, s, aq);
    int sumi = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) sumi = __dp4a(static_cast<int>(w.v[i]), aq[i], sumi);
    i0 = sumi * w.ls;
    i1 = 0;
  }
  static __device__ __forceinline__ float term(const Lane& w, const uint8_t* a, int32_t i0, int32_t) {
    const float d = w.wd * act_d(a);
    return d * static_cast<float>(i0);
  }
  static __device__ __forceinline__ float finish(float acc) { return 0.125f * acc; }
};

struct RowsQ2K {
  static constexpr int kBlockBytes = 84;
  static constexpr bool kTables = false;
  static constexpr bool kTwo = true;
  struct Lane {
    uint32_t v[8];  // 2-bit quants of the lane's 32 elements (two 16-element sub-blocks)
    int32_t sc0, sc1;
    float wd, wm;
  };
  static __device__ __forceinline__ void decode(const uint8_t* p, int s, const uint64_t*, Lane& w) {
    const int n = s >> 2, j = s & 3, sb = 8 * n + 2 * j;
    const uint32_t* pw = reinterpret_cast<const uint32_t*>(p);  // 4-byte aligned in the stage
    w.sc0 = p[sb];
    w.sc1 = p[sb + 1];
#pragma unroll
    for (int i = 0; i < 8; ++i) w.v[i] = (pw[4 + 8 * n + i] >> (2 * j)) & 0x03030303u;
    const uint32_t dd = pw[20];  // d at byte 80, dmin at 82
    w.wd = f16_to_f32(static_cast<uint16_t>(dd & 0xffffu));
    w.wm = f16_to_f32(static_cast<uint16_t>(dd >> 16));
  }
  static __device__ __forceinline__ void part(const Lane& w, const uint8_t* a, int s, int32_t& i0, int32_t& i1) {
    const int n = s >> 2, j = s & 3, sb = 8 * n + 2 * j;
    int aq[8];
    act_q32(a, 4 * n + j, aq);  // quants 128n + 32j .. + 31
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) s0 = __dp4a(static_cast<int>(w.v[i]), aq[i], s0);
#pragma unroll
    for (int i = 4; i < 8; ++i) s1 = __dp4a(static_cast<int>(w.v[i]), aq[i], s1);
    i0 = (w.sc0 & 15) * s0 + (w.sc1 & 15) * s1;
    i1 = act_bsum(a, sb) * (w.sc0 >> 4) + act_bsum(a, sb + 1) * (w.sc1 >> 4);
  }
  static __device__ __forceinline__ float term(const Lane& w, const uint8_t* a, int32_t i0, int32_t i1) {
    return kquant_close(act_d(a), w.wd, w.wm, i0, i1);
  }
  static __device__ __forceinline__ float finish(float acc) { return acc; }
};

struct RowsQ4K {
  static constexpr int kBlockBytes = 144;
  static constexpr bool kTables = false;
  static constexpr bool kTwo = true;
  struct Lane {
    uint32_t v[8];  // 4-bit quants of the lane's 32 elements
    int32_t sc, m;
    float wd, wm;
  };
  static __device__ __forceinline__ void decode(const uint8_t* p, int s, const uint64_t*, Lane& w) {
    const int j = s;
    const uint32_t dd = *reinterpret_cast<const uint32_t*>(p);  // d at 0, dmin at 2
    w.wd = f16_to_f32(static_cast<uint16_t>(dd & 0xffffu));
    w.wm = f16_to_f32(static_cast<uint16_t>(dd >> 16));
    const uint8_t* sc = p + 4;  // quant::q4_k_scale_min
    if (j < 4) {
      w.sc = sc[j] & 63;
      w.m = sc[j + 4] & 63;
    } else {
      w.sc = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
      w.m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
    const uint4* qw = reinterpret_cast<const uint4*>(p + 16 + 32 * (j >> 1));  // 16-byte aligned
    const uint4 w0 = qw[0], w1 = qw[1];
    const int shift = 4 * (j & 1);
    const uint32_t raw[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) w.v[i] = (raw[i] >> shift) & 0x0f0f0f0fu;
  }
  static __device__ __forceinline__ void part(const Lane& w, const uint8_t* a, int s, int32_t& i0, int32_t& i1) {
    int aq[8];
    act_q32(a, s, aq);
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) sum = __dp4a(static_cast<int>(w.v[i]), aq[i], sum);
    i0 = w.sc * sum;
    i1 = w.m * (act_bsum(a, 2 * s) + act_bsum(a, 2 * s + 1));
  }
  static __device__ __forceinline__ float term(const Lane& w, const uint8_t* a, int32_t i0, int32_t i1) {
    return kquant_close(act_d(a), w.wd, w.wm, i0, i1);
  }
  static __device__ __forceinline__ float finish(float acc) { return acc; }
};

// ---- group: the pairs counting-sorted by expert, on one CTA -----------------------------------
// counts in shared memory (atomics: only the counts depend on them), an exclusive scan of
// (count, count > 0) over the experts in id order (groups in expert-id order), then a stable
// placement (pair order inside a group): the chunk's warps take turns, each ranking its lanes
// of equal expert with __match_any_sync. Invalid ids join no group.
__global__ void __launch_bounds__(kGroupThreads) moe_rows_group_kernel(const int32_t* __restrict__ sel, int n_pairs,
                                                                       int n_expert, int32_t* __restrict__ meta,
                                                                       int32_t* __restrict__ gstart,
                                                                       int32_t* __restrict__ gexp,
                                                                       int32_t* __restrict__ order) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  __shared__ int32_t cnt[kMoeRowsMaxExperts];
  __shared__ int32_t wsum[kGroupThreads / 32], wnz[kGroupThreads / 32];
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  for (int e = t; e < n_expert; e += kGroupThreads) cnt[e] = 0;
  __syncthreads();
  for (int q = t; q < n_pairs; q += kGroupThreads) {
    const int32_t e = sel[q];
    if (e >= 0 && e < n_expert) atomicAdd(&cnt[e], 1);
  }
  __syncthreads();
  // Thread t scans experts [t·per, (t + 1)·per).
  const int per = (n_expert + kGroupThreads - 1) / kGroupThreads;
  const int e0 = t * per, e1 = min(n_expert, e0 + per);
  int c = 0, nz = 0;
  for (int e = e0; e < e1; ++e) {
    c += cnt[e];
    nz += cnt[e] > 0 ? 1 : 0;
  }
  int ic = c, inz = nz;  // inclusive warp scan
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const int vc = __shfl_up_sync(kFullMask, ic, off), vn = __shfl_up_sync(kFullMask, inz, off);
    if (lane >= off) ic += vc, inz += vn;
  }
  if (lane == 31) wsum[warp] = ic, wnz[warp] = inz;
  __syncthreads();
  int bc = 0, bn = 0;
  for (int w = 0; w < warp; ++w) bc += wsum[w], bn += wnz[w];
  int pos = bc + ic - c, g = bn + inz - nz;
  for (int e = e0; e < e1; ++e) {
    const int k = cnt[e];
    if (k > 0) {
      gexp[g] = e;
      gstart[g] = pos;
      ++g;
    }
    cnt[e] = pos;  // the group's cursor
    pos += k;
  }
  if (t == kGroupThreads - 1) {
    meta[0] = g;       // groups
    gstart[g] = pos;   // valid pairs
  }
  __syncthreads();
  for (int base = 0; base < n_pairs; base += kGroupThreads) {
    const int q = base + t;
    const int32_t e = q < n_pairs ? sel[q] : -1;
    const bool valid = e >= 0 && e < n_expert;
    for (int w = 0; w < kGroupThreads / 32; ++w) {
      if (warp == w) {
        const unsigned m = __match_any_sync(kFullMask, valid ? e : -1);
        const unsigned lt = m & ((1u << lane) - 1u);
        int cur = 0;
        if (valid) {
          cur = cnt[e];
          order[cur + __popc(lt)] = q;
        }
        __syncwarp();
        if (valid && lt == 0) cnt[e] = cur + __popc(m);
      }
      __syncthreads();
    }
  }
}

// ---- gate_up / down ---------------------------------------------------------------------------
struct RowsArgs {
  const uint8_t* w0;  // gate (kGU) or down
  const uint8_t* w1;  // up (kGU)
  size_t rb0, eb0, rb1, eb1;  // row and expert bytes of w0 / w1
  int nb;             // super-blocks per weight row
  int sb;             // super-blocks staged at once: min(nb, kStageBlocks)
  int w_stride;       // bytes per staged weight row (sb blocks, rounded up to 16)
  int pair_cap;       // pairs per chunk: min(kPairChunk, n_rows)
  int64_t n_out;      // n_ff (kGU) or n_embd
  const int32_t* meta;
  const int32_t* gstart;
  const int32_t* gexp;
  const int32_t* order;
  int n_used;
  const BlockQ8K* act;  // x rows (kGU: pair q reads row q / n_used) or midq rows (pair q)
  const float* wt;      // [pairs] (kGU)
  float clamp;
  float* out;           // mid [pairs × n_ff] (kGU) or dpair [pairs × n_embd]
  bool vec16;           // 16-byte cp.async staging of the weights
};

template <class F>
__host__ __device__ constexpr int table_bytes() {
  return F::kTables ? 256 * 8 : 0;
}

// grid (n_out / rows per CTA, groups bound): CTA (tile, g) computes the tile's output rows for
// every pair of group g (blocks of a g >= n_groups return at once).
template <class F, bool kGU>
__global__ void __launch_bounds__(kThreads) moe_rows_kernel(const RowsArgs a) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  extern __shared__ __align__(16) uint8_t smem[];
  uint64_t* grid_s = reinterpret_cast<uint64_t*>(smem);
  uint8_t* ws = smem + table_bytes<F>();
  uint8_t* as = ws + kWeightRows * a.w_stride;
  const int g = blockIdx.y;
  if (g >= __ldg(a.meta)) return;  // block-uniform
  const int e = __ldg(a.gexp + g);
  const int q0 = __ldg(a.gstart + g);
  const int m = __ldg(a.gstart + g + 1) - q0;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int r = lane >> 3, s = lane & 7;
  const int k = warp * 4 + r;  // this lane's staged weight row
  const int tile = blockIdx.x;
  constexpr int kBB = F::kBlockBytes;
  if constexpr (F::kTables) {
    for (int i = tid; i < 256; i += kThreads) grid_s[i] = g_rows_iq2_grid[i];
  }
  // Staged weight row kk of this CTA: gate/up interleaved (kk = 2·o_local + up) or down rows.
  auto row_ptr = [&](int kk) -> const uint8_t* {
    if constexpr (kGU) {
      const int64_t o = static_cast<int64_t>(tile) * kGuOut + (kk >> 1);
      return (kk & 1) ? a.w1 + static_cast<size_t>(e) * a.eb1 + static_cast<size_t>(o) * a.rb1
                      : a.w0 + static_cast<size_t>(e) * a.eb0 + static_cast<size_t>(o) * a.rb0;
    } else {
      const int64_t o = static_cast<int64_t>(tile) * kDownOut + kk;
      return a.w0 + static_cast<size_t>(e) * a.eb0 + static_cast<size_t>(o) * a.rb0;
    }
  };
  float acc = 0.0f;
  for (int pc = 0; pc < m; pc += a.pair_cap) {
    const int mc = min(a.pair_cap, m - pc);
    for (int c0 = 0; c0 < a.nb; c0 += a.sb) {
      const int cnt = min(a.sb, a.nb - c0);
      __syncthreads();  // the previous stage is no longer read
      if (pc == 0 || a.nb > a.sb) {  // weights: once per call when a row fits one stage
        const int bytes = cnt * kBB;
        const size_t off = static_cast<size_t>(c0) * kBB;
        if (a.vec16) {
          const int n16 = bytes / 16;
          for (int idx = tid; idx < kWeightRows * n16; idx += kThreads) {
            const int kk = idx / n16, i = idx - kk * n16;
            cp_async16_cg(ws + kk * a.w_stride + 16 * i, row_ptr(kk) + off + 16 * i);
          }
        } else {
          const int n2 = bytes / 2;
          for (int idx = tid; idx < kWeightRows * n2; idx += kThreads) {
            const int kk = idx / n2, i = idx - kk * n2;
            reinterpret_cast<uint16_t*>(ws + kk * a.w_stride)[i] =
                *reinterpret_cast<const uint16_t*>(row_ptr(kk) + off + 2 * i);
          }
        }
      }
      // Activations: mc pairs × cnt blocks, 4 bytes per cp.async into the staged layout.
      const int per_pair = cnt * 73;
      for (int idx = tid; idx < mc * per_pair; idx += kThreads) {
        const int p = idx / per_pair, rem = idx - p * per_pair;
        const int b = rem / 73, wd = rem - b * 73;
        const int q = __ldg(a.order + q0 + pc + p);
        const int64_t row = kGU ? q / a.n_used : q;
        const uint32_t* src = reinterpret_cast<const uint32_t*>(a.act + row * a.nb + c0 + b) + wd;
        cp_async4(as + (p * a.sb + b) * kActBlockBytes + 4 * act_word_to(wd), src);
      }
      cp_async_wait_all();
      __syncthreads();
      const uint8_t* wrow = ws + k * a.w_stride;
      for (int b = 0; b < cnt; ++b) {
        typename F::Lane w;
        F::decode(wrow + b * kBB, s, grid_s, w);
        int32_t k0 = 0, k1 = 0;
        for (int p = 0; p < mc; ++p) {  // block-uniform bound: every lane shuffles
          int32_t i0, i1;
          F::part(w, as + (p * a.sb + b) * kActBlockBytes, s, i0, i1);
#pragma unroll
          for (int sh = 1; sh < 8; sh *= 2) {
            i0 += __shfl_xor_sync(kFullMask, i0, sh);
            if constexpr (F::kTwo) i1 += __shfl_xor_sync(kFullMask, i1, sh);
          }
          if (s == p) k0 = i0, k1 = i1;
        }
        if (s < mc) acc = acc + F::term(w, as + (s * a.sb + b) * kActBlockBytes, k0, k1);
      }
    }
    const float v = F::finish(acc);
    if constexpr (kGU) {
      const float u = __shfl_down_sync(kFullMask, v, 8);  // lane 8(r + 1) + s: the up row
      if ((r & 1) == 0 && s < mc) {
        const int q = __ldg(a.order + q0 + pc + s);
        const int64_t o = static_cast<int64_t>(tile) * kGuOut + (k >> 1);
        a.out[static_cast<int64_t>(q) * a.n_out + o] = backend::rowmath::moe_mid_value(v, u, a.clamp, __ldg(a.wt + q));
      }
    } else {
      if (s < mc) {
        const int q = __ldg(a.order + q0 + pc + s);
        const int64_t o = static_cast<int64_t>(tile) * kDownOut + k;
        a.out[static_cast<int64_t>(q) * a.n_out + o] = v;
      }
    }
    acc = 0.0f;
  }
}

// out[i·n_embd + o] = ((0 + d(i, 0)) + d(i, 1)) + ... (+ add[i·n_embd + o] after, when given),
// d(i, s) = dpair row i·n_used + s, NaN for an id outside [0, n_expert).
__global__ void __launch_bounds__(256) moe_rows_sum_kernel(const float* __restrict__ dpair,
                                                           const int32_t* __restrict__ sel, int n_rows, int n_used,
                                                           int64_t n_embd, int n_expert, const float* __restrict__ add,
                                                           float* __restrict__ out) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(n_rows) * n_embd) return;
  const int64_t i = idx / n_embd, o = idx - i * n_embd;
  float sum = 0.0f;
  for (int s = 0; s < n_used; ++s) {
    const int64_t q = i * n_used + s;
    const int32_t e = __ldg(sel + q);
    const float d = (e >= 0 && e < n_expert) ? dpair[q * n_embd + o] : __int_as_float(0x7fffffff);
    sum = sum + d;
  }
  out[idx] = add != nullptr ? sum + add[idx] : sum;
}

// ---- The tensor-core form (MoeRowsKernel::kTensor) ---------------------------------------------
// Each (block, group of 32) integer dot of a (weight row, pair) is one lane of an int8 mma
// (m16n8k32: 16 weight rows × 8 pairs), exact in int32 like dp4a, so the float closing and the
// block-order accumulator are the dp4a kernel's and the bits are equal. What lane (g, t)
// supplies per row and group (the int8 words, the k order, scales and mins) is
// mma_pieces_hd.h's, host-tested against quant's block sums; here the formats' flags, the
// block's float constants and the float closing (the dp4a kernel's term). The K-quants' 4-byte
// loads at word t of a row hit 32 distinct banks (rows padded by tc_stride).
struct TcIq2Xxs {
  static constexpr int kBlockBytes = 66, kStage = 8;
  static constexpr bool kTables = true, kGroupScale = true, kMins = false, kPermuted = true;
  static __device__ __forceinline__ mma::MmaPiece piece(const uint8_t* p, int G, int t, const uint64_t* tables) {
    return mma::iq2_xxs_piece(p, G, t, tables);
  }
  static __device__ __forceinline__ void consts(const uint8_t* p, float& wd, float& wm) {
    wd = f16_to_f32(detail::load_u16(p));
    wm = 0.0f;
  }
  static __device__ __forceinline__ float close(float yd, float wd, float, int32_t i0, int32_t) {
    const float d = wd * yd;
    return d * static_cast<float>(i0);
  }
  static __device__ __forceinline__ float finish(float acc) { return 0.125f * acc; }
};

// Q2_K and Q4_K: f16 d and dmin side by side at byte kDOffset; quant/dot.h's K-quant closing.
template <int kDOffset>
struct TcKQuant {
  static constexpr bool kTables = false, kMins = true, kPermuted = false;
  static __device__ __forceinline__ void consts(const uint8_t* p, float& wd, float& wm) {
    const uint32_t dd = *reinterpret_cast<const uint32_t*>(p + kDOffset);
    wd = f16_to_f32(static_cast<uint16_t>(dd & 0xffffu));
    wm = f16_to_f32(static_cast<uint16_t>(dd >> 16));
  }
  static __device__ __forceinline__ float close(float yd, float wd, float wm, int32_t i0, int32_t i1) {
    return kquant_close(yd, wd, wm, i0, i1);
  }
  static __device__ __forceinline__ float finish(float acc) { return acc; }
};

struct TcQ2K : TcKQuant<80> {
  static constexpr int kBlockBytes = 84, kStage = 8;
  static constexpr bool kGroupScale = false;  // the 4-bit scales are folded into the words
  static __device__ __forceinline__ mma::MmaPiece piece(const uint8_t* p, int G, int t, const uint64_t*) {
    return mma::q2_k_piece(p, G, t);
  }
};

struct TcQ4K : TcKQuant<0> {
  static constexpr int kBlockBytes = 144, kStage = 4;
  static constexpr bool kGroupScale = true;
  static __device__ __forceinline__ mma::MmaPiece piece(const uint8_t* p, int G, int t, const uint64_t*) {
    return mma::q4_k_piece(p, G, t);
  }
};

template <class F>
__host__ __device__ constexpr int tc_table_bytes() {
  return F::kTables ? kIq2DecodeTables * 8 : 0;
}

constexpr int kTcWarps = 4;
constexpr int kTcThreads = 32 * kTcWarps;
constexpr int kTcRows = 16;  // weight rows of a warp's mma tile (kGU: 8 gate rows, then their 8 up rows)
// Output rows per CTA: kGU 8 per warp (a gate and an up row each), down 16 per warp.
template <bool kGU>
__host__ __device__ constexpr int tc_out_per_cta() {
  return kTcWarps * (kGU ? kTcRows / 2 : kTcRows);
}

// d = c + A·B (int8 mma, exact int32): A = 16 weight rows × 32 (row-major fragments), B = 32 × 8.
__device__ __forceinline__ void mma_s8(int32_t (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// grid (n_out / tc_out_per_cta, groups bound): warp w of CTA (tile, g) owns one mma tile of 16
// weight rows for every pair of group g, 8 pairs at a time. It stages its own rows (warp-private
// shared memory, a.sb blocks at a time: the whole row where it fits, so a group of more than 8
// pairs reads its expert once; a.w_stride bytes per row) and needs no block barrier after the
// IQ2_XXS tables' copy. Lane (g, t) owns the accumulators of (row g, pairs 2t, 2t+1)
// and (row g + 8, the same pairs), in block order: quant/dot.h's single accumulator per dot.
template <class F, bool kGU>
__global__ void __launch_bounds__(kTcThreads) moe_rows_tc_kernel(const RowsArgs a) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  extern __shared__ __align__(16) uint8_t smem[];
  uint64_t* grid_s = reinterpret_cast<uint64_t*>(smem);
  const int grp = blockIdx.y;
  if (grp >= __ldg(a.meta)) return;  // block-uniform
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  if constexpr (F::kTables) {
    for (int i = tid; i < kIq2DecodeTables; i += kTcThreads) grid_s[i] = g_rows_iq2_grid[i];
    __syncthreads();
  }
  uint8_t* ws = smem + tc_table_bytes<F>() + warp * kTcRows * a.w_stride;
  const int e = __ldg(a.gexp + grp);
  const int q0 = __ldg(a.gstart + grp);
  const int m = __ldg(a.gstart + grp + 1) - q0;
  constexpr int kBB = F::kBlockBytes;
  // Output row of tile row rr: kGU rows 0-7 gate o, 8-15 up o (o = base + rr % 8); down o = base + rr.
  const int64_t base = static_cast<int64_t>(blockIdx.x) * tc_out_per_cta<kGU>() + warp * (kGU ? kTcRows / 2 : kTcRows);
  auto row_ptr = [&](int rr) -> const uint8_t* {
    if constexpr (kGU) {
      const int64_t o = base + (rr & 7);
      return rr >= 8 ? a.w1 + static_cast<size_t>(e) * a.eb1 + static_cast<size_t>(o) * a.rb1
                     : a.w0 + static_cast<size_t>(e) * a.eb0 + static_cast<size_t>(o) * a.rb0;
    } else {
      return a.w0 + static_cast<size_t>(e) * a.eb0 + static_cast<size_t>(base + rr) * a.rb0;
    }
  };
  for (int pc = 0; pc < m; pc += 8) {
    const int mc = min(8, m - pc);
    // Activation rows: B's column g (pair pc + g), the accumulators' pairs pc + 2t, pc + 2t + 1
    // (a pair >= mc reads pair pc: its results are never stored).
    auto act_row = [&](int p) -> const BlockQ8K* {
      const int q = __ldg(a.order + q0 + pc + (p < mc ? p : 0));
      return a.act + static_cast<int64_t>(kGU ? q / a.n_used : q) * a.nb;
    };
    const BlockQ8K* xb = act_row(g);
    const BlockQ8K* y0 = act_row(2 * t);
    const BlockQ8K* y1 = act_row(2 * t + 1);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)
    for (int c0 = 0; c0 < a.nb; c0 += a.sb) {
      const int cnt = min(a.sb, a.nb - c0);
      // Every lane is past its reads of the previous stage and the last chunk's stores (the
      // mmas below are .aligned: the warp must be converged).
      __syncwarp();
      if (pc == 0 || a.nb > a.sb) {  // weights: once per call when a row fits one stage
        // A row at a time (one warp instruction copies 512 contiguous bytes), no division.
        const int bytes = cnt * kBB;
        const size_t off = static_cast<size_t>(c0) * kBB;
        for (int rr = 0; rr < kTcRows; ++rr) {
          const uint8_t* src = row_ptr(rr) + off;
          uint8_t* dst = ws + rr * a.w_stride;
          if (a.vec16) {
            for (int i = lane; i < bytes / 16; i += 32) cp_async16_cg(dst + 16 * i, src + 16 * i);
          } else {
            for (int i = lane; i < bytes / 2; i += 32)
              reinterpret_cast<uint16_t*>(dst)[i] = *reinterpret_cast<const uint16_t*>(src + 2 * i);
          }
        }
        if (a.vec16) cp_async_wait_all();
        __syncwarp();
      }
      const uint8_t* r0 = ws + g * a.w_stride;
      const uint8_t* r1 = ws + (g + 8) * a.w_stride;
      for (int bi = 0; bi < cnt; ++bi) {
        const int b = c0 + bi;
        const uint8_t* p0 = r0 + bi * kBB;
        const uint8_t* p1 = r1 + bi * kBB;
        const int8_t* xq = xb[b].qs;  // 4-byte aligned (BlockQ8K: d, then the quants)
        int32_t i0[4] = {0, 0, 0, 0}, i1[4] = {0, 0, 0, 0};
#pragma unroll 2
        for (int G = 0; G < 8; ++G) {
          const mma::MmaPiece w0 = F::piece(p0, G, t, grid_s), w1 = F::piece(p1, G, t, grid_s);
          const uint32_t fa[4] = {w0.lo, w1.lo, w0.hi, w1.hi};  // A: rows g, g + 8; slots 4t.., 16 + 4t..
          const uint32_t fm[4] = {w0.min_lo, w1.min_lo, w0.min_hi, w1.min_hi};
          const int32_t s0 = w0.scale, s1 = w1.scale;
          const int8_t* xg = xq + 32 * G;
          const uint32_t b0 = __ldg(reinterpret_cast<const uint32_t*>(xg + mma::act_off0(F::kPermuted, t)));
          const uint32_t b1 = __ldg(reinterpret_cast<const uint32_t*>(xg + mma::act_off1(F::kPermuted, t)));
          if constexpr (F::kGroupScale) {
            int32_t d[4] = {0, 0, 0, 0};
            mma_s8(d, fa, b0, b1);
            i0[0] += s0 * d[0], i0[1] += s0 * d[1], i0[2] += s1 * d[2], i0[3] += s1 * d[3];
          } else {
            mma_s8(i0, fa, b0, b1);
          }
          if constexpr (F::kMins) mma_s8(i1, fm, b0, b1);
        }
        float wd0, wm0, wd1, wm1;
        F::consts(p0, wd0, wm0);
        F::consts(p1, wd1, wm1);
        const float yd0 = __ldg(&y0[b].d), yd1 = __ldg(&y1[b].d);
        acc[0] = acc[0] + F::close(yd0, wd0, wm0, i0[0], i1[0]);
        acc[1] = acc[1] + F::close(yd1, wd0, wm0, i0[1], i1[1]);
        acc[2] = acc[2] + F::close(yd0, wd1, wm1, i0[2], i1[2]);
        acc[3] = acc[3] + F::close(yd1, wd1, wm1, i0[3], i1[3]);
      }
    }
    for (int pr = 0; pr < 2; ++pr) {
      const int p = 2 * t + pr;
      if (p >= mc) continue;
      const int q = __ldg(a.order + q0 + pc + p);
      if constexpr (kGU) {
        const float gate = F::finish(acc[pr]), up = F::finish(acc[2 + pr]);
        a.out[static_cast<int64_t>(q) * a.n_out + base + g] =
            backend::rowmath::moe_mid_value(gate, up, a.clamp, __ldg(a.wt + q));
      } else {
        a.out[static_cast<int64_t>(q) * a.n_out + base + g] = F::finish(acc[pr]);
        a.out[static_cast<int64_t>(q) * a.n_out + base + g + 8] = F::finish(acc[2 + pr]);
      }
    }
  }
}

// ---- host -------------------------------------------------------------------------------------

size_t align64(size_t b) { return (b + 63) / 64 * 64; }

struct RowsLayout {
  size_t xq, mid, midq, dpair, ints, total;  // byte offsets from the 64-aligned scratch start
};

RowsLayout rows_layout(int64_t n_embd, int64_t n_ff, int n_used, int n_rows) {
  const size_t pairs = static_cast<size_t>(n_used) * static_cast<size_t>(n_rows);
  const MoeLayout base = moe_layout(n_embd, n_ff, n_used, n_rows);  // xq, mid, midq as the per-pair path
  RowsLayout l{};
  l.xq = base.xq;
  l.mid = base.mid;
  l.midq = base.midq;
  size_t at = base.total - 64;  // the 64-aligned end of midq
  l.dpair = at;
  at = align64(at + pairs * static_cast<size_t>(n_embd) * sizeof(float));
  l.ints = at;  // n_groups, gstart [pairs + 1], gexp [pairs], order [pairs]
  at = align64(at + (3 * pairs + 2) * sizeof(int32_t));
  l.total = at + 64;  // room to align an unaligned scratch start
  return l;
}

Status upload_grid() {
  static bool done[64] = {};  // once per device; a failure is reported, not cached
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return resource_error("cuda: moe: no current device");
  if (done[dev]) return Status();
  uint64_t tables[kIq2DecodeTables];
  iq2_decode_tables(tables);
  if (cudaMemcpyToSymbol(g_rows_iq2_grid, tables, sizeof(tables)) != cudaSuccess)
    return resource_error("cuda: moe: cannot upload the IQ2_XXS grid: %s", cudaGetErrorString(cudaGetLastError()));
  // The copy from pageable memory may still be in flight when it returns, and the backend's
  // stream does not wait for the legacy default stream: wait here, once per device.
  if (cudaDeviceSynchronize() != cudaSuccess)
    return resource_error("%s: the IQ2_XXS table upload failed: %s", "cuda: moe", cudaGetErrorString(cudaGetLastError()));
  done[dev] = true;
  return Status();
}

// Opts `kernel` in to `bytes` of dynamic shared memory above the 48 KB default, once per
// device and size (done: the largest size opted in per device, owned by the caller's instantiation).
template <class Kernel>
Status optin_smem(Kernel* kernel, size_t bytes, size_t (&done)[64]) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return resource_error("cuda: moe: no current device");
  if (bytes <= 48 * 1024 || bytes <= done[dev]) return Status();
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)) != cudaSuccess)
    return resource_error("cuda: moe: cannot opt in to %zu bytes of shared memory: %s", bytes,
                          cudaGetErrorString(cudaGetLastError()));
  done[dev] = bytes;
  return Status();
}

template <class F, bool kGU>
Status smem_optin(size_t bytes) {
  static size_t done[64] = {};
  return optin_smem(moe_rows_kernel<F, kGU>, bytes, done);
}

// Whether the grouped kernels take expert matrices w (n_in, n_out) of format F; *vec16: 16-byte staging.
template <class F>
bool takes(const backend::ExpertMatrix& w, bool* vec16) {
  const int64_t nb = w.n_in / quant::kQKK;
  const size_t eb = w.expert_bytes();
  const uintptr_t base = reinterpret_cast<uintptr_t>(w.data);
  if (nb <= 0 || nb > (1 << 20) || w.row_bytes < static_cast<size_t>(nb) * F::kBlockBytes || w.row_bytes % 4 != 0 ||
      eb % 4 != 0 || base % 4 != 0 || w.n_expert <= 0)
    return false;
  *vec16 = base % 16 == 0 && w.row_bytes % 16 == 0 && eb % 16 == 0 &&
           (static_cast<size_t>(nb) * F::kBlockBytes) % 16 == 0 &&
           (static_cast<size_t>(std::min<int64_t>(nb, kStageBlocks)) * F::kBlockBytes) % 16 == 0;
  return true;
}

template <class F>
constexpr int stage_stride(int sb) {
  return (sb * F::kBlockBytes + 15) / 16 * 16;
}

template <class F, bool kGU>
Status launch_rows(RowsArgs a, int groups_bound, Stream stream) {
  a.sb = std::min(a.nb, kStageBlocks);
  a.w_stride = stage_stride<F>(a.sb);
  const size_t smem = static_cast<size_t>(table_bytes<F>()) + static_cast<size_t>(kWeightRows) * a.w_stride +
                      static_cast<size_t>(a.pair_cap) * a.sb * kActBlockBytes;
  const char* op = kGU ? "moe_rows_gate_up" : "moe_rows_down";
  if (Status s = smem_optin<F, kGU>(smem); !s.ok()) return s;
  const int64_t tiles = a.n_out / (kGU ? kGuOut : kDownOut);
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(groups_bound));
  detail::launch_pdl(pdl_all(), moe_rows_kernel<F, kGU>, grid, kThreads, smem, stream, a);
  return launch_status(op, a.nb * quant::kQKK, a.n_out, groups_bound);
}

// Rows of a tensor-core stage are padded to ≡ 4 words mod 8, so the 8 rows of a fragment load
// (lanes g = 0..7) start on 8 distinct multiples of 4 banks: lanes t = 0..3 of a row read one
// word (IQ2_XXS's aux words) or words t (the K-quants' quants), 32 distinct banks either way.
int tc_stride(int bytes) {
  int s = (bytes + 15) / 16 * 16;
  while ((s / 4) % 8 != 4) s += 16;
  return s;
}

// Shared memory a tensor-core CTA may take to stage whole weight rows (Flash: IQ2_XXS gate/up
// 71.7 KB, three CTAs per SM; Q2_K down 44 KB); wider rows are staged F::kStage blocks at a time.
constexpr size_t kTcWholeRowSmem = 100 * 1024;

template <class F, bool kGU>
Status launch_tc(RowsArgs a, int groups_bound, Stream stream) {
  static_assert((F::kStage * F::kBlockBytes) % 16 == 0, "a whole stage of 16-byte copies");
  auto smem_for = [&](int sb) {
    return static_cast<size_t>(tc_table_bytes<F>()) +
           static_cast<size_t>(kTcWarps * kTcRows) * static_cast<size_t>(tc_stride(sb * F::kBlockBytes));
  };
  a.sb = smem_for(a.nb) <= kTcWholeRowSmem ? a.nb : std::min(a.nb, F::kStage);
  a.w_stride = tc_stride(a.sb * F::kBlockBytes);
  const size_t smem = smem_for(a.sb);
  const char* op = kGU ? "moe_rows_tc_gate_up" : "moe_rows_tc_down";
  static size_t done[64] = {};
  if (Status s = optin_smem(moe_rows_tc_kernel<F, kGU>, smem, done); !s.ok()) return s;
  const int64_t tiles = a.n_out / tc_out_per_cta<kGU>();
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(groups_bound));
  detail::launch_pdl(pdl_all(), moe_rows_tc_kernel<F, kGU>, grid, kTcThreads, smem, stream, a);
  return launch_status(op, a.nb * quant::kQKK, a.n_out, groups_bound);
}

// The backend sets it from --cuda-moe (kGrouped by default); bare ops callers get the per-pair kernels.
std::atomic<int> g_moe_rows{static_cast<int>(MoeRowsKernel::kPairs)};

// The tensor-core kernels when chosen and the output rows fill their CTAs, else the dp4a ones
// (the same bits either way).
template <bool kGU>
Status launch_fmt(ExpertFormat f, const RowsArgs& a, int groups_bound, Stream stream) {
  if (g_moe_rows.load(std::memory_order_relaxed) == static_cast<int>(MoeRowsKernel::kTensor) &&
      a.n_out % tc_out_per_cta<kGU>() == 0) {
    switch (f) {
      case ExpertFormat::kIQ2_XXS: return launch_tc<TcIq2Xxs, kGU>(a, groups_bound, stream);
      case ExpertFormat::kQ2_K: return launch_tc<TcQ2K, kGU>(a, groups_bound, stream);
      case ExpertFormat::kQ4_K: return launch_tc<TcQ4K, kGU>(a, groups_bound, stream);
    }
  }
  switch (f) {
    case ExpertFormat::kIQ2_XXS: return launch_rows<RowsIq2Xxs, kGU>(a, groups_bound, stream);
    case ExpertFormat::kQ2_K: return launch_rows<RowsQ2K, kGU>(a, groups_bound, stream);
    case ExpertFormat::kQ4_K: return launch_rows<RowsQ4K, kGU>(a, groups_bound, stream);
  }
  return invalid_argument("cuda: moe: unknown expert format");
}

bool takes_fmt(ExpertFormat f, const backend::ExpertMatrix& w, bool* vec16) {
  switch (f) {
    case ExpertFormat::kIQ2_XXS: return takes<RowsIq2Xxs>(w, vec16);
    case ExpertFormat::kQ2_K: return takes<RowsQ2K>(w, vec16);
    case ExpertFormat::kQ4_K: return takes<RowsQ4K>(w, vec16);
  }
  return false;
}


}  // namespace

void set_moe_rows_kernel(MoeRowsKernel k) { g_moe_rows.store(static_cast<int>(k), std::memory_order_relaxed); }

MoeRowsKernel moe_rows_kernel() { return static_cast<MoeRowsKernel>(g_moe_rows.load(std::memory_order_relaxed)); }

bool moe_rows_tc_fills(int64_t n_embd, int64_t n_ff) {
  return n_ff % tc_out_per_cta<true>() == 0 && n_embd % tc_out_per_cta<false>() == 0;
}

size_t moe_rows_scratch_bytes(int64_t n_embd, int64_t n_ff, int n_used, int n_rows) {
  return rows_layout(n_embd, n_ff, n_used, n_rows).total;
}

Status moe_rows_try(const backend::MoeParams& p, ExpertFormat f_gu, ExpertFormat f_down, Stream stream, bool* done) {
  *done = false;
  const int64_t n_embd = p.gate.n_in, n_ff = p.gate.n_out;
  const int U = p.n_used;
  const int64_t n_expert = std::min(p.gate.n_expert, p.down.n_expert);
  bool v_gate = false, v_up = false, v_down = false;
  if (p.n_rows < 2 || p.up.n_expert != p.gate.n_expert || n_expert > kMoeRowsMaxExperts || n_expert <= 0 ||
      !takes_fmt(f_gu, p.gate, &v_gate) || !takes_fmt(f_gu, p.up, &v_up) || !takes_fmt(f_down, p.down, &v_down) ||
      n_ff % kGuOut != 0 || n_embd % kDownOut != 0)
    return Status();
  const int n_pairs = U * p.n_rows;
  const int groups_bound = static_cast<int>(std::min<int64_t>(n_pairs, n_expert));
  const int64_t xb = n_embd / quant::kQKK, mb = n_ff / quant::kQKK;
  const RowsLayout l = rows_layout(n_embd, n_ff, U, p.n_rows);
  const uintptr_t s0 = (reinterpret_cast<uintptr_t>(p.scratch) + 63) & ~uintptr_t{63};
  auto* xq = reinterpret_cast<BlockQ8K*>(s0 + l.xq);
  auto* mid = reinterpret_cast<float*>(s0 + l.mid);
  auto* midq = reinterpret_cast<BlockQ8K*>(s0 + l.midq);
  auto* dpair = reinterpret_cast<float*>(s0 + l.dpair);
  auto* meta = reinterpret_cast<int32_t*>(s0 + l.ints);
  int32_t* gstart = meta + 1;
  int32_t* gexp = gstart + n_pairs + 1;
  int32_t* order = gexp + n_pairs;
  if (f_gu == ExpertFormat::kIQ2_XXS || f_down == ExpertFormat::kIQ2_XXS) {
    if (Status s = upload_grid(); !s.ok()) return s;
  }
  *done = true;  // from here on the grouped path owns the call (errors are reported)

  if (Status s = quantize_q8_k_act(p.x, n_embd, p.n_rows, n_embd, xq, xb, stream); !s.ok()) return s;
  detail::launch_pdl(pdl_all(), moe_rows_group_kernel, 1, kGroupThreads, 0, stream, p.sel, n_pairs,
                     static_cast<int>(n_expert), meta, gstart, gexp, order);
  if (Status s = launch_status("moe_rows_group", n_expert, U, p.n_rows); !s.ok()) return s;

  RowsArgs a{};
  a.meta = meta, a.gstart = gstart, a.gexp = gexp, a.order = order, a.n_used = U;
  a.pair_cap = std::min(kPairChunk, p.n_rows);
  a.w0 = p.gate.data, a.rb0 = p.gate.row_bytes, a.eb0 = p.gate.expert_bytes();
  a.w1 = p.up.data, a.rb1 = p.up.row_bytes, a.eb1 = p.up.expert_bytes();
  a.nb = static_cast<int>(xb);
  a.n_out = n_ff;
  a.act = xq, a.wt = p.wt, a.clamp = p.clamp, a.out = mid, a.vec16 = v_gate && v_up;
  if (Status s = launch_fmt<true>(f_gu, a, groups_bound, stream); !s.ok()) return s;

  if (Status s = quantize_q8_k_act(mid, n_ff, n_pairs, n_ff, midq, mb, stream); !s.ok()) return s;

  a.w0 = p.down.data, a.rb0 = p.down.row_bytes, a.eb0 = p.down.expert_bytes();
  a.w1 = nullptr, a.rb1 = 0, a.eb1 = 0;
  a.nb = static_cast<int>(mb);
  a.n_out = n_embd;
  a.act = midq, a.wt = nullptr, a.out = dpair, a.vec16 = v_down;
  if (Status s = launch_fmt<false>(f_down, a, groups_bound, stream); !s.ok()) return s;

  const int64_t total = static_cast<int64_t>(p.n_rows) * n_embd;
  detail::launch_pdl(pdl_all(), moe_rows_sum_kernel, static_cast<unsigned>((total + 255) / 256), 256, 0, stream, dpair,
                     p.sel, p.n_rows, U, n_embd, static_cast<int>(n_expert), p.add, p.out);
  return launch_status("moe_rows_sum", n_embd, U, p.n_rows);
}

}  // namespace ds4::cuda
