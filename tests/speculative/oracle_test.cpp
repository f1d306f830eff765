// tests/speculative/oracle_test.cpp — the oracle proposer (speculative/oracle_proposer.h), the
// measurement tool of ds4-bench-spec --oracle: its drafts follow the script at the hit rate,
// deterministically; through the runtime, h = 1 gets every draft accepted, h = 0 none, h = 0.7
// about 0.7 of the first drafts, and exactly the accepts its own draws predict; the output and
// state always equal plain greedy decoding. The engine entry point works without a drafter.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "speculative/oracle_proposer.h"
#include "speculative/runtime.h"
#include "tests/speculative/spec_fixture.h"

namespace ds4::spec_test {
namespace {

using speculative::OracleOptions;
using speculative::OracleProposer;
using speculative::Proposal;

OracleOptions options_for(std::vector<int32_t> script, int64_t start, float h, int32_t V = 1000) {
  OracleOptions o;
  o.script = std::move(script);
  o.start = start;
  o.hit_rate = h;
  o.seed = 11;
  o.n_vocab = V;
  return o;
}

std::vector<int32_t> counting_script(int n) {
  std::vector<int32_t> s(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) s[static_cast<size_t>(i)] = (7 * i + 3) % 1000;
  return s;
}

TEST(OracleProposer, FollowsTheScriptAtItsHitRate) {
  const std::vector<int32_t> script = counting_script(40);
  const int64_t start = 100;  // script[i] sits at position 100 + i
  const std::vector<float> thr = {0.6f, 0.9f, 1.0f};
  {
    OracleProposer p(options_for(script, start, 1.0f));
    Proposal out;
    p.propose(script[3], start + 3, 5, thr, &out);
    ASSERT_EQ(out.n, 5);
    EXPECT_FALSE(out.no_context);
    EXPECT_FALSE(out.conf0_rejected);
    EXPECT_EQ(out.conf0, 1.0f);
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(out.tokens[k], script[4 + k]) << k;
      EXPECT_EQ(out.conf[k], 1.0f) << k;
    }
    p.propose(script[3], start + 3, 2, thr, &out);  // the runtime's limit
    EXPECT_EQ(out.n, 2);
    p.propose(script[37], start + 37, 5, thr, &out);  // the script ends two tokens later
    EXPECT_EQ(out.n, 2);
    EXPECT_FALSE(out.no_context);
    p.propose(script[39], start + 39, 5, thr, &out);  // its last token: nothing to draft
    EXPECT_EQ(out.n, 0);
    EXPECT_FALSE(out.no_context);
    p.propose(script[3] + 1, start + 3, 5, thr, &out);  // another timeline
    EXPECT_EQ(out.n, 0);
    EXPECT_TRUE(out.no_context);
    p.propose(script[0], start - 1, 5, thr, &out);  // before the script
    EXPECT_TRUE(out.no_context);
    const std::vector<float> high = {0.5f, 1.5f};  // a bar no draft clears stops the block there
    p.propose(script[3], start + 3, 5, high, &out);
    EXPECT_EQ(out.n, 1);
  }
  {
    OracleOptions o = options_for(script, start, 0.0f);
    o.avoid = script[10] + 1;  // the wrong draft for script[10] must step over it
    OracleProposer p(o);
    Proposal out;
    for (int i = 0; i < 35; ++i) {
      p.propose(script[i], start + i, 4, thr, &out);
      ASSERT_EQ(out.n, 4);
      for (int k = 0; k < 4; ++k) {
        EXPECT_NE(out.tokens[k], script[i + 1 + k]);
        EXPECT_GE(out.tokens[k], 0);
        EXPECT_LT(out.tokens[k], 1000);
        EXPECT_NE(out.tokens[k], o.avoid);
      }
    }
    EXPECT_EQ(speculative::wrong_token(999, 1000, -1), 0);
    EXPECT_EQ(speculative::wrong_token(5, 1000, 6), 7);
  }
}

TEST(OracleProposer, DrawsAreCounterBasedAndAtTheRate) {
  // The draw of (seed, position, draft index) does not depend on what was asked before.
  const std::vector<int32_t> script = counting_script(200);
  OracleProposer a(options_for(script, 0, 0.7f)), b(options_for(script, 0, 0.7f));
  Proposal pa, pb;
  for (int i = 0; i < 190; i += 3) a.propose(script[i], i, 5, {}, &pa);  // a has history, b none
  for (int i : {150, 3, 77}) {
    a.propose(script[i], i, 5, {}, &pa);
    b.propose(script[i], i, 5, {}, &pb);
    ASSERT_EQ(pa.n, pb.n);
    for (int k = 0; k < pa.n; ++k) EXPECT_EQ(pa.tokens[k], pb.tokens[k]);
    for (int k = 0; k < pa.n; ++k) {
      EXPECT_EQ(pa.tokens[k] == script[i + 1 + k], speculative::oracle_hit(11, i + 1 + k, k, 0.7f));
    }
  }
  // The rate: over 20,000 (position, index) draws within 0.015 of h (> 4 sigma), for
  // several h; h = 0 and 1 are exact; another seed gives other draws.
  for (float h : {0.1f, 0.5f, 0.7f, 0.9f}) {
    int hits = 0, same = 0;
    for (int q = 0; q < 4000; ++q) {
      for (int k = 0; k < 5; ++k) {
        const bool x = speculative::oracle_hit(11, q, k, h);
        hits += x ? 1 : 0;
        same += x == speculative::oracle_hit(12, q, k, h) ? 1 : 0;
      }
    }
    EXPECT_NEAR(hits / 20000.0, h, 0.015) << h;
    EXPECT_LT(same, 20000) << h;
  }
  for (int q = 0; q < 100; ++q) {
    EXPECT_TRUE(speculative::oracle_hit(3, q, q % 5, 1.0f));
    EXPECT_FALSE(speculative::oracle_hit(3, q, q % 5, 0.0f));
  }
}

// Forwards to the library oracle and keeps every proposal (anchor position + drafts).
class Recorder final : public speculative::Proposer {
 public:
  explicit Recorder(OracleProposer& o) : o_(o) {}
  int block_size() const override { return o_.block_size(); }
  void propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thr, Proposal* out) override {
    o_.propose(anchor, pos, n_max, thr, out);
    log.emplace_back(pos, *out);
  }
  std::vector<std::pair<int64_t, Proposal>> log;

 private:
  OracleProposer& o_;
};

struct OracleRun {
  std::vector<int32_t> out;
  speculative::SpecStats stats;
  int64_t predicted_accepts = 0;  // sum over proposals of the leading drafts equal to the script
  int64_t d0_checks = 0, d0_predicted_hits = 0;
  bool same_state = false;
};

// Plain greedy `n` tokens after `prompt`, then the runtime with the oracle of that continuation.
OracleRun run_oracle(const Stack& st, const std::vector<int32_t>& prompt, int n, float h,
                     const speculative::SpecConfig& cfg) {
  auto plain_s = st.session(static_cast<int64_t>(prompt.size()) + n + 8);
  const std::vector<int32_t> ref = plain_greedy(*plain_s, prompt, n);
  OracleOptions o = options_for(ref, static_cast<int64_t>(prompt.size()), h,
                                static_cast<int32_t>(st.model->config().n_vocab));
  OracleProposer oracle(o);
  Recorder rec(oracle);
  auto s = st.session(static_cast<int64_t>(prompt.size()) + n + 8);
  OracleRun r;
  {
    speculative::Runtime rt(*s, rec, cfg);
    EXPECT_TRUE(s->prefill(prompt).ok());
    std::vector<int32_t> step;
    while (static_cast<int>(r.out.size()) < n) {
      const Status stt = rt.step(n - static_cast<int>(r.out.size()), -1, -1, &step);
      EXPECT_TRUE(stt.ok()) << stt.to_string();
      if (!stt.ok() || step.empty()) break;
      r.out.insert(r.out.end(), step.begin(), step.end());
    }
    r.stats = rt.stats();
  }
  EXPECT_EQ(r.out, ref);
  r.same_state = state_bytes(*s) == state_bytes(*plain_s);
  for (const auto& [pos, p] : rec.log) {
    if (p.n == 0) continue;
    ++r.d0_checks;
    const size_t i = static_cast<size_t>(pos - o.start);
    int lead = 0;
    while (lead < p.n && p.tokens[lead] == ref[i + 1 + lead]) ++lead;
    r.predicted_accepts += lead;
    r.d0_predicted_hits += lead > 0 ? 1 : 0;
  }
  return r;
}

speculative::SpecConfig oracle_config(bool fold, bool scheduler, bool replay) {
  speculative::SpecConfig cfg;
  cfg.fold = fold;
  cfg.fold_after_partial = fold;
  cfg.fold_partial_min_hits = 0;
  cfg.scheduler = scheduler;
  cfg.replay = replay;
  cfg.overlap = 0;  // every proposal is checked (no overlapped proposal a gate drops)
  cfg.tail_min_tokens = 0;
  return cfg;
}

class OracleRuntimeTest : public SharedStackTest {};

TEST_F(OracleRuntimeTest, HitRateOneAcceptsEveryDraftZeroNone) {
  const uint32_t V = stack_->model->config().n_vocab;
  const std::vector<int32_t> prompt = prompt_tokens(12, V, 5);
  struct Cfg {
    bool fold, scheduler, replay;
  };
  for (const Cfg c : {Cfg{false, true, false}, Cfg{true, true, false}, Cfg{true, false, true}}) {
    SCOPED_TRACE(std::string("fold=") + (c.fold ? "1" : "0") + " scheduler=" + (c.scheduler ? "1" : "0") +
                 " replay=" + (c.replay ? "1" : "0"));
    const OracleRun one = run_oracle(*stack_, prompt, 96, 1.0f, oracle_config(c.fold, c.scheduler, c.replay));
    EXPECT_TRUE(one.same_state);
    EXPECT_GT(one.stats.proposed_tokens, 40);
    EXPECT_EQ(one.stats.accepted_draft_tokens, one.stats.proposed_tokens);
    EXPECT_EQ(one.stats.first_misses, 0);
    EXPECT_EQ(one.stats.partial_accepts, 0);
    if (c.fold) {
      EXPECT_GT(one.stats.folded_seeds, 0);
    }
    const OracleRun zero = run_oracle(*stack_, prompt, 96, 0.0f, oracle_config(c.fold, c.scheduler, c.replay));
    EXPECT_TRUE(zero.same_state);
    EXPECT_GT(zero.stats.proposed_tokens, 0);
    EXPECT_EQ(zero.stats.accepted_draft_tokens, 0);
    EXPECT_EQ(zero.stats.first_misses, zero.d0_checks);
  }
}

TEST_F(OracleRuntimeTest, PartialHitRateAcceptsWhatItsDrawsPredict) {
  const uint32_t V = stack_->model->config().n_vocab;
  int64_t checks = 0, hits = 0;
  for (uint64_t ps : {21u, 22u, 23u, 24u}) {
    SCOPED_TRACE(ps);
    const std::vector<int32_t> prompt = prompt_tokens(10, V, ps);
    const OracleRun r = run_oracle(*stack_, prompt, 200, 0.7f, oracle_config(true, false, false));
    EXPECT_TRUE(r.same_state);
    // The verify keeps exactly the leading drafts the oracle drew right.
    EXPECT_EQ(r.stats.accepted_draft_tokens, r.predicted_accepts);
    EXPECT_EQ(r.stats.first_misses, r.d0_checks - r.d0_predicted_hits);
    EXPECT_GT(r.stats.partial_accepts, 0);
    checks += r.d0_checks;
    hits += r.d0_predicted_hits;
  }
  // First drafts: ~0.7 of them right (~270 checks here, binomial sigma ~0.028; the draws are
  // seeded, so the figure is the same on every run).
  ASSERT_GE(checks, 200);
  EXPECT_NEAR(static_cast<double>(hits) / static_cast<double>(checks), 0.7, 0.1) << hits << "/" << checks;
}

// The engine entry point: an engine opened WITHOUT a drafter, the generation loop, EOS banned
// (the bench's mode): same tokens and logits as plain, every draft accepted at h = 1; bad
// scripts are refused.
TEST(OracleEngine, WorksWithoutADrafter) {
  EngineOptions eo;
  eo.model_path = tiny_target_path(7);
  eo.n_threads = 1;
  auto engine = Engine::open(eo);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const std::vector<int32_t> prompt = prompt_tokens(16, (*engine)->info().n_vocab, 9);
  GenerateOptions go;
  go.max_tokens = 64;
  go.stop_at_eos = false;
  go.sampler.temperature = 0.0f;  // greedy: the decoder speculates
  auto plain_s = (*engine)->new_session(128);
  ASSERT_TRUE(plain_s.ok());
  auto a = generate(**plain_s, (*engine)->text(), prompt, go, nullptr);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_EQ(a->tokens.size(), 64u);

  auto spec_s = (*engine)->new_session(128);
  ASSERT_TRUE(spec_s.ok());
  SpecOptions so;
  so.fold = true;
  EXPECT_FALSE(new_speculative_decoder(**engine, **spec_s, so).ok());  // no drafter
  OracleScript sc;
  sc.tokens = a->tokens;
  sc.start = static_cast<int64_t>(prompt.size());
  sc.hit_rate = 1.0f;
  auto dec = new_oracle_speculative_decoder(**engine, **spec_s, so, sc);
  ASSERT_TRUE(dec.ok()) << dec.status().to_string();
  go.decoder = dec->get();
  auto b = generate(**spec_s, (*engine)->text(), prompt, go, nullptr);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->tokens, a->tokens);
  const std::span<const float> la = (*plain_s)->logits(), lb = (*spec_s)->logits();
  ASSERT_EQ(la.size(), lb.size());
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0);
  const SpecSummary sum = (*dec)->summary();
  EXPECT_GT(sum.proposed, 20);
  EXPECT_EQ(sum.accepted, sum.proposed);
  dec->reset();

  for (float bad : {-0.1f, 1.5f}) {
    sc.hit_rate = bad;
    EXPECT_EQ(new_oracle_speculative_decoder(**engine, **spec_s, so, sc).status().code(),
              ErrorCode::kInvalidArgument);
  }
  sc.hit_rate = 0.5f;
  sc.block_size = 17;
  EXPECT_EQ(new_oracle_speculative_decoder(**engine, **spec_s, so, sc).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace ds4::spec_test
