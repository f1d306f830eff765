// backend/cuda/matvec_quant.cu — block-quantized matvecs: Q8_0 × Q8_0 activations and the
// routed-expert rows IQ2_XXS / Q2_K / Q4_K × Q8_K activations, r = 1..8 rows per launch.
//
// Role: matvec_q8_0 (and matvec_q8_0_mma) / matvec_iq2_xxs / matvec_q2_k / matvec_q4_k of
// cuda_kernels.h, and the fused routed-expert FFN expert_gate_up / expert_down_sum (the expert
// id read from device memory per pair; layout below, at its kernels).
// Q8_0 at r >= kQ8_0TcMinRows (prefill): the tensor-core GEMM of matmul_q8_0_tc.cu where it
// takes the shape (tc_try_launch), else tiles of kMaxRows rows as below.
// Q8_0 at r = 1 (decode): the wide kernel (matvec_q8_0_wide.cu) or the staged one
// (matvec_q8_0_r1.cu) where the Q8_0R1Kernel choice takes it (matvec_r1.h r1_try_launch), else
// the warp kernels below.
// Layout: one warp per output row, 8 rows per 256-thread block (Q8_0 with fewer than 4096
// rows: 4 warps per row, q8_0_split_kernel, and its grouped twin q8_0_split_grouped_kernel for
// matvec_q8_0_grouped, any row count; Q8_0 with at least 4096 rows and r = 2..8: the
// tensor-core kernel q8_0_mma_kernel, laid out at its definition). A warp walks the row's
// blocks in chunks (128 for Q8_0, 4 blocks per lane; 32 for the 256-element super-blocks,
// which give 8 lanes per block, one 32-element group each, 4 blocks per step). Each weight block is
// loaded and decoded once and dotted with all r activation rows.
// Bit-exactness (quant/dot.h): the integer part of a block dot is exact int32 whatever the
// split (lanes' partial sums are combined with integer shuffles); the float part of each
// block (scale products, int->float, the K-quant a - c) is computed by one lane exactly as
// the CPU writes it; the per-block terms of a chunk go to shared memory and lane k adds
// them into row k's single accumulator in block order — the CPU's sequential sum, never a
// tree (the tensor-core kernel: the lane that receives a block's isum owns that row's
// accumulator). --fmad=false keeps every product and sum separately rounded.
#include <atomic>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/matmul_q8_0_tc.h"
#include "backend/cuda/matvec_r1.h"
#include "backend/cuda/moe_r1.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/q8k_staged.cuh"
#include "backend/row_math.h"
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

// A Q8_K activation block as the fused expert kernels stage it in shared memory (stage_act):
// q8k_staged.cuh's layout.
using detail::act_bsum;
using detail::act_d;
using detail::act_q32;
using detail::kActBlockBytes;

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

  // The fused expert kernels' form (expert_dots below): block p staged in SHARED memory
  // (2-byte aligned), activation block a in shared memory too (kActBlockBytes layout), one
  // pair (r = 1); the same integer and float operations as terms<1>.
  static constexpr int kAlignBlocks = 8;    // 8 blocks = 528 bytes, a multiple of 16
  static constexpr int kDownStageBytes = 3168;  // per warp: 6 down rows of 8 blocks
  // Signs by masks: with m = 0xff (-1) where the sign bit is set, s·g·a = g·(a ^ m) - g·m per
  // byte, so the signed dot is dp4a(g, a ^ m) - dp4a(g, m): exact integers, 3 operations per
  // word instead of expanding the sign bits and negating bytes. The masks are computed in
  // registers, not looked up: kIq2Signs[i] = i | (popcount(i) & 1) << 7 (bit 7 makes the
  // popcount even), and sign_mask4 spreads 4 sign bits to 4 bytes of 0xff; a shared-memory
  // table lookup (random indices, bank conflicts) per word cost more L1 wavefronts than the
  // weights themselves.
  static __device__ __forceinline__ float staged_term(const uint8_t* p, const uint8_t* a, bool valid, int sub,
                                                      const uint64_t* grid) {
    int32_t part = 0;
    float wd = 0.0f;
    if (valid) {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
      wd = f16_to_f32(h[0]);
      int aq[8];
      act_q32(a, sub, aq);
      part = detail::iq2_xxs_group_isum(h + 1 + 4 * sub, aq, grid);
    }
#pragma unroll
    for (int s = 1; s < 8; s *= 2) part += __shfl_xor_sync(kFullMask, part, s);
    float t = 0.0f;
    if (valid && sub == 0) {
      const float d = wd * act_d(a);
      t = d * static_cast<float>(part);
    }
    return t;
  }
};

using detail::kquant_close;

// Scale and min of 32-element group j of a Q4_K block from its 12 packed scale bytes
// (quant::q4_k_scale_min).
__device__ __forceinline__ void q4k_scale_min(const uint8_t* scales, int j, int32_t* sc, int32_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4);
    *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

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
      for (int k = 0; k < R; ++k) t[k] = kquant_close(__ldg(&x[k * xs + b].d), wd, wm, isum[k], summs[k]);
    }
  }
  static __device__ __forceinline__ float finish(float acc) { return acc; }

  // Fused-expert form (see Iq2XxsFmt::staged_term): p in shared memory, 4-byte aligned.
  static constexpr int kAlignBlocks = 4;    // 4 blocks = 336 bytes
  static constexpr int kDownStageBytes = 4032;  // per warp: 6 down rows of 8 blocks
  static __device__ __forceinline__ float staged_term(const uint8_t* p, const uint8_t* a, bool valid, int sub,
                                                      const uint64_t*) {
    int32_t isum = 0, summs = 0;
    const int n = sub >> 2, j = sub & 3;
    const int sb = 8 * n + 2 * j;
    if (valid) {
      const uint32_t* pw = reinterpret_cast<const uint32_t*>(p);
      const int32_t sc0 = p[sb], sc1 = p[sb + 1];
      int aq[8];
      act_q32(a, 4 * n + j, aq);  // quants 128n + 32j .. + 31
      int s0 = 0, s1 = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) s0 = __dp4a(static_cast<int>((pw[4 + 8 * n + i] >> (2 * j)) & 0x03030303u), aq[i], s0);
#pragma unroll
      for (int i = 4; i < 8; ++i) s1 = __dp4a(static_cast<int>((pw[4 + 8 * n + i] >> (2 * j)) & 0x03030303u), aq[i], s1);
      isum = (sc0 & 15) * s0 + (sc1 & 15) * s1;
      summs = act_bsum(a, sb) * (sc0 >> 4) + act_bsum(a, sb + 1) * (sc1 >> 4);
    }
#pragma unroll
    for (int s = 1; s < 8; s *= 2) {
      isum += __shfl_xor_sync(kFullMask, isum, s);
      summs += __shfl_xor_sync(kFullMask, summs, s);
    }
    float t = 0.0f;
    if (valid && sub == 0) {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
      const float wd = f16_to_f32(h[40]);
      const float wm = f16_to_f32(h[41]);
      t = kquant_close(act_d(a), wd, wm, isum, summs);
    }
    return t;
  }
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
      int32_t sc, m;
      q4k_scale_min(p + 4, j, &sc, &m);
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
      for (int k = 0; k < R; ++k) t[k] = kquant_close(__ldg(&x[k * xs + b].d), wd, wm, isum[k], summs[k]);
    }
  }
  static __device__ __forceinline__ float finish(float acc) { return acc; }

  // Fused-expert form (see Iq2XxsFmt::staged_term): p in shared memory, 16-byte aligned.
  static constexpr int kAlignBlocks = 1;    // 144 bytes
  static constexpr int kDownStageBytes = 6912;  // per warp: 6 down rows of 8 blocks
  static __device__ __forceinline__ float staged_term(const uint8_t* p, const uint8_t* a, bool valid, int sub,
                                                      const uint64_t*) {
    int32_t isum = 0, summs = 0;
    const int j = sub;
    if (valid) {
      int32_t sc, m;
      q4k_scale_min(p + 4, j, &sc, &m);
      const uint4* qw = reinterpret_cast<const uint4*>(p + 16 + 32 * (j >> 1));
      const uint4 w0 = qw[0], w1 = qw[1];
      const uint32_t wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
      const int shift = 4 * (j & 1);
      int aq[8];
      act_q32(a, j, aq);
      int s = 0;
#pragma unroll
      for (int i = 0; i < 8; ++i) s = __dp4a(static_cast<int>((wv[i] >> shift) & 0x0f0f0f0fu), aq[i], s);
      isum = sc * s;
      summs = m * (act_bsum(a, 2 * j) + act_bsum(a, 2 * j + 1));
    }
#pragma unroll
    for (int s = 1; s < 8; s *= 2) {
      isum += __shfl_xor_sync(kFullMask, isum, s);
      summs += __shfl_xor_sync(kFullMask, summs, s);
    }
    float t = 0.0f;
    if (valid && sub == 0) {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
      const float wd = f16_to_f32(h[0]);
      const float wm = f16_to_f32(h[1]);
      t = kquant_close(act_d(a), wd, wm, isum, summs);
    }
    return t;
  }
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
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  quant_matvec_rows<F, R>(w, row_bytes, nb, n_out, x, xs, y, ys);
}

// Q8_0 matrices with few output rows (an attention projection: 1024 rows are 128 blocks of
// quant_matvec_kernel, one per SM): kSplit warps share an output row, warp w of the group
// computing the terms of blocks [32w, 32w + 32) of each 128-block chunk (one block per lane),
// so 4x as many warps issue loads at once. The terms meet in shared memory and lane k of the
// group's first warp adds them into row k's accumulator in block order: the same terms, the
// same sequential sum, the same bits as quant_matvec_rows.
constexpr int kSplit = 4;
constexpr int64_t kSplitBelowRows = 4096;  // n_out below which matvec_q8_0 splits rows

template <int R>
__device__ __forceinline__ void q8_0_split_rows(const uint8_t* __restrict__ w, size_t row_bytes, int nb,
                                                int64_t n_out, const BlockQ8_0Act* __restrict__ x, int64_t xs,
                                                float* __restrict__ y, int64_t ys) {
  constexpr int kRowsPerBlock = kWarps / kSplit;
  constexpr int kChunk = Q8_0Fmt::kChunk;
  static_assert(Q8_0Fmt::kLanesPerBlock == 1 && kChunk == 32 * kSplit, "one block per lane per warp");
  __shared__ float ts[kRowsPerBlock][R][kChunk + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rg = warp / kSplit, part = warp % kSplit;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + rg;
  const bool live = o < n_out;  // no early return: every warp takes part in the barriers
  const uint8_t* row = w + (live ? o : 0) * row_bytes;
  float acc = 0.0f;  // lane k < R of the group's warp 0: row k's accumulator
  for (int c = 0; c < nb; c += kChunk) {
    const int cnt = nb - c < kChunk ? nb - c : kChunk;
    const int bi = 32 * part + lane;
    const bool valid = live && bi < cnt;
    float t[R];
    Q8_0Fmt::terms<R>(row, c + bi, valid, 0, x, xs, t, nullptr, nullptr);
    if (valid) {
#pragma unroll
      for (int k = 0; k < R; ++k) ts[rg][k][bi] = t[k];
    }
    __syncthreads();
    if (live && part == 0 && lane < R) {
      for (int j = 0; j < cnt; ++j) acc = acc + ts[rg][lane][j];
    }
    __syncthreads();
  }
  if (live && part == 0 && lane < R) y[lane * ys + o] = Q8_0Fmt::finish(acc);
}

template <int R>
__global__ void __launch_bounds__(32 * kWarps) q8_0_split_kernel(
    const uint8_t* __restrict__ w, size_t row_bytes, int nb, int64_t n_out, const BlockQ8_0Act* __restrict__ x,
    int64_t xs, float* __restrict__ y, int64_t ys) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  q8_0_split_rows<R>(w, row_bytes, nb, n_out, x, xs, y, ys);
}

// Several Q8_0 matrices of one shape in one launch (matvec_q8_0_grouped): blockIdx.y = group,
// blockIdx.x the rows as in q8_0_split_kernel. Why: the grouped output LoRA's 8 matrices of
// 1024 rows are 8 launches of 512 blocks each, too few to keep the loads of all SMs in flight.
// The pointers travel by value (Q8_0GroupArgs), so a launch needs no device copy of them.

template <int R>
__global__ void __launch_bounds__(32 * kWarps) q8_0_split_grouped_kernel(
    Q8_0GroupArgs groups, size_t row_bytes, int nb, int64_t n_out, int64_t xs, int64_t ys) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  const Q8_0Group& gr = groups.g[blockIdx.y];
  q8_0_split_rows<R>(static_cast<const uint8_t*>(gr.w), row_bytes, nb, n_out, gr.x, xs, gr.y, ys);
}

// ---- Q8_0 × r = 2..8 rows on the tensor cores (q8_0_mma_kernel) ----------------------------
// Why: the one-warp-per-row kernel above loads each row's activation block with 9 scalar
// loads per weight block through L1 (72 at r = 8), which bounds r = 8 at ~730 GB/s. Here one
// integer mma.m16n8k32 (s8 x s8 -> s32, exact) computes the isums of one 32-element block for
// 16 weight rows x 8 activation rows at once, so the activations are read once per 16 rows.
// Layout: a CTA of kMmaWarps warps copies the r activation rows into shared memory once
// (persistent grid: each warp then walks tiles of 16 output rows, tile += all warps); a warp
// streams its tile's weight rows through a kMmaStages-deep cp.async pipeline of chunks of
// kMmaChunk blocks (16 rows x 272 bytes). Lane (g = lane / 4, t = lane % 4) feeds the mma
// with weight rows g, g+8 (quant words t, t+4 of the block) and activation row g (words t,
// t+4); it receives the isums of (row g, act 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1) and owns
// those four accumulators for the whole row: per block it computes the CPU's float term
// s = f16(w.d) · x.d, t = s · (float)isum and adds it in block order — quant::dot_q8_0's
// sequence, no exchange between lanes. Activation rows >= r feed stale values into mma
// columns that are never stored (row k's bits do not depend on r).
// Shared-memory banks: a stage row is 272 bytes (17 × 16, word stride ≡ 4 mod 32) and an
// activation row's stride is padded to ≡ 4 words mod 32, so lanes (g, t) hit 32 banks.
constexpr int kMmaWarps = 4;
constexpr int kMmaTileRows = 16;   // the mma's M
constexpr int kMmaChunk = 8;       // blocks per stage row: 8 × 34 = 272 bytes, 16-byte aligned
constexpr int kMmaRowBytes = kMmaChunk * 34;
constexpr int kMmaStageBytes = kMmaTileRows * kMmaRowBytes;  // 4352
constexpr int kMmaStages = 4;      // chunks per warp in flight: 3 while one is decoded
constexpr int64_t kMmaMinOut = 4096;  // below: too few tiles to fill the GPU (split kernel)
constexpr int kMmaMinRows = 2;        // r = 1 keeps the warp kernel (90% of the read ceiling on the head)
static_assert(kMmaRowBytes % 16 == 0 && (kMmaRowBytes / 16) % 2 == 1, "stage rows: odd count of 16 bytes");

// Words per staged activation row: nb blocks of 9 words, padded to ≡ 4 mod 32.
__host__ __device__ constexpr int mma_act_words(int nb) { return nb * 9 + ((4 - nb * 9) % 32 + 32) % 32; }
size_t mma_smem_bytes(int nb, int r) {
  return static_cast<size_t>(r) * mma_act_words(nb) * 4 + static_cast<size_t>(kMmaWarps) * kMmaStages * kMmaStageBytes;
}

// c[0..3] = exact isums: A = 16 rows x 32 s8 (row-major), B = 32 x 8 s8 (column per act row).
__device__ __forceinline__ void mma_s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
}

// Copies chunk `c` (cnt blocks) of the tile's rows into `stage`: 16-byte cp.async for a full
// chunk of a 16-byte-aligned matrix, else 2-byte loads (tails, shapes no model uses).
__device__ __forceinline__ void mma_issue(uint8_t* stage, const uint8_t* __restrict__ w, size_t row_bytes,
                                          int64_t o0, int64_t n_out, int c, int cnt, bool vec16, int lane) {
  const size_t off = static_cast<size_t>(c) * kMmaRowBytes;
  if (vec16 && cnt == kMmaChunk) {
    constexpr int kPer = kMmaRowBytes / 16;  // 17 pieces per row
    for (int idx = lane; idx < kMmaTileRows * kPer; idx += 32) {
      const int m = idx / kPer, i = idx - m * kPer;
      if (o0 + m < n_out) cp_async16_cg(stage + m * kMmaRowBytes + 16 * i, w + (o0 + m) * row_bytes + off + 16 * i);
    }
  } else {
    const int per = cnt * 17;  // 2-byte pieces per row
    for (int idx = lane; idx < kMmaTileRows * per; idx += 32) {
      const int m = idx / per, i = idx - m * per;
      if (o0 + m < n_out)
        reinterpret_cast<uint16_t*>(stage + m * kMmaRowBytes)[i] = load_u16(w + (o0 + m) * row_bytes + off + 2 * i);
    }
  }
}

// One block j of the staged chunk: the mma and the four float terms (see the layout note).
__device__ __forceinline__ void mma_block(const uint32_t* sg, const uint32_t* sg8, const uint32_t* act_g,
                                          const uint32_t* act_2t, const uint32_t* act_2t1, int j, int b, int t,
                                          float (&acc)[4]) {
  const int wi = 17 * (j >> 1);  // the word where the block pair (j & ~1, j | 1) starts
  uint32_t q0, q4, p0, p4, dg, dg8;
  if ((j & 1) == 0) {  // d at bytes 0-1 of word wi, quants from byte 2: realigned
    q0 = __funnelshift_r(sg[wi + t], sg[wi + t + 1], 16);
    q4 = __funnelshift_r(sg[wi + t + 4], sg[wi + t + 5], 16);
    p0 = __funnelshift_r(sg8[wi + t], sg8[wi + t + 1], 16);
    p4 = __funnelshift_r(sg8[wi + t + 4], sg8[wi + t + 5], 16);
    dg = sg[wi] & 0xffffu;
    dg8 = sg8[wi] & 0xffffu;
  } else {  // d at bytes 2-3 of word wi + 8, quants word-aligned from word wi + 9
    q0 = sg[wi + 9 + t];
    q4 = sg[wi + 13 + t];
    p0 = sg8[wi + 9 + t];
    p4 = sg8[wi + 13 + t];
    dg = sg[wi + 8] >> 16;
    dg8 = sg8[wi + 8] >> 16;
  }
  const uint32_t* ab = act_g + 9 * b;  // activation block: word 0 = d, words 1..8 = quants
  int c[4];
  mma_s8(c, q0, p0, q4, p4, ab[1 + t], ab[5 + t]);
  const float ad0 = __uint_as_float(act_2t[9 * b]), ad1 = __uint_as_float(act_2t1[9 * b]);
  const float wg = f16_to_f32(static_cast<uint16_t>(dg)), wg8 = f16_to_f32(static_cast<uint16_t>(dg8));
  const float s0 = wg * ad0, s1 = wg * ad1, s2 = wg8 * ad0, s3 = wg8 * ad1;
  const float t0 = s0 * static_cast<float>(c[0]), t1 = s1 * static_cast<float>(c[1]);
  const float t2 = s2 * static_cast<float>(c[2]), t3 = s3 * static_cast<float>(c[3]);
  acc[0] = acc[0] + t0;
  acc[1] = acc[1] + t1;
  acc[2] = acc[2] + t2;
  acc[3] = acc[3] + t3;
}

__global__ void __launch_bounds__(32 * kMmaWarps) q8_0_mma_kernel(
    const uint8_t* __restrict__ w, size_t row_bytes, int nb, int64_t n_out, const BlockQ8_0Act* __restrict__ x,
    int64_t xs, int r, float* __restrict__ y, int64_t ys, bool vec16) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  extern __shared__ __align__(16) uint8_t mma_smem[];
  const int aw = mma_act_words(nb);
  uint32_t* act = reinterpret_cast<uint32_t*>(mma_smem);  // [r][aw] words: row k's blocks, 9 words each
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint8_t* stages = mma_smem + static_cast<size_t>(r) * aw * 4 + warp * (kMmaStages * kMmaStageBytes);
  // The activation rows, 4 bytes at a time (block fields are 4-byte aligned).
  for (int k = 0; k < r; ++k) {
    const uint32_t* xk = reinterpret_cast<const uint32_t*>(x + k * xs);
    for (int i = threadIdx.x; i < nb * 9; i += blockDim.x) cp_async4(act + k * aw + i, xk + i);
  }
  cp_async_commit();
  const int64_t n_tiles = (n_out + kMmaTileRows - 1) / kMmaTileRows;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * kMmaWarps + warp;
  const int64_t tile_step = static_cast<int64_t>(gridDim.x) * kMmaWarps;
  const int n_chunks = (nb + kMmaChunk - 1) / kMmaChunk;
  const int64_t my_tiles = tile0 < n_tiles ? (n_tiles - tile0 + tile_step - 1) / tile_step : 0;
  // Job J = chunk J % n_chunks of tile tile0 + (J / n_chunks)·tile_step, in stage J % kMmaStages;
  // two cursors (the next job to copy, the job to decode) step through them without divisions.
  const int64_t n_jobs = my_tiles * n_chunks;
  int64_t i_tile = tile0;
  int i_c = 0, i_slot = 0;
  auto issue_next = [&]() {
    const int cnt = nb - i_c * kMmaChunk < kMmaChunk ? nb - i_c * kMmaChunk : kMmaChunk;
    mma_issue(stages + i_slot * kMmaStageBytes, w, row_bytes, i_tile * kMmaTileRows, n_out, i_c, cnt, vec16, lane);
    if (++i_c == n_chunks) {
      i_c = 0;
      i_tile += tile_step;
    }
    i_slot = i_slot + 1 == kMmaStages ? 0 : i_slot + 1;
  };
#pragma unroll
  for (int s = 0; s < kMmaStages - 1; ++s) {
    if (s < n_jobs) issue_next();
    cp_async_commit();
  }
  cp_async_wait_group<kMmaStages - 1>();  // the activation group (the oldest) has landed
  __syncthreads();                        // ... for every warp's copies
  const int g = lane >> 2, t = lane & 3;
  // Activation rows >= r are never stored; read row 0 for them (it is in bounds).
  const uint32_t* act_g = act + (g < r ? g : 0) * aw;
  const uint32_t* act_2t = act + (2 * t < r ? 2 * t : 0) * aw;
  const uint32_t* act_2t1 = act + (2 * t + 1 < r ? 2 * t + 1 : 0) * aw;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int64_t tile = tile0;
  int c = 0, slot = 0;
  for (int64_t J = 0; J < n_jobs; ++J) {
    if (J + kMmaStages - 1 < n_jobs) issue_next();  // job J + 3, into the stage freed by job J - 1
    cp_async_commit();
    cp_async_wait_group<kMmaStages - 1>();  // job J's group is complete
    __syncwarp();
    const int cnt = nb - c * kMmaChunk < kMmaChunk ? nb - c * kMmaChunk : kMmaChunk;
    const uint32_t* st = reinterpret_cast<const uint32_t*>(stages + slot * kMmaStageBytes);
    const uint32_t* sg = st + g * (kMmaRowBytes / 4);
    const uint32_t* sg8 = st + (g + 8) * (kMmaRowBytes / 4);
    const int b0 = c * kMmaChunk;
    if (c == 0) acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
    if (cnt == kMmaChunk) {
#pragma unroll
      for (int j = 0; j < kMmaChunk; ++j) mma_block(sg, sg8, act_g, act_2t, act_2t1, j, b0 + j, t, acc);
    } else {
      for (int j = 0; j < cnt; ++j) mma_block(sg, sg8, act_g, act_2t, act_2t1, j, b0 + j, t, acc);
    }
    if (c == n_chunks - 1) {
      const int64_t o = tile * kMmaTileRows + g;
      if (o < n_out) {
        if (2 * t < r) y[(2 * t) * ys + o] = acc[0];
        if (2 * t + 1 < r) y[(2 * t + 1) * ys + o] = acc[1];
      }
      if (o + 8 < n_out) {
        if (2 * t < r) y[(2 * t) * ys + o + 8] = acc[2];
        if (2 * t + 1 < r) y[(2 * t + 1) * ys + o + 8] = acc[3];
      }
    }
    if (++c == n_chunks) {
      c = 0;
      tile += tile_step;
    }
    slot = slot + 1 == kMmaStages ? 0 : slot + 1;
    __syncwarp();  // every lane is done with this stage before it is refilled
  }
}

// Grid size and shared-memory opt-in of q8_0_mma_kernel on the current device (once per
// device); false when `smem` does not fit.
bool mma_launch_shape(size_t smem, int64_t n_tiles, unsigned* grid) {
  struct Dev {
    bool done = false;
    int sms = 0, smem_sm = 0, smem_optin = 0;
  };
  static Dev devs[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  Dev& d = devs[dev];
  if (!d.done) {
    if (cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&d.smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaFuncSetAttribute(q8_0_mma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, d.smem_optin) !=
            cudaSuccess) {
      kernel_off("tensor-core Q8_0 kernel (2-8 rows)", "the warp kernels", dev);
      d.smem_optin = 0;  // off for the process: every later call declines at the check below
      d.done = true;
      return false;
    }
    d.done = true;
  }
  if (smem > static_cast<size_t>(d.smem_optin)) return false;
  int per_sm = static_cast<int>(d.smem_sm / (smem + 1024));  // 1 KiB: the per-CTA reservation
  per_sm = per_sm < 1 ? 1 : per_sm > 8 ? 8 : per_sm;
  const int64_t want = (n_tiles + kMmaWarps - 1) / kMmaWarps;
  const int64_t cap = static_cast<int64_t>(per_sm) * d.sms;
  *grid = static_cast<unsigned>(want < cap ? want : cap);
  return true;
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
  // The copy from pageable memory may still be in flight when it returns, and the backend's
  // stream does not wait for the legacy default stream: wait here, once per device.
  if (cudaDeviceSynchronize() != cudaSuccess)
    return resource_error("%s: the IQ2_XXS table upload failed: %s", "cuda: matvec_iq2_xxs", cudaGetErrorString(cudaGetLastError()));
  done[dev] = true;
  return Status();
}

// force_mma (Q8_0 only): the tensor-core kernel whatever r and n_out, an error when it cannot run.
template <class F>
Status launch(const char* op, const Weights& w, const typename F::Act* x, int64_t xs, int r, float* y,
              int64_t ys, Stream stream, bool force_mma = false) {
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
  bool split = false;
  if constexpr (std::is_same_v<F, Q8_0Fmt>) split = w.n_out < kSplitBelowRows;
  const int64_t rows_per_block = split ? kWarps / kSplit : kWarps;
  const unsigned grid = static_cast<unsigned>((w.n_out + rows_per_block - 1) / rows_per_block);
  const uint8_t* wp = static_cast<const uint8_t*>(w.data);
  for (int k0 = 0; k0 < r; k0 += kMaxRows) {
    const int rr = r - k0 < kMaxRows ? r - k0 : kMaxRows;
    const typename F::Act* xk = x + k0 * xs;
    float* yk = y + k0 * ys;
    const int inb = static_cast<int>(nb);
    if constexpr (std::is_same_v<F, Q8_0Fmt>) {
      unsigned mgrid = 0;
      const size_t smem = mma_smem_bytes(inb, rr);
      const bool want = force_mma || (rr >= kMmaMinRows && w.n_out >= kMmaMinOut);
      if (want && mma_launch_shape(smem, (w.n_out + kMmaTileRows - 1) / kMmaTileRows, &mgrid)) {
        const bool vec16 = base % 16 == 0 && w.row_bytes % 16 == 0;
        detail::launch_pdl(pdl_all(), q8_0_mma_kernel, mgrid, 32 * kMmaWarps, smem, stream, wp, w.row_bytes, inb,
                           w.n_out, xk, xs, rr, yk, ys, vec16);
        Status s = launch_status(op, w.n_in, w.n_out, rr);
        if (!s.ok()) return s;
        continue;
      }
      if (force_mma)
        return unsupported("cuda: %s: the tensor-core kernel cannot run %d rows of %lld inputs (%zu bytes of "
                           "shared memory)", op, rr, static_cast<long long>(w.n_in), smem);
    }
    if constexpr (std::is_same_v<F, Q8_0Fmt>) {
      if (rr == 1 && r1_try_launch(w, inb, xk, yk, stream)) {
        Status s = launch_status(op, w.n_in, w.n_out, rr);
        if (!s.ok()) return s;
        continue;
      }
    }
    switch (rr) {
#define DS4_CASE(R)                                                                                              \
  case R:                                                                                                        \
    if constexpr (std::is_same_v<F, Q8_0Fmt>) {                                                                  \
      if (split) {                                                                                               \
        detail::launch_pdl(pdl_all(), q8_0_split_kernel<R>, grid, 32 * kWarps, 0, stream, wp, w.row_bytes, inb,  \
                           w.n_out, xk, xs, yk, ys);                                                             \
        break;                                                                                                   \
      }                                                                                                          \
    }                                                                                                            \
    detail::launch_pdl(pdl_all(), quant_matvec_kernel<F, R>, grid, 32 * kWarps, 0, stream, wp, w.row_bytes, inb, \
                       w.n_out, xk, xs, yk, ys);                                                                 \
    break;
      DS4_CASE(1) DS4_CASE(2) DS4_CASE(3) DS4_CASE(4) DS4_CASE(5) DS4_CASE(6) DS4_CASE(7) DS4_CASE(8)
#undef DS4_CASE
    }
    Status s = launch_status(op, w.n_in, w.n_out, rr);
    if (!s.ok()) return s;
  }
  return Status();
}


// ---- Fused routed experts (expert_gate_up / expert_down_sum) ---------------------------------
// One warp per (pair or row, output row); kGateUpWarps (gate/up) or down_warps<F>() (down)
// output rows per block. A warp copies the weight bytes of all the rows it dots (gate and up,
// or the down rows of up to kDownSlots slots) into its shared-memory stage with 16-byte
// cp.async (every load in flight at once: a single expert row is too short to cover DRAM
// latency otherwise), then decodes the staged blocks 4 at a time (8 lanes per block; the
// CTA's activation rows staged once in shared memory too: stage_act) and adds each row's
// terms into that row's one accumulator in block order, like quant_matvec_rows.

// Output rows (warps) per expert_gate_up block. 8, not 4: every block stages its pair's whole
// x row (Flash: 16 Q8_K blocks, 4,864 B, by 4-byte cp.async), which at 4 rows per block was
// over half the L1 traffic of the weights (4 x 2,112 B of IQ2_XXS); occupancy is unchanged
// (IQ2_XXS: 6 blocks x 8 warps by registers and shared memory, was 12 x 4).
constexpr int kGateUpWarps = 8;
constexpr int kDownSlots = 6;  // down rows a warp dots at once (Flash: all n_used = 6 slots)
// Blocks per row in a gate/up stage: a whole Flash row (n_embd 4096 = 16 blocks), a multiple
// of every format's kAlignBlocks. Why not more: shared memory, not DRAM, bounds these kernels'
// occupancy, and a stage larger than the row only costs resident blocks (wider rows take
// several stages, same bits: the terms are still added in block order).
constexpr int kGateUpStageBlocks = 16;

// Per-warp stage bytes when a warp dots M rows of format F: gate + up (M = 2), or the down
// rows of kDownSlots slots (F::kDownStageBytes). Multiples of 16.
template <class F, int M>
__host__ __device__ constexpr int stage_bytes() {
  static_assert(M == 2 || M == kDownSlots, "gate/up pairs or the down slots");
  return M == 2 ? 2 * kGateUpStageBlocks * F::kBlockBytes : F::kDownStageBytes;
}

// Blocks per row in one stage when a warp dots M rows of format F: the stage's share, rounded
// down to whole kAlignBlocks so that every chunk starts 16-byte aligned in the row.
template <class F, int M>
__host__ __device__ constexpr int stage_blocks() {
  const int b = stage_bytes<F, M>() / (M * F::kBlockBytes);
  return b / F::kAlignBlocks * F::kAlignBlocks;
}
// Warps (output rows) per expert_down_sum block: 8 where the 8 stages fit the 48 KB of static
// shared memory, else 4. Why: a down block stages the midq rows of all its slots (6 x 2.4 KB
// for Flash) for its output rows alone, as many activation bytes as weight bytes at 4 rows
// per block; 8 rows halve that share of the L1 traffic.
template <class F>
__host__ __device__ constexpr int down_warps() {
  return 8 * stage_bytes<F, kDownSlots>() <= 40 * 1024 ? 8 : 4;
}
// Terms of one stage (the per-warp term buffer's length).
template <class F, int M>
__host__ __device__ constexpr int stage_terms() {
  return M * stage_blocks<F, M>();
}

// Copies the weight bytes of the stage that starts at block c0 of the m_cnt rows into `stage`:
// 16-byte cp.async when vec16 (every row and every chunk of it is 16-byte aligned with a
// multiple of 16 bytes; complete after cp_async_wait_all), else 2-byte loads (shapes no model
// uses, kept correct for the tests' small widths). All 32 lanes call it.
template <class F, int M>
__device__ __forceinline__ void expert_issue(const uint8_t* const* rows, int m_cnt, int nb, int c0, bool vec16,
                                             uint8_t* stage) {
  constexpr int kStage = stage_blocks<F, M>();
  constexpr int kBB = F::kBlockBytes;
  const int lane = threadIdx.x & 31;
  const int cnt = nb - c0 < kStage ? nb - c0 : kStage;
  const int bytes = cnt * kBB;
  if (vec16) {
    const int n4 = bytes / 16;
    for (int idx = lane; idx < m_cnt * n4; idx += 32) {
      const int m = idx / n4, i = idx - m * n4;
      cp_async16_cg(stage + m * kStage * kBB + 16 * i, rows[m] + static_cast<size_t>(c0) * kBB + 16 * i);
    }
  } else {
    const int n2 = bytes / 2;
    for (int idx = lane; idx < m_cnt * n2; idx += 32) {
      const int m = idx / n2, i = idx - m * n2;
      reinterpret_cast<uint16_t*>(stage + m * kStage * kBB)[i] = load_u16(rows[m] + static_cast<size_t>(c0) * kBB + 2 * i);
    }
  }
}

// Dots of m_cnt <= M weight rows (row m at rows[m], nb blocks) with the staged activation rows
// (row m's block b at act_s + (m·a_stride + b)·kActBlockBytes); lane m < m_cnt returns row
// m's sequential block sum (before F::finish). first_issued: the caller already issued (and
// waited for) the first stage's copies with expert_issue. All 32 lanes call it.
template <class F, int M>
__device__ __forceinline__ float expert_dots(const uint8_t* const* rows, const uint8_t* act_s, int a_stride,
                                             int m_cnt, int nb, bool vec16, uint8_t* stage, float* ts,
                                             const uint64_t* grid, bool first_issued) {
  constexpr int kStage = stage_blocks<F, M>();
  constexpr int kBB = F::kBlockBytes;
  static_assert(kStage >= 1 && stage_bytes<F, M>() % 16 == 0, "stage too small or misaligned");
  const int lane = threadIdx.x & 31;
  const int sub = lane % 8, slot = lane / 8;
  float acc = 0.0f;
  for (int c0 = 0; c0 < nb; c0 += kStage) {
    const int cnt = nb - c0 < kStage ? nb - c0 : kStage;
    if (c0 != 0 || !first_issued) {
      expert_issue<F, M>(rows, m_cnt, nb, c0, vec16, stage);
      cp_async_wait_all();
    }
    __syncwarp();
    const int total = m_cnt * cnt;
    for (int j0 = 0; j0 < total; j0 += 4) {  // warp-uniform bound: every lane shuffles
      const int j = j0 + slot;
      const bool valid = j < total;
      const int m = valid ? j / cnt : 0;
      const int b = valid ? j - m * cnt : 0;
      const float t = F::staged_term(stage + (m * kStage + b) * kBB,
                                     act_s + (m * a_stride + c0 + b) * kActBlockBytes, valid, sub, grid);
      if (valid && sub == 0) ts[j] = t;
    }
    __syncwarp();
    if (lane < m_cnt) {
      for (int b = 0; b < cnt; ++b) acc = acc + ts[lane * cnt + b];
    }
    __syncwarp();
  }
  return acc;
}

struct ExpertArgs {
  const uint8_t* data;
  size_t row_bytes, expert_bytes;
};

// The IQ2_XXS tables into shared memory (all threads; a no-op for the other formats).
template <class F>
__device__ __forceinline__ void stage_tables(uint64_t* grid_s) {
  if constexpr (F::kTables) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) grid_s[i] = g_iq2_grid[i];
    __syncthreads();
  }
}

// Copies n_blocks Q8_K blocks (global, 4-byte aligned: 73 words each) into shared memory in
// the kActBlockBytes layout, 4 bytes per cp.async; all threads of the CTA take part. Why: read
// from global memory, the 8 lanes of a block load its 32 quants with 8 scalar loads that each
// touch 8 cache lines per warp (~64 L1 wavefronts per 4 blocks of weights, more than the
// weights' own), which bounded the fused kernels at ~600-800 GB/s.
__device__ __forceinline__ void stage_act(uint8_t* dst, const BlockQ8K* __restrict__ src, int n_blocks) {
  const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
  for (int i = threadIdx.x; i < n_blocks * 73; i += blockDim.x) {
    const int b = i / 73, wd = i - b * 73;  // word 0: d, 1..64: quants, 65..72: bsums
    int to;
    if (wd == 0) {
      to = 72;
    } else if (wd <= 64) {
      const int q = wd - 1;  // quant word q: group q / 8, half (q / 4) % 2, word q % 4
      to = ((q >> 2) & 1) * 32 + (q >> 3) * 4 + (q & 3);
    } else {
      to = 64 + (wd - 65);
    }
    cp_async4(dst + b * kActBlockBytes + 4 * to, s + i);
  }
}

// Dynamic shared memory the fused kernels may take for staged activations (opted in once
// per kernel and device).
constexpr int kExpertActMax = 96 * 1024;

// grid (pairs, n_ff / kGateUpWarps): pair q = blockIdx.x (row q / n_used), output row o.
// mid[q][o] = moe_mid_value(gate dot, up dot, clamp, wt[q]); an expert id outside
// [0, n_expert) gives NaN.
template <class F>
__global__ void __launch_bounds__(32 * kGateUpWarps) expert_gate_up_kernel(
    ExpertArgs gate, ExpertArgs up, int64_t n_expert, int nb, int64_t n_ff, const int32_t* __restrict__ sel,
    const float* __restrict__ wt, int n_used, const BlockQ8K* __restrict__ x, float clamp, bool vec16,
    float* __restrict__ mid) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  __shared__ __align__(16) uint8_t stage[kGateUpWarps][stage_bytes<F, 2>()];
  __shared__ float ts[kGateUpWarps][stage_terms<F, 2>()];
  __shared__ const uint8_t* rows[kGateUpWarps][2];
  __shared__ uint64_t grid_s[F::kTables ? 256 : 1];
  extern __shared__ __align__(16) uint8_t act_s[];  // x row q / n_used: nb staged blocks
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t q = blockIdx.x;
  const int64_t o = static_cast<int64_t>(blockIdx.y) * kGateUpWarps + warp;
  const bool live = o < n_ff;  // warp-uniform
  const int32_t e = live ? sel[q] : -1;
  const bool ok = live && e >= 0 && e < n_expert;
  if (ok && lane == 0) {
    rows[warp][0] = gate.data + static_cast<size_t>(e) * gate.expert_bytes + static_cast<size_t>(o) * gate.row_bytes;
    rows[warp][1] = up.data + static_cast<size_t>(e) * up.expert_bytes + static_cast<size_t>(o) * up.row_bytes;
  }
  __syncwarp();
  // The first stage's weights are in flight while the activations and tables are staged.
  if (ok) expert_issue<F, 2>(rows[warp], 2, nb, 0, vec16, stage[warp]);
  stage_act(act_s, x + (q / n_used) * nb, nb);
  stage_tables<F>(grid_s);
  cp_async_wait_all();
  __syncthreads();
  if (!live) return;  // no barrier follows
  float* mq = mid + q * n_ff;
  if (!ok) {
    if (lane == 0) mq[o] = __int_as_float(0x7fffffff);
    return;
  }
  const float acc = expert_dots<F, 2>(rows[warp], act_s, 0, 2, nb, vec16, stage[warp], ts[warp], grid_s, true);
  const float v = F::finish(acc);           // lane 0: gate, lane 1: up
  const float u = __shfl_sync(kFullMask, v, 1);
  if (lane == 0) mq[o] = backend::rowmath::moe_mid_value(v, u, clamp, __ldg(wt + q));
}

// grid (n_rows, n_embd / down_warps<F>()): out[i][o] = 0 + down(slot 0) + down(slot 1) + ... in
// slot order (+ add[i][o] after, when given), down(s) = dot(expert sel[i][s] row o, midq pair
// i·n_used + s); NaN for an id outside [0, n_expert). Slots go in groups of `group` <=
// kDownSlots (their midq rows staged in shared memory together).
template <class F>
__global__ void __launch_bounds__(32 * down_warps<F>()) expert_down_sum_kernel(
    ExpertArgs down, int64_t n_expert, int nb, int64_t n_embd, const int32_t* __restrict__ sel, int n_used,
    int group, const BlockQ8K* __restrict__ midq, bool vec16, const float* __restrict__ add,
    float* __restrict__ out) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  constexpr int kW = down_warps<F>();
  __shared__ __align__(16) uint8_t stage[kW][stage_bytes<F, kDownSlots>()];
  __shared__ float ts[kW][stage_terms<F, kDownSlots>()];
  __shared__ const uint8_t* rows[kW][kDownSlots];
  __shared__ uint64_t grid_s[F::kTables ? 256 : 1];
  extern __shared__ __align__(16) uint8_t act_s[];  // midq rows of the group: group x nb staged blocks
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t i = blockIdx.x;
  const int64_t o = static_cast<int64_t>(blockIdx.y) * kW + warp;
  const bool live = o < n_embd;  // warp-uniform; every warp takes part in the barriers
  float sum = 0.0f;
  for (int g0 = 0; g0 < n_used; g0 += group) {
    const int m_cnt = n_used - g0 < group ? n_used - g0 : group;
    __syncthreads();  // the previous group's activations are no longer read
    bool bad = false;
    if (live && lane < m_cnt) {
      const int32_t e = sel[i * n_used + g0 + lane];
      bad = e < 0 || e >= n_expert;
      rows[warp][lane] = down.data + static_cast<size_t>(bad ? 0 : e) * down.expert_bytes +
                         static_cast<size_t>(o) * down.row_bytes;
    }
    __syncwarp();
    // The first stage's weights are in flight while the activations (and tables) are staged.
    if (live) expert_issue<F, kDownSlots>(rows[warp], m_cnt, nb, 0, vec16, stage[warp]);
    stage_act(act_s, midq + (i * n_used + g0) * nb, m_cnt * nb);
    if (g0 == 0) stage_tables<F>(grid_s);
    cp_async_wait_all();
    __syncthreads();
    if (live) {
      const float acc = expert_dots<F, kDownSlots>(rows[warp], act_s, nb, m_cnt, nb, vec16, stage[warp], ts[warp],
                                                   grid_s, true);
      const float d = bad ? __int_as_float(0x7fffffff) : F::finish(acc);
      for (int m = 0; m < m_cnt; ++m) sum = sum + __shfl_sync(kFullMask, d, m);
    }
  }
  if (live && lane == 0) out[i * n_embd + o] = add != nullptr ? sum + add[i * n_embd + o] : sum;
}

// Shape checks shared by both launchers; *vec16 = the 16-byte staging applies.
template <class F>
Status check_experts(const char* op, const ExpertWeights& w, int64_t n_in, int64_t n_out, bool* vec16) {
  const int64_t nb = w.n_in / F::kBlockElems;
  const uintptr_t base = reinterpret_cast<uintptr_t>(w.data);
  if (w.n_in != n_in || w.n_out != n_out || n_in <= 0 || n_in % F::kBlockElems != 0 || n_out <= 0 ||
      w.n_expert <= 0 || nb > (1 << 30) || w.row_bytes < static_cast<size_t>(nb) * F::kBlockBytes ||
      w.row_bytes % 2 != 0 || w.expert_bytes < w.row_bytes * static_cast<size_t>(n_out) ||
      w.expert_bytes % 2 != 0 || base % 4 != 0)
    return invalid_argument("cuda: %s: bad shape (weights [%lld -> %lld] for [%lld -> %lld], n_in a multiple of "
                            "%d, %lld experts of %zu bytes, row_bytes %zu >= %lld, both even, weights 4-byte "
                            "aligned)", op, static_cast<long long>(w.n_in), static_cast<long long>(w.n_out),
                            static_cast<long long>(n_in), static_cast<long long>(n_out), F::kBlockElems,
                            static_cast<long long>(w.n_expert), w.expert_bytes, w.row_bytes,
                            static_cast<long long>(nb * F::kBlockBytes));
  *vec16 = base % 16 == 0 && w.row_bytes % 16 == 0 && w.expert_bytes % 16 == 0 &&
           (static_cast<size_t>(nb) * F::kBlockBytes) % 16 == 0;
  if constexpr (F::kTables) return upload_iq2_tables();
  return Status();
}

// Lets expert_down_sum_kernel<F> (kDown) or expert_gate_up_kernel<F> take kExpertActMax bytes
// of dynamic shared memory (once per kernel and device; a failure is reported, not cached).
template <class F, bool kDown>
Status expert_smem_optin(const char* op) {
  static bool done[64] = {};  // one table per kernel
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
    return resource_error("cuda: %s: no current device", op);
  if (done[dev]) return Status();
  cudaError_t e = cudaSuccess;
  if constexpr (kDown) {
    e = cudaFuncSetAttribute(expert_down_sum_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize, kExpertActMax);
  } else {
    e = cudaFuncSetAttribute(expert_gate_up_kernel<F>, cudaFuncAttributeMaxDynamicSharedMemorySize, kExpertActMax);
  }
  if (e != cudaSuccess)
    return resource_error("cuda: %s: cannot opt in to %d bytes of shared memory: %s", op, kExpertActMax,
                          cudaGetErrorString(cudaGetLastError()));
  done[dev] = true;
  return Status();
}

template <class F>
Status launch_gate_up(const ExpertWeights& gate, const ExpertWeights& up, const int32_t* sel, const float* wt,
                      int n_rows, int n_used, const BlockQ8K* x, float clamp, float* mid, Stream stream) {
  bool v_gate = false, v_up = false;
  if (Status s = check_experts<F>("expert_gate_up", gate, gate.n_in, gate.n_out, &v_gate); !s.ok()) return s;
  if (Status s = check_experts<F>("expert_gate_up", up, gate.n_in, gate.n_out, &v_up); !s.ok()) return s;
  if (up.n_expert != gate.n_expert || n_rows < 0 || n_used < 1 ||
      static_cast<int64_t>(n_rows) * n_used > INT32_MAX || (gate.n_out + kGateUpWarps - 1) / kGateUpWarps > 65535)
    return invalid_argument("cuda: expert_gate_up: bad shape (%lld / %lld experts, %d rows x %d used, n_ff %lld)",
                            static_cast<long long>(gate.n_expert), static_cast<long long>(up.n_expert), n_rows,
                            n_used, static_cast<long long>(gate.n_out));
  const int nb = static_cast<int>(gate.n_in / F::kBlockElems);
  const size_t act_bytes = static_cast<size_t>(nb) * kActBlockBytes;
  if (act_bytes > kExpertActMax)
    return invalid_argument("cuda: expert_gate_up: n_embd %lld too wide (its Q8_K row takes %zu bytes of shared "
                            "memory, at most %d)", static_cast<long long>(gate.n_in), act_bytes, kExpertActMax);
  if (n_rows == 0) return Status();
  if (Status s = expert_smem_optin<F, false>("expert_gate_up"); !s.ok()) return s;
  const dim3 grid(static_cast<unsigned>(n_rows * n_used),
                  static_cast<unsigned>((gate.n_out + kGateUpWarps - 1) / kGateUpWarps));
  detail::launch_pdl(pdl_all(), expert_gate_up_kernel<F>, grid, 32 * kGateUpWarps, act_bytes, stream,
                     ExpertArgs{static_cast<const uint8_t*>(gate.data), gate.row_bytes, gate.expert_bytes},
                     ExpertArgs{static_cast<const uint8_t*>(up.data), up.row_bytes, up.expert_bytes}, gate.n_expert,
                     static_cast<int>(gate.n_in / F::kBlockElems), gate.n_out, sel, wt, n_used, x, clamp,
                     v_gate && v_up, mid);
  return launch_status("expert_gate_up", gate.n_in, gate.n_out, n_rows * n_used);
}

template <class F>
Status launch_down_sum(const ExpertWeights& down, const int32_t* sel, int n_rows, int n_used,
                       const BlockQ8K* midq, const float* add, float* out, Stream stream) {
  bool vec16 = false;
  if (Status s = check_experts<F>("expert_down_sum", down, down.n_in, down.n_out, &vec16); !s.ok()) return s;
  constexpr int kW = down_warps<F>();
  if (n_rows < 0 || n_rows > 0x7fffffff || n_used < 1 || static_cast<int64_t>(n_rows) * n_used > INT32_MAX ||
      (down.n_out + kW - 1) / kW > 65535)
    return invalid_argument("cuda: expert_down_sum: bad shape (%d rows x %d used, n_embd %lld)", n_rows, n_used,
                            static_cast<long long>(down.n_out));
  const int nb = static_cast<int>(down.n_in / F::kBlockElems);
  const size_t row_act = static_cast<size_t>(nb) * kActBlockBytes;  // one slot's staged midq row
  int group = static_cast<int>(kExpertActMax / row_act);
  group = group > kDownSlots ? kDownSlots : group > n_used ? n_used : group;
  if (group < 1)
    return invalid_argument("cuda: expert_down_sum: n_ff %lld too wide (its Q8_K row takes %zu bytes of shared "
                            "memory, at most %d)", static_cast<long long>(down.n_in), row_act, kExpertActMax);
  if (n_rows == 0) return Status();
  if (Status s = expert_smem_optin<F, true>("expert_down_sum"); !s.ok()) return s;
  const dim3 grid(static_cast<unsigned>(n_rows), static_cast<unsigned>((down.n_out + kW - 1) / kW));
  detail::launch_pdl(pdl_all(), expert_down_sum_kernel<F>, grid, 32 * kW, static_cast<size_t>(group) * row_act, stream,
                     ExpertArgs{static_cast<const uint8_t*>(down.data), down.row_bytes, down.expert_bytes},
                     down.n_expert, nb, down.n_out, sel, n_used, group, midq, vec16, add, out);
  return launch_status("expert_down_sum", down.n_in, down.n_out, n_rows);
}

}  // namespace

Status matvec_q8_0(const Weights& w, const BlockQ8_0Act* x, int64_t x_stride, int r, float* y,
                   int64_t y_stride, Stream stream) {
  if (r >= kQ8_0TcMinRows) {  // many rows: the tensor-core GEMM (matmul_q8_0_tc.cu) where it takes them
    const int64_t nb = w.n_in / Q8_0Fmt::kBlockElems;
    Q8_0GroupArgs args{};
    args.g[0] = Q8_0Group{w.data, x, y};
    bool done = false;
    Status s = tc_try_launch(args, 1, w.row_bytes, w.n_in, w.n_out, x_stride == 0 ? nb : x_stride, r,
                             y_stride == 0 ? w.n_out : y_stride, stream, false, &done);
    if (!s.ok() || done) return s;
  }
  return launch<Q8_0Fmt>("matvec_q8_0", w, x, x_stride, r, y, y_stride, stream);
}
Status matvec_q8_0_grouped(const Q8_0Group* groups, int n_groups, size_t row_bytes, int64_t n_in, int64_t n_out,
                           int64_t x_stride, int r, int64_t y_stride, Stream stream) {
  const char* op = "matvec_q8_0_grouped";
  const int64_t nb = n_in / Q8_0Fmt::kBlockElems;
  bool aligned = true;
  for (int g = 0; g < n_groups && g < kMaxMatvecGroups; ++g)
    aligned = aligned && reinterpret_cast<uintptr_t>(groups[g].w) % 4 == 0;
  if (n_groups < 0 || n_groups > kMaxMatvecGroups || n_in < 0 || n_in % Q8_0Fmt::kBlockElems != 0 || n_out < 0 ||
      r < 0 || row_bytes < static_cast<size_t>(nb) * Q8_0Fmt::kBlockBytes || row_bytes % 2 != 0 || !aligned ||
      nb > (1 << 30))
    return invalid_argument("cuda: %s: bad shape (%d groups of at most %d, n_in %lld must be a multiple of %d, "
                            "row_bytes %zu >= %lld and even, weights 4-byte aligned, rows %d)", op, n_groups,
                            kMaxMatvecGroups, static_cast<long long>(n_in), Q8_0Fmt::kBlockElems, row_bytes,
                            static_cast<long long>(nb * Q8_0Fmt::kBlockBytes), r);
  if (x_stride == 0) x_stride = nb;
  if (y_stride == 0) y_stride = n_out;
  if (n_groups == 0 || n_out == 0 || r == 0) return Status();
  if (r >= kQ8_0TcMinRows) {  // many rows: the tensor-core GEMM (matmul_q8_0_tc.cu) where it takes them
    Q8_0GroupArgs args{};
    for (int g = 0; g < n_groups; ++g) args.g[g] = groups[g];
    bool done = false;
    Status s = tc_try_launch(args, n_groups, row_bytes, n_in, n_out, x_stride, r, y_stride, stream, false, &done);
    if (!s.ok() || done) return s;
  }
  constexpr int64_t kRowsPerBlock = kWarps / kSplit;
  const dim3 grid(static_cast<unsigned>((n_out + kRowsPerBlock - 1) / kRowsPerBlock), static_cast<unsigned>(n_groups));
  const int inb = static_cast<int>(nb);
  for (int k0 = 0; k0 < r; k0 += kMaxRows) {
    const int rr = r - k0 < kMaxRows ? r - k0 : kMaxRows;
    Q8_0GroupArgs args{};
    bool aligned16 = true;
    for (int g = 0; g < n_groups; ++g) {
      args.g[g] = Q8_0Group{groups[g].w, groups[g].x + k0 * x_stride, groups[g].y + k0 * y_stride};
      aligned16 = aligned16 && reinterpret_cast<uintptr_t>(groups[g].w) % 16 == 0;
    }
    if (rr == 1 && aligned16 && r1_try_launch_grouped(args, n_groups, row_bytes, n_in, n_out, stream)) {
      Status s = launch_status(op, n_in, n_out, rr);
      if (!s.ok()) return s;
      continue;
    }
    switch (rr) {
#define DS4_CASE(R)                                                                                                 \
  case R:                                                                                                           \
    detail::launch_pdl(pdl_all(), q8_0_split_grouped_kernel<R>, grid, 32 * kWarps, 0, stream, args, row_bytes, inb, \
                       n_out, x_stride, y_stride);                                                                  \
    break;
      DS4_CASE(1) DS4_CASE(2) DS4_CASE(3) DS4_CASE(4) DS4_CASE(5) DS4_CASE(6) DS4_CASE(7) DS4_CASE(8)
#undef DS4_CASE
    }
    Status s = launch_status(op, n_in, n_out, rr);
    if (!s.ok()) return s;
  }
  return Status();
}
Status matvec_q8_0_mma(const Weights& w, const BlockQ8_0Act* x, int64_t x_stride, int r, float* y,
                       int64_t y_stride, Stream stream) {
  return launch<Q8_0Fmt>("matvec_q8_0_mma", w, x, x_stride, r, y, y_stride, stream, true);
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


Status expert_gate_up(ExpertFormat f, const ExpertWeights& gate, const ExpertWeights& up, const int32_t* sel,
                      const float* wt, int n_rows, int n_used, const BlockQ8K* x, float clamp, float* mid,
                      Stream stream) {
  if (n_rows == 1 && moe_r1_kernel() == MoeR1Kernel::kNew) {  // decode: moe_r1.cu where it takes the shape
    bool done = false;
    Status s = expert_gate_up_r1(f, gate, up, sel, wt, n_used, x, clamp, mid, stream, &done);
    if (!s.ok() || done) return s;
  }
  switch (f) {
    case ExpertFormat::kIQ2_XXS:
      return launch_gate_up<Iq2XxsFmt>(gate, up, sel, wt, n_rows, n_used, x, clamp, mid, stream);
    case ExpertFormat::kQ2_K:
      return launch_gate_up<Q2KFmt>(gate, up, sel, wt, n_rows, n_used, x, clamp, mid, stream);
    case ExpertFormat::kQ4_K:
      return launch_gate_up<Q4KFmt>(gate, up, sel, wt, n_rows, n_used, x, clamp, mid, stream);
  }
  return invalid_argument("cuda: expert_gate_up: unknown expert format %d", static_cast<int>(f));
}

Status expert_down_sum(ExpertFormat f, const ExpertWeights& down, const int32_t* sel, int n_rows, int n_used,
                       const BlockQ8K* midq, const float* add, float* out, Stream stream) {
  if (n_rows == 1 && moe_r1_kernel() == MoeR1Kernel::kNew) {  // decode: moe_r1.cu where it takes the shape
    bool done = false;
    Status s = expert_down_sum_r1(f, down, sel, n_used, midq, add, out, stream, &done);
    if (!s.ok() || done) return s;
  }
  switch (f) {
    case ExpertFormat::kIQ2_XXS:
      return launch_down_sum<Iq2XxsFmt>(down, sel, n_rows, n_used, midq, add, out, stream);
    case ExpertFormat::kQ2_K:
      return launch_down_sum<Q2KFmt>(down, sel, n_rows, n_used, midq, add, out, stream);
    case ExpertFormat::kQ4_K:
      return launch_down_sum<Q4KFmt>(down, sel, n_rows, n_used, midq, add, out, stream);
  }
  return invalid_argument("cuda: expert_down_sum: unknown expert format %d", static_cast<int>(f));
}

}  // namespace ds4::cuda
