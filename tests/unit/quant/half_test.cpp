// tests/unit/quant/half_test.cpp — f16/bf16 conversions: edge cases, RNE ties, subnormals,
// overflow, NaN, and exhaustive round trips.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "quant/half.h"

namespace ds4::quant {
namespace {

TEST(Half, ExactValues) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(0x1p-14f), 0x0400);   // smallest normal
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);   // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x3ffp-24f), 0x03ff); // largest subnormal
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x03ff), 0x3ffp-24f);
  EXPECT_EQ(f16_to_f32(0x0400), 0x1p-14f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0x8001), -0x1p-24f);
}

TEST(Half, RoundToNearestEvenTies) {
  // 1 + 2^-11 is halfway between 0x3c00 (even) and 0x3c01 -> 0x3c00.
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
  // 1 + 3·2^-11 is halfway between 0x3c01 and 0x3c02 (even) -> 0x3c02.
  EXPECT_EQ(f32_to_f16(1.0f + 0x3p-11f), 0x3c02);
  // Just above the tie rounds up.
  EXPECT_EQ(f32_to_f16(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3c01);
  // Mantissa carry into the exponent: largest value below 2 rounds to 2.
  EXPECT_EQ(f32_to_f16(std::nextafter(2.0f, 0.0f)), 0x4000);
}

TEST(Half, SubnormalRounding) {
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);        // tie between 0 and 2^-24 -> 0 (even)
  EXPECT_EQ(f32_to_f16(-0x1p-25f), 0x8000);
  EXPECT_EQ(f32_to_f16(0x1.8p-25f), 0x0001);      // 0.75 ulp -> 1
  EXPECT_EQ(f32_to_f16(0x3p-25f), 0x0002);        // 1.5 ulp tie -> 2 (even)
  EXPECT_EQ(f32_to_f16(0x5p-25f), 0x0002);        // 2.5 ulp tie -> 2 (even)
  EXPECT_EQ(f32_to_f16(0x1p-26f), 0x0000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
  // Largest subnormal + half ulp ties up to the smallest normal (0x03ff odd -> 0x0400).
  EXPECT_EQ(f32_to_f16(0x7ffp-25f), 0x0400);
}

TEST(Half, OverflowInfNan) {
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // tie between 65504 (odd) and 65536 -> inf
  EXPECT_EQ(f32_to_f16(-1e9f), 0xfc00);
  EXPECT_EQ(f32_to_f16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_f16(-INFINITY), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::quiet_NaN()), 0x7e00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::quiet_NaN()), 0xfe00);
  EXPECT_EQ(f32_to_f16(f32_from_bits(0x7f800001u)), 0x7e00);  // signalling NaN
  EXPECT_TRUE(std::isinf(f16_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));
}

TEST(Half, ExhaustiveRoundTripAndMonotonic) {
  float prev = -INFINITY;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    if (nan) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_EQ(f32_to_f16(f), (h & 0x8000u) | 0x7e00u);
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << "h=" << h;
    if (h < 0x7c00u) {  // positive finite and +inf in increasing order
      EXPECT_GT(f, prev);
      prev = f;
    }
  }
}

// Midpoints between consecutive halves decide by the even mantissa; just off the midpoint
// decides by distance. Checked for every positive finite half.
TEST(Half, AllMidpoints) {
  for (uint32_t h = 0; h < 0x7bffu; ++h) {
    const float a = f16_to_f32(static_cast<uint16_t>(h));
    const float b = f16_to_f32(static_cast<uint16_t>(h + 1));
    const float mid = a + (b - a) * 0.5f;  // exact in f32
    const uint32_t even = (h & 1u) ? h + 1 : h;
    ASSERT_EQ(f32_to_f16(mid), even) << "h=" << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 0.0f)), h);
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, INFINITY)), h + 1);
  }
}

#if defined(__FLT16_MAX__)
// Independent oracle: the compiler's _Float16 conversion (correctly rounded, RNE).
TEST(Half, MatchesCompilerFloat16OnRandomBits) {
  uint64_t s = 0x12345678u;
  for (int i = 0; i < 2000000; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const uint32_t bits = static_cast<uint32_t>(s >> 32);
    const float f = f32_from_bits(bits);
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    ASSERT_EQ(f32_to_f16(f), hb) << std::hexfloat << f;
  }
}
#endif

TEST(Half, F16Round) {
  EXPECT_EQ(f16_round(1.0f + 0x1p-12f), 1.0f);
  EXPECT_EQ(f16_round(1e6f), INFINITY);
  float row[3] = {0.1f, -3.0f, 70000.0f};
  f16_round_row(row, 3);
  EXPECT_EQ(row[0], f16_to_f32(f32_to_f16(0.1f)));
  EXPECT_EQ(row[1], -3.0f);
  EXPECT_EQ(row[2], INFINITY);
}

// The branch-free row form equals the scalar definition on every lane position: a sweep of
// f32 bit patterns of both signs (NaNs, infs, the overflow edge, the subnormal and normal
// ranges of f16) and the whole f16 subnormal/normal boundary region one pattern at a time.
TEST(Float16, RoundRowEqualsScalar) {
  std::vector<float> in, out;
  auto add = [&](uint32_t bits) { in.push_back(f32_from_bits(bits)); };
  for (uint64_t b = 0; b <= 0xffffffffull; b += 0x3fdu) add(static_cast<uint32_t>(b));
  for (uint32_t b = 0x33000000u; b < 0x33800000u; b += 7) add(b);  // around 2^-25 (rounds to 0 or 2^-24)
  for (uint32_t b = 0x38700000u; b < 0x38900000u; ++b) add(b | ((b & 1u) << 31));  // around 2^-14
  for (uint32_t b = 0x477f0000u; b < 0x47810000u; ++b) add(b | ((b & 2u) << 30));  // around 65520
  for (uint32_t b : {0x7f800000u, 0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0xff800000u, 0xffc12345u, 0u,
                     0x80000000u})
    add(b);
  out.assign(in.size(), 0.0f);
  f16_round_row(in.data(), out.data(), static_cast<int64_t>(in.size()));
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(f32_bits(out[i]), f32_bits(f16_round(in[i]))) << "input bits " << std::hex << f32_bits(in[i]);
  }
  std::vector<float> inplace = in;  // the in-place form, odd length (scalar tail)
  f16_round_row(inplace.data(), static_cast<int64_t>(inplace.size()) - 3);
  for (size_t i = 0; i + 3 < in.size(); ++i) ASSERT_EQ(f32_bits(inplace[i]), f32_bits(out[i]));
}

// The branch-free row conversion equals the scalar one on every half (NaN payloads included),
// at every lane position (odd lengths run the scalar tail).
TEST(Half, RowFormsEqualScalarOnEveryHalf) {
  std::vector<uint16_t> h(65536 + 5);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i * 40503u);  // a permutation of the halves
  std::vector<float> f(h.size());
  f16_to_f32_row(h.data(), f.data(), static_cast<int64_t>(h.size()));
  for (size_t i = 0; i < h.size(); ++i) ASSERT_EQ(f32_bits(f[i]), f32_bits(f16_to_f32(h[i]))) << "h=" << h[i];
}

TEST(BFloat16, Conversions) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
  // Ties to even: 1 + 2^-8 is halfway between 0x3f80 (even) and 0x3f81.
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);
  EXPECT_EQ(f32_to_bf16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0x7f800001u)), 0x7fc0);         // NaN made quiet
  EXPECT_EQ(f32_to_bf16(f32_from_bits(0xffc12345u)), 0xffc1);
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), h);
  }
}

}  // namespace
}  // namespace ds4::quant
