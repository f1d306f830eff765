// tests/unit/quant/fp8_store_test.cpp — the FP8 store of the compressed KV rows
// (quant/kv_sim.h): the store's values are the former f16 rows' values bit for bit
// (decode(encode(x)) == f16_to_f32(f32_to_f16(x')) with x' the FP8 round trip of x's non-RoPE
// dims), for random blocks and for zero, signed-zero, subnormal, tiny, huge, ±inf and NaN
// blocks and RoPE dims; the round trip that writes the store computes the very values of the
// one that does not; the vectorised decode equals fp8_stored_value for all 256 × 256 (code,
// exponent byte) pairs; all-zero bytes decode to +0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "quant/half.h"
#include "quant/quant.h"
#include "tests/unit/quant/special_blocks.h"

namespace ds4::quant {
namespace {

using test::bits;

// Values of 64-blocks of a kind picked by the block index (special_blocks.h), plus grid ties,
// E4M3 subnormals after scaling and the largest finite values (also applied to the RoPE dims,
// in 64-value runs).
std::vector<float> special_values(size_t n, uint32_t seed) {
  return test::special_blocks(n, 64, 14, seed, seed, [](int kind, size_t i, float v, std::mt19937& rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    switch (kind) {
      case 10: return static_cast<float>(static_cast<int>(rng() % 33) - 16) * 0.0625f;  // grid ties
      case 11: return u(rng) * 3e-3f;  // E4M3 subnormals after scaling
      case 12: return std::numeric_limits<float>::max() * ((i & 1) ? -1.0f : 1.0f);  // largest finite
      default: return v;
    }
  });
}

TEST(Fp8Store, RowBytes) {
  EXPECT_EQ(fp8_rope_offset(448), 456);  // 448 codes + 7 exponent bytes + 1 pad byte
  EXPECT_EQ(fp8_row_bytes(512, 64), 584);
  EXPECT_EQ(fp8_rope_offset(64), 66);    // 64 codes + 1 exponent byte + 1 pad byte
  EXPECT_EQ(fp8_row_bytes(128, 64), 194);
  EXPECT_EQ(fp8_rope_offset(128), 130);  // no pad byte
  EXPECT_EQ(fp8_row_bytes(128, 0), 130);
  EXPECT_EQ(fp8_row_bytes(32, 32), 64);  // no FP8 part
}

// The store of every row decodes to the f16 row of the FP8 round trip (the former store, as
// f32_to_f16_row then f16_to_f32_row wrote and read it), element by element through
// fp8_stored_value too; the store pass leaves the same f32 values as fp8_e4m3_roundtrip.
TEST(Fp8Store, DecodeIsTheF16RowOfTheRoundTrip) {
  for (const auto& [D, n_rot] : {std::tuple{512, 64}, std::tuple{128, 64}, std::tuple{192, 0}, std::tuple{64, 64},
                                 std::tuple{136, 8}}) {
    SCOPED_TRACE(testing::Message() << "D " << D << ", n_rot " << n_rot);
    const int lead = D - n_rot, rb = fp8_row_bytes(D, n_rot), n_rows = 60;
    const std::vector<float> x = special_values(static_cast<size_t>(n_rows) * D, 7u + static_cast<uint32_t>(D + n_rot));
    std::vector<uint8_t> store(static_cast<size_t>(rb));
    std::vector<float> a(D), b(D), dec(D), want(D);
    std::vector<uint16_t> f16(D);
    int nonfinite = 0, inf_scales = 0, zeros = 0, neg_zeros = 0, subnormals = 0;
    for (int r = 0; r < n_rows; ++r) {
      std::memcpy(a.data(), x.data() + static_cast<size_t>(r) * D, sizeof(float) * D);
      b = a;
      fp8_e4m3_roundtrip(a.data(), lead);
      f32_to_f16_row(a.data(), f16.data(), D);  // the former compressed row
      f16_to_f32_row(f16.data(), want.data(), D);
      std::fill(store.begin(), store.end(), static_cast<uint8_t>(0xa5));
      fp8_kv_row_store(b.data(), D, n_rot, store.data());
      fp8_row_decode(store.data(), D, n_rot, dec.data());
      for (int i = 0; i < D; ++i) {
        ASSERT_EQ(bits(b[i]), bits(a[i])) << "row " << r << " elem " << i;
        ASSERT_EQ(bits(dec[i]), bits(want[i])) << "row " << r << " elem " << i << ": " << a[i];
        if (i < lead) {
          ASSERT_EQ(bits(dec[i]), bits(fp8_stored_value(store[i], store[lead + i / 64]))) << r << " " << i;
        }
        nonfinite += !std::isfinite(dec[i]);
        zeros += bits(dec[i]) == 0u;
        neg_zeros += bits(dec[i]) == 0x80000000u;
        subnormals += dec[i] != 0.0f && std::fabs(dec[i]) < 0x1p-14f;
      }
      for (int k = 0; k < lead / 64; ++k) inf_scales += store[lead + k] == 255;
      const int end = lead + lead / 64;
      if (fp8_rope_offset(lead) > end) {
        ASSERT_EQ(store[end], 0) << "the pad byte is written";
      }
    }
    if (lead > 0) {  // the special blocks did reach these cases
      EXPECT_GT(inf_scales, 0);
      EXPECT_GT(subnormals, 0);
    }
    EXPECT_GT(nonfinite, 0);
    EXPECT_GT(zeros, 0);
    EXPECT_GT(neg_zeros, 0);
  }
}

// Exhaustive: a row whose 256 codes are 0..255 under one exponent byte, for every byte; the
// decode (vectorised on x86) equals fp8_stored_value, which equals the definition on the E4M3
// table (index 127, never written, by the formula: 480).
TEST(Fp8Store, DecodeEqualsStoredValueForEveryCodeAndByte) {
  const int D = 256 + 64, n_rot = 64, lead = 256;
  std::vector<uint8_t> store(static_cast<size_t>(fp8_row_bytes(D, n_rot)), 0);
  std::vector<float> dec(D);
  for (int c = 0; c < 256; ++c) store[c] = static_cast<uint8_t>(c);
  for (int e = 0; e < 256; ++e) {
    for (int k = 0; k < 4; ++k) store[lead + k] = static_cast<uint8_t>(e);
    fp8_row_decode(store.data(), D, n_rot, dec.data());
    for (int c = 0; c < 256; ++c) {
      ASSERT_EQ(bits(dec[c]), bits(fp8_stored_value(c, e))) << "code " << c << " byte " << e;
      const int idx = c & 127;
      const float g = idx < 127 ? e4m3_value(idx) : 480.0f;
      const float sign = (c & 128) != 0 ? -1.0f : 1.0f;
      ASSERT_EQ(bits(dec[c]), bits(f16_round(sign * g * std::ldexp(1.0f, e - 127)))) << "code " << c << " byte " << e;
    }
  }
}

TEST(Fp8Store, ZeroBytesDecodeToPlusZero) {
  std::vector<uint8_t> store(static_cast<size_t>(fp8_row_bytes(512, 64)), 0);
  std::vector<float> dec(512, 1.0f);
  fp8_row_decode(store.data(), 512, 64, dec.data());
  for (float v : dec) EXPECT_EQ(bits(v), 0u);
}

TEST(Fp8Store, StoredValues) {
  EXPECT_EQ(fp8_stored_value(56, 127), 1.0f);
  EXPECT_EQ(fp8_stored_value(126, 127), 448.0f);
  EXPECT_EQ(fp8_stored_value(128 | 126, 127), -448.0f);
  EXPECT_EQ(fp8_stored_value(1, 127), 0x1p-9f);
  EXPECT_EQ(fp8_stored_value(3, 127 - 10), 3 * 0x1p-19f);    // an f16 subnormal, exact
  EXPECT_EQ(fp8_stored_value(1, 127 - 16), 0.0f);            // 2^-25: the tie rounds to even 0
  EXPECT_EQ(fp8_stored_value(126, 127 + 8), std::numeric_limits<float>::infinity());  // 114688 > f16 max
  EXPECT_EQ(fp8_stored_value(126 | 128, 255), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp8_stored_value(0, 255)));  // 0 · inf
  EXPECT_EQ(bits(fp8_stored_value(128, 127)), 0x80000000u);  // -0
  EXPECT_EQ(bits(fp8_stored_value(0, 0)), 0u);
}

}  // namespace
}  // namespace ds4::quant
