// quant/half.cpp — row forms of the half-precision conversions in quant/half.h.
#include "quant/half.h"

#include <cstring>

namespace ds4::quant {

namespace {
// 8 lanes of f32 / u32 / i32 (compare masks) / u16 for the branch-free row forms below.
typedef float F8 __attribute__((vector_size(32)));
typedef uint32_t U8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));
typedef uint16_t H8 __attribute__((vector_size(16)));
}  // namespace

// f16_to_f32 of 8 lanes without branches: normals and inf/NaN by re-biasing the exponent on
// the bits (the NaN payload kept in the top mantissa bits), subnormals as mant · 2^-24 (exact),
// each with the sign of h; the same bits as the scalar definition for all 65536 inputs
// (Half.RowFormsEqualScalarOnEveryHalf).
void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    H8 hv;
    std::memcpy(&hv, src + i, sizeof hv);
    const U8 h = __builtin_convertvector(hv, U8);
    const U8 sign = (h & 0x8000u) << 16;
    const U8 exp = (h >> 10) & 0x1fu;
    const U8 mant = h & 0x3ffu;
    const U8 normal = ((exp + 112u) << 23) | (mant << 13);
    const U8 special = 0x7f800000u | (mant << 13);
    const F8 sub = __builtin_convertvector(mant, F8) * 0x1p-24f;
    const I8 is_sub = exp == 0u;
    const I8 is_special = exp == 31u;
    U8 r = is_sub ? (U8)sub : normal;
    r = is_special ? special : r;
    r |= sign;
    std::memcpy(dst + i, &r, sizeof r);
  }
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}
void f32_to_f16_row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}
void bf16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}
void f32_to_bf16_row(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}
void f16_round_row(float* x, int64_t n) { f16_round_row(x, x, n); }

// f16_round of 8 lanes without branches (the raw KV push runs it on every row of every layer):
// normals round the f32 mantissa to 10 bits, nearest even, on the bits (a carry bumps the
// exponent, as the f16 encoding's does); below 2^-14 the value rounds to a multiple of 2^-24
// by (a + 0.5) - 0.5 (nearest even, exact subtraction), the f16 subnormal grid; |x| >= 65520
// is inf and NaN the quiet NaN f16_to_f32(0x7e00) = 0x7fc00000, each with the sign of x. The
// same values as the scalar definition bit for bit (HalfTest.RoundRowEqualsScalar).
void f16_round_row(const float* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    U8 x;
    std::memcpy(&x, src + i, sizeof x);
    const U8 sign = x & 0x80000000u;
    const U8 a = x & 0x7fffffffu;
    const U8 normal = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
    const F8 sub = ((F8)a + 0.5f) - 0.5f;
    const I8 is_sub = a < 0x38800000u;
    const I8 is_inf = a >= 0x477ff000u;
    const I8 is_nan = a > 0x7f800000u;
    U8 r = is_sub ? (U8)sub : normal;
    r = is_inf ? U8{} + 0x7f800000u : r;
    r = is_nan ? U8{} + 0x7fc00000u : r;
    r |= sign;
    std::memcpy(dst + i, &r, sizeof r);
  }
  for (; i < n; ++i) dst[i] = f16_round(src[i]);
}

}  // namespace ds4::quant
