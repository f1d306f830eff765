// tests/unit/quant/special_blocks.h — test inputs for the KV store tests (FP8 and FP4 stores):
// n floats in blocks of `block` values, each block of a kind picked by its index. Random values
// over a wide exponent range, or the edge cases the block round trips must keep: zeros, signed
// zeros, f32 subnormals, huge values, ±inf, NaN among values and all-NaN blocks, tiny and
// beyond-f16 blocks (kinds 0-9); kinds from 10 on are the caller's (`extra`, which returns the
// value; the random value otherwise), and bits() for comparing them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace ds4::quant::test {

// A float's bit pattern (bit-for-bit comparisons that tell NaNs and signed zeros apart).
inline uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

// Extra: float(int kind, size_t i, float v, std::mt19937& rng) for kinds >= 10: the value at
// index i of the block (v: the random value already drawn for it).
template <class Extra>
std::vector<float> special_blocks(size_t n, size_t block, int n_kinds, uint32_t kind_offset, uint32_t seed,
                                  Extra extra) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-140, 127);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(n);
  for (size_t b = 0; b < n; b += block) {
    const int kind = static_cast<int>((b / block + kind_offset) % static_cast<size_t>(n_kinds));
    const float mag = std::ldexp(1.0f, ex(rng));
    for (size_t i = 0; i < block && b + i < n; ++i) {
      float v = u(rng) * mag;
      switch (kind) {
        case 0: v = 0.0f; break;                              // all zero
        case 1: v = (i & 1) ? -0.0f : 0.0f; break;            // signed zeros
        case 2: v = u(rng) * 1e-42f; break;                   // f32 subnormals
        case 3: v = u(rng) * 3.0e38f; break;                  // huge (the largest scales)
        case 4: if (i == 5) v = inf; break;                   // one +inf: scale inf
        case 5: if (i % 7 == 0) v = -inf; break;              // -inf among values
        case 6: if (i == 9) v = nan; break;                   // NaN ignored by amax
        case 7: v = (i & 1) ? nan : -nan; break;              // all NaN
        case 8: v = u(rng) * 1e-6f; break;                    // tiny: below the min amax / f16 subnormals
        case 9: v = u(rng) * 7e4f; break;                     // beyond f16 max
        default: v = extra(kind, i, v, rng); break;
      }
      x[b + i] = v;
    }
  }
  return x;
}

}  // namespace ds4::quant::test
