// tests/spec/speculative_decoder_test.cpp — SpeculativeDecoder through the shared generation
// loop (engine/generate.h): same tokens, text, stop reason and session state as PlainDecoder,
// greedy with EOS stop and with the bench's banned-EOS mode; plain sampling at T > 0.
#include <gtest/gtest.h>

#include "engine/generate.h"
#include "engine/speculative.h"
#include "engine/text.h"
#include "spec/drafter.h"
#include "tests/spec/spec_fixture.h"

namespace ds4::spec_test {
namespace {

// The engine Session interface over a ModelSession (what engine.cpp's facade does).
class TestSession final : public Session {
 public:
  explicit TestSession(std::unique_ptr<session::ModelSession> s) : s_(std::move(s)) {}
  session::ModelSession& ms() { return *s_; }
  int n_ctx() const override { return static_cast<int>(s_->n_ctx()); }
  int n_tokens() const override { return static_cast<int>(s_->n_tokens()); }
  std::span<const int32_t> tokens() const override { return s_->tokens(); }
  Status prefill(std::span<const int32_t> t, const ProgressFn& p) override { return s_->prefill(t, p); }
  Status decode(int32_t t) override { return s_->decode(t); }
  std::span<const float> logits() const override { return s_->logits(); }
  Expected<std::vector<VerifyRow>> verify(std::span<const int32_t> rows) override {
    auto r = s_->verify(rows);
    if (!r.ok()) return r.status();
    std::vector<VerifyRow> out;
    for (const auto& row : *r) out.push_back(VerifyRow{row.argmax, row.logits});
    return out;
  }
  void checkpoint() override { s_->checkpoint(); }
  void rollback() override { s_->rollback(); }
  Status commit_prefix(int k) override { return s_->commit_prefix(k); }
  Status save_snapshot() override { return s_->save_snapshot(); }
  Status restore_snapshot() override { return s_->restore_snapshot(); }
  uint64_t state_bytes() const override { return s_->state_bytes(); }
  void reset() override { s_->reset(); }

 private:
  std::unique_ptr<session::ModelSession> s_;
};

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
      drafter->ring_reset();
      SpecOptions so;
      so.confidence = 0.0f;
      so.fold = true;
      auto dec = SpeculativeDecoder::create(*drafter, spec_s.ms(), so);
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
