// tools/tokenizer_bench/tok_pieces.cpp — dumps the DS4 pre-tokenizer pieces of a file, or
// the token ids of a file under a GGUF vocabulary, for cross-checks against the Python mirror
// (tools/tokenizer/ds4_pretok.py) and the Python trainer.
//
//   ds4-tok-pieces pieces FILE        one line per piece: "<begin> <end>" byte offsets
//   ds4-tok-pieces encode GGUF FILE   one line of space-separated ids (plain encode)
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {
bool read_file(const char* path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "pieces" && argc == 3) {
    std::string text;
    if (!read_file(argv[2], &text)) {
      std::fprintf(stderr, "error: cannot read '%s'\n", argv[2]);
      return 1;
    }
    std::vector<std::pair<uint32_t, uint32_t>> pieces;
    ds4::tok::pretokenize(text, &pieces);
    std::string out;
    for (auto [b, e] : pieces) out += std::to_string(b) + " " + std::to_string(e) + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  if (cmd == "encode" && argc == 4) {
    auto file = ds4::gguf::File::open(argv[2]);
    if (!file.ok()) {
      std::fprintf(stderr, "error: %s\n", file.status().to_string().c_str());
      return 1;
    }
    auto tok = ds4::tok::Tokenizer::from_gguf(**file);
    if (!tok.ok()) {
      std::fprintf(stderr, "error: %s\n", tok.status().to_string().c_str());
      return 1;
    }
    std::string text;
    if (!read_file(argv[3], &text)) {
      std::fprintf(stderr, "error: cannot read '%s'\n", argv[3]);
      return 1;
    }
    std::string out;
    for (int32_t id : tok->encode(text)) {
      if (!out.empty()) out += ' ';
      out += std::to_string(id);
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  std::fprintf(stderr,
               "usage: ds4-tok-pieces pieces FILE\n"
               "       ds4-tok-pieces encode TOKENIZER.gguf FILE\n");
  return 2;
}
