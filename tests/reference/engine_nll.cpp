// tests/reference/engine_nll.cpp — `ds4-engine-nll`: next-token NLL of token windows through
// the C++ engine, for the engine-vs-reference perplexity comparison
// (tools/reference/engine_vs_reference_ppl.py).
//
// Usage: ds4-engine-nll MODEL.gguf TOKENS.i32 WINDOW [THREADS [f32]]
//   TOKENS.i32: little-endian int32 token ids, a whole number of windows of WINDOW tokens.
//   f32: run with EngineOptions::f32_activations (reference numerics, no Q8 activations).
// Each window runs in a fresh session, one decode() per token; the NLL of token j+1 is read
// from the logits after token j (log-softmax in double). Prints one JSON line:
//   {"windows": W, "tokens": N, "nll_sum": S, "nll": S/N}
// Exit 2 on bad arguments or files, 1 on engine errors (never aborts on user input).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "core/flags.h"
#include "engine/engine.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf TOKENS.i32 WINDOW [THREADS [f32]]\n", argv[0]);
    return 2;
  }
  const int window = std::atoi(argv[3]);
  const int threads = argc > 4 ? std::atoi(argv[4]) : 0;
  const bool f32_act = argc > 5 && std::string(argv[5]) == "f32";
  if (argc > 5 && !f32_act) {
    std::fprintf(stderr, "ds4-engine-nll: the 5th argument must be 'f32', got '%s'\n", argv[5]);
    return 2;
  }
  std::ifstream f(argv[2], std::ios::binary | std::ios::ate);
  if (!f || window < 2) {
    std::fprintf(stderr, "ds4-engine-nll: cannot read '%s' or bad window %d\n", argv[2], window);
    return 2;
  }
  const auto bytes = static_cast<size_t>(f.tellg());
  if (bytes % (4 * static_cast<size_t>(window)) != 0) {
    std::fprintf(stderr, "ds4-engine-nll: %zu bytes is not a whole number of %d-token windows\n",
                 bytes, window);
    return 2;
  }
  std::vector<int32_t> toks(bytes / 4);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(toks.data()), static_cast<std::streamsize>(bytes));

  ds4::EngineOptions eo;
  eo.model_path = argv[1];
  eo.n_threads = threads;
  eo.f32_activations = f32_act;
  auto engine = ds4::Engine::open(eo);
  if (!engine.ok()) {
    std::fprintf(stderr, "ds4-engine-nll: %s\n", engine.status().to_string().c_str());
    return 1;
  }
  const size_t n_win = toks.size() / static_cast<size_t>(window);
  // DS4_DUMP_LOGITS=FILE: also write every logits row ([windows*(window-1), n_vocab] f32).
  std::FILE* dump = nullptr;
  if (const std::optional<std::string> dp = ds4::process_env()("DS4_DUMP_LOGITS")) {
    dump = std::fopen(dp->c_str(), "wb");
  }
  double nll_sum = 0.0;
  uint64_t n = 0;
  for (size_t w = 0; w < n_win; ++w) {
    auto session = (*engine)->new_session(window + 8);
    if (!session.ok()) {
      std::fprintf(stderr, "ds4-engine-nll: %s\n", session.status().to_string().c_str());
      return 1;
    }
    const int32_t* t = toks.data() + w * static_cast<size_t>(window);
    for (int j = 0; j + 1 < window; ++j) {
      const ds4::Status st = (*session)->decode(t[j]);
      if (!st.ok()) {
        std::fprintf(stderr, "ds4-engine-nll: decode: %s\n", st.to_string().c_str());
        return 1;
      }
      const auto lg = (*session)->logits();
      if (dump != nullptr) std::fwrite(lg.data(), sizeof(float), lg.size(), dump);
      double mx = lg[0];
      for (float v : lg) mx = std::max(mx, static_cast<double>(v));
      double s = 0.0;
      for (float v : lg) s += std::exp(static_cast<double>(v) - mx);
      nll_sum += (mx + std::log(s)) - static_cast<double>(lg[static_cast<size_t>(t[j + 1])]);
      ++n;
    }
  }
  if (dump != nullptr) std::fclose(dump);
  std::printf("{\"windows\": %zu, \"tokens\": %llu, \"nll_sum\": %.6f, \"nll\": %.8f}\n", n_win,
              static_cast<unsigned long long>(n), nll_sum, n ? nll_sum / static_cast<double>(n) : 0.0);
  return 0;
}
