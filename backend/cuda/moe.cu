// backend/cuda/moe.cu — the router and the routed experts on the device.
//
// Role: route / moe of ops.h, bit-identical to backend/cpu/cpu_backend.cpp (route_row; moe in
// the production numerics: Q8_K activations).
// route: one block per row; the threads compute the row's probs (sqrtf(softplus)) in
// parallel (each element is one fixed expression), then one thread runs route_row's
// insertion top-k and the renormalization (ffn_math.h), which are sequential by definition.
// moe: per (row, slot) pair, independently of every other pair (the CPU's grouping of pairs
// by expert only shares weight reads; no result depends on it):
//   x rows -> Q8_K; gate / up dots against expert sel[pair] (matvec_*_sel, the r = 1 dot
//   sequence); mid = silu(min(g, c))·clamp(u, -c, c)·wt in place of gate; mid -> Q8_K; down
//   dots; out = 0, then out = out + down[slot] for slots 0..n_used-1 in slot order.
// Scratch layout (moe_device_scratch_bytes, at most backend::moe_scratch_bytes): xq
// [n_rows × n_embd/256] Q8_K, gate/mid [pairs × n_ff] f32, up [pairs × n_ff] f32, midq
// [pairs × n_ff/256] Q8_K, down [pairs × n_embd] f32; each piece 64-byte aligned.
// Invariants: no allocation, asynchronous on the stream, errors name op and shapes.
#include "backend/cuda/common.cuh"
#include "backend/row_math.h"
#include "backend/cuda/ops.h"

namespace ds4::cuda {

namespace {

using backend::GgmlType;
using quant::BlockQ8K;

constexpr int kRouteThreads = 256;
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kRouteThreads) route_kernel(
    const float* __restrict__ logits, const float* __restrict__ bias, const int32_t* __restrict__ tid2eid,
    const int32_t* __restrict__ tokens, int n_expert, int n_used, bool renorm, float scale, float* probs,
    int32_t* __restrict__ sel, float* __restrict__ wt) {
  const int64_t i = blockIdx.x;
  const float* lg = logits + i * n_expert;
  float* pr = probs + i * n_expert;
  for (int e = threadIdx.x; e < n_expert; e += blockDim.x) pr[e] = backend::rowmath::route_prob(lg[e]);
  __syncthreads();
  if (threadIdx.x != 0) return;
  int32_t* s = sel + i * n_used;
  float* w = wt + i * n_used;
  if (tid2eid != nullptr) {
    bool ok = true;
    for (int j = 0; j < n_used; ++j) {
      s[j] = tid2eid[static_cast<int64_t>(tokens[i]) * n_used + j];
      ok = ok && s[j] >= 0 && s[j] < n_expert;
    }
    if (!ok) {  // a corrupt hash table: NaN weights rather than a wild read
      for (int j = 0; j < n_used; ++j) w[j] = __int_as_float(0x7fffffff);
      return;
    }
  } else {
    backend::rowmath::route_select(pr, bias, n_expert, n_used, s);
  }
  backend::rowmath::route_weights(pr, s, n_used, renorm, scale, w);
}

// grid (n_pairs, chunks of n_ff): g[q][r] = silu(min(g, c))·clamp(u, -c, c)·wt[q], in place.
__global__ void __launch_bounds__(kThreads) moe_mid_kernel(float* g, const float* __restrict__ u,
                                                           const float* __restrict__ wt, int64_t n_ff, float c) {
  const int64_t q = blockIdx.x;
  const int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (r >= n_ff) return;
  const float w = wt[q];
  g[q * n_ff + r] = backend::rowmath::moe_mid_value(g[q * n_ff + r], u[q * n_ff + r], c, w);
}

// grid (n_rows, chunks of n_embd): out[i][o] = 0, then out = out + down[i·U + s][o], s in order.
__global__ void __launch_bounds__(kThreads) moe_sum_kernel(const float* __restrict__ down, int n_used,
                                                           int64_t n_embd, float* __restrict__ out) {
  const int64_t i = blockIdx.x;
  const int64_t o = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (o >= n_embd) return;
  float acc = 0.0f;
  for (int s = 0; s < n_used; ++s) acc = acc + down[(i * n_used + s) * n_embd + o];
  out[i * n_embd + o] = acc;
}

size_t align64(size_t b) { return (b + 63) / 64 * 64; }

struct MoeLayout {
  size_t xq, gate, up, midq, down, total;  // byte offsets from the 64-aligned scratch start
};

MoeLayout moe_layout(int64_t n_embd, int64_t n_ff, int n_used, int n_rows) {
  const size_t pairs = static_cast<size_t>(n_used) * static_cast<size_t>(n_rows);
  const size_t xb = static_cast<size_t>(n_embd / quant::kQKK), mb = static_cast<size_t>(n_ff / quant::kQKK);
  MoeLayout l{};
  size_t at = 0;
  l.xq = at;
  at = align64(at + static_cast<size_t>(n_rows) * xb * sizeof(BlockQ8K));
  l.gate = at;
  at = align64(at + pairs * static_cast<size_t>(n_ff) * sizeof(float));
  l.up = at;
  at = align64(at + pairs * static_cast<size_t>(n_ff) * sizeof(float));
  l.midq = at;
  at = align64(at + pairs * mb * sizeof(BlockQ8K));
  l.down = at;
  at = align64(at + pairs * static_cast<size_t>(n_embd) * sizeof(float));
  l.total = at + 64;  // room to align an unaligned scratch start
  return l;
}

bool expert_type_supported(GgmlType t) {
  return t == GgmlType::kIQ2_XXS || t == GgmlType::kQ2_K || t == GgmlType::kQ4_K;
}

// y[q] = expert sel[q] of m · x row q / x_div, on the matvec of m's type.
Status expert_matvec(const backend::ExpertMatrix& m, const int32_t* sel, int n_pairs, const BlockQ8K* x,
                     int64_t xs, int x_div, float* y, int64_t ys, Stream stream) {
  const ExpertWeights w{m.data, m.row_bytes, m.expert_bytes(), m.n_in, m.n_out, m.n_expert};
  switch (m.type) {
    case GgmlType::kIQ2_XXS:
      return matvec_iq2_xxs_sel(w, sel, n_pairs, x, xs, x_div, y, ys, stream);
    case GgmlType::kQ2_K:
      return matvec_q2_k_sel(w, sel, n_pairs, x, xs, x_div, y, ys, stream);
    case GgmlType::kQ4_K:
      return matvec_q4_k_sel(w, sel, n_pairs, x, xs, x_div, y, ys, stream);
    default:
      return unsupported("cuda: moe: expert weight type %u is not supported (iq2_xxs, q2_K, q4_K)",
                         static_cast<unsigned>(m.type));
  }
}

}  // namespace

size_t moe_device_scratch_bytes(int64_t n_embd, int64_t n_ff, int n_used, int n_rows) {
  return moe_layout(n_embd, n_ff, n_used, n_rows).total;
}

Status route(const backend::RouteParams& p, Stream stream) {
  if (p.n_rows < 0 || p.n_expert <= 0 || p.n_used < 1 || p.n_used > backend::rowmath::kMaxUsed || p.n_used > p.n_expert ||
      (p.tid2eid != nullptr && p.tokens == nullptr))
    return invalid_argument("cuda: route: bad shape (rows %d, n_expert %d, n_used %d: need 1 <= n_used <= "
                            "min(64, n_expert); hash rows need tokens)", p.n_rows, p.n_expert, p.n_used);
  if (p.n_rows == 0) return Status();
  route_kernel<<<static_cast<unsigned>(p.n_rows), kRouteThreads, 0, stream>>>(
      p.logits, p.bias, p.tid2eid, p.tokens, p.n_expert, p.n_used, p.renorm, p.scale, p.probs, p.sel, p.wt);
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
  for (const backend::ExpertMatrix* m : {&p.gate, &p.up, &p.down}) {
    if (!expert_type_supported(m->type))
      return unsupported("cuda: moe: expert weight type %u is not supported (iq2_xxs, q2_K, q4_K)",
                         static_cast<unsigned>(m->type));
  }
  if (p.n_rows == 0) return Status();
  const int n_pairs = U * p.n_rows;
  const int64_t xb = n_embd / quant::kQKK, mb = n_ff / quant::kQKK;
  const MoeLayout l = moe_layout(n_embd, n_ff, U, p.n_rows);
  const uintptr_t s0 = (reinterpret_cast<uintptr_t>(p.scratch) + 63) & ~uintptr_t{63};
  auto* xq = reinterpret_cast<BlockQ8K*>(s0 + l.xq);
  auto* gate = reinterpret_cast<float*>(s0 + l.gate);
  auto* up = reinterpret_cast<float*>(s0 + l.up);
  auto* midq = reinterpret_cast<BlockQ8K*>(s0 + l.midq);
  auto* down = reinterpret_cast<float*>(s0 + l.down);

  if (Status s = quantize_q8_k_act(p.x, n_embd, p.n_rows, n_embd, xq, xb, stream); !s.ok()) return s;
  if (Status s = expert_matvec(p.gate, p.sel, n_pairs, xq, xb, U, gate, n_ff, stream); !s.ok()) return s;
  if (Status s = expert_matvec(p.up, p.sel, n_pairs, xq, xb, U, up, n_ff, stream); !s.ok()) return s;
  const dim3 mid_grid(static_cast<unsigned>(n_pairs), static_cast<unsigned>((n_ff + kThreads - 1) / kThreads));
  moe_mid_kernel<<<mid_grid, kThreads, 0, stream>>>(gate, up, p.wt, n_ff, p.clamp);
  if (Status s = launch_status("moe (mid)", n_embd, n_ff, p.n_rows); !s.ok()) return s;
  if (Status s = quantize_q8_k_act(gate, n_ff, n_pairs, n_ff, midq, mb, stream); !s.ok()) return s;
  if (Status s = expert_matvec(p.down, p.sel, n_pairs, midq, mb, 1, down, n_embd, stream); !s.ok()) return s;
  const dim3 sum_grid(static_cast<unsigned>(p.n_rows), static_cast<unsigned>((n_embd + kThreads - 1) / kThreads));
  moe_sum_kernel<<<sum_grid, kThreads, 0, stream>>>(down, U, n_embd, p.out);
  return launch_status("moe (sum)", n_ff, n_embd, p.n_rows);
}

}  // namespace ds4::cuda
