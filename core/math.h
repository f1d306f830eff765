// core/math.h — scalar numeric definitions shared by the backend's ops and host-side decisions
// (e.g. DSpark's confidence gate on a downloaded logit), so neither needs the other's code.
#pragma once

#include <cmath>

namespace ds4 {

// §3.9. sigmoid_stable: x >= 0 gives 1 / (1 + expf(-x)), otherwise expf(x) / (1 + expf(x)).
// Both forms come from the one exp (argument selected without a branch; NaN keeps x as is)
// and the result is selected afterwards: a branch on the sign mispredicts on random inputs.
// Inline so that silu loops (SwiGLU, MoE) do not pay a call per element.
inline float sigmoid_stable(float x) {
  const bool nonneg = x >= 0.0f;
  const float e = expf(nonneg ? -x : x);
  const float d = 1.0f + e;
  const float pos = 1.0f / d;
  const float neg = e / d;
  return nonneg ? pos : neg;
}

}  // namespace ds4
