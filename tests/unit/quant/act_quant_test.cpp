// tests/unit/quant/act_quant_test.cpp — activation quantizers (§3.3 Q8_0, §3.4 Q8_K) on
// hand cases: lrintf half-to-even ties, clamping, all-zero blocks, sign convention, bsums.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "quant/quant.h"

namespace ds4::quant {
namespace {

TEST(Q8_0Act, HalfToEvenTies) {
  // amax = 127 -> d = 1, id = 1: x·id is x exactly, so ties are visible.
  float x[32] = {};
  x[0] = 127.0f;
  x[1] = 2.5f;   // -> 2 (even), roundf would give 3
  x[2] = 3.5f;   // -> 4
  x[3] = -2.5f;  // -> -2
  x[4] = 0.5f;   // -> 0
  x[5] = -0.5f;  // -> 0
  x[6] = 1.5f;   // -> 2
  x[7] = -127.0f;
  x[8] = 2.4f;
  x[9] = 2.6f;
  BlockQ8_0Act out;
  quantize_q8_0_act(x, &out, 32);
  EXPECT_EQ(out.d, 1.0f);
  EXPECT_EQ(out.qs[0], 127);
  EXPECT_EQ(out.qs[1], 2);
  EXPECT_EQ(out.qs[2], 4);
  EXPECT_EQ(out.qs[3], -2);
  EXPECT_EQ(out.qs[4], 0);
  EXPECT_EQ(out.qs[5], 0);
  EXPECT_EQ(out.qs[6], 2);
  EXPECT_EQ(out.qs[7], -127);
  EXPECT_EQ(out.qs[8], 2);
  EXPECT_EQ(out.qs[9], 3);
  for (int i = 10; i < 32; ++i) EXPECT_EQ(out.qs[i], 0);
}

TEST(Q8_0Act, ScaleIsF32AndZeroBlock) {
  std::vector<float> x(64, 0.0f);
  x[33] = -0.3f;  // block 1: amax 0.3
  std::vector<BlockQ8_0Act> out(2);
  quantize_q8_0_act(x.data(), out.data(), 64);
  EXPECT_EQ(out[0].d, 0.0f);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[0].qs[i], 0);
  EXPECT_EQ(out[1].d, 0.3f / 127.0f);  // f32, not f16-rounded
  EXPECT_NE(out[1].d, f16_round(0.3f / 127.0f));
  const float id = 1.0f / (0.3f / 127.0f);
  EXPECT_EQ(out[1].qs[1], static_cast<int8_t>(lrintf(-0.3f * id)));
  EXPECT_EQ(out[1].qs[1], -127);
}

TEST(Q8KAct, SignConventionAndValues) {
  std::vector<float> x(256, 0.0f);
  x[3] = 2.0f;   // largest |x|, positive -> iscale = -63.5, d = 1/iscale < 0
  x[4] = -1.0f;  // -> lrintf(63.5) = 64 (even)
  x[5] = 1.0f;   // -> -64
  x[6] = 0.5f;   // -> lrintf(-31.75) = -32
  x[20] = -0.0078125f;  // 1/128 -> lrintf(0.49609375) = 0
  x[21] = 0.015748031f;  // ≈ 1/63.5 -> -1
  std::vector<BlockQ8K> out(1);
  quantize_q8_k_act(x.data(), out.data(), 256);
  const float iscale = -127.0f / 2.0f;
  EXPECT_EQ(out[0].d, 1.0f / iscale);
  EXPECT_LT(out[0].d, 0.0f);
  EXPECT_EQ(out[0].qs[3], -127);
  EXPECT_EQ(out[0].qs[4], 64);
  EXPECT_EQ(out[0].qs[5], -64);
  EXPECT_EQ(out[0].qs[6], -32);
  EXPECT_EQ(out[0].qs[20], 0);
  EXPECT_EQ(out[0].qs[21], -1);
  EXPECT_EQ(out[0].bsums[0], -127 + 64 - 64 - 32);
  EXPECT_EQ(out[0].bsums[1], -1);
  for (int j = 2; j < 16; ++j) EXPECT_EQ(out[0].bsums[j], 0);
  // Dequantized: d·q reconstructs x[3] = 2 up to rounding of 1/iscale.
  std::vector<float> y(256);
  dequantize_row(GgmlType::kQ8_K, out.data(), y.data(), 256);
  EXPECT_NEAR(y[3], 2.0f, 1e-6f);
  EXPECT_NEAR(y[4], -1.0f, 2.0f / 127.0f);
}

TEST(Q8KAct, FirstMaxWinsTiesAndNegativeMax) {
  std::vector<float> x(256, 0.25f);
  x[10] = -3.0f;  // first element with |x| = 3 -> max = -3 -> iscale = +42.33, d > 0
  x[11] = 3.0f;
  std::vector<BlockQ8K> out(1);
  quantize_q8_k_act(x.data(), out.data(), 256);
  EXPECT_GT(out[0].d, 0.0f);
  EXPECT_EQ(out[0].d, 1.0f / (-127.0f / -3.0f));
  EXPECT_EQ(out[0].qs[10], -127);
  EXPECT_EQ(out[0].qs[11], 127);
  // Swapped order -> max = +3 -> d < 0 and the signs of all quants flip.
  std::swap(x[10], x[11]);
  quantize_q8_k_act(x.data(), out.data(), 256);
  EXPECT_LT(out[0].d, 0.0f);
  EXPECT_EQ(out[0].qs[10], -127);
  EXPECT_EQ(out[0].qs[11], 127);
  EXPECT_EQ(out[0].qs[0], static_cast<int8_t>(lrintf((-127.0f / 3.0f) * 0.25f)));
}

TEST(Q8KAct, AllZeroBlockAndBsums) {
  std::vector<float> x(512);
  for (int i = 0; i < 256; ++i) x[i] = 0.0f;
  for (int i = 256; i < 512; ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<BlockQ8K> out(2);
  out[0].d = 5.0f;
  out[0].qs[7] = 3;
  out[0].bsums[2] = 9;
  quantize_q8_k_act(x.data(), out.data(), 512);
  EXPECT_EQ(out[0].d, 0.0f);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(out[0].qs[i], 0);
  for (int j = 0; j < 16; ++j) ASSERT_EQ(out[0].bsums[j], 0);
  for (int j = 0; j < 16; ++j) {
    int s = 0;
    for (int i = 0; i < 16; ++i) s += out[1].qs[16 * j + i];
    EXPECT_EQ(out[1].bsums[j], s);
  }
}

}  // namespace
}  // namespace ds4::quant
