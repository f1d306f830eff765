// tests/cuda/forward_cuda_test.cpp — the whole DS4 forward pass on the CUDA backend against the
// CPU oracle, bit for bit, and batch invariance on the device (the CUDA backend issue, items
// 4-6):
//  * the canonical-hash setup (tiny q2, seed 1234, 400-token prefill): CUDA's frontier logits
//    SHA-256 equals the CPU's, also under the A/B kernel choices (--cuda-moe new, --cuda-dense-rows
//    wide) through a whole prefill and decode;
//  * decode at every position of a 450-token prompt (q2) and a 300-token one (q4): logits and
//    the final session state equal the CPU's; the q4 model's 256-row prefill under each
//    routed-expert kernel of 2+ rows (per pair, grouped by expert with dp4a / tensor-core dots);
//  * on the device: prefill == N decodes (whole and in uneven pieces), verify rows == decode,
//    rollback == re-decode, commit_prefix(k) == k decodes (tests/model/invariance_checks.h);
//  * through the Engine: the shipped model's greedy continuation and final logits equal the
//    CPU's, and decode_batch rows equal each session decoded alone.
// Without a usable GPU every test skips with the reason the backend gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/moe_rows.h"
#include "backend/cuda/ops.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "model/model.h"
#include "session/session.h"
#include "tests/model/invariance_checks.h"
#include "tests/model/sha256.h"

namespace ds4 {
namespace {

using testing_tiny::prompt_tokens;
using testing_tiny::same_floats;
using testing_tiny::Stack;
using testing_tiny::state_bytes;

using testing_tiny::sha256_hex;

// "" when equal, else where and how the first element differs.
std::string first_difference(std::span<const float> got, std::span<const float> want) {
  if (got.size() != want.size()) return "sizes " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "element %zu: cuda %.9g, cpu %.9g", i, got[i], want[i]);
      return buf;
    }
  }
  return "";
}

class CudaForward : public ::testing::Test {
 protected:
  // The tiny model (quant, seed) on the CPU and on CUDA; marks the test skipped when CUDA is
  // unavailable (the caller returns when IsSkipped()).
  void open_pair(model::ExpertQuant quant, uint64_t seed) {
    std::string why;
    gpu_ = Stack::open_on("cuda", quant, seed, &why);
    if (gpu_.backend == nullptr) GTEST_SKIP() << "no CUDA backend: " << why;
    cpu_ = Stack::open(quant, seed, 2);
  }
  Stack cpu_, gpu_;
};

TEST_F(CudaForward, CanonicalHashEqualsCpu) {
  open_pair(model::ExpertQuant::kQ2, 1234);
  if (IsSkipped()) return;
  const auto toks = prompt_tokens(400, cpu_.model->config().n_vocab, 99);
  auto c = cpu_.session(512);
  auto g = gpu_.session(512);
  ASSERT_TRUE(c->prefill(toks).ok());
  ASSERT_TRUE(g->prefill(toks).ok());
  const std::string hc = sha256_hex(c->logits()), hg = sha256_hex(g->logits());
  std::printf("[cuda] canonical frontier hash: cpu %s, cuda %s\n", hc.c_str(), hg.c_str());
  EXPECT_EQ(hg, hc) << first_difference(g->logits(), c->logits());
  EXPECT_EQ(state_bytes(*g), state_bytes(*c));
}

// The logits after prefill(tokens[0, n_prompt)) and after each decode of the tokens after it, on
// `s` (a prefill-chunk boundary or a kernel choice must not change any of them).
std::vector<std::vector<float>> logits_trace(session::ModelSession& s, const std::vector<int32_t>& toks, int n_prompt) {
  std::vector<std::vector<float>> out;
  const std::span<const int32_t> all(toks);
  if (!s.prefill(all.first(n_prompt)).ok()) return out;
  out.emplace_back(s.logits().begin(), s.logits().end());
  for (size_t i = n_prompt; i < toks.size(); ++i) {
    if (!s.decode(toks[i]).ok()) return out;
    out.emplace_back(s.logits().begin(), s.logits().end());
  }
  return out;
}

// "" when both traces have every step and equal bits, else the first step that differs.
std::string trace_difference(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want) {
  if (got.size() != want.size()) return std::to_string(got.size()) + " of " + std::to_string(want.size()) + " steps ran";
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string d = first_difference(got[i], want[i]);
    if (!d.empty()) return (i == 0 ? std::string("prefill: ") : "decode " + std::to_string(i - 1) + ": ") + d;
  }
  return "";
}

// The A/B kernels that are not defaults (the routed-expert rewrites and the grouped kernel's
// tensor-core dots, the many-row F16/F32 kernel, programmatic dependent launch, the fused sink
// attention of prefill groups, HC pre's dot over its products, the folded input norm of the
// one-row wide kernel, the HC post folded into the next HC pre) inside a whole forward, in
// prefill chunks of 32 and 256 rows: prefill (many rows) then decodes (one row) equal the CPU's
// logits at every step.
// The choices are process-wide; the defaults come back at the end.
TEST_F(CudaForward, PrefillAndDecodeEqualCpuUnderEveryKernelChoice) {
  open_pair(model::ExpertQuant::kQ2, 1234);
  if (IsSkipped()) return;
  const int n_prompt = 300;
  const auto toks = prompt_tokens(n_prompt + 4, cpu_.model->config().n_vocab, 5);
  const auto want = logits_trace(*cpu_.session(512), toks, n_prompt);
  ASSERT_EQ(want.size(), 5u);
  const cuda::MoeR1Kernel saved_r1 = cuda::moe_r1_kernel();
  const cuda::MoeRowsKernel saved_rows = cuda::moe_rows_kernel();
  const cuda::DenseRowsKernel saved_dense = cuda::dense_rows_kernel();
  const cuda::SinkKernel saved_sink = cuda::sink_kernel();
  for (const bool new_moe : {false, true}) {
    for (const bool wide : {false, true}) {
      for (const int chunk : {session::kDefaultChunkRows, session::kMaxChunkRows}) {
        const bool pdl = new_moe == wide;                                   // both ways, each with either chunk
        const bool fused = (chunk == session::kMaxChunkRows) == new_moe;  // likewise: groups of 32 and 256 rows
        const bool fuse_norms = wide;
        const bool pdl_all = chunk == session::kMaxChunkRows;  // every kernel with PDL: half the runs
        const bool persistent = (chunk == session::kMaxChunkRows) == wide;  // the wide kernel's grid: likewise
        const bool products = new_moe;   // HC pre's decode dot over its products: half the runs
        const bool fold = new_moe != wide;  // q_a's norm in q_b's kernel: likewise
        const bool fold_post = pdl_all != wide;  // the HC post in the next HC pre: likewise
        cuda::set_hc_products(products);
        cuda::set_fold_input_norm(fold);
        cuda::set_fold_hc_post(fold_post);
        cuda::set_pdl(pdl);
        cuda::set_pdl_all(pdl_all);
        cuda::set_wide_persistent(persistent);
        cuda::set_fused_norms(fuse_norms);
        cuda::set_sink_kernel(fused ? cuda::SinkKernel::kFused : cuda::SinkKernel::kSplit);
        cuda::set_moe_r1_kernel(new_moe ? cuda::MoeR1Kernel::kNew : cuda::MoeR1Kernel::kOld);
        // The grouped kernel's dots on the tensor cores with the wide dense kernel, by dp4a without
        // (the q2 model's 66-byte IQ2_XXS rows are not 4-byte aligned: moe_rows.cu declines them
        // and the per-pair kernels run; the q4 test below reaches the grouped kernels).
        const cuda::MoeRowsKernel rows_kernel = !new_moe ? cuda::MoeRowsKernel::kPairs
                                                : wide   ? cuda::MoeRowsKernel::kTensor
                                                         : cuda::MoeRowsKernel::kGrouped;
        cuda::set_moe_rows_kernel(rows_kernel);
        cuda::set_dense_rows_kernel(wide ? cuda::DenseRowsKernel::kWide : cuda::DenseRowsKernel::kTiles8);
        const std::string what =
            std::string("moe ") + (!new_moe ? "old" : wide ? "tc" : "new") + ", dense rows " + (wide ? "wide" : "tiles") +
            ", prefill chunk " + std::to_string(chunk) + (pdl ? ", pdl" : "") + (pdl_all ? ", pdl all" : "") +
            (persistent ? ", persistent wide grid" : "") + (fused ? ", fused sink attention" : "") +
            (fuse_norms ? ", norms in attention_inputs" : "") + (products ? ", hc products" : "") +
            (fold ? ", folded input norm" : "") + (fold_post ? ", folded hc post" : "");
        EXPECT_EQ(trace_difference(logits_trace(*gpu_.session(512, chunk), toks, n_prompt), want), "") << what;
      }
    }
  }
  cuda::set_moe_r1_kernel(saved_r1);
  cuda::set_moe_rows_kernel(saved_rows);
  cuda::set_dense_rows_kernel(saved_dense);
  cuda::set_sink_kernel(saved_sink);
  cuda::set_pdl(false);
  cuda::set_pdl_all(false);
  cuda::set_wide_persistent(false);
  cuda::set_fused_norms(false);
  cuda::set_hc_products(false);
  cuda::set_fold_input_norm(false);
  cuda::set_fold_hc_post(false);
}

// The tiny q2 model on a CUDA backend made with `bo`: a prefill in chunks of 32 and 256 rows,
// 20 decodes after it (logits and final state equal the CPU's), then verify rows with their
// prefix-slot saves, rollback and commit_prefix equal to plain decode's bits on the device.
void options_equal_cpu(const Stack& cpu, const backend::BackendOptions& bo, uint64_t prompt_seed) {
  std::string why;
  Stack gpu = Stack::open_on("cuda", model::ExpertQuant::kQ2, 1234, &why, bo);
  ASSERT_NE(gpu.backend, nullptr) << why;
  const auto toks = prompt_tokens(420, cpu.model->config().n_vocab, prompt_seed);
  auto c = cpu.session(512);
  const auto want = logits_trace(*c, toks, 400);
  ASSERT_EQ(want.size(), 21u);
  for (const int chunk : {session::kDefaultChunkRows, session::kMaxChunkRows}) {
    auto g = gpu.session(512, chunk);
    ASSERT_EQ(trace_difference(logits_trace(*g, toks, 400), want), "") << "chunk " << chunk;
    EXPECT_EQ(state_bytes(*g), state_bytes(*c)) << "chunk " << chunk;
  }
  testing_tiny::check_verify(gpu, {66, 124, 254}, 512);
}

// --cuda-batch-steps: each prefill group's compressor chains as compressor_rows (the windows
// pooled in parallel), a verify group's steps batched and flushed before each prefix-slot save.
TEST_F(CudaForward, BatchedCompressorStepsEqualCpu) {
  open_pair(model::ExpertQuant::kQ2, 1234);
  if (IsSkipped()) return;
  backend::BackendOptions bo;
  bo.cuda_batch_steps = true;
  options_equal_cpu(cpu_, bo, 3);
}

// --cuda-lanes (the default since stop 50, set here explicitly): the shared expert beside the
// router and the compressor / indexer projections beside q_b on a second stream (backend.h fork
// / join); the lanes' independence itself is proved on the CPU (tests/model/lane_order_test.cpp).
TEST_F(CudaForward, LanesEqualCpu) {
  open_pair(model::ExpertQuant::kQ2, 1234);
  if (IsSkipped()) return;
  backend::BackendOptions bo;
  bo.cuda_lanes = true;
  options_equal_cpu(cpu_, bo, 9);
}

void decode_both(const Stack& cpu, const Stack& gpu, int n, int n_ctx, uint64_t prompt_seed) {
  const auto toks = prompt_tokens(n, cpu.model->config().n_vocab, prompt_seed);
  auto c = cpu.session(n_ctx);
  auto g = gpu.session(n_ctx);
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(c->decode(toks[i]).ok());
    ASSERT_TRUE(g->decode(toks[i]).ok());
    const std::string d = first_difference(g->logits(), c->logits());
    ASSERT_EQ(d, "") << "position " << i;
  }
  EXPECT_EQ(state_bytes(*g), state_bytes(*c));
}

TEST_F(CudaForward, DecodeEqualsCpuAtEveryPositionQ2) {
  open_pair(model::ExpertQuant::kQ2, 7);
  if (IsSkipped()) return;
  decode_both(cpu_, gpu_, 450, 640, 11);
}

TEST_F(CudaForward, DecodeEqualsCpuAtEveryPositionQ4) {
  open_pair(model::ExpertQuant::kQ4, 7);
  if (IsSkipped()) return;
  decode_both(cpu_, gpu_, 300, 640, 5);
}

// The routed experts of 2+ rows under each MoeRowsKernel inside a whole forward of the q4 tiny
// model (Q4_K rows of 144 bytes, which moe_rows.cu takes; 16 experts, so a 256-row chunk's groups
// hold ~64 pairs: 8 pair chunks per group), prefill in 256-row chunks then decodes: the CPU's
// logits at every step.
TEST_F(CudaForward, PrefillAndDecodeEqualCpuQ4UnderEachMoeRowsKernel) {
  open_pair(model::ExpertQuant::kQ4, 7);
  if (IsSkipped()) return;
  const model::ModelConfig& cfg = cpu_.model->config();
  ASSERT_TRUE(cuda::moe_rows_tc_fills(cfg.n_embd, cfg.n_ff_exp)) << "the tensor-core CTAs must tile the tiny widths";
  const int n_prompt = 300;
  const auto toks = prompt_tokens(n_prompt + 3, cfg.n_vocab, 17);
  const auto want = logits_trace(*cpu_.session(512), toks, n_prompt);
  ASSERT_EQ(want.size(), 4u);
  const cuda::MoeRowsKernel saved = cuda::moe_rows_kernel();
  for (const cuda::MoeRowsKernel k :
       {cuda::MoeRowsKernel::kPairs, cuda::MoeRowsKernel::kGrouped, cuda::MoeRowsKernel::kTensor}) {
    cuda::set_moe_rows_kernel(k);
    const char* what = k == cuda::MoeRowsKernel::kPairs ? "pairs" : k == cuda::MoeRowsKernel::kGrouped ? "grouped" : "tc";
    EXPECT_EQ(trace_difference(logits_trace(*gpu_.session(512, session::kMaxChunkRows), toks, n_prompt), want), "")
        << "moe rows kernel " << what;
  }
  cuda::set_moe_rows_kernel(saved);
}

TEST_F(CudaForward, PrefillEqualsDecodeOnDevice) {
  open_pair(model::ExpertQuant::kQ2, 7);
  if (IsSkipped()) return;
  const auto toks = prompt_tokens(450, gpu_.model->config().n_vocab, 11);
  const testing_tiny::Reference ref = testing_tiny::decode_reference(gpu_, toks, {450}, 640);
  auto a = gpu_.session(640);
  ASSERT_TRUE(a->prefill(toks).ok());
  EXPECT_TRUE(same_floats(a->logits(), ref.logits.back()));
  EXPECT_EQ(state_bytes(*a), ref.states[450]);
  auto b = gpu_.session(640);
  size_t at = 0;
  for (size_t piece : {1u, 5u, 13u, 3u, 128u, 300u}) {
    const size_t n = std::min(piece, toks.size() - at);
    ASSERT_TRUE(b->prefill(std::span<const int32_t>(toks).subspan(at, n)).ok());
    at += n;
  }
  EXPECT_TRUE(same_floats(b->logits(), ref.logits.back()));
  EXPECT_EQ(state_bytes(*b), ref.states[450]);
}

TEST_F(CudaForward, VerifyRollbackCommitOnDevice) {
  open_pair(model::ExpertQuant::kQ2, 7);
  if (IsSkipped()) return;
  testing_tiny::check_verify(gpu_, {66, 124, 254}, 640);
}

// The shipped trained model through the Engine API on both backends.
class CudaEngine : public ::testing::Test {
 protected:
  static std::unique_ptr<Engine> open(BackendKind kind, std::string* why) {
    EngineOptions eo;
    eo.model_path = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf";
    eo.backend = kind;
    eo.n_threads = 2;
    auto e = Engine::open(eo);
    if (!e.ok()) {
      *why = e.status().message();
      return nullptr;
    }
    return std::move(e).value();
  }
  // Both engines for the CPU == CUDA comparisons; skips without a CUDA backend (callers return
  // on IsSkipped() or HasFatalFailure()).
  void open_both() {
    std::string why;
    gpu_ = open(BackendKind::kCuda, &why);
    if (gpu_ == nullptr) GTEST_SKIP() << "no CUDA backend: " << why;
    cpu_ = open(BackendKind::kCpu, &why);
    ASSERT_NE(cpu_, nullptr) << why;
  }
  std::unique_ptr<Engine> gpu_, cpu_;
};

TEST_F(CudaEngine, ShippedModelGreedyEqualsCpu) {
  open_both();
  if (IsSkipped() || HasFatalFailure()) return;
  auto& gpu = gpu_;
  auto& cpu = cpu_;
  std::printf("[cuda] %s\n", gpu->info().backend.c_str());
  const std::vector<ChatMessage> chat = {{"user", "Write a short story about a lighthouse keeper."}};
  const auto prompt = cpu->tokenize_rendered(cpu->render_chat(chat, ThinkMode::kNoThink));
  auto run = [&](Engine& e, std::vector<int32_t>* out, std::vector<float>* last) {
    auto s = e.new_session(1024);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->prefill(prompt).ok());
    for (int i = 0; i < 200; ++i) {
      const auto l = (*s)->logits();
      const int32_t t = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      out->push_back(t);
      ASSERT_TRUE((*s)->decode(t).ok());
    }
    last->assign((*s)->logits().begin(), (*s)->logits().end());
  };
  std::vector<int32_t> tc, tg;
  std::vector<float> lc, lg;
  run(*cpu, &tc, &lc);
  run(*gpu, &tg, &lg);
  EXPECT_EQ(tg, tc);
  EXPECT_EQ(first_difference(lg, lc), "");
  std::printf("[cuda] shipped model, 200 greedy tokens: final logits hash cpu %s cuda %s\n", sha256_hex(lc).c_str(),
              sha256_hex(lg).c_str());
}

// Unnamed, the prefill chunk on CUDA is the backend's 256 rows (the session's scratch and raw ring
// sized for them); the CPU engine keeps the session's default.
TEST_F(CudaEngine, PrefillChunkIsTheBackendsChoice) {
  open_both();
  if (IsSkipped() || HasFatalFailure()) return;
  auto& gpu = gpu_;
  auto& cpu = cpu_;
  auto m = model::Model::open(std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(gpu->session_bytes(1024), session::ModelSession::estimate_bytes((*m)->config(), 1024, 256));
  EXPECT_EQ(cpu->session_bytes(1024),
            session::ModelSession::estimate_bytes((*m)->config(), 1024, session::kDefaultChunkRows));
}

// Temperature sampling through the device read-out (top_k, 2 KiB per token) gives the CPU
// engine's tokens seed for seed (the CPU runs the same op on the host), for several settings.
TEST_F(CudaEngine, SampledTokensEqualCpu) {
  open_both();
  if (IsSkipped() || HasFatalFailure()) return;
  auto& gpu = gpu_;
  auto& cpu = cpu_;
  const std::vector<ChatMessage> chat = {{"user", "Tell me about the sea."}};
  const auto prompt = cpu->tokenize_rendered(cpu->render_chat(chat, ThinkMode::kNoThink));
  const SamplerParams settings[] = {{1.0f, 0, 1.0f, 0.05f, 11}, {0.8f, 40, 0.95f, 0.0f, 12}, {1.5f, 0, 0.9f, 0.0f, 13}};
  for (const SamplerParams& sp : settings) {
    std::vector<int32_t> out[2];
    for (int side = 0; side < 2; ++side) {
      Engine& e = side == 0 ? *cpu : *gpu;
      auto s = e.new_session(512);
      ASSERT_TRUE(s.ok());
      ASSERT_TRUE((*s)->prefill(prompt).ok());
      Sampler sampler(sp, e.info().n_vocab);
      for (int i = 0; i < 64; ++i) {
        const int32_t t = sample_next(**s, sampler, e.eos_token());
        out[side].push_back(t);
        ASSERT_TRUE((*s)->decode(t).ok());
      }
    }
    EXPECT_EQ(out[1], out[0]) << "T=" << sp.temperature << " top_k=" << sp.top_k << " top_p=" << sp.top_p;
  }
}

TEST_F(CudaEngine, DecodeBatchEqualsAloneOnDevice) {
  std::string why;
  auto e = open(BackendKind::kCuda, &why);
  if (e == nullptr) GTEST_SKIP() << "no CUDA backend: " << why;
  constexpr int kN = 5;
  std::vector<std::unique_ptr<Session>> batch, alone;
  const int n_vocab = e->info().n_vocab;
  for (int i = 0; i < kN; ++i) {
    for (auto* v : {&batch, &alone}) {
      auto s = e->new_session(512);
      ASSERT_TRUE(s.ok());
      // Different prompt lengths: every row attends to a context of its own size.
      ASSERT_TRUE((*s)->prefill(prompt_tokens(20 + 37 * i, n_vocab, 100 + i)).ok());
      v->push_back(std::move(s).value());
    }
  }
  const auto next = prompt_tokens(16 * kN, n_vocab, 5);
  for (int step = 0; step < 16; ++step) {
    Session* ptrs[kN];
    int32_t toks[kN];
    for (int i = 0; i < kN; ++i) {
      ptrs[i] = batch[i].get();
      toks[i] = next[step * kN + i];
      ASSERT_TRUE(alone[i]->decode(toks[i]).ok());
    }
    ASSERT_TRUE(e->decode_batch(ptrs, toks).ok());
    for (int i = 0; i < kN; ++i) {
      ASSERT_EQ(first_difference(batch[i]->logits(), alone[i]->logits()), "") << "step " << step << " row " << i;
    }
  }
}

}  // namespace
}  // namespace ds4
