// tests/unit/core/reduce_test.cpp — top_two: the SSE2 fast path equals the scalar definition
// bit for bit (id and margin, NaN / infinities / signed zeros / ties / excluded index / tails),
// and the definition itself says what reduce.h promises.
#include "core/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <algorithm>
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


// ---- top_k_row ---------------------------------------------------------------------------------

namespace topk {

// The definition spelled out: every qualifying (value, id), sorted value descending with equal
// values (+0 == -0) to the smaller id, the first k, padded with -1 / -inf.
void reference(std::span<const float> row, int k, int32_t excluded, std::vector<int32_t>& ids,
               std::vector<float>& values) {
  std::vector<std::pair<float, int32_t>> all;
  for (int32_t i = 0; i < static_cast<int32_t>(row.size()); ++i) {
    if (i != excluded && !std::isnan(row[i])) all.push_back({row[i], i});
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  ids.assign(k, -1);
  values.assign(k, -INFINITY);
  for (int j = 0; j < k && j < static_cast<int>(all.size()); ++j) {
    ids[j] = all[j].second;
    values[j] = all[j].first;
  }
}

}  // namespace topk

TEST(TopK, EqualsTheDefinitionOnHardRows) {
  std::mt19937 rng(2024);
  std::normal_distribution<float> g(0.0f, 2.0f);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 700);
    std::vector<float> row(n);
    const int kind = trial % 6;
    for (int i = 0; i < n; ++i) {
      float v = g(rng);
      if (kind == 1) v = std::round(v);                                      // many ties
      if (kind == 2 && rng() % 4 == 0) v = (rng() & 1) ? 0.0f : -0.0f;        // signed zeros
      if (kind == 3 && rng() % 5 == 0) v = std::nanf("");
      if (kind == 4 && rng() % 7 == 0) v = (rng() & 1) ? INFINITY : -INFINITY;
      if (kind == 5) v = (rng() % 40 == 0) ? v : std::nanf("");              // few candidates
      row[i] = v;
    }
    const int k = 1 + static_cast<int>(rng() % 300);
    const int32_t excluded = (trial % 3 == 0) ? -1 : static_cast<int32_t>(rng() % n);
    std::vector<int32_t> want_ids, got_ids(k);
    std::vector<float> want_vals, got_vals(k);
    topk::reference(row, k, excluded, want_ids, want_vals);
    top_k_row(row, k, excluded, got_ids.data(), got_vals.data());
    ASSERT_EQ(want_ids, got_ids) << "trial " << trial << " n=" << n << " k=" << k;
    for (int j = 0; j < k; ++j) ASSERT_EQ(bits(want_vals[j]), bits(got_vals[j])) << "trial " << trial << " j=" << j;
  }
}

TEST(TopK, FlashRowsWithTiesAndTheBlockSkip) {
  // 129,280 logits: rounded (long runs of equal values around the cut), a rising row (every
  // element enters), and a row whose maximum sits at the end; k = 1, 40, 256.
  std::mt19937 rng(99);
  std::normal_distribution<float> g(0.0f, 3.0f);
  const int n = 129280;
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<float> row(n);
    for (int i = 0; i < n; ++i) {
      row[i] = kind == 0 ? std::round(g(rng)) : kind == 1 ? static_cast<float>(i / 3) : g(rng);
    }
    if (kind == 2) row[n - 1] = 100.0f, row[n - 2] = std::nanf("");
    for (int k : {1, 40, 256}) {
      std::vector<int32_t> want_ids, got_ids(k);
      std::vector<float> want_vals, got_vals(k);
      topk::reference(row, k, 7, want_ids, want_vals);
      top_k_row(row, k, 7, got_ids.data(), got_vals.data());
      ASSERT_EQ(want_ids, got_ids) << "kind " << kind << " k=" << k;
      for (int j = 0; j < k; ++j) ASSERT_EQ(bits(want_vals[j]), bits(got_vals[j])) << "kind " << kind << " j=" << j;
    }
  }
}

TEST(TopK, SmallCases) {
  const float nan = std::nanf("");
  std::vector<float> a = {1.0f, 3.0f, -0.0f, 3.0f, 0.0f, nan, 2.0f};
  int32_t ids[8];
  float vals[8];
  top_k_row(a, 8, -1, ids, vals);
  const int32_t want[8] = {1, 3, 6, 0, 2, 4, -1, -1};  // -0 (id 2) ties +0 (id 4): smaller id first
  for (int j = 0; j < 8; ++j) EXPECT_EQ(want[j], ids[j]) << j;
  EXPECT_TRUE(std::signbit(vals[4]));   // the row's own -0 bits
  EXPECT_EQ(-INFINITY, vals[7]);
  top_k_row(a, 2, 1, ids, vals);        // excluded id 1
  EXPECT_EQ(3, ids[0]);
  EXPECT_EQ(6, ids[1]);
}

}  // namespace
}  // namespace ds4
