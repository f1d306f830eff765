// tests/unit/core/reduce_test.cpp — top_two: the SSE2 fast path equals the scalar definition
// bit for bit (id and margin, NaN / infinities / signed zeros / ties / excluded index / tails),
// and the definition itself says what reduce.h promises.
#include "core/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace ds4 {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

void expect_same(std::span<const float> row, int32_t excluded) {
  const TopTwo fast = top_two(row, excluded);
  const TopTwo ref = top_two_scalar(row, excluded);
  ASSERT_EQ(fast.id, ref.id) << "n=" << row.size() << " excluded=" << excluded;
  if (std::isnan(ref.margin)) {
    ASSERT_TRUE(std::isnan(fast.margin)) << "n=" << row.size();
  } else {
    ASSERT_EQ(bits(fast.margin), bits(ref.margin)) << "n=" << row.size() << " " << fast.margin << " vs " << ref.margin;
  }
}

TEST(TopTwo, DefinitionOnSmallRows) {
  const float nan = std::nanf("");
  const float inf = INFINITY;
  std::vector<float> a = {1.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(top_two_scalar(a).id, 1);                        // ties -> smallest id
  EXPECT_EQ(bits(top_two_scalar(a).margin), bits(0.0f));     // two equal maxima
  EXPECT_EQ(top_two_scalar(a, 1).id, 3);
  EXPECT_EQ(top_two_scalar(a, 1).margin, 1.0f);              // 3 - 2 with the first 3 excluded
  std::vector<float> b = {nan, -1.0f, nan, -4.0f};
  EXPECT_EQ(top_two_scalar(b).id, 1);                        // NaN never wins
  EXPECT_EQ(top_two_scalar(b).margin, 3.0f);
  std::vector<float> c = {nan, nan, nan};
  EXPECT_EQ(top_two_scalar(c).id, 0);                        // no candidate: first allowed id
  EXPECT_EQ(top_two_scalar(c, 0).id, 1);
  EXPECT_TRUE(std::isnan(top_two_scalar(c).margin));
  std::vector<float> d = {nan, 5.0f};
  EXPECT_EQ(top_two_scalar(d).margin, inf);                  // a single candidate
  EXPECT_EQ(top_two_scalar(std::span<const float>()).id, -1);
  std::vector<float> z = {-0.0f, 0.0f, -1.0f};
  EXPECT_EQ(top_two_scalar(z).id, 0);
  EXPECT_EQ(bits(top_two_scalar(z).margin), bits(0.0f));     // +0, never -0
  EXPECT_EQ(bits(top_two(z).margin), bits(0.0f));
}

TEST(TopTwo, FastPathEqualsDefinitionOnRandomRows) {
  std::mt19937 rng(1234);
  const float specials[] = {std::nanf(""), INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, -1.0f, 7.5f};
  std::vector<int> sizes;
  for (int n = 0; n <= 70; ++n) sizes.push_back(n);
  sizes.insert(sizes.end(), {127, 128, 129, 1000, 8191, 8192, 8193});
  for (int n : sizes) {
    for (int trial = 0; trial < 24; ++trial) {
      std::vector<float> row(static_cast<size_t>(n));
      const int mode = trial % 4;  // 0 continuous, 1 few distinct values (ties), 2 specials, 3 mixed
      for (float& v : row) {
        const uint32_t r = rng();
        if (mode == 0) {
          v = static_cast<float>(static_cast<int32_t>(r)) * 1e-7f;
        } else if (mode == 1) {
          v = static_cast<float>(r % 5);
        } else if (mode == 2) {
          v = specials[r % 8];
        } else {
          v = (r % 7 == 0) ? specials[(r >> 8) % 8] : static_cast<float>(static_cast<int32_t>(r >> 4) % 1000) * 0.25f;
        }
      }
      const int32_t picks[] = {-1, 0, n - 1, n, n > 0 ? static_cast<int32_t>(rng() % n) : 0};
      for (int32_t ex : picks) expect_same(row, ex);
      // The maximum excluded: the runner-up must take over.
      if (n > 0) expect_same(row, top_two_scalar(row).id);
    }
  }
}

TEST(TopTwo, RowsWithoutACandidateAboveMinusInfinity) {
  for (int n : {1, 5, 16, 33, 8192}) {
    std::vector<float> all_neg_inf(static_cast<size_t>(n), -INFINITY);
    std::vector<float> all_nan(static_cast<size_t>(n), std::nanf(""));
    for (int32_t ex : {-1, 0, n - 1}) {
      expect_same(all_neg_inf, ex);
      expect_same(all_nan, ex);
    }
    all_nan.back() = -INFINITY;  // one -inf among NaNs is the answer
    expect_same(all_nan, -1);
    EXPECT_EQ(top_two(all_nan).id, n - 1);
  }
}

}  // namespace
}  // namespace ds4
