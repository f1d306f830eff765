// tests/speculative/spec_fixture.h — shared helpers of the DSpark tests: a generated tiny target
// (tools::generate_model) and random drafters (speculative::generate_drafter), cached per process in
// the gtest temp dir; a target stack (model + CPU backend); plain greedy reference runs.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "model/model.h"
#include "model/profiles.h"
#include "sample/sampler.h"
#include "session/session.h"
#include "speculative/drafter.h"
#include "speculative/drafter_gen.h"
#include "tests/model/tiny_model.h"
#include "tools/ds4-gguf/ds4_gguf.h"

namespace ds4::spec_test {

inline std::string temp_path(const std::string& stem) {
  return ::testing::TempDir() + "ds4_spec_" + stem + "_" + std::to_string(::getpid()) + ".gguf";
}

// Generated files shared by all test processes (ctest runs each test in its own process):
// a fixed name per content version; the writer renames atomically, so concurrent generation
// is harmless.
inline std::string shared_path(const std::string& stem) {
  return ::testing::TempDir() + "ds4_spec_shared_v1_" + stem + ".gguf";
}
inline bool file_exists(const std::string& p) { return ::access(p.c_str(), R_OK) == 0; }

inline std::string tiny_target_path(uint64_t seed) {
  const std::string path = shared_path("target_seed" + std::to_string(seed));
  if (file_exists(path)) return path;
  tools::GenerateOptions opt;
  opt.quant = model::ExpertQuant::kQ2;
  opt.seed = seed;
  opt.fill = tools::FillMode::kRandomBlocks;
  const Status st = tools::generate_model(model::tiny_profile(), opt, path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return path;
}

inline std::string tiny_drafter_path(uint64_t seed) {
  const std::string path = shared_path("drafter_seed" + std::to_string(seed));
  if (file_exists(path)) return path;
  speculative::DrafterGenOptions opt;
  opt.seed = seed;
  opt.gate_up_type = gguf::GgmlType::kQ2_K;  // fast to quantize; IQ2_XXS is covered elsewhere
  const Status st = speculative::generate_drafter(model::tiny_profile(), opt, path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return path;
}

struct Stack {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<backend::Backend> backend;

  static Stack open(uint64_t seed, int n_threads = 1) {
    Stack s;
    auto m = model::Model::open(tiny_target_path(seed));
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (m.ok()) s.model = std::move(m).value();
    s.backend = backend::make_cpu_backend(n_threads);
    return s;
  }
  std::unique_ptr<session::ModelSession> session(int64_t n_ctx) const {
    auto s = session::ModelSession::create(*model, *backend, n_ctx, uint64_t{1} << 34);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  std::unique_ptr<speculative::Drafter> drafter(uint64_t seed) const {
    auto d = speculative::load_drafter(*model, *backend, tiny_drafter_path(seed));
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    return d.ok() ? std::move(d).value() : nullptr;
  }
};

// Prompt ids and state bytes: the same helpers as the invariance tests (tests/model).
using testing_tiny::prompt_tokens;
using testing_tiny::state_bytes;

inline int32_t choose(std::span<const float> logits, int32_t banned) {
  return banned >= 0 ? argmax_excluding(logits, banned) : argmax(logits);
}

// Plain greedy: prefill, then decode argmax until n tokens, stop (not appended) or full.
inline std::vector<int32_t> plain_greedy(session::ModelSession& s, const std::vector<int32_t>& prompt, int n,
                                         int32_t stop = -1, int32_t banned = -1) {
  std::vector<int32_t> out;
  EXPECT_TRUE(s.prefill(prompt).ok());
  while (static_cast<int>(out.size()) < n && s.n_tokens() < s.n_ctx()) {
    const int32_t t = choose(s.logits(), banned);
    if (t == stop) break;
    EXPECT_TRUE(s.decode(t).ok());
    out.push_back(t);
  }
  return out;
}

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

// A test suite sharing one Stack (seed 7): the model and drafter loads happen once per suite.
class SharedStackTest : public ::testing::Test {
 public:
  static Stack* stack() { return stack_; }

 protected:
  static void SetUpTestSuite() { stack_ = new Stack(Stack::open(7)); }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  static inline Stack* stack_ = nullptr;
};

}  // namespace ds4::spec_test
