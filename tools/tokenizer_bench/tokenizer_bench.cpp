// tools/tokenizer_bench/tokenizer_bench.cpp — single-thread encode/decode throughput.
//
//   ds4-tokenizer-bench [--gguf TOK.gguf | --vocab N] [--reps R] FILE
// Vocabulary: a GGUF file's tokenizer metadata (e.g. tests/tokenizer/tok8k.gguf) or
// synthetic_vocab(N) (default 129280, the V4 size). Reports MB/s of encode() on the first run
// (cold piece cache) and the best of R warm runs, the pre-tokenizer alone (the split the
// vocabulary selects), plus decode MB/s; checks the round trip.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "core/timer.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  std::string gguf_path, file_path;
  int n_vocab = 129280, reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--gguf") && i + 1 < argc) gguf_path = argv[++i];
    else if (!std::strcmp(argv[i], "--vocab") && i + 1 < argc) n_vocab = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
    else if (argv[i][0] != '-') file_path = argv[i];
    else {
      std::fprintf(stderr, "usage: ds4-tokenizer-bench [--gguf TOK.gguf | --vocab N] [--reps R] FILE\n");
      return 2;
    }
  }
  if (file_path.empty()) {
    std::fprintf(stderr, "usage: ds4-tokenizer-bench [--gguf TOK.gguf | --vocab N] [--reps R] FILE\n");
    return 2;
  }
  std::ifstream f(file_path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "error: cannot read '%s'\n", file_path.c_str());
    return 1;
  }
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());

  ds4::Timer load_timer;
  ds4::Expected<ds4::tok::Tokenizer> tok = ds4::internal_error("unset");
  std::string vocab_name;
  if (!gguf_path.empty()) {
    auto file = ds4::gguf::File::open(gguf_path);
    if (!file.ok()) {
      std::fprintf(stderr, "error: %s\n", file.status().to_string().c_str());
      return 1;
    }
    tok = ds4::tok::Tokenizer::from_gguf(**file);
    vocab_name = gguf_path;
  } else {
    auto v = ds4::tok::synthetic_vocab(n_vocab);
    if (!v.ok()) {
      std::fprintf(stderr, "error: %s\n", v.status().to_string().c_str());
      return 1;
    }
    tok = ds4::tok::Tokenizer::create(std::move(v).value());
    vocab_name = "synthetic_vocab(" + std::to_string(n_vocab) + ")";
  }
  if (!tok.ok()) {
    std::fprintf(stderr, "error: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  const double load_s = load_timer.seconds();
  const double mb = double(text.size()) / 1e6;

  ds4::Timer t;
  std::vector<int32_t> ids = tok->encode(text);
  const double cold_s = t.seconds();
  double best_s = 1e30;
  for (int r = 0; r < reps; ++r) {
    t.reset();
    std::vector<int32_t> again = tok->encode(text);
    best_s = std::min(best_s, t.seconds());
    if (again != ids) {
      std::fprintf(stderr, "error: encode is not deterministic\n");
      return 1;
    }
  }
  // Pre-tokenizer alone (the split the vocabulary selected), best of R.
  double pre_s = 1e30;
  size_t n_pieces = 0;
  std::vector<std::pair<uint32_t, uint32_t>> pieces;
  for (int r = 0; r < reps; ++r) {
    t.reset();
    ds4::tok::pretokenize(text, &pieces, tok->pretok_mode());
    pre_s = std::min(pre_s, t.seconds());
    n_pieces = pieces.size();
  }
  t.reset();
  const std::string back = tok->decode(ids);
  const double dec_s = t.seconds();
  const bool round_trip = back == text;

  std::printf("vocab: %s (%d tokens, %d merges), load %.3f s\n", vocab_name.c_str(),
              tok->n_vocab(), tok->n_merges(), load_s);
  std::printf("input: %s, %.3f MB -> %zu tokens (%.2f bytes/token)\n", file_path.c_str(), mb,
              ids.size(), double(text.size()) / double(std::max<size_t>(1, ids.size())));
  std::printf("pre-tokenizer (%s): %.1f MB/s, %zu pieces\n",
              tok->pretok_mode() == ds4::tok::PretokMode::kDeepSeekV4 ? "DeepSeek V4 exact"
                                                                      : "ds4 scanner",
              mb / pre_s, n_pieces);
  std::printf("encode cold (empty piece cache): %.1f MB/s\n", mb / cold_s);
  std::printf("encode warm (best of %d):        %.1f MB/s\n", reps, mb / best_s);
  std::printf("decode:                          %.1f MB/s\n", mb / dec_s);
  std::printf("round trip: %s\n", round_trip ? "ok" : "MISMATCH");
  return round_trip ? 0 : 1;
}
