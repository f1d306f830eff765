// tests/unit/quant/dequant_test.cpp — hand-built blocks of every type, dequantized and
// checked against values computed by hand from the format definitions (§7).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "quant/quant.h"

namespace ds4::quant {
namespace {

TEST(Blocks, Sizes) {
  EXPECT_EQ(row_bytes(GgmlType::kQ8_0, 64), 68u);
  EXPECT_EQ(row_bytes(GgmlType::kQ2_K, 512), 168u);
  EXPECT_EQ(row_bytes(GgmlType::kQ4_K, 256), 144u);
  EXPECT_EQ(row_bytes(GgmlType::kIQ2_XXS, 256), 66u);
  EXPECT_EQ(row_bytes(GgmlType::kQ8_K, 256), 292u);
  EXPECT_EQ(row_bytes(GgmlType::kF16, 10), 20u);
  EXPECT_EQ(row_bytes(GgmlType::kBF16, 10), 20u);
}

TEST(Blocks, ValidateRow) {
  EXPECT_TRUE(validate_row(GgmlType::kQ8_0, 64).ok());
  EXPECT_EQ(validate_row(GgmlType::kQ8_0, 33).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(validate_row(GgmlType::kQ4_0, 32).code(), ErrorCode::kUnsupported);
  EXPECT_NE(validate_row(GgmlType::kQ4_0, 32).message().find("q4_0"), std::string::npos);
  EXPECT_EQ(validate_row(static_cast<GgmlType>(77), 32).code(), ErrorCode::kUnsupported);
  EXPECT_TRUE(can_dequantize(GgmlType::kIQ2_XXS));
  EXPECT_FALSE(can_dequantize(GgmlType::kQ6_K));
}

TEST(Dequant, PlainTypes) {
  const uint16_t h[3] = {0x3c00, 0xc200, 0x0001};  // 1, -3, 2^-24
  float out[3];
  dequantize_row(GgmlType::kF16, h, out, 3);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -3.0f);
  EXPECT_EQ(out[2], 0x1p-24f);
  const uint16_t b[2] = {0x3fc0, 0xbf80};  // 1.5, -1
  dequantize_row(GgmlType::kBF16, b, out, 2);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -1.0f);
  const float f[2] = {3.25f, -0.0f};
  dequantize_row(GgmlType::kF32, f, out, 2);
  EXPECT_EQ(out[0], 3.25f);
  EXPECT_TRUE(std::signbit(out[1]));
}

TEST(Dequant, Q8_0) {
  BlockQ8_0 blk{};
  blk.d = 0x3800;  // 0.5
  for (int i = 0; i < 32; ++i) blk.qs[i] = static_cast<int8_t>(i * 8 - 128);
  float out[32];
  dequantize_row(GgmlType::kQ8_0, &blk, out, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 0.5f * static_cast<float>(i * 8 - 128));
  EXPECT_EQ(out[0], -64.0f);
}

TEST(Dequant, Q8K) {
  BlockQ8K blk{};
  blk.d = -0.25f;
  for (int i = 0; i < 256; ++i) blk.qs[i] = static_cast<int8_t>((i % 255) - 127);
  std::vector<float> out(256);
  dequantize_row(GgmlType::kQ8_K, &blk, out.data(), 256);
  EXPECT_EQ(out[0], 31.75f);   // -0.25 · -127
  EXPECT_EQ(out[254], -31.75f);
  EXPECT_EQ(out[127], 0.0f);
}

TEST(Dequant, Q2K) {
  BlockQ2K blk{};
  blk.d = 0x4000;     // 2
  blk.dmin = 0x3800;  // 0.5
  for (int sb = 0; sb < 16; ++sb) blk.scales[sb] = static_cast<uint8_t>((sb & 15) | ((15 - sb) << 4));
  // qs[32n + l]: 2-bit fields j=0..3 = (l + j + n) & 3
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      uint8_t v = 0;
      for (int j = 0; j < 4; ++j) v = static_cast<uint8_t>(v | (((l + j + n) & 3) << (2 * j)));
      blk.qs[32 * n + l] = v;
    }
  }
  std::vector<float> out(256);
  dequantize_row(GgmlType::kQ2_K, &blk, out.data(), 256);
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const int sb = 8 * n + 2 * j + (l >= 16);
        const int q = (l + j + n) & 3;
        const float want = 2.0f * static_cast<float>(sb) * static_cast<float>(q) -
                           0.5f * static_cast<float>(15 - sb);
        ASSERT_EQ(out[128 * n + 32 * j + l], want) << n << " " << j << " " << l;
      }
    }
  }
  // One value spelled out: element 37 -> n=0, j=1, l=5, sb=2, q=(5+1)&3=2, min nibble 13:
  // 2·2·2 − 0.5·13 = 1.5.
  EXPECT_EQ(out[37], 1.5f);
}

TEST(Dequant, Q4K) {
  BlockQ4K blk{};
  blk.d = 0x3c00;     // 1
  blk.dmin = 0x4000;  // 2
  // Sub-block j: sc = 10 + j, m = 40 + j (both need the high bits for j >= 4 when >= 16).
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(j < 4 ? 10 + j : 50 + j);  // 54..57 for j >= 4
    mn[j] = static_cast<uint8_t>(j < 4 ? 3 + j : 33 + j);   // 37..40 for j >= 4
  }
  for (int j = 0; j < 4; ++j) {
    blk.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    blk.scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    blk.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
  }
  for (int j = 0; j < 8; ++j) {
    uint8_t a, b;
    q4_k_scale_min(j, blk.scales, &a, &b);
    ASSERT_EQ(a, sc[j]);
    ASSERT_EQ(b, mn[j]);
  }
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      blk.qs[32 * c + l] = static_cast<uint8_t>(((l + c) & 15) | (((l * 3 + c) & 15) << 4));
    }
  }
  std::vector<float> out(256);
  dequantize_row(GgmlType::kQ4_K, &blk, out.data(), 256);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int jl = 2 * c, jh = 2 * c + 1;
      EXPECT_EQ(out[64 * c + l], static_cast<float>(sc[jl] * ((l + c) & 15)) - 2.0f * mn[jl]);
      EXPECT_EQ(out[64 * c + 32 + l],
                static_cast<float>(sc[jh] * ((l * 3 + c) & 15)) - 2.0f * mn[jh]);
    }
  }
  EXPECT_EQ(out[255], 57.0f * ((31 * 3 + 3) & 15) - 80.0f);
}

TEST(Dequant, Iq2XxsTables) {
  // Sign table: 7 free bits + even parity.
  EXPECT_EQ(kIq2Signs[0], 0x00);
  EXPECT_EQ(kIq2Signs[1], 0x81);
  EXPECT_EQ(kIq2Signs[3], 0x03);
  EXPECT_EQ(kIq2Signs[127], 0xff);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(__builtin_popcount(kIq2Signs[i]) % 2, 0);
  // The closed form the CUDA fused expert kernels compute in registers instead of a lookup.
  for (int i = 0; i < 128; ++i) EXPECT_EQ(kIq2Signs[i], i | (__builtin_popcount(i) & 1) << 7) << i;
  // Grid: all bytes from {8, 25, 43}; entries distinct; entry 0 is all 8s.
  EXPECT_EQ(kIq2XxsGrid[0], 0x0808080808080808ull);
  for (int g = 0; g < 256; ++g) {
    for (int b = 0; b < 8; ++b) {
      const int v = static_cast<int>((kIq2XxsGrid[g] >> (8 * b)) & 0xff);
      ASSERT_TRUE(v == 8 || v == 25 || v == 43) << g;
    }
    for (int h = 0; h < g; ++h) ASSERT_NE(kIq2XxsGrid[g], kIq2XxsGrid[h]);
  }
}

TEST(Dequant, Iq2Xxs) {
  BlockIQ2XXS blk{};
  blk.d = 0x4000;  // 2
  // Group 0: grid indices {0, 1, 2, 255}; signs {0, 1, 3, 127}; ls = 5.
  // Group 1: grid indices all 3; sign index 2 for every chunk; ls = 0.
  uint32_t a[16] = {};
  a[0] = 0u | (1u << 8) | (2u << 16) | (255u << 24);
  a[1] = 0u | (1u << 7) | (3u << 14) | (127u << 21) | (5u << 28);
  a[2] = 0x03030303u;
  a[3] = 2u | (2u << 7) | (2u << 14) | (2u << 21);
  std::memcpy(blk.qs, a, sizeof a);
  std::vector<float> out(256);
  dequantize_row(GgmlType::kIQ2_XXS, &blk, out.data(), 256);
  const uint8_t grid_idx[4] = {0, 1, 2, 255};
  const uint8_t sign_idx[4] = {0, 1, 3, 127};
  const float db0 = 2.0f * 5.5f * 0.25f;  // d·(0.5+ls)·0.25 = 2.75
  for (int k = 0; k < 4; ++k) {
    int8_t v[8];
    iq2_xxs_signed_values(grid_idx[k], sign_idx[k], v);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(out[8 * k + i], db0 * static_cast<float>(v[i]));
  }
  // Spelled out: grid[1] = 0x080808080808082b -> byte 0 = 43; signs[1] = 0x81 -> weight 0
  // and weight 7 negative.
  EXPECT_EQ(out[8], -2.75f * 43.0f);
  EXPECT_EQ(out[15], -2.75f * 8.0f);
  EXPECT_EQ(out[9], 2.75f * 8.0f);
  const float db1 = 2.0f * 0.5f * 0.25f;
  for (int i = 32; i < 64; ++i) {
    const int b = i % 8;
    const float mag = static_cast<float>((kIq2XxsGrid[3] >> (8 * b)) & 0xff);
    const float sign = b == 1 || b == 7 ? -1.0f : 1.0f;  // kIq2Signs[2] = 0x82
    EXPECT_EQ(out[i], db1 * mag * sign) << i;
  }
  // Groups 2..7 are all zero words: grid 0 (all 8), no signs, ls 0 -> 2·0.5·0.25·8 = 2.
  for (int i = 64; i < 256; ++i) EXPECT_EQ(out[i], 2.0f);
}

}  // namespace
}  // namespace ds4::quant
