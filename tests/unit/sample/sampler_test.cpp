// tests/unit/sample/sampler_test.cpp — greedy ties, each filter on a hand-made distribution,
// seeded reproducibility, temperature 0 == greedy.
#include "sample/sampler.h"

#include "core/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

namespace ds4 {
namespace {

// Logits whose softmax at T=1 is proportional to `probs`.
std::vector<float> logits_from_probs(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::map<int32_t, int> histogram(Sampler& s, const std::vector<float>& logits, int draws) {
  std::map<int32_t, int> h;
  for (int i = 0; i < draws; ++i) ++h[s.sample(logits)];
  return h;
}

TEST(Argmax, TiesGoToSmallestId) {
  std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f, 2.0f};
  EXPECT_EQ(argmax(l), 1);
  EXPECT_EQ(argmax_excluding(l, 1), 3);
  EXPECT_EQ(argmax_excluding(l, 0), 1);
}

TEST(Argmax, NanNeverWinsAndEmptyIsMinusOne) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> l = {nan, 1.0f, nan, 3.0f};
  EXPECT_EQ(argmax(l), 3);
  EXPECT_EQ(argmax(std::span<const float>()), -1);
}

TEST(Argmax, ExcludingSkipsTheTopToken) {
  std::vector<float> l = {0.0f, 9.0f, 5.0f, 5.0f};  // EOS = 1 is the top logit
  EXPECT_EQ(argmax_excluding(l, 1), 2);
}

TEST(Sampler, TemperatureZeroIsGreedyAndConsumesNoRandomness) {
  std::vector<float> l = {1.0f, 3.0f, 3.0f, 2.0f};
  SamplerParams p;
  p.temperature = 0.0f;
  Sampler s(p, 4);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(l), 1);
  EXPECT_EQ(s.sample(l, /*excluded=*/1), 2);
  // Negative temperature is greedy too.
  p.temperature = -1.0f;
  Sampler s2(p, 4);
  EXPECT_EQ(s2.sample(l), 1);
}

TEST(Sampler, SameSeedSameSequenceDifferentSeedsDiffer) {
  std::vector<float> l = logits_from_probs({0.2, 0.2, 0.2, 0.2, 0.2});
  SamplerParams p;
  p.temperature = 1.0f;
  p.min_p = 0.0f;
  p.seed = 42;
  Sampler a(p, 5), b(p, 5);
  p.seed = 43;
  Sampler c(p, 5);
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 64; ++i) {
    sa.push_back(a.sample(l));
    sb.push_back(b.sample(l));
    sc.push_back(c.sample(l));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
  // Every token is reachable on a flat distribution.
  EXPECT_EQ(std::set<int32_t>(sa.begin(), sa.end()).size(), 5u);
}

TEST(Rng, SeedZeroWorksAndIsDeterministic) {
  Rng a(0), b(0), c(1);
  uint64_t x = a.next_u64();
  EXPECT_NE(x, 0u);
  EXPECT_EQ(x, b.next_u64());
  EXPECT_NE(x, c.next_u64());
  for (int i = 0; i < 1000; ++i) {
    double d = a.next_double();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
  }
}

TEST(Sampler, MinPDropsTokensBelowFractionOfTheMax) {
  // p = {0.5, 0.3, 0.15, 0.05}; min_p = 0.2 keeps p >= 0.1 -> ids 0,1,2.
  std::vector<float> l = logits_from_probs({0.5, 0.3, 0.15, 0.05});
  SamplerParams p;
  p.min_p = 0.2f;
  p.seed = 7;
  Sampler s(p, 4);
  auto h = histogram(s, l, 4000);
  EXPECT_EQ(h.count(3), 0u);
  EXPECT_GT(h[2], 0);
  // Without the filter the tail token shows up.
  p.min_p = 0.0f;
  Sampler s2(p, 4);
  EXPECT_GT(histogram(s2, l, 4000)[3], 0);
}

TEST(Sampler, TopKKeepsTheKMostProbableTiesToSmallerId) {
  // ids 1 and 2 tie; k = 2 keeps id 0 and id 1 (smaller of the tie).
  std::vector<float> l = logits_from_probs({0.4, 0.2, 0.2, 0.2});
  SamplerParams p;
  p.top_k = 2;
  p.min_p = 0.0f;
  p.seed = 3;
  Sampler s(p, 4);
  auto h = histogram(s, l, 4000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_GT(h[0], 0);
  EXPECT_GT(h[1], 0);
  EXPECT_EQ(h.count(2), 0u);
  EXPECT_EQ(h.count(3), 0u);
  // Roughly 2:1 between id 0 and id 1.
  EXPECT_GT(h[0], h[1]);
}

TEST(Sampler, TopPKeepsShortestPrefixReachingMass) {
  // Sorted mass: 0.5, 0.8, 0.95, 1.0. top_p = 0.75 keeps ids 0 and 1 only.
  std::vector<float> l = logits_from_probs({0.3, 0.05, 0.5, 0.15});  // order shuffled
  SamplerParams p;
  p.top_p = 0.75f;
  p.min_p = 0.0f;
  p.seed = 11;
  Sampler s(p, 4);
  auto h = histogram(s, l, 4000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_GT(h[2], 0);
  EXPECT_GT(h[0], 0);
  // top_p = 0 keeps only the top token.
  p.top_p = 0.0f;
  Sampler s2(p, 4);
  auto h2 = histogram(s2, l, 100);
  EXPECT_EQ(h2.size(), 1u);
  EXPECT_EQ(h2[2], 100);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  std::vector<float> l = logits_from_probs({0.6, 0.4});
  SamplerParams p;
  p.min_p = 0.0f;
  p.seed = 5;
  p.temperature = 0.25f;  // 0.6^4 : 0.4^4 ~ 0.835 : 0.165
  Sampler cold(p, 2);
  auto hc = histogram(cold, l, 4000);
  p.temperature = 4.0f;  // ~ 0.525 : 0.475
  Sampler hot(p, 2);
  auto hh = histogram(hot, l, 4000);
  EXPECT_GT(hc[0], 3000);
  EXPECT_LT(hh[0], 2400);
  EXPECT_GT(hh[1], 1600);
}

TEST(Sampler, ExcludedTokenIsNeverSampled) {
  std::vector<float> l = logits_from_probs({0.1, 0.8, 0.1});
  SamplerParams p;
  p.min_p = 0.0f;
  Sampler s(p, 3);
  for (int i = 0; i < 500; ++i) EXPECT_NE(s.sample(l, 1), 1);
}


// ---- The candidates read-out (sample_candidates) against the row (sample) ----------------------

struct Setting {
  float temperature, top_p, min_p;
  int top_k;
};

// A random row of n logits: Gaussian of `scale`, optionally rounded (ties everywhere) and
// sprinkled with NaN.
std::vector<float> random_row(int n, float scale, bool ties, bool nans, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, scale);
  std::vector<float> l(static_cast<size_t>(n));
  for (auto& v : l) {
    v = g(rng);
    if (ties) v = std::round(v * 2.0f) / 2.0f;
    if (nans && rng() % 13 == 0) v = std::numeric_limits<float>::quiet_NaN();
  }
  return l;
}

// Draws `draws` tokens twice with the same seed: through sample(row) and through
// sample_candidates(top-K of the row), falling back to the row on kNeedRow. Returns how many
// draws the candidates decided; the sequences must be equal.
int expect_same_draws(const std::vector<float>& row, const Setting& st, int k_read, int32_t excluded, int draws,
                      uint64_t seed) {
  SamplerParams p;
  p.temperature = st.temperature;
  p.top_k = st.top_k;
  p.top_p = st.top_p;
  p.min_p = st.min_p;
  p.seed = seed;
  const int n = static_cast<int>(row.size());
  Sampler by_row(p, n), by_cand(p, n);
  std::vector<int32_t> ids(static_cast<size_t>(k_read));
  std::vector<float> vals(static_cast<size_t>(k_read));
  top_k_row(row, k_read, excluded, ids.data(), vals.data());
  int decided = 0;
  for (int d = 0; d < draws; ++d) {
    const int32_t want = by_row.sample(row, excluded);
    int32_t got = by_cand.sample_candidates(ids, vals);
    if (got == Sampler::kNeedRow) {
      got = by_cand.sample(row, excluded);
    } else {
      ++decided;
    }
    EXPECT_EQ(want, got) << "draw " << d << " T=" << st.temperature << " top_k=" << st.top_k
                         << " top_p=" << st.top_p << " min_p=" << st.min_p << " K=" << k_read;
    if (want != got) break;
  }
  return decided;
}

TEST(SamplerCandidates, SameTokensAsTheRowForEverySetting) {
  const Setting settings[] = {
      {1.0f, 1.0f, 0.05f, 0},    // the defaults: min-p decides
      {0.7f, 1.0f, 0.0f, 40},    // top-k decides
      {1.3f, 0.9f, 0.05f, 0},    // top-p after min-p
      {0.8f, 0.95f, 0.0f, 50},   // top-p after top-k
      {0.5f, 0.5f, 0.1f, 5},     // all three
      {1.0f, 0.95f, 0.0f, 0},    // needs every token: the row
      {1.0f, 1.0f, 0.0f, 400},   // top-k past the read-out: the row
      {2.5f, 1.0f, 0.01f, 0},    // a flat distribution: often the row
      {0.0f, 1.0f, 0.05f, 0},    // greedy
  };
  int decided = 0;
  uint32_t seed = 100;
  for (const Setting& st : settings) {
    for (int n : {7, 300, 5000}) {
      for (int variant = 0; variant < 4; ++variant) {
        const bool ties = variant & 1, nans = variant & 2;
        const auto row = random_row(n, variant == 3 ? 0.5f : 3.0f, ties, nans, ++seed);
        for (int32_t excluded : {-1, static_cast<int32_t>(seed % static_cast<uint32_t>(n))}) {
          for (int k_read : {8, 256}) {
            const int k = std::min(k_read, n);
            decided += expect_same_draws(row, st, k, excluded, 60, seed);
            if (HasFailure()) return;
          }
        }
      }
    }
  }
  EXPECT_GT(decided, 0);
}

TEST(SamplerCandidates, DefaultsDecideWithoutTheRowOnAPeakedRow) {
  // Flash-sized vocabulary, a few dozen plausible tokens well above a broad tail (an LM's
  // usual shape): min-p keeps well under 256.
  auto row = random_row(129280, 1.5f, false, false, 77);
  for (int i = 0; i < 40; ++i) row[static_cast<size_t>(i) * 3001 + 17] += 10.0f;
  EXPECT_EQ(200, expect_same_draws(row, Setting{1.0f, 1.0f, 0.05f, 0}, 256, -1, 200, 5));
  EXPECT_EQ(200, expect_same_draws(row, Setting{0.8f, 0.9f, 0.05f, 40}, 256, 2, 200, 6));
}

TEST(SamplerCandidates, EdgeRowsFallBackOrDecideTheSame) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> rows = {
      {nan, nan, nan},                    // no candidate: the row (top_two's first id)
      {1.0f, inf, 2.0f, inf},             // +inf top: the row
      {-inf, -inf, -inf},                 // -inf top: the row
      {3.0f, 3.0f, 3.0f, 3.0f, 3.0f},     // every value tied
      {0.0f, -0.0f, 0.0f, -1.0f},         // signed zeros tie
  };
  for (const auto& row : rows) {
    for (const Setting& st : {Setting{1.0f, 1.0f, 0.05f, 0}, Setting{1.0f, 0.5f, 0.0f, 2}}) {
      for (int k_read : {1, 2, static_cast<int>(row.size())}) {
        expect_same_draws(row, st, k_read, -1, 30, 9);
        expect_same_draws(row, st, k_read, 0, 30, 9);
      }
    }
  }
}

TEST(SamplerCandidates, NeedRowConsumesNoDraw) {
  // top_p needs the whole (flat) distribution: kNeedRow, and the RNG is untouched.
  const auto row = random_row(1000, 0.1f, false, false, 3);
  SamplerParams p;
  p.min_p = 0.0f;
  p.top_p = 0.9f;
  p.seed = 12;
  Sampler a(p, 1000), b(p, 1000);
  std::vector<int32_t> ids(16);
  std::vector<float> vals(16);
  top_k_row(row, 16, -1, ids.data(), vals.data());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Sampler::kNeedRow, a.sample_candidates(ids, vals));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(b.sample(row), a.sample(row));
}

TEST(Sampler, TopKDrawsTheKeptSetInIdOrder) {
  // top-k over a row == no top-k over the same row with the dropped tokens removed (NaN): the
  // kept set is walked in id order either way, so the same seed gives the same tokens.
  const auto row = random_row(400, 2.0f, false, false, 21);
  std::vector<int32_t> ids(12);
  std::vector<float> vals(12);
  top_k_row(row, 12, -1, ids.data(), vals.data());
  std::vector<float> only = row;
  for (auto& v : only) v = std::numeric_limits<float>::quiet_NaN();
  for (int j = 0; j < 12; ++j) only[static_cast<size_t>(ids[j])] = vals[j];
  SamplerParams p;
  p.min_p = 0.0f;
  p.top_k = 12;
  p.seed = 31;
  Sampler with_k(p, 400);
  p.top_k = 0;
  Sampler without(p, 400);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(without.sample(only), with_k.sample(row)) << i;
}

}  // namespace
}  // namespace ds4
