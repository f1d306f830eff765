// tests/unit/engine/generate_test.cpp — the shared generation loop on a fake Session (a toy
// deterministic "model"), with the synthetic tokenizer: stop reasons, prompt/context checks,
// streamed text == detokenize(tokens), greedy reproducibility, the non-EOS probe, and the
// TextCodec facade (single-prompt rendering, conversation turns).
#include "engine/generate.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/text.h"

namespace ds4 {
namespace {

constexpr int kVocab = 300;
constexpr int32_t kEos = 1;  // synthetic vocabulary: BOS=0, EOS=1

// Toy model: the next token's logits peak at f(last token); after `eos_after` generated
// tokens following the prompt, EOS gets the highest logit.
class FakeSession final : public Session {
 public:
  FakeSession(int n_ctx, int eos_after) : n_ctx_(n_ctx), eos_after_(eos_after), logits_(kVocab) {}

  int n_ctx() const override { return n_ctx_; }
  int n_tokens() const override { return static_cast<int>(tokens_.size()); }
  std::span<const int32_t> tokens() const override { return tokens_; }

  Status prefill(std::span<const int32_t> tokens, const ProgressFn& progress) override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      DS4_RETURN_IF_ERROR(append(tokens[i]));
      if (progress) progress(static_cast<int>(i + 1), static_cast<int>(tokens.size()));
    }
    prompt_end_ = n_tokens();
    ++prefill_calls_;
    return Status();
  }
  Status decode(int32_t token) override {
    ++decode_calls_;
    return append(token);
  }
  std::span<const float> logits() const override { return logits_; }
  Expected<std::vector<VerifyRow>> verify(std::span<const int32_t>) override {
    return unsupported("fake");
  }
  void checkpoint() override {}
  void rollback() override {}
  Status commit_prefix(int) override { return unsupported("fake"); }
  Status save_snapshot() override { return unsupported("fake"); }
  Status restore_snapshot() override { return unsupported("fake"); }
  uint64_t state_bytes() const override { return tokens_.size() * 4; }
  void reset() override { tokens_.clear(); }

  int prefill_calls_ = 0;
  int decode_calls_ = 0;

 private:
  Status append(int32_t token) {
    if (n_tokens() >= n_ctx_) return out_of_range("fake: context full");
    tokens_.push_back(token);
    const int generated = n_tokens() - prompt_end_;
    std::fill(logits_.begin(), logits_.end(), 0.0f);
    // Printable byte tokens live at ids 7..262 in the synthetic vocab; cycle through
    // a mix that includes multi-byte UTF-8 (bytes >= 0x80 sit higher in the table).
    const int32_t next = 7 + (token * 37 + 11) % 256;
    logits_[next] = 5.0f;
    logits_[(next + 1) % kVocab] = 4.0f;
    logits_[kEos] = (prompt_end_ > 0 && generated >= eos_after_) ? 10.0f : 4.5f;
    return Status();
  }

  int n_ctx_;
  int eos_after_;
  int prompt_end_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<float> logits_;
};

class GenerateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto codec = TextCodec::synthetic(kVocab);
    ASSERT_TRUE(codec.ok()) << codec.status().to_string();
    codec_ = std::move(codec).value();
  }
  GenerateOptions greedy(int max_tokens) {
    GenerateOptions o;
    o.max_tokens = max_tokens;
    o.sampler.temperature = 0.0f;
    return o;
  }
  std::unique_ptr<TextCodec> codec_;
};

TEST_F(GenerateTest, StopsAtMaxTokensAndStreamsExactText) {
  FakeSession s(1000, /*eos_after=*/1000);
  std::vector<int32_t> prompt = {0, 10, 20, 30};
  std::string streamed;
  std::vector<int32_t> ids;
  int progress_calls = 0;
  GenerateOptions o = greedy(20);
  o.prefill_progress = [&](int done, int total) {
    ++progress_calls;
    EXPECT_LE(done, total);
  };
  auto r = generate(s, *codec_, prompt, o, [&](int32_t id, std::string_view text) {
    if (id >= 0) ids.push_back(id);
    streamed += text;
    return true;
  });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->stop, StopReason::kMaxTokens);
  EXPECT_EQ(r->prompt_tokens, 4);
  EXPECT_EQ(r->gen_tokens, 20);
  EXPECT_EQ(r->tokens, ids);
  EXPECT_GT(progress_calls, 0);
  // Every generated token was appended.
  EXPECT_EQ(s.n_tokens(), 24);
  EXPECT_EQ(s.decode_calls_, 20);
  EXPECT_EQ(streamed, codec_->detokenize(ids));
  // Greedy follows the toy model's argmax chain.
  int32_t last = 30;
  for (int32_t id : ids) {
    EXPECT_EQ(id, 7 + (last * 37 + 11) % 256);
    last = id;
  }
}

TEST_F(GenerateTest, StopsAtEosWithoutAppendingIt) {
  FakeSession s(1000, /*eos_after=*/5);
  std::vector<int32_t> prompt = {0, 42};
  auto r = generate(s, *codec_, prompt, greedy(100), nullptr);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->stop, StopReason::kEos);
  EXPECT_EQ(r->gen_tokens, 5);
  EXPECT_EQ(s.n_tokens(), 7);
  for (int32_t id : r->tokens) EXPECT_NE(id, kEos);
}

TEST_F(GenerateTest, NonEosProbeGeneratesExactlyTheBudget) {
  FakeSession s(1000, /*eos_after=*/2);
  std::vector<int32_t> prompt = {0, 42};
  GenerateOptions o = greedy(12);
  o.stop_at_eos = false;
  auto r = generate(s, *codec_, prompt, o, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop, StopReason::kMaxTokens);
  EXPECT_EQ(r->gen_tokens, 12);
  for (int32_t id : r->tokens) EXPECT_NE(id, kEos);
}

TEST_F(GenerateTest, CallbackCancelStopsAfterThatToken) {
  FakeSession s(1000, 1000);
  std::vector<int32_t> prompt = {0, 5};
  int calls = 0;
  auto r = generate(s, *codec_, prompt, greedy(50), [&](int32_t id, std::string_view) {
    return id < 0 || ++calls < 3;
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop, StopReason::kCancelled);
  EXPECT_EQ(r->gen_tokens, 3);
  EXPECT_EQ(s.n_tokens(), 5);
}

TEST_F(GenerateTest, ContextFullStopsCleanly) {
  FakeSession s(10, 1000);
  std::vector<int32_t> prompt = {0, 1, 2, 3, 4, 5};
  auto r = generate(s, *codec_, prompt, greedy(100), nullptr);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->stop, StopReason::kContextFull);
  EXPECT_EQ(r->gen_tokens, 4);
  EXPECT_EQ(s.n_tokens(), 10);
}

TEST_F(GenerateTest, PromptThatDoesNotFitIsAClearError) {
  FakeSession s(8, 1000);
  std::vector<int32_t> prompt(8, 7);
  auto r = generate(s, *codec_, prompt, greedy(4), nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("8 tokens"), std::string::npos) << r.status().message();
  EXPECT_EQ(s.n_tokens(), 0);  // nothing was prefilled
}

TEST_F(GenerateTest, EmptyPromptOnEmptySessionIsAnError) {
  FakeSession s(8, 1000);
  auto r = generate(s, *codec_, {}, greedy(4), nullptr);
  EXPECT_FALSE(r.ok());
}

TEST_F(GenerateTest, ContinuesAnExistingSessionWithEmptyPrompt) {
  FakeSession s(100, 1000);
  std::vector<int32_t> prompt = {0, 9};
  ASSERT_TRUE(generate(s, *codec_, prompt, greedy(3), nullptr).ok());
  auto r = generate(s, *codec_, {}, greedy(3), nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompt_tokens, 0);
  EXPECT_EQ(s.n_tokens(), 8);
  EXPECT_EQ(s.prefill_calls_, 1);
}

TEST_F(GenerateTest, SampledGenerationIsReproducibleForASeed) {
  auto run = [&](uint64_t seed) {
    FakeSession s(1000, 1000);
    std::vector<int32_t> prompt = {0, 77};
    GenerateOptions o;
    o.max_tokens = 40;
    o.stop_at_eos = false;
    o.sampler.temperature = 1.5f;
    o.sampler.min_p = 0.0f;
    o.sampler.seed = seed;
    auto r = generate(s, *codec_, prompt, o, nullptr);
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->tokens : std::vector<int32_t>{};
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));
}

TEST_F(GenerateTest, ZeroMaxTokensOnlyPrefills) {
  FakeSession s(100, 1000);
  std::vector<int32_t> prompt = {0, 9, 10};
  auto r = generate(s, *codec_, prompt, greedy(0), nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->gen_tokens, 0);
  EXPECT_EQ(s.n_tokens(), 3);
}

TEST_F(GenerateTest, CancelDuringPrefillStopsBetweenSlicesWithProgressOverTheWholePrompt) {
  const int n_prompt = 2 * kPrefillSlice + 10;
  FakeSession s(n_prompt + 100, 1000);
  std::vector<int32_t> prompt(n_prompt, 9);
  GenerateOptions o = greedy(8);
  int polls = 0;
  int last_done = 0, last_total = 0;
  o.cancel_prefill = [&] { return ++polls == 3; };  // cancel before the third slice
  o.prefill_progress = [&](int done, int total) {
    EXPECT_GT(done, last_done);  // progress counts over the whole prompt, never restarts
    last_done = done;
    last_total = total;
  };
  auto r = generate(s, *codec_, prompt, o, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->prefill_cancelled);
  EXPECT_EQ(r->stop, StopReason::kCancelled);
  EXPECT_EQ(r->prompt_tokens, 2 * kPrefillSlice);
  EXPECT_EQ(s.n_tokens(), 2 * kPrefillSlice);
  EXPECT_EQ(r->gen_tokens, 0);
  EXPECT_EQ(last_done, 2 * kPrefillSlice);
  EXPECT_EQ(last_total, n_prompt);

  // Without a cancel the whole prompt goes in and generation follows.
  FakeSession s2(n_prompt + 100, 1000);
  o.cancel_prefill = [] { return false; };
  last_done = 0;
  auto r2 = generate(s2, *codec_, prompt, o, nullptr);
  ASSERT_TRUE(r2.ok());
  EXPECT_FALSE(r2->prefill_cancelled);
  EXPECT_EQ(r2->prompt_tokens, n_prompt);
  EXPECT_EQ(r2->gen_tokens, 8);
}

TEST(TextCodec, PromptAndConversationUseTheSpecialTokens) {
  auto codec = TextCodec::synthetic(kVocab);
  ASSERT_TRUE(codec.ok());
  const TextCodec& c = **codec;
  EXPECT_EQ(c.bos(), 0);
  EXPECT_EQ(c.eos(), 1);
  std::vector<int32_t> p = c.encode_prompt("sys", "hello", ThinkMode::kNoThink);
  ASSERT_GE(p.size(), 4u);
  EXPECT_EQ(p.front(), c.bos());
  // <｜User｜>=2, <｜Assistant｜>=3, </think>=5 in the synthetic vocabulary.
  EXPECT_EQ(p[p.size() - 2], 3);
  EXPECT_EQ(p.back(), 5);
  EXPECT_EQ(c.detokenize(c.tokenize("plain text é")), "plain text é");

  Conversation conv = c.new_conversation("sys", ThinkMode::kThink);
  std::vector<int32_t> all = conv.start();
  std::vector<int32_t> turn = conv.user_turn("hi", ThinkMode::kThink);
  EXPECT_EQ(turn.front(), 2);
  EXPECT_EQ(turn.back(), 4);  // <think>
  all.insert(all.end(), turn.begin(), turn.end());
  std::vector<int32_t> reply = c.tokenize("ok");
  all.insert(all.end(), reply.begin(), reply.end());
  std::vector<int32_t> tail = conv.assistant_generated(reply);
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0], c.eos());
  all.insert(all.end(), tail.begin(), tail.end());
  EXPECT_EQ(all, conv.tokens());
  // The whole-conversation render matches the single-prompt render for one user turn.
  std::vector<ChatMessage> msgs = {{"system", "sys"}, {"user", "hello"}};
  EXPECT_EQ(c.tokenize_rendered(c.render_chat(msgs, ThinkMode::kNoThink)), p);
  std::vector<ChatMessage> bad = {{"robot", "x"}};
  EXPECT_FALSE(c.try_render_chat(bad, ThinkMode::kThink).ok());
}

}  // namespace
}  // namespace ds4
