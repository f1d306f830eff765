// tests/unit/sample/sampler_test.cpp — greedy ties, each filter on a hand-made distribution,
// seeded reproducibility, temperature 0 == greedy.
#include "sample/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
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

}  // namespace
}  // namespace ds4
