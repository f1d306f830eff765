// tests/model/tiny_model.h — shared helpers of the tiny-model tests: generated model files
// (tools::generate_model, cached per process in the gtest temp dir), a direct session stack
// (model + a backend — the CPU's unless one is named — + session::ModelSession) and
// deterministic token prompts.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"
#include "model/model.h"
#include "model/profiles.h"
#include "session/session.h"
#include "tools/ds4-gguf/ds4_gguf.h"

namespace ds4::testing_tiny {

// Path of a generated tiny model (q2 or q4, seed); generated on first use.
inline std::string tiny_model_path(model::ExpertQuant quant, uint64_t seed) {
  const std::string path = ::testing::TempDir() + "ds4_fwd_tiny_" + model::expert_quant_name(quant) +
                           "_seed" + std::to_string(seed) + "_" + std::to_string(::getpid()) + ".gguf";
  static std::vector<std::string> made;
  for (const auto& m : made) {
    if (m == path) return path;
  }
  tools::GenerateOptions opt;
  opt.quant = quant;
  opt.seed = seed;
  // Random valid blocks instead of quantizing random floats: ~10x faster to generate, and
  // every code path runs the same (the model is never meant to produce sensible text).
  opt.fill = tools::FillMode::kRandomBlocks;
  const Status st = tools::generate_model(model::tiny_profile(), opt, path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  made.push_back(path);
  return path;
}

// Model + backend + helpers to make sessions.
struct Stack {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<backend::Backend> backend;

  static Stack open(model::ExpertQuant quant, uint64_t seed, int n_threads) {
    Stack s;
    auto m = model::Model::open(tiny_model_path(quant, seed));
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (m.ok()) s.model = std::move(m).value();
    s.backend = backend::make_cpu_backend(n_threads);
    return s;
  }
  // The same model on the backend called `name` (backend/registry.h); `why` gets the reason
  // and the stack has no backend when it cannot be made (e.g. no GPU: the caller skips).
  // `base`: the backend's options (n_threads becomes 2), e.g. a kernel choice to test.
  static Stack open_on(std::string_view name, model::ExpertQuant quant, uint64_t seed, std::string* why,
                       const backend::BackendOptions& base = {}) {
    backend::BackendOptions bo = base;
    bo.n_threads = 2;
    auto be = backend::make_backend(name, bo);
    if (!be.ok()) {
      if (why != nullptr) *why = be.status().message();
      return Stack();
    }
    Stack s = open(quant, seed, 1);
    s.backend = std::move(be).value();
    return s;
  }
  std::unique_ptr<session::ModelSession> session(int64_t n_ctx,
                                                 int chunk_rows = session::kDefaultChunkRows) const {
    auto s = session::ModelSession::create(*model, *backend, n_ctx, uint64_t{1} << 34, chunk_rows);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  }
};

// Deterministic pseudo-random token ids in [0, n_vocab).
inline std::vector<int32_t> prompt_tokens(int n, uint32_t n_vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t[i] = static_cast<int32_t>(x % n_vocab);
  }
  return t;
}

inline std::vector<uint8_t> state_bytes(const session::ModelSession& s) {
  std::vector<uint8_t> b;
  s.serialize_state(b);
  return b;
}

inline bool same_floats(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace ds4::testing_tiny
