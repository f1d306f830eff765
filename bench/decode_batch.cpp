// bench/decode_batch.cpp — `ds4-bench-batch`: Engine::decode_batch(k sessions) vs the same k
// sessions decoded one after another, in tokens/s, for k = 1..--max-k.
//
// For each k it makes k sessions (k different prompts of --prompt-tokens tokens, prefilled
// untimed), then times --steps rounds of one token per session both ways: k single decode()
// calls per round, and one decode_batch() call per round (the sessions reset and prefilled
// again in between so both start from the same state). Every round's token per session is the
// argmax of that session's logits, so both ways decode the same tokens; the program checks that
// the two final logits of each session agree bit for bit (exit 1 otherwise). Each way runs
// --repeat times and counts its fastest run (interference on a shared host only adds time).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/flags.h"
#include "core/timer.h"
#include "engine/backend_flags.h"
#include "engine/engine.h"

#ifndef DS4_MODELS_DIR
#define DS4_MODELS_DIR "models"
#endif

namespace ds4 {
namespace {

struct Options {
  std::string model = std::string(DS4_MODELS_DIR) + "/ds4-tiny.gguf";
  BackendFlags backend;  // --backend, --device, --cpu/--cuda, -t, --isa, --f32-activations
  int max_k = 8;
  int steps = 32;
  int prompt_tokens = 64;
  int repeat = 3;
};

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Resets and prefills the sessions with their prompts.
bool refill(std::vector<std::unique_ptr<Session>>& ss, const std::vector<std::vector<int32_t>>& prompts) {
  for (size_t i = 0; i < ss.size(); ++i) {
    ss[i]->reset();
    if (!ss[i]->prefill(prompts[i]).ok()) return false;
  }
  return true;
}

int main_impl(int argc, char** argv) {
  Options o;
  FlagTable t("ds4-bench-batch", "ds4-bench-batch — decode_batch(k) vs k single decodes, tokens/s");
  t.option("-m,--model", &o.model, "Target GGUF", "DS4_MODEL", "FILE")
      .option("--max-k", &o.max_k, "Largest batch (1..8)")
      .option("--steps", &o.steps, "Timed tokens per session")
      .option("--prompt-tokens", &o.prompt_tokens, "Prefilled tokens per session (untimed)")
      .option("--repeat", &o.repeat, "Timed runs per way; the fastest counts");
  register_backend_flags(t, &o.backend);
  const ParseResult pr = t.parse(argc, argv);
  if (pr.should_exit()) {
    std::fputs(pr.message.c_str(), pr.exit_code == 0 ? stdout : stderr);
    return pr.exit_code;
  }
  if (o.max_k < 1 || o.max_k > 8 || o.steps < 1 || o.prompt_tokens < 1 || o.repeat < 1) {
    std::fprintf(stderr, "ds4-bench-batch: --max-k must be 1..8; --steps, --prompt-tokens, --repeat >= 1\n");
    return 2;
  }
  EngineOptions eo;
  if (Status s = apply_backend_flags(o.backend, t, &eo); !s.ok()) {
    return flag_error(t, s);
  }
  eo.model_path = o.model;
  auto engine = Engine::open(eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "ds4-bench-batch: error: %s\n", engine.status().message().c_str());
    return 1;
  }
  Engine& e = **engine;
  std::fprintf(stderr, "%s\n", backend_line("ds4-bench-batch", e.info()).c_str());
  const int n_ctx = o.prompt_tokens + o.steps + 8;
  const uint32_t vocab = static_cast<uint32_t>(std::max(2, e.info().n_vocab) - 1);  // ids 1..vocab
  std::printf("%-3s %14s %14s %8s\n", "k", "single tok/s", "batch tok/s", "ratio");
  bool same = true;
  for (int k = 1; k <= o.max_k; ++k) {
    std::vector<std::unique_ptr<Session>> ss;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < k; ++i) {
      auto s = e.new_session(n_ctx);
      if (!s.ok()) {
        std::fprintf(stderr, "ds4-bench-batch: %s\n", s.status().to_string().c_str());
        return 1;
      }
      ss.push_back(std::move(*s));
      std::vector<int32_t> p(static_cast<size_t>(o.prompt_tokens));
      for (int j = 0; j < o.prompt_tokens; ++j) {
        p[j] = static_cast<int32_t>((7919u * (j + 1) + 104729u * i) % vocab) + 1;  // distinct prompts
      }
      prompts.push_back(std::move(p));
    }
    std::vector<Session*> ptrs;
    for (auto& s : ss) ptrs.push_back(s.get());
    std::vector<int32_t> toks(static_cast<size_t>(k));
    std::vector<std::vector<float>> single_logits(static_cast<size_t>(k));
    double best_single = 1e30, best_batch = 1e30;
    for (int r = 0; r < o.repeat; ++r) {
      if (!refill(ss, prompts)) return 1;
      Timer ts;
      for (int step = 0; step < o.steps; ++step) {
        for (int i = 0; i < k; ++i) {
          if (!ss[i]->decode(argmax(ss[i]->logits())).ok()) return 1;
        }
      }
      best_single = std::min(best_single, ts.seconds());
      for (int i = 0; i < k; ++i) single_logits[i].assign(ss[i]->logits().begin(), ss[i]->logits().end());
      if (!refill(ss, prompts)) return 1;
      Timer tb;
      for (int step = 0; step < o.steps; ++step) {
        for (int i = 0; i < k; ++i) toks[i] = argmax(ss[i]->logits());
        const Status st = e.decode_batch(ptrs, toks);
        if (!st.ok()) {
          std::fprintf(stderr, "ds4-bench-batch: %s\n", st.to_string().c_str());
          return 1;
        }
      }
      best_batch = std::min(best_batch, tb.seconds());
      for (int i = 0; i < k; ++i) {
        const auto lg = ss[i]->logits();
        if (lg.size() != single_logits[i].size() ||
            std::memcmp(lg.data(), single_logits[i].data(), lg.size() * sizeof(float)) != 0) {
          same = false;
        }
      }
    }
    const double n = static_cast<double>(k) * o.steps;
    std::printf("%-3d %14.1f %14.1f %7.2fx\n", k, n / best_single, n / best_batch, best_single / best_batch);
  }
  if (!same) {
    std::fprintf(stderr, "ds4-bench-batch: batched logits differ from single decodes\n");
    return 1;
  }
  std::printf("batched logits == single-decode logits (bit for bit) for every session\n");
  return 0;
}

}  // namespace
}  // namespace ds4

int main(int argc, char** argv) { return ds4::main_impl(argc, argv); }
