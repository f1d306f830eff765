// tests/speculative/multi_session_test.cpp — one Engine, several sessions at once: the Engine
// holds the drafter's weights, each speculative decoder its own drafter timeline.
//
// Two speculative sessions (different prompts, different policies) and one plain session run
// on one Engine with their steps interleaved; each must produce exactly plain greedy decoding's
// tokens, leave bit-identical final logits, and make the same decisions (cycles, proposals,
// accepted drafts) as the same speculative session run alone: no state is shared between them.
// (Identity alone would not catch a shared drafter timeline: DSpark is lossless whatever its
// drafts. The decision counters would.) Also: plain decodes batched across DSpark sessions
// between their steps (the server's pattern) feed each drafter exactly as decode() does.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/speculative.h"

namespace ds4 {
namespace {

const std::string kTarget = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf";
const std::string kDrafter = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny-dspark.gguf";
constexpr int kGen = 96;

struct Live {
  std::unique_ptr<Session> session;
  std::unique_ptr<Decoder> decoder;
  SpeculativeDecoder* spec = nullptr;  // decoder, when speculative
  std::vector<int32_t> tokens;
};

std::vector<int32_t> prompt_of(Engine& e, const char* text) {
  std::vector<int32_t> p{e.bos_token()};
  const std::vector<int32_t> body = e.tokenize(text);
  p.insert(p.end(), body.begin(), body.end());
  return p;
}

// A session of `engine` with its prompt prefilled; speculative when `policy` is non-null. The
// decoder is made after the first `cached` prompt tokens (0: before the prefill; > 0: a session
// that already holds a prefix, as the server resuming a cached conversation).
Live start(Engine& engine, const std::vector<int32_t>& prompt, const char* policy, size_t cached = 0) {
  Live r;
  auto s = engine.new_session(static_cast<int>(prompt.size()) + kGen + 16);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  if (!s.ok()) return r;
  r.session = std::move(s).value();
  EXPECT_TRUE(r.session->prefill(std::span<const int32_t>(prompt).first(cached), nullptr).ok());
  if (policy != nullptr) {
    SpecOptions so;
    std::vector<float> grid;
    EXPECT_TRUE(parse_dspark_confidence_grid(kDefaultDsparkGrid, &grid).ok());
    EXPECT_TRUE(apply_dspark_policy(policy, grid, kDefaultDsparkMarginGate, &so).ok());
    auto d = new_speculative_decoder(engine, *r.session, so);
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    if (!d.ok()) return r;
    r.spec = d->get();
    r.decoder = std::move(d).value();
  } else {
    r.decoder = std::make_unique<PlainDecoder>();
  }
  EXPECT_TRUE(r.session->prefill(std::span<const int32_t>(prompt).subspan(cached), nullptr).ok());
  return r;
}

// One step of `r` (greedy, EOS banned as in the bench); false once it has kGen tokens.
bool step(Live& r, Sampler& sampler, int32_t eos) {
  const int left = kGen - static_cast<int>(r.tokens.size());
  if (left <= 0) return false;
  StepLimits lim;
  lim.max_new = left;
  lim.banned_token = eos;
  std::vector<int32_t> out;
  const Status st = r.decoder->step(*r.session, sampler, lim, &out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  if (!st.ok() || out.empty()) return false;
  r.tokens.insert(r.tokens.end(), out.begin(), out.end());
  return true;
}

// The shipped target + drafter on 2 threads; null (with a test failure) when they do not open.
std::unique_ptr<Engine> open_shipped() {
  EngineOptions eo;
  eo.model_path = kTarget;
  eo.mtp_path = kDrafter;
  eo.n_threads = 2;
  auto opened = Engine::open(eo);
  EXPECT_TRUE(opened.ok()) << opened.status().to_string();
  return opened.ok() ? std::move(opened).value() : nullptr;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The shipped engine, a greedy sampler and the two prompts every test here runs.
class SpeculativeSessions : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTarget) || !std::filesystem::exists(kDrafter)) GTEST_SKIP() << "shipped models missing";
    engine_ = open_shipped();
    ASSERT_TRUE(engine_);
    SamplerParams sp;
    sp.temperature = 0.0f;
    sampler_.emplace(sp, engine_->info().n_vocab);
    eos_ = engine_->eos_token();
    pa_ = prompt_of(*engine_, "{\"id\": 1, \"name\": \"alpha\", \"tags\": [\"a\", \"b\"]}\n"
                              "{\"id\": 2, \"name\": \"beta\", \"tags\": [\"c\", \"d\"]}\n");
    pb_ = prompt_of(*engine_, "The lighthouse keeper climbed the stairs every evening, "
                              "and the lighthouse keeper wrote down the wind.");
  }
  // r stepped until it holds kGen tokens.
  void finish(Live& r) {
    while (step(r, *sampler_, eos_)) {
    }
  }
  std::unique_ptr<Engine> engine_;
  std::optional<Sampler> sampler_;
  int32_t eos_ = -1;
  std::vector<int32_t> pa_, pb_;
};

TEST_F(SpeculativeSessions, TwoInterleavedOnOneEngineEqualPlainGreedy) {
  Engine& engine = *engine_;
  Sampler& sampler = *sampler_;
  const int32_t eos = eos_;
  const std::vector<int32_t>& pa = pa_;
  const std::vector<int32_t>& pb = pb_;

  // References: each prompt alone, plain greedy.
  Live ra = start(engine, pa, nullptr), rb = start(engine, pb, nullptr);
  finish(ra);
  finish(rb);
  ASSERT_EQ(static_cast<int>(ra.tokens.size()), kGen);
  ASSERT_EQ(static_cast<int>(rb.tokens.size()), kGen);

  // Each speculative session alone: its decisions.
  Live sa = start(engine, pa, kDefaultDsparkPolicy), sb = start(engine, pb, "all");
  ASSERT_TRUE(sa.spec && sb.spec);
  finish(sa);
  finish(sb);
  ASSERT_EQ(sa.tokens, ra.tokens);
  ASSERT_EQ(sb.tokens, rb.tokens);

  // Two speculative sessions and a plain one, all live at once, steps alternating.
  Live a = start(engine, pa, kDefaultDsparkPolicy);
  Live b = start(engine, pb, "all");
  Live c = start(engine, pa, nullptr);
  ASSERT_TRUE(a.spec && b.spec);
  for (bool more = true; more;) {
    const bool ma = step(a, sampler, eos);
    const bool mb = step(b, sampler, eos);
    const bool mc = step(c, sampler, eos);
    more = ma || mb || mc;
  }
  EXPECT_EQ(a.tokens, ra.tokens);
  EXPECT_EQ(b.tokens, rb.tokens);
  EXPECT_EQ(c.tokens, ra.tokens);
  EXPECT_TRUE(same_bits(a.session->logits(), ra.session->logits()));
  EXPECT_TRUE(same_bits(b.session->logits(), rb.session->logits()));
  EXPECT_TRUE(same_bits(c.session->logits(), ra.session->logits()));
  // The same decisions as alone.
  for (auto [x, alone] : {std::pair{&a, &sa}, std::pair{&b, &sb}}) {
    EXPECT_EQ(x->spec->summary().cycles, alone->spec->summary().cycles);
    EXPECT_EQ(x->spec->summary().proposed, alone->spec->summary().proposed);
    EXPECT_EQ(x->spec->summary().accepted, alone->spec->summary().accepted);
  }
  // Both actually speculated (the interleaving exercised two drafter timelines).
  EXPECT_GT(a.spec->summary().proposed, 0);
  EXPECT_GT(b.spec->summary().proposed, 0);
  EXPECT_GT(a.spec->summary().accepted, 0);
  EXPECT_GT(b.spec->summary().accepted, 0);
}

// The server's pattern: DSpark sessions whose steps alternate with plain greedy decodes of
// them, the plain decodes batched across sessions (Engine::decode_batch), against the same
// alternation with each plain decode on its own session (decode()). Same tokens as plain greedy,
// same final logits, and the same DSpark decisions: decode_batch feeds each session's drafter
// timeline (hidden capture) exactly as decode() does.
TEST_F(SpeculativeSessions, BatchedPlainDecodesBetweenStepsFeedTheDrafterLikeDecode) {
  Engine& engine = *engine_;
  Sampler& sampler = *sampler_;
  const int32_t eos = eos_;
  const std::vector<int32_t>& pa = pa_;
  const std::vector<int32_t>& pb = pb_;
  Live ra = start(engine, pa, nullptr), rb = start(engine, pb, nullptr);
  finish(ra);
  finish(rb);
  // Rounds: two plain greedy tokens per session (batched or not), then one DSpark step each.
  constexpr size_t kGenZ = kGen;
  auto run = [&](Live& a, Live& b, bool batched) {
    for (int round = 0; a.tokens.size() < kGenZ || b.tokens.size() < kGenZ; ++round) {
      if (round % 3 != 2) {
        std::vector<Session*> ss;
        std::vector<int32_t> toks;
        for (Live* x : {&a, &b}) {
          if (x->tokens.size() >= kGenZ) continue;
          ss.push_back(x->session.get());
          toks.push_back(sampler.sample(x->session->logits(), eos));
          x->tokens.push_back(toks.back());
        }
        if (batched) {
          ASSERT_TRUE(engine.decode_batch(ss, toks).ok());
        } else {
          for (size_t i = 0; i < ss.size(); ++i) ASSERT_TRUE(ss[i]->decode(toks[i]).ok());
        }
      } else {
        step(a, sampler, eos);
        step(b, sampler, eos);
      }
    }
  };
  Live a1 = start(engine, pa, kDefaultDsparkPolicy), b1 = start(engine, pb, "all");
  Live a2 = start(engine, pa, kDefaultDsparkPolicy), b2 = start(engine, pb, "all");
  ASSERT_TRUE(a1.spec && b1.spec && a2.spec && b2.spec);
  run(a1, b1, false);
  run(a2, b2, true);
  EXPECT_EQ(a1.tokens, ra.tokens);
  EXPECT_EQ(b1.tokens, rb.tokens);
  EXPECT_EQ(a2.tokens, ra.tokens);
  EXPECT_EQ(b2.tokens, rb.tokens);
  EXPECT_TRUE(same_bits(a2.session->logits(), ra.session->logits()));
  EXPECT_TRUE(same_bits(b2.session->logits(), rb.session->logits()));
  for (auto [single, batch] : {std::pair{&a1, &a2}, std::pair{&b1, &b2}}) {
    EXPECT_EQ(batch->spec->summary().cycles, single->spec->summary().cycles);
    EXPECT_EQ(batch->spec->summary().proposed, single->spec->summary().proposed);
    EXPECT_EQ(batch->spec->summary().accepted, single->spec->summary().accepted);
    EXPECT_GT(batch->spec->summary().accepted, 0);
  }
}

// A decoder made on a session that already holds a prefix (the server resuming a cached
// conversation): the drafter starts from the hidden rows of the tokens appended after it. The
// output is still plain greedy's, bit for bit, and speculation still engages.
TEST_F(SpeculativeSessions, DecoderMadeAfterAPrefixStaysExact) {
  const std::vector<int32_t> prompt = prompt_of(*engine_, "{\"id\": 1, \"name\": \"alpha\", \"tags\": [\"a\", \"b\"]}\n"
                                                            "{\"id\": 2, \"name\": \"beta\", \"tags\": [\"c\", \"d\"]}\n"
                                                            "{\"id\": 3, \"name\": \"gamma\", \"tags\": [\"e\", \"f\"]}\n");
  Live plain = start(*engine_, prompt, nullptr);
  finish(plain);
  ASSERT_EQ(static_cast<int>(plain.tokens.size()), kGen);
  for (size_t cached : {size_t{1}, prompt.size() * 2 / 3, prompt.size() - 1}) {
    Live r = start(*engine_, prompt, kDefaultDsparkPolicy, cached);
    ASSERT_TRUE(r.spec);
    finish(r);
    EXPECT_EQ(r.tokens, plain.tokens) << "prefix of " << cached << " tokens";
    EXPECT_TRUE(same_bits(r.session->logits(), plain.session->logits())) << "prefix of " << cached;
    EXPECT_GT(r.spec->summary().accepted, 0) << "prefix of " << cached;
  }
}

}  // namespace
}  // namespace ds4
