// tests/unit/quant/quantize_test.cpp — weight quantizers: reconstruction RMSE bounds on
// N(0,1) data for every type (the measured figures are in the comments), exactness where
// the format can represent the input, robustness on awkward inputs, random valid blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/quant.h"

namespace ds4::quant {
namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

std::vector<float> round_trip(GgmlType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> buf(row_bytes(t, n));
  quantize_row(t, x.data(), buf.data(), n);
  std::vector<float> y(n);
  dequantize_row(t, buf.data(), y.data(), n);
  return y;
}

double rmse(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size(); ++i) e += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(e / static_cast<double>(a.size()));
}

struct RmseCase {
  GgmlType type;
  double bound;
};

// Measured on 65536 N(0,1) values (seed 1): f16 2.1e-4, bf16 1.7e-3, q8_0 5.4e-3,
// q8_K 7.0e-3, q4_K 0.0717, q2_K 0.270, iq2_xxs 0.328. Bounds leave ~5% headroom.
TEST(Quantize, RmseOnGaussianData) {
  const auto x = gaussian(65536, 1);
  const RmseCase cases[] = {
      {GgmlType::kF32, 0.0},       {GgmlType::kF16, 2.3e-4},  {GgmlType::kBF16, 1.8e-3},
      {GgmlType::kQ8_0, 5.7e-3},   {GgmlType::kQ8_K, 7.4e-3}, {GgmlType::kQ4_K, 0.075},
      {GgmlType::kQ2_K, 0.285},    {GgmlType::kIQ2_XXS, 0.345},
  };
  for (const auto& c : cases) {
    const double e = rmse(x, round_trip(c.type, x));
    EXPECT_LE(e, c.bound) << gguf::type_name(c.type);
    std::printf("  rmse %-8s %.6f\n", gguf::type_name(c.type), e);
  }
}

TEST(Quantize, Q8_0RoundHalfAwayAndExactness) {
  // amax = 127 -> d = 1 exactly: integers are kept, halves round away from zero.
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = -2.5f;
  x[3] = 0.5f;
  x[4] = -13.0f;
  BlockQ8_0 b;
  quantize_row_q8_0(x.data(), &b, 32);
  EXPECT_EQ(b.d, 0x3c00);
  EXPECT_EQ(b.qs[0], 127);
  EXPECT_EQ(b.qs[1], 3);
  EXPECT_EQ(b.qs[2], -3);
  EXPECT_EQ(b.qs[3], 1);
  EXPECT_EQ(b.qs[4], -13);
  std::vector<float> z(32, 0.0f);
  quantize_row_q8_0(z.data(), &b, 32);
  EXPECT_EQ(b.d, 0);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(b.qs[i], 0);
}

TEST(Quantize, KQuantsRepresentableInputsAreExact) {
  // Q4_K: a block whose sub-blocks are d·sc·q − dmin·m with small integers is recovered
  // up to f16 rounding of d and dmin (chosen as powers of two here, so exactly).
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(i % 16) * 0.25f - 1.0f;
  const auto y4 = round_trip(GgmlType::kQ4_K, x);
  EXPECT_LT(rmse(x, y4), 1e-3);
  std::vector<float> x2(256);
  for (int i = 0; i < 256; ++i) x2[i] = static_cast<float>(i % 4) * 0.5f - 0.5f;
  const auto y2 = round_trip(GgmlType::kQ2_K, x2);
  EXPECT_LT(rmse(x2, y2), 1e-3);
}

TEST(Quantize, AwkwardInputsStayFinite) {
  const GgmlType types[] = {GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ2_K,
                            GgmlType::kIQ2_XXS};
  std::vector<std::vector<float>> inputs;
  inputs.emplace_back(256, 0.0f);                  // all zero
  inputs.emplace_back(256, 3.0f);                  // constant positive
  inputs.emplace_back(256, -1e-3f);                // constant negative
  std::vector<float> spike(256, 0.0f);
  spike[77] = 1000.0f;
  inputs.push_back(spike);
  std::vector<float> tiny = gaussian(256, 5);
  for (auto& v : tiny) v *= 1e-9f;                 // below f16 normal scales
  inputs.push_back(tiny);
  std::vector<float> mixed = gaussian(256, 6);
  for (int i = 0; i < 128; ++i) mixed[i] = 0.0f;  // half the groups zero
  inputs.push_back(mixed);
  for (GgmlType t : types) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      const auto y = round_trip(t, inputs[k]);
      double amax = 0;
      for (float v : inputs[k]) amax = std::fmax(amax, std::fabs(v));
      for (int i = 0; i < 256; ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << gguf::type_name(t) << " input " << k;
      }
      // Error never exceeds the input's own magnitude (a zero output would meet it).
      EXPECT_LE(rmse(inputs[k], y), amax + 1e-12) << gguf::type_name(t) << " input " << k;
    }
    const auto z = round_trip(t, inputs[0]);
    for (float v : z) EXPECT_EQ(v, 0.0f) << gguf::type_name(t);
  }
  // Constant inputs: K-quants recover them closely.
  const auto c4 = round_trip(GgmlType::kQ4_K, inputs[1]);
  for (float v : c4) EXPECT_NEAR(v, 3.0f, 3.0f * 2e-3f);
}

TEST(Quantize, Iq2XxsChoosesEvenSignPatterns) {
  // Inputs with one negative value per chunk of 8 need a flip (the format has only even
  // patterns); the flipped element must be the smallest-magnitude one.
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = (i % 8 == 3) ? -1.0f : 1.0f + 0.01f * (i % 8);
  x[0] = 0.05f;  // smallest in chunk 0 -> gets flipped (represented as negative)
  const auto y = round_trip(GgmlType::kIQ2_XXS, x);
  EXPECT_LT(y[3], 0.0f);
  EXPECT_LT(y[0], 0.0f);
  for (int i = 1; i < 8; ++i) {
    if (i != 3) {
      EXPECT_GT(y[i], 0.0f) << i;
    }
  }
}

TEST(Quantize, Deterministic) {
  const auto x = gaussian(1024, 8);
  for (GgmlType t : {GgmlType::kQ2_K, GgmlType::kQ4_K, GgmlType::kIQ2_XXS}) {
    std::vector<uint8_t> a(row_bytes(t, 1024)), b(row_bytes(t, 1024));
    quantize_row(t, x.data(), a.data(), 1024);
    quantize_row(t, x.data(), b.data(), 1024);
    EXPECT_EQ(a, b);
  }
}

TEST(RandomBlocks, ValidAndRoughlyRightMagnitude) {
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,
                            GgmlType::kQ8_0, GgmlType::kQ8_K, GgmlType::kQ2_K,
                            GgmlType::kQ4_K, GgmlType::kIQ2_XXS};
  const int64_t n = 256 * 64;
  for (GgmlType t : types) {
    for (float mag : {0.02f, 1.0f}) {
      std::vector<uint8_t> buf(row_bytes(t, n));
      fill_random_blocks(t, buf.data(), n, mag, 1234);
      std::vector<float> y(n);
      dequantize_row(t, buf.data(), y.data(), n);
      double ss = 0, sum = 0;
      for (float v : y) {
        ASSERT_TRUE(std::isfinite(v)) << gguf::type_name(t);
        ss += double(v) * v;
        sum += v;
      }
      const double rms = std::sqrt(ss / n), mean = sum / n;
      EXPECT_GT(rms, 0.7 * mag) << gguf::type_name(t);
      EXPECT_LT(rms, 1.4 * mag) << gguf::type_name(t);
      EXPECT_LT(std::fabs(mean), 0.2 * mag) << gguf::type_name(t);
      // Same seed -> same bytes; other seed -> different bytes.
      std::vector<uint8_t> again(buf.size()), other(buf.size());
      fill_random_blocks(t, again.data(), n, mag, 1234);
      fill_random_blocks(t, other.data(), n, mag, 1235);
      EXPECT_EQ(buf, again);
      EXPECT_NE(buf, other);
    }
  }
  // Q8_K blocks carry consistent bsums.
  std::vector<BlockQ8K> q(4);
  fill_random_blocks(GgmlType::kQ8_K, q.data(), 1024, 1.0f, 3);
  for (const auto& b : q) {
    for (int j = 0; j < 16; ++j) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += b.qs[16 * j + i];
      EXPECT_EQ(b.bsums[j], s);
    }
  }
}

}  // namespace
}  // namespace ds4::quant
