// tests/speculative/lookup_test.cpp — NgramLookup (speculative/lookup.h) against a backward scan of the
// history, and LookupModel's per-length estimates (speculative/policies.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "speculative/lookup.h"
#include "speculative/runtime.h"

namespace ds4::spec_test {
namespace {

using speculative::NgramLookup;

// The definition: context = history + tail (N tokens); for k = min(kMaxMatch, N - 1) down to
// 1, the latest j with context[j, j + k) == the last k tokens and j + k <= H - 1 (an
// occurrence inside the history with a continuation token there); drafts = context[j + k, ..)
// up to n_max. Returns k (0 = none).
int scan(const std::vector<int32_t>& h, const std::vector<int32_t>& tail, int n_max, std::vector<int32_t>* out) {
  std::vector<int32_t> c = h;
  c.insert(c.end(), tail.begin(), tail.end());
  const int64_t H = static_cast<int64_t>(h.size()), N = static_cast<int64_t>(c.size());
  out->clear();
  for (int64_t k = std::min<int64_t>(NgramLookup::kMaxMatch, N - 1); k >= 1; --k) {
    for (int64_t j = H - 1 - k; j >= 0; --j) {
      if (!std::equal(c.begin() + j, c.begin() + j + k, c.end() - k)) continue;
      for (int64_t p = j + k; p < N && static_cast<int>(out->size()) < n_max; ++p) out->push_back(c[p]);
      return static_cast<int>(k);
    }
  }
  return 0;
}

// Random histories over a small vocabulary (many repeats, every match length), grown a few
// tokens at a time as a session's committed tokens are, queried after every growth with and
// without a one-token tail: the index agrees with the scan everywhere, through several table
// growths (the tables start at 1024 slots).
TEST(NgramLookup, EqualsBackwardScan) {
  std::mt19937 rng(7);
  for (int vocab : {2, 5, 40}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    std::uniform_int_distribution<int32_t> tok(0, vocab - 1);
    std::uniform_int_distribution<int> step(1, 9);
    NgramLookup lk;
    if (vocab == 40) lk.reserve(1600);  // sized up front: the same answers, no growth
    const size_t reserved = lk.slots();
    std::vector<int32_t> h;
    int matched = 0;
    while (h.size() < 1500) {
      for (int s = step(rng); s > 0; --s) h.push_back(tok(rng));
      lk.update(h);
      ASSERT_EQ(lk.indexed(), static_cast<int64_t>(h.size()));
      for (int with_tail = 0; with_tail < 2; ++with_tail) {
        const std::vector<int32_t> tail = with_tail ? std::vector<int32_t>{tok(rng)} : std::vector<int32_t>{};
        for (int n_max : {1, 5, 8}) {
          std::vector<int32_t> want;
          const int k_want = scan(h, tail, n_max, &want);
          int32_t got[16];
          int n_got = -1;
          const int k_got = lk.lookup(h, tail, n_max, got, &n_got);
          ASSERT_EQ(k_got, k_want) << "history " << h.size() << " tail " << with_tail << " n_max " << n_max;
          ASSERT_EQ(std::vector<int32_t>(got, got + n_got), want) << "history " << h.size();
          matched += k_got > 0;
        }
      }
    }
    EXPECT_GT(matched, 0);
    if (vocab == 40) {
      EXPECT_GE(reserved, 2u * 1600u);
      EXPECT_EQ(lk.slots(), reserved);
    } else {
      EXPECT_GE(lk.slots(), 2 * h.size());  // grew from the first 1024 slots
    }
  }
}

TEST(NgramLookup, ContinuationAndTail) {
  //                        0  1  2  3  4  5  6  7  8  9 10 11 12
  const std::vector<int32_t> h = {1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 1, 2, 3};
  NgramLookup lk;
  lk.update(h);
  int32_t d[8];
  int n = 0;
  // Suffix "1 2 3": its latest earlier occurrence starts at 5 -> 5 6 1 2 3 (into the suffix itself).
  EXPECT_EQ(lk.lookup(h, {}, 8, d, &n), 3);
  EXPECT_EQ(std::vector<int32_t>(d, d + n), (std::vector<int32_t>{5, 6, 1, 2, 3}));
  EXPECT_EQ(lk.lookup(h, {}, 2, d, &n), 3);
  EXPECT_EQ(std::vector<int32_t>(d, d + n), (std::vector<int32_t>{5, 6}));
  // A fold cycle's seed as tail: "1 2 3 4" occurred at 0 -> 9 1 2 3 ...
  const int32_t seed[1] = {4};
  EXPECT_EQ(lk.lookup(h, seed, 4, d, &n), 4);
  EXPECT_EQ(std::vector<int32_t>(d, d + n), (std::vector<int32_t>{9, 1, 2, 3}));
  // Nothing ends in a token never seen before.
  const int32_t fresh[1] = {77};
  EXPECT_EQ(lk.lookup(h, fresh, 4, d, &n), 0);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(lk.lookup(h, {}, 0, d, &n), 0);  // no room
}

// A session reused for another conversation: a shorter or different history is re-indexed,
// so no draft follows the old one.
TEST(NgramLookup, RestartsOnAnotherTimeline) {
  NgramLookup lk;
  std::vector<int32_t> a = {1, 2, 3, 1, 2};
  lk.update(a);
  int32_t d[8];
  int n = 0;
  EXPECT_EQ(lk.lookup(a, {}, 8, d, &n), 2);  // "1 2" -> 3 1 2
  const std::vector<int32_t> b = {4, 5, 4};
  lk.update(b);
  EXPECT_EQ(lk.indexed(), 3);
  EXPECT_EQ(lk.lookup(b, {}, 8, d, &n), 1);  // "4" -> 5 4
  EXPECT_EQ(std::vector<int32_t>(d, d + n), (std::vector<int32_t>{5, 4}));
  std::vector<int32_t> c = {7, 8, 9, 7, 8, 9, 6};  // longer, but c[2] is not the 4 indexed there
  lk.update(c);
  c.push_back(7);
  lk.update(c);
  EXPECT_EQ(lk.lookup(c, {}, 8, d, &n), 1);
  EXPECT_EQ(std::vector<int32_t>(d, d + n), (std::vector<int32_t>{8, 9, 6, 7}));
}

// q(l): the prior chain (kPrior for l = 1, then each length's prior is the estimate one
// shorter moved kLonger towards 1), and decayed counts.
TEST(LookupModel, PerLengthEstimates) {
  using speculative::LookupModel;
  LookupModel m;
  float prior = LookupModel::kPrior;
  for (int l = 1; l <= LookupModel::kMaxLen; ++l) {
    EXPECT_FLOAT_EQ(m.q(l), prior) << l;
    prior = prior + LookupModel::kLonger * (1.0f - prior);
  }
  EXPECT_FLOAT_EQ(m.q(LookupModel::kMaxLen + 5), m.q(LookupModel::kMaxLen));  // the last cell
  // Length 1 rejected 9 times in 10: q(1) falls, and so does every longer length's prior.
  const float q3_before = m.q(3);
  for (int i = 0; i < 10; ++i) m.note(1, i == 0, 1.0f);
  EXPECT_FLOAT_EQ(m.q(1), (1.0f + LookupModel::kPriorWeight * LookupModel::kPrior) / (10.0f + LookupModel::kPriorWeight));
  EXPECT_LT(m.q(3), q3_before);
  // Length 3 always kept: its own counts dominate its prior.
  for (int i = 0; i < 20; ++i) m.note(3, true, 1.0f);
  EXPECT_GT(m.q(3), 0.95f);
  // Decay: old counts fade, so new evidence moves the estimate faster.
  LookupModel a, b;
  for (int i = 0; i < 30; ++i) {
    a.note(2, true, 1.0f);
    b.note(2, true, 0.5f);
  }
  a.note(2, false, 1.0f);
  b.note(2, false, 0.5f);
  EXPECT_LT(b.q(2), a.q(2));
}

// The base prior sets every length up to flat_len and, through the chain, every longer
// length's prior: the continuation model's lower, flatter start sits below the d_0 model's.
TEST(LookupModel, BasePriorStartsTheChain) {
  using speculative::LookupModel;
  LookupModel d0, cont;
  cont.base = LookupModel::kContPrior;
  cont.flat_len = LookupModel::kContFlatLen;
  for (int l = 1; l <= LookupModel::kContFlatLen; ++l) EXPECT_FLOAT_EQ(cont.q(l), LookupModel::kContPrior) << l;
  EXPECT_FLOAT_EQ(cont.q(LookupModel::kContFlatLen + 1),
                  LookupModel::kContPrior + LookupModel::kLonger * (1.0f - LookupModel::kContPrior));
  for (int l = 1; l <= LookupModel::kMaxLen; ++l) EXPECT_LT(cont.q(l), d0.q(l)) << l;
  // A flat length learns from its own counts only: length 2's evidence leaves length 3 alone.
  static_assert(LookupModel::kContFlatLen >= 3, "the check below needs lengths 2 and 3 flat");
  for (int i = 0; i < 10; ++i) cont.note(2, true, 1.0f);
  EXPECT_GT(cont.q(2), 0.9f);
  EXPECT_FLOAT_EQ(cont.q(3), LookupModel::kContPrior);
  // The same evidence moves both towards it.
  for (int i = 0; i < 50; ++i) {
    d0.note(2, true, 1.0f);
    cont.note(2, true, 1.0f);
  }
  EXPECT_GT(cont.q(2), 0.95f);
  EXPECT_NEAR(cont.q(2), d0.q(2), 0.02f);
}

}  // namespace
}  // namespace ds4::spec_test
