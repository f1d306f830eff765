// tests/speculative/runtime_test.cpp — the speculative runtime is lossless: for every policy
// combination, DSpark greedy output equals plain greedy output token for token and leaves the
// same session state (serialize_state bytes incl. logits). Uses the random drafter (almost
// always rejected) and an adversarial proposer that proposes the target's own future greedy
// tokens with deterministic corruptions (full accepts, partial accepts at every k, misses,
// random lengths, σ thresholds) and checks the sync and the anchor of every proposal. (The
// library's OracleProposer, a measurement tool with a fixed hit rate per position, is tested
// in oracle_test.cpp.)
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "speculative/runtime.h"
#include "tests/speculative/spec_fixture.h"

namespace ds4::spec_test {
namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Proposes timeline[pos+1 ..] (the plain greedy future) with deterministic corruptions and a
// hash "confidence" that honours the runtime's thresholds. Optionally wraps a real proposer
// for capture/sync (ring maintenance) and runs its proposal too (result discarded).
class AdversarialProposer final : public speculative::Proposer {
 public:
  AdversarialProposer(std::vector<int32_t> timeline, int block, uint32_t n_vocab, uint64_t seed,
                 speculative::Proposer* inner = nullptr)
      : t_(std::move(timeline)), block_(block), V_(n_vocab), seed_(seed), inner_(inner) {}
  int block_size() const override { return block_; }
  std::vector<int> capture_layers() const override { return inner_ ? inner_->capture_layers() : std::vector<int>{}; }
  void on_capture(int64_t pos, std::span<const float> h) override {
    if (inner_) inner_->on_capture(pos, h);
  }
  void sync(int64_t n) override {
    last_sync_ = n;
    if (inner_) inner_->sync(n);
  }
  void propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thr, speculative::Proposal* out) override {
    EXPECT_EQ(last_sync_, pos) << "proposal without a sync to the anchor position";
    if (pos < static_cast<int64_t>(t_.size())) {
      EXPECT_EQ(anchor, t_[pos]) << "anchor is not the greedy token at " << pos;
    }
    if (inner_) {
      inner_->propose(anchor, pos, n_max, {}, out);
      EXPECT_FALSE(out->no_context) << "drafter ring does not end at the anchor position " << pos;
    }
    *out = speculative::Proposal();
    const uint64_t h = mix(seed_ + 0x1234567ull * ++calls_);
    const int mode = static_cast<int>(h % 8);
    if (mode == 0) return;  // no draft
    int n = 1 + static_cast<int>((h >> 8) % n_max);
    const int bad = mode == 1 ? 0 : static_cast<int>((h >> 16) % (n + 1));  // n: none corrupted
    for (int k = 0; k < n; ++k) {
      const float conf = static_cast<float>((h >> (24 + 3 * k)) & 7) / 7.0f;
      if (conf < speculative::threshold_at(thr, k)) break;
      const int64_t p = pos + 1 + k;
      if (p >= static_cast<int64_t>(t_.size())) break;
      int32_t d = t_[p];
      if (k == bad) d = static_cast<int32_t>((d + 1 + (h >> 40) % 97) % V_);
      out->tokens[k] = d;
      out->conf[k] = conf;
      out->n = k + 1;
    }
  }
  int64_t calls() const { return calls_; }

 private:
  std::vector<int32_t> t_;
  int block_;
  uint32_t V_;
  uint64_t seed_;
  speculative::Proposer* inner_;
  int64_t last_sync_ = -1;
  int64_t calls_ = 0;
};

// *folded_after_partial (optional) counts steps that folded their seed right after a step that
// ended in a partial accept.
std::vector<int32_t> spec_greedy(session::ModelSession& s, speculative::Runtime& rt, const std::vector<int32_t>& prompt,
                                 int n, int32_t stop = -1, int32_t banned = -1,
                                 int64_t* folded_after_partial = nullptr) {
  std::vector<int32_t> gen, step;
  EXPECT_TRUE(s.prefill(prompt).ok());
  bool done = false;
  int64_t prev_partial = rt.stats().partial_accepts;
  bool after_partial = false;
  while (!done && static_cast<int>(gen.size()) < n) {
    const int64_t folded_before = rt.stats().folded_seeds;
    const Status st = rt.step(n - static_cast<int>(gen.size()), stop, banned, &step);
    if (folded_after_partial && after_partial && rt.stats().folded_seeds > folded_before) ++*folded_after_partial;
    after_partial = rt.stats().partial_accepts > prev_partial;
    prev_partial = rt.stats().partial_accepts;
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok() || step.empty()) break;
    EXPECT_LE(static_cast<int>(gen.size() + step.size()), n + 1);
    for (size_t i = 0; i < step.size(); ++i) {
      if (step[i] == stop) {
        EXPECT_EQ(i + 1, step.size()) << "stop token must end a step";
        done = true;
        break;
      }
      gen.push_back(step[i]);
    }
    EXPECT_EQ(s.n_tokens(), static_cast<int64_t>(prompt.size() + gen.size()));
  }
  return gen;
}

struct Combo {
  bool fold, grid, backoff, margin, replay;
  bool fold_partial = false;  // fold also after partial accepts (only meaningful with fold)
  bool cost = false;          // cost gate (with cheap costs, so it proposes, trims and unfolds)
  bool lookup = false;        // prompt-lookup drafts before the proposer's (hybrid)
  std::string name() const {
    return std::string(fold ? (fold_partial ? "foldpartial" : "fold") : "nofold") + (grid ? "+grid" : "") +
           (backoff ? "+backoff" : "") + (margin ? "+margin" : "") + (replay ? "+replay" : "") +
           (cost ? "+cost" : "") + (lookup ? "+lookup" : "");
  }
};

// 32 combinations of the seed's knobs, plus the 16 fold ones again with fold_after_partial.
std::vector<Combo> all_combos() {
  std::vector<Combo> c;
  for (int m = 0; m < 32; ++m) c.push_back(Combo{bool(m & 1), bool(m & 2), bool(m & 4), bool(m & 8), bool(m & 16)});
  for (int m = 0; m < 32; ++m) {
    if (m & 1) c.push_back(Combo{true, bool(m & 2), bool(m & 4), bool(m & 8), bool(m & 16), true});
  }
  // The cost gate on top of: nothing, fold, fold after partials, every knob, replay.
  c.push_back(Combo{false, false, false, false, false, false, true});
  c.push_back(Combo{true, false, false, false, false, false, true});
  c.push_back(Combo{true, false, false, false, false, true, true});
  c.push_back(Combo{true, true, true, true, false, false, true});
  c.push_back(Combo{false, false, false, false, true, false, true});
  c.push_back(Combo{true, true, true, true, true, true, true});
  // The lookup alone, with fold, with replay, under the cost gate, and with every knob.
  c.push_back(Combo{false, false, false, false, false, false, false, true});
  c.push_back(Combo{true, false, false, false, false, false, false, true});
  c.push_back(Combo{true, false, false, false, true, true, false, true});
  c.push_back(Combo{true, false, false, false, false, true, true, true});
  c.push_back(Combo{false, false, false, false, false, false, true, true});
  c.push_back(Combo{true, true, true, true, false, true, true, true});
  return c;
}

speculative::SpecConfig config_for(const Combo& c, float flat_conf) {
  speculative::SpecConfig cfg;
  cfg.confidence = flat_conf;
  if (c.grid) cfg.confidence_grid = {0.0f, 0.2f, 0.45f};
  cfg.fold = c.fold;
  cfg.fold_after_partial = c.fold_partial;
  cfg.fold_partial_min_hits = 0;  // ungated: fold after every partial
  cfg.backoff = c.backoff;
  cfg.margin_gate = c.margin ? 0.4f : 0.0f;
  cfg.replay = c.replay;
  cfg.lookup = c.lookup;
  if (c.cost) {  // cheap costs: the gate engages, trims long verifies and weighs fold vs standalone
    cfg.cost_gate = true;
    cfg.cost_verify_base = 0.2f;
    cfg.cost_verify_row = 0.35f;
    cfg.cost_draft = 0.05f;
    cfg.cost_draft_reject = 0.05f;
    cfg.cost_window = 8;
  }
  return cfg;
}

class RuntimeTest : public SharedStackTest {};

constexpr int64_t kCtx = 512;

// The plain greedy continuation of a prompt and the whole token timeline (prompt + continuation)
// that the scripted/oracle proposers read their drafts from.
struct Script {
  std::vector<int32_t> ref;       // [n] plain greedy tokens after the prompt
  std::vector<int32_t> timeline;  // [prompt + n] prompt then ref
};
Script script_of(const std::vector<int32_t>& prompt, int n) {
  auto plain_s = RuntimeTest::stack()->session(kCtx);
  Script sc;
  sc.ref = plain_greedy(*plain_s, prompt, n);
  sc.timeline = prompt;
  sc.timeline.insert(sc.timeline.end(), sc.ref.begin(), sc.ref.end());
  return sc;
}

constexpr int kGen = 256;

// One test per policy combination (ctest runs them in parallel).
class PolicyTest : public RuntimeTest, public ::testing::WithParamInterface<Combo> {};

TEST_P(PolicyTest, AdversarialProposerEqualsPlainGreedy) {
  const Combo c = GetParam();
  const uint32_t V = stack_->model->config().n_vocab;
  int64_t accept_hist[speculative::kMaxBlockSize + 1] = {};
  int64_t partial = 0, full = 0, misses = 0, folded = 0, folded_after_partial = 0;
  for (uint64_t pseed : {1ull, 2ull}) {
    SCOPED_TRACE("prompt " + std::to_string(pseed));
    const std::vector<int32_t> prompt = prompt_tokens(pseed == 1 ? 9 : 23, V, pseed);
    auto plain_s = stack_->session(kCtx);
    const std::vector<int32_t> ref = plain_greedy(*plain_s, prompt, kGen);
    ASSERT_EQ(static_cast<int>(ref.size()), kGen);
    std::vector<int32_t> timeline = prompt;
    timeline.insert(timeline.end(), ref.begin(), ref.end());
    auto s = stack_->session(kCtx);
    AdversarialProposer oracle(timeline, 5, V, pseed * 1000 + 17);
    speculative::SpecConfig cfg = config_for(c, 0.0f);
    cfg.scheduler = c.backoff;  // scheduler pauses exercised together with the backoff ladder
    speculative::Runtime rt(*s, oracle, cfg);
    const std::vector<int32_t> got = spec_greedy(*s, rt, prompt, kGen, -1, -1, &folded_after_partial);
    ASSERT_EQ(got, ref);
    EXPECT_EQ(state_bytes(*s), state_bytes(*plain_s));
    ASSERT_EQ(s->logits().size(), plain_s->logits().size());
    EXPECT_TRUE(std::equal(s->logits().begin(), s->logits().end(), plain_s->logits().begin()));
    const speculative::SpecStats& st = rt.stats();
    for (int k = 0; k <= speculative::kMaxBlockSize; ++k) accept_hist[k] += st.accepted_len_hist[k];
    partial += st.partial_accepts;
    full += st.full_accepts;
    misses += st.first_misses;
    folded += st.folded_seeds;
    if (c.replay) {
      EXPECT_EQ(st.direct_partial_commits, 0);
      EXPECT_GE(st.replay_fallbacks, st.partial_accepts);
      EXPECT_GT(st.replay_fallbacks, 0);
    } else {
      EXPECT_EQ(st.replay_fallbacks, 0);
      EXPECT_GT(st.direct_partial_commits, 0);
    }
    if (c.cost) {
      EXPECT_GT(st.proposals, 0);
      if (!c.grid) {
        EXPECT_GT(st.cost_trims, 0) << "cheap costs still trim some long verifies";
      }
    } else {
      EXPECT_EQ(st.cost_skips + st.cost_trims + st.cost_unfolds + st.cost_probes, 0);
    }
    if (!c.fold) {
      EXPECT_EQ(st.folded_seeds, 0);
    }
    if (c.lookup) {
      // The lookup runs first in every cycle; this random model's text rarely repeats, so it
      // seldom finds a match and its d_0 is (almost) never the target's token: these runs check
      // that the lookup leaves the oracle's cycles (every accept length, misses, fold, replay)
      // intact. Accepted lookups: LookupIdentity and the identity sweep (tests/speculative_sweep), on
      // the shipped models, whose text repeats.
      EXPECT_LE(st.lookup_first_misses, st.lookups);
      EXPECT_LE(st.lookup_accepted, st.lookup_drafts);
      EXPECT_LE(st.lookup_drafts, st.proposed_tokens);
    } else {
      EXPECT_EQ(st.lookups + st.lookup_drafts + st.lookup_accepted + st.lookup_first_misses, 0);
    }
  }
  EXPECT_GT(partial, 0);
  EXPECT_GT(full, 0);
  EXPECT_GT(misses, 0);
  if (c.cost || c.lookup) {
    // The gate's decisions change which cycles propose / fold: identity and state above are
    // what this matrix checks for it (its decisions have their own tests below).
    return;
  }
  if (c.fold) {
    EXPECT_GT(folded, 0);
  }
  // The seed's rule never folds the cycle after a partial accept; fold_after_partial does.
  if (c.fold && c.fold_partial) {
    EXPECT_GT(folded_after_partial, 0);
  } else {
    EXPECT_EQ(folded_after_partial, 0);
  }
  // Without threshold cuts and scheduler pauses, every accepted length 0..5 occurs. The margin
  // gate skips most standalone proposals of this random model (about 70 cycles are left, and
  // the oracle's full 5-draft accept has probability 1/40 per cycle), so there 5 may not occur
  // (it did not after the 64-lane dot order changed the bits; the non-margin runs cover it).
  if (!c.grid && !c.backoff) {
    const int k_max = c.margin ? 4 : 5;
    for (int k = 0; k <= k_max; ++k) EXPECT_GT(accept_hist[k], 0) << "no cycle accepted exactly " << k << " drafts";
  }
}

// The random drafter is almost never accepted, so replay / grid add nothing: 8 combinations.
class RandomDrafterPolicyTest : public RuntimeTest, public ::testing::WithParamInterface<Combo> {};

TEST_P(RandomDrafterPolicyTest, EqualsPlainGreedy) {
  const Combo c = GetParam();
  const uint32_t V = stack_->model->config().n_vocab;
  auto drafter = stack_->drafter(3);
  ASSERT_TRUE(drafter);
  const std::vector<int32_t> prompt = prompt_tokens(40, V, 5);
  auto plain_s = stack_->session(kCtx);
  const std::vector<int32_t> ref = plain_greedy(*plain_s, prompt, kGen);
  auto s = stack_->session(kCtx);
  speculative::DSparkProposer prop(*drafter);
  speculative::Runtime rt(*s, prop, config_for(c, 0.0f));
  const std::vector<int32_t> got = spec_greedy(*s, rt, prompt, kGen);
  ASSERT_EQ(got, ref);
  EXPECT_EQ(state_bytes(*s), state_bytes(*plain_s));
  EXPECT_GT(rt.stats().proposals, 0);
  EXPECT_GT(rt.stats().proposed_tokens, 0);
}

std::string combo_name(const ::testing::TestParamInfo<Combo>& i) {
  std::string n = i.param.name();
  for (char& ch : n) {
    if (ch == '+') ch = '_';
  }
  return n;
}

std::vector<Combo> random_combos() {
  std::vector<Combo> out;
  for (const Combo& c : all_combos()) {
    if ((c.cost && c.replay) || c.lookup) continue;
    if (!c.replay && c.grid == c.fold && (!c.fold_partial || (!c.backoff && !c.margin))) out.push_back(c);
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AllPolicies, PolicyTest, ::testing::ValuesIn(all_combos()), combo_name);
INSTANTIATE_TEST_SUITE_P(SomePolicies, RandomDrafterPolicyTest, ::testing::ValuesIn(random_combos()), combo_name);

// The oracle on top of the real DSpark proposer: the drafter's rings must end up holding
// exactly the rows a plain decode of the committed stream gives (rows of rejected drafts
// never merged), whatever mix of verify / commit_prefix / replay produced the stream.
TEST_F(RuntimeTest, RingHoldsOnlyCommittedRows) {
  const uint32_t V = stack_->model->config().n_vocab;
  const std::vector<int32_t> prompt = prompt_tokens(50, V, 11);
  const Script sc = script_of(prompt, 120);
  const std::vector<int32_t>& ref = sc.ref;
  const std::vector<int32_t>& timeline = sc.timeline;

  for (int mode = 0; mode < 4; ++mode) {
    const bool replay = mode & 1;
    const bool fold_partial = mode & 2;
    SCOPED_TRACE(std::string(replay ? "replay" : "direct") + (fold_partial ? " fold_after_partial" : " fold"));
    auto d_spec = stack_->drafter(3);
    auto d_ref = stack_->drafter(3);
    ASSERT_TRUE(d_spec && d_ref);
    auto s = stack_->session(kCtx);
    speculative::DSparkProposer inner(*d_spec);
    AdversarialProposer oracle(timeline, 5, V, 99, &inner);
    speculative::SpecConfig cfg;
    cfg.confidence = 0.0f;
    cfg.scheduler = false;
    cfg.replay = replay;
    cfg.fold = true;
    cfg.fold_after_partial = fold_partial;
    cfg.fold_partial_min_hits = 0;
    {
      speculative::Runtime rt(*s, oracle, cfg);
      int64_t folded_after_partial = 0;
      ASSERT_EQ(spec_greedy(*s, rt, prompt, 120, -1, -1, &folded_after_partial), ref);
      EXPECT_GT(rt.stats().partial_accepts, 0);
      if (fold_partial) {
        EXPECT_GT(folded_after_partial, 0);
      }
    }
    inner.sync(s->n_tokens());

    // Reference ring: captures of a plain decode of the same stream, committed one by one.
    auto s2 = stack_->session(kCtx);
    s2->set_capture_layers(d_ref->config().target_layers);
    s2->set_capture_sink([&](int64_t pos, std::span<const float> h) { d_ref->commit_rows(pos, 1, h.data()); });
    for (int32_t t : timeline) ASSERT_TRUE(s2->decode(t).ok());
    ASSERT_EQ(d_ref->ring_next(), s->n_tokens());
    ASSERT_EQ(d_spec->ring_next(), s->n_tokens());
    const int64_t D = stack_->model->config().head_dim;
    for (int st = 0; st < d_ref->config().n_stages; ++st) {
      for (int64_t p = s->n_tokens() - d_ref->config().window; p < s->n_tokens(); ++p) {
        const float* a = d_spec->ring_row(st, p);
        const float* b = d_ref->ring_row(st, p);
        ASSERT_TRUE(a && b) << "stage " << st << " pos " << p;
        ASSERT_EQ(0, std::memcmp(a, b, sizeof(float) * D)) << "stage " << st << " pos " << p << " replay " << replay;
      }
    }
    // Same proposal from both rings.
    speculative::Proposal pa, pb;
    const int32_t anchor = choose(s->logits(), -1);
    d_spec->propose(anchor, s->n_tokens(), 5, {}, &pa);
    d_ref->propose(anchor, s->n_tokens(), 5, {}, &pb);
    ASSERT_EQ(pa.n, 5);
    ASSERT_EQ(pb.n, 5);
    for (int k = 0; k < 5; ++k) {
      EXPECT_EQ(pa.tokens[k], pb.tokens[k]);
      EXPECT_EQ(d_spec->last_conf_logit(k), d_ref->last_conf_logit(k));
    }
  }
}

TEST_F(RuntimeTest, StopAndBannedTokensAndContextLimit) {
  const uint32_t V = stack_->model->config().n_vocab;
  const std::vector<int32_t> prompt = prompt_tokens(12, V, 21);
  const Script sc = script_of(prompt, 200);
  const std::vector<int32_t>& ref = sc.ref;
  const std::vector<int32_t>& timeline = sc.timeline;
  // Stop = a token the stream produces late; banned = the most frequent token.
  const int32_t stop = ref[150];
  std::map<int32_t, int> freq;
  for (int32_t t : ref) ++freq[t];
  int32_t banned = ref[0];
  for (auto& [t, c] : freq) {
    if (c > freq[banned]) banned = t;
  }

  for (int mode = 0; mode < 3; ++mode) {
    const bool fold = mode > 0;
    const bool fold_partial = mode == 2;
    SCOPED_TRACE(fold ? (fold_partial ? "fold_after_partial" : "fold") : "standalone");
    {  // stop token inside drafts
      auto p = stack_->session(kCtx);
      const std::vector<int32_t> want = plain_greedy(*p, prompt, 200, stop);
      auto s = stack_->session(kCtx);
      AdversarialProposer oracle(timeline, 5, V, 5);
      speculative::SpecConfig cfg;
      cfg.confidence = 0;
      cfg.fold = fold;
      cfg.fold_after_partial = fold_partial;
      cfg.fold_partial_min_hits = 0;
      speculative::Runtime rt(*s, oracle, cfg);
      EXPECT_EQ(spec_greedy(*s, rt, prompt, 200, stop), want);
      EXPECT_EQ(state_bytes(*s), state_bytes(*p));
    }
    {  // banned token: the oracle follows the unbanned stream
      auto p = stack_->session(kCtx);
      const std::vector<int32_t> want = plain_greedy(*p, prompt, 200, -1, banned);
      std::vector<int32_t> tl = prompt;
      tl.insert(tl.end(), want.begin(), want.end());
      auto s = stack_->session(kCtx);
      AdversarialProposer oracle(tl, 5, V, 6);
      speculative::SpecConfig cfg;
      cfg.confidence = 0;
      cfg.fold = fold;
      cfg.fold_after_partial = fold_partial;
      cfg.fold_partial_min_hits = 0;
      speculative::Runtime rt(*s, oracle, cfg);
      EXPECT_EQ(spec_greedy(*s, rt, prompt, 200, -1, banned), want);
      EXPECT_EQ(state_bytes(*s), state_bytes(*p));
    }
    {  // context fills up: never appends past n_ctx
      const int64_t ctx = 60;
      auto p = stack_->session(ctx);
      const std::vector<int32_t> want = plain_greedy(*p, prompt, 1000);
      ASSERT_EQ(static_cast<int64_t>(want.size() + prompt.size()), ctx);
      auto s = stack_->session(ctx);
      AdversarialProposer oracle(timeline, 5, V, 8);
      speculative::SpecConfig cfg;
      cfg.confidence = 0;
      cfg.fold = fold;
      cfg.fold_after_partial = fold_partial;
      cfg.fold_partial_min_hits = 0;
      cfg.tail_min_tokens = 0;
      speculative::Runtime rt(*s, oracle, cfg);
      EXPECT_EQ(spec_greedy(*s, rt, prompt, 1000), want);
      EXPECT_EQ(s->n_tokens(), ctx);
      std::vector<int32_t> out;
      EXPECT_TRUE(rt.step(5, -1, -1, &out).ok());
      EXPECT_TRUE(out.empty());
    }
    {  // tight token budget: each step respects max_new
      auto s = stack_->session(kCtx);
      AdversarialProposer oracle(timeline, 5, V, 9);
      speculative::SpecConfig cfg;
      cfg.confidence = 0;
      cfg.fold = fold;
      cfg.fold_after_partial = fold_partial;
      cfg.fold_partial_min_hits = 0;
      cfg.tail_min_tokens = 0;
      speculative::Runtime rt(*s, oracle, cfg);
      ASSERT_TRUE(s->prefill(prompt).ok());
      std::vector<int32_t> got, out;
      for (int budget : {1, 2, 3, 1, 7, 2, 5, 1, 4}) {
        ASSERT_TRUE(rt.step(budget, -1, -1, &out).ok());
        ASSERT_GE(out.size(), 1u);
        EXPECT_LE(static_cast<int>(out.size()), budget);
        got.insert(got.end(), out.begin(), out.end());
      }
      EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin()));
    }
  }
}

// Worst argmax gap of the committed speculative stream under teacher forcing through ordinary
// one-token decode (dspark.md §3): must be exactly 0.
TEST_F(RuntimeTest, WorstArgmaxGapIsZero) {
  const uint32_t V = stack_->model->config().n_vocab;
  const std::vector<int32_t> prompt = prompt_tokens(30, V, 31);
  const Script sc = script_of(prompt, 256);
  const std::vector<int32_t>& timeline = sc.timeline;
  auto s = stack_->session(kCtx);
  AdversarialProposer oracle(timeline, 5, V, 41);
  speculative::SpecConfig cfg;
  cfg.confidence = 0;
  cfg.fold = true;
  cfg.fold_after_partial = true;
  cfg.fold_partial_min_hits = 0;
  speculative::Runtime rt(*s, oracle, cfg);
  const std::vector<int32_t> got = spec_greedy(*s, rt, prompt, 256);
  ASSERT_EQ(got.size(), 256u);
  auto tf = stack_->session(kCtx);
  ASSERT_TRUE(tf->prefill(prompt).ok());
  float worst = 0.0f;
  int worst_at = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    std::span<const float> l = tf->logits();
    const float mx = *std::max_element(l.begin(), l.end());
    const float gap = mx - l[got[i]];
    if (gap > worst) {
      worst = gap;
      worst_at = static_cast<int>(i);
    }
    ASSERT_TRUE(tf->decode(got[i]).ok());
  }
  EXPECT_EQ(worst, 0.0f) << "worst argmax gap at committed token " << worst_at;
  EXPECT_GT(rt.stats().accepted_draft_tokens, 0);
}

// Proposes d_0 wrong unless told to be right; records the position-0 threshold it was given.
class ScriptedProposer final : public speculative::Proposer {
 public:
  ScriptedProposer(std::vector<int32_t> timeline, uint32_t V) : t_(std::move(timeline)), V_(V) {}
  int block_size() const override { return 3; }
  void propose(int32_t, int64_t pos, int n_max, std::span<const float> thr, speculative::Proposal* out) override {
    *out = speculative::Proposal();
    thr0.push_back(speculative::threshold_at(thr, 0));
    for (int k = 0; k < n_max; ++k) out->tokens[k] = t_[pos + 1 + k];
    out->n = n_max;
    if (!next_right) out->tokens[0] = static_cast<int32_t>((out->tokens[0] + 1) % V_);
  }
  bool next_right = false;
  std::vector<float> thr0;

 private:
  std::vector<int32_t> t_;
  uint32_t V_;
};

TEST_F(RuntimeTest, SchedulerBackoffLadder) {
  const uint32_t V = stack_->model->config().n_vocab;
  const std::vector<int32_t> prompt = prompt_tokens(10, V, 3);
  const Script sc = script_of(prompt, 120);
  const std::vector<int32_t>& ref = sc.ref;
  const std::vector<int32_t>& timeline = sc.timeline;
  for (bool backoff : {false, true}) {
    SCOPED_TRACE(backoff ? "backoff" : "plain scheduler");
    auto s = stack_->session(kCtx);
    ScriptedProposer prop(timeline, V);
    speculative::SpecConfig cfg;
    cfg.confidence = 0.3f;
    cfg.backoff = backoff;
    cfg.tail_min_tokens = 0;
    speculative::Runtime rt(*s, prop, cfg);
    ASSERT_TRUE(s->prefill(prompt).ok());
    std::vector<int32_t> out, got;
    std::vector<bool> proposed;  // per step
    for (int step = 0; step < 40; ++step) {
      const size_t before = prop.thr0.size();
      prop.next_right = prop.thr0.size() == 6;  // the 7th proposal is right
      ASSERT_TRUE(rt.step(100, -1, -1, &out).ok());
      got.insert(got.end(), out.begin(), out.end());
      proposed.push_back(prop.thr0.size() > before);
    }
    EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin()));
    // Four unproductive cycles close a window with no accepts: pause `skip` (2) cycles, x8 with
    // the backoff ladder (4 consecutive unproductive cycles: 2^3 capped at x8).
    const int pause = backoff ? 16 : 2;
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(proposed[i]) << i;
    for (int i = 4; i < 4 + pause; ++i) EXPECT_FALSE(proposed[i]) << i;
    EXPECT_TRUE(proposed[4 + pause]);
    ASSERT_GE(prop.thr0.size(), 8u);
    for (size_t i = 0; i < prop.thr0.size(); ++i) {
      float want = 0.3f;
      // +0.05 per consecutive unproductive cycle (cap +0.20); the accept (proposal 6) resets it.
      const size_t streak = i < 7 ? i : i - 7;
      if (backoff) want += std::min(0.20f, 0.05f * static_cast<float>(streak));
      EXPECT_NEAR(prop.thr0[i], want, 1e-6) << "proposal " << i;
    }
    EXPECT_EQ(rt.stats().full_accepts, 1);
  }
}

// Arming: full accept arms; a partial accept keeps/arms fold only with fold_after_partial; a
// d_0 miss always disarms. The folded cycle after a partial proposes from the right anchor and
// position (AdversarialProposer checks the sync and the anchor) and the stream stays plain greedy.
class PartialScriptProposer final : public speculative::Proposer {
 public:
  PartialScriptProposer(std::vector<int32_t> timeline, uint32_t V) : t_(std::move(timeline)), V_(V) {}
  int block_size() const override { return 4; }
  void sync(int64_t n) override { last_sync = n; }
  void propose(int32_t anchor, int64_t pos, int n_max, std::span<const float>, speculative::Proposal* out) override {
    EXPECT_EQ(last_sync, pos);
    EXPECT_EQ(anchor, t_[pos]);
    *out = speculative::Proposal();
    for (int k = 0; k < n_max; ++k) out->tokens[k] = t_[pos + 1 + k];
    out->n = n_max;
    if (wrong_at >= 0 && wrong_at < n_max) {
      out->tokens[wrong_at] = static_cast<int32_t>((t_[pos + 1 + wrong_at] + 1) % V_);
    }
  }
  int wrong_at = -1;  // -1: all right (full accept); 0: d_0 miss; k: partial accept of k
  int64_t last_sync = -1;

 private:
  std::vector<int32_t> t_;
  uint32_t V_;
};

TEST_F(RuntimeTest, FoldAfterPartialArming) {
  const uint32_t V = stack_->model->config().n_vocab;
  const std::vector<int32_t> prompt = prompt_tokens(14, V, 77);
  auto plain_s = stack_->session(kCtx);
  const std::vector<int32_t> ref = plain_greedy(*plain_s, prompt, 100);
  std::vector<int32_t> timeline = prompt;
  timeline.insert(timeline.end(), ref.begin(), ref.end());
  for (bool fold_partial : {false, true}) {
    SCOPED_TRACE(fold_partial ? "fold_after_partial" : "seed rule");
    auto s = stack_->session(kCtx);
    PartialScriptProposer prop(timeline, V);
    speculative::SpecConfig cfg;
    cfg.confidence = 0.0f;
    cfg.scheduler = false;
    cfg.tail_min_tokens = 0;
    cfg.fold = true;
    cfg.fold_after_partial = fold_partial;
    cfg.fold_partial_min_hits = 0;
    speculative::Runtime rt(*s, prop, cfg);
    ASSERT_TRUE(s->prefill(prompt).ok());
    std::vector<int32_t> got, out;
    struct Want {
      int wrong_at;
      bool folded;   // this step verified its seed as row 0
      bool armed;    // fold armed after the step
      size_t n_out;  // tokens appended
    };
    // Standalone partial (seed + 2 drafts), then folds while fold_after_partial keeps arming.
    const std::vector<Want> script = {
        {2, false, fold_partial, 3},          // standalone: seed, d_0, d_1 kept
        {1, fold_partial, fold_partial, 2},   // folded: seed + d_0 (row 0 checks d_0)
        {3, fold_partial, fold_partial, 4},   // folded again after a partial
        {0, fold_partial, false, 1},          // d_0 miss disarms (folded: seed only)
        {-1, false, true, 5},                 // standalone full accept arms
        {2, true, fold_partial, 3},           // folded partial: stays armed only with the flag
        {-1, fold_partial, true, 5},
    };
    for (size_t i = 0; i < script.size(); ++i) {
      SCOPED_TRACE("step " + std::to_string(i));
      prop.wrong_at = script[i].wrong_at;
      const int64_t folded_before = rt.stats().folded_seeds;
      ASSERT_TRUE(rt.step(100, -1, -1, &out).ok());
      EXPECT_EQ(rt.stats().folded_seeds - folded_before, script[i].folded ? 1 : 0);
      EXPECT_EQ(rt.fold_armed(), script[i].armed);
      EXPECT_EQ(out.size(), script[i].n_out);
      got.insert(got.end(), out.begin(), out.end());
    }
    ASSERT_TRUE(std::equal(got.begin(), got.end(), ref.begin()));
    // Finish plainly and compare the whole state with plain decoding.
    while (static_cast<int>(got.size()) < 100) {
      prop.wrong_at = static_cast<int>(got.size() % 5);
      ASSERT_TRUE(rt.step(100 - static_cast<int>(got.size()), -1, -1, &out).ok());
      got.insert(got.end(), out.begin(), out.end());
    }
    EXPECT_EQ(got, ref);
    EXPECT_EQ(state_bytes(*s), state_bytes(*plain_s));
  }
  {  // Gate: arm after a partial only when >= 3 of the last 8 d_0 checks hit.
    auto s = stack_->session(kCtx);
    PartialScriptProposer prop(timeline, V);
    speculative::SpecConfig cfg;
    cfg.confidence = 0.0f;
    cfg.scheduler = false;
    cfg.tail_min_tokens = 0;
    cfg.fold = true;
    cfg.fold_after_partial = true;
    cfg.fold_partial_min_hits = 3;
    speculative::Runtime rt(*s, prop, cfg);
    ASSERT_TRUE(s->prefill(prompt).ok());
    std::vector<int32_t> got, out;
    // wrong_at, armed after: partial (1 hit), miss (1), partial (2), partial (3: armed), miss
    // while folded (disarms), partial (hits still 3 in the window: armed).
    const std::vector<std::pair<int, bool>> script = {{2, false}, {0, false}, {1, false},
                                                      {3, true},  {0, false}, {2, true}};
    for (size_t i = 0; i < script.size(); ++i) {
      SCOPED_TRACE("gated step " + std::to_string(i));
      prop.wrong_at = script[i].first;
      ASSERT_TRUE(rt.step(100, -1, -1, &out).ok());
      EXPECT_EQ(rt.fold_armed(), script[i].second);
      got.insert(got.end(), out.begin(), out.end());
    }
    ASSERT_TRUE(std::equal(got.begin(), got.end(), ref.begin()));
    rt.reset_policy();
    prop.wrong_at = 2;
    ASSERT_TRUE(rt.step(100, -1, -1, &out).ok());
    EXPECT_FALSE(rt.fold_armed()) << "reset_policy clears the d_0 history";
  }
}

// ---- cost gate decisions (counters and logits -> decisions; no clock) ----

TEST(CostGateTest, BestDraftsByExpectedGain) {
  speculative::CostModel c;  // verify(n) = 0.4 + 0.57 n, draft 1.25, rejected draft 0.85
  c.verify_base = 0.4f;
  c.verify_row = 0.57f;
  const float sure[5] = {1, 1, 1, 1, 1};
  float g = 0;
  // After a d_0 hit, 5 sure drafts: verify(5) earns 1 + 4 - 3.25.
  EXPECT_EQ(speculative::best_verify_drafts(c, sure, 5, &g), 5);
  EXPECT_NEAR(g, 1.75f, 1e-5);
  // Coin-flip continuations: every verify loses (verify(2) = 1.54 > 1.5): single-draft decode.
  const float coin[5] = {1, 0.5f, 0.5f, 0.5f, 0.5f};
  EXPECT_EQ(speculative::best_verify_drafts(c, coin, 5, &g), 1);
  EXPECT_EQ(g, 0.0f);
  // Good first continuations, then a wall: verify(2) or (3)? 1 + 0.9 - 1.54 = 0.36 vs
  // 1 + 0.9 + 0.09 - 2.11 < 0.36: two drafts.
  const float wall[5] = {1, 0.9f, 0.1f, 0.9f, 0.9f};
  EXPECT_EQ(speculative::best_verify_drafts(c, wall, 5, &g), 2);
  EXPECT_NEAR(g, 0.36f, 1e-5);
  EXPECT_EQ(speculative::best_verify_drafts(c, sure, 1, &g), 1);  // one draft: decode
  EXPECT_EQ(g, 0.0f);
  // Fold: [seed, d_0..d_4] earns 1 + 5 - verify(6) = 2.18.
  EXPECT_EQ(speculative::best_fold_drafts(c, sure, 5, &g), 5);
  EXPECT_NEAR(g, 2.18f, 1e-5);
  // A likely d_0 miss makes every fold a loss; the least bad is the shortest.
  const float miss[5] = {0.2f, 1, 1, 1, 1};
  EXPECT_EQ(speculative::best_fold_drafts(c, miss, 5, &g), 1);
  EXPECT_NEAR(g, 1.2f - 1.54f, 1e-5);
  // Ties go to the smaller count: rows that cost exactly the token they earn tie at gain 0.
  speculative::CostModel unit;
  unit.verify_base = 0.0f;
  unit.verify_row = 1.0f;
  EXPECT_EQ(speculative::best_verify_drafts(unit, sure, 5, &g), 1);
  EXPECT_EQ(g, 0.0f);
}

TEST(CostGateTest, AcceptModelCountsPriorsAndDecay) {
  speculative::AcceptModel cold(0.5f);
  EXPECT_FLOAT_EQ(cold.p_draft(), 0.5f);
  EXPECT_FLOAT_EQ(cold.p_accept(0), 1.0f);
  EXPECT_FLOAT_EQ(cold.p_cont(1), 1.0f);
  cold.note_proposal(false);
  cold.note_proposal(true);
  cold.note_accept(0, false);
  EXPECT_FLOAT_EQ(cold.p_draft(), (1.0f + 0.5f) / (2.0f + 1.0f));
  EXPECT_FLOAT_EQ(cold.p_accept(0), 1.0f / 2.0f);
  cold.note_cont(1, true);
  cold.note_cont(1, false);
  EXPECT_FLOAT_EQ(cold.p_cont(1), 2.0f / 3.0f);
  // Decay pulls the estimates back toward the priors.
  cold.decay(0.0f);
  EXPECT_FLOAT_EQ(cold.p_draft(), 0.5f);
  EXPECT_FLOAT_EQ(cold.p_accept(0), 1.0f);
  // Out-of-range positions are ignored / zero.
  cold.note_accept(speculative::kMaxBlockSize, true);
  EXPECT_EQ(cold.p_accept(-1), 0.0f);
  EXPECT_EQ(cold.p_cont(0), 0.0f);
  EXPECT_EQ(speculative::Runtime::margin_bucket(1.9f), 0);
  EXPECT_EQ(speculative::Runtime::margin_bucket(2.0f), 1);
  EXPECT_EQ(speculative::Runtime::margin_bucket(7.9f), 2);
  EXPECT_EQ(speculative::Runtime::margin_bucket(8.0f), 3);
  EXPECT_EQ(speculative::Runtime::margin_bucket(NAN), 0);
}

// top1 - top2 of the logits predicting each plain greedy token: margins[i] is the margin the
// gate sees when it decides after decoding the seed at generated index i - 1 (it predicts i).
std::vector<float> plain_margins(session::ModelSession& s, const std::vector<int32_t>& prompt, int n) {
  std::vector<float> m;
  EXPECT_TRUE(s.prefill(prompt).ok());
  for (int i = 0; i <= n; ++i) {
    std::span<const float> l = s.logits();
    float a = -INFINITY, b = -INFINITY;
    for (float x : l) {
      if (x > a) {
        b = a;
        a = x;
      } else if (x > b) {
        b = x;
      }
    }
    m.push_back(a - b);
    if (i < n) {
      EXPECT_TRUE(s.decode(choose(l, -1)).ok());
    }
  }
  return m;
}

// Costs 0.4 + 0.57 n, 1.25, 0.85; no scheduler. A drafter that is always wrong: the cold gate stays closed
// (plain cycles) and proposes only probes, each once the probe gap has passed and the margin is
// >= cost_probe_margin, the gap doubling per unproductive probe (64, 128, 256, ...). A drafter
// that is always right: the first probe's full accept makes the next cycles warm, and the gate then
// proposes every cycle (the streak is followed) until the budget's end shortens the drafts.
TEST_F(RuntimeTest, CostGateProbeLadderAndStreaks) {
  const uint32_t V = stack_->model->config().n_vocab;
  const std::vector<int32_t> prompt = prompt_tokens(16, V, 4);
  constexpr int kN = 420;
  auto plain_s = stack_->session(kCtx);
  const std::vector<int32_t> ref = plain_greedy(*plain_s, prompt, kN);
  auto margin_s = stack_->session(kCtx);
  const std::vector<float> margins = plain_margins(*margin_s, prompt, kN);
  std::vector<int32_t> timeline = prompt;
  timeline.insert(timeline.end(), ref.begin(), ref.end());
  speculative::SpecConfig cfg;
  cfg.confidence = 0.0f;
  cfg.scheduler = false;
  cfg.tail_min_tokens = 0;
  cfg.cost_gate = true;
  cfg.cost_verify_base = 0.4f;  // pinned (not the CPU defaults, which follow the kernels)
  cfg.cost_verify_row = 0.57f;
  cfg.cost_draft = 1.25f;
  cfg.cost_draft_reject = 0.85f;
  // The random test model's margins are small: probe above its 70th percentile margin.
  std::vector<float> sorted(margins.begin(), margins.end());
  std::sort(sorted.begin(), sorted.end());
  cfg.cost_probe_margin = sorted[sorted.size() * 7 / 10];
  const int gap0 = speculative::Runtime::kProbeGapMin;
  {  // always wrong
    auto s = stack_->session(kCtx);
    PartialScriptProposer prop(timeline, V);
    prop.wrong_at = 0;
    speculative::Runtime rt(*s, prop, cfg);
    ASSERT_TRUE(s->prefill(prompt).ok());
    std::vector<int32_t> got, out;
    std::vector<int> want_steps;  // 1-based steps that must propose
    int since = gap0, gap = gap0;  // the runtime starts ready to probe
    for (int k = 1; k <= 400; ++k) {
      ++since;
      if (since >= gap && margins[k] >= cfg.cost_probe_margin) {
        want_steps.push_back(k);
        since = 0;
        gap = std::min(speculative::Runtime::kProbeGapMax, 2 * gap);
      }
    }
    ASSERT_GE(want_steps.size(), 2u);  // gaps of kProbeGapMin, then doubling
    std::vector<int> steps;
    for (int k = 1; k <= 400; ++k) {
      const int64_t before = rt.stats().proposals;
      ASSERT_TRUE(rt.step(kN - static_cast<int>(got.size()), -1, -1, &out).ok());
      ASSERT_EQ(out.size(), 1u);  // misses and plain cycles append the seed only
      got.insert(got.end(), out.begin(), out.end());
      if (rt.stats().proposals > before) steps.push_back(k);
    }
    EXPECT_EQ(steps, want_steps);
    EXPECT_EQ(rt.stats().cost_probes, static_cast<int64_t>(want_steps.size()));
    EXPECT_EQ(rt.stats().cost_skips, 400 - static_cast<int64_t>(want_steps.size()));
    EXPECT_EQ(rt.probe_gap(), std::min(speculative::Runtime::kProbeGapMax, gap0 << want_steps.size()));
    EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin()));
  }
  {  // always right
    auto s = stack_->session(kCtx);
    PartialScriptProposer prop(timeline, V);
    prop.wrong_at = -1;
    speculative::Runtime rt(*s, prop, cfg);
    ASSERT_TRUE(s->prefill(prompt).ok());
    std::vector<int32_t> got, out;
    int first = -1;
    // A fresh runtime is ready to probe: the first proposal is the first step whose margin
    // reaches the probe bar.
    int want_first = 1;
    while (!(margins[want_first] >= cfg.cost_probe_margin)) ++want_first;
    for (int k = 1; static_cast<int>(got.size()) < kN - 60; ++k) {
      const int64_t before = rt.stats().proposals;
      ASSERT_TRUE(rt.step(kN - static_cast<int>(got.size()), -1, -1, &out).ok());
      const bool proposed = rt.stats().proposals > before;
      if (first < 0) {
        if (proposed) {
          first = k;
          EXPECT_EQ(k, want_first);
          EXPECT_GE(margins[k], cfg.cost_probe_margin);
          EXPECT_EQ(out.size(), 5u) << "the probe verifies all 4 drafts (seed + 4)";
        } else {
          EXPECT_EQ(out.size(), 1u);
        }
      } else {
        EXPECT_TRUE(proposed) << "warm step " << k << " did not follow the streak";
        EXPECT_EQ(out.size(), 5u);
      }
      got.insert(got.end(), out.begin(), out.end());
    }
    EXPECT_GT(first, 0);
    EXPECT_EQ(rt.stats().cost_probes, 1);
    EXPECT_EQ(rt.stats().first_misses, 0);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), ref.begin()));
  }
}

// Cheap proposals, verify rows that cost more than a kept continuation earns: after one
// partial accept of 2 of 4 drafts the gate verifies only the first 2 (cost_trims), and with fold
// the warm cycles fold their seed.
TEST_F(RuntimeTest, CostGateTrimsVerifiesAndFolds) {
  const uint32_t V = stack_->model->config().n_vocab;
  const std::vector<int32_t> prompt = prompt_tokens(18, V, 8);
  auto plain_s = stack_->session(kCtx);
  const std::vector<int32_t> ref = plain_greedy(*plain_s, prompt, 150);
  std::vector<int32_t> timeline = prompt;
  timeline.insert(timeline.end(), ref.begin(), ref.end());
  for (bool fold : {false, true}) {
    SCOPED_TRACE(fold ? "fold" : "standalone");
    auto s = stack_->session(kCtx);
    PartialScriptProposer prop(timeline, V);
    prop.wrong_at = 2;  // d_0, d_1 right, d_2 wrong
    speculative::SpecConfig cfg;
    cfg.confidence = 0.0f;
    cfg.scheduler = false;
    cfg.tail_min_tokens = 0;
    cfg.fold = fold;
    cfg.cost_gate = true;
    cfg.cost_verify_base = 0.4f;  // pinned (not the CPU defaults, which follow the kernels)
    cfg.cost_verify_row = 0.57f;
    cfg.cost_draft = 0.0f;
    cfg.cost_draft_reject = 0.0f;
    speculative::Runtime rt(*s, prop, cfg);
    const std::vector<int32_t> got = spec_greedy(*s, rt, prompt, 150);
    ASSERT_EQ(got, ref);
    EXPECT_EQ(state_bytes(*s), state_bytes(*plain_s));
    const speculative::SpecStats& st = rt.stats();
    EXPECT_EQ(st.cost_skips, 0) << "free proposals with a certain d_0 always pay";
    EXPECT_GT(st.cost_trims, 0);
    EXPECT_LT(st.verify_rows, 4 * st.verify_calls + st.folded_seeds);
    if (fold) {
      EXPECT_GT(st.folded_seeds, 0);
    } else {
      EXPECT_EQ(st.folded_seeds, 0);
      // Trimmed to d_0, d_1: both kept, so trimmed cycles are full accepts.
      EXPECT_GT(st.full_accepts, 0);
    }
  }
}

TEST(SpecConfigTest, ConfidenceGridParsing) {
  std::vector<float> g;
  ASSERT_TRUE(speculative::parse_confidence_grid("0.55,0.6,0.65", &g).ok());
  ASSERT_EQ(g.size(), 3u);
  EXPECT_FLOAT_EQ(g[2], 0.65f);
  EXPECT_FLOAT_EQ(speculative::threshold_at(g, 0), 0.55f);
  EXPECT_FLOAT_EQ(speculative::threshold_at(g, 7), 0.65f);  // last value extends
  EXPECT_FLOAT_EQ(speculative::threshold_at({}, 3), 0.0f);
  EXPECT_FALSE(speculative::parse_confidence_grid("0.5,,0.6", &g).ok());
  EXPECT_FALSE(speculative::parse_confidence_grid("0.5,1.5", &g).ok());
  EXPECT_FALSE(speculative::parse_confidence_grid("abc", &g).ok());
  EXPECT_TRUE(g.empty());
}

}  // namespace
}  // namespace ds4::spec_test
