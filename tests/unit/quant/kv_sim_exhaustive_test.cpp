// tests/unit/quant/kv_sim_exhaustive_test.cpp — the closed-form E4M3 / E2M1 nearest-value
// rounding (quant/kv_sim.cpp) against the former table binary search, kept here as the oracle,
// bit for bit (sign of zero included) on a dense sweep of f32 bit patterns: every pattern at a
// prime stride over all 2^32, every grid value and every exact midpoint with 4096 f32
// neighbours each side, ±0, f32 subnormals, ±inf and NaNs. DISABLED_AllPatterns sweeps every
// one of the 2^32 patterns (about a minute; run with --gtest_also_run_disabled_tests).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "quant/kv_sim.h"

namespace ds4::quant {
namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// The former implementation: largest index with table[idx] <= a, then the nearer of it and
// its successor by |difference| (exact), exact ties to the even index.
int search_index(const float* table, int count, float a) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (table[mid] <= a) lo = mid; else hi = mid - 1;
  }
  if (lo + 1 < count) {
    const float d0 = std::fabs(a - table[lo]);
    const float d1 = std::fabs(a - table[lo + 1]);
    if (d1 < d0 || (d1 == d0 && ((lo + 1) & 1) == 0)) return lo + 1;
  }
  return lo;
}

struct Oracle {
  std::vector<float> e4m3, e2m1;
  Oracle() {
    for (int i = 0; i < kE4M3Count; ++i) e4m3.push_back(e4m3_value(i));
    for (int i = 0; i < 8; ++i) e2m1.push_back(e2m1_value(i));
  }
  float e4m3_nearest(float v) const {
    const float sign = v < 0.0f ? -1.0f : 1.0f;
    const float a = std::fmin(std::fabs(v), kE4M3Max);
    return sign * e4m3[search_index(e4m3.data(), kE4M3Count, a)];
  }
  float e2m1_nearest(float v) const {
    const float sign = v < 0.0f ? -1.0f : 1.0f;
    const float a = std::fmin(std::fabs(v), kE2M1Max);
    return sign * e2m1[search_index(e2m1.data(), 8, a)];
  }
};

// Number of mismatching patterns (first few reported); bit-for-bit comparison.
int64_t check(const Oracle& o, uint32_t b) {
  const float v = from_bits(b);
  int64_t bad = 0;
  if (to_bits(e4m3_nearest(v)) != to_bits(o.e4m3_nearest(v))) {
    ++bad;
    ADD_FAILURE() << "e4m3 bits 0x" << std::hex << b << " v=" << v << " got " << e4m3_nearest(v)
                  << " want " << o.e4m3_nearest(v);
  }
  if (to_bits(e2m1_nearest(v)) != to_bits(o.e2m1_nearest(v))) {
    ++bad;
    ADD_FAILURE() << "e2m1 bits 0x" << std::hex << b << " v=" << v << " got " << e2m1_nearest(v)
                  << " want " << o.e2m1_nearest(v);
  }
  return bad;
}

// Every f32 within `radius` patterns of x (same sign), both signs.
int64_t check_around(const Oracle& o, float x, uint32_t radius) {
  int64_t bad = 0;
  const uint32_t b = to_bits(std::fabs(x));
  const uint32_t lo = b > radius ? b - radius : 0u;
  for (uint32_t p = lo; p <= b + radius && bad < 8; ++p) {
    bad += check(o, p);
    bad += check(o, p | 0x80000000u);
  }
  return bad;
}

TEST(KvSimExhaustive, StridedPatternsMatchSearch) {
  const Oracle o;
  int64_t bad = 0, n = 0;
  for (uint64_t b = 0; b <= 0xFFFFFFFFull && bad < 8; b += 251, ++n) bad += check(o, static_cast<uint32_t>(b));
  EXPECT_EQ(bad, 0);
  EXPECT_GT(n, 17000000);
}

TEST(KvSimExhaustive, GridValuesMidpointsAndNeighboursMatchSearch) {
  const Oracle o;
  int64_t bad = 0;
  for (int i = 0; i < kE4M3Count; ++i) {
    bad += check_around(o, o.e4m3[i], 4096);
    if (i + 1 < kE4M3Count) {
      const float mid = 0.5f * (o.e4m3[i] + o.e4m3[i + 1]);  // exact in f32
      ASSERT_EQ(e4m3_nearest(mid), o.e4m3[(i & 1) ? i + 1 : i]);
      bad += check_around(o, mid, 4096);
    }
  }
  for (int i = 0; i < 8; ++i) {
    bad += check_around(o, o.e2m1[i], 4096);
    if (i + 1 < 8) {
      const float mid = 0.5f * (o.e2m1[i] + o.e2m1[i + 1]);
      ASSERT_EQ(e2m1_nearest(mid), o.e2m1[(i & 1) ? i + 1 : i]);
      bad += check_around(o, mid, 4096);
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(KvSimExhaustive, SpecialValuesMatchSearch) {
  const Oracle o;
  int64_t bad = 0;
  for (uint32_t b = 0; b < 70000; ++b) bad += check(o, b) + check(o, b | 0x80000000u);  // ±0, subnormals
  for (uint32_t b = 0x7F7F0000u; b <= 0x7FFFFFFFu && bad < 8; b += 7) {  // huge, inf, NaN
    bad += check(o, b) + check(o, b | 0x80000000u);
  }
  bad += check(o, 0x7F800000u) + check(o, 0xFF800000u) + check(o, 0x7FC00000u) + check(o, 0xFFC00000u);
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(to_bits(e4m3_nearest(-0.0f)), to_bits(0.0f));
  EXPECT_EQ(e4m3_nearest(std::numeric_limits<float>::infinity()), 448.0f);
  EXPECT_EQ(e2m1_nearest(-std::numeric_limits<float>::infinity()), -6.0f);
  EXPECT_EQ(e2m1_nearest(5.0f), 4.0f);    // tie 4 (6) | 6 (7) -> even index 6
  EXPECT_EQ(e2m1_nearest(0.75f), 1.0f);   // tie 0.5 (1) | 1 (2) -> 2
  EXPECT_EQ(e4m3_nearest(0x1.ep-7f), 0x1p-6f);  // tie 7·2^-9 | 2^-6 across the subnormal edge
}

TEST(KvSimExhaustive, DISABLED_AllPatterns) {
  const Oracle o;
  int64_t bad = 0;
  for (uint64_t b = 0; b <= 0xFFFFFFFFull && bad < 8; ++b) bad += check(o, static_cast<uint32_t>(b));
  EXPECT_EQ(bad, 0);
}

}  // namespace
}  // namespace ds4::quant
