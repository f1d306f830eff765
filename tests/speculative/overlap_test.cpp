// tests/speculative/overlap_test.cpp — DSpark's overlap (speculative/policies.h OverlapPolicy: a standalone
// proposal computed alongside the seed's decode, the backend's threads split in two) changes
// timing only. With the shipped models on a 2- and a 4-thread CPU backend, every policy set
// gives, overlap on vs off at the same prices: the same tokens (= plain greedy), the same
// final session state bytes, and the same counters (proposals, drafts, accepts, histograms,
// skips), while overlap on actually ran pairs and, under the gates, dropped some. Free overlap
// prices turn overlap on under the cost gate and past the scheduler and margin gates. Also
// Backend::run_pair runs both tasks, on two threads when it has them.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "speculative/runtime.h"
#include "tests/speculative/shipped_fixture.h"
#include "tests/speculative/spec_fixture.h"
#include "tokenizer/tokenizer.h"

namespace ds4::spec_test {
namespace {

struct OverlapRun {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> state;  // serialize_state after the run (rows, KV, compressors, logits)
  speculative::SpecStats stats;
  std::string report;  // Runtime::report(): the policy line says whether overlap was on
};

// Greedy DSpark run of n_gen tokens from `prompt` in a fresh session under `cfg`.
void run_spec(const model::Model& m, backend::Backend& be, speculative::Drafter& drafter, const std::vector<int32_t>& prompt,
              const speculative::SpecConfig& cfg, int n_gen, OverlapRun* out) {
  const int64_t n_ctx = static_cast<int64_t>(prompt.size()) + n_gen + 16;
  auto s = session::ModelSession::create(m, be, n_ctx, uint64_t{1} << 34);
  ASSERT_TRUE(s.ok());
  speculative::DSparkProposer prop(drafter);
  drafter.ring_reset();
  speculative::Runtime rt(**s, prop, cfg);
  ASSERT_TRUE((*s)->prefill(prompt).ok());
  std::vector<int32_t> step;
  while (static_cast<int>(out->tokens.size()) < n_gen) {
    const int left = n_gen - static_cast<int>(out->tokens.size());
    ASSERT_TRUE(rt.step(left, -1, -1, &step).ok());
    ASSERT_FALSE(step.empty());
    out->tokens.insert(out->tokens.end(), step.begin(), step.end());
  }
  (*s)->serialize_state(out->state);
  out->stats = rt.stats();
  out->report = rt.report();
}

// The counters that must not depend on overlap (all but overlap's own and the clock).
void expect_same_counters(const speculative::SpecStats& a, const speculative::SpecStats& b, const std::string& what) {
#define DS4_SAME(f) EXPECT_EQ(a.f, b.f) << what << ": " #f
  DS4_SAME(cycles);
  DS4_SAME(seeds);
  DS4_SAME(folded_seeds);
  DS4_SAME(proposals);
  DS4_SAME(proposed_tokens);
  DS4_SAME(accepted_draft_tokens);
  DS4_SAME(full_accepts);
  DS4_SAME(partial_accepts);
  DS4_SAME(first_misses);
  DS4_SAME(no_draft);
  DS4_SAME(conf0_rejects);
  DS4_SAME(scheduler_skips);
  DS4_SAME(margin_skips);
  DS4_SAME(verify_calls);
  DS4_SAME(verify_rows);
  DS4_SAME(single_draft_decodes);
  DS4_SAME(cost_skips);
  DS4_SAME(cost_probes);
  DS4_SAME(cost_trims);
  DS4_SAME(cost_unfolds);
#undef DS4_SAME
  for (int i = 0; i <= speculative::kMaxBlockSize; ++i) {
    EXPECT_EQ(a.draft_len_hist[i], b.draft_len_hist[i]) << what << ": draft_len_hist[" << i << "]";
    EXPECT_EQ(a.accepted_len_hist[i], b.accepted_len_hist[i]) << what << ": accepted_len_hist[" << i << "]";
  }
}

// One run_pair whose tasks record their thread; with `wait`, each task waits (up to 2 s) for
// the other to have started, which only a concurrent run can satisfy.
struct PairProbe {
  std::atomic<int> arrived{0};
  std::thread::id id[2];
  bool wait = false;
  bool met[2] = {false, false};
};

void probe_task(PairProbe* q, int k) {
  q->id[k] = std::this_thread::get_id();
  q->arrived.fetch_add(1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (q->wait && q->arrived.load() < 2 && std::chrono::steady_clock::now() < until) {
  }
  q->met[k] = q->arrived.load() == 2;
}

void run_probe(backend::Backend& be, PairProbe* q) {
  const backend::Task a{[](void* c) { probe_task(static_cast<PairProbe*>(c), 0); }, q};
  const backend::Task b{[](void* c) { probe_task(static_cast<PairProbe*>(c), 1); }, q};
  be.run_pair(a, b);
}

TEST(Overlap, RunPairRunsBothTasksOnTwoThreads) {
  auto one = backend::make_cpu_backend(1);
  PairProbe p1;
  run_probe(*one, &p1);
  EXPECT_EQ(p1.arrived.load(), 2);
  EXPECT_EQ(p1.id[0], std::this_thread::get_id()) << "a 1-thread backend runs the pair on the caller";
  EXPECT_EQ(p1.id[1], std::this_thread::get_id());

  auto two = backend::make_cpu_backend(2);
  // A worker that starts after a job was published joins from the next job on; on a loaded
  // machine it may also be descheduled: a few attempts, one of which must run concurrently.
  bool concurrent = false;
  for (int attempt = 0; attempt < 5 && !concurrent; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    PairProbe p2;
    p2.wait = true;
    run_probe(*two, &p2);
    EXPECT_EQ(p2.arrived.load(), 2);
    concurrent = p2.id[0] != p2.id[1] && p2.met[0] && p2.met[1];
  }
  EXPECT_TRUE(concurrent) << "a 2-thread backend never ran the two tasks at the same time";
}

TEST(Overlap, SameTokensStateAndCountersOnOrOff) {
  int64_t overlapped = 0, discards = 0;
  // Two threads: one per task; four: the pool splits 2 + 2 and every op of a task runs on its
  // part (ThreadPool::run_split).
  for (int threads : {2, 4}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    const Shipped sh = Shipped::open(threads);
    if (!sh.ok && !HasFailure()) GTEST_SKIP() << "shipped models missing";
    ASSERT_TRUE(sh.ok);
    constexpr int kGen = 96;

    // Policy sets: the gates that read the seed's logits (margin, cost) are the ones that drop
    // overlapped proposals; fold exercises the fallback of a fold proposal to the standalone path.
    std::vector<std::pair<std::string, speculative::SpecConfig>> sets;
    speculative::SpecConfig base;
    sets.emplace_back("baseline", base);
    speculative::SpecConfig all = base;
    all.fold = true;
    all.confidence_grid = {0.55f, 0.6f, 0.65f};
    all.backoff = true;
    all.margin_gate = 2.0f;
    sets.emplace_back("fold+grid+backoff+margin", all);
    speculative::SpecConfig cost = base;
    cost.cost_gate = true;
    cost.fold = true;
    sets.emplace_back("fold+cost", cost);
    speculative::SpecConfig partial = all;
    partial.fold_after_partial = true;
    partial.scheduler = false;
    sets.emplace_back("fold+grid+backoff+margin+foldpartial+noscheduler", partial);

    for (const char* channel : {"structured", "code", "italian"}) {
      const std::vector<int32_t> prompt = channel_prompt(*sh.tokenizer, channel);
      ASSERT_GT(prompt.size(), 8u) << channel;
      const std::vector<int32_t> plain = sh.plain(prompt, kGen);
      for (const auto& [name, cfg0] : sets) {
        OverlapRun runs[2];
        for (int ov = 0; ov < 2; ++ov) {
          speculative::SpecConfig cfg = cfg0;
          cfg.overlap = ov;
          // The cost gate prices an overlapped proposal lower (configuration); equal prices here
          // so that the decisions, and with them every counter, must match.
          cfg.cost_draft_overlap = cfg.cost_draft;
          cfg.cost_draft_reject_overlap = cfg.cost_draft_reject;
          ASSERT_NO_FATAL_FAILURE(run_spec(*sh.model, *sh.backend, *sh.drafter, prompt, cfg, kGen, &runs[ov]));
        }
        const std::string what = std::string(channel) + " " + name;
        EXPECT_EQ(runs[0].tokens, plain) << what << ": overlap off differs from plain greedy";
        EXPECT_EQ(runs[1].tokens, plain) << what << ": overlap on differs from plain greedy";
        EXPECT_TRUE(runs[0].state == runs[1].state) << what << ": session state differs with overlap";
        expect_same_counters(runs[0].stats, runs[1].stats, what);
        EXPECT_EQ(runs[0].stats.overlapped, 0) << what;
        EXPECT_LE(runs[1].stats.overlap_discards, runs[1].stats.overlapped) << what;
        // Every counted standalone proposal was overlapped unless it followed a gated cycle or
        // came from a fold fallback; at least the first one of a run always is.
        if (runs[1].stats.proposals > 0) {
          EXPECT_GT(runs[1].stats.overlapped, 0) << what;
        }
        overlapped += runs[1].stats.overlapped;
        discards += runs[1].stats.overlap_discards;
      }
    }
  }
  EXPECT_GT(overlapped, 0);
  EXPECT_GT(discards, 0) << "no overlapped proposal was ever dropped by a gate: the discard path is untested";
}

// Free overlap prices (speculative::kFreeOverlapCost) under the cost gate: auto turns overlap on, no
// standalone proposal is stopped by the scheduler's pause or the margin gate (both are on in
// this policy set and do stop some at sequential prices), output stays plain greedy's. Prices
// above the bar leave auto overlap off under the gate.
TEST(Overlap, FreePricesOverlapEveryWantedProposal) {
  const Shipped sh = Shipped::open(4);
  if (!sh.ok && !HasFailure()) GTEST_SKIP() << "shipped models missing";
  ASSERT_TRUE(sh.ok);
  constexpr int kGen = 96;

  speculative::SpecConfig cfg;  // the costall preset's knobs at the 16-core Xeon's calibrated costs
  cfg.fold = true;
  cfg.fold_after_partial = true;
  cfg.confidence_grid = {0.55f, 0.6f, 0.65f};
  cfg.backoff = true;
  cfg.margin_gate = 2.0f;
  cfg.cost_gate = true;
  cfg.cost_verify_base = 0.96f;
  cfg.cost_verify_row = 0.24f;
  cfg.cost_draft = 0.73f;
  cfg.cost_draft_reject = 0.59f;
  cfg.overlap = -1;
  int64_t gated = 0, overlapped = 0;
  for (const char* channel : {"code", "english"}) {
    SCOPED_TRACE(channel);
    const std::vector<int32_t> prompt = channel_prompt(*sh.tokenizer, channel);
    const std::vector<int32_t> plain = sh.plain(prompt, kGen);
    OverlapRun priced, free;
    speculative::SpecConfig c = cfg;
    c.cost_draft_overlap = speculative::kFreeOverlapCost + 0.01f;
    c.cost_draft_reject_overlap = 0.0f;
    ASSERT_NO_FATAL_FAILURE(run_spec(*sh.model, *sh.backend, *sh.drafter, prompt, c, kGen, &priced));
    c.cost_draft_overlap = 0.0f;
    ASSERT_NO_FATAL_FAILURE(run_spec(*sh.model, *sh.backend, *sh.drafter, prompt, c, kGen, &free));
    EXPECT_EQ(priced.tokens, plain);
    EXPECT_EQ(free.tokens, plain);
    EXPECT_NE(priced.report.find(" overlap=0 "), std::string::npos) << priced.report;
    EXPECT_NE(free.report.find(" overlap=1 "), std::string::npos) << free.report;
    EXPECT_EQ(priced.stats.overlapped, 0);
    EXPECT_EQ(free.stats.margin_skips, 0);
    EXPECT_EQ(free.stats.scheduler_skips, 0);
    gated += priced.stats.margin_skips + priced.stats.scheduler_skips;
    overlapped += free.stats.overlapped;
  }
  EXPECT_GT(gated, 0) << "the gates never stopped a proposal at sequential prices: the test shows nothing";
  EXPECT_GT(overlapped, 0);
}

}  // namespace
}  // namespace ds4::spec_test
