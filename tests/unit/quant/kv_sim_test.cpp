// tests/unit/quant/kv_sim_test.cpp — FP8-E4M3 and FP4-E2M1 rounding (ties to the even
// index, clamping, sign handling), block scales, and the Hadamard-128 transform.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "quant/quant.h"

namespace ds4::quant {
namespace {

// ceil(log2(v)) exactly for a finite float v > 0: the double log2 of a float is never closer
// than ~1.7e-7 to the next integer unless v is a power of two, where it is exact. (libm's
// log2f rounds first: just above 2^e, e >= 4, it returns e and the ceil misses by one.)
int exact_ceil_log2(float v) { return static_cast<int>(std::ceil(std::log2(static_cast<double>(v)))); }

// Linear scan over the table, nearest by |difference|, exact ties to the even index.
float linear_nearest(float v, int count, float (*value)(int), float vmax) {
  const float sign = v < 0.0f ? -1.0f : 1.0f;
  const float a = std::fmin(std::fabs(v), vmax);
  int best = 0;
  float best_d = std::fabs(a - value(0));
  for (int i = 1; i < count; ++i) {
    const float d = std::fabs(a - value(i));
    if (d < best_d || (d == best_d && (i & 1) == 0)) {
      best = i;
      best_d = d;
    }
  }
  return sign * value(best);
}

TEST(E4M3, TableValues) {
  EXPECT_EQ(e4m3_value(0), 0.0f);
  EXPECT_EQ(e4m3_value(1), 0x1p-9f);   // smallest subnormal
  EXPECT_EQ(e4m3_value(7), 7.0f / 512.0f);
  EXPECT_EQ(e4m3_value(8), 0x1p-6f);   // smallest normal
  EXPECT_EQ(e4m3_value(56), 1.0f);
  EXPECT_EQ(e4m3_value(57), 1.125f);
  EXPECT_EQ(e4m3_value(126), 448.0f);
  for (int i = 1; i < kE4M3Count; ++i) EXPECT_LT(e4m3_value(i - 1), e4m3_value(i));
}

TEST(E4M3, NearestTiesAndClamp) {
  EXPECT_EQ(e4m3_nearest(1.0625f), 1.0f);     // tie 56|57 -> 56 (even)
  EXPECT_EQ(e4m3_nearest(1.1875f), 1.25f);    // tie 57|58 -> 58
  EXPECT_EQ(e4m3_nearest(-1.1875f), -1.25f);
  EXPECT_EQ(e4m3_nearest(0x1p-10f), 0.0f);    // tie 0|1 -> 0
  EXPECT_EQ(e4m3_nearest(0x3p-10f), 0x2p-9f); // tie 1|2 -> 2
  EXPECT_EQ(e4m3_nearest(432.0f), 448.0f);    // tie 416 (125)|448 (126) -> 126
  EXPECT_EQ(e4m3_nearest(1000.0f), 448.0f);
  EXPECT_EQ(e4m3_nearest(-1e30f), -448.0f);
  EXPECT_EQ(e4m3_nearest(1.07f), 1.125f);
  EXPECT_FALSE(std::signbit(e4m3_nearest(-0.0f)));  // sign = (v < 0) -> -0 gives +0
  EXPECT_TRUE(std::signbit(e4m3_nearest(-0x1p-12f)));  // rounds to 0 with sign -1
}

TEST(E4M3, BinarySearchEqualsLinearScan) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-500.0f, 500.0f);
  std::uniform_real_distribution<float> small(-0.05f, 0.05f);
  for (int i = 0; i < 20000; ++i) {
    const float v = (i & 1) ? u(rng) : small(rng);
    ASSERT_EQ(e4m3_nearest(v), linear_nearest(v, kE4M3Count, e4m3_value, 448.0f)) << v;
  }
  for (int i = 0; i + 1 < kE4M3Count; ++i) {  // every midpoint
    const float mid = 0.5f * (e4m3_value(i) + e4m3_value(i + 1));
    ASSERT_EQ(e4m3_nearest(mid), linear_nearest(mid, kE4M3Count, e4m3_value, 448.0f));
    ASSERT_EQ(e4m3_nearest(mid), e4m3_value((i & 1) ? i + 1 : i));
  }
}

TEST(Fp8Roundtrip, BlockScalesAndUntouchedTail) {
  std::vector<float> x(512);
  for (int i = 0; i < 512; ++i) x[i] = std::sin(0.1f * static_cast<float>(i)) * 3.0f;
  x[64] = 448.0f;  // block 1: amax 448 -> scale 1 -> values snap to the table itself
  x[65] = 1.0625f;
  for (int i = 128; i < 192; ++i) x[i] = 0.0f;  // block 2: amax clamps to 1e-4
  x[130] = 5e-5f;
  const std::vector<float> orig = x;
  fp8_e4m3_roundtrip(x.data(), 448);
  for (int i = 448; i < 512; ++i) ASSERT_EQ(x[i], orig[i]);  // RoPE dims untouched
  EXPECT_EQ(x[64], 448.0f);
  EXPECT_EQ(x[65], 1.0f);
  // Block 2: scale = 2^ceil(log2(1e-4/448)) = 2^-22; 5e-5/2^-22 = 209.7 -> 208.
  EXPECT_EQ(x[130], 208.0f * 0x1p-22f);
  EXPECT_EQ(x[131], 0.0f);
  // Block 0: amax = max|3 sin| -> scale 2^ceil(log2(amax/448)); every value is table·scale.
  float amax = 0.0f;
  for (int i = 0; i < 64; ++i) amax = std::fmax(amax, std::fabs(orig[i]));
  const float scale = ldexpf(1.0f, exact_ceil_log2(amax / 448.0f));
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(x[i], e4m3_nearest(orig[i] / scale) * scale);
    EXPECT_LE(std::fabs(x[i] - orig[i]), std::fabs(orig[i]) * 0.0625f + 1e-5f);
  }
}

// amax / 448 = 16·(1 + 2^-23) (amax = 7168 + 2^-11): the scale is 2^5, not the 2^4 that
// ceilf(log2f(·)) gives (log2f rounds 4 + 1.7e-7 to 4), with which amax / scale would exceed 448.
TEST(Fp8Roundtrip, ScaleIsTheExactCeilJustAboveAPowerOfTwo) {
  std::vector<float> x(512, 0.0f);
  const float amax = 7168.0f + 0x1p-11f;
  ASSERT_EQ(amax / 448.0f, 16.0f * (1.0f + 0x1p-23f));
  ASSERT_EQ(exact_ceil_log2(amax / 448.0f), 5);
  x[0] = amax;
  // 3·2^-5 / 32 = 1.5·2^-9, halfway between the E4M3 subnormals 2^-9 (index 1) and 2^-8
  // (index 2): the even index, 2^-8 · 32 = 0.125. (With scale 16 it would stay 0.09375.)
  x[1] = 0.09375f;
  fp8_e4m3_roundtrip(x.data(), 448);
  EXPECT_EQ(x[0], 224.0f * 32.0f);  // amax/32 = 224.00003 -> 224
  EXPECT_EQ(x[1], 0.125f);
}

TEST(E2M1, NearestTies) {
  EXPECT_EQ(e2m1_nearest(0.25f), 0.0f);   // 0|0.5 -> index 0
  EXPECT_EQ(e2m1_nearest(0.75f), 1.0f);   // idx 1|2 -> 2
  EXPECT_EQ(e2m1_nearest(1.25f), 1.0f);   // idx 2|3 -> 2
  EXPECT_EQ(e2m1_nearest(1.75f), 2.0f);   // idx 3|4 -> 4
  EXPECT_EQ(e2m1_nearest(2.5f), 2.0f);    // idx 4|5 -> 4
  EXPECT_EQ(e2m1_nearest(3.5f), 4.0f);    // idx 5|6 -> 6
  EXPECT_EQ(e2m1_nearest(5.0f), 4.0f);    // idx 6|7 -> 6
  EXPECT_EQ(e2m1_nearest(-5.0f), -4.0f);
  EXPECT_EQ(e2m1_nearest(5.01f), 6.0f);
  EXPECT_EQ(e2m1_nearest(100.0f), 6.0f);
  auto v = [](int i) { return e2m1_value(i); };
  for (float t = -7.0f; t <= 7.0f; t += 0.03125f) {
    ASSERT_EQ(e2m1_nearest(t), linear_nearest(t, 8, +v, 6.0f)) << t;
  }
}

// The row round trips (which inline the nearest-value step) against their definition through
// the exported per-element functions, bit for bit: random blocks over a wide range, exact grid
// values and midpoints at the block's scale, zeros of both signs and quiet NaNs.
TEST(KvRoundtrips, RowsEqualThePerElementDefinition) {
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-30, 12);
  auto fill = [&](std::vector<float>& x, int block, int grid_count, float (*grid)(int)) {
    for (size_t b = 0; b < x.size(); b += block) {
      const float mag = std::ldexp(1.0f, ex(rng));
      for (int i = 0; i < block; ++i) {
        float v = u(rng) * mag;
        switch ((b / block + i) % 9) {
          case 0: v = grid(static_cast<int>(rng() % grid_count)) * mag; break;
          case 1: {
            const int k = static_cast<int>(rng() % (grid_count - 1));
            v = 0.5f * (grid(k) + grid(k + 1)) * mag * ((i & 1) ? -1.0f : 1.0f);
            break;
          }
          case 2: v = (i & 1) ? -0.0f : 0.0f; break;
          default: break;
        }
        x[b + i] = v;
      }
    }
    x[3] = std::numeric_limits<float>::quiet_NaN();  // (infinities: the scale's float->int cast is UB)
    x[block + 5] = -std::numeric_limits<float>::quiet_NaN();
  };
  auto expect_bits = [](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &want[i], 4);
      ASSERT_EQ(a, b) << what << " element " << i << ": " << got[i] << " vs " << want[i];
    }
  };
  // The definition: per block, amax (NaNs ignored), the power-of-two scale, then each value /
  // scale clamped to ±max, its nearest grid value, times the scale.
  auto reference = [](std::vector<float> x, int block, float max, float min_amax, float (*nearest)(float)) {
    for (size_t b = 0; b < x.size(); b += block) {
      float amax = 0.0f;
      for (int i = 0; i < block; ++i) amax = std::fabs(x[b + i]) > amax ? std::fabs(x[b + i]) : amax;
      if (amax < min_amax) amax = min_amax;
      const float scale = ldexpf(1.0f, exact_ceil_log2(amax / max));
      for (int i = 0; i < block; ++i) {
        float v = x[b + i] / scale;
        if (v > max) v = max;
        if (v < -max) v = -max;
        x[b + i] = nearest(v) * scale;
      }
    }
    return x;
  };
  for (int round = 0; round < 200; ++round) {
    std::vector<float> x8(4 * kFp8BlockSize);  // FP8 E4M3, the whole row leading (no RoPE tail)
    fill(x8, kFp8BlockSize, kE4M3Count, e4m3_value);
    const std::vector<float> want8 = reference(x8, kFp8BlockSize, 448.0f, kFp8MinAmax, e4m3_nearest);
    fp8_e4m3_roundtrip(x8.data(), static_cast<int>(x8.size()));
    expect_bits(x8, want8, "fp8");
    std::vector<float> x4(4 * kFp4BlockSize);  // FP4 E2M1
    fill(x4, kFp4BlockSize, 8, e2m1_value);
    const std::vector<float> want4 = reference(x4, kFp4BlockSize, 6.0f, kFp4MinAmax, e2m1_nearest);
    fp4_e2m1_roundtrip_row(x4.data(), static_cast<int>(x4.size()));
    expect_bits(x4, want4, "fp4");
  }
}

TEST(Fp4Roundtrip, Blocks) {
  std::vector<float> x(64, 0.0f);
  x[0] = 6.0f;   // block 0: amax 6 -> scale 1
  x[1] = 2.5f;   // -> 2
  x[2] = -0.74f; // -> -0.5
  x[32] = 12.0f; // block 1: scale 2
  x[33] = 5.0f;  // 2.5 -> 2 -> 4
  x[34] = 7.0f;  // 3.5 -> 4 -> 8
  fp4_e2m1_roundtrip_row(x.data(), 64);
  EXPECT_EQ(x[0], 6.0f);
  EXPECT_EQ(x[1], 2.0f);
  EXPECT_EQ(x[2], -0.5f);
  EXPECT_EQ(x[32], 12.0f);
  EXPECT_EQ(x[33], 4.0f);
  EXPECT_EQ(x[34], 8.0f);
  // All-zero block: amax clamps to the tiny floor; zeros stay zero.
  for (int i = 3; i < 32; ++i) EXPECT_EQ(x[i], 0.0f);
}

TEST(Hadamard, BasisVectorAndInvolution) {
  std::vector<float> e0(128, 0.0f);
  e0[0] = 1.0f;
  hadamard128_inplace(e0.data());
  for (float v : e0) EXPECT_EQ(v, kHadamardScale);
  std::vector<float> e1(128, 0.0f);
  e1[1] = 1.0f;
  hadamard128_inplace(e1.data());
  for (int i = 0; i < 128; ++i) EXPECT_EQ(e1[i], (i & 1) ? -kHadamardScale : kHadamardScale);

  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(128), y;
  for (auto& v : x) v = nd(rng);
  y = x;
  hadamard128_inplace(y.data());
  double n0 = 0, n1 = 0;
  for (int i = 0; i < 128; ++i) {
    n0 += double(x[i]) * x[i];
    n1 += double(y[i]) * y[i];
  }
  EXPECT_NEAR(n1, n0, 1e-5 * n0);  // orthonormal up to rounding
  hadamard128_inplace(y.data());
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(y[i], x[i], 1e-5f);
}

TEST(IndexerQat, IsHadamardThenFp4) {
  std::vector<float> x(128);
  for (int i = 0; i < 128; ++i) x[i] = std::cos(0.05f * static_cast<float>(i * i));
  std::vector<float> a = x, b = x;
  indexer_qat_row(a.data());
  hadamard128_inplace(b.data());
  fp4_e2m1_roundtrip_row(b.data(), 128);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(f32_bits(a[i]), f32_bits(b[i]));
  // Every value is ±(an E2M1 value) times its block's power-of-two scale.
  std::vector<float> h = x;
  hadamard128_inplace(h.data());
  for (int blk = 0; blk < 4; ++blk) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(h[32 * blk + i]));
    const float scale = ldexpf(1.0f, exact_ceil_log2(amax / 6.0f));
    for (int i = 0; i < 32; ++i) {
      const float r = std::fabs(a[32 * blk + i]) / scale;
      bool in_set = false;
      for (int k = 0; k < 8; ++k) in_set = in_set || r == e2m1_value(k);
      EXPECT_TRUE(in_set) << r;
    }
  }
}

}  // namespace
}  // namespace ds4::quant
