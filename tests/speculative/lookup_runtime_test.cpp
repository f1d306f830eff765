// tests/speculative/lookup_runtime_test.cpp — the runtime's prompt-lookup drafts (speculative/runtime.h,
// speculative/policies.h LookupPolicy) on the shipped models: their acceptance is learned per margin bucket of the
// logits they were proposed from and apart for d_0 and the drafts after it, and the output
// stays plain greedy.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "speculative/runtime.h"
#include "tests/speculative/shipped_fixture.h"

namespace ds4::spec_test {
namespace {

// Drafts nothing: every draft of the run comes from the lookup.
struct NoDrafts final : speculative::Proposer {
  int block_size() const override { return 4; }
  void propose(int32_t, int64_t, int, std::span<const float>, speculative::Proposal* out) override {
    *out = speculative::Proposal();
  }
};

// Each cycle that put lookup drafts to the target changes the counts of the bucket it reports
// (lookup_bucket()) and of no other; the d_0-check model learns from every such cycle, the
// continuation model only from cycles whose d_0 was kept; over structured and code text
// several buckets learn, and the two models of a bucket end up apart.
TEST(LookupRuntime, LearnsPerMarginBucketAndPosition) {
  Shipped sh = Shipped::open(2);
  if (!sh.ok) GTEST_SKIP() << "shipped models absent";
  constexpr int kGen = 192;
  constexpr int kBuckets = speculative::Runtime::kMarginBuckets;
  std::set<int> used;
  bool apart = false;
  for (const char* channel : {"structured", "code"}) {
    SCOPED_TRACE(channel);
    const std::vector<int32_t> prompt = channel_prompt(*sh.tokenizer, channel);
    const std::vector<int32_t> ref = sh.plain(prompt, kGen);
    auto s = session::ModelSession::create(*sh.model, *sh.backend, static_cast<int64_t>(prompt.size()) + kGen + 16,
                                           uint64_t{1} << 34);
    ASSERT_TRUE(s.ok());
    NoDrafts none;
    speculative::SpecConfig cfg;
    cfg.lookup = true;
    cfg.cost_gate = true;
    cfg.scheduler = false;
    cfg.tail_min_tokens = 0;
    speculative::Runtime rt(**s, none, cfg);
    for (int b = 0; b < kBuckets; ++b) {  // a new runtime starts each model at its base prior
      EXPECT_FLOAT_EQ(rt.lookup_model(b, false).q(1), speculative::LookupModel::kPrior);
      EXPECT_FLOAT_EQ(rt.lookup_model(b, true).q(speculative::LookupModel::kContFlatLen), speculative::LookupModel::kContPrior);
    }
    auto mass = [&](int b, bool cont) {
      float m = 0;
      for (float x : rt.lookup_model(b, cont).n) m += x;
      return m;
    };
    ASSERT_TRUE((*s)->prefill(prompt).ok());
    std::vector<int32_t> got, step;
    while (static_cast<int>(got.size()) < kGen) {
      float before[2][kBuckets];
      for (int c = 0; c < 2; ++c)
        for (int b = 0; b < kBuckets; ++b) before[c][b] = mass(b, c == 1);
      const int64_t drafts_before = rt.stats().lookup_drafts;
      const int64_t kept_before = rt.stats().lookup_accepted;
      ASSERT_TRUE(rt.step(kGen - static_cast<int>(got.size()), -1, -1, &step).ok());
      ASSERT_FALSE(step.empty());
      got.insert(got.end(), step.begin(), step.end());
      const bool looked_up = rt.stats().lookup_drafts > drafts_before;
      const bool d0_kept = rt.stats().lookup_accepted > kept_before;
      if (looked_up) used.insert(rt.lookup_bucket());
      for (int b = 0; b < kBuckets; ++b) {
        const bool here = looked_up && b == rt.lookup_bucket();
        EXPECT_EQ(mass(b, false) != before[0][b], here) << "bucket " << b << " after " << got.size() << " tokens";
        if (mass(b, true) != before[1][b]) {
          EXPECT_TRUE(here && d0_kept) << "continuation of bucket " << b << " after " << got.size() << " tokens";
        }
      }
    }
    EXPECT_EQ(got, ref);
    EXPECT_GT(rt.stats().lookup_accepted, 0);
    for (int b = 0; b < kBuckets; ++b) {
      if (mass(b, true) > 0 && rt.lookup_model(b, true).q(2) != rt.lookup_model(b, false).q(2)) apart = true;
    }
  }
  EXPECT_GE(used.size(), 2u) << "the lookups all came from one margin bucket";
  EXPECT_TRUE(apart) << "no bucket's continuation model learned apart from its d_0 model";
}

}  // namespace
}  // namespace ds4::spec_test
