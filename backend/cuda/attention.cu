// backend/cuda/attention.cu — the attention ops of backend/cuda/ops.h: attention_inputs,
// compressor_step, sink_attention (ds4-architecture.md §4.3-§4.5); indexer_select lives in
// indexer.cu, the helpers both use in attention_common.cuh.
//
// Role: device twins of the CPU oracle (backend/cpu: cpu_ops.cpp's attention_inputs_row,
// sink_attention_heads and rope_tail_rows, cpu_backend.cpp's compressor_step / pool_columns),
// bit for bit.
// How each CPU order is kept (invariants):
//  * Sink scores are quant/dot.h's canonical 64-lane order (attention_common.cuh's half_dot64:
//    a half-warp per dot, lane hl running partials hl + 16·c (c < 4) over elements i ≡ hl + 16·c
//    (mod 64) in order, tail included, then the halving tree 32, 16 in-thread and 8, 4, 2, 1
//    by shuffles).
//  * Sequential sums stay sequential: the softmax denominator (sink first, then every key in
//    key order) runs on every lane of the head's warp (the same chain); the weighted sum runs
//    one thread per output element over the keys in order from y = 0; the compressor's per-column max / den / acc run one thread
//    per column. RMS norm's double sum is quant::sumsq_f64's 64-lane order on one warp.
//  * Maxima and block amaxes are order-free (non-NaN values; a ±0 tie cannot change a bit of
//    what follows), so trees compute them.
//  * RoPE angles come from core/rope.h (rope_angles on the host, rope_pair per pair on the
//    device; the inverse uses -s); exp from core/detmath.h; FP8 / FP4 / f16 round trips from
//    kv_sim_hd.h. The folder builds with --fmad=false: every a*b+c below is two roundings.
//  * The ring row is written as the bits of quant::f32_to_f16 (kvsim::f32_to_f16), the
//    compressor's row as its FP8 store (kvsim::fp8_code / exponent bytes, the RoPE dims as f16:
//    quant::fp8_kv_row_store's bytes); sink keys are read through attn::load_key, exact for the
//    target's stores (attn::StoredKey) and f32 (the drafter), one kernel instance per key type.
//  * Multi-query ops take their host param arrays by value (kMaxBatch queries per launch of the
//    split sink kernels, kFusedBatch of the fused one: ~6 KB, CUDA 12.1's larger parameter space).
//  * Sink attention, split (SinkKernel::kSplit): two launches, the scores per (key tile, head
//    group, query) into p.scores, then per (output-dim slice, head group, query) the max, exps,
//    denominator and weighted sum; fused (kFused, prefill groups): one block per (head group,
//    query) does both passes. Each decodes the stored keys it reads into shared memory as f32
//    once per block (all threads), so the dot and chain loops read only shared memory. Every
//    block redoes a head's max / exps / denominator itself (identical values), and no chain
//    crosses blocks, so the grid shape and the batch change no bit.
//  * compressor_rows pools a chain's emitted rows in parallel (compressor_emit, the step's own
//    code) and then writes the state the steps would leave, so its bits are the steps'.
#include <atomic>
#include <cmath>
#include <cstdio>
#include <type_traits>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/kv_sim_hd.h"
#include "backend/cuda/lanes64.cuh"
#include "backend/cuda/ops.h"
#include "backend/cuda/pdl.cuh"
#include "core/detmath.h"
#include "core/rope.h"

namespace ds4::cuda {

namespace {

using backend::AttentionInputsParams;
using backend::CompressorStepParams;
using backend::SinkAttentionParams;
using detail::kFullMask;
using attn::block_scan_counts;
using attn::half_dot64;
using attn::kMaxBatch;
using attn::launch_result;

constexpr int kMaxPairs = 256;     // RoPE pairs (n_rot <= 512)
constexpr int kRowThreads = 256;   // attention_inputs: a block per (row, part)
constexpr int kCompThreads = 512;  // compressor_step: one block
constexpr int kMaxCompSteps = 16;  // compressor_steps: steps per launch (a verify group of 8 rows, 2 steps each)
constexpr int kAttnMaxD = 1024;    // sink attention: head_dim limit
constexpr int kScoreThreads = 256; // sink scores: one block per (key tile, head group, query)
constexpr int kScoreHeads = 16;    // heads per score block: 2 octets of heads x 4 key pairs = 8 warps
constexpr int kScoreKeys = 8;      // slots per score block (each decoded once into shared memory)
constexpr int kCombSlice = 32;     // sink combine: output dims per block, a lane each
constexpr int kCombHeads = 8;      // heads per combine block, a warp each
constexpr int kCombThreads = 32 * kCombHeads;
constexpr int kCombChunk = kCombThreads;  // key slots per chunk of the combine pass, a thread each

// Floats per staged query row of the score kernel: D rounded up to a multiple of 8, plus 4, so
// rows four apart start 16 banks apart (the two halves of a warp read different banks).
__host__ __device__ constexpr int score_q_stride(int d) { return (d + 7) / 8 * 8 + 4; }
// Dynamic shared memory of a score block: the staged queries, then the decoded key tile.
constexpr size_t score_smem_bytes(int d) {
  return sizeof(float) * (static_cast<size_t>(kScoreHeads) * score_q_stride(d) + static_cast<size_t>(kScoreKeys) * d);
}

// ---- shared device steps ----------------------------------------------------------------------

// Rotates pair (x[2i], x[2i+1]) by (c, s): x0·c − x1·s, x0·s + x1·c (rope_tail_rows' step).
__device__ __forceinline__ void rotate_pair(float* x, float c, float s) {
  const float x0 = x[0];
  const float x1 = x[1];
  x[0] = x0 * c - x1 * s;
  x[1] = x0 * s + x1 * c;
}

// Warp-wide block amax (every lane gets it); m is the lane's partial from 0.
__device__ __forceinline__ float warp_amax(float m) {
  for (int s = 16; s >= 1; s >>= 1) {
    const float o = __shfl_xor_sync(kFullMask, m, s);
    m = o > m ? o : m;
  }
  return m;
}

// FP8 round trip (quant::fp8_e4m3_roundtrip) of the 64-value block at x, by one warp. With
// codes non-null, also the block's FP8 store: the 64 codes to codes[0, 64), the exponent byte
// to *exp_byte (kvsim::fp8_kv_row_store's bytes).
__device__ __forceinline__ void warp_fp8_block(float* x, int lane, uint8_t* codes = nullptr,
                                               uint8_t* exp_byte = nullptr) {
  const float v0 = x[lane];
  const float v1 = x[lane + 32];
  const float m = warp_amax(kvsim::amax_step(kvsim::amax_step(0.0f, v0), v1));
  const int k = kvsim::block_exp(m, kvsim::kE4M3Max, kvsim::kFp8MinAmax);
  const float sc = kvsim::pow2f(k);
  x[lane] = kvsim::fp8_elem(v0, sc);
  x[lane + 32] = kvsim::fp8_elem(v1, sc);
  if (codes != nullptr) {
    codes[lane] = static_cast<uint8_t>(kvsim::fp8_code(v0, sc));
    codes[lane + 32] = static_cast<uint8_t>(kvsim::fp8_code(v1, sc));
    if (lane == 0) *exp_byte = static_cast<uint8_t>(k + 127);
  }
}

// quant::indexer_qat_row of the 128 values at x, by one warp: lane holds x[lane + 32j]; the
// butterflies of strides 1..16 pair lanes (lower lane a + b, upper lane a − b), strides 32 and
// 64 pair registers; then the scale and the FP4 round trip of the four 32-blocks (block j =
// register j of every lane).
// With store non-null, also the FP4 store of the 128 values: codes to store[0, 64), the four
// exponent bytes to exps[0..3] (kvsim::indexer_qat_row_store's bytes).
__device__ __forceinline__ void warp_indexer_qat(float* x, int lane, uint8_t* store = nullptr,
                                                 uint8_t* exps = nullptr) {
  float v[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = x[lane + 32 * j];
#pragma unroll
  for (int s = 1; s < 32; s <<= 1) {
    const bool upper = (lane & s) != 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float o = __shfl_xor_sync(kFullMask, v[j], s);
      v[j] = upper ? o - v[j] : v[j] + o;
    }
  }
#pragma unroll
  for (int j = 0; j < 4; j += 2) {  // stride 32: registers (0,1), (2,3)
    const float a = v[j], b = v[j + 1];
    v[j] = a + b;
    v[j + 1] = a - b;
  }
#pragma unroll
  for (int j = 0; j < 2; ++j) {  // stride 64: registers (0,2), (1,3)
    const float a = v[j], b = v[j + 2];
    v[j] = a + b;
    v[j + 2] = a - b;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    v[j] = v[j] * kvsim::kHadamardScale;
    const float m = warp_amax(kvsim::amax_step(0.0f, v[j]));
    const int k = kvsim::block_exp(m, kvsim::kE2M1Max, kvsim::kFp4MinAmax);
    const float sc = kvsim::pow2f(k);
    x[lane + 32 * j] = kvsim::fp4_elem(v[j], sc);
    if (store != nullptr) {
      // The FP4 store (kv_sim_hd.h): element lane + 32j's code; even lanes pack their pair.
      const uint32_t code = kvsim::fp4_code(v[j], sc);
      const uint32_t next = __shfl_down_sync(kFullMask, code, 1);
      if ((lane & 1) == 0) store[16 * j + lane / 2] = static_cast<uint8_t>(code | (next << 4));
      if (lane == 0) exps[j] = static_cast<uint8_t>(k + 127);
    }
  }
}

// ---- attention_inputs ---------------------------------------------------------------------------

constexpr int kWarpNormRegs = 16;  // warp_rms_norm holds rows of up to 32 x this in registers

// rms_norm_row of the n values at x in place, by one warp (all 32 lanes call it): lane t runs
// the 64-lane sum-of-squares chains t and t + 32, the tree gives the statistic, then every
// value is scaled (and weighted): x·scale (·w), rms_norm's operations and order. Rows of up to
// 32·kWarpNormRegs values (the Flash heads: 512) are loaded into registers first, x and w all
// in flight at once, then chained and scaled from there; a loop that loads as it goes waits
// out a global round trip per element (its stores may alias the next loads).
__device__ void warp_rms_norm(float* x, const float* w, int n, float eps, int lane) {
  if (n <= 32 * kWarpNormRegs) {
    float v[kWarpNormRegs], wv[kWarpNormRegs];
#pragma unroll
    for (int k = 0; k < kWarpNormRegs; ++k) {
      const int i = lane + 32 * k;
      v[k] = i < n ? x[i] : 0.0f;
      wv[k] = w != nullptr && i < n ? w[i] : 1.0f;
    }
    // Element lane + 32k belongs to chain lane (k even) or lane + 32 (k odd), in increasing i.
    double lo = 0.0, hi = 0.0;
#pragma unroll
    for (int k = 0; k < kWarpNormRegs; ++k) {
      if (lane + 32 * k >= n) break;
      if (k % 2 == 0) {
        lo = detail::sumsq_step(lo, v[k]);
      } else {
        hi = detail::sumsq_step(hi, v[k]);
      }
    }
    const double ss = detail::tree64(lo, hi);
    const float scale = __shfl_sync(kFullMask, detail::rms_scale(ss, n, eps), 0);
#pragma unroll
    for (int k = 0; k < kWarpNormRegs; ++k) {
      const int i = lane + 32 * k;
      if (i < n) {
        const float t = __fmul_rn(v[k], scale);
        x[i] = w != nullptr ? __fmul_rn(t, wv[k]) : t;
      }
    }
    __syncwarp();
    return;
  }
  double lo = 0.0, hi = 0.0;
  for (int i = lane; i < n; i += 64) {
    lo = detail::sumsq_step(lo, x[i]);
    if (i + 32 < n) hi = detail::sumsq_step(hi, x[i + 32]);
  }
  const double ss = detail::tree64(lo, hi);
  const float scale = __shfl_sync(kFullMask, detail::rms_scale(ss, n, eps), 0);
  for (int i = lane; i < n; i += 32) {
    const float v = __fmul_rn(x[i], scale);
    x[i] = w != nullptr ? __fmul_rn(v, w[i]) : v;
  }
  __syncwarp();
}

// Heads per block of attention_inputs: a block rotates 8 query heads (256 pairs at n_rot 64: a
// pair per thread) or runs 8 indexer heads (a warp each), so a decode row's ~2,000 rotations and
// 64 Hadamard + FP4 heads spread over 17 blocks instead of queueing on one SM's 256 threads.
constexpr int kInputsHeads = 8;

// The blocks of one row: kv, then the query's head groups, then the indexer's.
struct InputsParts {
  int q, iq;
  __host__ __device__ int total() const { return 1 + q + iq; }
};
__host__ __device__ inline InputsParts inputs_parts(const AttentionInputsParams& p) {
  const int q = p.q != nullptr ? (p.n_head + kInputsHeads - 1) / kInputsHeads : 0;
  const int iq = p.iq != nullptr ? (p.n_idx_head + kInputsHeads - 1) / kInputsHeads : 0;
  return InputsParts{q, iq};
}

// grid (rows, parts): block (r, 0) owns kv (RoPE, FP8 of the non-RoPE dims by one warp per
// 64-block, the f16 ring copy), blocks (r, 1..q) a group of the query's heads (RoPE), the rest a
// group of the indexer's heads (RoPE, then one warp per head: Hadamard + FP4, and the heads'
// weights). Each block computes the row's angles into shared memory. Every element gets the
// same operations as in the one-block form, so the bits do not depend on the split.
__global__ void __launch_bounds__(kRowThreads) attention_inputs_kernel(const __grid_constant__ AttentionInputsParams p,
                                                                       const RopeAngles ang) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  __shared__ float cs[kMaxPairs], sn[kMaxPairs];
  const int r = blockIdx.x;
  const int part = blockIdx.y;
  const InputsParts parts = inputs_parts(p);
  const bool idx_part = part > parts.q;
  if (idx_part && r < p.idx_first) return;  // the whole block: no indexer query on this row
  const int64_t pos = p.pos0 + r;
  const int D = p.head_dim, npairs = p.n_rot / 2;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = kRowThreads / 32;
  for (int i = tid; i < npairs; i += kRowThreads) rope_pair(ang, pos, i, &cs[i], &sn[i]);
  __syncthreads();
  if (part == 0) {
    float* kv = p.kv + static_cast<int64_t>(r) * D;
    if (p.kv_norm != nullptr) {  // the norm first (fused_norms: the host cleared it otherwise)
      if (warp == 0) warp_rms_norm(kv, p.kv_norm, D, p.norm_eps, lane);
      __syncthreads();
    }
    for (int i = tid; i < npairs; i += kRowThreads) rotate_pair(kv + (D - p.n_rot) + 2 * i, cs[i], sn[i]);
    for (int b = warp; b < (D - p.n_rot) / kvsim::kFp8Block; b += nwarps)
      warp_fp8_block(kv + b * kvsim::kFp8Block, lane);
    if (p.raw != nullptr) {
      __syncthreads();
      uint16_t* dst = p.raw + (pos % p.raw_cap) * D;
      for (int j = tid; j < D; j += kRowThreads) dst[j] = kvsim::f32_to_f16(kv[j]);
    }
    return;
  }
  if (!idx_part) {
    const int h0 = (part - 1) * kInputsHeads;
    const int nh = min(kInputsHeads, p.n_head - h0);
    float* qh = p.q + r * p.q_stride + static_cast<int64_t>(h0) * D;
    if (p.q_head_norm) {  // a warp per head (kInputsHeads = the block's warps)
      for (int h = warp; h < nh; h += nwarps) warp_rms_norm(qh + static_cast<int64_t>(h) * D, nullptr, D, p.norm_eps, lane);
      __syncthreads();
    }
    float* q = qh + (D - p.n_rot);
    for (int u = tid; u < nh * npairs; u += kRowThreads) {
      const int h = u / npairs, i = u % npairs;
      rotate_pair(q + static_cast<int64_t>(h) * D + 2 * i, cs[i], sn[i]);
    }
    return;
  }
  const int h0 = (part - 1 - parts.q) * kInputsHeads;
  const int nh = min(kInputsHeads, p.n_idx_head - h0), dim = p.idx_dim;
  float* iq = p.iq + (static_cast<int64_t>(r) * p.n_idx_head + h0) * dim;
  for (int u = tid; u < nh * npairs; u += kRowThreads) {
    const int h = u / npairs, i = u % npairs;
    rotate_pair(iq + static_cast<int64_t>(h) * dim + (dim - p.n_rot) + 2 * i, cs[i], sn[i]);
  }
  __syncthreads();
  for (int h = warp; h < nh; h += nwarps) warp_indexer_qat(iq + static_cast<int64_t>(h) * dim, lane);
  float* iw = p.iw + static_cast<int64_t>(r) * p.n_idx_head + h0;
  for (int k = tid; k < nh; k += kRowThreads) iw[k] = iw[k] * p.iw_scale;
}

// ---- compressor_step ----------------------------------------------------------------------------

// The window a closing step pools (§4.4), as rows r of its scores and kv values at pooled
// column j: ratio 4, r in [0, 4) the previous lane (state rows 0-3, columns [0, D)) and r in
// [4, 8) the current one (state rows 4-7, columns [D, 2D)); otherwise r in [0, ratio), the
// state's rows. StateWindow reads the chain's state (compressor_step); RowsWindow reads each
// row where compressor_rows finds it (the state or the call's projection rows, whose score is
// sc + ape as the state would hold it).
struct StateWindow {
  const float* ss;  // state_score
  const float* sk;  // state_kv
  int W, off;       // row width; column offset of the current lane (D for ratio 4, else 0)
  __device__ __forceinline__ int64_t at(int r, int j) const {
    return static_cast<int64_t>(r) * W + (r >= 4 ? off : 0) + j;
  }
  __device__ __forceinline__ float sc(int r, int j) const { return ss[at(r, j)]; }
  __device__ __forceinline__ float kv(int r, int j) const { return sk[at(r, j)]; }
};

// One block: the pooled columns (one thread per column, rows in the CPU's order), RMS norm (the
// 64-lane double sum on warp 0), RoPE at pos + 1 − R, FP8 or Hadamard + FP4 (the row built in
// place in `pooled`, each element by the thread that pooled it), the row's FP8 store to
// p.out_fp8 (or the indexer row's FP4 store to p.out_fp4). Win: StateWindow or RowsWindow.
template <class Win>
__device__ void compressor_emit(const Win& win, const CompressorStepParams& p, const RopeAngles& ang, int64_t pos,
                                float* pooled) {
  __shared__ float s_scale;
  const int R = p.ratio, D = p.head_dim;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = kCompThreads / 32;
  for (int j = tid; j < D; j += kCompThreads) {
    float mx = -1.0e30f;
    if (R == 4) {
      for (int r = 0; r < 4; ++r) {
        const float sp = win.sc(r, j);
        const float sc = win.sc(4 + r, j);
        if (sp > mx) mx = sp;
        if (sc > mx) mx = sc;
      }
    } else {
      for (int r = 0; r < R; ++r) {
        const float s = win.sc(r, j);
        if (s > mx) mx = s;
      }
    }
    if (mx <= -0.5e30f) {
      pooled[j] = 0.0f;
      continue;
    }
    float den = 0.0f, acc = 0.0f;
    if (R == 4) {
      for (int r = 0; r < 4; ++r) {
        const float wp = detmath::exp_f32(win.sc(r, j) - mx);
        const float wc = detmath::exp_f32(win.sc(4 + r, j) - mx);
        den += wp + wc;
        const float tp = wp * win.kv(r, j);
        acc = acc + tp;
        const float tc = wc * win.kv(4 + r, j);
        acc = acc + tc;
      }
    } else {
      for (int r = 0; r < R; ++r) {
        const float w = detmath::exp_f32(win.sc(r, j) - mx);
        den += w;
        const float t = w * win.kv(r, j);
        acc = acc + t;
      }
    }
    pooled[j] = den > 0.0f ? acc / den : 0.0f;
  }
  __syncthreads();
  if (warp == 0) {  // quant::sumsq_f64's 64-lane order: lane t runs partials t and t + 32
    double q0 = 0.0, q1 = 0.0;
    for (int i = 0; i < D; i += 64) {
      if (i + lane < D) {
        const double v = static_cast<double>(pooled[i + lane]);
        q0 = __dadd_rn(q0, __dmul_rn(v, v));
      }
      if (i + lane + 32 < D) {
        const double v = static_cast<double>(pooled[i + lane + 32]);
        q1 = __dadd_rn(q1, __dmul_rn(v, v));
      }
    }
    q0 = __dadd_rn(q0, q1);  // h = 32, then 16, 8, 4, 2, 1 by shuffles
    for (int h = 16; h >= 1; h /= 2) q0 = __dadd_rn(q0, __shfl_down_sync(kFullMask, q0, h));
    if (lane == 0) s_scale = 1.0f / sqrtf(static_cast<float>(q0 / static_cast<double>(D)) + p.eps);
  }
  __syncthreads();
  const float scale = s_scale;
  float* out = pooled;
  for (int j = tid; j < D; j += kCompThreads) {
    const float t = out[j] * scale;
    out[j] = p.norm != nullptr ? t * p.norm[j] : t;
  }
  __syncthreads();
  const int64_t rpos = pos + 1 - R;
  for (int i = tid; i < p.n_rot / 2; i += kCompThreads) {
    float c, s;
    rope_pair(ang, rpos, i, &c, &s);
    rotate_pair(out + (D - p.n_rot) + 2 * i, c, s);
  }
  __syncthreads();
  if (p.indexer) {
    // The row's FP4 store (quant::fp4_row_bytes(D)): codes [0, D/2), exponent bytes after.
    for (int b = warp; b < D / kvsim::kHadamardDim; b += nwarps) {
      warp_indexer_qat(out + b * kvsim::kHadamardDim, lane, p.out_fp4 + b * (kvsim::kHadamardDim / 2),
                       p.out_fp4 + D / 2 + b * (kvsim::kHadamardDim / kvsim::kFp4Block));
    }
  } else {
    // The row's FP8 store (quant::fp8_row_bytes(D, n_rot)): codes [0, lead), exponent bytes
    // [lead, lead + lead/64), a zero pad byte when that ends odd, the RoPE dims as f16.
    const int lead = D - p.n_rot;
    for (int b = warp; b < lead / kvsim::kFp8Block; b += nwarps)
      warp_fp8_block(out + b * kvsim::kFp8Block, lane, p.out_fp8 + b * kvsim::kFp8Block, p.out_fp8 + lead + b);
    const int rope = kvsim::fp8_rope_offset(lead);
    if (tid == 0 && rope > lead + lead / kvsim::kFp8Block) p.out_fp8[rope - 1] = 0;
    uint16_t* tail = reinterpret_cast<uint16_t*>(p.out_fp8 + rope);  // 2-aligned: rope and row bytes are even
    for (int j = tid; j < p.n_rot; j += kCompThreads) tail[j] = kvsim::f32_to_f16(out[lead + j]);
  }
  __syncthreads();
}

// One block: the state update (row R + pm for ratio 4, pm otherwise), and when the step emits,
// compressor_emit over the state (the row built in p.pooled) and the ratio-4 lane shift.
__device__ void compressor_body(const CompressorStepParams& p, const RopeAngles& ang, bool emit) {
  const int R = p.ratio, D = p.head_dim;
  const int W = (R == 4 ? 2 : 1) * D;
  const int pm = static_cast<int>(p.pos % R);
  const int row = R == 4 ? R + pm : pm;
  const int tid = threadIdx.x;
  {
    float* skv = p.state_kv + static_cast<int64_t>(row) * W;
    float* ssc = p.state_score + static_cast<int64_t>(row) * W;
    const uint16_t* ape = p.ape + static_cast<int64_t>(pm) * W;
    for (int j = tid; j < W; j += kCompThreads) {
      skv[j] = p.kv_cur[j];
      ssc[j] = p.sc_cur[j] + kvsim::f16_to_f32(ape[j]);
    }
  }
  if (!emit) return;
  __syncthreads();
  compressor_emit(StateWindow{p.state_score, p.state_kv, W, R == 4 ? D : 0}, p, ang, p.pos, p.pooled);
  if (R == 4) {
    // The current window becomes the previous lane of the next one (pooling read it above).
    for (int j = tid; j < 4 * W; j += kCompThreads) {
      p.state_kv[j] = p.state_kv[4 * W + j];
      p.state_score[j] = p.state_score[4 * W + j];
    }
  }
}

__global__ void __launch_bounds__(kCompThreads) compressor_kernel(const __grid_constant__ CompressorStepParams p,
                                                                  const RopeAngles ang, bool emit) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  compressor_body(p, ang, emit);
}

// Up to kMaxCompSteps compressor steps in one launch, one after the other in one block: the
// same per-step code, a block barrier between steps (so a step sees every state row and the
// pooled scratch the steps before it wrote), hence the bits of one launch per step.
struct CompressorBatch {
  struct Step {
    CompressorStepParams p;
    RopeAngles ang;
    bool emit;
  } s[kMaxCompSteps];
  int n;
};

__global__ void __launch_bounds__(kCompThreads) compressor_steps_kernel(const __grid_constant__ CompressorBatch b) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  for (int i = 0; i < b.n; ++i) {
    compressor_body(b.s[i].p, b.s[i].ang, b.s[i].emit);
    __syncthreads();
  }
}

// ---- compressor_rows ----------------------------------------------------------------------------
//
// A chain's n steps (backend::CompressorRowsParams) in two launches. First every row the steps
// emit, a block each, in parallel: the block finds each row of its window where the steps one
// by one would have read it (a projection row of the call, whose score is sc + ape as the
// state would hold it, or a state row as it was before the call: the current lane's rows of
// positions before the call, the previous lane when the window before closed before the call)
// and runs compressor_emit on them. Then the state after the n steps, one thread per column:
// each state row's last write in the call (a projection row) or its old value, and for ratio
// 4 the previous lane as copied at the call's last emission (read before anything is written).
constexpr int kRowsMaxWindow = 128;  // window rows (ratio 4: 8; ratio R <= 128: R)
constexpr int kRowsMaxD = 1024;      // head_dim limit (the pooled row in shared memory)
constexpr int kRowsStateThreads = 256;

struct RowsWindow {
  const float* const* kvp;     // [rows] the row's kv values at pooled column 0
  const float* const* scp;     // [rows] its scores (projection rows: sc before the APE)
  const uint16_t* const* apep; // [rows] the APE row to add (projection rows), or nullptr (state rows)
  __device__ __forceinline__ float sc(int r, int j) const {
    return apep[r] != nullptr ? scp[r][j] + kvsim::f16_to_f32(apep[r][j]) : scp[r][j];
  }
  __device__ __forceinline__ float kv(int r, int j) const { return kvp[r][j]; }
};

struct RowsArgs {
  CompressorStepParams c;  // the chain; c.pos, c.kv_cur / c.sc_cur: row 0; c.out_*: the first emitted row
  RopeAngles ang;
  int n;                   // rows (positions c.pos .. c.pos + n - 1)
  int n_emit;              // rows emitted in the call
  int64_t first_emit;      // the position of the first
  int64_t row_bytes;       // bytes of an emitted row's store
};

__global__ void __launch_bounds__(kCompThreads) compressor_rows_emit_kernel(const __grid_constant__ RowsArgs a) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  __shared__ const float* wkv[kRowsMaxWindow];
  __shared__ const float* wsc[kRowsMaxWindow];
  __shared__ const uint16_t* wape[kRowsMaxWindow];
  __shared__ float pooled[kRowsMaxD];
  const CompressorStepParams& c = a.c;
  const int R = c.ratio, D = c.head_dim;
  const int W = (R == 4 ? 2 : 1) * D;
  const int64_t pos0 = c.pos;
  const int64_t q = a.first_emit + static_cast<int64_t>(blockIdx.x) * R;  // this block's closing position
  const int rows = R == 4 ? 8 : R;
  for (int r = threadIdx.x; r < rows; r += kCompThreads) {
    const bool prev = R == 4 && r < 4;
    const int64_t t = R == 4 ? (prev ? q - 7 + r : q - 3 + (r - 4)) : q - R + 1 + r;  // the row's position
    const int col = R == 4 && !prev ? D : 0;
    if (t >= pos0) {
      const int64_t i = t - pos0;
      wkv[r] = c.kv_cur + i * W + col;
      wsc[r] = c.sc_cur + i * W + col;
      wape[r] = c.ape + (t % R) * W + col;
    } else {
      // Ratio 4's previous lane is the copy made when the window before closed (at q - 4), if
      // that was before the call (or never: the initial lane); else its rows of positions
      // before the call are still the current lane's. t >= 0 on every other path.
      const int64_t srow = prev ? (q - 4 < pos0 ? r : 4 + t % 4) : (R == 4 ? 4 + t % 4 : t % R);
      wkv[r] = c.state_kv + srow * W + col;
      wsc[r] = c.state_score + srow * W + col;
      wape[r] = nullptr;
    }
  }
  __syncthreads();
  CompressorStepParams p = c;
  const int64_t k = blockIdx.x;
  if (c.out_fp8 != nullptr) p.out_fp8 = c.out_fp8 + k * a.row_bytes;
  if (c.out_fp4 != nullptr) p.out_fp4 = c.out_fp4 + k * a.row_bytes;
  compressor_emit(RowsWindow{wkv, wsc, wape}, p, a.ang, q, pooled);
}

// The last position t in [pos0, end) with t % R == slot, or -1.
__device__ __forceinline__ int64_t last_write(int64_t pos0, int64_t end, int R, int slot) {
  const int64_t t = (end - 1) - (((end - 1 - slot) % R) + R) % R;
  return t >= pos0 ? t : -1;
}

// The state after the call. Ratio 4: thread j owns column j of all 8 rows (new values from the
// old ones in registers, then the stores); otherwise thread u owns column u % W of the slot
// that row u / W of the call writes (the first min(n, R) rows cover every slot the call writes).
__global__ void __launch_bounds__(kRowsStateThreads) compressor_rows_state_kernel(const __grid_constant__ RowsArgs a) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  const CompressorStepParams& c = a.c;
  const int R = c.ratio, D = c.head_dim;
  const int W = (R == 4 ? 2 : 1) * D;
  const int64_t pos0 = c.pos, end = pos0 + a.n;
  const int64_t u = static_cast<int64_t>(blockIdx.x) * kRowsStateThreads + threadIdx.x;
  // Row t's values at column j as the step at t writes them.
  auto proj_kv = [&](int64_t t, int j) { return c.kv_cur[(t - pos0) * W + j]; };
  auto proj_sc = [&](int64_t t, int j) {
    return c.sc_cur[(t - pos0) * W + j] + kvsim::f16_to_f32(c.ape[(t % R) * W + j]);
  };
  if (R == 4) {
    if (u >= W) return;
    const int j = static_cast<int>(u);
    float nkv[8], nsc[8];
    for (int i = 0; i < 4; ++i) {
      const int64_t t = last_write(pos0, end, 4, i);
      nkv[4 + i] = t >= 0 ? proj_kv(t, j) : c.state_kv[(4 + i) * W + j];
      nsc[4 + i] = t >= 0 ? proj_sc(t, j) : c.state_score[(4 + i) * W + j];
    }
    const int64_t q_last = a.n_emit > 0 ? a.first_emit + static_cast<int64_t>(a.n_emit - 1) * 4 : -1;
    for (int r = 0; r < 4; ++r) {
      if (q_last < 0) {
        nkv[r] = c.state_kv[r * W + j];
        nsc[r] = c.state_score[r * W + j];
      } else {
        const int64_t t = q_last - 3 + r;  // the current lane's row r when the last window closed
        nkv[r] = t >= pos0 ? proj_kv(t, j) : c.state_kv[(4 + r) * W + j];
        nsc[r] = t >= pos0 ? proj_sc(t, j) : c.state_score[(4 + r) * W + j];
      }
    }
    for (int r = 0; r < 8; ++r) {
      c.state_kv[r * W + j] = nkv[r];
      c.state_score[r * W + j] = nsc[r];
    }
  } else {
    if (u >= (a.n < R ? a.n : R) * static_cast<int64_t>(W)) return;
    const int slot = static_cast<int>((pos0 + u / W) % R), j = static_cast<int>(u % W);
    const int64_t t = last_write(pos0, end, R, slot);
    c.state_kv[static_cast<int64_t>(slot) * W + j] = proj_kv(t, j);
    c.state_score[static_cast<int64_t>(slot) * W + j] = proj_sc(t, j);
  }
}

// ---- sink_attention -----------------------------------------------------------------------------

struct SinkQuery {
  SinkAttentionParams p;
  RopeAngles ang;
  float kq_scale;
};
struct SinkBatch {
  SinkQuery q[kMaxBatch];
};

// Whether score slot `slot` (raw keys, then compressed rows) is one of the query's keys.
__device__ __forceinline__ bool slot_used(const SinkAttentionParams& p, int64_t slot) {
  return slot < p.n_raw || p.comp_allowed == nullptr || p.comp_allowed[slot - p.n_raw] != 0;
}
// The key row of a used slot, as the query's key type Key (const float*: f32 rows;
// attn::StoredKey: the target's f16 raw rows and FP8 compressed rows).
template <typename Key>
__device__ __forceinline__ Key slot_key(const SinkAttentionParams& p, int64_t slot);
template <>
__device__ __forceinline__ const float* slot_key<const float*>(const SinkAttentionParams& p, int64_t slot) {
  if (slot < p.n_raw) return p.raw + ((p.raw_first + slot) % p.raw_cap) * p.head_dim;
  return p.comp + (slot - p.n_raw) * p.head_dim;
}
template <>
__device__ __forceinline__ attn::StoredKey slot_key<attn::StoredKey>(const SinkAttentionParams& p, int64_t slot) {
  if (slot < p.n_raw)
    return {reinterpret_cast<const uint8_t*>(p.raw_f16 + ((p.raw_first + slot) % p.raw_cap) * p.head_dim), 0};
  const int lead = p.head_dim - p.n_rot;
  return {p.comp_fp8 + (slot - p.n_raw) * kvsim::fp8_row_bytes(p.head_dim, p.n_rot), lead};
}

// The queries of heads h0 .. h0 + Heads - 1 into qs[g][0, D) (rows score_q_stride(D) apart),
// zeros past the nh heads there are; every thread of the block (Threads) takes part, several
// loads in flight per thread (the loop unrolled: its iterations are independent).
template <int Heads, int Threads>
__device__ __forceinline__ void stage_queries(const SinkAttentionParams& p, int h0, int nh, float* qs) {
  const int D = p.head_dim, Dq = score_q_stride(D);
  if (D % 4 == 0 && (reinterpret_cast<uintptr_t>(p.q) & 15u) == 0) {  // 16-byte loads (qs rows: Dq % 4 == 0)
    const int D4 = D / 4;
#pragma unroll 8
    for (int i = threadIdx.x; i < Heads * D4; i += Threads) {
      const int g = i / D4, e = 4 * (i - g * D4);
      const float4 v = g < nh ? __ldg(reinterpret_cast<const float4*>(p.q + static_cast<int64_t>(h0 + g) * D + e))
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      *reinterpret_cast<float4*>(qs + g * Dq + e) = v;
    }
    return;
  }
#pragma unroll 8
  for (int i = threadIdx.x; i < Heads * D; i += Threads) {
    const int g = i / D, e = i - g * D;
    qs[g * Dq + e] = g < nh ? p.q[static_cast<int64_t>(h0 + g) * D + e] : 0.0f;
  }
}

// Scores, one block per (tile of kScoreKeys slots, group of kScoreHeads heads, query). The
// block first decodes its tile's used key rows into shared memory as f32 (all threads, each
// element once: attn::load_key) and stages the group's queries (rows padded to kScorePad mod 8
// floats, so the two halves of a warp, four heads apart, read different banks); disallowed
// compressed rows get -1e30 (the CPU's marker) and decode nothing. Then warp w dots keys
// 2(w % 4), 2(w % 4) + 1 of the tile with heads 8(w / 4) .. + 7, half h of the warp taking four
// of them: every lane keeps 2 x 4 x 4 partials (key, head, partial hl + 16·c), so each dot is
// half_dot64's order (quant::dot_f32) exactly, while a key element read from shared memory
// serves four heads and a query element two keys.
template <typename Key>
__global__ void __launch_bounds__(kScoreThreads) sink_scores_kernel(const __grid_constant__ SinkBatch b) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  extern __shared__ __align__(16) float smem[];
  const SinkQuery& sq = b.q[blockIdx.z];
  const SinkAttentionParams& p = sq.p;
  const int h0 = static_cast<int>(blockIdx.y) * kScoreHeads;
  const int64_t n_all = p.n_raw + p.n_comp;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kScoreKeys;
  if (h0 >= p.n_head || t0 >= n_all) return;  // block-uniform
  const int nh = p.n_head - h0 < kScoreHeads ? p.n_head - h0 : kScoreHeads;
  const int D = p.head_dim, Dq = score_q_stride(D);
  float* qs = smem;                        // [kScoreHeads][Dq]: the group's queries, zeros past nh
  float* ks = smem + kScoreHeads * Dq;     // [kScoreKeys][D]: the tile's used keys as f32
  __shared__ int used_mask;                // bit k: slot t0 + k is a used key
  __shared__ Key tkey[kScoreKeys];         // the key row of used slot t0 + k (slot_key, once)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hl = lane & 15, half = lane >> 4;
  if (tid < 32) {
    const int64_t slot = t0 + lane;
    const bool u = lane < kScoreKeys && slot < n_all && slot_used(p, slot);
    const unsigned m = __ballot_sync(kFullMask, u);
    if (lane == 0) used_mask = static_cast<int>(m);
    if (u) tkey[lane] = slot_key<Key>(p, slot);
    if (lane < kScoreKeys && slot < n_all && !u)
      for (int g = 0; g < nh; ++g) p.scores[static_cast<int64_t>(h0 + g) * n_all + slot] = -1.0e30f;
  }
  __syncthreads();
  const int used = used_mask;
  if (used == 0) return;  // block-uniform
  // The staging loops unrolled: their iterations are independent, so several global loads are
  // in flight per thread instead of one latency each.
  stage_queries<kScoreHeads, kScoreThreads>(p, h0, nh, qs);
  bool vec_done = false;  // block-uniform
  if constexpr (std::is_same_v<Key, attn::StoredKey>) {
    if (D % 8 == 0) {  // eight elements per load (attn::load_key8), all of a thread's in flight
      const int D8 = D / 8;
#pragma unroll 2
      for (int i = tid; i < kScoreKeys * D8; i += kScoreThreads) {
        const int k = i / D8, e = 8 * (i - k * D8);
        if (!((used >> k) & 1)) continue;
        float v[8];
        attn::load_key8_any(tkey[k], e, v);
#pragma unroll
        for (int j = 0; j < 8; ++j) ks[k * D + e + j] = v[j];
      }
      vec_done = true;
    }
  }
  if (!vec_done) {
#pragma unroll 4
    for (int i = tid; i < kScoreKeys * D; i += kScoreThreads) {
      const int k = i / D, e = i - k * D;
      if ((used >> k) & 1) ks[i] = attn::load_key(tkey[k], e);
    }
  }
  __syncthreads();
  const int k0 = 2 * (warp % (kScoreKeys / 2));
  const int g0 = (warp / (kScoreKeys / 2)) * 8 + 4 * half;  // this half's four heads
  if (((used >> k0) & 3) == 0) return;  // warp-uniform: neither key is used
  float acc[2][4][4];
#pragma unroll
  for (int k = 0; k < 2; ++k)
#pragma unroll
    for (int g = 0; g < 4; ++g)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[k][g][c] = 0.0f;
  const float* k0s = ks + k0 * D;
  const float* k1s = k0s + D;
  const float* q0s = qs + g0 * Dq;
#pragma unroll 2
  for (int i = 0; i < D; i += 64) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int e = i + 16 * c + hl;
      if (e < D) {
        const float kv0 = k0s[e], kv1 = k1s[e];
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          const float qv = q0s[g * Dq + e];
          acc[0][g][c] = __fadd_rn(acc[0][g][c], __fmul_rn(qv, kv0));
          acc[1][g][c] = __fadd_rn(acc[1][g][c], __fmul_rn(qv, kv1));
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int64_t slot = t0 + k0 + k;
    const bool write = hl == 0 && ((used >> (k0 + k)) & 1);
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      const float d = attn::tree64_half(acc[k][g]);
      if (write && g0 + g < nh) p.scores[static_cast<int64_t>(h0 + g0 + g) * n_all + slot] = d * sq.kq_scale;
    }
  }
}

// Slice s of the output dims of a head: [32s - off, 32(s+1) - off) clipped to [0, D), where
// off = D & 1 when de-rotating (the RoPE pairs start at D - n_rot, of D's parity), so that no
// pair straddles two slices.
__device__ __forceinline__ int slice_lo(int s, int off) { return s * kCombSlice - off > 0 ? s * kCombSlice - off : 0; }

// Softmax and weighted sum, one block per (slice of kCombSlice output dims, group of
// kCombHeads heads, query); warp g owns head h0 + g, lane l output dim lo + l. Each warp finds
// its head's max over the used scores (order-free; then against the sink as the CPU's running
// max from the sink). Then the keys in the CPU's order, in chunks of kCombChunk slots: the used
// slots compacted in key order (a block scan), their slice decoded into shared memory once as
// f32 (all threads, a warp per key row: coalesced), the exps per head beside them; then every
// lane chains y = y + w_k·key_k[dim] over the chunk from y = 0 at the first key, and the
// denominator den = den + w_k from exp(sink − max) (every lane of a warp holds the same den).
// Then y·(1/den), the inverse RoPE of the tail, the store. Key: as sink_scores_kernel.
template <typename Key>
__global__ void __launch_bounds__(kCombThreads) sink_combine_kernel(const __grid_constant__ SinkBatch b) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  static_assert(kCombSlice == 32 && kCombThreads == 32 * kCombHeads && kCombChunk == kCombThreads,
                "a warp per head, a lane per dim, a thread per slot of a chunk");
  __shared__ float ks[kCombChunk][kCombSlice];  // compacted key k's slice, f32
  __shared__ float cw[kCombHeads][kCombChunk];  // exp(score - max) of compacted key k, per head
  __shared__ int64_t cslot[kCombChunk];         // slot of compacted key k
  __shared__ Key ckey[kCombChunk];              // its key row (slot_key, once per chunk)
  __shared__ float os[kCombHeads][kCombSlice];
  __shared__ int warp_sums[32];
  const SinkQuery& sq = b.q[blockIdx.z];
  const SinkAttentionParams& p = sq.p;
  const int h0 = static_cast<int>(blockIdx.y) * kCombHeads;
  const int D = p.head_dim;
  const int off = p.n_rot > 0 ? (D & 1) : 0;
  const int lo = slice_lo(static_cast<int>(blockIdx.x), off);
  const int hi_raw = (static_cast<int>(blockIdx.x) + 1) * kCombSlice - off;
  const int hi = hi_raw < D ? hi_raw : D;
  if (h0 >= p.n_head || lo >= hi) return;  // block-uniform
  const int nh = p.n_head - h0 < kCombHeads ? p.n_head - h0 : kCombHeads;
  const int tid = threadIdx.x, lane = tid & 31, g = tid >> 5;
  const bool head = g < nh;  // warp-uniform
  const int64_t n_all = p.n_raw + p.n_comp;
  const float* score = p.scores + static_cast<int64_t>(h0 + (head ? g : 0)) * n_all;

  // The head's max over the used scores (NaN never enters), then the CPU's chain from the sink.
  float m = -INFINITY;
  if (head) {
#pragma unroll 4
    for (int64_t s = lane; s < n_all; s += 32)
      if (slot_used(p, s)) {
        const float sc = score[s];
        m = sc > m ? sc : m;
      }
  }
  for (int s = 16; s >= 1; s >>= 1) {
    const float o = __shfl_xor_sync(kFullMask, m, s);
    m = o > m ? o : m;
  }
  const float sink = head ? p.sinks[h0 + g] : 0.0f;
  const float mx = (sink != sink || !(m > sink)) ? sink : m;  // a NaN sink stays
  float den = detmath::exp_f32(sink - mx);
  float y = 0.0f;
  const int j = lo + lane;
  const bool own = j < hi;
  for (int64_t c0 = 0; c0 < n_all; c0 += kCombChunk) {
    const int64_t s = c0 + tid;
    const bool u = s < n_all && slot_used(p, s);
    int total = 0;
    const int at = block_scan_counts(u ? 1 : 0, warp_sums, &total);  // syncs: last chunk's readers are done
    if (total == 0) continue;  // block-uniform
    if (u) {
      cslot[at] = s;
      ckey[at] = slot_key<Key>(p, s);
    }
    __syncthreads();
    // Decode: warp w takes compacted keys w, w + kCombHeads, ...; lane l element lo + l. Stored
    // keys of a whole aligned slice: eight elements per load (attn::load_key8), lanes 4m..4m+3
    // on key 8w + m, so a warp instruction covers eight keys.
    bool vec_done = false;  // block-uniform
    if constexpr (std::is_same_v<Key, attn::StoredKey>) {
      if (hi - lo == kCombSlice && (lo & 7) == 0) {
        const int e = lo + 8 * (lane & 3);
#pragma unroll 2
        for (int k = 8 * g + (lane >> 2); k < total; k += 8 * kCombHeads) {
          float v[8];
          attn::load_key8_any(ckey[k], e, v);
#pragma unroll
          for (int q = 0; q < 8; ++q) ks[k][8 * (lane & 3) + q] = v[q];
        }
        vec_done = true;
      }
    }
    if (!vec_done) {
#pragma unroll 4
      for (int k = g; k < total; k += kCombHeads) ks[k][lane] = own ? attn::load_key(ckey[k], j) : 0.0f;
    }
    if (head) {
#pragma unroll 4
      for (int k = lane; k < total; k += 32) cw[g][k] = detmath::exp_f32(score[cslot[k]] - mx);
    }
    __syncthreads();
    if (head) {
      const float* w = cw[g];
      int k = 0;
      for (; k + 4 <= total; k += 4) {
#pragma unroll
        for (int u4 = 0; u4 < 4; ++u4) {
          const float wk = w[k + u4];
          const float t = wk * ks[k + u4][lane];
          y = y + t;
          den = den + wk;
        }
      }
      for (; k < total; ++k) {
        const float wk = w[k];
        const float t = wk * ks[k][lane];
        y = y + t;
        den = den + wk;
      }
    }
  }
  if (head) os[g][lane] = y * (1.0f / den);
  __syncthreads();
  if (p.n_rot > 0 && head && own) {
    // The pair (j, j + 1) lies in this slice (slice_lo's parity), so os holds both.
    const int r0 = D - p.n_rot;
    if (j >= r0 && ((j - r0) & 1) == 0) {
      float c, sn;
      rope_pair(sq.ang, p.pos, (j - r0) / 2, &c, &sn);
      rotate_pair(&os[g][lane], c, -sn);
    }
  }
  __syncthreads();
  if (head && own) p.out[static_cast<int64_t>(h0 + g) * D + j] = os[g][lane];
}

// ---- sink_attention, fused: one block per (head group, query) for prefill batches ---------------
//
// The split kernels above re-stage a head group's queries for every tile of 8 keys and read the
// scores back from global memory in a second launch; fine for a decode's one query (many small
// blocks), costly for a prefill group, whose queries each fill a block of their own. Here one
// block owns kFusedHeads heads of one query: it stages their queries once, then passes twice
// over the query's used keys in key order, in tiles of kFusedKeys (the used slots of each
// chunk of kFusedChunk compacted by a block scan, each tile's keys decoded once into shared
// memory as f32): pass 1 the dots (half_dot64's order, as sink_scores_kernel: lane hl keeps
// partials hl + 16·c, the halving tree closes them), stored to p.scores (the CPU's scratch
// values, -1e30 for disallowed rows) and folded into a running max per head; pass 2 reads its
// own scores back (written by this block, ordered by the barrier), w = exp(score − max), and
// each warp chains two heads' denominators and output dims (half of them, lane l: dims
// dh + l + 32·d) over the keys in order, y = y + w·key from y = 0, as sink_combine_kernel. Then
// y·(1/den), the inverse RoPE, the store. Every chain stays in one thread, so the grid and the
// batch change no bit.
constexpr int kFusedThreads = 256;  // 8 warps
constexpr int kFusedHeads = 8;      // pass 1: two half-warps x 4 heads; pass 2: 2 heads x 256 dims per warp
constexpr int kFusedKeys = 32;      // keys per tile: 4 per warp in pass 1, a lane each for the exps
constexpr int kFusedChunk = 512;    // slots per compaction (2 per thread)
constexpr int kFusedMaxD = 512;     // head_dim limit: kFusedDims output dims per lane
constexpr int kFusedDims = kFusedMaxD / 64;  // output dims per lane in pass 2 (two warps per head pair)
constexpr int kFusedBatch = 32;     // queries per launch (by value: ~7 KB of kernel parameters)
static_assert(kFusedThreads == 32 * kFusedHeads && kFusedKeys == 32 && kFusedChunk == 2 * kFusedThreads &&
                  kFusedMaxD == 2 * 32 * kFusedDims,
              "a warp per head for the exps, a lane per key of a tile, two slots per thread, two dim halves");

struct FusedBatch {
  SinkQuery q[kFusedBatch];
};
static_assert(sizeof(FusedBatch) <= 32764, "kernel parameters past CUDA 12.1's limit");

// Dynamic shared memory of a fused block: the staged queries, then the key tile (which the
// outputs reuse).
constexpr size_t fused_smem_bytes(int d) {
  return sizeof(float) * (static_cast<size_t>(kFusedHeads) * score_q_stride(d) + static_cast<size_t>(kFusedKeys) * d);
}

// The used slots of [c0, c0 + kFusedChunk) in slot order into cslot; returns their count. With
// `mark` (pass 1), a disallowed slot's score is the CPU's -1e30 for the block's heads. Every
// thread calls it; cslot is complete for all threads on return.
__device__ __forceinline__ int fused_compact(const SinkAttentionParams& p, int64_t c0, int64_t n_all, int h0, int nh,
                                             bool mark, int64_t* cslot, int* warp_sums) {
  const int64_t s0 = c0 + 2 * static_cast<int64_t>(threadIdx.x);
  const bool in0 = s0 < n_all, in1 = s0 + 1 < n_all;
  const bool u0 = in0 && slot_used(p, s0), u1 = in1 && slot_used(p, s0 + 1);
  if (mark) {
    for (int g = 0; g < nh; ++g) {
      float* row = p.scores + static_cast<int64_t>(h0 + g) * n_all;
      if (in0 && !u0) row[s0] = -1.0e30f;
      if (in1 && !u1) row[s0 + 1] = -1.0e30f;
    }
  }
  int total = 0;
  const int at = block_scan_counts((u0 ? 1 : 0) + (u1 ? 1 : 0), warp_sums, &total);  // syncs: cslot's readers are done
  if (u0) cslot[at] = s0;
  if (u1) cslot[at + (u0 ? 1 : 0)] = s0 + 1;
  __syncthreads();
  return total;
}

// Keys k0 .. k0 + nt - 1 of the compacted list, decoded as f32 into ks[k][0, D) (k < nt).
template <typename Key>
__device__ __forceinline__ void fused_decode(const SinkAttentionParams& p, const int64_t* cslot, int k0, int nt,
                                             Key* tkey, float* ks) {
  const int D = p.head_dim;
  if (static_cast<int>(threadIdx.x) < nt) tkey[threadIdx.x] = slot_key<Key>(p, cslot[k0 + threadIdx.x]);
  __syncthreads();
#pragma unroll 8
  for (int i = threadIdx.x; i < nt * D; i += kFusedThreads) {
    const int k = i / D;
    ks[i] = attn::load_key(tkey[k], i - k * D);
  }
  __syncthreads();
}

template <typename Key>
__global__ void __launch_bounds__(kFusedThreads) sink_fused_kernel(const __grid_constant__ FusedBatch b) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  extern __shared__ __align__(16) float smem[];
  __shared__ int64_t cslot[kFusedChunk];       // the chunk's used slots, in order
  __shared__ Key tkey[kFusedKeys];             // the tile's key rows
  __shared__ float cw[kFusedHeads][kFusedKeys];  // exp(score - max) of the tile's keys, per head
  __shared__ float mred[kFusedThreads / 32][kFusedHeads];  // pass 1's max per (warp, head)
  __shared__ float mxs[kFusedHeads];                        // each head's max (from the sink)
  __shared__ int warp_sums[32];
  const SinkQuery& sq = b.q[blockIdx.y];
  const SinkAttentionParams& p = sq.p;
  const int h0 = static_cast<int>(blockIdx.x) * kFusedHeads;
  if (h0 >= p.n_head) return;  // block-uniform
  const int nh = p.n_head - h0 < kFusedHeads ? p.n_head - h0 : kFusedHeads;
  const int D = p.head_dim, Dq = score_q_stride(D);
  float* qs = smem;                       // [kFusedHeads][Dq]: the group's queries, zeros past nh
  float* ks = smem + kFusedHeads * Dq;    // [kFusedKeys][D]: the tile's keys as f32; then the outputs
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int hl = lane & 15, half = lane >> 4;
  const int64_t n_all = p.n_raw + p.n_comp;
  stage_queries<kFusedHeads, kFusedThreads>(p, h0, nh, qs);
  // Pass 1: scores and the running max (lanes 0 and 16: their half's four heads).
  const int kb = 4 * warp;    // this warp's keys of a tile
  const int g0 = 4 * half;    // this half's heads
  float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
  for (int64_t c0 = 0; c0 < n_all; c0 += kFusedChunk) {
    const int total = fused_compact(p, c0, n_all, h0, nh, true, cslot, warp_sums);
    for (int k0 = 0; k0 < total; k0 += kFusedKeys) {
      const int nt = total - k0 < kFusedKeys ? total - k0 : kFusedKeys;
      fused_decode<Key>(p, cslot, k0, nt, tkey, ks);  // syncs: qs staged too
      if (kb < nt) {  // warp-uniform
        float acc[4][4][4];
#pragma unroll
        for (int k = 0; k < 4; ++k)
#pragma unroll
          for (int g = 0; g < 4; ++g)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[k][g][c] = 0.0f;
        const float* kr = ks + kb * D;
        const float* qr = qs + g0 * Dq;
        for (int i = 0; i < D; i += 64) {
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int e = i + 16 * c + hl;
            if (e < D) {
              float kv[4];
#pragma unroll
              for (int k = 0; k < 4; ++k) kv[k] = kr[k * D + e];
#pragma unroll
              for (int g = 0; g < 4; ++g) {
                const float qv = qr[g * Dq + e];
#pragma unroll
                for (int k = 0; k < 4; ++k) acc[k][g][c] = __fadd_rn(acc[k][g][c], __fmul_rn(qv, kv[k]));
              }
            }
          }
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const bool key = kb + k < nt;
          const int64_t slot = key ? cslot[k0 + kb + k] : 0;
#pragma unroll
          for (int g = 0; g < 4; ++g) {
            const float d = attn::tree64_half(acc[k][g]);
            if (hl == 0 && key && g0 + g < nh) {
              const float sc = d * sq.kq_scale;
              p.scores[static_cast<int64_t>(h0 + g0 + g) * n_all + slot] = sc;
              m[g] = sc > m[g] ? sc : m[g];  // NaN never enters
            }
          }
        }
      }
      __syncthreads();  // the tile's readers are done before the next decode
    }
  }
  if (hl == 0) {
#pragma unroll
    for (int g = 0; g < 4; ++g) mred[warp][g0 + g] = m[g];
  }
  __syncthreads();
  // The max of head h0 + g (warp g), then the CPU's running max from the sink.
  const bool head = warp < nh;  // warp-uniform
  float mh = -INFINITY;
#pragma unroll
  for (int w = 0; w < kFusedThreads / 32; ++w) {
    const float v = mred[w][warp];
    mh = v > mh ? v : mh;
  }
  const float sink = head ? p.sinks[h0 + warp] : 0.0f;
  const float mx = (sink != sink || !(mh > sink)) ? sink : mh;  // a NaN sink stays
  if (lane == 0) mxs[warp] = mx;
  // Pass 2: warp w chains heads hp, hp + 1 over the output dims [dh, dh + 256), lane l the dims
  // dh + l + 32·d (two heads per warp: each key element read from shared memory serves both).
  // The exps of a tile: thread (g, k) = (warp, lane), head g's max in its registers.
  const int hp = 2 * (warp % (kFusedHeads / 2)), dh = (warp / (kFusedHeads / 2)) * 32 * kFusedDims;
  const bool on0 = hp < nh, on1 = hp + 1 < nh;  // warp-uniform
  __syncthreads();  // mxs
  float den0 = on0 ? detmath::exp_f32(p.sinks[h0 + hp] - mxs[hp]) : 0.0f;
  float den1 = on1 ? detmath::exp_f32(p.sinks[h0 + hp + 1] - mxs[hp + 1]) : 0.0f;
  float y0[kFusedDims], y1[kFusedDims];
#pragma unroll
  for (int d = 0; d < kFusedDims; ++d) y0[d] = y1[d] = 0.0f;
  const float* score = p.scores + static_cast<int64_t>(h0 + (head ? warp : 0)) * n_all;
  for (int64_t c0 = 0; c0 < n_all; c0 += kFusedChunk) {
    const int total = fused_compact(p, c0, n_all, h0, nh, false, cslot, warp_sums);
    for (int k0 = 0; k0 < total; k0 += kFusedKeys) {
      const int nt = total - k0 < kFusedKeys ? total - k0 : kFusedKeys;
      fused_decode<Key>(p, cslot, k0, nt, tkey, ks);
      if (head && lane < nt) cw[warp][lane] = detmath::exp_f32(score[cslot[k0 + lane]] - mx);
      __syncthreads();  // cw
      if (on0) {
        for (int k = 0; k < nt; ++k) {
          const float w0 = cw[hp][k];
          const float w1 = on1 ? cw[hp + 1][k] : 0.0f;
          const float* kr = ks + k * D + dh;
#pragma unroll
          for (int d = 0; d < kFusedDims; ++d) {
            if (dh + lane + 32 * d < D) {
              const float kv = kr[lane + 32 * d];
              const float t0 = w0 * kv;
              y0[d] = y0[d] + t0;
              const float t1 = w1 * kv;
              y1[d] = y1[d] + t1;
            }
          }
          den0 = den0 + w0;
          den1 = den1 + w1;
        }
      }
      __syncthreads();  // the tile's readers are done before the next decode
    }
  }
  // y·(1/den) into ks (free now), the inverse RoPE of each head's tail, the store.
#pragma unroll
  for (int d = 0; d < kFusedDims; ++d) {
    const int j = dh + lane + 32 * d;
    if (j < D) {
      if (on0) ks[hp * D + j] = y0[d] * (1.0f / den0);
      if (on1) ks[(hp + 1) * D + j] = y1[d] * (1.0f / den1);
    }
  }
  __syncthreads();
  if (p.n_rot > 0) {
    const int pairs = p.n_rot / 2, r0 = D - p.n_rot;
    for (int i = tid; i < nh * pairs; i += kFusedThreads) {
      const int g = i / pairs, pr = i - g * pairs;
      float c, sn;
      rope_pair(sq.ang, p.pos, pr, &c, &sn);
      rotate_pair(&ks[g * D + r0 + 2 * pr], c, -sn);
    }
    __syncthreads();
  }
  for (int i = tid; i < nh * D; i += kFusedThreads) p.out[static_cast<int64_t>(h0) * D + i] = ks[i];
}

// A kernel's opt-in to `bytes` of dynamic shared memory past 48 KB (its largest head_dim's
// blocks), once per device (`done`: that kernel's flags): the attribute call costs host time
// on every launch otherwise. A failure is reported, not cached.
cudaError_t smem_optin(const void* kernel, size_t bytes, bool (&done)[64]) {
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess || dev < 0 || dev >= 64) return e != cudaSuccess ? e : cudaErrorInvalidDevice;
  if (done[dev]) return cudaSuccess;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not a later launch's error
    return e;
  }
  done[dev] = true;
  return cudaSuccess;
}
template <typename Key>
cudaError_t score_smem_optin() {
  static bool done[64] = {};
  return smem_optin(reinterpret_cast<const void*>(sink_scores_kernel<Key>), score_smem_bytes(kAttnMaxD), done);
}
template <typename Key>
cudaError_t fused_smem_optin() {
  static bool done[64] = {};
  return smem_optin(reinterpret_cast<const void*>(sink_fused_kernel<Key>), fused_smem_bytes(kFusedMaxD), done);
}

// RoPE constants of a call (n_rot 0: no rotation, constants unused).
RopeAngles angles_for(const RopeParams& rp, int n_rot) { return n_rot > 0 ? rope_angles(rp, n_rot) : RopeAngles{}; }

bool rot_ok(int n_rot, int dim) { return n_rot >= 0 && n_rot % 2 == 0 && n_rot <= dim && n_rot / 2 <= kMaxPairs; }

std::atomic<bool> g_fused_norms{false};

// attention_inputs' norms as rms_norm launches: each q head (rows of head_dim; one launch when
// the heads of consecutive rows are contiguous), then kv with its weight.
Status unfused_norms(const AttentionInputsParams& p, Stream stream) {
  const int64_t D = p.head_dim;
  if (p.q != nullptr && p.q_head_norm && p.n_head > 0) {
    const bool packed = p.q_stride == p.n_head * D;
    for (int r = 0; r < (packed ? 1 : p.n_rows); ++r) {
      float* q = p.q + r * p.q_stride;
      DS4_RETURN_IF_ERROR(rms_norm(q, nullptr, q, D, D, packed ? p.n_rows * p.n_head : p.n_head, p.norm_eps, stream));
    }
  }
  if (p.kv_norm != nullptr) DS4_RETURN_IF_ERROR(rms_norm(p.kv, p.kv_norm, p.kv, D, D, p.n_rows, p.norm_eps, stream));
  return Status();
}

}  // namespace

void set_fused_norms(bool on) { g_fused_norms.store(on, std::memory_order_relaxed); }
bool fused_norms() { return g_fused_norms.load(std::memory_order_relaxed); }

Status attention_inputs(const AttentionInputsParams& p, Stream stream) {
  char shapes[256];
  std::snprintf(shapes, sizeof shapes,
                "rows %d, pos0 %lld, head_dim %d, n_rot %d, n_head %d, raw_cap %lld, idx heads %d x %d",
                p.n_rows, static_cast<long long>(p.pos0), p.head_dim, p.n_rot, p.n_head,
                static_cast<long long>(p.raw_cap), p.n_idx_head, p.idx_dim);
  if (p.n_rows < 0 || p.head_dim <= 0 || p.kv == nullptr || p.pos0 < 0 || !rot_ok(p.n_rot, p.head_dim) ||
      (p.head_dim - p.n_rot) % kvsim::kFp8Block != 0 || (p.q != nullptr && (p.n_head < 0 || p.q_stride < 0)) ||
      (p.raw != nullptr && p.raw_cap <= 0) ||
      (p.iq != nullptr && (p.idx_dim != kvsim::kHadamardDim || p.n_rot > p.idx_dim || p.iw == nullptr || p.n_idx_head < 0)))
    return invalid_argument("cuda: attention_inputs: unsupported arguments (%s; need an even n_rot <= head_dim "
                            "with (head_dim - n_rot) %% 64 == 0, raw_cap > 0, idx_dim 128)",
                            shapes);
  if (p.n_rows == 0) return Status();
  AttentionInputsParams k = p;
  if (!fused_norms()) {  // the norms as rms_norm launches, then the kernel without them
    DS4_RETURN_IF_ERROR(unfused_norms(p, stream));
    k.q_head_norm = false;
    k.kv_norm = nullptr;
  }
  const dim3 grid(static_cast<unsigned>(p.n_rows), static_cast<unsigned>(inputs_parts(p).total()));
  detail::launch_pdl(pdl_all(), attention_inputs_kernel, grid, kRowThreads, 0, stream, k, angles_for(p.rope, p.n_rot));
  return launch_result("attention_inputs", shapes);
}

namespace {

// The shapes line of a compressor step's error, and whether the kernel takes its arguments.
bool compressor_args_ok(const CompressorStepParams& p, char* shapes, size_t n) {
  std::snprintf(shapes, n, "ratio %d, head_dim %d, n_rot %d, pos %lld, indexer %d", p.ratio, p.head_dim, p.n_rot,
                static_cast<long long>(p.pos), p.indexer ? 1 : 0);
  const bool emit = backend::compressor_emits(p.pos, p.ratio);
  return !(p.ratio <= 0 || p.head_dim <= 0 || p.pos < 0 || !rot_ok(p.n_rot, p.head_dim) || p.state_kv == nullptr ||
           p.state_score == nullptr || p.kv_cur == nullptr || p.sc_cur == nullptr || p.ape == nullptr ||
           (emit && (p.pooled == nullptr || (p.indexer ? p.out_fp4 == nullptr : p.out_fp8 == nullptr))) ||
           (p.indexer ? p.head_dim % kvsim::kHadamardDim != 0 : (p.head_dim - p.n_rot) % kvsim::kFp8Block != 0));
}

Status compressor_args_error(const char* shapes) {
  return invalid_argument("cuda: compressor_step: unsupported arguments (%s; need an even n_rot <= head_dim, "
                          "head_dim %% 128 == 0 (indexer) or (head_dim - n_rot) %% 64 == 0)",
                          shapes);
}

}  // namespace

Status compressor_steps(const CompressorStepParams* p, int n, Stream stream) {
  for (int b0 = 0; b0 < n; b0 += kMaxCompSteps) {
    CompressorBatch batch{};
    batch.n = n - b0 < kMaxCompSteps ? n - b0 : kMaxCompSteps;
    char shapes[160];
    for (int i = 0; i < batch.n; ++i) {
      const CompressorStepParams& q = p[b0 + i];
      if (!compressor_args_ok(q, shapes, sizeof shapes)) return compressor_args_error(shapes);
      batch.s[i].p = q;
      batch.s[i].ang = angles_for(q.rope, q.n_rot);
      batch.s[i].emit = backend::compressor_emits(q.pos, q.ratio);
    }
    std::snprintf(shapes, sizeof shapes, "%d steps, first ratio %d, head_dim %d, pos %lld", batch.n,
                  batch.s[0].p.ratio, batch.s[0].p.head_dim, static_cast<long long>(batch.s[0].p.pos));
    detail::launch_pdl(pdl_all(), compressor_steps_kernel, 1, kCompThreads, 0, stream, batch);
    const Status s = launch_result("compressor_steps", shapes);
    if (!s.ok()) return s;
  }
  return Status();
}

Status compressor_rows(const backend::CompressorRowsParams& p, Stream stream, bool* done) {
  *done = false;
  const CompressorStepParams& c = p.step;
  char shapes[160];
  if (!compressor_args_ok(c, shapes, sizeof shapes) || p.n < 0) return compressor_args_error(shapes);
  if (c.ratio > kRowsMaxWindow || c.head_dim > kRowsMaxD) return Status();  // declined: the steps one by one
  *done = true;
  if (p.n == 0) return Status();
  RowsArgs a{};
  a.c = c;
  a.ang = angles_for(c.rope, c.n_rot);
  a.n = p.n;
  const int64_t R = c.ratio, pos0 = c.pos, end = pos0 + p.n;
  a.n_emit = static_cast<int>(end / R - pos0 / R);  // positions t in [pos0, end) with (t + 1) % R == 0
  a.first_emit = (pos0 / R) * R + R - 1;
  a.row_bytes = c.indexer ? kvsim::fp4_row_bytes(c.head_dim) : kvsim::fp8_row_bytes(c.head_dim, c.n_rot);
  if (a.n_emit > 0 && (c.pooled == nullptr || (c.indexer ? c.out_fp4 == nullptr : c.out_fp8 == nullptr)))
    return compressor_args_error(shapes);
  std::snprintf(shapes, sizeof shapes, "%d rows from %lld, ratio %d, head_dim %d, %d emitted", p.n,
                static_cast<long long>(pos0), c.ratio, c.head_dim, a.n_emit);
  if (a.n_emit > 0) {
    detail::launch_pdl(pdl_all(), compressor_rows_emit_kernel, a.n_emit, kCompThreads, 0, stream, a);
    const Status s = launch_result("compressor_rows (emit)", shapes);
    if (!s.ok()) return s;
  }
  const int64_t W = (c.ratio == 4 ? 2 : 1) * static_cast<int64_t>(c.head_dim);
  const int64_t units = c.ratio == 4 ? W : (p.n < R ? p.n : R) * W;
  detail::launch_pdl(pdl_all(), compressor_rows_state_kernel,
                     static_cast<unsigned>((units + kRowsStateThreads - 1) / kRowsStateThreads), kRowsStateThreads, 0,
                     stream, a);
  return launch_result("compressor_rows (state)", shapes);
}

Status compressor_step(const CompressorStepParams& p, Stream stream) {
  char shapes[160];
  if (!compressor_args_ok(p, shapes, sizeof shapes)) return compressor_args_error(shapes);
  detail::launch_pdl(pdl_all(), compressor_kernel, 1, kCompThreads, 0, stream, p, angles_for(p.rope, p.n_rot),
                     backend::compressor_emits(p.pos, p.ratio));
  return launch_result("compressor_step", shapes);
}

namespace {

// Whether query q (index i of the call) is one the sink kernels take (keys of the kind
// `stored`, that of the call's first query); the error names the query and its shapes.
Status check_sink_query(const SinkAttentionParams& q, int i, bool stored) {
  const bool raw_ok = stored ? q.raw_f16 != nullptr : q.raw != nullptr;
  const bool comp_ok =
      stored ? q.comp_fp8 != nullptr && (q.head_dim - q.n_rot) % kvsim::kFp8Block == 0 : q.comp != nullptr;
  if (q.n_head <= 0 || q.head_dim <= 0 || q.head_dim > kAttnMaxD || q.n_raw < 0 || q.n_comp < 0 ||
      !q.keys_one_kind() || q.stored_keys() != stored || (q.n_raw > 0 && (!raw_ok || q.raw_cap <= 0 || q.raw_first < 0)) ||
      (q.n_comp > 0 && !comp_ok) || !rot_ok(q.n_rot, q.head_dim) || q.q == nullptr || q.sinks == nullptr ||
      q.out == nullptr || (q.n_raw + q.n_comp > 0 && q.scores == nullptr))
    return invalid_argument("cuda: sink_attention: unsupported arguments (query %d: heads %d x %d (head_dim <= "
                            "%d), raw %d of ring %lld, comp %lld, n_rot %d, %s keys; keys of one type, "
                            "that of query 0; FP8 rows need (head_dim - n_rot) %% 64 == 0)",
                            i, q.n_head, q.head_dim, kAttnMaxD, q.n_raw, static_cast<long long>(q.raw_cap),
                            static_cast<long long>(q.n_comp), q.n_rot,
                            !q.keys_one_kind() ? "mixed" : (q.stored_keys() ? "stored" : "f32"));
  return Status();
}

SinkQuery sink_query(const SinkAttentionParams& q) {
  SinkQuery sq;
  sq.p = q;
  sq.ang = angles_for(q.rope, q.n_rot);
  sq.kq_scale = 1.0f / sqrtf(static_cast<float>(q.head_dim));
  return sq;
}

std::atomic<int> g_sink{static_cast<int>(SinkKernel::kSplit)};

}  // namespace

void set_sink_kernel(SinkKernel k) { g_sink.store(static_cast<int>(k), std::memory_order_relaxed); }

SinkKernel sink_kernel() { return static_cast<SinkKernel>(g_sink.load(std::memory_order_relaxed)); }

Status sink_attention_fused(const SinkAttentionParams* p, int n, Stream stream, bool* done) {
  *done = false;
  if (n <= 0) return Status();
  const bool stored = p[0].stored_keys();
  for (int i = 0; i < n; ++i) {
    DS4_RETURN_IF_ERROR(check_sink_query(p[i], i, stored));
    if (p[i].head_dim > kFusedMaxD) return Status();  // declined: the split kernels take it
  }
  const cudaError_t e = stored ? fused_smem_optin<attn::StoredKey>() : fused_smem_optin<const float*>();
  if (e != cudaSuccess)
    return resource_error("cuda: sink_attention (fused): shared memory of %zu bytes: %s", fused_smem_bytes(kFusedMaxD),
                          cudaGetErrorString(e));
  for (int b0 = 0; b0 < n; b0 += kFusedBatch) {
    const int nb = n - b0 < kFusedBatch ? n - b0 : kFusedBatch;
    FusedBatch batch{};
    int max_heads = 0, max_dim = 0;
    for (int i = 0; i < nb; ++i) {
      batch.q[i] = sink_query(p[b0 + i]);
      max_heads = p[b0 + i].n_head > max_heads ? p[b0 + i].n_head : max_heads;
      max_dim = p[b0 + i].head_dim > max_dim ? p[b0 + i].head_dim : max_dim;
    }
    const dim3 grid(static_cast<unsigned>((max_heads + kFusedHeads - 1) / kFusedHeads), static_cast<unsigned>(nb));
    const size_t smem = fused_smem_bytes(max_dim);
    if (stored) {
      detail::launch_pdl(pdl_all(), sink_fused_kernel<attn::StoredKey>, grid, kFusedThreads, smem, stream, batch);
    } else {
      detail::launch_pdl(pdl_all(), sink_fused_kernel<const float*>, grid, kFusedThreads, smem, stream, batch);
    }
    char shapes[160];
    std::snprintf(shapes, sizeof shapes, "%d queries, heads %d x %d, raw %d, comp %lld", nb, batch.q[0].p.n_head,
                  batch.q[0].p.head_dim, batch.q[0].p.n_raw, static_cast<long long>(batch.q[0].p.n_comp));
    const Status s = launch_result("sink_attention (fused)", shapes);
    if (!s.ok()) return s;
  }
  *done = true;
  return Status();
}

Status sink_attention(const SinkAttentionParams* p, int n, Stream stream) {
  if (n >= kSinkFusedMinQueries && sink_kernel() == SinkKernel::kFused) {
    bool done = false;
    const Status s = sink_attention_fused(p, n, stream, &done);
    if (!s.ok() || done) return s;
  }
  for (int b0 = 0; b0 < n; b0 += kMaxBatch) {
    const int nb = n - b0 < kMaxBatch ? n - b0 : kMaxBatch;
    SinkBatch batch{};
    int max_heads = 0, max_slices = 0, max_dim = 0;
    int64_t max_slots = 0;
    const bool stored = p[b0].stored_keys();  // one key type per call (the target's or the drafter's)
    for (int i = 0; i < nb; ++i) {
      const SinkAttentionParams& q = p[b0 + i];
      DS4_RETURN_IF_ERROR(check_sink_query(q, b0 + i, stored));
      batch.q[i] = sink_query(q);
      max_heads = q.n_head > max_heads ? q.n_head : max_heads;
      max_dim = q.head_dim > max_dim ? q.head_dim : max_dim;
      // Slices of [0, D) cut at 32s - off (sink_combine_kernel's slice_lo).
      const int off = q.n_rot > 0 ? (q.head_dim & 1) : 0;
      const int slices = (q.head_dim + off + kCombSlice - 1) / kCombSlice;
      max_slices = slices > max_slices ? slices : max_slices;
      max_slots = q.n_raw + q.n_comp > max_slots ? q.n_raw + q.n_comp : max_slots;
    }
    char shapes[160];
    std::snprintf(shapes, sizeof shapes, "%d queries, heads %d x %d, raw %d, comp %lld", nb, batch.q[0].p.n_head,
                  batch.q[0].p.head_dim, batch.q[0].p.n_raw, static_cast<long long>(batch.q[0].p.n_comp));
    if (max_slots > 0) {
      const int64_t tiles = (max_slots + kScoreKeys - 1) / kScoreKeys;
      if (tiles > 0x7fffffff) return invalid_argument("cuda: sink_attention: too many keys (%s)", shapes);
      const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>((max_heads + kScoreHeads - 1) / kScoreHeads),
                      static_cast<unsigned>(nb));
      const size_t smem = score_smem_bytes(max_dim);
      const cudaError_t e = stored ? score_smem_optin<attn::StoredKey>() : score_smem_optin<const float*>();
      if (e != cudaSuccess)
        return resource_error("cuda: sink_attention (scores) (%s): shared memory of %zu bytes: %s", shapes,
                              score_smem_bytes(kAttnMaxD), cudaGetErrorString(e));
      if (stored) {
        detail::launch_pdl(pdl_all(), sink_scores_kernel<attn::StoredKey>, grid, kScoreThreads, smem, stream, batch);
      } else {
        detail::launch_pdl(pdl_all(), sink_scores_kernel<const float*>, grid, kScoreThreads, smem, stream, batch);
      }
      const Status s = launch_result("sink_attention (scores)", shapes);
      if (!s.ok()) return s;
    }
    const dim3 grid(static_cast<unsigned>(max_slices), static_cast<unsigned>((max_heads + kCombHeads - 1) / kCombHeads),
                    static_cast<unsigned>(nb));
    if (stored) {
      detail::launch_pdl(pdl_all(), sink_combine_kernel<attn::StoredKey>, grid, kCombThreads, 0, stream, batch);
    } else {
      detail::launch_pdl(pdl_all(), sink_combine_kernel<const float*>, grid, kCombThreads, 0, stream, batch);
    }
    const Status s = launch_result("sink_attention", shapes);
    if (!s.ok()) return s;
  }
  return Status();
}

}  // namespace ds4::cuda
