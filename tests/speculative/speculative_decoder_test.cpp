// tests/speculative/speculative_decoder_test.cpp — SpeculativeDecoder through the shared generation
// loop (engine/generate.h): same tokens, text, stop reason and session state as PlainDecoder,
// greedy with EOS stop and with the bench's banned-EOS mode; plain sampling at T > 0.
#include <gtest/gtest.h>

#include "engine/generate.h"
#include "engine/speculative.h"
#include "engine/text.h"
#include "speculative/drafter.h"
#include "tests/speculative/spec_fixture.h"

namespace ds4::spec_test {
namespace {

TEST(SpeculativeDecoder, GenerateMatchesPlainDecoder) {
  Stack st = Stack::open(7);
  auto text = TextCodec::from_gguf(st.model->file());
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  auto drafter = st.drafter(3);
  ASSERT_TRUE(drafter);
  const std::vector<int32_t> prompt = prompt_tokens(20, st.model->config().n_vocab, 77);
  for (bool stop_at_eos : {true, false}) {
    for (float temp : {0.0f, 0.8f}) {
      SCOPED_TRACE(std::string("stop_at_eos=") + (stop_at_eos ? "1" : "0") + " T=" + std::to_string(temp));
      GenerateOptions opt;
      opt.max_tokens = 96;
      opt.stop_at_eos = stop_at_eos;
      opt.sampler.temperature = temp;
      opt.sampler.seed = 5;

      TestSession plain_s(st.session(256));
      std::string plain_text;
      auto a = generate(plain_s, **text, prompt, opt, [&](int32_t, std::string_view t) {
        plain_text += t;
        return true;
      });
      ASSERT_TRUE(a.ok()) << a.status().to_string();

      TestSession spec_s(st.session(256));
      SpecOptions so;
      so.confidence = 0.0f;
      so.fold = true;
      auto dec = SpeculativeDecoder::create(drafter->model(), spec_s.ms(), so);
      opt.decoder = dec.get();
      std::string spec_text;
      auto b = generate(spec_s, **text, prompt, opt, [&](int32_t, std::string_view t) {
        spec_text += t;
        return true;
      });
      ASSERT_TRUE(b.ok()) << b.status().to_string();
      EXPECT_EQ(b->tokens, a->tokens);
      EXPECT_EQ(b->stop, a->stop);
      EXPECT_EQ(spec_text, plain_text);
      EXPECT_EQ(state_bytes(spec_s.ms()), state_bytes(plain_s.ms()));
      if (temp <= 0.0f) {
        EXPECT_GT(dec->summary().cycles, 0);
        EXPECT_GT(dec->summary().proposed, 0);
      } else {
        EXPECT_EQ(dec->summary().cycles, 0);  // sampling never speculates
      }
    }
  }
}

}  // namespace
}  // namespace ds4::spec_test

namespace ds4::spec_test {
namespace {

// The preset table shared by ds4 --dspark-policy and ds4-bench-spec --policies: each name sets
// exactly the knobs its documentation names, from the seed's baseline, whatever came before.
TEST(DsparkPolicy, PresetsSetTheirKnobs) {
  const std::vector<float> grid = {0.5f, 0.7f};
  struct Want {
    const char* name;
    bool fold, grid, backoff, margin, cost, scheduler, partial, lookup;
  };
  const Want wants[] = {
      {"baseline", false, false, false, false, false, true, false, false},
      {"fold", true, false, false, false, false, true, false, false},
      {"grid", false, true, false, false, false, true, false, false},
      {"backoff", false, false, true, false, false, true, false, false},
      {"margin", false, false, false, true, false, true, false, false},
      {"all", true, true, true, true, false, true, false, false},
      {"cost", false, false, false, false, true, true, false, false},
      {"costfold", true, false, false, false, true, true, false, false},
      {"costall", true, true, true, true, true, true, true, false},
      {"costallseed", true, true, true, true, true, true, false, false},
      {"costlookup", true, true, true, true, true, true, true, true},
      {"noscheduler", false, false, false, false, false, false, false, false},
  };
  std::string names;
  for (const Want& w : wants) {
    // Start from the opposite of every knob: the preset must set each one.
    SpecOptions so;
    so.fold = !w.fold;
    so.confidence_grid = w.grid ? std::vector<float>{} : std::vector<float>{0.9f};
    so.backoff = !w.backoff;
    so.margin_gate = w.margin ? 0.0f : 7.0f;
    so.cost_gate = !w.cost;
    so.scheduler = !w.scheduler;
    so.fold_after_partial = !w.partial;
    so.lookup = !w.lookup;
    so.confidence = 0.42f;  // not a policy knob: untouched
    ASSERT_TRUE(apply_dspark_policy(w.name, grid, 3.5f, &so).ok()) << w.name;
    EXPECT_EQ(so.fold, w.fold) << w.name;
    EXPECT_EQ(so.confidence_grid, w.grid ? grid : std::vector<float>{}) << w.name;
    EXPECT_EQ(so.backoff, w.backoff) << w.name;
    EXPECT_EQ(so.margin_gate, w.margin ? 3.5f : 0.0f) << w.name;
    EXPECT_EQ(so.cost_gate, w.cost) << w.name;
    EXPECT_EQ(so.scheduler, w.scheduler) << w.name;
    EXPECT_EQ(so.fold_after_partial, w.partial) << w.name;
    EXPECT_EQ(so.lookup, w.lookup) << w.name;
    EXPECT_EQ(so.confidence, 0.42f) << w.name;
    names += (names.empty() ? "" : ",") + std::string(w.name);
  }
  EXPECT_EQ(names, kDsparkPolicies);  // the documented list is exactly the table
  SpecOptions so;
  const Status bad = apply_dspark_policy("costal", grid, 2.0f, &so);
  EXPECT_EQ(bad.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("'costal'"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find(kDsparkPolicies), std::string::npos) << bad.message();
  EXPECT_TRUE(apply_dspark_policy(kDefaultDsparkPolicy, grid, 2.0f, &so).ok());
  // The default preset is costlookup.
  EXPECT_TRUE(so.cost_gate && so.fold && so.fold_after_partial && so.lookup);
}

}  // namespace
}  // namespace ds4::spec_test
