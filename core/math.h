// core/math.h — scalar numeric definitions shared by the backend's ops and host-side decisions
// (e.g. DSpark's confidence gate on a downloaded logit), so neither needs the other's code.
#pragma once

#include "core/detmath.h"

namespace ds4 {

// §3.9. sigmoid_stable: x >= 0 gives 1 / (1 + e^-x), otherwise e^x / (1 + e^x), from the one
// exp of core/detmath.h (the same bits on the host and on every backend's device). Kept under
// this name for its users (SiLU, the HC collapse weights, DSpark's host-side confidence gate).
inline float sigmoid_stable(float x) { return detmath::sigmoid_f32(x); }

}  // namespace ds4
