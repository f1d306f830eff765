// tests/cuda/fill_synthetic_cuda_test.cpp — the benchmark fill (Session::fill_synthetic, what
// ds4-bench --fill-ctx times) on the CUDA backend against the CPU, bit for bit: the fill is a
// deterministic state (zero rows, counters of n decodes), so decodes after it must give the
// CPU's logits and state. At 200K tokens the indexer scores 50K equal rows (all ties: the
// radix select must keep the lowest indices, like the CPU's nth_element) and the ratio-128
// layers attend to ~1.5K rows. Without a usable GPU every test skips with the reason.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "engine/engine.h"
#include "tests/model/tiny_model.h"

namespace ds4 {
namespace {

using testing_tiny::prompt_tokens;
using testing_tiny::same_floats;
using testing_tiny::Stack;
using testing_tiny::state_bytes;

void fill_and_decode_both(int64_t n, int k) {
  std::string why;
  Stack gpu = Stack::open_on("cuda", model::ExpertQuant::kQ2, 7, &why);
  if (gpu.backend == nullptr) GTEST_SKIP() << "no CUDA backend: " << why;
  Stack cpu = Stack::open(model::ExpertQuant::kQ2, 7, 2);
  const auto toks = prompt_tokens(k, cpu.model->config().n_vocab, 21);
  auto c = cpu.session(n + k + 1);
  auto g = gpu.session(n + k + 1);
  ASSERT_TRUE(c && g);
  ASSERT_TRUE(c->fill_synthetic(n).ok());
  ASSERT_TRUE(g->fill_synthetic(n).ok());
  EXPECT_EQ(state_bytes(*g), state_bytes(*c));
  for (int i = 0; i < k; ++i) {
    ASSERT_TRUE(c->decode(toks[i]).ok());
    ASSERT_TRUE(g->decode(toks[i]).ok());
    const std::span<const float> lc = c->logits(), lg = g->logits();
    ASSERT_TRUE(same_floats(lg, lc)) << "decode " << i << " after a fill to " << n;
    for (float v : lg) ASSERT_TRUE(std::isfinite(v)) << "decode " << i;
  }
  EXPECT_EQ(g->greedy_token(), c->greedy_token());
  EXPECT_EQ(state_bytes(*g), state_bytes(*c));
}

TEST(CudaFillSynthetic, DecodesAfterAFillEqualCpu) { fill_and_decode_both(3000, 40); }

TEST(CudaFillSynthetic, LongFillAllIndexerTiesEqualCpu) { fill_and_decode_both(200000, 6); }

}  // namespace
}  // namespace ds4
