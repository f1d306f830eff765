// tests/unit/quant/fp4_store_test.cpp — the FP4 store of the indexer rows (quant/kv_sim.h):
// the store's values are the f16 rows' values bit for bit (decode(encode(x)) ==
// f16_round(round trip of x)), for random blocks and for NaN, ±inf, subnormal, huge, tiny and
// all-zero blocks; the round trip that writes the store computes the very values of the one
// that does not; all-zero bytes decode to +0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "quant/half.h"
#include "quant/quant.h"
#include "tests/unit/quant/special_blocks.h"

namespace ds4::quant {
namespace {

using test::bits;

// Rows of n values (n % 32 == 0), block by block of a kind picked by the block index
// (special_blocks.h), plus grid ties.
std::vector<float> special_rows(int n_rows, int n, uint32_t seed) {
  return test::special_blocks(static_cast<size_t>(n_rows) * n, 32, 12, 0, seed,
                              [](int kind, size_t, float v, std::mt19937& rng) {
                                if (kind != 10) return v;
                                return static_cast<float>(static_cast<int>(rng() % 13) - 6) * 0.25f;  // grid ties
                              });
}

TEST(Fp4Store, RowBytes) {
  EXPECT_EQ(fp4_row_bytes(128), 68);
  EXPECT_EQ(fp4_row_bytes(32), 17);
  EXPECT_EQ(fp4_row_bytes(256), 136);
}

// The FP4 part alone: every special block reaches it directly (no Hadamard mixing).
TEST(Fp4Store, DecodeIsTheF16RowOfTheRoundTrip) {
  for (int n : {32, 128, 160}) {
    const int n_rows = 60;
    const std::vector<float> x = special_rows(n_rows, n, 11u + static_cast<uint32_t>(n));
    std::vector<uint8_t> store(static_cast<size_t>(fp4_row_bytes(n)), 0xa5);
    std::vector<float> a(n), b(n), dec(n);
    int nonfinite = 0, inf_scales = 0;
    for (int r = 0; r < n_rows; ++r) {
      std::memcpy(a.data(), x.data() + static_cast<size_t>(r) * n, sizeof(float) * n);
      b = a;
      fp4_e2m1_roundtrip_row(a.data(), n);
      fp4_e2m1_roundtrip_row_store(b.data(), n, store.data());
      fp4_row_decode(store.data(), n, dec.data(), fp4_value_table());
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(bits(b[i]), bits(a[i])) << "n " << n << " row " << r << " elem " << i;
        ASSERT_EQ(bits(dec[i]), bits(f16_round(a[i]))) << "n " << n << " row " << r << " elem " << i << ": " << a[i];
        ASSERT_EQ(bits(dec[i]), bits(fp4_stored_value(store[i / 2] >> (4 * (i & 1)) & 15, store[n / 2 + i / 32])));
        nonfinite += !std::isfinite(dec[i]);
      }
      for (int k = 0; k < n / 32; ++k) {
        ASSERT_GE(store[n / 2 + k], 1);  // scale 2^-126 .. 2^128
        inf_scales += store[n / 2 + k] == 255;
      }
    }
    EXPECT_GT(nonfinite, 0) << n;  // the special blocks did reach inf / NaN values
    EXPECT_GT(inf_scales, 0) << n;
  }
}

// The indexer row path (Hadamard per 128, then FP4) with its store equals indexer_qat_row.
TEST(Fp4Store, IndexerRowStoreEqualsQatRow) {
  const int n = 256, n_rows = 40;
  std::vector<float> x = special_rows(n_rows, n, 5);
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (size_t i = 0; i < x.size() / 2; ++i) x[i] = g(rng) * 0.3f;  // plain rows too
  std::vector<uint8_t> store(static_cast<size_t>(fp4_row_bytes(n)));
  std::vector<float> a(n), b(n), dec(n);
  for (int r = 0; r < n_rows; ++r) {
    std::memcpy(a.data(), x.data() + static_cast<size_t>(r) * n, sizeof(float) * n);
    b = a;
    for (int off = 0; off < n; off += kHadamardDim) indexer_qat_row(a.data() + off);
    indexer_qat_row_store(b.data(), n, store.data());
    fp4_row_decode(store.data(), n, dec.data(), fp4_value_table());
    for (int i = 0; i < n; ++i) {
      ASSERT_EQ(bits(b[i]), bits(a[i])) << r << " " << i;
      ASSERT_EQ(bits(dec[i]), bits(f16_round(a[i]))) << r << " " << i;
    }
  }
}

TEST(Fp4Store, ZeroBytesDecodeToPlusZero) {
  std::vector<uint8_t> store(static_cast<size_t>(fp4_row_bytes(128)), 0);
  std::vector<float> dec(128, 1.0f);
  fp4_row_decode(store.data(), 128, dec.data(), fp4_value_table());
  for (float v : dec) EXPECT_EQ(bits(v), 0u);
}

// The table is the formula: (±1·E2M1 magnitude)·2^(e−127), f16-rounded; spot values.
TEST(Fp4Store, StoredValues) {
  EXPECT_EQ(fp4_stored_value(7, 127), 6.0f);
  EXPECT_EQ(fp4_stored_value(15, 127), -6.0f);
  EXPECT_EQ(fp4_stored_value(1, 126), 0.25f);
  EXPECT_EQ(fp4_stored_value(5, 130), 24.0f);
  EXPECT_EQ(fp4_stored_value(7, 127 + 14), std::numeric_limits<float>::infinity());  // 98304 > f16 max
  EXPECT_EQ(fp4_stored_value(1, 1), 0.0f);                                         // below f16's range
  EXPECT_EQ(fp4_stored_value(7, 255), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp4_stored_value(0, 255)));  // 0 · inf
  EXPECT_EQ(bits(fp4_stored_value(8, 127)), 0x80000000u);  // -0
  const float* t = fp4_value_table();
  for (int e = 0; e < 256; ++e) {
    for (int c = 0; c < 16; ++c) ASSERT_EQ(bits(t[e * 16 + c]), bits(fp4_stored_value(c, e))) << e << " " << c;
  }
}

}  // namespace
}  // namespace ds4::quant
