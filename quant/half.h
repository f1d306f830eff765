// quant/half.h — IEEE half (f16) and bfloat16 (bf16) <-> f32 conversions.
//
// Role: the one definition of half-precision conversion for the whole project (weights, KV
// f16-rounding, GGUF export). Header-only so hot loops can inline it.
// Invariants (ds4-architecture.md §3.1):
//   * f16_to_f32 is exact: normals, subnormals (mant·2^-24), ±0, ±inf, NaN (payload kept
//     in the top mantissa bits).
//   * f32_to_f16 rounds to nearest, ties to even; results below the f16 normal range become
//     correctly rounded subnormals (or ±0); |x| >= 65520 becomes ±inf; any NaN becomes
//     0x7e00 | sign (the payload is not kept).
//   * bf16_to_f32 is exact (bits << 16). f32_to_bf16 rounds to nearest even; NaN becomes
//     quiet (top 16 bits | 0x0040), as the GGUF python package and GGML do.
//   * f16_round(x) = f16_to_f32(f32_to_f16(x)) — applied to every row written to raw KV.
#pragma once

#include <cstdint>
#include <cstring>

namespace ds4::quant {

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    // Subnormal: mant · 2^-24, exact in f32.
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return f32_from_bits(f32_bits(v) | sign);
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 -> inf
  if (a < 0x38800000u) {
    // Below 2^-14: the result is a subnormal (or zero). value / 2^-24 = m · 2^(e-126).
    const uint32_t e = a >> 23;
    if (e < 102) return sign;  // < 2^-25: rounds to zero (2^-25 itself is e = 102).
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // 14..24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t q = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3ffu);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;  // carry may bump the exponent
  return static_cast<uint16_t>(sign | q);
}

inline float f16_round(float x) { return f16_to_f32(f32_to_f16(x)); }

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint64_t r = (static_cast<uint64_t>(x) + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>(r);
}

// Row helpers (n elements each).
void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n);
void bf16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
void f32_to_bf16_row(const float* src, uint16_t* dst, int64_t n);
void f16_round_row(float* x, int64_t n);  // in place
void f16_round_row(const float* src, float* dst, int64_t n);  // dst may alias src

}  // namespace ds4::quant
