// backend/row_math.h — the per-element and per-row math of the SwiGLU, router and MoE ops,
// written once for the host and the device (DS4_HD): the CPU backend's router (route_row) and
// the CUDA kernels run these very functions.
//
// Role: each helper spells out the op's expression operation by operation (ds4-architecture.md
// §4.6), with the transcendentals of core/detmath.h.
// Invariants:
//  * Same float operations in the same order as the CPU per output; no FMA (the CUDA folder
//    builds with --fmad=false, the host with -ffp-contract=off); '/' and sqrtf are IEEE.
//  * std::min / std::max semantics (NaN handling) are reproduced by std_min / std_max.
//  * No allocation, no library calls besides sqrtf; n_hc <= kMaxHc, n_used <= kMaxUsed.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/detmath.h"

namespace ds4::backend::rowmath {

inline constexpr int kMaxHc = 16;    // HC streams (cpu_ops' stack arrays hold 16)
inline constexpr int kMaxUsed = 64;  // router slots (route_row's best[64])

// std::min(a, b) is (b < a) ? b : a; std::max(a, b) is (a < b) ? b : a (NaN: first argument).
DS4_HD float std_min(float a, float b) { return (b < a) ? b : a; }
DS4_HD float std_max(float a, float b) { return (a < b) ? b : a; }

// SwiGLU with clamp (shared expert): silu(min(g, c)) · min(max(u, -c), c).
DS4_HD float swiglu_value(float g, float u, float c) {
  const float gv = std_min(g, c);
  const float uv = std_min(std_max(u, -c), c);
  return detmath::silu_f32(gv) * uv;
}

// Routed-expert mid value: silu(min(g, c)) · clamp(u, -c, c) · w, left to right.
DS4_HD float moe_mid_value(float g, float u, float c, float w) {
  const float gv = std_min(g, c);
  const float uv = std_min(std_max(u, -c), c);
  return detmath::silu_f32(gv) * uv * w;
}

// Router score of one expert: sqrtf(softplus(logit)).
DS4_HD float route_prob(float logit) { return sqrtf(detmath::softplus_f32(logit)); }

// Insertion top-k of route_row: experts in id order, each inserted before the first slot with
// a strictly smaller score (ties keep the lower id first); sel[0..u) ends in descending order.
// score(e) = probs[e] (+ bias[e] when bias is not null). u <= kMaxUsed, u <= x.
DS4_HD void route_select(const float* probs, const float* bias, int x, int u, int32_t* sel) {
  float best[kMaxUsed];
  int cnt = 0;
  for (int e = 0; e < x; ++e) {
    const float sc = bias != nullptr ? probs[e] + bias[e] : probs[e];
    int at = cnt;
    for (int j = 0; j < cnt; ++j) {
      if (best[j] < sc) {
        at = j;
        break;
      }
    }
    if (at >= u) continue;
    for (int j = (cnt < u - 1 ? cnt : u - 1); j > at; --j) {
      best[j] = best[j - 1];
      sel[j] = sel[j - 1];
    }
    best[at] = sc;
    sel[at] = e;
    if (cnt < u) ++cnt;
  }
}

// Router weights of one row: wt[j] = probs[sel[j]], renormalized by max(Σ wt, 2^-14) in slot
// order when renorm, then × scale.
DS4_HD void route_weights(const float* probs, const int32_t* sel, int u, bool renorm, float scale, float* wt) {
  float sum = 0.0f;
  for (int j = 0; j < u; ++j) {
    wt[j] = probs[sel[j]];
    sum += wt[j];
  }
  if (renorm) {
    const float denom = std_max(sum, 6.103515625e-5f);
    for (int j = 0; j < u; ++j) wt[j] = wt[j] / denom * scale;
  } else {
    for (int j = 0; j < u; ++j) wt[j] = wt[j] * scale;
  }
}

}  // namespace ds4::backend::rowmath
