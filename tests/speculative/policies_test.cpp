// tests/speculative/policies_test.cpp — each DSpark policy (speculative/policies.h) alone: given
// counters, configuration and margins, the decision it returns. No session, no drafter.
// (The runtime tests check the same policies inside real cycles, against plain greedy.)
#include <gtest/gtest.h>

#include <cmath>

#include "speculative/policies.h"

namespace ds4::speculative {
namespace {

TEST(SchedulerPolicy, PausesAfterUnproductiveWindows) {
  SpecConfig cfg;  // window 4, skip 2 (low acceptance), slow skip 4 (>= half no-draft), avg 1.5
  Scheduler s(cfg);
  for (int i = 0; i < 3; ++i) s.note(true, 1);
  EXPECT_FALSE(s.paused());  // the window is not complete
  s.note(true, 1);           // 4 cycles, 4 accepted < 1.5 * 4
  EXPECT_EQ(s.pause(), 2);
  EXPECT_TRUE(s.take_pause());
  EXPECT_TRUE(s.take_pause());
  EXPECT_FALSE(s.take_pause());
  for (int i = 0; i < 4; ++i) s.note(false, 0);  // every cycle without a draft: the slow skip
  EXPECT_EQ(s.pause(), 4);
  s.reset();
  for (int i = 0; i < 4; ++i) s.note(true, 2);  // 8 accepted >= 6: productive, no pause
  EXPECT_EQ(s.pause(), 0);
  EXPECT_EQ(s.streak(), 0);
}

TEST(SchedulerPolicy, BackoffMultipliesPausesAndRaisesTheFirstBar) {
  SpecConfig cfg;
  cfg.backoff = true;
  cfg.confidence = 0.6f;
  Scheduler s(cfg);
  float thr[3];
  for (int i = 0; i < 3; ++i) s.note(true, 0);
  s.thresholds(thr, 3);
  EXPECT_FLOAT_EQ(thr[0], 0.6f + 0.15f);  // +0.05 per unproductive cycle
  EXPECT_FLOAT_EQ(thr[1], 0.6f);          // only position 0 moves
  s.note(true, 0);                        // window of 4, streak 4: skip 2 x 8
  EXPECT_EQ(s.pause(), 16);
  for (int i = 0; i < 4; ++i) s.note(true, 0);
  s.thresholds(thr, 1);
  EXPECT_FLOAT_EQ(thr[0], 0.6f + 0.20f);  // capped
  s.note(true, 3);                         // an accept ends the streak
  EXPECT_EQ(s.streak(), 0);
  s.thresholds(thr, 1);
  EXPECT_FLOAT_EQ(thr[0], 0.6f);
  // Without the scheduler the streak still moves the bar, but nothing pauses.
  cfg.scheduler = false;
  Scheduler off(cfg);
  for (int i = 0; i < 8; ++i) off.note(false, 0);
  EXPECT_EQ(off.pause(), 0);
  EXPECT_EQ(off.streak(), 8);
  // The grid gives per-position thresholds, the last value extending.
  SpecConfig g;
  g.confidence_grid = {0.5f, 0.7f};
  Scheduler gs(g);
  gs.thresholds(thr, 3);
  EXPECT_FLOAT_EQ(thr[0], 0.5f);
  EXPECT_FLOAT_EQ(thr[1], 0.7f);
  EXPECT_FLOAT_EQ(thr[2], 0.7f);
}

TEST(MarginGatePolicy, BucketsAndClosing) {
  EXPECT_EQ(MarginGate::bucket(-1.0f), 0);
  EXPECT_EQ(MarginGate::bucket(1.99f), 0);
  EXPECT_EQ(MarginGate::bucket(2.0f), 1);
  EXPECT_EQ(MarginGate::bucket(4.0f), 2);
  EXPECT_EQ(MarginGate::bucket(8.0f), 3);
  EXPECT_EQ(MarginGate::bucket(NAN), 0);
  const MarginGate off(0.0f), on(2.0f);
  EXPECT_FALSE(off.on());
  EXPECT_FALSE(off.closed(0.1f));
  EXPECT_TRUE(on.closed(1.9f));
  EXPECT_FALSE(on.closed(2.0f));
}

TEST(CostGatePolicy, ColdGateProbesOnlyAtHighMarginsAndBacksOff) {
  SpecConfig cfg;
  cfg.cost_gate = true;  // CPU default prices, probe margin 6
  CostGate g(cfg);
  g.begin_cycle();
  g.observe_margin(3.0f);
  // Cold prior P(draft) = 0.1: proposing is not worth it, and the margin is below the probe bar.
  EXPECT_LT(g.proposal_value(5, false, false), 0.0f);
  EXPECT_EQ(g.decide(5, false), CostGate::Decision::kSkip);
  EXPECT_EQ(g.state(), 1);  // cold, bucket of margin 3
  g.begin_cycle();
  g.observe_margin(7.0f);
  EXPECT_EQ(g.decide(5, false), CostGate::Decision::kProbe);  // a fresh gate probes at once
  g.note_proposal(true);
  g.note_accept(0, false);
  g.note_unproductive();  // the probe found nothing: the gap doubles
  EXPECT_EQ(g.probe_gap(), 2 * CostGate::kProbeGapMin);
  for (int i = 0; i < 2 * CostGate::kProbeGapMin - 1; ++i) {
    g.begin_cycle();
    g.observe_margin(9.0f);
    EXPECT_EQ(g.decide(5, false), CostGate::Decision::kSkip) << i;  // inside the gap
  }
  g.begin_cycle();
  g.observe_margin(9.0f);
  EXPECT_EQ(g.decide(5, false), CostGate::Decision::kProbe);
  g.note_proposal(true);
  g.note_outcome(true);  // a full accept of >= 2 drafts: warm, gap back to the minimum
  EXPECT_EQ(g.probe_gap(), CostGate::kProbeGapMin);
  g.begin_cycle();
  g.observe_margin(1.0f);
  EXPECT_EQ(g.state(), MarginGate::kBuckets);  // warm, bucket 0: open prior
  EXPECT_GT(g.proposal_value(5, false, false), 0.0f);
  EXPECT_EQ(g.decide(5, false), CostGate::Decision::kPropose);
}

TEST(CostGatePolicy, LearnsAcceptanceAndPricesOverlap) {
  SpecConfig cfg;
  cfg.cost_draft_overlap = 0.1f;
  cfg.cost_draft_reject_overlap = 0.05f;
  CostGate g(cfg);
  EXPECT_EQ(g.cost_model(true).draft, 0.1f);
  EXPECT_EQ(g.cost_model(false).draft, cfg.cost_draft);
  // Overlapped proposals are cheaper, so worth more.
  EXPECT_GT(g.proposal_value(4, false, true), g.proposal_value(4, false, false));
  // d_1 rejected every time in this state: P(d_1 | d_0) falls from the prior 1.0.
  g.begin_cycle();
  g.set_state(9.0f);
  for (int i = 0; i < 6; ++i) {
    g.note_proposal(true);
    g.note_accept(0, true);
    g.note_checked(1, 4, 1, 4, 4);
  }
  // Counts decay by 1 - 1/window per proposal in the state, before the new one is added.
  const float keep = 1.0f - 1.0f / static_cast<float>(cfg.cost_window);
  float n = 0.0f;
  for (int i = 0; i < 6; ++i) n = n * keep + 1.0f;
  float p[4];
  g.fill_accept(p, 4, false);
  EXPECT_FLOAT_EQ(p[0], 1.0f);
  EXPECT_FLOAT_EQ(p[1], 1.0f / (n + 1.0f));  // 0 hits + prior 1 over n checks + 1
  EXPECT_LT(p[1], 0.2f);
  EXPECT_FLOAT_EQ(p[2], 1.0f);  // never checked: the prior
  EXPECT_EQ(&g.accept_model(g.state()), &g.accept_model(3));
}

TEST(LookupPolicyTest, SeparateModelsForFirstDraftsAndContinuations) {
  SpecConfig cfg;
  LookupPolicy lp(cfg);
  EXPECT_FALSE(lp.active());
  lp.begin(1, 2);  // a 1-gram match from logits of bucket 2
  ASSERT_TRUE(lp.active());
  float p[3];
  lp.fill(p, 3);
  EXPECT_FLOAT_EQ(p[0], LookupModel::kPrior);      // d_0: the d_0-check model at length 1
  EXPECT_FLOAT_EQ(p[1], LookupModel::kContPrior);  // d_1: the continuation model, flat start
  lp.note(0, 1, 1);                                // d_0 checked and kept
  lp.fill(p, 1);
  EXPECT_FLOAT_EQ(p[0], 0.75f);  // (1 + 0.5) / (1 + 1)
  EXPECT_EQ(lp.model(2, false).hit[1], 1.0f);
  EXPECT_EQ(lp.model(2, true).n[2], 0.0f);  // continuations untouched
  EXPECT_EQ(lp.model(1, false).n[1], 0.0f);  // other buckets untouched
  lp.clear();
  EXPECT_FALSE(lp.active());
  EXPECT_EQ(lp.bucket(), 2);
}

TEST(FoldPolicyTest, ArmingAndThePartialGate) {
  SpecConfig cfg;
  FoldPolicy f(cfg);
  f.after_full();
  EXPECT_FALSE(f.armed());  // fold off
  cfg.fold = true;
  f.after_full();
  EXPECT_TRUE(f.armed());
  f.after_partial();
  EXPECT_FALSE(f.armed());  // the seed's rule: not after a partial accept
  cfg.fold_after_partial = true;
  cfg.fold_partial_min_hits = 2;
  f.note_d0(true);
  f.after_partial();
  EXPECT_FALSE(f.armed());  // 1 of the last 8 d_0 checks hit
  f.note_d0(true);
  f.after_partial();
  EXPECT_TRUE(f.armed());
  f.disarm();
  EXPECT_FALSE(f.armed());
}

TEST(FoldPolicyTest, FoldOrUnfoldByExpectedGain) {
  const CostModel c;  // verify(n) = 0.47 + 0.49 n
  const float sure[3] = {1.0f, 1.0f, 1.0f};
  FoldPolicy::DsparkChoice d = FoldPolicy::choose_dspark(c, sure, 3);
  EXPECT_FALSE(d.unfold);  // fold gain 1.57 (m = 3) beats the free check's 1.06
  EXPECT_EQ(d.m, 3);
  const float doubtful[3] = {0.1f, 1.0f, 1.0f};
  d = FoldPolicy::choose_dspark(c, doubtful, 3);
  EXPECT_TRUE(d.unfold);  // d_0 likely wrong: decode the seed and check d_0 for free
  FoldPolicy::LookupChoice l = FoldPolicy::choose_lookup(c, sure, 3, 0.0f);
  EXPECT_TRUE(l.use);
  EXPECT_FALSE(l.unfold);
  EXPECT_EQ(l.m, 3);
  l = FoldPolicy::choose_lookup(c, sure, 3, 5.0f);  // DSpark's proposal is worth more
  EXPECT_FALSE(l.use);
  EXPECT_FALSE(l.unfold);
  l = FoldPolicy::choose_lookup(c, doubtful, 3, -1.0f);
  EXPECT_FALSE(l.use);
  EXPECT_TRUE(l.unfold);
}

TEST(OverlapPolicyTest, AutoModeAndPrediction) {
  SpecConfig cfg;  // overlap -1 (auto), cost gate off
  EXPECT_TRUE(OverlapPolicy(cfg, 2).on());
  EXPECT_FALSE(OverlapPolicy(cfg, 4).on());
  cfg.cost_gate = true;
  EXPECT_FALSE(OverlapPolicy(cfg, 2).on());  // sequential prices under the gate
  cfg.cost_draft_overlap = cfg.cost_draft_reject_overlap = kFreeOverlapCost;
  OverlapPolicy free_pair(cfg, 4);
  EXPECT_TRUE(free_pair.on() && free_pair.free());
  free_pair.note_gated();
  EXPECT_TRUE(free_pair.predict());  // free: always
  cfg.cost_gate = false;
  cfg.overlap = 1;
  OverlapPolicy o(cfg, 16);
  EXPECT_TRUE(o.on());
  EXPECT_FALSE(o.free());
  EXPECT_TRUE(o.predict());
  o.note_gated();
  EXPECT_FALSE(o.predict());
  o.note_passed();
  EXPECT_FALSE(o.predict());  // one pass after a gated cycle is not enough
  o.note_passed();
  EXPECT_TRUE(o.predict());
  cfg.overlap = 0;
  EXPECT_FALSE(OverlapPolicy(cfg, 2).on());
}

}  // namespace
}  // namespace ds4::speculative
