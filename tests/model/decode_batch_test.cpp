// tests/model/decode_batch_test.cpp — Engine::decode_batch (batched decoding across sessions)
// over a generated tiny model: k sessions at different positions, with different prompts and
// different n_ctx, decoded in one forward end bit-identical (logits, tokens, serialized state,
// captured hidden) to the same sessions decoded alone; bad batches are refused with nothing
// appended anywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "session/session.h"
#include "tests/model/tiny_model.h"

namespace ds4 {
namespace {

std::unique_ptr<Engine> open_engine(model::ExpertQuant quant) {
  EngineOptions opt;
  opt.model_path = testing_tiny::tiny_model_path(quant, 7);
  opt.n_threads = 2;
  auto e = Engine::open(opt);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

std::vector<uint8_t> serialized(Session& s) {
  std::vector<uint8_t> out;
  model_session(s)->serialize_state(out);
  return out;
}

std::vector<int32_t> token_vec(const Session& s) { return {s.tokens().begin(), s.tokens().end()}; }

// Pairs of sessions (batched, alone) with the same prompt; every step decodes a subset of the
// batched ones in one decode_batch call (varying k and order) and the matching alone ones one by
// one, then compares everything.
void check_batch_equals_alone(model::ExpertQuant quant) {
  auto e = open_engine(quant);
  ASSERT_TRUE(e);
  const model::ModelConfig& cfg = model_session(**e->new_session(8))->config();
  const int top_k = static_cast<int>(cfg.indexer_top_k);
  const int swa = static_cast<int>(cfg.n_swa);
  // Positions around the interesting boundaries: empty, short, past the raw window, just
  // before and past the indexer threshold (more indexer rows than top_k), compressor phases.
  const std::vector<int> lens = {0, 5, swa + 3, 4 * top_k - 3, 4 * top_k + 9, 131, 2, 4 * top_k + 40};
  const std::vector<int> ctxs = {64, 100, 2 * swa + 40, 4 * top_k + 64, 4 * top_k + 40, 300, 4 * top_k + 80,
                                 4 * top_k + 100};
  const int k = static_cast<int>(lens.size());
  std::vector<std::unique_ptr<Session>> batched, alone;
  for (int i = 0; i < k; ++i) {
    auto a = e->new_session(ctxs[i]);
    auto b = e->new_session(ctxs[i]);
    ASSERT_TRUE(a.ok() && b.ok());
    const auto prompt = testing_tiny::prompt_tokens(lens[i], cfg.n_vocab, 100 + i);
    ASSERT_TRUE((*a)->prefill(prompt).ok());
    ASSERT_TRUE((*b)->prefill(prompt).ok());
    batched.push_back(std::move(*a));
    alone.push_back(std::move(*b));
  }
  // Hidden capture (DSpark's hook) on session 3: each batched row's captured hidden must equal
  // the alone one's.
  std::vector<std::vector<float>> cap_batched, cap_alone;
  std::vector<int64_t> cap_pos_batched, cap_pos_alone;
  for (int w = 0; w < 2; ++w) {
    session::ModelSession* ms = model_session(w == 0 ? *batched[3] : *alone[3]);
    auto* rows = w == 0 ? &cap_batched : &cap_alone;
    auto* pos = w == 0 ? &cap_pos_batched : &cap_pos_alone;
    ms->set_capture_layers({1, 5});
    ms->set_capture_sink([rows, pos](int64_t p, std::span<const float> h) {
      rows->emplace_back(h.begin(), h.end());
      pos->push_back(p);
    });
  }
  const int steps = 12;
  for (int step = 0; step < steps; ++step) {
    // Subsets of varying size and order: all 8, then 1..8 rotating, reversed on odd steps.
    std::vector<int> pick(static_cast<size_t>(k));
    std::iota(pick.begin(), pick.end(), 0);
    std::rotate(pick.begin(), pick.begin() + step % k, pick.end());
    pick.resize(static_cast<size_t>(step == 0 ? k : 1 + step % k));
    if (step % 2 == 1) std::reverse(pick.begin(), pick.end());
    std::vector<Session*> ss;
    std::vector<int32_t> toks;
    for (int i : pick) {
      ss.push_back(batched[i].get());
      // Greedy-ish next token from the alone session's logits (any valid id would do).
      const auto lg = alone[i]->logits();
      toks.push_back(lg.empty() ? 1 + i
                                : static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin()));
    }
    ASSERT_TRUE(e->decode_batch(ss, toks).ok()) << "step " << step;
    for (size_t j = 0; j < pick.size(); ++j) ASSERT_TRUE(alone[pick[j]]->decode(toks[j]).ok());
    for (int i = 0; i < k; ++i) {
      ASSERT_EQ(batched[i]->n_tokens(), alone[i]->n_tokens()) << "session " << i << " step " << step;
      ASSERT_TRUE(testing_tiny::same_floats(batched[i]->logits(), alone[i]->logits()))
          << "session " << i << " (position " << alone[i]->n_tokens() << ") step " << step;
    }
  }
  for (int i = 0; i < k; ++i) {
    EXPECT_EQ(token_vec(*batched[i]), token_vec(*alone[i])) << "session " << i;
    EXPECT_EQ(batched[i]->state_bytes(), alone[i]->state_bytes()) << "session " << i;
    EXPECT_EQ(serialized(*batched[i]), serialized(*alone[i])) << "session " << i;
  }
  ASSERT_FALSE(cap_alone.empty());
  EXPECT_EQ(cap_pos_batched, cap_pos_alone);
  ASSERT_EQ(cap_batched.size(), cap_alone.size());
  for (size_t r = 0; r < cap_alone.size(); ++r) {
    EXPECT_TRUE(testing_tiny::same_floats(cap_batched[r], cap_alone[r])) << "captured row " << r;
  }
  for (int w = 0; w < 2; ++w) model_session(w == 0 ? *batched[3] : *alone[3])->set_capture_sink({});
}

TEST(DecodeBatch, RowsEqualEachSessionDecodedAloneQ2) { check_batch_equals_alone(model::ExpertQuant::kQ2); }
TEST(DecodeBatch, RowsEqualEachSessionDecodedAloneQ4) { check_batch_equals_alone(model::ExpertQuant::kQ4); }

TEST(DecodeBatch, BadBatchesAppendNothing) {
  auto e = open_engine(model::ExpertQuant::kQ2);
  auto other = open_engine(model::ExpertQuant::kQ2);
  ASSERT_TRUE(e && other);
  auto a = e->new_session(16);
  auto b = e->new_session(4);
  auto f = other->new_session(16);
  ASSERT_TRUE(a.ok() && b.ok() && f.ok());
  const auto p = testing_tiny::prompt_tokens(4, 8192, 3);
  ASSERT_TRUE((*a)->prefill(std::span<const int32_t>(p).first(2)).ok());
  ASSERT_TRUE((*b)->prefill(p).ok());  // full: n_ctx 4
  const std::vector<uint8_t> a_before = serialized(**a);
  const std::vector<float> a_logits((*a)->logits().begin(), (*a)->logits().end());
  auto expect_refused = [&](std::vector<Session*> ss, std::vector<int32_t> toks, ErrorCode code) {
    const Status st = e->decode_batch(ss, toks);
    EXPECT_EQ(st.code(), code) << st.to_string();
    EXPECT_EQ((*a)->n_tokens(), 2);
    EXPECT_EQ((*b)->n_tokens(), 4);
    EXPECT_EQ(serialized(**a), a_before);
    EXPECT_TRUE(testing_tiny::same_floats((*a)->logits(), a_logits));
  };
  expect_refused({}, {}, ErrorCode::kInvalidArgument);
  expect_refused({a->get()}, {1, 2}, ErrorCode::kInvalidArgument);                       // count mismatch
  expect_refused({a->get(), a->get()}, {1, 2}, ErrorCode::kInvalidArgument);             // repeated
  expect_refused({a->get(), b->get()}, {1, 2}, ErrorCode::kOutOfRange);                  // b is full
  expect_refused({a->get()}, {8192}, ErrorCode::kInvalidArgument);                       // token id
  expect_refused({a->get(), f->get()}, {1, 2}, ErrorCode::kInvalidArgument);             // other engine
  std::vector<std::unique_ptr<Session>> many;
  std::vector<Session*> nine;
  for (int i = 0; i < 9; ++i) {
    auto s = e->new_session(8);
    ASSERT_TRUE(s.ok());
    many.push_back(std::move(s).value());
    nine.push_back(many.back().get());
  }
  expect_refused(nine, std::vector<int32_t>(9, 1), ErrorCode::kInvalidArgument);
  nine.pop_back();
  EXPECT_TRUE(e->decode_batch(nine, std::vector<int32_t>(8, 1)).ok());
  for (Session* s : nine) EXPECT_EQ(s->n_tokens(), 1);
}

}  // namespace
}  // namespace ds4
