// backend/cuda/moe.cu — the router and the routed experts on the device.
//
// Role: route / moe of ops.h, bit-identical to backend/cpu/cpu_backend.cpp (route_row; moe in
// the production numerics: Q8_K activations).
// route: one block per row; the threads compute the row's probs (sqrtf(softplus)) and scores
// in parallel (each element is one fixed expression) into shared memory, then ranks the experts
// (the insertion top-k of route_row equals the stable descending order when no score is NaN):
// a rank inside each 32-expert tile on its warp, then the global rank among the tiles' top
// candidates only (a row with a NaN score runs route_select itself on one thread), and one
// thread runs the renormalization (row_math.h), sequential by definition.
// moe: four launches, each pair (row, slot) independent of every other (the CPU's grouping of
// pairs by expert only shares weight reads; no result depends on it):
//   x rows -> Q8_K (once per row, shared by the row's slots); expert_gate_up: per pair and
//   output row, the gate and up dots of expert sel[pair] and mid = silu(min(g, c))·clamp(u,
//   -c, c)·wt; mid -> Q8_K; expert_down_sum: per row and output element, the down dot of each
//   slot, summed from 0 in slot order (the CPU's out = 0, out = out + down[slot]).
// Blocks are ordered pair- (row-) fastest, so the rows of a call that share an expert read
// its weight rows at about the same time (the second read mostly hits the L2).
// n_rows >= 2 under MoeRowsKernel::kGrouped (the backend's default) or kTensor: moe_rows.cu
// instead, the pairs grouped by expert on the device, each touched expert read once per call
// (same bits).
// Scratch layout (moe_device_scratch_bytes, at most backend::moe_scratch_bytes): xq
// [n_rows × n_embd/256] Q8_K, mid [pairs × n_ff] f32, midq [pairs × n_ff/256] Q8_K; each
// piece 64-byte aligned.
// Invariants: no allocation, asynchronous on the stream, errors name op and shapes.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/moe_rows.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/pdl.cuh"
#include "backend/row_math.h"

namespace ds4::cuda {

namespace {

using backend::GgmlType;
using quant::BlockQ8K;

constexpr int kRouteThreads = 256;
constexpr int kRouteMaxExpert = 4096;  // the row's probs and scores in 32 KB of shared memory
constexpr int kRouteMaxCand = 1024;    // candidate slots of the two-pass top-k (4 KB)

__global__ void __launch_bounds__(kRouteThreads) route_kernel(
    const float* __restrict__ logits, const float* __restrict__ bias, const int32_t* __restrict__ tid2eid,
    const int32_t* __restrict__ tokens, int n_expert, int n_used, bool renorm, float scale, float* probs,
    int32_t* __restrict__ sel, float* __restrict__ wt) {
  detail::pdl_enter();                   // wait for the kernel before, then let the next one launch (pdl.cuh)
  extern __shared__ float route_smem[];  // [n_expert] probs, [n_expert] scores
  float* sp = route_smem;
  float* sc = route_smem + n_expert;
  __shared__ int32_t ssel[backend::rowmath::kMaxUsed];
  __shared__ int32_t scand[kRouteMaxCand];  // candidate expert per slot, -1: none
  __shared__ int has_nan;
  const int64_t i = blockIdx.x;
  const float* lg = logits + i * n_expert;
  float* pr = probs + i * n_expert;
  if (threadIdx.x == 0) has_nan = 0;
  __syncthreads();
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {
    const float p = backend::rowmath::route_prob(lg[e]);
    pr[e] = p;
    sp[e] = p;
    const float v = bias != nullptr ? p + bias[e] : p;  // route_select's score expression
    sc[e] = v;
    if (v != v) has_nan = 1;
  }
  __syncthreads();
  int32_t* s = sel + i * n_used;
  float* w = wt + i * n_used;
  if (tid2eid == nullptr && !has_nan) {
    // Without NaN the scores are totally preordered, and route_select's insertion top-k is the
    // stable descending order's first n_used: expert e lands in slot rank(e) = #{f : f beats e}
    // (sc[f] > sc[e], or equal and f < e) when that is < n_used. Two passes instead of every
    // expert scanning all others: (1) each warp ranks the experts of a 32-expert tile inside
    // the tile (one shuffle per expert of the tile); those with tile rank < t_used = min(n_used,
    // 32) are the candidates, slot tile·t_used + tile rank. (2) each candidate counts the
    // candidates that beat it. Every expert that beats a top-n_used expert is itself top-n_used,
    // hence a candidate: the count is rank(e) whenever rank(e) < n_used, and >= n_used otherwise
    // (the n_used top experts all beat e and are all candidates).
    const int t_used = n_used < 32 ? n_used : 32;
    const int tiles = (n_expert + 31) / 32;
    const int slots = tiles * t_used;
    if (slots <= kRouteMaxCand) {
      const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
      for (int t = warp; t < tiles; t += kRouteThreads / 32) {
        const int e = t * 32 + lane;
        const bool live = e < n_expert;
        const float v = live ? sc[e] : 0.0f;
        int rank = 0;
#pragma unroll 8
        for (int k = 0; k < 32; ++k) {
          const float fv = __shfl_sync(detail::kFullMask, v, k);
          rank += (t * 32 + k < n_expert && (fv > v || (fv == v && k < lane))) ? 1 : 0;
        }
        if (lane < t_used) scand[t * t_used + lane] = -1;  // a tile of fewer than t_used experts
        __syncwarp();
        if (live && rank < t_used) scand[t * t_used + rank] = e;
      }
      __syncthreads();
      for (int c = threadIdx.x; c < slots; c += blockDim.x) {
        const int e = scand[c];
        if (e < 0) continue;
        const float v = sc[e];
        int rank = 0;
#pragma unroll 4
        for (int d = 0; d < slots; ++d) {
          const int f = scand[d];
          rank += (f >= 0 && (sc[f] > v || (sc[f] == v && f < e))) ? 1 : 0;
        }
        if (rank < n_used) ssel[rank] = e;
      }
    } else {
      for (int e = threadIdx.x; e < n_expert; e += blockDim.x) {  // every expert against all
        const float v = sc[e];
        int rank = 0;
        for (int f = 0; f < n_expert && rank < n_used; ++f) rank += (sc[f] > v || (sc[f] == v && f < e)) ? 1 : 0;
        if (rank < n_used) ssel[rank] = e;
      }
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int j = 0; j < n_used; ++j) s[j] = ssel[j];
    backend::rowmath::route_weights(sp, ssel, n_used, renorm, scale, w);
    return;
  }
  if (threadIdx.x != 0) return;
  int32_t ls[backend::rowmath::kMaxUsed];
  if (tid2eid != nullptr) {
    bool ok = true;
    for (int j = 0; j < n_used; ++j) {
      ls[j] = tid2eid[static_cast<int64_t>(tokens[i]) * n_used + j];
      ok = ok && ls[j] >= 0 && ls[j] < n_expert;
    }
    if (!ok) {  // a corrupt hash table: NaN weights rather than a wild read
      for (int j = 0; j < n_used; ++j) s[j] = ls[j], w[j] = __int_as_float(0x7fffffff);
      return;
    }
  } else {
    // A NaN score: route_select's own sequential insertion (NaN compares false everywhere).
    backend::rowmath::route_select(sp, bias, n_expert, n_used, ls);
  }
  for (int j = 0; j < n_used; ++j) s[j] = ls[j];
  backend::rowmath::route_weights(sp, ls, n_used, renorm, scale, w);
}

size_t align64(size_t b) { return (b + 63) / 64 * 64; }

// The fused kernels' format of an expert matrix; false when they have none.
bool expert_format(GgmlType t, ExpertFormat* f) {
  switch (t) {
    case GgmlType::kIQ2_XXS: *f = ExpertFormat::kIQ2_XXS; return true;
    case GgmlType::kQ2_K: *f = ExpertFormat::kQ2_K; return true;
    case GgmlType::kQ4_K: *f = ExpertFormat::kQ4_K; return true;
    default: return false;
  }
}

ExpertWeights expert_weights(const backend::ExpertMatrix& m) {
  return ExpertWeights{m.data, m.row_bytes, m.expert_bytes(), m.n_in, m.n_out, m.n_expert};
}

}  // namespace

MoeLayout moe_layout(int64_t n_embd, int64_t n_ff, int n_used, int n_rows) {
  const size_t pairs = static_cast<size_t>(n_used) * static_cast<size_t>(n_rows);
  const size_t xb = static_cast<size_t>(n_embd / quant::kQKK), mb = static_cast<size_t>(n_ff / quant::kQKK);
  MoeLayout l{};
  size_t at = 0;
  l.xq = at;
  at = align64(at + static_cast<size_t>(n_rows) * xb * sizeof(BlockQ8K));
  l.mid = at;
  at = align64(at + pairs * static_cast<size_t>(n_ff) * sizeof(float));
  l.midq = at;
  at = align64(at + pairs * mb * sizeof(BlockQ8K));
  l.total = at + 64;  // room to align an unaligned scratch start
  return l;
}

size_t moe_device_scratch_bytes(int64_t n_embd, int64_t n_ff, int n_used, int n_rows) {
  const size_t pairs_path = moe_layout(n_embd, n_ff, n_used, n_rows).total;
  if (n_rows < 2) return pairs_path;
  return std::max(pairs_path, moe_rows_scratch_bytes(n_embd, n_ff, n_used, n_rows));
}

Status route(const backend::RouteParams& p, Stream stream) {
  if (p.n_rows < 0 || p.n_expert <= 0 || p.n_expert > kRouteMaxExpert || p.n_used < 1 ||
      p.n_used > backend::rowmath::kMaxUsed || p.n_used > p.n_expert ||
      (p.tid2eid != nullptr && p.tokens == nullptr))
    return invalid_argument("cuda: route: bad shape (rows %d, n_expert %d, n_used %d: need 1 <= n_used <= "
                            "min(64, n_expert), n_expert <= 4096; hash rows need tokens)", p.n_rows, p.n_expert, p.n_used);
  if (p.n_rows == 0) return Status();
  detail::launch_pdl(pdl_all(), route_kernel, static_cast<unsigned>(p.n_rows), kRouteThreads,
                     2 * static_cast<size_t>(p.n_expert) * sizeof(float), stream, p.logits, p.bias, p.tid2eid, p.tokens,
                     p.n_expert, p.n_used, p.renorm, p.scale, p.probs, p.sel, p.wt);
  return launch_status("route", p.n_expert, p.n_used, p.n_rows);
}

Status moe(const backend::MoeParams& p, Stream stream) {
  const int64_t n_embd = p.gate.n_in;
  const int64_t n_ff = p.gate.n_out;
  const int U = p.n_used;
  const bool shapes_ok = n_embd > 0 && n_ff > 0 && n_embd % quant::kQKK == 0 && n_ff % quant::kQKK == 0 &&
                         p.up.n_in == n_embd && p.up.n_out == n_ff && p.down.n_in == n_ff &&
                         p.down.n_out == n_embd && U >= 1 && p.n_rows >= 0 &&
                         static_cast<int64_t>(U) * p.n_rows <= INT32_MAX;
  if (!shapes_ok)
    return invalid_argument("cuda: moe: bad shape (gate [%lld -> %lld], up [%lld -> %lld], down [%lld -> %lld], "
                            "n_used %d, rows %d: n_embd and n_ff multiples of 256, up like gate, down the "
                            "reverse)", static_cast<long long>(p.gate.n_in), static_cast<long long>(p.gate.n_out),
                            static_cast<long long>(p.up.n_in), static_cast<long long>(p.up.n_out),
                            static_cast<long long>(p.down.n_in), static_cast<long long>(p.down.n_out), U,
                            p.n_rows);
  ExpertFormat f_gu{}, f_down{};
  if (!expert_format(p.gate.type, &f_gu) || !expert_format(p.down.type, &f_down) || p.up.type != p.gate.type)
    return unsupported("cuda: moe: expert weight types gate %u, up %u, down %u are not supported (iq2_xxs, q2_K, "
                       "q4_K; up the type of gate)", static_cast<unsigned>(p.gate.type),
                       static_cast<unsigned>(p.up.type), static_cast<unsigned>(p.down.type));
  if (p.n_rows == 0) return Status();
  if (p.n_rows >= 2 && moe_rows_kernel() != MoeRowsKernel::kPairs) {  // moe_rows.cu: grouped by expert
    bool done = false;
    Status s = moe_rows_try(p, f_gu, f_down, stream, &done);
    if (!s.ok() || done) return s;
  }
  const int n_pairs = U * p.n_rows;
  const int64_t xb = n_embd / quant::kQKK, mb = n_ff / quant::kQKK;
  const MoeLayout l = moe_layout(n_embd, n_ff, U, p.n_rows);
  const uintptr_t s0 = (reinterpret_cast<uintptr_t>(p.scratch) + 63) & ~uintptr_t{63};
  auto* xq = reinterpret_cast<BlockQ8K*>(s0 + l.xq);
  auto* mid = reinterpret_cast<float*>(s0 + l.mid);
  auto* midq = reinterpret_cast<BlockQ8K*>(s0 + l.midq);

  if (Status s = quantize_q8_k_act(p.x, n_embd, p.n_rows, n_embd, xq, xb, stream); !s.ok()) return s;
  if (Status s = expert_gate_up(f_gu, expert_weights(p.gate), expert_weights(p.up), p.sel, p.wt, p.n_rows, U, xq,
                                p.clamp, mid, stream);
      !s.ok())
    return s;
  if (Status s = quantize_q8_k_act(mid, n_ff, n_pairs, n_ff, midq, mb, stream); !s.ok()) return s;
  return expert_down_sum(f_down, expert_weights(p.down), p.sel, p.n_rows, U, midq, p.add, p.out, stream);
}

}  // namespace ds4::cuda
