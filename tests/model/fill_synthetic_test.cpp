// tests/model/fill_synthetic_test.cpp — the benchmark fill (ModelSession::fill_synthetic and
// Session::fill_synthetic, ds4-bench --fill-ctx) on the tiny model: it leaves exactly the token
// count and per-layer row counters of n real decodes (ratio-4 layers with their indexer and
// ratio-128 layers, raw ring wrapped or not), decodes after it run with finite logits and keep
// counting like real decodes, the fill is the rollback point, and bad requests are errors that
// leave the session unchanged; Engine::session_bytes is the sessions' allocation estimate.
#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine.h"
#include "session/session.h"
#include "tests/model/tiny_model.h"

namespace ds4 {
namespace {

using testing_tiny::Stack;

// Per layer {n_comp, n_index} of a session.
std::vector<std::pair<int64_t, int64_t>> counters(const session::ModelSession& s) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const session::LayerState& L : s.state().layers()) out.emplace_back(L.n_comp, L.n_index);
  return out;
}

bool all_finite(std::span<const float> v) {
  if (v.empty()) return false;
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

TEST(FillSynthetic, TinyModelHasBothCompressionRatios) {
  Stack st = Stack::open(model::ExpertQuant::kQ2, 5, 2);
  ASSERT_TRUE(st.model);
  bool r4 = false, r128 = false;
  for (uint32_t il = 0; il < st.model->config().n_layer; ++il) {
    r4 |= st.model->config().compress_ratio(il) == 4;
    r128 |= st.model->config().compress_ratio(il) == 128;
  }
  EXPECT_TRUE(r4 && r128);  // the counter tests below cover both kinds of layer
  EXPECT_LT(st.model->config().n_swa, 37u);  // and a wrapped raw ring
}

// n = 37: ratio-4 rows only, raw ring past the window; 255 / 256: one short of / exactly two
// ratio-128 windows; 300: the indexer selects (n / 4 > top_k).
TEST(FillSynthetic, CountersEqualThoseOfRealDecodes) {
  Stack st = Stack::open(model::ExpertQuant::kQ2, 5, 2);
  ASSERT_TRUE(st.model);
  const uint32_t V = st.model->config().n_vocab;
  ASSERT_GT(300u / 4, st.model->config().indexer_top_k);
  for (int n : {37, 255, 256, 300}) {
    SCOPED_TRACE(n);
    auto real = st.session(320);
    auto fill = st.session(320);
    ASSERT_TRUE(real && fill);
    const auto toks = testing_tiny::prompt_tokens(n, V, 11);
    for (int32_t t : toks) ASSERT_TRUE(real->decode(t).ok());
    ASSERT_TRUE(fill->fill_synthetic(n).ok());
    EXPECT_EQ(fill->n_tokens(), real->n_tokens());
    EXPECT_EQ(counters(*fill), counters(*real));
    EXPECT_FALSE(fill->has_logits());
    EXPECT_TRUE(fill->logits().empty());
    EXPECT_EQ(fill->greedy_token(), -1);
    for (int32_t t : fill->tokens()) ASSERT_EQ(t, 0);
    // The state payload (live raw rows, visible rows, states) has the size of the real one.
    EXPECT_EQ(fill->state_bytes(), real->state_bytes());
  }
}

TEST(FillSynthetic, DecodesAfterTheFillRunAndCountLikeRealOnes) {
  Stack st = Stack::open(model::ExpertQuant::kQ2, 5, 2);
  ASSERT_TRUE(st.model);
  const uint32_t V = st.model->config().n_vocab;
  // From 300 to 390: ratio-4 emits every 4 tokens, ratio-128 once (position 383).
  const int n = 300, k = 90;
  auto real = st.session(400);
  auto fill = st.session(400);
  auto again = st.session(400);
  ASSERT_TRUE(real && fill && again);
  const auto toks = testing_tiny::prompt_tokens(n + k, V, 12);
  ASSERT_TRUE(real->prefill(std::span<const int32_t>(toks).first(n)).ok());  // == n decodes
  ASSERT_TRUE(fill->fill_synthetic(n).ok());
  ASSERT_TRUE(again->fill_synthetic(n).ok());
  for (int i = 0; i < k; ++i) {
    ASSERT_TRUE(real->decode(toks[n + i]).ok());
    ASSERT_TRUE(fill->decode(toks[n + i]).ok());
    ASSERT_TRUE(fill->has_logits());
    ASSERT_TRUE(all_finite(fill->logits())) << "decode " << i << " after the fill";
    ASSERT_EQ(counters(*fill), counters(*real)) << "decode " << i << " after the fill";
  }
  EXPECT_EQ(fill->n_tokens(), n + k);
  // The fill is deterministic: the same fill and tokens give the same bits.
  for (int i = 0; i < k; ++i) ASSERT_TRUE(again->decode(toks[n + i]).ok());
  EXPECT_TRUE(testing_tiny::same_floats(again->logits(), fill->logits()));
  EXPECT_GE(fill->greedy_token(), 0);
}

TEST(FillSynthetic, TheFillIsTheRollbackPoint) {
  Stack st = Stack::open(model::ExpertQuant::kQ2, 5, 2);
  ASSERT_TRUE(st.model);
  auto s = st.session(200);
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->fill_synthetic(130).ok());
  const auto before = counters(*s);
  const std::vector<uint8_t> bytes = testing_tiny::state_bytes(*s);
  for (int32_t t : {5, 6, 7, 8, 9}) ASSERT_TRUE(s->decode(t).ok());
  EXPECT_NE(counters(*s), before);
  s->rollback();
  EXPECT_EQ(s->n_tokens(), 130);
  EXPECT_EQ(counters(*s), before);
  EXPECT_FALSE(s->has_logits());
  EXPECT_EQ(testing_tiny::state_bytes(*s), bytes);
}

TEST(FillSynthetic, BadRequestsAreErrorsAndChangeNothing) {
  Stack st = Stack::open(model::ExpertQuant::kQ2, 5, 2);
  ASSERT_TRUE(st.model);
  auto s = st.session(100);
  ASSERT_TRUE(s);
  Status e = s->fill_synthetic(101);
  EXPECT_EQ(e.code(), ErrorCode::kOutOfRange) << e.to_string();
  EXPECT_NE(e.message().find("101"), std::string::npos) << e.message();
  EXPECT_EQ(s->fill_synthetic(-1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s->fill_synthetic(10, static_cast<int32_t>(st.model->config().n_vocab)).code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(s->n_tokens(), 0);
  ASSERT_TRUE(s->fill_synthetic(100).ok());  // exactly the capacity fits
  EXPECT_EQ(s->n_tokens(), 100);
  EXPECT_EQ(s->decode(1).code(), ErrorCode::kOutOfRange);  // and it is full
  s->reset();
  ASSERT_TRUE(s->decode(3).ok());
  const auto c = counters(*s);
  e = s->fill_synthetic(50);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.to_string();
  EXPECT_NE(e.message().find("empty"), std::string::npos) << e.message();
  EXPECT_EQ(s->n_tokens(), 1);
  EXPECT_EQ(counters(*s), c);
  EXPECT_TRUE(s->has_logits());
}

TEST(FillSynthetic, ThroughTheEngineApi) {
  EngineOptions opt;
  opt.model_path = testing_tiny::tiny_model_path(model::ExpertQuant::kQ2, 5);
  opt.n_threads = 2;
  auto e = Engine::open(opt);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  auto s = (*e)->new_session(600);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->fill_synthetic(601).code(), ErrorCode::kOutOfRange);
  ASSERT_TRUE((*s)->fill_synthetic(512).ok());
  EXPECT_EQ((*s)->n_tokens(), 512);
  EXPECT_TRUE((*s)->logits().empty());
  ASSERT_TRUE((*s)->decode((*e)->bos_token()).ok());
  EXPECT_TRUE(all_finite((*s)->logits()));
  EXPECT_GE((*s)->greedy_next((*e)->eos_token()), 0);
  EXPECT_EQ((*s)->fill_synthetic(8).code(), ErrorCode::kInvalidArgument);  // not empty
  (*s)->reset();
  EXPECT_TRUE((*s)->fill_synthetic(8).ok());
  // What ds4-bench --fill-ctx reports beside the state: the session's allocation estimate.
  Stack st = Stack::open(model::ExpertQuant::kQ2, 5, 1);
  ASSERT_TRUE(st.model);
  EXPECT_EQ((*e)->session_bytes(600), session::ModelSession::estimate_bytes(st.model->config(), 600));
  EXPECT_GT((*e)->session_bytes(600), (*s)->state_bytes());
  EXPECT_GT((*e)->session_bytes(1 << 20), (*e)->session_bytes(600));
  EXPECT_EQ((*e)->session_bytes(0), 0u);
}

}  // namespace
}  // namespace ds4
