// backend/cpu/detmath_x8.h — core/detmath.h's exp_f32 / sigmoid_f32 / silu_f32 on 8 lanes at
// once (GCC/Clang vector extensions), and the row kernels built on them (the KernelTable
// entries `exp_sub` and `swiglu` of the x86 tables; kernels_scalar.cpp keeps scalar loops).
//
// Role: speed only. Each lane performs exactly the IEEE operations of the scalar definition
// in the same order (the float -> double conversion, the reduction k = round(x·log2e) by the
// 1.5·2^52 shift, the degree-13 Horner polynomial, the exact ·2^k, the one rounding to float,
// then the float sigmoid), so every lane's bits equal detmath's; only the instruction
// selection differs. 2^k is built from the integer that the shift leaves in the low bits of
// x·log2e + 1.5·2^52 (bits(that) - bits(1.5·2^52) = k exactly for |k| < 2^51), the same k
// the scalar code converts with static_cast<int>. Lanes outside the finite range compute on
// a clamped argument and are replaced by the scalar code's special results (NaN, +inf, +0).
// Invariant: bit-identical to detmath::silu_f32 for every float input (NaN payloads aside)
// (tests/unit/backend/detmath_x8_test.cpp). No FMA: the global -ffp-contract=off applies.
// Everything has internal linkage: each translation unit (baseline, AVX2, AVX-512) compiles
// its own copy with its own ISA flags.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/detmath.h"

namespace ds4::backend::cpu {
namespace {

namespace x8 {
typedef float F8 __attribute__((vector_size(32)));
typedef double D8 __attribute__((vector_size(64)));
typedef long long I8 __attribute__((vector_size(64)));
}  // namespace x8

// *out = detmath::exp_f32 of each lane of x (references, not vector values, cross the call:
// no vector-ABI dependence on the TU's ISA flags).
inline void exp_f32_x8(const x8::F8& x, x8::F8* out) {
  using x8::D8;
  using x8::F8;
  using x8::I8;
  // Clamp so that every lane's k stays in pow2i's range; out-of-range lanes are replaced below.
  F8 xc = x > 88.8f ? F8{} + 88.8f : x;
  xc = xc < -104.0f ? F8{} - 104.0f : xc;
  xc = xc != xc ? F8{} : xc;
  const D8 xd = __builtin_convertvector(xc, D8);
  constexpr double kLog2e = 0x1.71547652b82fep+0;
  constexpr double kLn2Hi = 0x1.62e42ff000000p-1;
  constexpr double kLn2Lo = -0x1.718432a1b0e26p-35;
  const D8 shift = D8{} + 0x1.8p52;
  const D8 ks = xd * kLog2e + shift;  // two roundings: the product, then the sum (no FMA)
  const D8 k = ks - shift;
  const D8 r = (xd - k * kLn2Hi) - k * kLn2Lo;
  D8 p = D8{} + 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const I8 ki = (I8)ks - (I8)shift;  // vector casts: the same bits, reinterpreted
  const I8 scale_bits = (ki + 1023) << 52;
  const D8 e = p * (D8)scale_bits;
  F8 ef = __builtin_convertvector(e, F8);
  const F8 inf = F8{} + __builtin_inff();
  ef = x > 88.8f ? inf : ef;
  ef = x < -104.0f ? F8{} : ef;
  ef = x != x ? x : ef;
  *out = ef;
}

// out[l] = detmath::silu_f32(x[l]) for l = 0..7 (out may alias x).
inline void silu_f32_x8(const float* x, float* out) {
  using x8::F8;
  F8 v;
  std::memcpy(&v, x, sizeof v);
  const auto nonneg = v >= 0.0f;
  F8 e;
  exp_f32_x8(nonneg ? -v : v, &e);
  const F8 d = 1.0f + e;
  const F8 pos = 1.0f / d;
  const F8 neg = e / d;
  const F8 sig = nonneg ? pos : neg;
  const F8 s = v * sig;
  std::memcpy(out, &s, sizeof s);
}

// out[i] = detmath::exp_f32(x[i] - m) for i < n (the subtraction in float); out may be x.
// The KernelTable's exp_sub (kernels.h: exp_sub_row).
inline void exp_sub_row_x8(const float* x, float m, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x8::F8 v, e;
    std::memcpy(&v, x + i, sizeof v);
    exp_f32_x8(v - m, &e);
    std::memcpy(out + i, &e, sizeof e);
  }
  for (; i < n; ++i) out[i] = detmath::exp_f32(x[i] - m);
}

// out[r] = silu(min(g[r], c)) · clamp(u[r], −c, c), then · w when weighted (left to right),
// for r < n; out may be g. The KernelTable's swiglu (kernels.h: swiglu_row).
inline void swiglu_row_x8(const float* g, const float* u, float c, float w, bool weighted, float* out,
                          int64_t n) {
  int64_t r = 0;
  for (; r + 8 <= n; r += 8) {
    float gv[8], s[8];
    for (int l = 0; l < 8; ++l) gv[l] = std::min(g[r + l], c);
    silu_f32_x8(gv, s);
    for (int l = 0; l < 8; ++l) {
      const float uv = std::min(std::max(u[r + l], -c), c);
      out[r + l] = weighted ? s[l] * uv * w : s[l] * uv;
    }
  }
  for (; r < n; ++r) {
    const float gv = std::min(g[r], c);
    const float uv = std::min(std::max(u[r], -c), c);
    out[r] = weighted ? detmath::silu_f32(gv) * uv * w : detmath::silu_f32(gv) * uv;
  }
}

}  // namespace
}  // namespace ds4::backend::cpu
