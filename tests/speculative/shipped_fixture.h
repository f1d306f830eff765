// tests/speculative/shipped_fixture.h — the shipped models (models/ds4-tiny.gguf and its drafter)
// on a CPU backend, and the benchmark channels' first prompts, for the spec tests that need
// real text statistics (margins, acceptance) rather than the random fixture model.
// Tests skip when the model files are absent; load failures are test failures.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "speculative/drafter.h"
#include "tests/speculative/spec_fixture.h"
#include "tokenizer/tokenizer.h"

namespace ds4::spec_test {

// First prompt of a data/prompts channel: BOS + up to 160 tokens.
inline std::vector<int32_t> channel_prompt(const tok::Tokenizer& tk, const char* channel) {
  std::ifstream in(std::string(DS4_SOURCE_DIR) + "/data/prompts/" + channel + ".jsonl");
  std::string line;
  std::getline(in, line);
  const auto j = nlohmann::json::parse(line, nullptr, false);
  std::vector<int32_t> t = {tk.bos()};
  if (j.is_discarded() || !j.contains("text")) return t;
  const std::vector<int32_t> body = tk.encode(j["text"].get<std::string>());
  t.insert(t.end(), body.begin(), body.begin() + std::min<size_t>(body.size(), 160));
  return t;
}

// The shipped target and drafter on a CPU backend of n_threads, and the tokenizer. `ok` is
// false (the test skips) when the model files are absent; load failures are test failures.
struct Shipped {
  bool ok = false;
  std::unique_ptr<model::Model> model;
  std::unique_ptr<backend::Backend> backend;
  std::unique_ptr<speculative::Drafter> drafter;
  std::unique_ptr<tok::Tokenizer> tokenizer;

  static Shipped open(int n_threads) {
    Shipped s;
    const std::string target = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf";
    const std::string mtp = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny-dspark.gguf";
    if (!file_exists(target) || !file_exists(mtp)) return s;
    auto m = model::Model::open(target);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return s;
    s.model = std::move(m).value();
    s.backend = backend::make_cpu_backend(n_threads);
    auto d = speculative::load_drafter(*s.model, *s.backend, mtp);
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    auto tk = tok::Tokenizer::from_gguf(s.model->file());
    EXPECT_TRUE(tk.ok()) << tk.status().to_string();
    if (!d.ok() || !tk.ok()) return s;
    s.drafter = std::move(d).value();
    s.tokenizer = std::make_unique<tok::Tokenizer>(std::move(tk).value());
    s.ok = true;
    return s;
  }
  // Plain greedy reference: n_gen tokens after `prompt` in a fresh session.
  std::vector<int32_t> plain(const std::vector<int32_t>& prompt, int n_gen) const {
    auto s = session::ModelSession::create(*model, *backend, static_cast<int64_t>(prompt.size()) + n_gen + 16,
                                           uint64_t{1} << 34);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? plain_greedy(**s, prompt, n_gen) : std::vector<int32_t>{};
  }
};

}  // namespace ds4::spec_test
