// tests/model/bound_model_test.cpp — weights bound once per model (session::BoundModel): the CPU
// binding is zero-copy, and sessions sharing one binding, interleaved, get the bits of a
// session with a binding of its own.
#include <gtest/gtest.h>

#include <vector>

#include "session/binding.h"
#include "tests/model/tiny_model.h"

namespace ds4 {
namespace {

using testing_tiny::same_floats;

TEST(BoundModel, CpuBindingIsZeroCopyViewsOfTheMmap) {
  const auto st = testing_tiny::Stack::open(model::ExpertQuant::kQ2, 7, 2);
  ASSERT_NE(st.model, nullptr);
  const auto bound = session::BoundModel::bind(*st.model, *st.backend);
  const model::ModelWeights& w = st.model->weights();
  ASSERT_EQ(bound->layers().size(), w.layers.size());
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const session::LayerMats& m = bound->layers()[il];
    EXPECT_EQ(m.attn_q_a.data, w.layers[il].attn_q_a.data);
    EXPECT_EQ(m.gate_exps.data, w.layers[il].ffn_gate_exps.data);
    EXPECT_EQ(m.attn_norm, w.layers[il].attn_norm.as<float>());
    EXPECT_EQ(m.cmp_kv.data, w.layers[il].attn_compressor_kv.data);  // null in dense layers
  }
  EXPECT_EQ(bound->head().token_embd, w.global.token_embd.data);
  EXPECT_EQ(bound->head().output.data, w.global.output.data);
  EXPECT_EQ(bound->head().output_hc_scale, w.global.output_hc_scale.as<float>()[0]);
}

TEST(BoundModel, SessionsSharingOneBindingMatchAPrivateOne) {
  const auto st = testing_tiny::Stack::open(model::ExpertQuant::kQ2, 7, 2);
  ASSERT_NE(st.model, nullptr);
  const auto bound = session::BoundModel::bind(*st.model, *st.backend);
  const auto a_or = session::ModelSession::create(*bound, 256, uint64_t{1} << 34);
  const auto b_or = session::ModelSession::create(*bound, 256, uint64_t{1} << 34);
  ASSERT_TRUE(a_or.ok() && b_or.ok());
  session::ModelSession& a = **a_or;
  session::ModelSession& b = **b_or;
  auto ref = st.session(256);
  const uint32_t V = st.model->config().n_vocab;
  const auto pa = testing_tiny::prompt_tokens(40, V, 11);
  const auto pb = testing_tiny::prompt_tokens(40, V, 12);
  // Interleaved: a and b alternate calls on the shared binding; ref replays a alone.
  ASSERT_TRUE(a.prefill(std::span<const int32_t>(pa).first(20)).ok());
  ASSERT_TRUE(b.prefill(pb).ok());
  ASSERT_TRUE(a.prefill(std::span<const int32_t>(pa).subspan(20)).ok());
  ASSERT_TRUE(ref->prefill(pa).ok());
  EXPECT_TRUE(same_floats(a.logits(), ref->logits()));
  for (int t = 0; t < 6; ++t) {
    ASSERT_TRUE(b.decode(pb[t]).ok());
    ASSERT_TRUE(a.decode(pa[t]).ok());
    ASSERT_TRUE(ref->decode(pa[t]).ok());
    EXPECT_TRUE(same_floats(a.logits(), ref->logits())) << t;
  }
  EXPECT_EQ(testing_tiny::state_bytes(a), testing_tiny::state_bytes(*ref));
  EXPECT_NE(testing_tiny::state_bytes(a), testing_tiny::state_bytes(b));
}

}  // namespace
}  // namespace ds4
