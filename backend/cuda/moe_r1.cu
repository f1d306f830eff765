// backend/cuda/moe_r1.cu — the routed experts of ONE token row (decode, issue #30):
// expert_gate_up_r1 / expert_down_sum_r1 of moe_r1.h and the MoeR1Kernel choice.
//
// Why: the warp kernels of matvec_quant.cu (one warp per output row, one stage, then exit)
// reach ~700-800 GB/s at one row: every CTA stages its activation row with 4-byte cp.async,
// every 4 weight blocks read their activation quants again from shared memory, and a warp's
// loads, decode and exit are serial phases. Here:
//   * a lane keeps ITS activation quants in registers for the whole kernel: lane (slot =
//     lane / 8, sub = lane % 8) owns group `sub` (32 quants, its two bsums, d) of super-blocks
//     slot, slot + 4, slot + 8, slot + 12 (n_in <= 16 super-blocks: Flash's 4096 and 2048);
//     one row means every output row of a slot dots the same activations;
//   * a warp copies all its weight rows (gate/up: RPW consecutive output rows of gate and of
//     up; down: TR consecutive rows of its slot's expert) with 16-byte cp.async up front, one
//     commit group per row (pair), and decodes row r as soon as group r has landed, so the
//     copies of the later rows are in flight during the decode (the grid is about one wave);
//   * the block terms of two rows (gate and up, or down rows r and r + 1) are computed by the
//     lanes in parallel (the 8 lanes of a block: exact integer parts, reduce-scattered by
//     integer shuffles so that each lane closes one term by the CPU's float expressions), then
//     lanes 0 and 1 add them in block order, each into its row's one accumulator —
//     quant::dot_*_q8_k's sequence, bit for bit (a reduce-scatter, not an all-reduce per term:
//     fewer shuffles, one float term per lane; docs/CUDA.md, stop 50);
//   * the IQ2_XXS decode reads each sign pattern's byte masks from a table staged beside the
//     grid (detail::iq2_xxs_group_isum's table form): at one row the kernel is bound by
//     instruction issue (ncu on an H100: 57% of the SMs' issue rate, 23% of DRAM bandwidth);
//   * expert_down_sum_r1: warp s of a CTA computes slot s's dots of TR output rows into shared
//     memory; thread t then adds the slots in slot order from 0 (the CPU's out = 0, out + d).
// The SwiGLU/clamp/weight expression is rowmath::moe_mid_value, as in the warp kernels; an
// expert id outside [0, n_expert) gives NaN (mid rows / the slot's dots) without a read.
// --fmad=false keeps every product and sum separately rounded.
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/moe_r1.h"
#include "backend/cuda/pdl.cuh"
#include "backend/row_math.h"
#include "quant/iq2_tables.h"

namespace ds4::cuda {

namespace {

using quant::BlockQ8K;
using detail::kFullMask;
using detail::f16_to_f32;

// The library's own default is the warp kernels; the backend selects these kernels from its
// `--cuda-moe` flag (default new, since stop 44's measurements: cuda_backend.cpp).
std::atomic<int> g_moe_r1{static_cast<int>(MoeR1Kernel::kOld)};

// quant::kIq2XxsGrid (entries 0-255) and the 128 sign patterns' byte masks (256-383, see
// detail::iq2_xxs_group_isum's table form), uploaded once per device, staged per CTA.
constexpr int kIq2Tables = kIq2DecodeTables;
__device__ uint64_t g_r1_iq2_grid[kIq2Tables];

constexpr int kGuWarps = 8;                 // gate/up: output-row groups (warps) per CTA
constexpr int kMaxBlocks = 16;              // super-blocks per row these kernels take (4 per lane)
constexpr int kStageMax = 80 * 1024;        // dynamic shared memory per CTA (weight stages)

// One lane's activations: group `sub` of blocks slot + 4k, k < KB.
template <int KB>
struct ActRegs {
  int q[KB][8];   // quants 32·sub .. 32·sub + 31, 4 per word
  float d[KB];    // the block's scale
  int32_t bs0[KB], bs1[KB];  // bsums[2·sub], bsums[2·sub + 1]
};

template <int KB>
__device__ __forceinline__ void load_act(const BlockQ8K* __restrict__ x, int nb, int slot, int sub, ActRegs<KB>& a) {
#pragma unroll
  for (int k = 0; k < KB; ++k) {
    const int b = slot + 4 * k;
    if (b < nb) {
      const BlockQ8K* blk = x + b;
      const int* q = reinterpret_cast<const int*>(blk->qs + 32 * sub);  // 4-byte aligned: qs at 4, 292-byte blocks
#pragma unroll
      for (int i = 0; i < 8; ++i) a.q[k][i] = __ldg(q + i);
      a.d[k] = __ldg(&blk->d);
      a.bs0[k] = __ldg(&blk->bsums[2 * sub]);
      a.bs1[k] = __ldg(&blk->bsums[2 * sub + 1]);
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) a.q[k][i] = 0;
      a.d[k] = 0.0f;
      a.bs0[k] = a.bs1[k] = 0;
    }
  }
}

using detail::kquant_close;

// A lane's integer parts of one block term: a = the IQ2_XXS isum or the K-quants' isum, b = the
// K-quants' summs (unused for IQ2_XXS: F::kTwo false). Sums of them over lanes are exact.
struct Ints {
  int32_t a = 0, b = 0;
};

// ---- Formats: partial() is the lane's integer part of weight block p (staged in shared
// memory) against its activation group `sub`; close() the float term the CPU adds for the
// block from the 8 lanes' summed parts and the activation scale ad (reading the block's
// scales). The integer and float operations are those of matvec_quant.cu's staged_term (the
// warp kernels' bits).
struct R1Iq2Xxs {
  static constexpr int kBlockBytes = 66;
  static constexpr bool kTables = true;
  static constexpr bool kTwo = false;
  static __device__ __forceinline__ Ints partial(const uint8_t* p, const int (&aq)[8], int32_t, int32_t, int sub,
                                                 const uint64_t* grid) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);  // 2-byte aligned
    return Ints{detail::iq2_xxs_group_isum(h + 1 + 4 * sub, aq, grid, grid + 256), 0};
  }
  static __device__ __forceinline__ float close(const uint8_t* p, float ad, Ints t) {
    const float wd = f16_to_f32(reinterpret_cast<const uint16_t*>(p)[0]);
    const float d = wd * ad;
    return d * static_cast<float>(t.a);
  }
  static __device__ __forceinline__ float finish(float acc) { return 0.125f * acc; }
};

struct R1Q2K {
  static constexpr int kBlockBytes = 84;
  static constexpr bool kTables = false;
  static constexpr bool kTwo = true;
  static __device__ __forceinline__ Ints partial(const uint8_t* p, const int (&aq)[8], int32_t bs0, int32_t bs1,
                                                 int sub, const uint64_t*) {
    const int n = sub >> 2, j = sub & 3;  // quants 128n + 32j = group sub; scales 8n + 2j = 2·sub
    const int sb = 2 * sub;
    const uint32_t* pw = reinterpret_cast<const uint32_t*>(p);  // 4-byte aligned
    const int32_t sc0 = p[sb], sc1 = p[sb + 1];
    int s0 = 0, s1 = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) s0 = __dp4a(static_cast<int>((pw[4 + 8 * n + i] >> (2 * j)) & 0x03030303u), aq[i], s0);
#pragma unroll
    for (int i = 4; i < 8; ++i) s1 = __dp4a(static_cast<int>((pw[4 + 8 * n + i] >> (2 * j)) & 0x03030303u), aq[i], s1);
    return Ints{(sc0 & 15) * s0 + (sc1 & 15) * s1, bs0 * (sc0 >> 4) + bs1 * (sc1 >> 4)};
  }
  static __device__ __forceinline__ float close(const uint8_t* p, float ad, Ints t) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    return kquant_close(ad, f16_to_f32(h[40]), f16_to_f32(h[41]), t.a, t.b);
  }
  static __device__ __forceinline__ float finish(float acc) { return acc; }
};

__device__ __forceinline__ void q4k_scale_min(const uint8_t* scales, int j, int32_t* sc, int32_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4);
    *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

struct R1Q4K {
  static constexpr int kBlockBytes = 144;
  static constexpr bool kTables = false;
  static constexpr bool kTwo = true;
  static __device__ __forceinline__ Ints partial(const uint8_t* p, const int (&aq)[8], int32_t bs0, int32_t bs1,
                                                 int sub, const uint64_t*) {
    const int j = sub;
    int32_t sc, m;
    q4k_scale_min(p + 4, j, &sc, &m);
    const uint4* qw = reinterpret_cast<const uint4*>(p + 16 + 32 * (j >> 1));  // 16-byte aligned
    const uint4 w0 = qw[0], w1 = qw[1];
    const uint32_t wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
    const int shift = 4 * (j & 1);
    int s = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) s = __dp4a(static_cast<int>((wv[i] >> shift) & 0x0f0f0f0fu), aq[i], s);
    return Ints{sc * s, m * (bs0 + bs1)};
  }
  static __device__ __forceinline__ float close(const uint8_t* p, float ad, Ints t) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    return kquant_close(ad, f16_to_f32(h[0]), f16_to_f32(h[1]), t.a, t.b);
  }
  static __device__ __forceinline__ float finish(float acc) { return acc; }
};

// lane ^ m's parts added to this lane's (every lane of the warp calls it).
template <class F>
__device__ __forceinline__ Ints add_xor(Ints v, int m) {
  v.a += __shfl_xor_sync(kFullMask, v.a, m);
  if constexpr (F::kTwo) v.b += __shfl_xor_sync(kFullMask, v.b, m);
  return v;
}

// One reduce-scatter level over the xor-m partner: of the n pairs v[i], v[i + n] the lane keeps
// v[i + n] (bit m of its lane set) or v[i], adding the partner's copy of the same value.
template <class F, int N>
__device__ __forceinline__ void scatter_level(Ints (&v)[8], int sub, int m) {
  const bool upper = (sub & m) != 0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const Ints send = upper ? v[i] : v[i + N];
    const Ints keep = upper ? v[i + N] : v[i];
    Ints got;
    got.a = __shfl_xor_sync(kFullMask, send.a, m);
    if constexpr (F::kTwo) got.b = __shfl_xor_sync(kFullMask, send.b, m);
    v[i].a = keep.a + got.a;
    v[i].b = keep.b + got.b;
  }
}

// Rows A and B (staged, nb blocks each) against the lane's activations: lane 0 returns A's
// sequential block sum, lane 1 B's (before F::finish). has_b is warp-uniform; all lanes call it.
// The lane computes the integer parts of the V = 2·KB (block k, row) terms j = 2k + row of its
// group; the 8 lanes of a block reduce-scatter them (V - 1 shuffles per part, where an all-reduce
// per term takes 3·V: exact integer sums in any order), so that lane sub ends with the whole sum
// of term j = sub >> (3 - log2 V), which it alone closes into its float term; lanes 0 and 1
// then add the terms in block order (b = 4k + s increasing), the CPU's sequence. KB is 2 or 4.
template <class F, int KB>
__device__ __forceinline__ float two_row_dots(const uint8_t* pa, const uint8_t* pb, bool has_b, const ActRegs<KB>& a,
                                              int nb, int lane, const uint64_t* grid) {
  static_assert(KB == 2 || KB == 4, "two or four blocks per lane");
  constexpr int kBB = F::kBlockBytes;
  constexpr int V = 2 * KB;
  constexpr int kShift = KB == 4 ? 0 : 1;  // 3 - log2 V
  const int sub = lane & 7, slot = lane >> 3;
  Ints v[8];
#pragma unroll
  for (int k = 0; k < KB; ++k) {
    const int b = slot + 4 * k;
    if (b < nb) {
      v[2 * k] = F::partial(pa + b * kBB, a.q[k], a.bs0[k], a.bs1[k], sub, grid);
      if (has_b) v[2 * k + 1] = F::partial(pb + b * kBB, a.q[k], a.bs0[k], a.bs1[k], sub, grid);
    }
  }
  scatter_level<F, V / 2>(v, sub, 4);
  scatter_level<F, V / 4>(v, sub, 2);
  if constexpr (V == 8) {
    scatter_level<F, 1>(v, sub, 1);
  } else {
    v[0] = add_xor<F>(v[0], 1);  // lanes sub and sub ^ 1 both hold term j
  }
  const int j = sub >> kShift, k = j >> 1, row = j & 1;
  float ad = a.d[0];
#pragma unroll
  for (int kk = 1; kk < KB; ++kk)
    if (kk == k) ad = a.d[kk];
  const int b = slot + 4 * k;
  const float t = b < nb && (row == 0 || has_b) ? F::close((row ? pb : pa) + b * kBB, ad, v[0]) : 0.0f;
  const int src = lane & 1;
  float acc = 0.0f;
#pragma unroll
  for (int kk = 0; kk < KB; ++kk) {
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const float u = __shfl_sync(kFullMask, t, 8 * s + ((2 * kk + src) << kShift));
      if (4 * kk + s < nb) acc = acc + u;  // block order: b = 4k + s increasing
    }
  }
  return acc;
}

// The slot's expert id, read BEFORE the kernel's PDL wait so that its weight copies overlap the
// kernel before it. Sound because of the launch order (moe.cu): the router that writes sel ran
// at least two launches earlier (a quantize launch between it and gate/up; gate/up and another
// before down), and each launch since began only after its own wait on the one before it, so
// sel is complete and in L2 when this grid starts; read through L2 (ld.global.cg), never from
// an SM's L1, which may still hold the last layer's ids.
__device__ __forceinline__ int32_t early_sel(const int32_t* p) { return __ldcg(p); }

// cp.async.wait_group with a run-time count n <= 7 (folded to one constant after unrolling).
__device__ __forceinline__ void wait_pending(int n) {
  switch (n) {
    case 0: cp_async_wait_group<0>(); break;
    case 1: cp_async_wait_group<1>(); break;
    case 2: cp_async_wait_group<2>(); break;
    case 3: cp_async_wait_group<3>(); break;
    case 4: cp_async_wait_group<4>(); break;
    case 5: cp_async_wait_group<5>(); break;
    case 6: cp_async_wait_group<6>(); break;
    default: cp_async_wait_group<7>(); break;
  }
}

struct R1Args {
  const uint8_t* data;
  size_t row_bytes, expert_bytes;
};

template <class F>
__device__ __forceinline__ void stage_grid(uint64_t* grid_s) {
  if constexpr (F::kTables) {
    for (int i = threadIdx.x; i < kIq2Tables; i += blockDim.x) grid_s[i] = g_r1_iq2_grid[i];
  }
}

// grid (ceil(n_ff / (kGuWarps·RPW)), n_used): warp w of CTA x computes output rows
// o0 = (x·kGuWarps + w)·RPW .. o0 + RPW - 1 of slot q = blockIdx.y:
// mid[q·n_ff + o] = moe_mid_value(gate dot, up dot, clamp, wt[q]). Dynamic shared memory:
// kGuWarps·RPW·2 staged rows of nb·kBlockBytes bytes (gate row r at 2r, up row r at 2r + 1).
template <class F, int KB, int RPW>
__global__ void __launch_bounds__(32 * kGuWarps) gate_up_r1_kernel(
    R1Args gate, R1Args up, int64_t n_expert, int nb, int64_t n_ff, const int32_t* __restrict__ sel,
    const float* __restrict__ wt, const BlockQ8K* __restrict__ x, float clamp, float* __restrict__ mid) {
  extern __shared__ __align__(16) uint8_t r1_smem[];
  __shared__ uint64_t grid_s[F::kTables ? kIq2Tables : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int q = blockIdx.y;
  const int64_t o0 = (static_cast<int64_t>(blockIdx.x) * kGuWarps + warp) * RPW;
  const int rs = nb * F::kBlockBytes;  // a multiple of 16 (the launcher checks)
  uint8_t* st = r1_smem + static_cast<size_t>(warp) * RPW * 2 * rs;
  const int32_t e = early_sel(sel + q);  // before the wait: the weight copies start at once
  const bool ok = e >= 0 && e < n_expert;
  if (ok) {
    const uint8_t* g0 = gate.data + static_cast<size_t>(e) * gate.expert_bytes;
    const uint8_t* u0 = up.data + static_cast<size_t>(e) * up.expert_bytes;
    const int n16 = rs / 16;
#pragma unroll
    for (int r = 0; r < RPW; ++r) {
      const int64_t o = o0 + r;
      if (o < n_ff) {
        const uint8_t* gr = g0 + static_cast<size_t>(o) * gate.row_bytes;
        const uint8_t* ur = u0 + static_cast<size_t>(o) * up.row_bytes;
        for (int i = lane; i < 2 * n16; i += 32) {
          const int m = i >= n16 ? 1 : 0;
          const int ii = i - m * n16;
          cp_async16_cg(st + (2 * r + m) * rs + 16 * ii, (m ? ur : gr) + 16 * ii);
        }
      }
      cp_async_commit();  // group r: row r's gate and up (empty past n_ff)
    }
  }
  detail::pdl_enter();  // wait for the kernel before (x's quantization), then let the next one launch
  ActRegs<KB> a;
  load_act<KB>(x, nb, lane >> 3, lane & 7, a);
  stage_grid<F>(grid_s);
  __syncthreads();  // the table; no barrier follows
  float* mq = mid + static_cast<int64_t>(q) * n_ff;
  if (!ok) {
    for (int r = 0; r < RPW; ++r)
      if (lane == 0 && o0 + r < n_ff) mq[o0 + r] = __int_as_float(0x7fffffff);
    return;
  }
  const float w = __ldg(wt + q);
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    wait_pending(RPW - 1 - r);  // groups 0..r have landed (this lane's copies)
    __syncwarp();               // ... and every lane's
    if (o0 + r < n_ff) {        // warp-uniform
      const float acc = two_row_dots<F, KB>(st + 2 * r * rs, st + (2 * r + 1) * rs, true, a, nb, lane, grid_s);
      const float v = F::finish(acc);  // lane 0: gate, lane 1: up
      const float u = __shfl_sync(kFullMask, v, 1);
      if (lane == 0) mq[o0 + r] = backend::rowmath::moe_mid_value(v, u, clamp, w);
    }
  }
}

// grid (ceil(n_embd / TR)), 32·n_used threads: warp s computes slot s's down dots of output rows
// o0 = x·TR .. o0 + TR - 1 (the TR rows of expert sel[s] staged, one commit group per row, the
// rows decoded two at a time) into ds[s][·]; then thread t < TR writes out[o0 + t] = ((0 +
// ds[0][t]) + ds[1][t]) + ... in slot order (+ add[o0 + t] after, when given). Dynamic shared
// memory: n_used·TR staged rows.
template <class F, int KB, int TR>
__global__ void __launch_bounds__(32 * kMoeR1MaxSlots) down_sum_r1_kernel(
    R1Args down, int64_t n_expert, int nb, int64_t n_embd, const int32_t* __restrict__ sel, int n_used,
    const BlockQ8K* __restrict__ midq, const float* __restrict__ add, float* __restrict__ out) {
  static_assert(TR % 2 == 0 && TR <= 8, "rows decoded in pairs; at most 8 commit groups");
  extern __shared__ __align__(16) uint8_t r1_smem[];
  __shared__ uint64_t grid_s[F::kTables ? kIq2Tables : 1];
  __shared__ float ds[kMoeR1MaxSlots][TR];
  const int lane = threadIdx.x & 31, s = threadIdx.x >> 5;
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * TR;
  const int rs = nb * F::kBlockBytes;
  uint8_t* st = r1_smem + static_cast<size_t>(s) * TR * rs;
  const int32_t e = early_sel(sel + s);  // before the wait: the weight copies start at once
  const bool ok = e >= 0 && e < n_expert;
  if (ok) {
    const uint8_t* d0 = down.data + static_cast<size_t>(e) * down.expert_bytes;
    const int n16 = rs / 16;
#pragma unroll
    for (int r = 0; r < TR; ++r) {
      const int64_t o = o0 + r;
      if (o < n_embd) {
        const uint8_t* dr = d0 + static_cast<size_t>(o) * down.row_bytes;
        for (int i = lane; i < n16; i += 32) cp_async16_cg(st + r * rs + 16 * i, dr + 16 * i);
      }
      cp_async_commit();  // group r: row r (empty past n_embd)
    }
  }
  detail::pdl_enter();  // wait for the kernel before (mid's quantization), then let the next one launch
  ActRegs<KB> a;
  load_act<KB>(midq + static_cast<int64_t>(s) * nb, nb, lane >> 3, lane & 7, a);
  stage_grid<F>(grid_s);
  __syncthreads();  // the table
  if (ok) {
#pragma unroll
    for (int r = 0; r < TR; r += 2) {
      wait_pending(TR - 2 - r);  // groups 0..r + 1 have landed
      __syncwarp();
      if (o0 + r < n_embd) {  // warp-uniform
        const bool has_b = o0 + r + 1 < n_embd;
        const float acc = two_row_dots<F, KB>(st + r * rs, st + (r + 1) * rs, has_b, a, nb, lane, grid_s);
        if (lane < 2) ds[s][r + lane] = F::finish(acc);  // lane 1 of a missing row B: never read
      }
    }
  } else if (lane < TR) {
    ds[s][lane] = __int_as_float(0x7fffffff);
  }
  __syncthreads();
  const int t = threadIdx.x;
  if (t < TR && o0 + t < n_embd) {
    float sum = 0.0f;
    for (int k = 0; k < n_used; ++k) sum = sum + ds[k][t];
    out[o0 + t] = add != nullptr ? sum + add[o0 + t] : sum;
  }
}

}  // namespace

void iq2_decode_tables(uint64_t (&tables)[kIq2DecodeTables]) {
  for (int i = 0; i < 256; ++i) tables[i] = quant::kIq2XxsGrid[i];
  for (int si = 0; si < 128; ++si) {  // bit b of the sign byte -> byte mask b
    const unsigned sv = quant::kIq2Signs[si];
    uint64_t m = 0;
    for (int b = 0; b < 8; ++b)
      if ((sv >> b) & 1u) m |= uint64_t{0xff} << (8 * b);
    tables[256 + si] = m;
  }
}

namespace {

Status upload_r1_tables() {
  static bool done[64] = {};  // once per device; a failure is reported, not cached
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
    return resource_error("cuda: expert_gate_up_r1: no current device");
  if (done[dev]) return Status();
  uint64_t tables[kIq2Tables];
  iq2_decode_tables(tables);
  if (cudaMemcpyToSymbol(g_r1_iq2_grid, tables, sizeof(tables)) != cudaSuccess)
    return resource_error("cuda: expert r1: cannot upload the IQ2_XXS grid: %s", cudaGetErrorString(cudaGetLastError()));
  // The copy from pageable memory may still be in flight when it returns, and the backend's
  // stream does not wait for the legacy default stream: wait here, once per device.
  if (cudaDeviceSynchronize() != cudaSuccess)
    return resource_error("%s: the IQ2_XXS table upload failed: %s", "cuda: expert r1", cudaGetErrorString(cudaGetLastError()));
  done[dev] = true;
  return Status();
}

// Lets `kernel` (the instantiation <F, KB, N> of the gate/up or, kDown, the down kernel) take
// kStageMax bytes of dynamic shared memory (once per instantiation and device).
template <class F, int KB, int N, bool kDown, class K>
Status r1_optin(K kernel, const char* op) {
  static bool done[64] = {};  // a failure is reported, not cached
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return resource_error("cuda: %s: no current device", op);
  if (done[dev]) return Status();
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kStageMax) != cudaSuccess)
    return resource_error("cuda: %s: cannot opt in to %d bytes of shared memory: %s", op, kStageMax,
                          cudaGetErrorString(cudaGetLastError()));
  done[dev] = true;
  return Status();
}

// The shapes these kernels take (else the warp kernels run the call): the checks of
// matvec_quant.cu's check_experts, 16-byte aligned rows, nb <= kMaxBlocks.
template <class F>
bool r1_takes(const ExpertWeights& w, int64_t n_in, int64_t n_out) {
  if (w.n_in != n_in || w.n_out != n_out || n_in <= 0 || n_in % quant::kQKK != 0 || n_out <= 0 || w.n_expert <= 0)
    return false;
  const int64_t nb = n_in / quant::kQKK;
  const size_t rs = static_cast<size_t>(nb) * F::kBlockBytes;
  const uintptr_t base = reinterpret_cast<uintptr_t>(w.data);
  return nb <= kMaxBlocks && w.row_bytes >= rs && w.expert_bytes >= w.row_bytes * static_cast<size_t>(n_out) &&
         base % 16 == 0 && w.row_bytes % 16 == 0 && w.expert_bytes % 16 == 0 && rs % 16 == 0;
}

template <class F, int KB, int RPW>
Status launch_gate_up_r1(const ExpertWeights& gate, const ExpertWeights& up, const int32_t* sel, const float* wt,
                         int n_used, const BlockQ8K* x, float clamp, float* mid, int nb, Stream stream) {
  auto kernel = gate_up_r1_kernel<F, KB, RPW>;
  if (Status s = r1_optin<F, KB, RPW, false>(kernel, "expert_gate_up"); !s.ok()) return s;
  const size_t smem = static_cast<size_t>(kGuWarps) * RPW * 2 * nb * F::kBlockBytes;
  const dim3 grid(static_cast<unsigned>((gate.n_out + kGuWarps * RPW - 1) / (kGuWarps * RPW)),
                  static_cast<unsigned>(n_used));
  detail::launch_pdl(pdl_all(), kernel, grid, 32 * kGuWarps, smem, stream,
                     R1Args{static_cast<const uint8_t*>(gate.data), gate.row_bytes, gate.expert_bytes},
                     R1Args{static_cast<const uint8_t*>(up.data), up.row_bytes, up.expert_bytes}, gate.n_expert, nb,
                     gate.n_out, sel, wt, x, clamp, mid);
  return launch_status("expert_gate_up", gate.n_in, gate.n_out, n_used);
}

template <class F, int KB>
Status gate_up_r1_rpw(const ExpertWeights& gate, const ExpertWeights& up, const int32_t* sel, const float* wt,
                      int n_used, const BlockQ8K* x, float clamp, float* mid, int nb, Stream stream) {
  const size_t pair = 2 * static_cast<size_t>(nb) * F::kBlockBytes * kGuWarps;  // one row pair per warp
  if (4 * pair <= kStageMax) return launch_gate_up_r1<F, KB, 4>(gate, up, sel, wt, n_used, x, clamp, mid, nb, stream);
  if (2 * pair <= kStageMax) return launch_gate_up_r1<F, KB, 2>(gate, up, sel, wt, n_used, x, clamp, mid, nb, stream);
  return launch_gate_up_r1<F, KB, 1>(gate, up, sel, wt, n_used, x, clamp, mid, nb, stream);
}

template <class F>
Status gate_up_r1(const ExpertWeights& gate, const ExpertWeights& up, const int32_t* sel, const float* wt, int n_used,
                  const BlockQ8K* x, float clamp, float* mid, Stream stream, bool* done) {
  if (!r1_takes<F>(gate, gate.n_in, gate.n_out) || !r1_takes<F>(up, gate.n_in, gate.n_out) ||
      up.n_expert != gate.n_expert || n_used < 1 || n_used > 65535 ||
      (gate.n_out + kGuWarps - 1) / kGuWarps > INT32_MAX)
    return Status();
  const int nb = static_cast<int>(gate.n_in / quant::kQKK);
  if (2 * static_cast<size_t>(nb) * F::kBlockBytes * kGuWarps > kStageMax) return Status();
  if constexpr (F::kTables) {
    if (Status s = upload_r1_tables(); !s.ok()) return s;
  }
  *done = true;
  if (nb <= 8) return gate_up_r1_rpw<F, 2>(gate, up, sel, wt, n_used, x, clamp, mid, nb, stream);
  return gate_up_r1_rpw<F, 4>(gate, up, sel, wt, n_used, x, clamp, mid, nb, stream);
}

template <class F, int KB, int TR>
Status launch_down_r1(const ExpertWeights& down, const int32_t* sel, int n_used, const BlockQ8K* midq,
                      const float* add, float* out, int nb, Stream stream) {
  auto kernel = down_sum_r1_kernel<F, KB, TR>;
  if (Status s = r1_optin<F, KB, TR, true>(kernel, "expert_down_sum"); !s.ok()) return s;
  const size_t smem = static_cast<size_t>(n_used) * TR * nb * F::kBlockBytes;
  const unsigned grid = static_cast<unsigned>((down.n_out + TR - 1) / TR);
  detail::launch_pdl(pdl_all(), kernel, grid, 32 * n_used, smem, stream,
                     R1Args{static_cast<const uint8_t*>(down.data), down.row_bytes, down.expert_bytes}, down.n_expert,
                     nb, down.n_out, sel, n_used, midq, add, out);
  return launch_status("expert_down_sum", down.n_in, down.n_out, 1);
}

template <class F, int KB>
Status down_r1_tr(const ExpertWeights& down, const int32_t* sel, int n_used, const BlockQ8K* midq, const float* add,
                  float* out, int nb, Stream stream) {
  const size_t row = static_cast<size_t>(n_used) * nb * F::kBlockBytes;  // one output row, every slot
  if (8 * row <= kStageMax) return launch_down_r1<F, KB, 8>(down, sel, n_used, midq, add, out, nb, stream);
  if (4 * row <= kStageMax) return launch_down_r1<F, KB, 4>(down, sel, n_used, midq, add, out, nb, stream);
  return launch_down_r1<F, KB, 2>(down, sel, n_used, midq, add, out, nb, stream);
}

template <class F>
Status down_r1(const ExpertWeights& down, const int32_t* sel, int n_used, const BlockQ8K* midq, const float* add,
               float* out, Stream stream, bool* done) {
  if (!r1_takes<F>(down, down.n_in, down.n_out) || n_used < 1 || n_used > kMoeR1MaxSlots ||
      (down.n_out + 1) / 2 > INT32_MAX)
    return Status();
  const int nb = static_cast<int>(down.n_in / quant::kQKK);
  if (2 * static_cast<size_t>(n_used) * nb * F::kBlockBytes > kStageMax) return Status();
  if constexpr (F::kTables) {
    if (Status s = upload_r1_tables(); !s.ok()) return s;
  }
  *done = true;
  if (nb <= 8) return down_r1_tr<F, 2>(down, sel, n_used, midq, add, out, nb, stream);
  return down_r1_tr<F, 4>(down, sel, n_used, midq, add, out, nb, stream);
}

}  // namespace

void set_moe_r1_kernel(MoeR1Kernel k) { g_moe_r1.store(static_cast<int>(k), std::memory_order_relaxed); }
MoeR1Kernel moe_r1_kernel() { return static_cast<MoeR1Kernel>(g_moe_r1.load(std::memory_order_relaxed)); }

Status expert_gate_up_r1(ExpertFormat f, const ExpertWeights& gate, const ExpertWeights& up, const int32_t* sel,
                         const float* wt, int n_used, const BlockQ8K* x, float clamp, float* mid, Stream stream,
                         bool* done) {
  *done = false;
  switch (f) {
    case ExpertFormat::kIQ2_XXS: return gate_up_r1<R1Iq2Xxs>(gate, up, sel, wt, n_used, x, clamp, mid, stream, done);
    case ExpertFormat::kQ2_K: return gate_up_r1<R1Q2K>(gate, up, sel, wt, n_used, x, clamp, mid, stream, done);
    case ExpertFormat::kQ4_K: return gate_up_r1<R1Q4K>(gate, up, sel, wt, n_used, x, clamp, mid, stream, done);
  }
  return Status();
}

Status expert_down_sum_r1(ExpertFormat f, const ExpertWeights& down, const int32_t* sel, int n_used,
                          const BlockQ8K* midq, const float* add, float* out, Stream stream, bool* done) {
  *done = false;
  switch (f) {
    case ExpertFormat::kIQ2_XXS: return down_r1<R1Iq2Xxs>(down, sel, n_used, midq, add, out, stream, done);
    case ExpertFormat::kQ2_K: return down_r1<R1Q2K>(down, sel, n_used, midq, add, out, stream, done);
    case ExpertFormat::kQ4_K: return down_r1<R1Q4K>(down, sel, n_used, midq, add, out, stream, done);
  }
  return Status();
}

}  // namespace ds4::cuda
