// tests/cuda/cuda_graphs_test.cpp — CUDA graphs (--cuda-graphs, issue #30) change nothing but
// how the ops are launched: on the tiny model a session on a backend that captures its decode
// forwards (a graph per forward, and a graph per few ops so that forwards span many segments
// and host round trips) gives exactly the tokens, frontier logits and state of a session on a
// backend that launches every op, at every position (through the indexer threshold and the
// compressor emissions, where a forward's topology changes), through prefill pieces of one
// row, and through verify / rollback / commit_prefix; through the Engine the flag reaches the
// backend, and the profiler turns it off. Without a usable GPU every test skips.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_kernels.h"
#include "backend/registry.h"
#include "engine/engine.h"
#include "tests/model/invariance_checks.h"

namespace ds4 {
namespace {

using testing_tiny::prompt_tokens;
using testing_tiny::same_floats;
using testing_tiny::Stack;
using testing_tiny::state_bytes;

// The tiny model on a CUDA backend with --cuda-graphs `graphs` (and --cuda-pdl-all `pdl_all`, on
// by default as in the backend: process-wide, so the last backend made sets it for all); no
// backend (and `why` set) without a usable GPU.
Stack open_cuda(model::ExpertQuant quant, uint64_t seed, int graphs, std::string* why, bool pdl_all = true) {
  backend::BackendOptions bo;
  bo.n_threads = 2;
  bo.cuda_graphs = graphs;
  bo.cuda_pdl_all = pdl_all;
  auto be = backend::make_backend("cuda", bo);
  if (!be.ok()) {
    *why = be.status().message();
    return Stack();
  }
  Stack s = Stack::open(quant, seed, 1);
  s.backend = std::move(be).value();
  return s;
}

// "" when the bits are equal, else the first differing element.
std::string first_difference(std::span<const float> got, std::span<const float> want) {
  if (got.size() != want.size() || got.empty()) {
    return "sizes " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      return "element " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs " + std::to_string(want[i]);
    }
  }
  return "";
}

// Greedy decoding of `steps` tokens after a prompt (prefilled: rows of 32, not captured) on a
// backend with graphs and one without: the same token at every step, the same logits bits
// after every forward, the same final state. pdl_all: every kernel launched with PDL on both
// (the default; the graphs capture programmatic edges) or only the wide Q8_0 kernel.
void greedy_equal(int graphs, int steps, bool pdl_all = true) {
  std::string why;
  Stack on = open_cuda(model::ExpertQuant::kQ2, 7, graphs, &why, pdl_all);
  if (on.backend == nullptr) GTEST_SKIP() << "no CUDA backend: " << why;
  Stack off = open_cuda(model::ExpertQuant::kQ2, 7, 0, &why, pdl_all);
  ASSERT_NE(off.backend, nullptr) << why;
  const auto prompt = prompt_tokens(40, on.model->config().n_vocab, 3);
  auto a = on.session(640);
  auto b = off.session(640);
  ASSERT_TRUE(a->prefill(prompt).ok());
  ASSERT_TRUE(b->prefill(prompt).ok());
  for (int i = 0; i < steps; ++i) {
    const int32_t ta = a->greedy_token();  // the device argmax: a read-back after the bracket
    const int32_t tb = b->greedy_token();
    ASSERT_EQ(ta, tb) << "step " << i;
    ASSERT_TRUE(a->decode(ta).ok());
    ASSERT_TRUE(b->decode(tb).ok());
    ASSERT_EQ(first_difference(a->logits(), b->logits()), "") << "step " << i << ", position " << 40 + i;
  }
  EXPECT_EQ(state_bytes(*a), state_bytes(*b));
  // The forwards were captured (all but the warm-up), and the backend without graphs says none.
  const std::string d = on.backend->description();
  EXPECT_NE(d.find("CUDA graphs"), std::string::npos) << d;
  EXPECT_NE(d.find("(" + std::to_string(steps - 1) + " captured)"), std::string::npos) << d;
  EXPECT_EQ(off.backend->description().find("CUDA graphs"), std::string::npos);
}

TEST(CudaGraphs, GreedyDecodeEqualsUngraphedOneGraphPerForward) { greedy_equal(1, 420); }

// A graph per 7 ops: ~a hundred segments per forward, boundaries inside every layer.
TEST(CudaGraphs, GreedyDecodeEqualsUngraphedSegments) { greedy_equal(7, 300); }

// Only the wide Q8_0 kernel launched with PDL (--no-cuda-pdl-all), one graph per forward.
TEST(CudaGraphs, GreedyDecodeEqualsUngraphedWithoutPdlAll) {
  greedy_equal(1, 200, false);
  cuda::set_pdl_all(true);  // process-wide: back to the backend's default
}

// Prefill in pieces, some of one row (a one-row prefill is a captured forward), equals plain
// decoding without graphs: logits and state.
TEST(CudaGraphs, PrefillPiecesEqualUngraphedDecode) {
  std::string why;
  Stack on = open_cuda(model::ExpertQuant::kQ2, 7, 1, &why);
  if (on.backend == nullptr) GTEST_SKIP() << "no CUDA backend: " << why;
  Stack off = open_cuda(model::ExpertQuant::kQ2, 7, 0, &why);
  ASSERT_NE(off.backend, nullptr) << why;
  const auto toks = prompt_tokens(300, on.model->config().n_vocab, 11);
  const testing_tiny::Reference ref = testing_tiny::decode_reference(off, toks, {300}, 640);
  auto s = on.session(640);
  size_t at = 0;
  for (size_t piece : {1u, 1u, 5u, 1u, 13u, 1u, 1u, 3u, 128u, 1u, 146u}) {
    const size_t n = std::min(piece, toks.size() - at);
    ASSERT_TRUE(s->prefill(std::span<const int32_t>(toks).subspan(at, n)).ok());
    at += n;
    ASSERT_EQ(first_difference(s->logits(), ref.logits[at - 1]), "") << "after " << at << " tokens";
  }
  ASSERT_EQ(at, toks.size());
  EXPECT_EQ(state_bytes(*s), ref.states[300]);
}

// verify / rollback / commit_prefix with graphs on (tests/model/invariance_checks.h): the
// reference is decoded through captured forwards, one-row verifies are captured, longer ones
// are not, and every result must match.
TEST(CudaGraphs, VerifyRollbackCommitWithGraphs) {
  std::string why;
  Stack on = open_cuda(model::ExpertQuant::kQ2, 7, 1, &why);
  if (on.backend == nullptr) GTEST_SKIP() << "no CUDA backend: " << why;
  testing_tiny::check_verify(on, {66, 124, 254}, 640);
}

// Through the Engine: the shipped model's greedy continuation with --cuda-graphs 1 equals the
// one without (tokens and final logits bits), and --cuda-profile turns graphs off.
TEST(CudaGraphs, EngineFlagReachesTheBackend) {
  auto open = [](int graphs, bool profile, std::string* why) -> std::unique_ptr<Engine> {
    EngineOptions eo;
    eo.model_path = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf";
    eo.backend = BackendKind::kCuda;
    eo.n_threads = 2;
    eo.cuda_graphs = graphs;
    eo.cuda_profile = profile;
    auto e = Engine::open(eo);
    if (!e.ok()) {
      *why = e.status().message();
      return nullptr;
    }
    return std::move(e).value();
  };
  std::string why;
  auto on = open(1, false, &why);
  if (on == nullptr) GTEST_SKIP() << "no CUDA backend: " << why;
  auto off = open(0, false, &why);
  ASSERT_NE(off, nullptr) << why;
  EXPECT_NE(on->info().backend.find("CUDA graphs"), std::string::npos) << on->info().backend;
  EXPECT_EQ(off->info().backend.find("CUDA graphs"), std::string::npos) << off->info().backend;
  const std::vector<ChatMessage> chat = {{"user", "Write a short story about a lighthouse keeper."}};
  const auto prompt = off->tokenize_rendered(off->render_chat(chat, ThinkMode::kNoThink));
  auto run = [&](Engine& e, std::vector<int32_t>* out, std::vector<float>* last) {
    auto s = e.new_session(1024);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->prefill(prompt).ok());
    for (int i = 0; i < 150; ++i) {
      const int32_t t = (*s)->greedy_next();
      out->push_back(t);
      ASSERT_TRUE((*s)->decode(t).ok());
    }
    last->assign((*s)->logits().begin(), (*s)->logits().end());
  };
  std::vector<int32_t> t_on, t_off;
  std::vector<float> l_on, l_off;
  run(*on, &t_on, &l_on);
  run(*off, &t_off, &l_off);
  EXPECT_EQ(t_on, t_off);
  EXPECT_EQ(first_difference(l_on, l_off), "");
  auto profiled = open(1, true, &why);
  ASSERT_NE(profiled, nullptr) << why;
  EXPECT_EQ(profiled->info().backend.find("CUDA graphs"), std::string::npos) << profiled->info().backend;
}

}  // namespace
}  // namespace ds4
